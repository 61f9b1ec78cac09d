//! The node's TPM as the `tpm` key handler reaches it ([`super::encryption::Tpm`]): the
//! kernel's resource manager (`/dev/tpmrm0`), opened for each call, and the firmware's
//! variables for the Secure Boot state and for whether a UKI stub measured this boot.

use std::path::Path;

use zeroize::Zeroizing;

use super::luks2::token::TpmToken;
use super::tpm;

/// The EFI global variable namespace (`SecureBoot`).
const EFI_GLOBAL: &str = "8be4df61-93ca-11d2-aa0d-e98c0f6d2c6a";
/// systemd's loader namespace: its stub sets `StubPcrKernelImage` when it measured the UKI.
const SYSTEMD_LOADER: &str = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f";

/// `/dev/tpmrm0` and the EFI variables of this machine.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeTpm;

/// Reads EFI variable `name-guid`, mounting efivarfs first if it is not; `None` when the
/// variable (or EFI) is absent. The first four bytes (attributes) are dropped.
fn efi_var(name: &str, guid: &str) -> Option<Vec<u8>> {
    let loaded = crate::kernel::modules::Loader::shared().and_then(|l| l.load("efivarfs"));
    if let Err(e) = loaded {
        tracing::debug!("efivarfs: {e}");
    }
    match crate::kernel::mount::ensure_efivars() {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => {
            tracing::warn!("efivarfs: {e}");
            return None;
        }
    }
    let path = Path::new(crate::kernel::mount::EFIVARS).join(format!("{name}-{guid}"));
    let data = std::fs::read(path).ok()?;
    data.get(4..).map(<[u8]>::to_vec)
}

fn pcr_list(token: &TpmToken) -> Result<Vec<u8>, String> {
    token
        .pcrs
        .iter()
        .map(|&p| u8::try_from(p).ok().filter(|p| *p < 24).ok_or_else(|| format!("the token names PCR {p}")))
        .collect()
}

/// Seals `secret` on `dev` to `pcrs` as a `talos-tpm2` token's content.
pub fn seal_token(dev: &mut tpm::Device, secret: &[u8], pcrs: &[u8]) -> Result<TpmToken, String> {
    let sealed = dev.seal(secret, pcrs).map_err(|e| e.to_string())?;
    Ok(TpmToken {
        key_slots: Vec::new(),
        sealed_blob_private: sealed.private,
        sealed_blob_public: sealed.public,
        pcrs: sealed.pcrs.iter().map(|&p| i64::from(p)).collect(),
        pubkey_pcrs: Vec::new(),
        alg: "sha256".into(),
        encryption_version: String::new(),
        policy_hash: sealed.policy_hash,
        key_name: sealed.key_name,
    })
}

/// Unseals on `dev` what a `talos-tpm2` token holds.
pub fn unseal_token(dev: &mut tpm::Device, token: &TpmToken) -> Result<Zeroizing<Vec<u8>>, String> {
    if token.alg != "sha256" {
        return Err(format!("the token's PCR bank is {:?}; only sha256 is read", token.alg));
    }
    let sealed = tpm::Sealed {
        public: token.sealed_blob_public.clone(),
        private: token.sealed_blob_private.clone(),
        pcrs: pcr_list(token)?,
        policy_hash: token.policy_hash.clone(),
        key_name: token.key_name.clone(),
    };
    dev.unseal(&sealed).map_err(|e| e.to_string())
}

/// How long a tpm key waits for the TPM's driver to make `/dev/tpmrm0` early in a boot.
const DEVICE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens `/dev/tpmrm0`. STATE is opened early in a boot, perhaps before the TPM's driver has
/// bound: when the device is not there yet, the drivers (CRB, TIS) are loaded and the device
/// waited for a little, before the TPM is called absent.
fn open_device() -> Result<tpm::Device, String> {
    if let Ok(dev) = tpm::Device::open() {
        return Ok(dev);
    }
    if let Ok(loader) = crate::kernel::modules::Loader::shared() {
        for module in ["tpm_crb", "tpm_tis"] {
            if let Err(e) = loader.load(module) {
                tracing::debug!("{module}: {e}");
            }
        }
    }
    let deadline = std::time::Instant::now() + DEVICE_WAIT;
    while !Path::new(tpm::DEVICE).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    tpm::Device::open().map_err(|e| e.to_string())
}

impl super::encryption::Tpm for NodeTpm {
    fn seal(&self, secret: &[u8], pcrs: &[u8]) -> Result<TpmToken, String> {
        seal_token(&mut open_device()?, secret, pcrs)
    }

    fn unseal(&self, token: &TpmToken) -> Result<Zeroizing<Vec<u8>>, String> {
        unseal_token(&mut open_device()?, token)
    }

    fn secure_boot(&self) -> Result<bool, String> {
        Ok(efi_var("SecureBoot", EFI_GLOBAL).is_some_and(|v| v.first() == Some(&1)))
    }

    fn uki_measured(&self) -> bool {
        efi_var("StubPcrKernelImage", SYSTEMD_LOADER).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_naming_a_pcr_out_of_range_is_refused() {
        let mut t = TpmToken {
            key_slots: vec![],
            sealed_blob_private: vec![],
            sealed_blob_public: vec![],
            pcrs: vec![7, 11],
            pubkey_pcrs: vec![],
            alg: "sha256".into(),
            encryption_version: String::new(),
            policy_hash: vec![],
            key_name: vec![],
        };
        assert_eq!(pcr_list(&t).unwrap(), vec![7, 11]);
        t.pcrs = vec![7, 24];
        assert_eq!(pcr_list(&t).unwrap_err(), "the token names PCR 24");
        t.pcrs = vec![-1];
        assert_eq!(pcr_list(&t).unwrap_err(), "the token names PCR -1");
    }
}

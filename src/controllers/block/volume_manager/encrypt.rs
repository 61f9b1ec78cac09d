//! The encryption layer (Talos's `internal/volumes/encrypt.go`, its `HandleEncryption` for
//! LUKS2): a volume its config encrypts is encrypted when blank, opened when it holds LUKS2
//! (anything else is refused), as the dm-crypt mapping `luks2-<id>`, which is what the volume
//! is formatted and mounted as. A volume its config does not encrypt is used as it is, unless
//! it holds LUKS (the config says nothing of how to open it).
//!
//! The keys are the configured ones, opened through the KMS and TPM the controller was handed
//! ([`crate::block::encryption::KeyEnv`]); nothing here reaches either on its own. A volume
//! that asks for encryption is never made in the clear.

use std::path::Path;
use std::sync::Arc;

use super::step::advance;
use super::{StepError, VolumeManagerController, lock_disk, probe_name};
use crate::block::encryption::{self, KeyEnv, Kms, Tpm, Unlocked};
use crate::block::luks2::{self, DmCryptOptions};
use crate::cosi::Context;
use crate::kernel::dm;
use crate::resources::block::{EncryptionProvider, EncryptionSpec, VolumeConfig, VolumePhase, VolumeStatus};
use crate::resources::secrets::EncryptionSalt;

/// Where the kernel gives the machine's SMBIOS UUID (QEMU's `-uuid`).
const PRODUCT_UUID: &str = "/sys/class/dmi/id/product_uuid";

/// The volume whose content the salt of `lockToState` keys is kept on.
const STATE: &str = super::super::volume_config::STATE;

/// A plain volume's check of what the probe found on it (`found`): LUKS is refused, as the
/// config says nothing of how to open it. STATE waits a moment instead of failing: how it
/// is encrypted comes from META, read just after META is found.
fn plain_check(id: &str, found: &str) -> Result<(), StepError> {
    if found != "luks" {
        return Ok(());
    }
    let message = "volume is encrypted, but no encryption config provided".to_string();
    Err(StepError { again: id == STATE, message })
}

/// Whether volume `id` may be opened now as far as `lockToState` goes: STATE cannot be
/// locked to the salt it keeps, and a volume that is waits for the salt (`salt`: it is
/// there) to be read from STATE.
fn lock_to_state_check(id: &str, spec: &EncryptionSpec, salt: bool) -> Result<(), StepError> {
    if !spec.keys.iter().any(|k| k.lock_to_state) {
        return Ok(());
    }
    if id == STATE {
        return Err(StepError::failed("lockToState: STATE cannot be locked to the salt it keeps"));
    }
    if !salt {
        // The salt comes once STATE is mounted; its resource wakes this controller.
        return Err(StepError::again("waiting for the encryption salt on STATE (a key is lockToState)"));
    }
    Ok(())
}

/// How a volume was opened, as the console says it.
fn opened_how(formatted: bool, slot: Option<u32>) -> String {
    match (formatted, slot) {
        (true, Some(slot)) => format!("encrypted with key slot {slot}"),
        (false, Some(slot)) => format!("opened with key slot {slot}"),
        (_, None) => "already open".to_string(),
    }
}

/// The dm-crypt flags of Talos's `perfOptions` and `allowDiscards`.
fn dm_options(spec: &EncryptionSpec) -> Result<DmCryptOptions, String> {
    let mut o = DmCryptOptions { allow_discards: spec.allow_discards, ..DmCryptOptions::default() };
    for opt in &spec.perf_options {
        match opt.as_str() {
            "same_cpu_crypt" => o.same_cpu_crypt = true,
            "no_read_workqueue" => o.no_read_workqueue = true,
            "no_write_workqueue" => o.no_write_workqueue = true,
            other => {
                return Err(format!(
                    "encryption.options: {other:?} is not a dm-crypt performance option (same_cpu_crypt, no_read_workqueue, no_write_workqueue)"
                ));
            }
        }
    }
    Ok(o)
}

impl VolumeManagerController {
    /// A volume its config does not encrypt: used as it is (see [`plain_check`]).
    pub(super) async fn prepare_plain(
        &mut self,
        ctx: &Context,
        id: &str,
        status: &VolumeStatus,
    ) -> Result<VolumeStatus, StepError> {
        let at = std::path::PathBuf::from(&status.location);
        if at.exists() {
            let probe_at = at.clone();
            let found = ctx
                .blocking("probing a volume", move || probe_name(&probe_at))
                .await?
                .map_err(|e| StepError::failed(format!("probing {}: {e}", at.display())))?;
            plain_check(id, &found.name)?;
        }
        Ok(VolumeStatus {
            mount_location: status.location.clone(),
            encryption_provider: EncryptionProvider::None,
            encryption_failed_syncs: Vec::new(),
            ..advance(status, VolumePhase::Prepared)
        })
    }

    /// Encrypts or opens the volume as `luks2-<id>`; the opened device is what the volume is
    /// formatted and mounted as.
    pub(super) async fn prepare_encrypted(
        &mut self,
        ctx: &Context,
        id: &str,
        config: &VolumeConfig,
        status: &VolumeStatus,
    ) -> Result<VolumeStatus, StepError> {
        let (location, volume_id, spec) = (status.location.clone(), id.to_string(), config.encryption.clone());
        let salt = ctx
            .get::<EncryptionSalt>(crate::resources::secrets::NAMESPACE, EncryptionSalt::ID)?
            .map(|r| zeroize::Zeroizing::new(r.spec().disk_salt.clone()));
        lock_to_state_check(id, &spec, salt.is_some())?;
        let given = self.unlocks.take(id);
        let passphrase = given.as_ref().map(|g| g.passphrase.clone());
        let disk = if status.parent_location.is_empty() { location.clone() } else { status.parent_location.clone() };
        let (kms, tpm) = (Arc::clone(&self.kms), Arc::clone(&self.tpm));
        let opened = ctx
            .blocking("opening an encrypted volume", move || {
                let _locked = lock_disk(Path::new(&disk))?;
                let keys = Keys { kms: kms.as_ref(), tpm: tpm.as_ref() };
                let salt = salt.as_deref().map(|s| s.as_slice());
                open_encrypted(&location, &volume_id, &spec, salt, passphrase.as_ref(), keys)
            })
            .await?;
        if let Some(given) = given {
            let _ = given.reply.send(match &opened {
                Ok(o) => Ok(o.slot.unwrap_or_default()),
                Err(e) => Err(e.clone()),
            });
        }
        let opened = opened.map_err(|e| StepError::failed(format!("encryption: {e}")))?;
        let how = opened_how(opened.formatted, opened.slot);
        crate::kernel::console::line(&format!("volume {id}: {} {how} as {}", status.location, opened.mount_location));
        for failure in &opened.failed_syncs {
            crate::kernel::console::line(&format!("volume {id}: key sync: {failure}"));
        }
        if opened.formatted {
            self.refresh += 1;
        }
        Ok(VolumeStatus {
            mount_location: opened.mount_location,
            encryption_provider: EncryptionProvider::Luks2,
            encryption_failed_syncs: opened.failed_syncs,
            ..advance(status, VolumePhase::Prepared)
        })
    }
}

/// The KMS and TPM the key handlers seal and unseal with.
#[derive(Clone, Copy)]
struct Keys<'a> {
    kms: &'a dyn Kms,
    tpm: &'a dyn Tpm,
}

/// An encrypted volume opened: the mapped device, the slot that opened it (`None` when the
/// mapping was open already), whether it was formatted now, and the slots that did not sync.
struct Opened {
    mount_location: String,
    slot: Option<u32>,
    formatted: bool,
    failed_syncs: Vec<String>,
}

/// Unlocks the volume on `dev` by what the probe found there (`found`): a blank one is
/// formatted with the configured keys (true: it was), a LUKS2 one opened with them; anything
/// else is refused. The volume key comes back; nothing is mapped here.
fn unlock<D: luks2::Device>(
    dev: &mut D,
    found: &str,
    spec: &EncryptionSpec,
    env: &KeyEnv<'_>,
    kdf: &mut dyn FnMut() -> Result<luks2::Kdf, String>,
) -> Result<(Unlocked, bool), String> {
    match found {
        "" => Ok((encryption::format(dev, spec, env, kdf)?, true)),
        "luks" => Ok((encryption::open(dev, spec, env, kdf)?, false)),
        other => Err(format!("block dev type mismatch: {other} != luks")),
    }
}

/// Opens (or first encrypts) the volume at `location` as `luks2-<volume_id>` in dm-crypt.
fn open_encrypted(
    location: &str,
    volume_id: &str,
    spec: &EncryptionSpec,
    salt: Option<&[u8]>,
    given: Option<&zeroize::Zeroizing<Vec<u8>>>,
    keys: Keys<'_>,
) -> Result<Opened, String> {
    use std::io::{Seek, SeekFrom};

    let dm_opts = dm_options(spec)?;
    // dm-crypt, and what its one cipher is built from without AES-NI (the xts template over
    // ecb(aes)): the kernel would ask for them itself from inside the table load, where any
    // failure comes back as ENOENT alone.
    for module in ["dm-crypt", "xts", "ecb"] {
        crate::kernel::modules::Loader::shared()
            .and_then(|l| l.load(module))
            .map_err(|e| format!("loading {module}: {e}"))?;
    }
    let name = luks2::mapping_name(volume_id);
    if let Some(m) = dm::find(&name).map_err(|e| e.to_string())? {
        return Ok(Opened {
            mount_location: m.dev_path().display().to_string(),
            slot: None,
            formatted: false,
            failed_syncs: Vec::new(),
        });
    }
    let found = probe_name(Path::new(location))?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(location)
        .map_err(|e| format!("opening {location}: {e}"))?;
    let uuid = std::fs::read_to_string(PRODUCT_UUID).ok().map(|u| u.trim().to_ascii_lowercase());
    let env = KeyEnv {
        volume_id,
        machine_uuid: uuid.as_deref(),
        salt,
        kms: Some(keys.kms),
        tpm: Some(keys.tpm),
        given: given.map(|g| g.as_slice()),
    };
    let key_len = if spec.key_size == 0 { 64 } else { spec.key_size as usize / 8 };
    let mut timed: Option<luks2::Kdf> = None;
    let mut kdf = || -> Result<luks2::Kdf, String> {
        if let Some(k) = timed {
            return Ok(k);
        }
        let k = encryption::host_kdf(luks2::TALOS_ITER_TIME, key_len)?;
        timed = Some(k);
        Ok(k)
    };
    let (unlocked, formatted) = unlock(&mut file, &found.name, spec, &env, &mut kdf)?;
    let stat = rustix::fs::fstat(&file).map_err(|e| format!("stat {location}: {e}"))?;
    let devno = format!("{}:{}", rustix::fs::major(stat.st_rdev), rustix::fs::minor(stat.st_rdev));
    let sectors = file.seek(SeekFrom::End(0)).map_err(|e| format!("sizing {location}: {e}"))? / 512;
    let target = luks2::dm_crypt_target(&unlocked.header, &unlocked.key, &devno, sectors, &dm_opts)
        .map_err(|e| e.to_string())?;
    let dm_uuid = format!("CRYPT-LUKS2-{}-{name}", unlocked.header.uuid.replace('-', ""));
    let table = [dm::Target { start: target.start, length: target.length, kind: "crypt", params: &target.params }];
    let mapping = dm::create(&name, &dm_uuid, &table, false).map_err(|e| e.to_string())?;
    Ok(Opened {
        mount_location: mapping.dev_path().display().to_string(),
        slot: Some(unlocked.slot),
        formatted,
        failed_syncs: unlocked.failed_syncs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::luks2::token::TpmToken;
    use crate::resources::block::{EncryptionKey, EncryptionKeyType};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use zeroize::Zeroizing;

    const UUID: &str = "5e0c7b3a-2d1f-4e6a-8b9c-0a1b2c3d4e5f";

    fn key(slot: u32, kind: EncryptionKeyType) -> EncryptionKey {
        EncryptionKey { slot, kind, ..EncryptionKey::default() }
    }

    #[test]
    fn a_plain_volume_holding_luks_is_refused_and_state_waits() {
        let refused = "volume is encrypted, but no encryption config provided";
        let cases = [
            ("a blank volume", "EPHEMERAL", "", Ok(())),
            ("a filesystem", "EPHEMERAL", "xfs", Ok(())),
            ("LUKS with no config", "u-data", "luks", Err(StepError::failed(refused))),
            ("STATE waits for META's word", STATE, "luks", Err(StepError::again(refused))),
        ];
        for (name, id, found, want) in cases {
            assert_eq!(plain_check(id, found), want, "{name}");
        }
    }

    #[test]
    fn lock_to_state_needs_the_salt_and_never_locks_state() {
        let plain = EncryptionSpec { keys: vec![key(0, EncryptionKeyType::NodeId)], ..Default::default() };
        let locked = EncryptionSpec {
            keys: vec![EncryptionKey { lock_to_state: true, ..key(0, EncryptionKeyType::NodeId) }],
            ..Default::default()
        };
        let cases = [
            ("no key is locked", "EPHEMERAL", &plain, false, Ok(())),
            ("STATE unlocked", STATE, &plain, false, Ok(())),
            ("the salt is there", "EPHEMERAL", &locked, true, Ok(())),
            (
                "waiting for the salt",
                "EPHEMERAL",
                &locked,
                false,
                Err(StepError::again("waiting for the encryption salt on STATE (a key is lockToState)")),
            ),
            (
                "STATE locked to itself",
                STATE,
                &locked,
                true,
                Err(StepError::failed("lockToState: STATE cannot be locked to the salt it keeps")),
            ),
        ];
        for (name, id, spec, salt, want) in cases {
            assert_eq!(lock_to_state_check(id, spec, salt), want, "{name}");
        }
    }

    #[test]
    fn the_console_says_how_a_volume_was_opened() {
        let cases = [
            (true, Some(0), "encrypted with key slot 0"),
            (false, Some(2), "opened with key slot 2"),
            (false, None, "already open"),
            (true, None, "already open"),
        ];
        for (formatted, slot, want) in cases {
            assert_eq!(opened_how(formatted, slot), want, "{formatted} {slot:?}");
        }
    }

    #[test]
    fn perf_options_become_dm_crypt_flags() {
        let spec = |discards, opts: &[&str]| EncryptionSpec {
            allow_discards: discards,
            perf_options: opts.iter().map(|o| o.to_string()).collect(),
            ..EncryptionSpec::default()
        };
        let flags = |d, s, r, w| DmCryptOptions {
            allow_discards: d,
            same_cpu_crypt: s,
            no_read_workqueue: r,
            no_write_workqueue: w,
        };
        let cases = [
            ("none", spec(false, &[]), Ok(flags(false, false, false, false))),
            ("discards", spec(true, &[]), Ok(flags(true, false, false, false))),
            (
                "all three",
                spec(false, &["same_cpu_crypt", "no_read_workqueue", "no_write_workqueue"]),
                Ok(flags(false, true, true, true)),
            ),
            (
                "an unknown one",
                spec(false, &["no_read_workqueue", "fast"]),
                Err("encryption.options: \"fast\" is not a dm-crypt performance option (same_cpu_crypt, no_read_workqueue, no_write_workqueue)".to_string()),
            ),
        ];
        for (name, s, want) in cases {
            assert_eq!(dm_options(&s), want, "{name}");
        }
    }

    /// A KMS that "seals" by XOR behind a tag, counting its calls.
    #[derive(Default)]
    struct FakeKms {
        calls: AtomicUsize,
    }

    impl Kms for FakeKms {
        fn seal(&self, endpoint: &str, node_uuid: &str, data: &[u8]) -> Result<Vec<u8>, String> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            assert_eq!((endpoint, node_uuid), ("grpc://kms:4050", UUID));
            Ok([b"S".as_slice(), &data.iter().map(|b| b ^ 0x5a).collect::<Vec<_>>()].concat())
        }
        fn unseal(&self, _: &str, _: &str, data: &[u8]) -> Result<Vec<u8>, String> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(data.strip_prefix(b"S").ok_or("not sealed here")?.iter().map(|b| b ^ 0x5a).collect())
        }
    }

    /// A node without a TPM.
    struct NoTpm;

    impl Tpm for NoTpm {
        fn seal(&self, _: &[u8], _: &[u8]) -> Result<TpmToken, String> {
            Err("no TPM here".into())
        }
        fn unseal(&self, _: &TpmToken) -> Result<Zeroizing<Vec<u8>>, String> {
            Err("no TPM here".into())
        }
        fn secure_boot(&self) -> Result<bool, String> {
            Ok(false)
        }
        fn uki_measured(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_blank_volume_is_encrypted_with_the_kms_handed_in_and_opened_again() {
        let (kms, tpm) = (FakeKms::default(), NoTpm);
        let env = KeyEnv {
            volume_id: "u-data",
            machine_uuid: Some(UUID),
            kms: Some(&kms),
            tpm: Some(&tpm),
            ..KeyEnv::default()
        };
        let spec = EncryptionSpec {
            provider: EncryptionProvider::Luks2,
            keys: vec![EncryptionKey { kms_endpoint: "grpc://kms:4050".into(), ..key(0, EncryptionKeyType::Kms) }],
            ..EncryptionSpec::default()
        };
        let mut fast = || Ok(luks2::Kdf::Pbkdf2 { hash: luks2::Hash::Sha256, iterations: 1000 });
        let mut dev = std::io::Cursor::new(vec![0u8; 20 << 20]);

        let (made, formatted) = unlock(&mut dev, "", &spec, &env, &mut fast).unwrap();
        assert!(formatted, "a blank volume is encrypted");
        assert_eq!(made.slot, 0);
        assert_eq!(kms.calls.load(Ordering::SeqCst), 1, "the passphrase is sealed by the KMS handed in");

        let (opened, formatted) = unlock(&mut dev, "luks", &spec, &env, &mut fast).unwrap();
        assert!(!formatted, "a LUKS2 volume is opened, not made again");
        assert_eq!((opened.slot, opened.key.as_bytes()), (0, made.key.as_bytes()));
        assert_eq!(kms.calls.load(Ordering::SeqCst), 2, "and unsealed by it");

        let refused = unlock(&mut dev, "xfs", &spec, &env, &mut fast).map(|_| ()).unwrap_err();
        assert_eq!(refused, "block dev type mismatch: xfs != luks");
        assert_eq!(kms.calls.load(Ordering::SeqCst), 2, "nothing is asked of a volume refused");
    }
}

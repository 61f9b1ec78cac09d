//! A volume's LUKS2 layer as Talos handles it (`internal/pkg/encryption`), over a device or
//! image file: the configured keys are taken in slot order; a blank device is formatted with
//! the first key that yields a passphrase; a LUKS2 device is unlocked by the first slot that
//! opens; then the keyslots are converged toward the configuration (Talos's `syncKeys`): a
//! missing slot is added, a slot its key no longer opens is replaced, a slot the config does
//! not name is removed. A slot that fails there is reported, never fatal: the volume opens by
//! the slot that worked. Loading the opened key into dm-crypt is the caller's.
//!
//! Key handlers: `static` (the passphrase), `nodeID` (the machine UUID and the volume id, with
//! Talos's entropy check), `kms` (a random passphrase sealed by a KMS server, Talos's
//! `sidero.kms.KMSService`, kept sealed in a `sideroKMS` token beside its slot), and any of
//! them wrapped by `lockToState` (the node's STATE-held salt appended). `tpm` seals a random
//! passphrase through a [`Tpm`] to the current values of its PCRs (7, and 11 when a UKI stub
//! measured the boot) and keeps the sealed object in a `talos-tpm2` token; a token sealed to
//! Talos's signed PCR policy is refused by name. On the node the [`Tpm`] is
//! [`super::tpm_key::NodeTpm`] (`/dev/tpmrm0`); a node without one gets a clear error per tpm
//! key, and its other slots still open. A key whose handler fails (a KMS that does
//! not answer, a TPM whose PCRs moved, a node with no TPM) never loses its slot: the slot is
//! replaced only when its key is known and no longer opens it, and the open goes on to the
//! next slot (a recovery passphrase).
//!
//! Beyond Talos, `recovery` keys: a passphrase slot opened with the passphrase the config
//! gives or, when it gives none (STATE's keys as META keeps them), with one handed to the node
//! through `talosctl unlock` ([`KeyEnv::given`]). A recovery slot whose passphrase is not known
//! is kept as it is. When no configured slot opens, a given passphrase is tried in every slot,
//! and the slot it opens is never removed by the sync.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use zeroize::Zeroizing;

use super::luks2::token::{KmsToken, TOKEN_TYPE_KMS, TOKEN_TYPE_TPM, TpmToken};
use super::luks2::{self, FormatOptions, Header, Kdf, Luks2Error, Token, VolumeKey};
use super::types::{EncryptionKey, EncryptionKeyType, EncryptionSpec};

/// A KMS server as the `kms` key handler reaches it: Talos's `Seal` and `Unseal` calls, for
/// the node `node_uuid`, at `endpoint` (the key's `kms.endpoint`).
pub trait Kms: Send + Sync {
    fn seal(&self, endpoint: &str, node_uuid: &str, data: &[u8]) -> Result<Vec<u8>, String>;
    fn unseal(&self, endpoint: &str, node_uuid: &str, data: &[u8]) -> Result<Vec<u8>, String>;
}

/// The length of the passphrase a `kms` key seals (kms-client's `PassphraseSize`).
pub const KMS_PASSPHRASE_LEN: usize = 32;

/// The node's TPM as the `tpm` key handler uses it.
pub trait Tpm: Send + Sync {
    /// Seals `secret` to the current values of `pcrs` (SHA-256 bank).
    fn seal(&self, secret: &[u8], pcrs: &[u8]) -> Result<TpmToken, String>;
    /// The secret of a sealed object, when the PCRs hold the values it was sealed to.
    fn unseal(&self, token: &TpmToken) -> Result<Zeroizing<Vec<u8>>, String>;
    /// Whether the firmware booted with Secure Boot on (`checkSecurebootStatusOnEnroll`).
    fn secure_boot(&self) -> Result<bool, String>;
    /// Whether a UKI stub measured the boot into PCR 11: keys then bind that PCR too.
    fn uki_measured(&self) -> bool;
}

/// Why a `tpm` key gives nothing where [`KeyEnv::tpm`] is unset (key handling off a node).
pub const NO_TPM_CLIENT: &str = "no TPM was given to the key handlers here";

/// The length of the passphrase a `tpm` key seals.
pub const TPM_PASSPHRASE_LEN: usize = 32;

/// What the key handlers draw on.
#[derive(Clone, Copy, Default)]
pub struct KeyEnv<'a> {
    /// The volume's id (`EPHEMERAL`, `u-data`): the nodeID key mixes it in.
    pub volume_id: &'a str,
    /// The machine's SMBIOS UUID, as `/sys/class/dmi/id/product_uuid` gives it.
    pub machine_uuid: Option<&'a str>,
    /// The node's encryption salt (Talos's `EncryptionSalt`), for `lockToState` keys.
    pub salt: Option<&'a [u8]>,
    /// The KMS client of `kms` keys.
    pub kms: Option<&'a dyn Kms>,
    /// The TPM of `tpm` keys.
    pub tpm: Option<&'a dyn Tpm>,
    /// A passphrase handed over by `talosctl unlock` for this volume.
    pub given: Option<&'a [u8]>,
}

impl std::fmt::Debug for KeyEnv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyEnv")
            .field("volume_id", &self.volume_id)
            .field("machine_uuid", &self.machine_uuid)
            .field("salt", &self.salt.map(|_| "<set>"))
            .field("kms", &self.kms.map(|_| "<client>"))
            .field("tpm", &self.tpm.map(|_| "<device>"))
            .field("given", &self.given.map(|_| "<passphrase>"))
            .finish()
    }
}

/// The name of a key's handler, as Talos's `EncryptionKeyType` prints it.
pub fn kind_name(kind: EncryptionKeyType) -> &'static str {
    match kind {
        EncryptionKeyType::Static => "static",
        EncryptionKeyType::NodeId => "nodeID",
        EncryptionKeyType::Kms => "kms",
        EncryptionKeyType::Tpm => "tpm",
        EncryptionKeyType::Recovery => "recovery",
    }
}

fn describe(key: &EncryptionKey) -> String {
    format!("slot {} ({})", key.slot, kind_name(key.kind))
}

type Passphrase = Zeroizing<Vec<u8>>;

/// Why a recovery key without a passphrase in its config gives none.
pub const RECOVERY_NOT_GIVEN: &str =
    "a recovery slot: its passphrase is not kept on the node (give it with `talosctl unlock`)";

/// A recovery key with no passphrase of its own and none given: its slot is kept untouched.
fn recovery_unknown(key: &EncryptionKey, env: &KeyEnv<'_>) -> bool {
    key.kind == EncryptionKeyType::Recovery && key.static_passphrase.is_empty() && env.given.is_none()
}

/// The passphrase of a key without a token of its own (static, nodeID), or why it has none.
pub fn passphrase(key: &EncryptionKey, env: &KeyEnv<'_>) -> Result<Passphrase, String> {
    let value = match key.kind {
        EncryptionKeyType::Static if key.static_passphrase.is_empty() => {
            return Err("static key must have key data defined".into());
        }
        EncryptionKeyType::Static => Zeroizing::new(key.static_passphrase.as_bytes().to_vec()),
        EncryptionKeyType::NodeId => node_id_passphrase(env.machine_uuid.unwrap_or(""), env.volume_id)?,
        EncryptionKeyType::Kms => return Err("a kms key's passphrase is sealed in its slot's token".into()),
        EncryptionKeyType::Tpm => return Err("a tpm key's passphrase is sealed in its slot's token".into()),
        EncryptionKeyType::Recovery if !key.static_passphrase.is_empty() => {
            Zeroizing::new(key.static_passphrase.as_bytes().to_vec())
        }
        EncryptionKeyType::Recovery => Zeroizing::new(env.given.ok_or(RECOVERY_NOT_GIVEN)?.to_vec()),
    };
    salted(key, env, value)
}

/// `lockToState`: the salt appended (Talos's `SaltedHandler`).
fn salted(key: &EncryptionKey, env: &KeyEnv<'_>, mut value: Passphrase) -> Result<Passphrase, String> {
    if key.lock_to_state {
        let salt = env.salt.ok_or("lockToState: the encryption salt on STATE is not available")?;
        value.extend_from_slice(salt);
    }
    Ok(value)
}

/// The passphrase of the existing slot of `key`, from the slot's token when its handler keeps
/// one (Talos's `GetKey`).
pub fn get_key(key: &EncryptionKey, env: &KeyEnv<'_>, token: Option<&Token>) -> Result<Passphrase, String> {
    match key.kind {
        EncryptionKeyType::Kms => {
            let (kms, uuid) = kms_env(key, env)?;
            let token = token.filter(|t| t.kind == TOKEN_TYPE_KMS).ok_or("the slot has no sideroKMS token")?;
            let sealed = token.talos_user_data::<KmsToken>().map_err(|e| format!("its token: {e}"))?;
            let plain = Zeroizing::new(kms.unseal(&key.kms_endpoint, uuid, &sealed.sealed_data)?);
            salted(key, env, Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(&*plain).into_bytes()))
        }
        EncryptionKeyType::Tpm => {
            let tpm = env.tpm.ok_or(NO_TPM_CLIENT)?;
            let token = token.filter(|t| t.kind == TOKEN_TYPE_TPM).ok_or("the slot has no talos-tpm2 token")?;
            let sealed = token.talos_user_data::<TpmToken>().map_err(|e| format!("its token: {e}"))?;
            if !sealed.pubkey_pcrs.is_empty() {
                return Err(format!(
                    "the key is sealed to a signed PCR policy (PCRs {:?}), which this node does not check",
                    sealed.pubkey_pcrs
                ));
            }
            let plain = tpm.unseal(&sealed)?;
            salted(key, env, Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(&*plain).into_bytes()))
        }
        _ => passphrase(key, env),
    }
}

/// The PCRs a new `tpm` slot binds: the key's (PCR 7 by default), and its signed-policy PCRs
/// (11) by value when a UKI stub measured this boot.
pub fn tpm_pcrs(key: &EncryptionKey, uki_measured: bool) -> Vec<u8> {
    let mut pcrs = key.tpm_pcrs.clone();
    if uki_measured {
        pcrs.extend_from_slice(&key.tpm_pub_key_pcrs);
    }
    pcrs.sort_unstable();
    pcrs.dedup();
    pcrs
}

/// `len` random bytes: the secret a KMS or the TPM seals for a new slot.
fn random_secret(len: usize) -> Result<Zeroizing<Vec<u8>>, String> {
    let mut plain = Zeroizing::new(vec![0u8; len]);
    getrandom::fill(&mut plain).map_err(|e| format!("making a passphrase: {e}"))?;
    Ok(plain)
}

/// A sealed slot's passphrase (the base64 of its secret, salted if the key says) and its
/// token, bound to its keyslot as cryptsetup's token commands expect.
fn sealed_slot(
    key: &EncryptionKey,
    env: &KeyEnv<'_>,
    plain: &[u8],
    mut token: Token,
) -> Result<(Passphrase, Option<Token>), String> {
    token.keyslots = vec![key.slot];
    let pass = salted(key, env, Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(plain).into_bytes()))?;
    Ok((pass, Some(token)))
}

/// A passphrase for a new slot of `key`, with the token to keep beside it (Talos's `NewKey`).
pub fn new_key(key: &EncryptionKey, env: &KeyEnv<'_>) -> Result<(Passphrase, Option<Token>), String> {
    match key.kind {
        EncryptionKeyType::Kms => {
            let (kms, uuid) = kms_env(key, env)?;
            let plain = random_secret(KMS_PASSPHRASE_LEN)?;
            let sealed = kms.seal(&key.kms_endpoint, uuid, &plain)?;
            let token = Token::talos(TOKEN_TYPE_KMS, &KmsToken { sealed_data: sealed }).map_err(|e| e.to_string())?;
            sealed_slot(key, env, &plain, token)
        }
        EncryptionKeyType::Tpm => {
            let tpm = env.tpm.ok_or(NO_TPM_CLIENT)?;
            if key.tpm_check_secureboot_status_on_enroll && !tpm.secure_boot()? {
                return Err("checkSecurebootStatusOnEnroll: Secure Boot is not enabled".into());
            }
            let plain = random_secret(TPM_PASSPHRASE_LEN)?;
            let sealed = tpm.seal(&plain, &tpm_pcrs(key, tpm.uki_measured()))?;
            let token = Token::talos(TOKEN_TYPE_TPM, &sealed).map_err(|e| e.to_string())?;
            sealed_slot(key, env, &plain, token)
        }
        _ => Ok((passphrase(key, env)?, None)),
    }
}

fn kms_env<'a>(key: &EncryptionKey, env: &KeyEnv<'a>) -> Result<(&'a dyn Kms, &'a str), String> {
    if key.kms_endpoint.is_empty() {
        return Err("kms.endpoint is not set".into());
    }
    let kms = env.kms.ok_or("no KMS client on this node")?;
    let uuid = env.machine_uuid.filter(|u| !u.is_empty()).ok_or("machine UUID is not populated")?;
    Ok((kms, uuid))
}

/// Talos's nodeID key: the machine UUID followed by the volume id. A UUID with one character
/// in more than half its places (all zeros, all `f`: firmware that sets none) is refused,
/// as Talos refuses it: the key would be the same on every such machine.
pub fn node_id_passphrase(uuid: &str, volume_id: &str) -> Result<Passphrase, String> {
    if uuid.is_empty() {
        return Err("machine UUID is not populated".into());
    }
    let mut counts = std::collections::HashMap::new();
    for c in uuid.chars() {
        let n = counts.entry(c).or_insert(0usize);
        *n += 1;
        if *n > uuid.chars().count() / 2 {
            return Err(format!("machine UUID {uuid} entropy check failed"));
        }
    }
    Ok(Zeroizing::new(format!("{uuid}{volume_id}").into_bytes()))
}

/// How a blank device is formatted: the spec's cipher, key size and sector size over
/// cryptsetup's defaults (what Talos gets), with `kdf` for the keyslots.
pub fn format_options(spec: &EncryptionSpec, kdf: Kdf, first_slot: u32) -> Result<FormatOptions, String> {
    let mut opts = FormatOptions { kdf, keyslot: first_slot, ..FormatOptions::default() };
    match spec.cipher.as_str() {
        "" => {}
        "aes-xts-plain64" => opts.cipher = spec.cipher.clone(),
        other => return Err(format!("encryption.cipher: {other:?} is not supported (aes-xts-plain64 only)")),
    }
    if spec.key_size != 0 {
        opts.key_size_bits = spec.key_size;
    }
    if spec.block_size != 0 {
        opts.sector_size = u32::try_from(spec.block_size)
            .map_err(|_| format!("encryption.blockSize: {} is too large", spec.block_size))?;
    }
    Ok(opts)
}

/// The KDF of new keyslots on this machine: cryptsetup's argon2id ceilings fitted to its
/// memory and CPUs, then timed to take `target` (Talos's 2 s).
pub fn host_kdf(target: Duration, key_len: usize) -> Result<Kdf, String> {
    let memory_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(1 << 20);
    let cpus = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
    Kdf::talos_default()
        .limit_to_host(memory_kib, cpus)
        .calibrate(target, key_len)
        .map_err(|e| format!("timing the key derivation: {e}"))
}

/// An unlocked LUKS2 device: its header as it now is, the volume key, the slot that opened it,
/// and what the key sync could not do.
#[derive(Debug)]
pub struct Unlocked {
    pub header: Header,
    pub key: VolumeKey,
    pub slot: u32,
    pub failed_syncs: Vec<String>,
}

/// The configured keys in slot order (Talos sorts its handlers by slot).
fn sorted(spec: &EncryptionSpec) -> Vec<&EncryptionKey> {
    let mut keys: Vec<&EncryptionKey> = spec.keys.iter().collect();
    keys.sort_by_key(|k| k.slot);
    keys
}

/// What each slot's key gave for its existing slot: each key is asked once, by the open and
/// the sync together (a KMS round trip is a second or more).
type Asked = BTreeMap<u32, Result<Passphrase, String>>;

fn ask(asked: &mut Asked, key: &EncryptionKey, env: &KeyEnv<'_>, header: &Header) -> Result<Passphrase, String> {
    asked.entry(key.slot).or_insert_with(|| get_key(key, env, header.metadata.tokens.get(&key.slot))).clone()
}

/// Formats the blank `dev` as LUKS2 with the first key that yields a passphrase, then adds the
/// others. `kdf` is asked once, when the first keyslot is written.
pub fn format<D: luks2::Device>(
    dev: &mut D,
    spec: &EncryptionSpec,
    env: &KeyEnv<'_>,
    kdf: &mut dyn FnMut() -> Result<Kdf, String>,
) -> Result<Unlocked, String> {
    let keys = sorted(spec);
    // Keys already refused here are not asked again by the sync.
    let mut refused: BTreeMap<u32, String> = BTreeMap::new();
    let mut first = None;
    for key in &keys {
        match new_key(key, env) {
            Ok(made) => {
                first = Some((*key, made));
                break;
            }
            Err(e) => {
                refused.insert(key.slot, format!("{}: {e}", describe(key)));
            }
        }
    }
    let Some((key, (pass, token))) = first else {
        let why: Vec<&str> = refused.values().map(String::as_str).collect();
        return Err(format!("no configured key gives a passphrase to format with: {}", why.join("; ")));
    };
    let kdf = kdf()?;
    let opts = format_options(spec, kdf, key.slot)?;
    let (mut header, volume_key) = luks2::format(dev, &opts, &pass).map_err(|e| format!("formatting LUKS2: {e}"))?;
    if let Some(token) = &token {
        header = luks2::set_token(dev, &header, key.slot, token)
            .map_err(|e| format!("writing the token of {}: {e}", describe(key)))?;
    }
    let mut unlocked = Unlocked { header, key: volume_key, slot: key.slot, failed_syncs: Vec::new() };
    sync_keys(dev, &mut unlocked, &keys, env, kdf, &mut Asked::new(), &refused);
    Ok(unlocked)
}

/// Unlocks the LUKS2 `dev` with the first configured slot that opens it, then converges its
/// keyslots toward the configuration.
pub fn open<D: luks2::Device>(
    dev: &mut D,
    spec: &EncryptionSpec,
    env: &KeyEnv<'_>,
    kdf: &mut dyn FnMut() -> Result<Kdf, String>,
) -> Result<Unlocked, String> {
    let header = Header::read(dev).map_err(|e| format!("reading the LUKS2 header: {e}"))?;
    let keys = sorted(spec);
    let mut asked = Asked::new();
    // Every slot tried, in slot order, for the error when none opens.
    let mut tried = Vec::new();
    for key in &keys {
        let pass = match ask(&mut asked, key, env, &header) {
            Ok(p) => p,
            Err(e) => {
                tried.push(format!("{}: {e}", describe(key)));
                continue;
            }
        };
        match header.unlock_slot(dev, key.slot, &pass) {
            Ok(volume_key) => {
                let mut unlocked = Unlocked { header, key: volume_key, slot: key.slot, failed_syncs: Vec::new() };
                match kdf() {
                    Ok(kdf) => sync_keys(dev, &mut unlocked, &keys, env, kdf, &mut asked, &BTreeMap::new()),
                    Err(e) => unlocked.failed_syncs.push(format!("syncing keys: {e}")),
                }
                return Ok(unlocked);
            }
            Err(e @ (Luks2Error::WrongPassphraseForSlot { .. } | Luks2Error::NoKeyslot(_))) => {
                tried.push(format!("{}: {e}", describe(key)));
            }
            Err(e) => return Err(format!("{}: {e}", describe(key))),
        }
    }
    if let Some(given) = env.given {
        // Not the recovery slots it was tried in already.
        let tried_in =
            |s: u32| keys.iter().any(|k| k.slot == s && recovery_unknown(k, &KeyEnv { given: None, ..*env }));
        let slots: Vec<u32> = header.metadata.keyslots.keys().copied().filter(|s| !tried_in(*s)).collect();
        for slot in slots {
            if let Ok(volume_key) = header.unlock_slot(dev, slot, given) {
                let mut unlocked = Unlocked { header, key: volume_key, slot, failed_syncs: Vec::new() };
                match kdf() {
                    Ok(kdf) => sync_keys(dev, &mut unlocked, &keys, env, kdf, &mut asked, &BTreeMap::new()),
                    Err(e) => unlocked.failed_syncs.push(format!("syncing keys: {e}")),
                }
                return Ok(unlocked);
            }
        }
        tried.push("the passphrase given opens no key slot".into());
    }
    Err(format!("no configured key opens the volume: {}", tried.join("; ")))
}

/// Talos's `syncKeys`: every configured slot other than the one that opened holds its key, and
/// no other slot is left. A slot whose key is known and no longer opens it is replaced (the new
/// key made first, so a handler that fails leaves the old slot); a key whose handler fails is
/// reported and its slot kept. Failures are recorded in `u.failed_syncs`, in slot order, and
/// the rest go on; `refused` are the keys the caller already asked in vain.
fn sync_keys<D: luks2::Device>(
    dev: &mut D,
    u: &mut Unlocked,
    keys: &[&EncryptionKey],
    env: &KeyEnv<'_>,
    kdf: Kdf,
    asked: &mut Asked,
    refused: &BTreeMap<u32, String>,
) {
    for key in keys {
        if key.slot == u.slot {
            continue;
        }
        if let Some(why) = refused.get(&key.slot) {
            u.failed_syncs.push(why.clone());
            continue;
        }
        let exists = u.header.metadata.keyslots.contains_key(&key.slot);
        if exists && recovery_unknown(key, env) {
            continue;
        }
        if exists {
            match ask(asked, key, env, &u.header) {
                Ok(pass) if u.header.unlock_slot(dev, key.slot, &pass).is_ok() => continue,
                Ok(_) => {}
                Err(e) => {
                    u.failed_syncs.push(format!("{}: {e}", describe(key)));
                    continue;
                }
            }
        }
        let (pass, token) = match new_key(key, env) {
            Ok(made) => made,
            Err(e) => {
                u.failed_syncs.push(format!("{}: {e}", describe(key)));
                continue;
            }
        };
        if exists {
            match luks2::remove_keyslot(dev, &u.header, key.slot) {
                Ok(h) => u.header = h,
                Err(e) => {
                    u.failed_syncs.push(format!("error updating key {}: {e}", describe(key)));
                    continue;
                }
            }
        }
        match luks2::add_keyslot(dev, &u.header, &u.key, &pass, &kdf, Some(key.slot)) {
            Ok((h, _)) => u.header = h,
            Err(e) => {
                u.failed_syncs.push(format!("error adding key {}: {e}", describe(key)));
                continue;
            }
        }
        // The slot's token: the new key's, or none (a key of another kind had the slot).
        let written = match (&token, u.header.metadata.tokens.contains_key(&key.slot)) {
            (Some(t), _) => luks2::set_token(dev, &u.header, key.slot, t).map(Some),
            (None, true) => luks2::remove_token(dev, &u.header, key.slot).map(Some),
            (None, false) => Ok(None),
        };
        match written {
            Ok(Some(h)) => u.header = h,
            Ok(None) => {}
            Err(e) => u.failed_syncs.push(format!("error writing the token of {}: {e}", describe(key))),
        }
    }
    // The slot that opened stays, configured or not (a given passphrase may open any).
    let stale: Vec<u32> = u
        .header
        .metadata
        .keyslots
        .keys()
        .copied()
        .filter(|s| *s != u.slot && !keys.iter().any(|k| k.slot == *s))
        .collect();
    for slot in stale {
        match luks2::remove_keyslot(dev, &u.header, slot) {
            Ok(h) => u.header = h,
            Err(e) => {
                u.failed_syncs.push(format!("error removing key slot {slot}: {e}"));
                continue;
            }
        }
        if u.header.metadata.tokens.contains_key(&slot) {
            match luks2::remove_token(dev, &u.header, slot) {
                Ok(h) => u.header = h,
                Err(e) => u.failed_syncs.push(format!("error removing the token of key slot {slot}: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    const UUID: &str = "5e0c7b3a-2d1f-4e6a-8b9c-0a1b2c3d4e5f";

    fn fast() -> Kdf {
        Kdf::Pbkdf2 { hash: luks2::Hash::Sha256, iterations: 1000 }
    }

    fn key(slot: u32, kind: EncryptionKeyType, pass: &str) -> EncryptionKey {
        EncryptionKey { slot, kind, static_passphrase: pass.into(), ..EncryptionKey::default() }
    }

    fn spec(keys: Vec<EncryptionKey>) -> EncryptionSpec {
        EncryptionSpec { keys, ..EncryptionSpec::default() }
    }

    fn env() -> KeyEnv<'static> {
        KeyEnv { volume_id: "u-data", machine_uuid: Some(UUID), salt: None, kms: None, tpm: None, given: None }
    }

    fn blank() -> Cursor<Vec<u8>> {
        Cursor::new(vec![0u8; 20 << 20])
    }

    #[test]
    fn node_id_is_the_uuid_then_the_volume_and_refuses_a_blank_uuid() {
        assert_eq!(&*node_id_passphrase(UUID, "EPHEMERAL").unwrap(), format!("{UUID}EPHEMERAL").as_bytes());
        let zeros = "00000000-0000-0000-0000-000000000000";
        assert_eq!(
            node_id_passphrase(zeros, "EPHEMERAL").unwrap_err(),
            format!("machine UUID {zeros} entropy check failed")
        );
        assert_eq!(node_id_passphrase("", "x").unwrap_err(), "machine UUID is not populated");
    }

    #[test]
    fn lock_to_state_appends_the_salt_and_needs_one() {
        let mut k = key(0, EncryptionKeyType::Static, "pw");
        k.lock_to_state = true;
        let salted = KeyEnv { salt: Some(b"SALT"), ..env() };
        assert_eq!(&*passphrase(&k, &salted).unwrap(), b"pwSALT");
        assert!(passphrase(&k, &env()).unwrap_err().starts_with("lockToState: "));
        assert_eq!(
            passphrase(&key(0, EncryptionKeyType::Static, ""), &env()).unwrap_err(),
            "static key must have key data defined"
        );
    }

    #[test]
    fn a_blank_device_gets_every_configured_slot() {
        let s = spec(vec![key(1, EncryptionKeyType::NodeId, ""), key(0, EncryptionKeyType::Static, "secret")]);
        let mut dev = blank();
        let u = format(&mut dev, &s, &env(), &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 0, "the lowest slot formats");
        assert!(u.failed_syncs.is_empty(), "{:?}", u.failed_syncs);
        assert_eq!(u.header.metadata.keyslots.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        // Each key opens its own slot, to the same volume key.
        let h = Header::read(&mut dev).unwrap();
        let a = h.unlock_slot(&mut dev, 0, b"secret").unwrap();
        let b = h.unlock_slot(&mut dev, 1, format!("{UUID}u-data").as_bytes()).unwrap();
        assert_eq!(a.as_bytes(), b.as_bytes());
        assert_eq!(a.as_bytes(), u.key.as_bytes());
    }

    #[test]
    fn open_falls_through_to_a_working_slot_and_repairs_the_others() {
        let first = spec(vec![key(0, EncryptionKeyType::Static, "old"), key(1, EncryptionKeyType::NodeId, "")]);
        let mut dev = blank();
        let made = format(&mut dev, &first, &env(), &mut || Ok(fast())).unwrap();
        // The passphrase of slot 0 changes in the config; slot 1 still opens, and slot 0 is
        // rewritten to the new passphrase; slot 2 is added; nothing fails.
        let second = spec(vec![
            key(0, EncryptionKeyType::Static, "new"),
            key(1, EncryptionKeyType::NodeId, ""),
            key(2, EncryptionKeyType::Static, "recovery"),
        ]);
        let u = open(&mut dev, &second, &env(), &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 1);
        assert_eq!(u.key.as_bytes(), made.key.as_bytes());
        assert!(u.failed_syncs.is_empty(), "{:?}", u.failed_syncs);
        let h = Header::read(&mut dev).unwrap();
        assert!(h.unlock_slot(&mut dev, 0, b"new").is_ok());
        assert!(h.unlock_slot(&mut dev, 0, b"old").is_err());
        assert!(h.unlock_slot(&mut dev, 2, b"recovery").is_ok());
        // A slot the config drops goes.
        let third = spec(vec![key(2, EncryptionKeyType::Static, "recovery")]);
        let u = open(&mut dev, &third, &env(), &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 2);
        assert_eq!(u.header.metadata.keyslots.keys().copied().collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn a_key_that_gives_nothing_is_reported_not_fatal() {
        let s = spec(vec![key(0, EncryptionKeyType::Tpm, ""), key(1, EncryptionKeyType::Static, "pw")]);
        let mut dev = blank();
        let u = format(&mut dev, &s, &env(), &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 1, "there is no TPM here, so the static slot formats");
        assert_eq!(u.failed_syncs, vec![format!("slot 0 (tpm): {NO_TPM_CLIENT}")]);
        let u = open(&mut dev, &s, &env(), &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 1);
        assert_eq!(u.failed_syncs, vec![format!("slot 0 (tpm): {NO_TPM_CLIENT}")]);
    }

    #[test]
    fn no_opening_slot_names_every_slot_tried() {
        let mut dev = blank();
        format(&mut dev, &spec(vec![key(0, EncryptionKeyType::Static, "a")]), &env(), &mut || Ok(fast())).unwrap();
        let wrong = spec(vec![key(0, EncryptionKeyType::Static, "b"), key(3, EncryptionKeyType::Kms, "")]);
        let err = open(&mut dev, &wrong, &env(), &mut || Ok(fast())).unwrap_err();
        assert!(err.starts_with("no configured key opens the volume: slot 0 (static): "), "{err}");
        assert!(err.contains("slot 3 (kms): kms.endpoint is not set"), "{err}");
    }

    /// A stand-in KMS for these table tests (the real server is `tests/kms.rs`'s): it "seals"
    /// by XOR with its key behind a tag, and can be made to fail or to hold another key.
    struct FakeKms {
        key: u8,
        down: bool,
        calls: std::sync::atomic::AtomicUsize,
    }

    impl FakeKms {
        fn new(key: u8) -> Self {
            FakeKms { key, down: false, calls: Default::default() }
        }
    }

    impl Kms for FakeKms {
        fn seal(&self, endpoint: &str, uuid: &str, data: &[u8]) -> Result<Vec<u8>, String> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            assert_eq!((endpoint, uuid), ("grpc://kms:4050", UUID));
            if self.down {
                return Err("kms is down".into());
            }
            Ok([b"S".as_slice(), &data.iter().map(|b| b ^ self.key).collect::<Vec<_>>()].concat())
        }
        fn unseal(&self, _: &str, _: &str, data: &[u8]) -> Result<Vec<u8>, String> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self.down {
                return Err("kms is down".into());
            }
            Ok(data.strip_prefix(b"S").ok_or("not sealed here")?.iter().map(|b| b ^ self.key).collect())
        }
    }

    fn kms_key(slot: u32) -> EncryptionKey {
        EncryptionKey {
            slot,
            kind: EncryptionKeyType::Kms,
            kms_endpoint: "grpc://kms:4050".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_kms_slot_keeps_its_sealed_passphrase_in_a_token_and_reopens() {
        let kms = FakeKms::new(0x5a);
        let e = KeyEnv { kms: Some(&kms), ..env() };
        let s = spec(vec![kms_key(0), key(1, EncryptionKeyType::Static, "recovery")]);
        let mut dev = blank();
        let u = format(&mut dev, &s, &e, &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 0);
        assert!(u.failed_syncs.is_empty(), "{:?}", u.failed_syncs);
        let h = Header::read(&mut dev).unwrap();
        let token = &h.metadata.tokens[&0];
        assert_eq!(token.kind, TOKEN_TYPE_KMS);
        let sealed = token.talos_user_data::<KmsToken>().unwrap().sealed_data;
        assert_eq!(sealed.len(), 1 + KMS_PASSPHRASE_LEN);
        // The slot's passphrase is the base64 of what the KMS unseals, as in Talos.
        let plain = kms.unseal("", "", &sealed).unwrap();
        let pass = base64::engine::general_purpose::STANDARD.encode(plain);
        assert!(h.unlock_slot(&mut dev, 0, pass.as_bytes()).is_ok());
        assert!(!h.metadata.tokens.contains_key(&1), "a static slot has no token");
        let again = open(&mut dev, &s, &e, &mut || Ok(fast())).unwrap();
        assert_eq!((again.slot, again.key.as_bytes()), (0, u.key.as_bytes()));
        assert!(again.failed_syncs.is_empty(), "{:?}", again.failed_syncs);
    }

    #[test]
    fn a_kms_that_does_not_answer_never_costs_its_slot() {
        let up = FakeKms::new(1);
        let s = spec(vec![kms_key(0), key(1, EncryptionKeyType::Static, "recovery")]);
        let mut dev = blank();
        format(&mut dev, &s, &KeyEnv { kms: Some(&up), ..env() }, &mut || Ok(fast())).unwrap();
        let before = Header::read(&mut dev).unwrap();
        let down = FakeKms { down: true, ..FakeKms::new(1) };
        let u = open(&mut dev, &s, &KeyEnv { kms: Some(&down), ..env() }, &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 1, "the recovery slot opens");
        assert_eq!(u.failed_syncs, vec!["slot 0 (kms): kms is down"]);
        assert_eq!(down.calls.load(std::sync::atomic::Ordering::SeqCst), 1, "the KMS is asked once");
        let after = Header::read(&mut dev).unwrap();
        assert_eq!(after.metadata.keyslots[&0], before.metadata.keyslots[&0], "slot 0 is untouched");
        assert_eq!(after.metadata.tokens[&0], before.metadata.tokens[&0]);
        // Once it answers again, slot 0 opens.
        assert_eq!(open(&mut dev, &s, &KeyEnv { kms: Some(&up), ..env() }, &mut || Ok(fast())).unwrap().slot, 0);
    }

    /// STATE's keys as META keeps them: a kms slot and a recovery slot with no passphrase. With
    /// the KMS down nothing opens and the status says what to do; the passphrase given through
    /// `talosctl unlock` opens the recovery slot, and no slot is lost along the way.
    #[test]
    fn a_recovery_slot_opens_with_a_given_passphrase_and_is_kept_without_one() {
        let up = FakeKms::new(3);
        let down = FakeKms { down: true, ..FakeKms::new(3) };
        let recovery = |pass: &str| key(1, EncryptionKeyType::Recovery, pass);
        let mut dev = blank();
        // Made with the config, which has the passphrase.
        let made = format(
            &mut dev,
            &spec(vec![kms_key(0), recovery("rescue me")]),
            &KeyEnv { kms: Some(&up), ..env() },
            &mut || Ok(fast()),
        )
        .unwrap();
        assert!(made.failed_syncs.is_empty(), "{:?}", made.failed_syncs);
        let before = Header::read(&mut dev).unwrap();
        assert!(before.unlock_slot(&mut dev, 1, b"rescue me").is_ok());
        let meta = spec(vec![kms_key(0), recovery("")]);
        // The KMS answers: slot 0 opens, and the recovery slot, whose passphrase is not known
        // here, is kept as it is with nothing reported.
        let u = open(&mut dev, &meta, &KeyEnv { kms: Some(&up), ..env() }, &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 0);
        assert!(u.failed_syncs.is_empty(), "{:?}", u.failed_syncs);
        assert_eq!(Header::read(&mut dev).unwrap().metadata.keyslots[&1], before.metadata.keyslots[&1]);
        // The KMS is down: nothing opens, and the error says how to go on.
        let e = open(&mut dev, &meta, &KeyEnv { kms: Some(&down), ..env() }, &mut || Ok(fast())).unwrap_err();
        assert!(e.contains("slot 0 (kms): kms is down"), "{e}");
        assert!(e.contains(&format!("slot 1 (recovery): {RECOVERY_NOT_GIVEN}")), "{e}");
        // A wrong passphrase given opens nothing.
        let wrong = KeyEnv { kms: Some(&down), given: Some(b"guess"), ..env() };
        let e = open(&mut dev, &meta, &wrong, &mut || Ok(fast())).unwrap_err();
        assert!(e.contains("slot 1 (recovery): "), "{e}");
        // The right one opens slot 1; slot 0, whose KMS is down, stays.
        let right = KeyEnv { kms: Some(&down), given: Some(b"rescue me"), ..env() };
        let u = open(&mut dev, &meta, &right, &mut || Ok(fast())).unwrap();
        assert_eq!((u.slot, u.key.as_bytes()), (1, made.key.as_bytes()));
        let after = Header::read(&mut dev).unwrap();
        assert_eq!(after.metadata.keyslots, before.metadata.keyslots, "no slot changed");
        assert_eq!(after.metadata.tokens, before.metadata.tokens);
    }

    /// A passphrase given for a volume whose keys name no recovery slot (one cryptsetup added,
    /// say) is tried in every slot, and the slot it opens is not removed by the sync.
    #[test]
    fn a_given_passphrase_opens_any_slot_and_that_slot_stays() {
        let mut dev = blank();
        let made = format(
            &mut dev,
            &spec(vec![key(0, EncryptionKeyType::Static, "a"), key(3, EncryptionKeyType::Static, "d")]),
            &env(),
            &mut || Ok(fast()),
        )
        .unwrap();
        let only_a = spec(vec![key(0, EncryptionKeyType::Static, "a-moved")]);
        let e = KeyEnv { given: Some(b"d"), ..env() };
        let u = open(&mut dev, &only_a, &e, &mut || Ok(fast())).unwrap();
        assert_eq!((u.slot, u.key.as_bytes()), (3, made.key.as_bytes()));
        let h = Header::read(&mut dev).unwrap();
        assert!(h.unlock_slot(&mut dev, 3, b"d").is_ok(), "the slot that opened stays");
        assert!(h.unlock_slot(&mut dev, 0, b"a-moved").is_ok(), "the configured slot is synced");
    }

    #[test]
    fn a_kms_slot_that_no_longer_opens_is_sealed_anew() {
        let old = FakeKms::new(1);
        let s = spec(vec![kms_key(0), key(1, EncryptionKeyType::Static, "recovery")]);
        let mut dev = blank();
        format(&mut dev, &s, &KeyEnv { kms: Some(&old), ..env() }, &mut || Ok(fast())).unwrap();
        let sealed_before = Header::read(&mut dev).unwrap().metadata.tokens[&0].clone();
        // The server now holds another key: what it unseals opens nothing, so the slot is
        // replaced by one it sealed.
        let new = FakeKms::new(2);
        let e = KeyEnv { kms: Some(&new), ..env() };
        let u = open(&mut dev, &s, &e, &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 1);
        assert!(u.failed_syncs.is_empty(), "{:?}", u.failed_syncs);
        assert_ne!(Header::read(&mut dev).unwrap().metadata.tokens[&0], sealed_before);
        assert_eq!(open(&mut dev, &s, &e, &mut || Ok(fast())).unwrap().slot, 0);
        // A slot the config turns static loses its token; a dropped slot loses its token too.
        let s2 = spec(vec![key(0, EncryptionKeyType::Static, "plain"), key(1, EncryptionKeyType::Static, "recovery")]);
        let u = open(&mut dev, &s2, &e, &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 1);
        assert!(u.header.metadata.tokens.is_empty(), "{:?}", u.header.metadata.tokens);
        let s3 = spec(vec![kms_key(2), key(0, EncryptionKeyType::Static, "plain")]);
        let u = open(&mut dev, &s3, &e, &mut || Ok(fast())).unwrap();
        assert_eq!(u.header.metadata.tokens.keys().copied().collect::<Vec<_>>(), vec![2]);
        let s4 = spec(vec![key(0, EncryptionKeyType::Static, "plain")]);
        let u = open(&mut dev, &s4, &e, &mut || Ok(fast())).unwrap();
        assert_eq!(u.header.metadata.keyslots.keys().copied().collect::<Vec<_>>(), vec![0]);
        assert!(u.header.metadata.tokens.is_empty());
    }

    #[test]
    fn lock_to_state_salts_a_kms_key_too() {
        let kms = FakeKms::new(3);
        let mut k = kms_key(0);
        k.lock_to_state = true;
        let e = KeyEnv { kms: Some(&kms), salt: Some(b"SALT"), ..env() };
        let (pass, token) = new_key(&k, &e).unwrap();
        assert!(pass.ends_with(b"SALT"));
        assert_eq!(get_key(&k, &e, token.as_ref()).unwrap(), pass);
        assert!(get_key(&k, &KeyEnv { salt: None, ..e }, token.as_ref()).unwrap_err().starts_with("lockToState: "));
        assert_eq!(get_key(&k, &e, None).unwrap_err(), "the slot has no sideroKMS token");
    }

    #[test]
    fn format_options_name_the_field_they_refuse() {
        let mut s = spec(vec![]);
        s.cipher = "aes-cbc-essiv:sha256".into();
        assert!(format_options(&s, fast(), 0).unwrap_err().starts_with("encryption.cipher: "));
        s.cipher = String::new();
        s.key_size = 256;
        s.block_size = 4096;
        let o = format_options(&s, fast(), 2).unwrap();
        assert_eq!((o.key_size_bits, o.sector_size, o.keyslot), (256, 4096, 2));
    }

    /// A TPM whose one PCR the test moves: it seals by XOR with a key and the PCR's value,
    /// and unseals only while the PCR holds the value sealed to.
    struct FakeTpm {
        pcr: std::sync::atomic::AtomicU8,
        uki: bool,
    }

    impl Tpm for FakeTpm {
        fn seal(&self, secret: &[u8], pcrs: &[u8]) -> Result<TpmToken, String> {
            let v = self.pcr.load(std::sync::atomic::Ordering::SeqCst);
            Ok(TpmToken {
                key_slots: Vec::new(),
                sealed_blob_private: secret.iter().map(|b| b ^ 0x33).collect(),
                sealed_blob_public: vec![v],
                pcrs: pcrs.iter().map(|&p| i64::from(p)).collect(),
                pubkey_pcrs: Vec::new(),
                alg: "sha256".into(),
                encryption_version: String::new(),
                policy_hash: vec![v; 32],
                key_name: vec![0; 34],
            })
        }
        fn unseal(&self, t: &TpmToken) -> Result<Zeroizing<Vec<u8>>, String> {
            if t.sealed_blob_public != [self.pcr.load(std::sync::atomic::Ordering::SeqCst)] {
                return Err(format!("the PCR values differ from those the key was sealed to (PCRs {:?})", t.pcrs));
            }
            Ok(Zeroizing::new(t.sealed_blob_private.iter().map(|b| b ^ 0x33).collect()))
        }
        fn secure_boot(&self) -> Result<bool, String> {
            Ok(false)
        }
        fn uki_measured(&self) -> bool {
            self.uki
        }
    }

    fn tpm_key(slot: u32) -> EncryptionKey {
        EncryptionKey {
            slot,
            kind: EncryptionKeyType::Tpm,
            tpm_pcrs: vec![7],
            tpm_pub_key_pcrs: vec![11],
            ..Default::default()
        }
    }

    #[test]
    fn a_tpm_slot_seals_to_the_pcrs_and_falls_back_to_the_recovery_slot_when_they_move() {
        let tpm = FakeTpm { pcr: 1.into(), uki: true };
        let e = KeyEnv { tpm: Some(&tpm), ..env() };
        let s = spec(vec![tpm_key(0), key(1, EncryptionKeyType::Static, "recovery")]);
        let mut dev = blank();
        let u = format(&mut dev, &s, &e, &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 0);
        assert!(u.failed_syncs.is_empty(), "{:?}", u.failed_syncs);
        let h = Header::read(&mut dev).unwrap();
        let sealed = h.metadata.tokens[&0].talos_user_data::<TpmToken>().unwrap();
        assert_eq!(h.metadata.tokens[&0].kind, TOKEN_TYPE_TPM);
        assert_eq!(sealed.pcrs, vec![7, 11], "booted through a UKI stub, PCR 11 is bound too");
        // The boot changes (another UKI): the TPM slot fails, the recovery slot opens, and the
        // TPM slot stays for the boot it was sealed to.
        tpm.pcr.store(2, std::sync::atomic::Ordering::SeqCst);
        let u = open(&mut dev, &s, &e, &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 1);
        assert_eq!(
            u.failed_syncs,
            vec!["slot 0 (tpm): the PCR values differ from those the key was sealed to (PCRs [7, 11])"]
        );
        assert_eq!(u.header.metadata.keyslots.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        tpm.pcr.store(1, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(open(&mut dev, &s, &e, &mut || Ok(fast())).unwrap().slot, 0);
        // No TPM client: named, and the recovery slot still opens.
        let u = open(&mut dev, &s, &env(), &mut || Ok(fast())).unwrap();
        assert_eq!((u.slot, u.failed_syncs), (1, vec![format!("slot 0 (tpm): {NO_TPM_CLIENT}")]));
    }

    #[test]
    fn tpm_pcrs_bind_pcr_11_only_when_a_uki_stub_measured_the_boot() {
        assert_eq!(tpm_pcrs(&tpm_key(0), false), vec![7]);
        assert_eq!(tpm_pcrs(&tpm_key(0), true), vec![7, 11]);
        let none = EncryptionKey { tpm_pcrs: vec![], tpm_pub_key_pcrs: vec![], ..tpm_key(0) };
        assert!(tpm_pcrs(&none, true).is_empty());
    }

    #[test]
    fn secure_boot_is_checked_on_enroll_when_asked_and_a_signed_policy_token_is_refused() {
        let tpm = FakeTpm { pcr: 1.into(), uki: false };
        let e = KeyEnv { tpm: Some(&tpm), ..env() };
        let checked = EncryptionKey { tpm_check_secureboot_status_on_enroll: true, ..tpm_key(0) };
        assert_eq!(new_key(&checked, &e).unwrap_err(), "checkSecurebootStatusOnEnroll: Secure Boot is not enabled");
        let mut sealed = tpm.seal(b"x", &[7]).unwrap();
        sealed.pubkey_pcrs = vec![11];
        let token = Token::talos(TOKEN_TYPE_TPM, &sealed).unwrap();
        assert_eq!(
            get_key(&tpm_key(0), &e, Some(&token)).unwrap_err(),
            "the key is sealed to a signed PCR policy (PCRs [11]), which this node does not check"
        );
    }
}

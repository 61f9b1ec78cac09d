//! A volume's LUKS2 layer as Talos handles it (`internal/pkg/encryption`), over a device or
//! image file: the configured keys are taken in slot order; a blank device is formatted with
//! the first key that yields a passphrase; a LUKS2 device is unlocked by the first slot that
//! opens; then the keyslots are converged toward the configuration (Talos's `syncKeys`): a
//! missing slot is added, a slot its key no longer opens is replaced, a slot the config does
//! not name is removed. A slot that fails there is reported, never fatal: the volume opens by
//! the slot that worked. Loading the opened key into dm-crypt is the caller's.
//!
//! Key handlers: `static` (the passphrase), `nodeID` (the machine UUID and the volume id, with
//! Talos's entropy check) and either wrapped by `lockToState` (the node's STATE-held salt
//! appended). `kms` and `tpm` are refused by name: a volume that lists them still opens by
//! another slot, and the refusal shows in the volume's failed syncs.

use std::time::Duration;

use zeroize::Zeroizing;

use super::luks2::{self, FormatOptions, Header, Kdf, Luks2Error, VolumeKey};
use crate::resources::block::{EncryptionKey, EncryptionKeyType, EncryptionSpec};

/// What the key handlers draw on.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyEnv<'a> {
    /// The volume's id (`EPHEMERAL`, `u-data`): the nodeID key mixes it in.
    pub volume_id: &'a str,
    /// The machine's SMBIOS UUID, as `/sys/class/dmi/id/product_uuid` gives it.
    pub machine_uuid: Option<&'a str>,
    /// The node's encryption salt (Talos's `EncryptionSalt`), for `lockToState` keys.
    pub salt: Option<&'a [u8]>,
}

/// The name of a key's handler, as Talos's `EncryptionKeyType` prints it.
pub fn kind_name(kind: EncryptionKeyType) -> &'static str {
    match kind {
        EncryptionKeyType::Static => "static",
        EncryptionKeyType::NodeId => "nodeID",
        EncryptionKeyType::Kms => "kms",
        EncryptionKeyType::Tpm => "tpm",
    }
}

fn describe(key: &EncryptionKey) -> String {
    format!("slot {} ({})", key.slot, kind_name(key.kind))
}

/// The passphrase `key` gives in `env`, or why it gives none.
pub fn passphrase(key: &EncryptionKey, env: &KeyEnv<'_>) -> Result<Zeroizing<Vec<u8>>, String> {
    let mut value = match key.kind {
        EncryptionKeyType::Static if key.static_passphrase.is_empty() => {
            return Err("static key must have key data defined".into());
        }
        EncryptionKeyType::Static => Zeroizing::new(key.static_passphrase.as_bytes().to_vec()),
        EncryptionKeyType::NodeId => node_id_passphrase(env.machine_uuid.unwrap_or(""), env.volume_id)?,
        EncryptionKeyType::Kms => return Err("the kms key handler is not available on this node yet".into()),
        EncryptionKeyType::Tpm => return Err("the tpm key handler is not available on this node yet".into()),
    };
    if key.lock_to_state {
        let salt = env.salt.ok_or("lockToState: this node keeps no encryption salt on STATE yet")?;
        value.extend_from_slice(salt);
    }
    Ok(value)
}

/// Talos's nodeID key: the machine UUID followed by the volume id. A UUID with one character
/// in more than half its places (all zeros, all `f`: firmware that sets none) is refused,
/// as Talos refuses it: the key would be the same on every such machine.
pub fn node_id_passphrase(uuid: &str, volume_id: &str) -> Result<Zeroizing<Vec<u8>>, String> {
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

/// A configured key with its passphrase, or why it gives none.
type Keyed<'a> = (&'a EncryptionKey, Result<Zeroizing<Vec<u8>>, String>);

/// The configured keys in slot order (Talos sorts its handlers by slot), each asked once for
/// its passphrase.
fn keyed<'a>(spec: &'a EncryptionSpec, env: &KeyEnv<'_>) -> Vec<Keyed<'a>> {
    let mut keys: Vec<&EncryptionKey> = spec.keys.iter().collect();
    keys.sort_by_key(|k| k.slot);
    keys.into_iter().map(|k| (k, passphrase(k, env))).collect()
}

/// Why each key that gives no passphrase gives none, in slot order.
fn refusals(keys: &[Keyed<'_>]) -> Vec<String> {
    keys.iter().filter_map(|(k, p)| p.as_ref().err().map(|e| format!("{}: {e}", describe(k)))).collect()
}

/// Formats the blank `dev` as LUKS2 with the first key that yields a passphrase, then adds the
/// others. `kdf` is asked once, when the first keyslot is written.
pub fn format<D: luks2::Device>(
    dev: &mut D,
    spec: &EncryptionSpec,
    env: &KeyEnv<'_>,
    kdf: &mut dyn FnMut() -> Result<Kdf, String>,
) -> Result<Unlocked, String> {
    let keys = keyed(spec, env);
    let refused = refusals(&keys);
    let Some((key, pass)) = keys.iter().find_map(|(k, p)| p.as_ref().ok().map(|p| (*k, p))) else {
        return Err(format!("no configured key gives a passphrase to format with: {}", refused.join("; ")));
    };
    let kdf = kdf()?;
    let opts = format_options(spec, kdf, key.slot)?;
    let (header, volume_key) = luks2::format(dev, &opts, pass).map_err(|e| format!("formatting LUKS2: {e}"))?;
    let mut unlocked = Unlocked { header, key: volume_key, slot: key.slot, failed_syncs: refused };
    sync_keys(dev, &mut unlocked, &keys, kdf);
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
    let keys = keyed(spec, env);
    // Every slot tried, in slot order, for the error when none opens.
    let mut tried = Vec::new();
    for (key, pass) in &keys {
        let pass = match pass {
            Ok(p) => p,
            Err(e) => {
                tried.push(format!("{}: {e}", describe(key)));
                continue;
            }
        };
        match header.unlock_slot(dev, key.slot, pass) {
            Ok(volume_key) => {
                // Keys that gave no passphrase stay reported: the sync cannot write them either.
                let mut unlocked = Unlocked { header, key: volume_key, slot: key.slot, failed_syncs: refusals(&keys) };
                match kdf() {
                    Ok(kdf) => sync_keys(dev, &mut unlocked, &keys, kdf),
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
    Err(format!("no configured key opens the volume: {}", tried.join("; ")))
}

/// Talos's `syncKeys`: every configured slot other than the one that opened holds its key, and
/// no other slot is left. Each failure is recorded in `u.failed_syncs` and the rest go on; keys
/// that gave no passphrase are the caller's to report.
fn sync_keys<D: luks2::Device>(dev: &mut D, u: &mut Unlocked, keys: &[Keyed<'_>], kdf: Kdf) {
    for (key, pass) in keys {
        let Ok(pass) = pass else { continue };
        if key.slot == u.slot {
            continue;
        }
        if u.header.metadata.keyslots.contains_key(&key.slot) {
            if u.header.unlock_slot(dev, key.slot, pass).is_ok() {
                continue;
            }
            match luks2::remove_keyslot(dev, &u.header, key.slot) {
                Ok(h) => u.header = h,
                Err(e) => {
                    u.failed_syncs.push(format!("error updating key {}: {e}", describe(key)));
                    continue;
                }
            }
        }
        match luks2::add_keyslot(dev, &u.header, &u.key, pass, &kdf, Some(key.slot)) {
            Ok((h, _)) => u.header = h,
            Err(e) => u.failed_syncs.push(format!("error adding key {}: {e}", describe(key))),
        }
    }
    let stale: Vec<u32> =
        u.header.metadata.keyslots.keys().copied().filter(|s| !keys.iter().any(|(k, _)| k.slot == *s)).collect();
    for slot in stale {
        match luks2::remove_keyslot(dev, &u.header, slot) {
            Ok(h) => u.header = h,
            Err(e) => u.failed_syncs.push(format!("error removing key slot {slot}: {e}")),
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
        KeyEnv { volume_id: "u-data", machine_uuid: Some(UUID), salt: None }
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
        assert_eq!(u.slot, 1, "the TPM gives no key here, so the static slot formats");
        assert_eq!(u.failed_syncs, vec!["slot 0 (tpm): the tpm key handler is not available on this node yet"]);
        let u = open(&mut dev, &s, &env(), &mut || Ok(fast())).unwrap();
        assert_eq!(u.slot, 1);
        assert_eq!(u.failed_syncs, vec!["slot 0 (tpm): the tpm key handler is not available on this node yet"]);
    }

    #[test]
    fn no_opening_slot_names_every_slot_tried() {
        let mut dev = blank();
        format(&mut dev, &spec(vec![key(0, EncryptionKeyType::Static, "a")]), &env(), &mut || Ok(fast())).unwrap();
        let wrong = spec(vec![key(0, EncryptionKeyType::Static, "b"), key(3, EncryptionKeyType::Kms, "")]);
        let err = open(&mut dev, &wrong, &env(), &mut || Ok(fast())).unwrap_err();
        assert!(err.starts_with("no configured key opens the volume: slot 0 (static): "), "{err}");
        assert!(err.contains("slot 3 (kms): the kms key handler is not available"), "{err}");
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
}

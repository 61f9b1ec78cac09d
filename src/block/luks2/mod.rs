//! LUKS2, the on-disk format of cryptsetup's encrypted volumes, read and written here so the
//! node needs neither libcryptsetup (there is no static one) nor the cryptsetup program: the
//! two binary headers and their JSON metadata ([`Header`]), keyslots (Argon2 or PBKDF2, the
//! anti-forensic splitter, aes-xts-plain64 areas), the PBKDF2 digest of the volume key, tokens
//! (Talos keeps its sealed KMS and TPM keys in them, [`token`]), and the dm-crypt target a
//! caller hands to device-mapper ([`dm_crypt_target`]).
//!
//! What Talos formats is what this writes: aes-xts-plain64, a 512-bit key, argon2id, a 16 KiB
//! header and the data at 16 MiB, as cryptsetup 2.x does by default. Anything else a header
//! may carry — LUKS1, integrity segments, other ciphers, reencryption, other keyslot or digest
//! kinds — is refused by name when the header is read, never guessed at. This module must
//! never shell out, never print a key (a [`VolumeKey`] has no readable `Debug` and is wiped
//! on drop), and never write a header over one it did not read: every change after
//! [`format`] first checks that the device still holds the header it was given.

mod dm;
mod header;
mod kdf;
mod keyslot;
pub mod token;

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};

use zeroize::{Zeroize, Zeroizing};

pub use dm::{CryptTarget, DmCryptOptions, dm_crypt_table, dm_crypt_target, mapping_name};
pub(crate) use header::b64;
pub use header::{Af, Area, Config, Digest, Header, Keyslot, KeyslotKdf, Metadata, Requirements, Segment, SegmentSize};
pub use kdf::{Hash, Kdf, TALOS_ITER_TIME};
pub use token::Token;

/// The one cipher written and accepted, for the data segment and the keyslot areas.
pub const CIPHER: &str = "aes-xts-plain64";
/// Talos's key size for aes-xts-plain64 (go-blockdevice's default): AES-256 in XTS mode.
pub const DEFAULT_KEY_SIZE_BITS: u32 = 512;
/// Binary header plus JSON area, cryptsetup's default (a 12 KiB JSON area).
pub const DEFAULT_HEADER_SIZE: u64 = 16 << 10;
/// Where cryptsetup puts the data by default: both headers, then keyslot areas up to 16 MiB.
pub const DEFAULT_DATA_OFFSET: u64 = 16 << 20;
/// Keyslot and token ids are 0..32.
pub const MAX_KEYSLOTS: u32 = 32;
pub const MAX_TOKENS: u32 = 32;
/// Anti-forensic stripes per keyslot, as cryptsetup writes them.
pub const STRIPES: u32 = 4000;
/// The keyslot areas may not exceed 128 MiB (cryptsetup's limit).
pub const MAX_KEYSLOTS_SIZE: u64 = 128 << 20;

/// The length of the KDF and digest salts.
const SALT_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum Luks2Error {
    #[error("{what} at byte {offset}: {source}")]
    Io { what: &'static str, offset: u64, source: io::Error },
    #[error("no LUKS header (neither the primary at byte 0 nor a secondary copy has the LUKS magic)")]
    NotLuks,
    #[error("a LUKS1 header: only LUKS2 is supported (convert it with `cryptsetup convert --type luks2`)")]
    Luks1,
    #[error("no valid LUKS2 header: primary: {primary}; secondary: {secondary}")]
    Damaged { primary: String, secondary: String },
    #[error("unsupported LUKS2 feature: {feature}")]
    Unsupported { feature: String },
    #[error("invalid LUKS2 metadata: {field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("LUKS2 JSON metadata: {0}")]
    Json(#[source] serde_json::Error),
    #[error("{field}: {reason}")]
    Options { field: &'static str, reason: String },
    #[error("the passphrase opens no keyslot (tried {tried:?})")]
    WrongPassphrase { tried: Vec<u32> },
    #[error("the passphrase does not open keyslot {slot}")]
    WrongPassphraseForSlot { slot: u32 },
    #[error("the volume key does not match the header's digest")]
    WrongVolumeKey,
    #[error("keyslot {0} does not exist")]
    NoKeyslot(u32),
    #[error("keyslot {0} is already in use")]
    KeyslotInUse(u32),
    #[error("all {MAX_KEYSLOTS} keyslots are in use")]
    NoFreeKeyslot,
    #[error("keyslot {0} is the last one: removing it would lose the volume key for good")]
    LastKeyslot(u32),
    #[error("token {0} does not exist")]
    NoToken(u32),
    #[error("no room for {what}: {reason}")]
    NoSpace { what: String, reason: String },
    #[error("the header on the device changed (sequence id {found}, expected {expected}): read it again")]
    Stale { expected: u64, found: u64 },
    #[error("{what}: {reason}")]
    Kdf { what: String, reason: String },
    #[error("random bytes from getrandom(2): {0}")]
    Random(getrandom::Error),
}

pub type Result<T> = std::result::Result<T, Luks2Error>;

/// A device or image file a header is written to. `sync` makes the writes durable before a
/// change is reported done.
pub trait Device: Read + Write + Seek {
    fn sync(&mut self) -> io::Result<()>;
}

impl Device for File {
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

impl Device for io::Cursor<Vec<u8>> {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<T: Device + ?Sized> Device for &mut T {
    fn sync(&mut self) -> io::Result<()> {
        (**self).sync()
    }
}

/// The key that encrypts the data segment. Wiped from memory when dropped; `Debug` shows only
/// its length.
pub struct VolumeKey(Zeroizing<Vec<u8>>);

impl VolumeKey {
    pub fn from_bytes(bytes: Vec<u8>) -> VolumeKey {
        VolumeKey(Zeroizing::new(bytes))
    }

    /// A fresh key of `len` bytes from the kernel's random source.
    pub fn generate(len: usize) -> Result<VolumeKey> {
        let mut key = Zeroizing::new(vec![0u8; len]);
        random(&mut key)?;
        Ok(VolumeKey(key))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for VolumeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VolumeKey({} bytes, redacted)", self.0.len())
    }
}

/// What [`format`] lays down. [`Default`] is what Talos gets from cryptsetup when a volume
/// config names no cipher, key size or block size: aes-xts-plain64, 512 bits, 512-byte
/// sectors, argon2id at cryptsetup's ceilings (see [`Kdf::talos_default`]; a node fits it to
/// its memory and speed with [`Kdf::limit_to_host`] and [`Kdf::calibrate`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FormatOptions {
    /// Only `aes-xts-plain64`.
    pub cipher: String,
    /// 256 or 512: AES-128 or AES-256 in XTS mode (cryptsetup has no 384-bit XTS keyslots).
    pub key_size_bits: u32,
    /// The encryption sector size: 512, 1024, 2048 or 4096 (Talos's `blockSize`).
    pub sector_size: u32,
    /// The KDF of the first keyslot.
    pub kdf: Kdf,
    /// PBKDF2-SHA256 iterations of the volume key digest; `None` measures what takes 125 ms
    /// here, as cryptsetup does (never fewer than 1000).
    pub digest_iterations: Option<u32>,
    /// At most 47 bytes; empty for none (Talos sets none).
    pub label: String,
    /// The volume UUID (8-4-4-4-12 hex digits); `None` makes a random one.
    pub uuid: Option<String>,
    /// Where the data segment starts, in bytes: a multiple of 4096 and of the sector size.
    pub data_offset: u64,
    /// The id of the first keyslot (Talos's key `slot`).
    pub keyslot: u32,
}

impl Default for FormatOptions {
    fn default() -> FormatOptions {
        FormatOptions {
            cipher: CIPHER.into(),
            key_size_bits: DEFAULT_KEY_SIZE_BITS,
            sector_size: 512,
            kdf: Kdf::talos_default(),
            digest_iterations: None,
            label: String::new(),
            uuid: None,
            data_offset: DEFAULT_DATA_OFFSET,
            keyslot: 0,
        }
    }
}

impl FormatOptions {
    fn validate(&self) -> Result<()> {
        let bad = |field, reason: String| Err(Luks2Error::Options { field, reason });
        if self.cipher != CIPHER {
            return bad("cipher", format!("{:?} is not supported (only {CIPHER})", self.cipher));
        }
        if ![256, 512].contains(&self.key_size_bits) {
            return bad("key_size_bits", format!("{} is not 256 or 512", self.key_size_bits));
        }
        if ![512, 1024, 2048, 4096].contains(&self.sector_size) {
            return bad("sector_size", format!("{} is not 512, 1024, 2048 or 4096", self.sector_size));
        }
        if self.label.len() >= header::LABEL_LEN || self.label.contains('\0') {
            return bad(
                "label",
                format!("{:?} is longer than {} bytes or holds a NUL", self.label, header::LABEL_LEN - 1),
            );
        }
        if let Some(uuid) = &self.uuid
            && !is_uuid(uuid)
        {
            return bad("uuid", format!("{uuid:?} is not 8-4-4-4-12 hex digits"));
        }
        if !self.data_offset.is_multiple_of(4096) || !self.data_offset.is_multiple_of(u64::from(self.sector_size)) {
            return bad("data_offset", format!("{} is not a multiple of 4096 and the sector size", self.data_offset));
        }
        if self.keyslot >= MAX_KEYSLOTS {
            return bad("keyslot", format!("{} is not below {MAX_KEYSLOTS}", self.keyslot));
        }
        if self.digest_iterations.is_some_and(|i| i < kdf::PBKDF2_MIN_ITERATIONS) {
            return bad("digest_iterations", format!("fewer than {}", kdf::PBKDF2_MIN_ITERATIONS));
        }
        self.kdf.check_writable().map_err(|reason| Luks2Error::Options { field: "kdf", reason })
    }
}

/// Formats `dev` as LUKS2: wipes everything before the data offset, writes keyslot
/// `opts.keyslot` for `passphrase`, the digest and both headers, and returns the header and
/// the new volume key. The data area is left as it is (its contents are noise once opened).
pub fn format<D: Device>(dev: &mut D, opts: &FormatOptions, passphrase: &[u8]) -> Result<(Header, VolumeKey)> {
    opts.validate()?;
    let hdr_size = DEFAULT_HEADER_SIZE;
    let keyslots_size = opts.data_offset.saturating_sub(2 * hdr_size);
    if keyslots_size > MAX_KEYSLOTS_SIZE {
        return Err(Luks2Error::Options {
            field: "data_offset",
            reason: format!("{} leaves more than {MAX_KEYSLOTS_SIZE} bytes of keyslot areas", opts.data_offset),
        });
    }
    let size =
        dev.seek(SeekFrom::End(0)).map_err(|source| Luks2Error::Io { what: "sizing the device", offset: 0, source })?;
    let sector = u64::from(opts.sector_size);
    if size < opts.data_offset + sector || !(size - opts.data_offset).is_multiple_of(sector) {
        return Err(Luks2Error::NoSpace {
            what: "the data segment".into(),
            reason: format!(
                "the device is {size} bytes: it must hold the {}-byte header area and a whole number of {sector}-byte sectors after it",
                opts.data_offset
            ),
        });
    }

    let key = VolumeKey::generate(opts.key_size_bits as usize / 8)?;
    let iterations = match opts.digest_iterations {
        Some(n) => n,
        None => kdf::calibrate_pbkdf2(Hash::Sha256, key.len(), kdf::DIGEST_TIME)?,
    };
    let digest = Digest::create(&key, Hash::Sha256, iterations, 0)?;
    let uuid = match &opts.uuid {
        Some(u) => u.to_ascii_lowercase(),
        None => random_uuid()?,
    };
    let mut hdr = Header {
        hdr_size,
        seqid: 1,
        label: opts.label.clone(),
        subsystem: String::new(),
        uuid,
        metadata: Metadata::new(hdr_size, keyslots_size, Segment::crypt(opts.data_offset, opts.sector_size), digest),
    };

    wipe(dev, 0, opts.data_offset)?;
    hdr.store_keyslot(dev, opts.keyslot, &key, passphrase, &opts.kdf)?;
    hdr.write(dev)?;
    Ok((hdr, key))
}

/// Adds a keyslot for `passphrase` holding `key` (checked against the digest first) at `slot`,
/// or at the lowest free id; returns the new header (its sequence id one higher) and the slot.
pub fn add_keyslot<D: Device>(
    dev: &mut D,
    hdr: &Header,
    key: &VolumeKey,
    passphrase: &[u8],
    kdf: &Kdf,
    slot: Option<u32>,
) -> Result<(Header, u32)> {
    kdf.check_writable().map_err(|reason| Luks2Error::Options { field: "kdf", reason })?;
    check_current(dev, hdr)?;
    if !hdr.verify_key(key)? {
        return Err(Luks2Error::WrongVolumeKey);
    }
    let slot = match slot {
        Some(s) if s >= MAX_KEYSLOTS => {
            return Err(Luks2Error::Options { field: "slot", reason: format!("{s} is not below {MAX_KEYSLOTS}") });
        }
        Some(s) if hdr.metadata.keyslots.contains_key(&s) => return Err(Luks2Error::KeyslotInUse(s)),
        Some(s) => s,
        None => (0..MAX_KEYSLOTS).find(|s| !hdr.metadata.keyslots.contains_key(s)).ok_or(Luks2Error::NoFreeKeyslot)?,
    };
    let mut new = hdr.clone();
    new.store_keyslot(dev, slot, key, passphrase, kdf)?;
    new.seqid += 1;
    new.write(dev)?;
    Ok((new, slot))
}

/// Removes keyslot `slot`: its area is overwritten first, then it is dropped from the
/// metadata (and from the digest's and tokens' keyslot lists). The last keyslot is refused.
pub fn remove_keyslot<D: Device>(dev: &mut D, hdr: &Header, slot: u32) -> Result<Header> {
    check_current(dev, hdr)?;
    let ks = hdr.metadata.keyslots.get(&slot).ok_or(Luks2Error::NoKeyslot(slot))?;
    if hdr.metadata.keyslots.len() == 1 {
        return Err(Luks2Error::LastKeyslot(slot));
    }
    wipe(dev, ks.area.offset, ks.area.size)?;
    let mut new = hdr.clone();
    new.metadata.keyslots.remove(&slot);
    for d in new.metadata.digests.values_mut() {
        d.keyslots.retain(|&k| k != slot);
    }
    for t in new.metadata.tokens.values_mut() {
        t.keyslots.retain(|&k| k != slot);
    }
    new.seqid += 1;
    new.write(dev)?;
    Ok(new)
}

/// Writes token `id` (replacing one there, as Talos's `token import --token-replace` does).
pub fn set_token<D: Device>(dev: &mut D, hdr: &Header, id: u32, token: &Token) -> Result<Header> {
    check_current(dev, hdr)?;
    if id >= MAX_TOKENS {
        return Err(Luks2Error::Options { field: "token id", reason: format!("{id} is not below {MAX_TOKENS}") });
    }
    if token.kind.is_empty() {
        return Err(Luks2Error::Options { field: "token type", reason: "empty".into() });
    }
    if let Some(k) = token.keyslots.iter().find(|k| !hdr.metadata.keyslots.contains_key(k)) {
        return Err(Luks2Error::NoKeyslot(*k));
    }
    let mut new = hdr.clone();
    new.metadata.tokens.insert(id, token.clone());
    new.seqid += 1;
    new.write(dev)?;
    Ok(new)
}

/// Removes token `id`.
pub fn remove_token<D: Device>(dev: &mut D, hdr: &Header, id: u32) -> Result<Header> {
    check_current(dev, hdr)?;
    if !hdr.metadata.tokens.contains_key(&id) {
        return Err(Luks2Error::NoToken(id));
    }
    let mut new = hdr.clone();
    new.metadata.tokens.remove(&id);
    new.seqid += 1;
    new.write(dev)?;
    Ok(new)
}

/// Refuses to build on a header the device no longer holds (another writer, or a caller
/// holding an old copy): writing it would drop whatever changed since.
fn check_current<D: Device>(dev: &mut D, hdr: &Header) -> Result<()> {
    let on_disk = Header::read(dev)?;
    if on_disk != *hdr {
        return Err(Luks2Error::Stale { expected: hdr.seqid, found: on_disk.seqid });
    }
    Ok(())
}

/// Zeroes `len` bytes from `offset`.
fn wipe<D: Device>(dev: &mut D, offset: u64, len: u64) -> Result<()> {
    let io = |source| Luks2Error::Io { what: "wiping", offset, source };
    dev.seek(SeekFrom::Start(offset)).map_err(io)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        dev.write_all(&zeros[..n]).map_err(io)?;
        left -= n as u64;
    }
    Ok(())
}

fn random(buf: &mut [u8]) -> Result<()> {
    getrandom::fill(buf).map_err(Luks2Error::Random)
}

/// A random (version 4) UUID in its text form.
fn random_uuid() -> Result<String> {
    let mut b = [0u8; 16];
    random(&mut b)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let uuid = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
    b.zeroize();
    Ok(uuid)
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.bytes().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_key_debug_hides_the_key() {
        let key = VolumeKey::from_bytes(vec![0xab; 64]);
        let shown = format!("{key:?}");
        assert_eq!(shown, "VolumeKey(64 bytes, redacted)");
        assert!(!shown.to_ascii_lowercase().contains("ab,") && !shown.contains("171"));
    }

    #[test]
    fn random_uuids_are_version_4() {
        let a = random_uuid().unwrap();
        let b = random_uuid().unwrap();
        assert_ne!(a, b);
        assert!(is_uuid(&a), "{a}");
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
        assert!(!is_uuid("0dbb9714-fea5-48e9-8413-c7b839cead9"));
        assert!(!is_uuid("0dbb9714fea548e98413c7b839cead9d"));
    }

    #[test]
    fn format_unlock_add_remove_in_memory() {
        let opts = FormatOptions {
            kdf: Kdf::Pbkdf2 { hash: Hash::Sha256, iterations: 1000 },
            digest_iterations: Some(1000),
            data_offset: 1 << 20,
            ..Default::default()
        };
        let mut dev = io::Cursor::new(vec![0xeeu8; 2 << 20]);
        let (hdr, key) = format(&mut dev, &opts, b"a").unwrap();
        assert!(dev.get_ref()[512 << 10..1 << 20].iter().all(|&b| b == 0), "unused keyslot space is wiped");
        assert!(dev.get_ref()[1 << 20..].iter().all(|&b| b == 0xee), "the data is left alone");
        assert_eq!(Header::read(&mut dev).unwrap(), hdr);
        assert_eq!(hdr.unlock(&mut dev, b"a").unwrap().1.as_bytes(), key.as_bytes());

        // The same passphrase in two slots: priority decides which opens, then the id.
        let (mut hdr, slot) = add_keyslot(&mut dev, &hdr, &key, b"a", &opts.kdf, Some(5)).unwrap();
        assert_eq!((slot, hdr.seqid), (5, 2));
        assert_eq!(hdr.unlock(&mut dev, b"a").unwrap().0, 0);
        hdr.metadata.keyslots.get_mut(&5).unwrap().priority = Some(2);
        assert_eq!(hdr.unlock(&mut dev, b"a").unwrap().0, 5);
        hdr.metadata.keyslots.get_mut(&5).unwrap().priority = Some(0);
        hdr.metadata.keyslots.get_mut(&0).unwrap().priority = Some(0);
        assert!(matches!(hdr.unlock(&mut dev, b"a"), Err(Luks2Error::WrongPassphrase { tried }) if tried.is_empty()));
        assert_eq!(hdr.unlock_slot(&mut dev, 5, b"a").unwrap().as_bytes(), key.as_bytes());
        assert!(matches!(hdr.unlock_slot(&mut dev, 5, b"b"), Err(Luks2Error::WrongPassphraseForSlot { slot: 5 })));
        assert!(matches!(hdr.unlock_slot(&mut dev, 6, b"a"), Err(Luks2Error::NoKeyslot(6))));

        // A changed copy in hand is stale against the device.
        assert!(matches!(remove_keyslot(&mut dev, &hdr, 0), Err(Luks2Error::Stale { .. })));
        let hdr = Header::read(&mut dev).unwrap();
        let (hdr, slot) = add_keyslot(&mut dev, &hdr, &key, b"c", &opts.kdf, None).unwrap();
        assert_eq!(slot, 1);
        // Slots fill the keyslots area: 1 MiB − 32 KiB holds three 252 KiB areas.
        assert!(matches!(add_keyslot(&mut dev, &hdr, &key, b"d", &opts.kdf, None), Err(Luks2Error::NoSpace { .. })));
        let hdr = remove_keyslot(&mut dev, &hdr, 0).unwrap();
        assert_eq!(hdr.metadata.digests[&0].keyslots, [1, 5]);
        // The freed area is reused.
        let (hdr, slot) = add_keyslot(&mut dev, &hdr, &key, b"d", &opts.kdf, None).unwrap();
        assert_eq!((slot, hdr.metadata.keyslots[&0].area.offset), (0, 0x8000));
        assert_eq!(hdr.unlock(&mut dev, b"d").unwrap().0, 0);
        assert_eq!(hdr.unlock(&mut dev, b"c").unwrap().0, 1);

        // Too small a device for the header area and one data sector.
        let mut small = io::Cursor::new(vec![0u8; 1 << 20]);
        assert!(matches!(format(&mut small, &opts, b"a"), Err(Luks2Error::NoSpace { .. })));
    }

    #[test]
    fn format_options_are_checked() {
        let ok = FormatOptions { kdf: Kdf::Pbkdf2 { hash: Hash::Sha256, iterations: 1000 }, ..Default::default() };
        assert!(ok.validate().is_ok());
        let cases: Vec<(FormatOptions, &str)> = vec![
            (FormatOptions { cipher: "serpent-xts-plain64".into(), ..ok.clone() }, "cipher"),
            (FormatOptions { key_size_bits: 128, ..ok.clone() }, "key_size_bits"),
            (FormatOptions { sector_size: 8192, ..ok.clone() }, "sector_size"),
            (FormatOptions { label: "x".repeat(48), ..ok.clone() }, "label"),
            (FormatOptions { uuid: Some("nope".into()), ..ok.clone() }, "uuid"),
            (FormatOptions { data_offset: 16 << 20 | 512, ..ok.clone() }, "data_offset"),
            (FormatOptions { keyslot: 32, ..ok.clone() }, "keyslot"),
            (FormatOptions { digest_iterations: Some(10), ..ok.clone() }, "digest_iterations"),
            (FormatOptions { kdf: Kdf::Pbkdf2 { hash: Hash::Sha256, iterations: 10 }, ..ok.clone() }, "kdf"),
            (FormatOptions { kdf: Kdf::Argon2id { time: 4, memory_kib: 1 << 20, parallel: 8 }, ..ok.clone() }, "kdf"),
        ];
        for (opts, field) in cases {
            match opts.validate() {
                Err(Luks2Error::Options { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}

//! META: Talos's small key/value partition that outlives reinstalls and wipes, in Talos's own
//! on-disk format (go-adv's "talos" ADV), so a disk moves between Talos and talosbox with its
//! keys intact; and [`MetaStore`], the node's one writer of it.
//!
//! Layout (big-endian), at the start of the 1 MiB META partition, written twice:
//!
//! ```text
//! copy 1 at 0, copy 2 at 256 KiB, each 256 KiB:
//!   0x0000          magic1 0x5a4b3c2d
//!   0x0004 …        entries {tag u32, size u32, value[size]}, sorted by tag, then tag 0 (end)
//!   len − 36        SHA-256 of the whole copy with these 32 bytes zeroed
//!   len − 4         magic2 0xa5b4c3d2
//! ```
//!
//! Tags are one byte (Talos's API takes a uint32 and refuses anything above 255). The last
//! kilobyte of the partition may hold the syslinux ADV older Talos versions kept their keys in;
//! it is read as a fallback and rewritten only when a key is deleted from it, as Talos does.
//!
//! This module must never write a copy that does not verify, nor both copies at once: see
//! [`Meta::write`] for the order that leaves one good copy whenever the power goes.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::Digest;
use tokio::sync::{Mutex, watch};

/// Talos's tags (`pkg/machinery/meta/constants.go`).
pub mod tag {
    /// The version being upgraded from, for rollback.
    pub const UPGRADE: u8 = 6;
    pub const STAGED_UPGRADE_IMAGE_REF: u8 = 7;
    /// JSON install options of a staged upgrade.
    pub const STAGED_UPGRADE_INSTALL_OPTIONS: u8 = 8;
    /// JSON `v1alpha1.Encryption` for STATE, read before STATE (and its config) can be opened.
    pub const STATE_ENCRYPTION_CONFIG: u8 = 9;
    /// The `metal` platform's network configuration.
    pub const METAL_NETWORK_PLATFORM_CONFIG: u8 = 10;
    /// The `${code}` of a `talos.config=` download URL.
    pub const DOWNLOAD_URL_CODE: u8 = 11;
    pub const USER_RESERVED1: u8 = 12;
    pub const USER_RESERVED2: u8 = 13;
    pub const USER_RESERVED3: u8 = 14;
    /// A UUID the machine uses instead of the hardware's.
    pub const UUID_OVERRIDE: u8 = 15;
    pub const UNIQUE_MACHINE_TOKEN: u8 = 16;
    /// The bootloader a disk image was built with; wiped on first boot.
    pub const DISK_IMAGE_BOOTLOADER: u8 = 17;
}

/// One copy of the ADV.
pub const COPY_LENGTH: usize = 256 * 1024;
/// What a copy has for entries: all but magic1, the checksum and magic2.
pub const DATA_LENGTH: usize = COPY_LENGTH - 40;
/// Each entry's tag and size.
pub const ENTRY_HEADER: usize = 8;
/// Talos's META partition (its locator insists on exactly this size).
pub const PARTITION_SIZE: u64 = 1 << 20;

const MAGIC1: u32 = 0x5a4b_3c2d;
const MAGIC2: u32 = 0xa5b4_c3d2;
const CHECKSUM_AT: usize = COPY_LENGTH - 36;
const MAGIC2_AT: usize = COPY_LENGTH - 4;
const END: u32 = 0;

/// The syslinux ADV: two 512-byte copies at the very end of the partition, little-endian.
const LEGACY_COPY: usize = 512;
const LEGACY_AT: u64 = PARTITION_SIZE - 2 * LEGACY_COPY as u64;
const LEGACY_HEAD: u32 = 0x5a2d_2fa5;
const LEGACY_TOTAL: u32 = 0xa304_1767;
const LEGACY_TAIL: u32 = 0xdd28_bf64;

/// One of the two copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaCopy {
    First,
    Second,
}

impl MetaCopy {
    pub fn offset(self) -> u64 {
        match self {
            MetaCopy::First => 0,
            MetaCopy::Second => COPY_LENGTH as u64,
        }
    }
}

impl fmt::Display for MetaCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = if *self == MetaCopy::First { 1 } else { 2 };
        write!(f, "copy {n} (at byte {})", self.offset())
    }
}

/// Why a copy was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyFault {
    /// All zeroes: never written.
    Blank,
    /// The device ends inside the copy.
    Truncated {
        bytes: usize,
    },
    Magic1 {
        found: u32,
    },
    Magic2 {
        found: u32,
    },
    Checksum {
        stored: Box<[u8; 32]>,
        computed: Box<[u8; 32]>,
    },
    /// An entry runs past the end of the entries.
    Overrun {
        at: usize,
        tag: u32,
        size: u32,
    },
    /// A tag that does not fit a byte (Talos's tags are bytes).
    Tag {
        at: usize,
        tag: u32,
    },
}

impl fmt::Display for CopyFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyFault::Blank => write!(f, "blank (all zeroes)"),
            CopyFault::Truncated { bytes } => write!(f, "the device ends {bytes} bytes into it"),
            CopyFault::Magic1 { found } => write!(f, "magic1 is {found:#010x}, not {MAGIC1:#010x}"),
            CopyFault::Magic2 { found } => write!(f, "magic2 is {found:#010x}, not {MAGIC2:#010x}"),
            CopyFault::Checksum { stored, computed } => {
                write!(f, "checksum mismatch: stored {}, computed {}", hex(&stored[..]), hex(&computed[..]))
            }
            CopyFault::Overrun { at, tag, size } => {
                write!(f, "the entry at byte {at} (tag {tag}, {size} bytes) runs past the end")
            }
            CopyFault::Tag { at, tag } => write!(f, "the entry at byte {at} has tag {tag}, beyond 255"),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Where a read found the keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Origin {
    /// Nothing was ever written (or the first write never finished): no keys.
    #[default]
    Blank,
    First,
    /// Copy 1 was damaged, for this reason.
    Second {
        first: CopyFault,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("reading META {copy}: {source}")]
    Read { copy: MetaCopy, source: io::Error },
    #[error("reading the legacy syslinux ADV of META: {source}")]
    ReadLegacy { source: io::Error },
    #[error("META is damaged: copy 1 (at byte 0): {first}; copy 2 (at byte {COPY_LENGTH}): {second}")]
    Damaged { first: CopyFault, second: CopyFault },
    #[error("META key 0x00 cannot be written: tag 0 marks the end of the keys")]
    EndTag,
    #[error(
        "META key {tag:#04x}: a value of {size} bytes does not fit: {free} bytes are free, and each key takes {ENTRY_HEADER} of them besides its value"
    )]
    TooLarge { tag: u8, size: usize, free: usize },
    #[error("META key {tag:#04x} is not set")]
    NotFound { tag: u8 },
    #[error("writing META {copy}: {source}")]
    Write { copy: MetaCopy, source: io::Error },
    #[error("flushing META {copy} to the device: {source}")]
    Sync { copy: MetaCopy, source: io::Error },
    #[error("writing the legacy syslinux ADV of META: {source}")]
    WriteLegacy { source: io::Error },
    #[error("opening META at {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("locking META at {}: {source}", path.display())]
    Lock { path: PathBuf, source: io::Error },
    #[error("{}: {source}", path.display())]
    At {
        path: PathBuf,
        #[source]
        source: Box<MetaError>,
    },
    #[error("the META writer stopped: {reason}")]
    Stopped { reason: String },
}

impl MetaError {
    /// The error itself, without the device it happened on.
    pub fn inner(&self) -> &MetaError {
        match self {
            MetaError::At { source, .. } => source.inner(),
            other => other,
        }
    }

    fn at(self, path: &Path) -> MetaError {
        match self {
            e @ (MetaError::Open { .. } | MetaError::Lock { .. } | MetaError::At { .. }) => e,
            e => MetaError::At { path: path.to_path_buf(), source: Box::new(e) },
        }
    }
}

/// The keys of one META partition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Meta {
    tags: BTreeMap<u8, Vec<u8>>,
    legacy: Option<Legacy>,
    origin: Origin,
}

impl Meta {
    /// No keys.
    pub fn new() -> Meta {
        Meta::default()
    }

    /// Reads META from the start of `dev` (the partition): copy 1, else copy 2. A partition
    /// that was never written has no keys; both copies damaged is an error naming both.
    pub fn read(dev: &impl FileExt) -> Result<Meta, MetaError> {
        let first = read_copy(dev, MetaCopy::First)?;
        let (tags, origin) = match decode_copy(&first) {
            Ok(tags) => (tags, Origin::First),
            Err(first) => {
                let second = read_copy(dev, MetaCopy::Second)?;
                match decode_copy(&second) {
                    Ok(tags) => (tags, Origin::Second { first }),
                    // Both copies are always written, copy 1 first: a blank copy 2 means no
                    // write ever finished, whatever state copy 1 was left in.
                    Err(CopyFault::Blank) => (BTreeMap::new(), Origin::Blank),
                    Err(second) => return Err(MetaError::Damaged { first, second }),
                }
            }
        };
        Ok(Meta { tags, legacy: Legacy::read(dev)?, origin })
    }

    /// Which copy the keys came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// A key's value: Talos's ADV first, then the legacy syslinux ADV.
    pub fn get(&self, tag: u8) -> Option<&[u8]> {
        self.tags.get(&tag).map(Vec::as_slice).or_else(|| self.legacy.as_ref().and_then(|l| l.get(tag)))
    }

    /// Every key and its value, by tag (a key in both ADVs with Talos's value).
    pub fn iter(&self) -> impl Iterator<Item = (u8, &[u8])> {
        let mut all: BTreeMap<u8, &[u8]> = BTreeMap::new();
        if let Some(legacy) = &self.legacy {
            for (t, v) in &legacy.entries {
                all.entry(*t).or_insert(v.as_slice());
            }
        }
        for (t, v) in &self.tags {
            all.insert(*t, v.as_slice());
        }
        all.into_iter()
    }

    /// Bytes the entries take in a copy.
    pub fn used(&self) -> usize {
        self.tags.values().map(|v| v.len() + ENTRY_HEADER).sum()
    }

    /// Sets a key (in Talos's ADV), refusing a value that would not fit.
    pub fn set(&mut self, tag: u8, value: impl Into<Vec<u8>>) -> Result<(), MetaError> {
        let value = value.into();
        if u32::from(tag) == END {
            return Err(MetaError::EndTag);
        }
        let others = self.used() - self.tags.get(&tag).map_or(0, |v| v.len() + ENTRY_HEADER);
        let free = DATA_LENGTH - others;
        if value.len() + ENTRY_HEADER > free {
            return Err(MetaError::TooLarge { tag, size: value.len(), free });
        }
        self.tags.insert(tag, value);
        Ok(())
    }

    /// Removes a key from both ADVs; whether it was there.
    pub fn delete(&mut self, tag: u8) -> bool {
        let talos = self.tags.remove(&tag).is_some();
        let legacy = self.legacy.as_mut().is_some_and(|l| l.delete(tag));
        talos || legacy
    }

    /// One copy as it goes on the disk: entries by tag, the rest zero.
    pub fn encode_copy(&self) -> Vec<u8> {
        let mut buf = vec![0u8; COPY_LENGTH];
        buf[..4].copy_from_slice(&MAGIC1.to_be_bytes());
        buf[MAGIC2_AT..].copy_from_slice(&MAGIC2.to_be_bytes());
        let mut at = 4;
        for (tag, value) in &self.tags {
            buf[at..at + 4].copy_from_slice(&u32::from(*tag).to_be_bytes());
            // `set` keeps every value under DATA_LENGTH.
            buf[at + 4..at + 8].copy_from_slice(&(value.len() as u32).to_be_bytes());
            buf[at + 8..at + 8 + value.len()].copy_from_slice(value);
            at += ENTRY_HEADER + value.len();
        }
        // The end tag is the zeroes already there (none when the entries fill the space).
        let sum: [u8; 32] = sha2::Sha256::digest(&buf).into();
        buf[CHECKSUM_AT..MAGIC2_AT].copy_from_slice(&sum);
        buf
    }

    /// Writes both copies to `dev` (the partition), each flushed to the device before the
    /// next is touched.
    ///
    /// Order: copy 1, flush, copy 2, flush. While copy 1 is being written, copy 2 still holds
    /// the previous version; while copy 2 is, copy 1 already holds the new one, and readers try
    /// copy 1 first. So a power cut at any moment leaves a good copy with either the old keys
    /// or the new ones. Talos (go-adv) writes both copies in one write and flushes once at the
    /// end, which leaves the order in which the page cache reaches the disk to chance.
    pub fn write(&self, dev: &File) -> Result<(), MetaError> {
        let copy = self.encode_copy();
        for which in [MetaCopy::First, MetaCopy::Second] {
            dev.write_all_at(&copy, which.offset()).map_err(|source| MetaError::Write { copy: which, source })?;
            dev.sync_data().map_err(|source| MetaError::Sync { copy: which, source })?;
        }
        if let Some(legacy) = self.legacy.as_ref().filter(|l| l.changed) {
            let bytes = legacy.encode();
            dev.write_all_at(&bytes, LEGACY_AT).map_err(|source| MetaError::WriteLegacy { source })?;
            dev.sync_data().map_err(|source| MetaError::WriteLegacy { source })?;
        }
        Ok(())
    }
}

fn read_copy(dev: &impl FileExt, copy: MetaCopy) -> Result<Vec<u8>, MetaError> {
    let mut buf = vec![0u8; COPY_LENGTH];
    let mut filled = 0;
    while filled < COPY_LENGTH {
        match dev.read_at(&mut buf[filled..], copy.offset() + filled as u64) {
            Ok(0) => {
                buf.truncate(filled);
                break;
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(MetaError::Read { copy, source }),
        }
    }
    Ok(buf)
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The entries of one copy, or why it cannot be used.
pub fn decode_copy(buf: &[u8]) -> Result<BTreeMap<u8, Vec<u8>>, CopyFault> {
    if buf.len() < COPY_LENGTH {
        return Err(CopyFault::Truncated { bytes: buf.len() });
    }
    let buf = &buf[..COPY_LENGTH];
    if buf.iter().all(|b| *b == 0) {
        return Err(CopyFault::Blank);
    }
    let magic1 = be32(buf, 0);
    if magic1 != MAGIC1 {
        return Err(CopyFault::Magic1 { found: magic1 });
    }
    let magic2 = be32(buf, MAGIC2_AT);
    if magic2 != MAGIC2 {
        return Err(CopyFault::Magic2 { found: magic2 });
    }
    let mut stored = [0u8; 32];
    stored.copy_from_slice(&buf[CHECKSUM_AT..MAGIC2_AT]);
    let mut hasher = sha2::Sha256::new();
    hasher.update(&buf[..CHECKSUM_AT]);
    hasher.update([0u8; 32]);
    hasher.update(&buf[MAGIC2_AT..]);
    let computed: [u8; 32] = hasher.finalize().into();
    if stored != computed {
        return Err(CopyFault::Checksum { stored: Box::new(stored), computed: Box::new(computed) });
    }
    let mut tags = BTreeMap::new();
    let mut at = 4;
    while CHECKSUM_AT - at >= ENTRY_HEADER {
        let tag = be32(buf, at);
        if tag == END {
            break;
        }
        let size = be32(buf, at + 4);
        let end = at as u64 + ENTRY_HEADER as u64 + u64::from(size);
        if end > CHECKSUM_AT as u64 {
            return Err(CopyFault::Overrun { at, tag, size });
        }
        let t = u8::try_from(tag).map_err(|_| CopyFault::Tag { at, tag })?;
        // A tag written twice keeps its last value, as Talos's reader does.
        tags.insert(t, buf[at + ENTRY_HEADER..end as usize].to_vec());
        at = end as usize;
    }
    Ok(tags)
}

/// The syslinux ADV, as far as Talos uses it: entries {tag u8, len u8, value} from byte 8,
/// a head magic, a checksum word that makes the words sum to a constant, a tail magic.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Legacy {
    entries: Vec<(u8, Vec<u8>)>,
    changed: bool,
}

impl Legacy {
    /// The legacy ADV when a valid copy of it is there.
    fn read(dev: &impl FileExt) -> Result<Option<Legacy>, MetaError> {
        let mut buf = vec![0u8; 2 * LEGACY_COPY];
        match dev.read_exact_at(&mut buf, LEGACY_AT) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(source) => return Err(MetaError::ReadLegacy { source }),
        }
        Ok(buf.chunks(LEGACY_COPY).find_map(Legacy::decode))
    }

    fn decode(copy: &[u8]) -> Option<Legacy> {
        let le = |at: usize| u32::from_le_bytes([copy[at], copy[at + 1], copy[at + 2], copy[at + 3]]);
        if le(0) != LEGACY_HEAD || le(LEGACY_COPY - 4) != LEGACY_TAIL || le(4) != legacy_checksum(copy) {
            return None;
        }
        let mut entries: Vec<(u8, Vec<u8>)> = Vec::new();
        let mut at = 8;
        while at < LEGACY_COPY - 4 - 2 {
            let (tag, len) = (copy[at], usize::from(copy[at + 1]));
            if u32::from(tag) == END || at + 2 + len > LEGACY_COPY - 4 {
                break;
            }
            if !entries.iter().any(|(t, _)| *t == tag) {
                entries.push((tag, copy[at + 2..at + 2 + len].to_vec()));
            }
            at += 2 + len;
        }
        Some(Legacy { entries, changed: false })
    }

    fn get(&self, tag: u8) -> Option<&[u8]> {
        self.entries.iter().find(|(t, _)| *t == tag).map(|(_, v)| v.as_slice())
    }

    fn delete(&mut self, tag: u8) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(t, _)| *t != tag);
        self.changed |= self.entries.len() != before;
        self.entries.len() != before
    }

    /// Both copies.
    fn encode(&self) -> Vec<u8> {
        let mut copy = vec![0u8; LEGACY_COPY];
        copy[..4].copy_from_slice(&LEGACY_HEAD.to_le_bytes());
        copy[LEGACY_COPY - 4..].copy_from_slice(&LEGACY_TAIL.to_le_bytes());
        let mut at = 8;
        // What was read fitted, and deleting only frees space.
        for (tag, value) in &self.entries {
            copy[at] = *tag;
            copy[at + 1] = value.len() as u8;
            copy[at + 2..at + 2 + value.len()].copy_from_slice(value);
            at += 2 + value.len();
        }
        let sum = legacy_checksum(&copy);
        copy[4..8].copy_from_slice(&sum.to_le_bytes());
        [copy.clone(), copy].concat()
    }
}

/// The checksum word: the constant minus every word between it and the tail.
fn legacy_checksum(copy: &[u8]) -> u32 {
    copy[8..LEGACY_COPY - 4]
        .chunks(4)
        .fold(LEGACY_TOTAL, |sum, w| sum.wrapping_sub(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
}

fn flock(file: &File, op: rustix::fs::FlockOperation, path: &Path) -> Result<(), MetaError> {
    loop {
        match rustix::fs::flock(file, op) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(MetaError::Lock { path: path.to_path_buf(), source: e.into() }),
            Ok(()) => return Ok(()),
        }
    }
}

/// Reads META from the partition at `path`, under a shared lock (a writer holds it
/// exclusively, so a read never sees half a write).
pub fn load(path: &Path) -> Result<Meta, MetaError> {
    let file = File::open(path).map_err(|source| MetaError::Open { path: path.to_path_buf(), source })?;
    flock(&file, rustix::fs::FlockOperation::LockShared, path)?;
    Meta::read(&file).map_err(|e| e.at(path))
}

/// The node's one writer of META: changes run one at a time (a second waits for the first),
/// each a read, a change and a write of the partition under an exclusive lock of the device
/// (which also keeps out other processes, an installer say). Every finished write moves
/// [`MetaStore::subscribe`]'s counter, so whoever shows the keys reads them again.
pub struct MetaStore {
    lock: Arc<Mutex<()>>,
    writes: watch::Sender<u64>,
}

impl MetaStore {
    pub fn new() -> Arc<MetaStore> {
        Arc::new(MetaStore { lock: Arc::new(Mutex::new(())), writes: watch::channel(0).0 })
    }

    /// Moves after every write.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.writes.subscribe()
    }

    /// Reads META at `path`, runs `change` on it and, when that succeeds, writes it back.
    /// Nothing is written when `change` fails.
    pub async fn update<T, F>(&self, path: PathBuf, change: F) -> Result<T, MetaError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Meta) -> Result<T, MetaError> + Send + 'static,
    {
        // The guard goes with the work: a caller that gives up does not let the next change
        // start while this one is still writing.
        let held = Arc::clone(&self.lock).lock_owned().await;
        let work = tokio::task::spawn_blocking(move || {
            let _held = held;
            update_at(&path, change)
        });
        let out = work.await.map_err(|e| MetaError::Stopped { reason: e.to_string() })??;
        self.writes.send_modify(|n| *n += 1);
        Ok(out)
    }
}

fn update_at<T>(path: &Path, change: impl FnOnce(&mut Meta) -> Result<T, MetaError>) -> Result<T, MetaError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| MetaError::Open { path: path.to_path_buf(), source })?;
    flock(&file, rustix::fs::FlockOperation::LockExclusive, path)?;
    let mut meta = Meta::read(&file).map_err(|e| e.at(path))?;
    let out = change(&mut meta)?;
    meta.write(&file).map_err(|e| e.at(path))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition() -> (tempfile::NamedTempFile, File) {
        let file = tempfile::NamedTempFile::new().unwrap();
        file.as_file().set_len(PARTITION_SIZE).unwrap();
        let f = file.reopen().unwrap();
        (file, f)
    }

    #[test]
    fn a_blank_partition_has_no_keys() {
        let (_t, f) = partition();
        let meta = Meta::read(&f).unwrap();
        assert_eq!(meta.iter().count(), 0);
        assert_eq!(meta.origin(), &Origin::Blank);
    }

    #[test]
    fn keys_round_trip_through_the_partition() {
        let (_t, f) = partition();
        let mut meta = Meta::new();
        meta.set(tag::METAL_NETWORK_PLATFORM_CONFIG, b"addresses: []".to_vec()).unwrap();
        meta.set(tag::UPGRADE, "v1.9.0").unwrap();
        meta.set(tag::USER_RESERVED1, Vec::new()).unwrap();
        meta.set(0xff, vec![0xfe; 1000]).unwrap();
        meta.write(&f).unwrap();

        let back = Meta::read(&f).unwrap();
        assert_eq!(back.origin(), &Origin::First);
        assert_eq!(back.get(tag::UPGRADE), Some(&b"v1.9.0"[..]));
        assert_eq!(back.get(tag::METAL_NETWORK_PLATFORM_CONFIG), Some(&b"addresses: []"[..]));
        assert_eq!(back.get(tag::USER_RESERVED1), Some(&b""[..]));
        assert_eq!(back.get(0xff), Some(&[0xfe; 1000][..]));
        assert_eq!(back.get(tag::UUID_OVERRIDE), None);
        let tags: Vec<u8> = back.iter().map(|(t, _)| t).collect();
        assert_eq!(tags, [6, 10, 12, 0xff]);

        let mut changed = back.clone();
        assert!(changed.delete(tag::UPGRADE));
        assert!(!changed.delete(tag::UPGRADE));
        changed.write(&f).unwrap();
        let again = Meta::read(&f).unwrap();
        assert_eq!(again.get(tag::UPGRADE), None);
        assert_eq!(again.iter().count(), 3);
    }

    /// The layout worked out by hand from go-adv's description, not from `encode_copy`.
    #[test]
    fn an_encoded_copy_is_laid_out_byte_for_byte() {
        let mut meta = Meta::new();
        meta.set(tag::UUID_OVERRIDE, "ab").unwrap();
        meta.set(tag::UPGRADE, "v1").unwrap();
        let copy = meta.encode_copy();
        assert_eq!(copy.len(), 262_144);
        #[rustfmt::skip]
        let head: [u8; 28] = [
            0x5a, 0x4b, 0x3c, 0x2d,             // magic1
            0, 0, 0, 6,  0, 0, 0, 2,  b'v', b'1', // tag 6, size 2, "v1" (tags ascending)
            0, 0, 0, 15, 0, 0, 0, 2,  b'a', b'b', // tag 15, size 2, "ab"
            0, 0, 0, 0,                          // end
        ];
        assert_eq!(&copy[..28], &head);
        assert!(copy[28..262_108].iter().all(|b| *b == 0));
        assert_eq!(&copy[262_140..], &[0xa5, 0xb4, 0xc3, 0xd2]);
        // SHA-256 of the copy with the checksum field zeroed, as `sha256sum` computes it over
        // these bytes written out by a separate script.
        assert_eq!(hex(&copy[262_108..262_140]), "6da60f6ae0a664aed71ff1aec5695f9b554d02e852bfdb82647b2de14da5013e");
    }

    #[test]
    fn both_copies_on_the_partition_are_the_same() {
        let (t, f) = partition();
        let mut meta = Meta::new();
        meta.set(tag::DOWNLOAD_URL_CODE, "1234").unwrap();
        meta.write(&f).unwrap();
        let disk = std::fs::read(t.path()).unwrap();
        assert_eq!(disk.len() as u64, PARTITION_SIZE);
        assert_eq!(&disk[..COPY_LENGTH], &meta.encode_copy()[..]);
        assert_eq!(&disk[COPY_LENGTH..2 * COPY_LENGTH], &meta.encode_copy()[..]);
        assert!(disk[2 * COPY_LENGTH..].iter().all(|b| *b == 0), "nothing written past the copies");
    }

    #[test]
    fn a_damaged_copy_1_falls_back_to_copy_2() {
        let cases: [(&str, usize, u8); 4] = [
            ("magic1", 1, 0x00),
            ("an entry's value", 13, b'X'),
            ("the checksum", CHECKSUM_AT + 3, 0x55),
            ("magic2", MAGIC2_AT, 0x00),
        ];
        for (what, at, byte) in cases {
            let (_t, f) = partition();
            let mut meta = Meta::new();
            meta.set(tag::UPGRADE, "v1.2.3").unwrap();
            meta.write(&f).unwrap();
            f.write_all_at(&[byte], at as u64).unwrap();
            let back = Meta::read(&f).unwrap();
            assert_eq!(back.get(tag::UPGRADE), Some(&b"v1.2.3"[..]), "{what}");
            assert!(matches!(back.origin(), Origin::Second { .. }), "{what}: {:?}", back.origin());
        }
    }

    #[test]
    fn a_torn_first_write_reads_as_blank_and_a_torn_second_as_the_new_keys() {
        // Power lost during copy 1 of the very first write: copy 2 is still blank.
        let (_t, f) = partition();
        let mut meta = Meta::new();
        meta.set(tag::UPGRADE, "new").unwrap();
        f.write_all_at(&meta.encode_copy()[..1000], 0).unwrap();
        assert_eq!(Meta::read(&f).unwrap().origin(), &Origin::Blank);
        // Lost during copy 2: copy 1 is whole.
        f.write_all_at(&meta.encode_copy(), 0).unwrap();
        f.write_all_at(&meta.encode_copy()[..1000], COPY_LENGTH as u64).unwrap();
        let back = Meta::read(&f).unwrap();
        assert_eq!((back.origin(), back.get(tag::UPGRADE)), (&Origin::First, Some(&b"new"[..])));
    }

    #[test]
    fn both_copies_damaged_is_an_error_naming_both() {
        let (_t, f) = partition();
        let mut meta = Meta::new();
        meta.set(tag::UPGRADE, "v1").unwrap();
        meta.write(&f).unwrap();
        f.write_all_at(&[0xff], 0).unwrap();
        f.write_all_at(&[0xff], COPY_LENGTH as u64 + 13).unwrap();
        let err = Meta::read(&f).unwrap_err();
        let MetaError::Damaged { first, second } = &err else { panic!("{err}") };
        assert_eq!(first, &CopyFault::Magic1 { found: 0xff4b_3c2d });
        assert!(matches!(second, CopyFault::Checksum { .. }), "{second:?}");
        let text = err.to_string();
        assert!(text.contains("copy 1 (at byte 0): magic1 is 0xff4b3c2d"), "{text}");
        assert!(text.contains("copy 2 (at byte 262144): checksum mismatch"), "{text}");
    }

    #[test]
    fn garbage_is_not_taken_for_blank() {
        let (_t, f) = partition();
        f.write_all_at(&[1], 7).unwrap();
        f.write_all_at(&[1], COPY_LENGTH as u64 + 7).unwrap();
        assert!(matches!(Meta::read(&f), Err(MetaError::Damaged { .. })));
    }

    #[test]
    fn a_device_too_small_is_damaged_not_blank() {
        let file = tempfile::NamedTempFile::new().unwrap();
        file.as_file().set_len(300 * 1024).unwrap();
        let err = Meta::read(file.as_file()).unwrap_err();
        assert!(
            matches!(
                &err,
                MetaError::Damaged { first: CopyFault::Blank, second: CopyFault::Truncated { bytes: 45056 } }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn entries_that_run_past_the_end_or_do_not_fit_a_byte_are_faults() {
        let stamp = |mut copy: Vec<u8>| {
            copy[CHECKSUM_AT..MAGIC2_AT].fill(0);
            let sum: [u8; 32] = sha2::Sha256::digest(&copy).into();
            copy[CHECKSUM_AT..MAGIC2_AT].copy_from_slice(&sum);
            copy
        };
        let mut meta = Meta::new();
        meta.set(tag::UPGRADE, "v1").unwrap();
        let mut copy = meta.encode_copy();
        copy[8..12].copy_from_slice(&(DATA_LENGTH as u32).to_be_bytes());
        assert_eq!(decode_copy(&stamp(copy)), Err(CopyFault::Overrun { at: 4, tag: 6, size: DATA_LENGTH as u32 }));
        let mut copy = meta.encode_copy();
        copy[4..8].copy_from_slice(&256u32.to_be_bytes());
        assert_eq!(decode_copy(&stamp(copy)), Err(CopyFault::Tag { at: 4, tag: 256 }));
    }

    #[test]
    fn values_are_refused_when_they_do_not_fit_naming_the_key() {
        let mut meta = Meta::new();
        // One key can take everything.
        meta.set(tag::USER_RESERVED1, vec![7; DATA_LENGTH - ENTRY_HEADER]).unwrap();
        assert_eq!(meta.used(), DATA_LENGTH);
        let err = meta.set(tag::USER_RESERVED2, Vec::new()).unwrap_err();
        assert!(matches!(err, MetaError::TooLarge { tag: 13, size: 0, free: 0 }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "META key 0x0d: a value of 0 bytes does not fit: 0 bytes are free, and each key takes 8 of them besides its value"
        );
        // Replacing a value counts the space the old one frees.
        meta.set(tag::USER_RESERVED1, vec![1; 100]).unwrap();
        meta.set(tag::USER_RESERVED2, vec![2; DATA_LENGTH - 116]).unwrap();
        assert!(matches!(
            meta.set(tag::USER_RESERVED3, vec![3; 1]),
            Err(MetaError::TooLarge { tag: 14, size: 1, free: 0 })
        ));
        let err = Meta::new().set(tag::UPGRADE, vec![0; DATA_LENGTH]).unwrap_err();
        assert!(matches!(err, MetaError::TooLarge { tag: 6, free: DATA_LENGTH, .. }), "{err:?}");
        assert!(matches!(Meta::new().set(0, "x"), Err(MetaError::EndTag)));

        // A full META still verifies: no room for the end tag is needed.
        let (_t, f) = partition();
        let mut full = Meta::new();
        full.set(tag::USER_RESERVED1, vec![9; DATA_LENGTH - ENTRY_HEADER]).unwrap();
        full.write(&f).unwrap();
        assert_eq!(Meta::read(&f).unwrap().get(tag::USER_RESERVED1).map(<[u8]>::len), Some(DATA_LENGTH - 8));
    }

    /// A syslinux ADV laid out by hand: head magic, checksum word, {tag, len, value}…, tail.
    fn legacy_copy(entries: &[(u8, &[u8])]) -> Vec<u8> {
        let mut c = vec![0u8; 512];
        c[..4].copy_from_slice(&0x5a2d_2fa5u32.to_le_bytes());
        c[508..].copy_from_slice(&0xdd28_bf64u32.to_le_bytes());
        let mut at = 8;
        for (t, v) in entries {
            c[at] = *t;
            c[at + 1] = v.len() as u8;
            c[at + 2..at + 2 + v.len()].copy_from_slice(v);
            at += 2 + v.len();
        }
        let words: u32 =
            c[8..508].chunks(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())).fold(0, u32::wrapping_add);
        c[4..8].copy_from_slice(&0xa304_1767u32.wrapping_sub(words).to_le_bytes());
        c
    }

    #[test]
    fn the_legacy_syslinux_adv_is_read_and_deleted_from() {
        let (t, f) = partition();
        let copy = legacy_copy(&[(tag::UPGRADE, b"v1.3.0"), (tag::STAGED_UPGRADE_IMAGE_REF, b"ghcr.io/x")]);
        f.write_all_at(&[copy.clone(), copy].concat(), PARTITION_SIZE - 1024).unwrap();
        let mut meta = Meta::read(&f).unwrap();
        assert_eq!(meta.origin(), &Origin::Blank);
        assert_eq!(meta.get(tag::UPGRADE), Some(&b"v1.3.0"[..]));
        // A value in Talos's ADV wins over the legacy one.
        meta.set(tag::UPGRADE, "v1.9.0").unwrap();
        assert_eq!(meta.get(tag::UPGRADE), Some(&b"v1.9.0"[..]));
        meta.write(&f).unwrap();
        let before = std::fs::read(t.path()).unwrap();
        assert_eq!(
            &before[PARTITION_SIZE as usize - 1024..][..512],
            &legacy_copy(&[(6, b"v1.3.0"), (7, b"ghcr.io/x")])
        );

        // Deleting removes the key from both, and the legacy ADV is rewritten as syslinux would.
        let mut meta = Meta::read(&f).unwrap();
        assert!(meta.delete(tag::UPGRADE));
        assert_eq!(meta.get(tag::UPGRADE), None);
        meta.write(&f).unwrap();
        let after = std::fs::read(t.path()).unwrap();
        let want = legacy_copy(&[(tag::STAGED_UPGRADE_IMAGE_REF, b"ghcr.io/x")]);
        assert_eq!(&after[PARTITION_SIZE as usize - 1024..], &[want.clone(), want].concat()[..]);
        let back = Meta::read(&f).unwrap();
        assert_eq!(back.get(tag::UPGRADE), None);
        assert_eq!(back.get(tag::STAGED_UPGRADE_IMAGE_REF), Some(&b"ghcr.io/x"[..]));
    }

    #[test]
    fn a_damaged_legacy_adv_is_ignored() {
        let (_t, f) = partition();
        let mut copy = legacy_copy(&[(tag::UPGRADE, b"v1.3.0")]);
        copy[12] ^= 1;
        f.write_all_at(&copy, PARTITION_SIZE - 1024).unwrap();
        assert_eq!(Meta::read(&f).unwrap().get(tag::UPGRADE), None);
        // Its second copy stands in, as in syslinux.
        f.write_all_at(&legacy_copy(&[(tag::UPGRADE, b"v1.3.0")]), PARTITION_SIZE - 512).unwrap();
        assert_eq!(Meta::read(&f).unwrap().get(tag::UPGRADE), Some(&b"v1.3.0"[..]));
    }

    #[tokio::test]
    async fn the_store_writes_one_change_at_a_time_and_counts_them() {
        let (t, _f) = partition();
        let store = MetaStore::new();
        let mut writes = store.subscribe();
        let path = t.path().to_path_buf();
        let tasks: Vec<_> = (1..=20u8)
            .map(|n| {
                let (store, path) = (Arc::clone(&store), path.clone());
                tokio::spawn(async move { store.update(path, move |m| m.set(n, vec![n; 10])).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        // Every change read what the one before wrote: none was lost.
        let meta = load(&path).unwrap();
        assert_eq!(meta.iter().count(), 20);
        assert_eq!(*writes.borrow_and_update(), 20);

        let err =
            store.update(path.clone(), |m| if m.delete(99) { Ok(()) } else { Err(MetaError::NotFound { tag: 99 }) });
        assert!(matches!(err.await, Err(MetaError::NotFound { tag: 99 })));
        assert!(!writes.has_changed().unwrap(), "a failed change writes nothing");

        let missing = store.update(PathBuf::from("/nonexistent/meta"), |m| m.set(1, "x")).await.unwrap_err();
        assert_eq!(missing.to_string().split(':').next(), Some("opening META at /nonexistent/meta"));
    }
}

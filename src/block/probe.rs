//! The node's blkid: which signature a disk or partition carries — a GPT partition table, or
//! the superblock of a file system, swap area or LUKS container — with the name, label, UUID,
//! block sizes and size that Talos's DiscoveryController puts into a DiscoveredVolume. It
//! runs on every block device at boot, so it reads only the sectors each signature lives in
//! (one 4 KiB read covers most), and it must never write to a device, never mount one, and
//! never index with a field it has not range-checked: any bytes at all are a valid input.
//!
//! Names are Talos's (go-blockdevice's `blkid` package): `xfs`, `extfs` for ext2/3/4, `vfat`,
//! `iso9660`, `squashfs`, `swap`, `luks`, `gpt`. [`Signature::blkid_type`] keeps blkid's TYPE
//! (or PTTYPE) beside it, and the values — LABEL, UUID, BLOCK_SIZE, PTUUID — are blkid's, so
//! `blkid -p -o export` on the same device is the cross-check. Listing GPT entries is
//! `block::gpt`'s job; here only the table and its disk GUID are found.
//!
//! On-disk facts and the checks that make a magic number a signature (libblkid's, carried
//! over): LUKS `LUKS\xba\xbe` with version 1 or 2 at 0 (a LUKS2 primary header records its
//! own offset, 0); xfs `XFSB` at 0, its geometry sane and, for v5, the superblock's CRC-32C;
//! ext `0xEF53` at 1024 + 0x38, the superblock's CRC-32C when it has `metadata_csum`, its
//! feature flags telling ext2 (no journal), ext3 (journal, no newer features) and ext4 apart;
//! squashfs `hsqs` at 0 with major version ≥ 4; swap `SWAPSPACE2` in the last ten bytes of
//! the first page (4 to 64 KiB) with its header at 1024, on at least ten pages; vfat a sane
//! BIOS parameter block (`fat.rs`); ISO 9660 a primary volume descriptor at 32 KiB
//! (`iso9660.rs`); GPT a protective MBR (a 0xEE entry) and a header at LBA 1, or the backup
//! at the last LBA, whose CRC-32, own LBA and usable range hold.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::fat::Fat;
use super::iso9660::Iso9660;
use super::{le16, le32, read_at};
use crate::block::gpt::crc32;

/// What is read at once from the start of a device: every signature but ISO 9660, the
/// larger swap pages and the backup GPT header lives in it.
const HEAD: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("opening {path} to probe it: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("{path} is held by another program (a formatter or partitioner); probe it again later")]
    Locked { path: PathBuf },
    #[error("sizing {path}: {source}")]
    Size { path: PathBuf, source: io::Error },
    #[error("reading the {signature} signature: {source}")]
    Read { signature: &'static str, source: io::Error },
    #[error("probing {path}: {source}")]
    Device { path: PathBuf, source: Box<ProbeError> },
}

/// A signature this prober knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    Gpt,
    Xfs,
    Ext2,
    Ext3,
    Ext4,
    Vfat,
    Iso9660,
    Squashfs,
    Swap,
    Luks1,
    Luks2,
}

impl Signature {
    /// Talos's name, the DiscoveredVolume's `name`.
    pub fn name(self) -> &'static str {
        match self {
            Signature::Gpt => "gpt",
            Signature::Xfs => "xfs",
            Signature::Ext2 | Signature::Ext3 | Signature::Ext4 => "extfs",
            Signature::Vfat => "vfat",
            Signature::Iso9660 => "iso9660",
            Signature::Squashfs => "squashfs",
            Signature::Swap => "swap",
            Signature::Luks1 | Signature::Luks2 => "luks",
        }
    }

    /// blkid's TYPE, or its PTTYPE for a partition table.
    pub fn blkid_type(self) -> &'static str {
        match self {
            Signature::Gpt => "gpt",
            Signature::Xfs => "xfs",
            Signature::Ext2 => "ext2",
            Signature::Ext3 => "ext3",
            Signature::Ext4 => "ext4",
            Signature::Vfat => "vfat",
            Signature::Iso9660 => "iso9660",
            Signature::Squashfs => "squashfs",
            Signature::Swap => "swap",
            Signature::Luks1 | Signature::Luks2 => "crypto_LUKS",
        }
    }

    pub fn is_partition_table(self) -> bool {
        self == Signature::Gpt
    }
}

/// The bytes of a device to probe: a whole disk, or a partition of it by its byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub offset: u64,
    pub size: u64,
    /// The device's logical sector size: GPT headers sit at LBA 1 and at the last LBA.
    pub sector_size: u32,
}

impl Region {
    pub fn whole(size: u64, sector_size: u32) -> Region {
        Region { offset: 0, size, sector_size }
    }
}

/// What a region carries, in the DiscoveredVolume's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probed {
    pub signature: Signature,
    pub label: Option<String>,
    /// As blkid prints it: a lower-case RFC 4122 UUID, vfat's `XXXX-XXXX` serial, ISO 9660's
    /// volume date, GPT's disk GUID (PTUUID).
    pub uuid: Option<String>,
    /// blkid's BLOCK_SIZE: the sector size for xfs, vfat and GPT, the block for ext, ISO 9660,
    /// squashfs, and the page for swap; 0 for LUKS.
    pub block_size: u32,
    /// The allocation unit: the block, vfat's cluster, swap's page; 0 for GPT and LUKS.
    pub filesystem_block_size: u32,
    /// The size the signature claims: the file system's (xfs without its internal log, as
    /// blkid's FSSIZE), swap's pages, GPT's usable area; 0 for LUKS.
    pub probed_size: u64,
    /// The formatter stopped before it finished (xfs's `sb_inprogress`, which mkfs.xfs sets
    /// in the first superblock it writes and clears last): the kernel will not mount it and
    /// it holds no data.
    pub unfinished: bool,
}

impl Probed {
    /// Talos's name for what was found.
    pub fn name(&self) -> &'static str {
        self.signature.name()
    }
}

/// What `region` of `dev` carries, `Ok(None)` for nothing known (zeros, garbage, a signature
/// whose checks fail, a region too short for it). Only read errors are errors.
///
/// The first signature found wins, in this order. LUKS, xfs and squashfs own byte 0, and
/// ext and swap the sectors after the first KiB, where GPT keeps its header and entries: a
/// valid one of them was written over any table that was there. Where a file system and a
/// GPT really coexist blkid reports both (TYPE and PTTYPE) and a DiscoveredVolume has room
/// for one name, so Talos's order decides: vfat before GPT (a FAT that sgdisk later gave a
/// protective MBR, keeping its boot code), and GPT before ISO 9660 (an isohybrid image with
/// a GPT, whose partitions are then found in turn).
pub fn probe<D: FileExt>(dev: &D, region: Region) -> Result<Option<Probed>, ProbeError> {
    // blkid's floor, which also keeps the 1 KiB device of an MBR extended partition (a copy
    // of a boot sector) from passing for what it points into.
    if region.size <= 1024 {
        return Ok(None);
    }
    let mut win = Window { dev, region, pos: 0 };
    let mut buf = [0u8; HEAD];
    let head = win.head(&mut buf)?;
    if let Some(found) = luks(head) {
        return Ok(Some(found));
    }
    if let Some(found) = xfs(&mut win, head)? {
        return Ok(Some(found));
    }
    if let Some(found) = ext(head).or_else(|| squashfs(head)) {
        return Ok(Some(found));
    }
    if let Some(found) = swap(&mut win, head)? {
        return Ok(Some(found));
    }
    if let Some(found) = vfat(&mut win)? {
        return Ok(Some(found));
    }
    if let Some(found) = gpt(&mut win, head)? {
        return Ok(Some(found));
    }
    iso9660(&mut win)
}

/// Opens `path` read-only and probes all of it. The shared lock udev also takes keeps this
/// from reading a superblock a formatter holding the exclusive one is half-way through.
pub fn probe_path(path: &Path, sector_size: u32) -> Result<Option<Probed>, ProbeError> {
    let file = File::open(path).map_err(|source| ProbeError::Open { path: path.to_path_buf(), source })?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Err(ProbeError::Locked { path: path.to_path_buf() }),
        Err(e) => return Err(ProbeError::Open { path: path.to_path_buf(), source: e.into() }),
    }
    // The end of a block device is its size; its metadata's length is 0.
    let size =
        (&file).seek(SeekFrom::End(0)).map_err(|source| ProbeError::Size { path: path.to_path_buf(), source })?;
    probe(&file, Region::whole(size, sector_size))
        .map_err(|e| ProbeError::Device { path: path.to_path_buf(), source: Box::new(e) })
}

/// `region` of `dev` as a reader that ends where the region does.
struct Window<'a, D> {
    dev: &'a D,
    region: Region,
    pos: u64,
}

impl<D: FileExt> Read for Window<'_, D> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.region.size.saturating_sub(self.pos);
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if n == 0 {
            return Ok(0);
        }
        let at = self
            .region
            .offset
            .checked_add(self.pos)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an offset past 2^64"))?;
        let got = self.dev.read_at(&mut buf[..n], at)?;
        self.pos += got as u64;
        Ok(got)
    }
}

impl<D> Seek for Window<'_, D> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::End(delta) => self.region.size.checked_add_signed(delta),
            SeekFrom::Current(delta) => self.pos.checked_add_signed(delta),
        };
        self.pos = pos.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a seek outside 0..2^64"))?;
        Ok(self.pos)
    }
}

impl<D: FileExt> Window<'_, D> {
    /// The first bytes of the region, fewer when it (or the device) is shorter.
    fn head<'b>(&mut self, buf: &'b mut [u8; HEAD]) -> Result<&'b [u8], ProbeError> {
        let err = |source| ProbeError::Read { signature: "any", source };
        self.seek(SeekFrom::Start(0)).map_err(err)?;
        let mut filled = 0;
        while filled < HEAD {
            match self.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(e)),
            }
        }
        Ok(&buf[..filled])
    }

    /// Fills `buf` from `offset` of the region; `Ok(false)` when the region ends first.
    fn at(&mut self, signature: &'static str, offset: u64, buf: &mut [u8]) -> Result<bool, ProbeError> {
        read_at(self, offset, buf).map_err(|source| ProbeError::Read { signature, source })
    }
}

fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(array(b, at))
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(array(b, at))
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(array(b, at))
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(array(b, at))
}

/// A fixed-size text field as blkid sets a label: up to its first NUL, trailing white space
/// trimmed, none when empty.
fn text(raw: &[u8]) -> Option<String> {
    let raw = raw.split(|&b| b == 0).next().unwrap_or_default();
    let s = String::from_utf8_lossy(raw);
    let s = s.trim_end();
    (!s.is_empty()).then(|| s.to_string())
}

/// 16 bytes in RFC 4122 order as blkid prints them; none when all zero, as blkid.
fn uuid_text(b: &[u8]) -> Option<String> {
    if b.iter().all(|&x| x == 0) {
        return None;
    }
    let hex = |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    Some(format!("{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16)))
}

/// A GPT GUID: its first three fields are stored little-endian.
fn guid_text(b: &[u8]) -> Option<String> {
    let mut u: [u8; 16] = array(b, 0);
    u[0..4].reverse();
    u[4..6].reverse();
    u[6..8].reverse();
    uuid_text(&u)
}

/// CRC-32C (Castagnoli, reflected) register after `data`, from `state` (`!0` to start). The
/// ext4 superblock stores the register; xfs, as the standard does, its complement.
fn crc32c(state: u32, data: &[u8]) -> u32 {
    data.iter().fold(state, |crc, &byte| {
        (0..8).fold(crc ^ u32::from(byte), |c, _| if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 })
    })
}

fn luks(head: &[u8]) -> Option<Probed> {
    let h = head.get(..512)?;
    if h[..6] != *b"LUKS\xba\xbe" {
        return None;
    }
    let signature = match be16(h, 6) {
        1 => Signature::Luks1,
        // The primary LUKS2 header records its own offset; a secondary one is not at 0.
        2 if be64(h, 256) == 0 => Signature::Luks2,
        _ => return None,
    };
    Some(Probed {
        signature,
        // Both versions keep the UUID as text at 168; only LUKS2 has a label (at 24).
        uuid: text(&h[168..208]),
        label: if signature == Signature::Luks2 { text(&h[24..72]) } else { None },
        block_size: 0,
        filesystem_block_size: 0,
        probed_size: 0,
        unfinished: false,
    })
}

fn xfs<D: FileExt>(win: &mut Window<'_, D>, head: &[u8]) -> Result<Option<Probed>, ProbeError> {
    let Some(sb) = head.get(..512) else { return Ok(None) };
    if sb[..4] != *b"XFSB" {
        return Ok(None);
    }
    let block = be32(sb, 4);
    let dblocks = be64(sb, 8);
    let logstart = be64(sb, 48);
    let rext = u64::from(be32(sb, 80)) * u64::from(block);
    let agblocks = u64::from(be32(sb, 84));
    let agcount = u64::from(be32(sb, 88));
    let logblocks = be32(sb, 96);
    let version = be16(sb, 100);
    let sector = be16(sb, 102);
    let inode = be16(sb, 104);
    let (blocklog, sectlog, inodelog, inopblog, imax_pct) = (sb[120], sb[121], sb[122], sb[123], sb[127]);
    let sane = agcount > 0
        && (9..=15).contains(&sectlog)
        && u32::from(sector) == 1 << sectlog
        && (9..=16).contains(&blocklog)
        && block == 1 << blocklog
        && (8..=11).contains(&inodelog)
        && u32::from(inode) == 1 << inodelog
        && blocklog.checked_sub(inodelog) == Some(inopblog)
        && (4096..=1 << 30).contains(&rext)
        && imax_pct <= 100
        && dblocks != 0
        && dblocks <= agcount * agblocks
        && dblocks >= (agcount - 1) * agblocks + 64;
    if !sane {
        return Ok(None);
    }
    if version & 0xF == 5 {
        // v5 needs the "more bits" version flag and the CRC feature, and the sector's CRC
        // (computed with its own field as zeros) to hold.
        if version & 0x8000 == 0 || be32(sb, 200) & 0x100 == 0 {
            return Ok(None);
        }
        let mut big = Vec::new();
        let sector = usize::from(sector);
        let bytes = match head.get(..sector) {
            Some(b) => b,
            None => {
                big.resize(sector, 0);
                if !win.at("xfs", 0, &mut big)? {
                    return Ok(None);
                }
                &big
            }
        };
        let crc = crc32c(crc32c(crc32c(!0, &bytes[..224]), &[0; 4]), &bytes[228..]);
        if le32(bytes, 224) != !crc {
            return Ok(None);
        }
    }
    let log = if logstart != 0 { u64::from(logblocks) } else { 0 };
    Ok(Some(Probed {
        signature: Signature::Xfs,
        label: text(&sb[108..120]),
        uuid: uuid_text(&sb[32..48]),
        block_size: u32::from(sector),
        filesystem_block_size: block,
        probed_size: dblocks.saturating_sub(log).saturating_mul(u64::from(block)),
        unfinished: sb[126] != 0,
    }))
}

const EXT_COMPAT_HAS_JOURNAL: u32 = 0x0004;
const EXT_INCOMPAT_JOURNAL_DEV: u32 = 0x0008;
const EXT_INCOMPAT_64BIT: u32 = 0x0080;
const EXT_RO_COMPAT_METADATA_CSUM: u32 = 0x0400;
/// What ext3 understands (sparse_super, large_file, btree_dir; filetype, recover, meta_bg):
/// a feature outside these makes ext4.
const EXT3_RO_COMPAT: u32 = 0x0001 | 0x0002 | 0x0004;
const EXT3_INCOMPAT: u32 = 0x0002 | 0x0004 | 0x0010;

fn ext(head: &[u8]) -> Option<Probed> {
    let sb = head.get(1024..2048)?;
    if le16(sb, 0x38) != 0xEF53 {
        return None;
    }
    let (compat, incompat, ro_compat) = (le32(sb, 0x5C), le32(sb, 0x60), le32(sb, 0x64));
    let log_block = le32(sb, 0x18);
    if ro_compat & EXT_RO_COMPAT_METADATA_CSUM != 0 {
        if le32(sb, 0x3FC) != crc32c(!0, &sb[..0x3FC]) {
            return None;
        }
    } else if log_block >= 256 {
        // Without a checksum, a block size past any ext's keeps stray magic out.
        return None;
    }
    if incompat & EXT_INCOMPAT_JOURNAL_DEV != 0 {
        // An external journal (blkid's jbd), not a file system.
        return None;
    }
    let signature = if ro_compat & !EXT3_RO_COMPAT != 0 || incompat & !EXT3_INCOMPAT != 0 {
        Signature::Ext4
    } else if compat & EXT_COMPAT_HAS_JOURNAL != 0 {
        Signature::Ext3
    } else {
        Signature::Ext2
    };
    let block = if log_block < 22 { 1024u32 << log_block } else { 0 };
    let hi = if incompat & EXT_INCOMPAT_64BIT != 0 { u64::from(le32(sb, 0x150)) << 32 } else { 0 };
    let blocks = u64::from(le32(sb, 0x04)) | hi;
    Some(Probed {
        signature,
        label: text(&sb[0x78..0x88]),
        uuid: uuid_text(&sb[0x68..0x78]),
        block_size: block,
        filesystem_block_size: block,
        probed_size: blocks.saturating_mul(u64::from(block)),
        unfinished: false,
    })
}

fn squashfs(head: &[u8]) -> Option<Probed> {
    let sb = head.get(..96)?;
    // Version 4 is little-endian only; older ones are blkid's "squashfs3".
    if sb[..4] != *b"hsqs" || le16(sb, 28) < 4 {
        return None;
    }
    let block = le32(sb, 12);
    Some(Probed {
        signature: Signature::Squashfs,
        label: None,
        uuid: None,
        block_size: block,
        filesystem_block_size: block,
        probed_size: le64(sb, 40),
        unfinished: false,
    })
}

fn swap<D: FileExt>(win: &mut Window<'_, D>, head: &[u8]) -> Result<Option<Probed>, ProbeError> {
    // blkid's floor: ten 4 KiB pages.
    if win.region.size < 10 * 4096 {
        return Ok(None);
    }
    let Some(hdr) = head.get(1024..1540) else { return Ok(None) };
    // TuxOnIce keeps a swap signature behind its own magic at 0.
    if head[..8] == *b"\xed\xc3\x02\xe9\x98\x56\xe5\x0c" {
        return Ok(None);
    }
    let mut page = None;
    for size in [4096usize, 8192, 16384, 32768, 65536] {
        let mut magic = [0u8; 10];
        match head.get(size - 10..size) {
            Some(m) => magic.copy_from_slice(m),
            None if win.at("swap", size as u64 - 10, &mut magic)? => {}
            None => break,
        }
        match &magic {
            b"SWAPSPACE2" => {
                page = Some(size as u32);
                break;
            }
            // Version 0, without label or UUID: unwritten since Linux 2.5; Talos ignores it.
            b"SWAP-SPACE" => return Ok(None),
            _ => {}
        }
    }
    let Some(page) = page else { return Ok(None) };
    // The header is in the writer's byte order: version 1 tells which.
    let lastpage = match le32(hdr, 0) {
        1 => le32(hdr, 4),
        v if v.swap_bytes() == 1 => be32(hdr, 4),
        _ => return Ok(None),
    };
    if lastpage == 0 {
        return Ok(None);
    }
    // blkid's sanity check before trusting label and UUID: two padding words are zero.
    let clean = le32(hdr, 44 + 128) == 0 && le32(hdr, 44 + 132) == 0;
    Ok(Some(Probed {
        signature: Signature::Swap,
        label: if clean { text(&hdr[28..44]) } else { None },
        uuid: if clean { uuid_text(&hdr[12..28]) } else { None },
        block_size: page,
        filesystem_block_size: page,
        probed_size: u64::from(page) * u64::from(lastpage),
        unfinished: false,
    }))
}

/// A reader's verdict on bytes that are not its file system (InvalidData) is "not this one";
/// anything else is a read error.
fn not_it<T>(signature: &'static str, r: io::Result<Option<T>>) -> Result<Option<T>, ProbeError> {
    match r {
        Ok(found) => Ok(found),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(None),
        Err(source) => Err(ProbeError::Read { signature, source }),
    }
}

fn vfat<D: FileExt>(win: &mut Window<'_, D>) -> Result<Option<Probed>, ProbeError> {
    let Some(mut fs) = not_it("vfat", Fat::open(&mut *win))? else { return Ok(None) };
    // The label is in the root directory; one that cannot be read is no label.
    let label = not_it("vfat", fs.label().map(Some))?.and_then(|l| text(l.as_bytes()));
    Ok(Some(Probed {
        signature: Signature::Vfat,
        label,
        uuid: fs.serial().map(|s| format!("{:04X}-{:04X}", s >> 16, s & 0xFFFF)),
        block_size: fs.sector_size(),
        filesystem_block_size: u32::try_from(fs.cluster_size()).unwrap_or(0),
        probed_size: fs.size(),
        unfinished: false,
    }))
}

fn iso9660<D: FileExt>(win: &mut Window<'_, D>) -> Result<Option<Probed>, ProbeError> {
    let Some(fs) = not_it("iso9660", Iso9660::open(&mut *win))? else { return Ok(None) };
    Ok(Some(Probed {
        signature: Signature::Iso9660,
        label: text(fs.label().as_bytes()),
        uuid: fs.uuid().map(str::to_string),
        block_size: fs.block_size(),
        filesystem_block_size: fs.block_size(),
        probed_size: fs.size(),
        unfinished: false,
    }))
}

fn gpt<D: FileExt>(win: &mut Window<'_, D>, head: &[u8]) -> Result<Option<Probed>, ProbeError> {
    let sector = win.region.sector_size as usize;
    if !matches!(sector, 512 | 1024 | 2048 | 4096) {
        return Ok(None);
    }
    let Some(mbr) = head.get(..512) else { return Ok(None) };
    if mbr[510..512] != [0x55, 0xAA] || !(0..4).any(|i| mbr[446 + 16 * i + 4] == 0xEE) {
        return Ok(None);
    }
    let sectors = win.region.size / sector as u64;
    if sectors < 3 {
        return Ok(None);
    }
    let last = sectors - 1;
    let found = match gpt_header(win, head, 1, last)? {
        Some(found) => Some(found),
        None => gpt_header(win, head, last, last)?,
    };
    let Some((guid, first_usable, last_usable)) = found else { return Ok(None) };
    Ok(Some(Probed {
        signature: Signature::Gpt,
        label: None,
        uuid: guid_text(&guid),
        block_size: sector as u32,
        filesystem_block_size: 0,
        probed_size: (last_usable - first_usable + 1) * sector as u64,
        unfinished: false,
    }))
}

/// The disk GUID and usable LBA range of a valid GPT header at `lba`.
fn gpt_header<D: FileExt>(
    win: &mut Window<'_, D>,
    head: &[u8],
    lba: u64,
    last: u64,
) -> Result<Option<([u8; 16], u64, u64)>, ProbeError> {
    let size = win.region.sector_size as usize;
    let mut buf = [0u8; 4096];
    let h = &mut buf[..size];
    let at = lba * size as u64;
    match usize::try_from(at).ok().and_then(|a| head.get(a..a.checked_add(size)?)) {
        Some(bytes) => h.copy_from_slice(bytes),
        None if win.at("gpt", at, h)? => {}
        None => return Ok(None),
    }
    if h[..8] != *b"EFI PART" {
        return Ok(None);
    }
    let header_size = le32(h, 12) as usize;
    if !(92..=size).contains(&header_size) {
        return Ok(None);
    }
    let stored = le32(h, 16);
    h[16..20].fill(0);
    if crc32(&h[..header_size]) != stored || le64(h, 24) != lba {
        return Ok(None);
    }
    let (first, last_usable) = (le64(h, 40), le64(h, 48));
    if last_usable < first || first > last || last_usable > last || (first < lba && lba < last_usable) {
        return Ok(None);
    }
    let entries = u64::from(le32(h, 80)) * u64::from(le32(h, 84));
    if le32(h, 84) != 128 || entries == 0 || entries >= u64::from(u32::MAX) {
        return Ok(None);
    }
    Ok(Some((array(h, 56), first, last_usable)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::process::Command;

    /// Runs `cmd`, which must succeed; its standard output.
    fn run(cmd: &mut Command) -> String {
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?} runs: {e}"));
        let said = || String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{cmd:?}: {}", said());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `blkid -p -o export` of `path`, with `extra` arguments; empty when blkid finds nothing.
    fn blkid_with(path: &Path, extra: &[&str]) -> BTreeMap<String, String> {
        let out = Command::new("blkid")
            .args(["-p", "-o", "export"])
            .args(extra)
            .arg(path)
            .output()
            .expect("blkid (util-linux) runs");
        match out.status.code() {
            Some(0) => {}
            Some(2) => return BTreeMap::new(),
            _ => panic!("blkid {path:?}: {}", String::from_utf8_lossy(&out.stderr)),
        }
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| {
                // export escapes blanks and the like with a backslash.
                let mut value = String::new();
                let mut chars = v.chars();
                while let Some(c) = chars.next() {
                    value.push(if c == '\\' { chars.next().unwrap_or('\\') } else { c });
                }
                (k.to_string(), value)
            })
            .collect()
    }

    fn blkid(path: &Path) -> BTreeMap<String, String> {
        blkid_with(path, &[])
    }

    /// A sparse file of `bytes`.
    fn sparse(dir: &Path, name: &str, bytes: u64) -> PathBuf {
        let path = dir.join(name);
        File::create(&path).unwrap().set_len(bytes).unwrap();
        path
    }

    /// Every value blkid reports for what we found, against ours.
    fn same_as_blkid(ours: &Probed, b: &BTreeMap<String, String>, what: &str) {
        let get = |k: &str| b.get(k).map(String::as_str);
        if ours.signature.is_partition_table() {
            assert_eq!(get("PTTYPE"), Some(ours.signature.blkid_type()), "{what}: {b:?}");
            assert_eq!(get("PTUUID"), ours.uuid.as_deref(), "{what}: PTUUID");
            return;
        }
        assert_eq!(get("TYPE"), Some(ours.signature.blkid_type()), "{what}: {b:?}");
        assert_eq!(get("LABEL"), ours.label.as_deref(), "{what}: LABEL");
        assert_eq!(get("UUID"), ours.uuid.as_deref(), "{what}: UUID");
        // blkid 2.38 prints BLOCK_SIZE for these four; later ones for squashfs and swap too.
        let has_block_size =
            matches!(ours.signature, Signature::Xfs | Signature::Ext2 | Signature::Ext3 | Signature::Ext4)
                || matches!(ours.signature, Signature::Vfat | Signature::Iso9660);
        assert!(!has_block_size || b.contains_key("BLOCK_SIZE"), "{what}: blkid prints no BLOCK_SIZE");
        if let Some(bs) = get("BLOCK_SIZE") {
            assert_eq!(bs, ours.block_size.to_string(), "{what}: BLOCK_SIZE");
        }
        if let Some(size) = get("FSSIZE") {
            assert_eq!(size, ours.probed_size.to_string(), "{what}: FSSIZE");
        }
        match ours.signature {
            Signature::Luks1 => assert_eq!(get("VERSION"), Some("1"), "{what}"),
            Signature::Luks2 => assert_eq!(get("VERSION"), Some("2"), "{what}"),
            _ => {}
        }
    }

    /// Probes all of `path`, expects `signature` and blkid's agreement; what was found.
    fn agrees(path: &Path, signature: Signature) -> Probed {
        let what = path.display().to_string();
        let ours =
            probe_path(path, 512).unwrap().unwrap_or_else(|| panic!("{what}: nothing; blkid: {:?}", blkid(path)));
        assert_eq!(ours.signature, signature, "{what}");
        same_as_blkid(&ours, &blkid(path), &what);
        ours
    }

    /// The number after `key` in a tool's report, as in "Block count:   65536".
    fn number_after(report: &str, key: &str) -> u64 {
        let at = report.find(key).unwrap_or_else(|| panic!("no {key:?} in {report}")) + key.len();
        let digits: String = report[at..].trim_start().chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap_or_else(|_| panic!("no number after {key:?} in {report}"))
    }

    #[test]
    fn xfs_agrees_with_blkid_and_xfs_db() {
        let dir = tempfile::tempdir().unwrap();
        // (size, mkfs.xfs arguments, label): 300 MB is mkfs.xfs's floor; Talos's 100 MiB
        // STATE needs the fstests variables (BUILD.md).
        let cases: &[(u64, &[&str], Option<&str>)] = &[
            (300 << 20, &["-L", "STATE", "-m", "uuid=6c3a5f40-3c0a-4bd4-9b1d-6a2b0f1e2d3c"], Some("STATE")),
            (100 << 20, &["-L", "STATE"], Some("STATE")),
            (300 << 20, &["-s", "size=4096", "-b", "size=4096"], None),
            (320 << 20, &["-b", "size=1024", "-L", "a-label-12ch"], Some("a-label-12ch")),
            (300 << 20, &["-m", "crc=0"], None),
        ];
        for (n, (size, args, label)) in cases.iter().enumerate() {
            let img = sparse(dir.path(), &format!("xfs{n}"), *size);
            run(Command::new("mkfs.xfs")
                .args(["-q", "-f"])
                .args(*args)
                .arg(&img)
                .env("TEST_DIR", "1")
                .env("TEST_DEV", "1")
                .env("QA_CHECK_FS", "1"));
            let ours = agrees(&img, Signature::Xfs);
            assert_eq!(ours.label.as_deref(), *label);
            let db = run(Command::new("xfs_db").args(["-r", "-c", "sb 0", "-c", "p"]).arg(&img));
            let field = |k: &str| number_after(&db, &format!("\n{k} = "));
            let log = if field("logstart") != 0 { field("logblocks") } else { 0 };
            assert_eq!(ours.probed_size, (field("dblocks") - log) * field("blocksize"), "xfs {args:?}");
            assert_eq!(u64::from(ours.filesystem_block_size), field("blocksize"));
            assert_eq!(u64::from(ours.block_size), field("sectsize"));
            assert!(!ours.unfinished, "a finished mkfs.xfs {args:?}");
        }
    }

    #[test]
    fn an_xfs_whose_mkfs_did_not_finish_is_told_apart() {
        // mkfs.xfs writes its first superblock with sb_inprogress set and clears it last;
        // xfs_db sets it again (recomputing the v5 CRC), as an interrupted mkfs leaves it.
        let dir = tempfile::tempdir().unwrap();
        let img = sparse(dir.path(), "xfs", 300 << 20);
        run(Command::new("mkfs.xfs").args(["-q", "-f"]).arg(&img));
        run(Command::new("xfs_db").args(["-x", "-c", "sb 0", "-c", "write inprogress 1"]).arg(&img));
        // blkid still calls it xfs, and so do we, but it is marked unfinished.
        let ours = agrees(&img, Signature::Xfs);
        assert!(ours.unfinished);
    }

    #[test]
    fn ext2_ext3_ext4_agree_with_blkid_and_dumpe2fs() {
        let dir = tempfile::tempdir().unwrap();
        let cases: &[(&str, &[&str], Signature)] = &[
            ("mkfs.ext2", &["-L", "old"], Signature::Ext2),
            ("mkfs.ext3", &["-L", "journalled"], Signature::Ext3),
            ("mkfs.ext4", &["-L", "EPHEMERAL"], Signature::Ext4),
            ("mkfs.ext4", &["-O", "^metadata_csum"], Signature::Ext4),
            ("mkfs.ext4", &["-b", "4096", "-O", "64bit", "-L", "sixteen-chars-ok"], Signature::Ext4),
        ];
        for (n, (tool, args, signature)) in cases.iter().enumerate() {
            let img = sparse(dir.path(), &format!("ext{n}"), 64 << 20);
            run(Command::new(tool)
                .args(["-q", "-F", "-U", "0b7c3a52-5f0e-4d2a-9c61-2f4e8d9a1b3c"])
                .args(*args)
                .arg(&img));
            let ours = agrees(&img, *signature);
            assert_eq!(ours.uuid.as_deref(), Some("0b7c3a52-5f0e-4d2a-9c61-2f4e8d9a1b3c"));
            let report = run(Command::new("dumpe2fs").arg("-h").arg(&img));
            let block = number_after(&report, "Block size:");
            assert_eq!(ours.probed_size, number_after(&report, "Block count:") * block, "{tool} {args:?}");
            assert_eq!((u64::from(ours.block_size), u64::from(ours.filesystem_block_size)), (block, block));
        }
    }

    #[test]
    fn vfat_agrees_with_blkid_and_minfo() {
        let dir = tempfile::tempdir().unwrap();
        for (fat, kib, label) in
            [(Some(12), 1440, "cidata"), (Some(16), 32_768, "EFI"), (Some(32), 70_000, "CIDATA"), (None, 4096, "")]
        {
            let img = dir.path().join(format!("fat{kib}"));
            crate::block::testing::vfat(&img, fat, kib, label, &[("meta-data", b"{}")]);
            let ours = agrees(&img, Signature::Vfat);
            assert_eq!(ours.label.as_deref(), (!label.is_empty()).then_some(label));
            assert_eq!(ours.uuid.as_deref(), Some("1234-5678"));
            let info = run(Command::new("minfo").env("MTOOLS_SKIP_CHECK", "1").arg("-i").arg(&img).arg("::"));
            let sector = number_after(&info, "sector size:");
            let sectors = match number_after(&info, "small size:") {
                0 => number_after(&info, "big size:"),
                n => n,
            };
            assert_eq!(ours.probed_size, sectors * sector);
            assert_eq!(ours.probed_size, u64::from(kib) * 1024);
            assert_eq!(u64::from(ours.filesystem_block_size), number_after(&info, "cluster size:") * sector);
        }
    }

    #[test]
    fn iso9660_agrees_with_blkid_and_isoinfo() {
        let dir = tempfile::tempdir().unwrap();
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        std::fs::write(files.join("meta-data"), "{}").unwrap();
        let tools: &[&[&str]] = &[
            &["genisoimage", "-quiet", "-volid", "cidata", "-joliet", "-rock"],
            &["genisoimage", "-quiet", "-volid", "TALOS_V1"],
            &["xorriso", "-as", "mkisofs", "-quiet", "-V", "config-2", "-J", "-R"],
        ];
        for (n, tool) in tools.iter().enumerate() {
            let img = dir.path().join(format!("iso{n}"));
            run(Command::new(tool[0]).args(&tool[1..]).arg("-o").arg(&img).arg(&files));
            let ours = agrees(&img, Signature::Iso9660);
            assert!(ours.uuid.is_some(), "{tool:?}: the volume date");
            let info = run(Command::new("isoinfo").arg("-d").arg("-i").arg(&img));
            let block = number_after(&info, "Logical block size is:");
            assert_eq!(ours.probed_size, number_after(&info, "Volume size is:") * block, "{tool:?}");
            assert_eq!(u64::from(ours.block_size), block);
        }
    }

    #[test]
    fn squashfs_agrees_with_blkid_and_unsquashfs() {
        let dir = tempfile::tempdir().unwrap();
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        std::fs::write(files.join("init"), vec![7u8; 300_000]).unwrap();
        for (n, block) in [None, Some("4096"), Some("1M")].into_iter().enumerate() {
            let img = dir.path().join(format!("sq{n}"));
            let mut cmd = Command::new("mksquashfs");
            cmd.arg(&files).arg(&img).args(["-noappend", "-quiet", "-no-progress"]);
            if let Some(b) = block {
                cmd.args(["-b", b]);
            }
            run(&mut cmd);
            let ours = agrees(&img, Signature::Squashfs);
            let info = run(Command::new("unsquashfs").arg("-s").arg(&img));
            assert_eq!(ours.probed_size, number_after(&info, "Filesystem size"), "{block:?}");
            assert_eq!(u64::from(ours.block_size), number_after(&info, "Block size"));
            assert_eq!((ours.label, ours.uuid), (None, None));
        }
    }

    #[test]
    fn swap_agrees_with_blkid_and_mkswap() {
        let dir = tempfile::tempdir().unwrap();
        for (n, page) in [4096u32, 16384, 65536].into_iter().enumerate() {
            let img = sparse(dir.path(), &format!("swap{n}"), 64 << 20);
            let made = run(Command::new("mkswap")
                .args(["-L", "swap", "-U", "3f6b2a1c-8d4e-4b7a-a1c2-9e8f7d6c5b4a", "-p"])
                .arg(page.to_string())
                .arg(&img));
            let ours = agrees(&img, Signature::Swap);
            assert_eq!((ours.label.as_deref(), ours.block_size), (Some("swap"), page));
            // mkswap reports the size of the usable pages: "size = 64 MiB (67104768 bytes)".
            let at = made.find('(').unwrap_or_else(|| panic!("mkswap said {made}"));
            assert_eq!(ours.probed_size, number_after(&made[at..], "("), "page {page}");
        }
    }

    #[test]
    fn luks1_and_luks2_agree_with_blkid() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, b"a passphrase used only by this test").unwrap();
        let cases: &[(&[&str], Signature, Option<&str>)] = &[
            (&["--type", "luks2", "--label", "STATE", "--pbkdf", "pbkdf2"], Signature::Luks2, Some("STATE")),
            (&["--type", "luks2", "--pbkdf", "pbkdf2"], Signature::Luks2, None),
            (&["--type", "luks1"], Signature::Luks1, None),
        ];
        for (n, (args, signature, label)) in cases.iter().enumerate() {
            let img = sparse(dir.path(), &format!("luks{n}"), 32 << 20);
            run(Command::new("cryptsetup")
                .args(["luksFormat", "--batch-mode", "--pbkdf-force-iterations", "1000"])
                .args(["--uuid", "5e0c7b3a-2d1f-4e6a-8b9c-0a1b2c3d4e5f", "--key-file"])
                .arg(&key)
                .args(*args)
                .arg(&img));
            let ours = agrees(&img, *signature);
            assert_eq!(ours.name(), "luks");
            assert_eq!(ours.label.as_deref(), *label);
            assert_eq!(ours.uuid.as_deref(), Some("5e0c7b3a-2d1f-4e6a-8b9c-0a1b2c3d4e5f"));
        }
    }

    #[test]
    fn gpt_agrees_with_blkid_and_sgdisk_and_its_partitions_probe_on_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let disk = sparse(dir.path(), "disk", 64 << 20);
        run(Command::new("sgdisk")
            .args(["-o", "-U", "8D2B1F6A-3C4E-4A5B-9C8D-7E6F5A4B3C2D"])
            .args(["-n", "1:2048:+16M", "-t", "1:8300", "-c", "1:STATE"])
            .arg(&disk));
        // An ext4 in partition 1 (1 MiB in, 16 MiB long), written through the disk.
        run(Command::new("mkfs.ext4").args(["-q", "-F", "-L", "inner", "-E", "offset=1048576"]).arg(&disk).arg("16M"));
        let ours = agrees(&disk, Signature::Gpt);
        assert_eq!(ours.uuid.as_deref(), Some("8d2b1f6a-3c4e-4a5b-9c8d-7e6f5a4b3c2d"));
        assert_eq!(ours.name(), "gpt");
        let report = run(Command::new("sgdisk").arg("-p").arg(&disk));
        let (first, last) =
            (number_after(&report, "First usable sector is"), number_after(&report, "last usable sector is"));
        assert_eq!(ours.probed_size, (last - first + 1) * 512);
        assert_eq!(ours.block_size, 512);

        let file = std::fs::OpenOptions::new().read(true).write(true).open(&disk).unwrap();
        let part = Region { offset: 1 << 20, size: 16 << 20, sector_size: 512 };
        let inner = probe(&file, part).unwrap().expect("the partition's ext4");
        assert_eq!((inner.signature, inner.label.as_deref()), (Signature::Ext4, Some("inner")));
        same_as_blkid(&inner, &blkid_with(&disk, &["-O", "1048576", "-S", "16777216"]), "partition 1");

        // Without its primary header the table is found by its backup at the last LBA.
        let zero = [0u8; 512];
        file.write_at(&zero, 512).unwrap();
        assert_eq!(agrees(&disk, Signature::Gpt), ours);
        // Without both, only a protective MBR is left: blkid's PTTYPE "PMBR", not a table.
        file.write_at(&zero, (64 << 20) - 512).unwrap();
        assert_eq!(probe_path(&disk, 512).unwrap(), None);
        let b = blkid(&disk);
        assert_eq!((b.get("PTTYPE").map(String::as_str), b.get("TYPE")), (Some("PMBR"), None));
    }

    #[test]
    fn overlapping_signatures_follow_blkid_and_talos() {
        let dir = tempfile::tempdir().unwrap();
        // A GPT written over a FAT keeps its boot sector's code and BPB: blkid reports both;
        // Talos, and we, the file system.
        let fat = dir.path().join("fat");
        crate::block::testing::vfat(&fat, Some(16), 32_768, "EFI", &[]);
        run(Command::new("sgdisk").args(["-g", "-o"]).arg(&fat));
        agrees(&fat, Signature::Vfat);
        assert_eq!(blkid(&fat).get("PTTYPE").map(String::as_str), Some("gpt"));

        // An isohybrid image with a GPT: blkid reports both; Talos, and we, the table.
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        std::fs::write(files.join("vmlinuz"), [1u8; 4096]).unwrap();
        let efi = dir.path().join("efi");
        crate::block::testing::vfat(&efi, Some(12), 1440, "EFI", &[]);
        let iso = dir.path().join("hybrid.iso");
        run(Command::new("xorriso")
            .args(["-as", "mkisofs", "-quiet", "-V", "TALOS", "-J", "-R", "-append_partition", "2", "0xef"])
            .arg(&efi)
            .arg("-appended_part_as_gpt")
            .arg("-o")
            .arg(&iso)
            .arg(&files));
        let b = blkid(&iso);
        assert_eq!(b.get("TYPE").map(String::as_str), Some("iso9660"));
        agrees(&iso, Signature::Gpt);
    }

    #[test]
    fn zeros_and_tiny_devices_are_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for size in [0, 1, 511, 4095, 4096, 1 << 20, 64 << 20] {
            let img = sparse(dir.path(), &format!("zeros{size}"), size);
            assert_eq!(probe_path(&img, 512).unwrap(), None, "{size} zeros");
            assert_eq!(blkid(&img), BTreeMap::new(), "{size} zeros");
        }
    }

    /// One small image of every kind, made by the real tools.
    fn every_kind(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let img = sparse(dir, "xfs", 300 << 20);
        run(Command::new("mkfs.xfs").args(["-q", "-f", "-L", "x"]).arg(&img));
        out.push(img);
        let img = sparse(dir, "ext4", 8 << 20);
        run(Command::new("mkfs.ext4").args(["-q", "-F", "-L", "e"]).arg(&img));
        out.push(img);
        let img = sparse(dir, "ext2", 8 << 20);
        run(Command::new("mkfs.ext2").args(["-q", "-F"]).arg(&img));
        out.push(img);
        let img = sparse(dir, "swap", 1 << 20);
        run(Command::new("mkswap").args(["-L", "s"]).arg(&img));
        out.push(img);
        let img = sparse(dir, "luks2", 20 << 20);
        let key = dir.join("key");
        std::fs::write(&key, b"k").unwrap();
        run(Command::new("cryptsetup")
            .args(["luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2"])
            .args(["--pbkdf-force-iterations", "1000", "--label", "l", "--key-file"])
            .arg(&key)
            .arg(&img));
        out.push(img);
        let img = sparse(dir, "gpt", 4 << 20);
        run(Command::new("sgdisk").args(["-o", "-n", "1:0:0"]).arg(&img));
        out.push(img);
        let img = dir.join("vfat");
        crate::block::testing::vfat(&img, Some(12), 1440, "V", &[("a", b"b")]);
        out.push(img);
        let files = dir.join("files");
        std::fs::create_dir(&files).unwrap();
        std::fs::write(files.join("f"), [3u8; 5000]).unwrap();
        let img = dir.join("sqsh");
        run(Command::new("mksquashfs").arg(&files).arg(&img).args(["-noappend", "-quiet", "-no-progress"]));
        out.push(img);
        let img = dir.join("iso");
        run(Command::new("genisoimage").args(["-quiet", "-V", "I", "-o"]).arg(&img).arg(&files));
        out.push(img);
        out
    }

    /// The signature a map from blkid names, if any.
    fn blkid_kind(b: &BTreeMap<String, String>) -> Option<String> {
        b.get("TYPE").or_else(|| b.get("PTTYPE").filter(|t| *t == "gpt")).cloned()
    }

    #[test]
    fn truncated_images_are_probed_as_blkid_probes_them() {
        let dir = tempfile::tempdir().unwrap();
        let cut = dir.path().join("cut");
        for img in every_kind(dir.path()) {
            let full = probe_path(&img, 512).unwrap().unwrap_or_else(|| panic!("{img:?}"));
            same_as_blkid(&full, &blkid(&img), &img.display().to_string());
            let len = std::fs::metadata(&img).unwrap().len();
            let file = File::open(&img).unwrap();
            for keep in [
                1u64, 100, 511, 512, 1023, 1024, 1100, 2047, 2048, 4095, 4096, 8191, 32_768, 34_000, 40_959, 40_960,
                65_536,
            ] {
                if keep >= len {
                    continue;
                }
                let mut bytes = vec![0u8; keep as usize];
                file.read_exact_at(&mut bytes, 0).unwrap();
                std::fs::write(&cut, &bytes).unwrap();
                let ours = probe_path(&cut, 512).unwrap();
                let what = format!("{} cut to {keep}", img.display());
                let theirs = blkid_kind(&blkid(&cut));
                // blkid reads only the fields it uses of a volume descriptor, iso9660.rs the
                // whole 2 KiB sector: an ISO cut inside its primary descriptor is one to blkid.
                if img.ends_with("iso") && (32_768 + 883..34_816).contains(&keep) {
                    assert_eq!((ours, theirs.as_deref()), (None, Some("iso9660")), "{what}");
                    continue;
                }
                assert_eq!(ours.as_ref().map(|p| p.signature.blkid_type().to_string()), theirs, "{what}");
                if let Some(ours) = ours {
                    same_as_blkid(&ours, &blkid(&cut), &what);
                }
            }
        }
    }

    #[test]
    fn garbage_behind_every_magic_is_rejected_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("garbage");
        // xorshift: the same bytes on every run.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut random = |buf: &mut [u8]| {
            for b in buf {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        };
        // Each magic, and what random bytes behind it may pass for: a LUKS1 header is a magic
        // and a version (as to blkid), squashfs a magic and a version ≥ 4; the others check
        // geometry, checksums or structure that random bytes do not meet.
        let magics: &[(usize, &[u8], Option<Signature>)] = &[
            (0, b"LUKS\xba\xbe\x00\x02", None),
            (0, b"LUKS\xba\xbe\x00\x01", Some(Signature::Luks1)),
            (0, b"XFSB", None),
            (1080, b"\x53\xef", None),
            (0, b"hsqs", Some(Signature::Squashfs)),
            (4086, b"SWAPSPACE2", None),
            (65526, b"SWAPSPACE2", None),
            (0, b"\xeb\x3c\x90", None),
            (32769, b"CD001", None),
            (512, b"EFI PART", None),
        ];
        let mut passed = 0;
        for round in 0..30 {
            for &(at, magic, may_pass) in magics {
                let mut bytes = vec![0u8; 128 << 10];
                random(&mut bytes);
                bytes[at..at + magic.len()].copy_from_slice(magic);
                if magic[0] == 0xEB {
                    bytes[54..62].copy_from_slice(b"FAT16   ");
                }
                // A boot-sector signature and a protective MBR entry in every other round.
                if round % 2 == 1 {
                    bytes[446 + 4] = 0xEE;
                    bytes[510..512].copy_from_slice(&[0x55, 0xAA]);
                }
                std::fs::write(&img, &bytes).unwrap();
                let ours = probe_path(&img, 512).unwrap().map(|p| p.signature);
                assert!(ours.is_none() || ours == may_pass, "round {round}, {magic:?}: {ours:?}");
                passed += usize::from(ours.is_some());
            }
        }
        assert!(passed > 0, "LUKS1 behind its magic passes");
    }

    #[test]
    fn a_broken_checksum_is_no_signature() {
        let dir = tempfile::tempdir().unwrap();
        let ext4 = sparse(dir.path(), "ext4", 8 << 20);
        run(Command::new("mkfs.ext4").args(["-q", "-F", "-L", "csum"]).arg(&ext4));
        let xfs = sparse(dir.path(), "xfs", 300 << 20);
        run(Command::new("mkfs.xfs").args(["-q", "-f", "-L", "csum"]).arg(&xfs));
        let gpt = sparse(dir.path(), "gpt", 4 << 20);
        run(Command::new("sgdisk").args(["-o", "-n", "1:0:0"]).arg(&gpt));
        let flip = |img: &Path, at: u64| {
            let file = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
            let mut b = [0u8; 1];
            file.read_exact_at(&mut b, at).unwrap();
            file.write_at(&[b[0] ^ 0x20], at).unwrap();
        };
        let xfs_crc = |img: &Path| run(Command::new("xfs_db").args(["-r", "-c", "sb 0", "-c", "p crc"]).arg(img));
        let dumpe2fs = |img: &Path| Command::new("dumpe2fs").arg("-h").arg(img).output().unwrap();

        // A label byte of the superblock: the tools' own readers see the checksum fail.
        // (blkid checks these two only from util-linux 2.39 on.)
        assert_eq!(agrees(&ext4, Signature::Ext4).label.as_deref(), Some("csum"));
        assert!(dumpe2fs(&ext4).status.success());
        flip(&ext4, 1024 + 0x78);
        assert_eq!(probe_path(&ext4, 512).unwrap(), None);
        let out = dumpe2fs(&ext4);
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("checksum does not match"));

        assert!(xfs_crc(&xfs).contains("(correct)"));
        agrees(&xfs, Signature::Xfs);
        flip(&xfs, 108);
        assert_eq!(probe_path(&xfs, 512).unwrap(), None);
        assert!(xfs_crc(&xfs).contains("(bad)"));

        // A byte of both GPT headers' disk GUID: blkid finds no table either.
        agrees(&gpt, Signature::Gpt);
        flip(&gpt, 512 + 56);
        flip(&gpt, (4 << 20) - 512 + 56);
        assert_eq!(probe_path(&gpt, 512).unwrap(), None);
        assert_eq!(blkid(&gpt).get("PTTYPE").map(String::as_str), Some("PMBR"));
    }

    #[test]
    fn checksums_and_uuid_text() {
        assert_eq!(!crc32c(!0, b"123456789"), 0xE306_9283);
        assert_eq!(uuid_text(&[0; 16]), None);
        let guid = [0x6A, 0x1F, 0x2B, 0x8D, 0x4E, 0x3C, 0x5B, 0x4A, 0x9C, 0x8D, 0x7E, 0x6F, 0x5A, 0x4B, 0x3C, 0x2D];
        assert_eq!(guid_text(&guid).as_deref(), Some("8d2b1f6a-3c4e-4a5b-9c8d-7e6f5a4b3c2d"));
        assert_eq!(text(b"STATE\0\0junk"), Some("STATE".to_string()));
        assert_eq!(text(b"   \0"), None);
    }

    #[test]
    fn a_region_past_the_end_of_the_device_reads_as_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let img = sparse(dir.path(), "short", 4096);
        let file = File::open(&img).unwrap();
        for region in [
            Region { offset: 0, size: 1 << 40, sector_size: 512 },
            Region { offset: u64::MAX - 100, size: 1 << 20, sector_size: 4096 },
            Region { offset: 1 << 30, size: 64 << 20, sector_size: 512 },
            Region { offset: 0, size: 64 << 20, sector_size: 0 },
        ] {
            assert!(matches!(probe(&file, region), Ok(None) | Err(ProbeError::Read { .. })), "{region:?}");
        }
    }
}

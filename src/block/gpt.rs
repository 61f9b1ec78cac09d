//! GUID partition tables, one implementation for the imager and the node: the imager plans a
//! fresh table for a disk image ([`plan`]); the volume manager reads the table on a disk
//! ([`Table::read`]), places new partitions in its free space ([`Table::add_partition`]), grows
//! them ([`Table::grow_partition`]), follows a disk that grew ([`Table::relocate_backup`]) and
//! writes the table back ([`Table::write`]), as Talos's CreatePartition and Grow do.
//!
//! Where a partition goes and how far it may grow are pure functions of the table, tested with
//! tables of cases; the only I/O is [`Table::read`] and [`Table::write`] on a file or device the
//! caller opened. It must never tell the kernel about partitions (`kernel::blockdev` does), never
//! make up GUIDs (they come from the caller), and never hand out a table it could not verify: a
//! disk whose both copies are damaged is an error, not a blank disk.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{le32, le64};

/// The logical sector size of the images the imager writes, and of most disks.
pub const SECTOR: u64 = 512;
/// Partitions start on 1 MiB boundaries, as sgdisk and Talos place them.
pub const ALIGNMENT: u64 = 1 << 20;
/// Talos does not grow a partition by 1 MiB or less.
pub const MIN_GROWTH: u64 = 1 << 20;
/// The longest partition name: 72 bytes of UTF-16.
pub const MAX_NAME_UNITS: usize = 36;
/// Entries in a table made here (what sgdisk and Talos make).
pub const ENTRIES: u32 = 128;
/// The size of one entry in a table made here.
pub const ENTRY_SIZE: u32 = 128;
/// GPT attribute bit 2: legacy BIOS bootable (Talos sets it on the BIOS partition).
pub const ATTR_LEGACY_BIOS_BOOTABLE: u64 = 1 << 2;

const SIGNATURE: &[u8; 8] = b"EFI PART";
const REVISION: u32 = 0x0001_0000;
const HEADER_SIZE: u32 = 92;
/// A larger entry array than anyone writes is a damaged header, not a reason to read megabytes.
const MAX_ENTRY_ARRAY: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum GptError {
    #[error("partition {name}: size {size} bytes is not a positive multiple of {SECTOR}")]
    Size { name: String, size: u64 },
    #[error("partition {name}: name longer than {MAX_NAME_UNITS} UTF-16 units")]
    Name { name: String },
    #[error("{0} partitions do not fit a {ENTRIES}-entry table")]
    TooMany(usize),
    #[error("GUID {0:?}: expected 8-4-4-4-12 hex digits")]
    Guid(String),
    #[error("sector size {0}: expected a power of two from 512 to 65536")]
    SectorSize(u64),
    #[error("a {size_bytes}-byte disk with {sector_size}-byte sectors is too small for a GPT")]
    TooSmall { size_bytes: u64, sector_size: u64 },
    #[error("{what} at byte {offset}: {source}")]
    Io { what: &'static str, offset: u64, source: std::io::Error },
    #[error("GPT damaged beyond use: primary header: {primary}; backup header at LBA {backup_lba}: {backup}")]
    Damaged { primary: String, backup_lba: u64, backup: String },
    #[error("partition {name}: all {entries} table entries are in use")]
    NoFreeEntry { name: String, entries: usize },
    #[error("partition {name}: maximum size {max_size} bytes is below its minimum size {min_size} bytes")]
    MinAboveMax { name: String, min_size: u64, max_size: u64 },
    #[error(
        "partition {name}: no free region holds its minimum size of {min_size} bytes (maximum {max_size}); \
         the largest free region is {largest_free} bytes"
    )]
    NoSpace { name: String, min_size: u64, max_size: u64, largest_free: u64 },
    #[error(
        "partition {name}: LBAs {first_lba}..={last_lba} are not inside the usable LBAs {first_usable}..={last_usable}"
    )]
    Bounds { name: String, first_lba: u64, last_lba: u64, first_usable: u64, last_usable: u64 },
    #[error("partition {name}: LBAs {first_lba}..={last_lba} overlap partition {other} ({other_name})")]
    Overlap { name: String, first_lba: u64, last_lba: u64, other: u32, other_name: String },
    #[error("partition {name}: the type GUID must not be all zeros (that marks an unused entry)")]
    ZeroType { name: String },
    #[error("no partition {number} in the table (entries 1..={entries})")]
    NoPartition { number: u32, entries: usize },
    #[error("partition number {number} is already in use by {name}")]
    Taken { number: u32, name: String },
    #[error("the disk is {size_bytes} bytes, but partition {number} ends at byte {end}")]
    Shrunk { size_bytes: u64, number: u32, end: u64 },
}

/// A GUID held in its textual (big-endian) byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    /// The all-zero GUID: an unused entry's type.
    pub const ZERO: Guid = Guid([0; 16]);

    pub fn parse(s: &str) -> Result<Self, GptError> {
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        let groups: Vec<usize> = s.split('-').map(str::len).collect();
        if hex.len() != 32 || groups != [8, 4, 4, 4, 12] {
            return Err(GptError::Guid(s.to_string()));
        }
        let mut b = [0u8; 16];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).map_err(|_| GptError::Guid(s.to_string()))?;
        }
        Ok(Guid(b))
    }

    /// A version-4-shaped GUID derived from a seed, so images get pinned but distinct GUIDs.
    pub fn derived(seed: &[u8]) -> Self {
        use sha2::Digest;
        let d = sha2::Sha256::digest(seed);
        let mut b = [0u8; 16];
        b.copy_from_slice(&d[..16]);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        Guid(b)
    }

    /// GPT's on-disk form: the first three fields little-endian.
    pub fn to_disk(self) -> [u8; 16] {
        let mut b = self.0;
        b[0..4].reverse();
        b[4..6].reverse();
        b[6..8].reverse();
        b
    }

    /// The inverse of [`Guid::to_disk`].
    pub fn from_disk(disk: &[u8; 16]) -> Self {
        // The byte swaps are their own inverse.
        Guid(Guid(*disk).to_disk())
    }

    pub fn is_zero(self) -> bool {
        self == Guid::ZERO
    }
}

impl std::fmt::Display for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.0;
        for (i, x) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{x:02x}")?;
        }
        Ok(())
    }
}

/// One partition entry: inclusive LBA range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    pub type_guid: Guid,
    pub guid: Guid,
    pub first_lba: u64,
    pub last_lba: u64,
    pub attributes: u64,
}

impl Partition {
    pub fn sectors(&self) -> u64 {
        self.last_lba - self.first_lba + 1
    }
}

/// A partition with its number and its byte range, which is what the kernel is told
/// (BLKPG takes bytes) and what `/sys/class/block/<disk>p<number>` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// 1-based, the kernel's partition number: the entry's index in the table plus one.
    pub number: u32,
    pub partition: Partition,
    /// Byte offset on the disk.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// A run of free sectors, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub first_lba: u64,
    pub last_lba: u64,
}

impl Extent {
    pub fn sectors(&self) -> u64 {
        self.last_lba - self.first_lba + 1
    }
}

/// Which copy of the table [`Table::read`] trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Made by [`Table::new`] (or [`plan`]), not read from a disk.
    New,
    /// The primary header at LBA 1 and its entries.
    Primary,
    /// The primary copy was damaged or missing; the backup header at the disk's last LBA was used.
    Backup,
}

/// A fixed-size partition the imager asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSpec {
    pub name: String,
    pub type_guid: Guid,
    pub guid: Guid,
    pub size_bytes: u64,
    pub attributes: u64,
}

/// A GUID partition table and the disk it is on (its size and sector size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    sector_size: u64,
    /// The disk's size in sectors, which may differ from what the headers were written for.
    total_sectors: u64,
    disk_guid: Guid,
    first_usable: u64,
    last_usable: u64,
    primary_entries_lba: u64,
    /// Where the backup header is (or is to be) written: the primary's alternate LBA.
    backup_lba: u64,
    entry_size: u32,
    /// One slot per table entry; a slot's index plus one is the partition number.
    entries: Vec<Option<Partition>>,
    source: Source,
    /// One copy was damaged or missing when read: the next write repairs it.
    repair: bool,
    /// A backup header moved away by [`Table::relocate_backup`], zeroed on write while free.
    stale_backup_lba: Option<u64>,
}

/// The encoded table: write `mbr` at byte 0, then each region at its byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub mbr: [u8; 512],
    /// (byte offset, bytes): the primary header and entries, the backup entries and header.
    pub regions: Vec<(u64, Vec<u8>)>,
}

fn check_sector_size(sector_size: u64) -> Result<(), GptError> {
    if !(512..=65536).contains(&sector_size) || !sector_size.is_power_of_two() {
        return Err(GptError::SectorSize(sector_size));
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), GptError> {
    if name.encode_utf16().count() > MAX_NAME_UNITS {
        return Err(GptError::Name { name: name.to_string() });
    }
    Ok(())
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

fn align_down(x: u64, a: u64) -> u64 {
    x / a * a
}

impl Table {
    /// An empty table for a blank disk of `size_bytes` with 512-byte sectors: 128 entries,
    /// the backup at the last LBA.
    pub fn new(disk_guid: Guid, size_bytes: u64) -> Result<Table, GptError> {
        Table::new_with_sector_size(disk_guid, size_bytes, SECTOR)
    }

    /// [`Table::new`] for a disk with another logical sector size (4096).
    pub fn new_with_sector_size(disk_guid: Guid, size_bytes: u64, sector_size: u64) -> Result<Table, GptError> {
        check_sector_size(sector_size)?;
        let total_sectors = size_bytes / sector_size;
        let entry_sectors = (ENTRIES as u64 * ENTRY_SIZE as u64).div_ceil(sector_size);
        let first_usable = 2 + entry_sectors;
        // Room for both copies and at least one aligned megabyte between them.
        let align = ALIGNMENT / sector_size;
        if total_sectors < align_up(first_usable, align) + align + 1 + entry_sectors {
            return Err(GptError::TooSmall { size_bytes, sector_size });
        }
        let backup_lba = total_sectors - 1;
        Ok(Table {
            sector_size,
            total_sectors,
            disk_guid,
            first_usable,
            last_usable: backup_lba - entry_sectors - 1,
            primary_entries_lba: 2,
            backup_lba,
            entry_size: ENTRY_SIZE,
            entries: vec![None; ENTRIES as usize],
            source: Source::New,
            repair: false,
            stale_backup_lba: None,
        })
    }

    /// Reads the GPT on a disk of `size_bytes` with 512-byte sectors. See
    /// [`Table::read_with_sector_size`].
    pub fn read<D: FileExt>(dev: &D, size_bytes: u64) -> Result<Option<Table>, GptError> {
        Table::read_with_sector_size(dev, size_bytes, SECTOR)
    }

    /// Reads the GPT on a disk of `size_bytes`: the primary header at LBA 1 when its header and
    /// entry-array CRCs check out, else the backup header at the last LBA. `Ok(None)` when
    /// neither place holds a GPT header at all (a blank disk, or one with only an MBR table or a
    /// file system: the caller decides what that is); an error when a header is there but no
    /// copy can be trusted. A disk that grew since the table was written reads fine, with
    /// [`Table::backup_misplaced`] set.
    pub fn read_with_sector_size<D: FileExt>(
        dev: &D,
        size_bytes: u64,
        sector_size: u64,
    ) -> Result<Option<Table>, GptError> {
        check_sector_size(sector_size)?;
        let total_sectors = size_bytes / sector_size;
        if total_sectors < 3 {
            return Err(GptError::TooSmall { size_bytes, sector_size });
        }
        let last_lba = total_sectors - 1;
        let geometry = Geometry { sector_size, total_sectors };
        // An I/O error on one copy is a damaged copy: the other may still be read.
        let (copy, source, repair) = match read_copy(dev, geometry, 1) {
            Ok(primary) => {
                let backup_ok = primary.alternate_lba < total_sectors
                    && matches!(read_copy(dev, geometry, primary.alternate_lba), Ok(b) if b.agrees_with(&primary));
                (primary, Source::Primary, !backup_ok)
            }
            Err(primary_flaw) => match read_copy(dev, geometry, last_lba) {
                Ok(backup) => (backup, Source::Backup, true),
                Err(Flaw::Absent) if primary_flaw == Flaw::Absent => return Ok(None),
                Err(backup_flaw) => {
                    return Err(GptError::Damaged {
                        primary: primary_flaw.to_string(),
                        backup_lba: last_lba,
                        backup: backup_flaw.to_string(),
                    });
                }
            },
        };
        let (primary_entries_lba, backup_lba) = match source {
            Source::Backup => (2, last_lba),
            _ => (copy.entries_lba, copy.alternate_lba),
        };
        let entry_sectors = (copy.entries.len() as u64 * copy.entry_size as u64).div_ceil(sector_size);
        if primary_entries_lba + entry_sectors > copy.first_usable {
            // Only a backup copy gets here: its layout leaves no room for the primary entries.
            return Err(GptError::Damaged {
                primary: "missing or damaged".into(),
                backup_lba: last_lba,
                backup: format!("first usable LBA {} leaves no room for the primary entries", copy.first_usable),
            });
        }
        Ok(Some(Table {
            sector_size,
            total_sectors,
            disk_guid: copy.disk_guid,
            first_usable: copy.first_usable,
            last_usable: copy.last_usable,
            primary_entries_lba,
            backup_lba,
            entry_size: copy.entry_size,
            entries: copy.entries,
            source,
            repair,
            stale_backup_lba: None,
        }))
    }

    pub fn sector_size(&self) -> u64 {
        self.sector_size
    }
    /// The disk's size in sectors (as given to [`Table::read`], [`Table::new`] or
    /// [`Table::relocate_backup`]).
    pub fn total_sectors(&self) -> u64 {
        self.total_sectors
    }
    pub fn size_bytes(&self) -> u64 {
        self.total_sectors * self.sector_size
    }
    pub fn disk_guid(&self) -> Guid {
        self.disk_guid
    }
    pub fn first_usable(&self) -> u64 {
        self.first_usable
    }
    pub fn last_usable(&self) -> u64 {
        self.last_usable
    }
    /// The LBA of the backup header.
    pub fn backup_lba(&self) -> u64 {
        self.backup_lba
    }
    /// The number of table entries (the highest possible partition number).
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }
    pub fn source(&self) -> Source {
        self.source
    }
    /// The backup header is not at the disk's last LBA: the disk grew since the table was
    /// written. [`Table::relocate_backup`] moves it (and the usable area's end) to the end.
    pub fn backup_misplaced(&self) -> bool {
        self.backup_lba != self.total_sectors - 1
    }
    /// One copy was damaged or missing when read; [`Table::write`] rewrites both.
    pub fn needs_repair(&self) -> bool {
        self.repair
    }

    fn entry_sectors(&self) -> u64 {
        (self.entries.len() as u64 * self.entry_size as u64).div_ceil(self.sector_size)
    }

    fn alignment(&self) -> u64 {
        (ALIGNMENT / self.sector_size).max(1)
    }

    fn placed(&self, index: usize, p: &Partition) -> Placed {
        Placed {
            number: index as u32 + 1,
            partition: p.clone(),
            offset: p.first_lba * self.sector_size,
            size: p.sectors() * self.sector_size,
        }
    }

    /// The partitions in table order.
    pub fn partitions(&self) -> Vec<Placed> {
        self.entries.iter().enumerate().filter_map(|(i, e)| e.as_ref().map(|p| self.placed(i, p))).collect()
    }

    /// Partition `number` (1-based), when that entry is in use.
    pub fn partition(&self, number: u32) -> Option<Placed> {
        let i = (number as usize).checked_sub(1)?;
        self.entries.get(i)?.as_ref().map(|p| self.placed(i, p))
    }

    /// The used LBA ranges sorted by start.
    fn used(&self) -> Vec<(u64, u64)> {
        let mut used: Vec<(u64, u64)> = self.entries.iter().flatten().map(|p| (p.first_lba, p.last_lba)).collect();
        used.sort_unstable();
        used
    }

    /// The runs of usable sectors no partition holds, in disk order.
    pub fn free_extents(&self) -> Vec<Extent> {
        free_extents(self.first_usable, self.last_usable, &self.used())
    }

    /// The free runs cut to 1 MiB boundaries at both ends: where new partitions may go.
    pub fn allocatable(&self) -> Vec<Extent> {
        aligned(&self.free_extents(), self.alignment())
    }

    /// The size in bytes of the largest allocatable run, the most a new partition can get.
    pub fn largest_allocatable(&self) -> u64 {
        self.allocatable().iter().map(Extent::sectors).max().unwrap_or(0) * self.sector_size
    }

    /// Puts a partition at exactly the given LBAs in entry `number` (1-based), for layouts
    /// decided elsewhere (the imager's).
    pub fn set_partition(&mut self, number: u32, p: Partition) -> Result<Placed, GptError> {
        let entries = self.entries.len();
        let index = (number as usize).checked_sub(1).filter(|i| *i < entries);
        let Some(index) = index else { return Err(GptError::NoPartition { number, entries }) };
        if let Some(other) = &self.entries[index] {
            return Err(GptError::Taken { number, name: other.name.clone() });
        }
        check_name(&p.name)?;
        if p.type_guid.is_zero() {
            return Err(GptError::ZeroType { name: p.name });
        }
        if p.first_lba > p.last_lba || p.first_lba < self.first_usable || p.last_lba > self.last_usable {
            return Err(GptError::Bounds {
                name: p.name,
                first_lba: p.first_lba,
                last_lba: p.last_lba,
                first_usable: self.first_usable,
                last_usable: self.last_usable,
            });
        }
        for (i, other) in self.entries.iter().enumerate() {
            if let Some(o) = other
                && o.first_lba <= p.last_lba
                && p.first_lba <= o.last_lba
            {
                return Err(GptError::Overlap {
                    name: p.name,
                    first_lba: p.first_lba,
                    last_lba: p.last_lba,
                    other: i as u32 + 1,
                    other_name: o.name.clone(),
                });
            }
        }
        let placed = self.placed(index, &p);
        self.entries[index] = Some(p);
        Ok(placed)
    }

    /// Adds a partition in the first unused entry, placed by [`place`]: with `grow`, in the
    /// largest free run (up to `max_size`); without, in the first free run that holds
    /// `min_size`, sized `max_size` when one is given (as far as the run allows) and
    /// `min_size` otherwise. Sizes are bytes, rounded up to whole sectors for the minimum and
    /// down for the maximum; `max_size` 0 means no maximum.
    pub fn add_partition(
        &mut self,
        name: &str,
        type_guid: Guid,
        guid: Guid,
        min_size: u64,
        max_size: u64,
        grow: bool,
    ) -> Result<Placed, GptError> {
        check_name(name)?;
        if max_size != 0 && max_size < min_size {
            return Err(GptError::MinAboveMax { name: name.to_string(), min_size, max_size });
        }
        let Some(index) = self.entries.iter().position(Option::is_none) else {
            return Err(GptError::NoFreeEntry { name: name.to_string(), entries: self.entries.len() });
        };
        let allocatable = self.allocatable();
        let Some(at) = place(&allocatable, self.sector_size, min_size, max_size, grow) else {
            return Err(GptError::NoSpace {
                name: name.to_string(),
                min_size,
                max_size,
                largest_free: self.largest_allocatable(),
            });
        };
        let p = Partition {
            name: name.to_string(),
            type_guid,
            guid,
            first_lba: at.first_lba,
            last_lba: at.last_lba,
            attributes: 0,
        };
        self.set_partition(index as u32 + 1, p)
    }

    /// Empties entry `number` (1-based) and returns the partition it held; the other entries
    /// keep their numbers, as the kernel's partition names depend on them.
    pub fn remove_partition(&mut self, number: u32) -> Result<Placed, GptError> {
        let entries = self.entries.len();
        let missing = GptError::NoPartition { number, entries };
        let Some(index) = (number as usize).checked_sub(1).filter(|i| *i < entries) else { return Err(missing) };
        let Some(p) = self.entries[index].take() else { return Err(missing) };
        Ok(self.placed(index, &p))
    }

    /// How many bytes partition `number` could grow by: the free run right after it, up to the
    /// next partition or the end of the usable area, its end cut to a 1 MiB boundary.
    pub fn available_growth(&self, number: u32) -> Result<u64, GptError> {
        let p = self.existing(number)?;
        let next = self
            .entries
            .iter()
            .flatten()
            .filter(|o| o.first_lba > p.last_lba)
            .map(|o| o.first_lba)
            .min()
            .unwrap_or(self.last_usable + 1);
        let end = align_down(next, self.alignment());
        Ok(end.saturating_sub(p.last_lba + 1) * self.sector_size)
    }

    /// Grows partition `number` into the free run right after it, as Talos's Grow does: not at
    /// all when it already holds `max_size` (0: no maximum) or when it could gain 1 MiB or less;
    /// otherwise as far as the run goes, up to `max_size`. `Ok(None)` when it did not grow.
    pub fn grow_partition(&mut self, number: u32, max_size: u64) -> Result<Option<Placed>, GptError> {
        let ss = self.sector_size;
        let current = self.existing(number)?.sectors();
        if max_size != 0 && current * ss >= max_size {
            return Ok(None);
        }
        let available = self.available_growth(number)?;
        if available <= MIN_GROWTH {
            return Ok(None);
        }
        let mut grow = available / ss;
        if max_size != 0 {
            grow = grow.min(max_size / ss - current);
        }
        if grow == 0 {
            return Ok(None);
        }
        let index = number as usize - 1;
        let Some(p) = self.entries[index].as_mut() else { return Ok(None) };
        p.last_lba += grow;
        Ok(self.partition(number))
    }

    fn existing(&self, number: u32) -> Result<&Partition, GptError> {
        let entries = self.entries.len();
        (number as usize)
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .and_then(Option::as_ref)
            .ok_or(GptError::NoPartition { number, entries })
    }

    /// Makes the table follow a disk of `size_bytes`: the backup header at its last LBA and
    /// the usable area up to just before the backup entries, as Talos does when a disk grew.
    /// `Ok(false)` when nothing moved. An error when a partition would end past the new end.
    pub fn relocate_backup(&mut self, size_bytes: u64) -> Result<bool, GptError> {
        let total_sectors = size_bytes / self.sector_size;
        let entry_sectors = self.entry_sectors();
        let Some(last_usable) = total_sectors.checked_sub(2 + entry_sectors).filter(|l| *l >= self.first_usable) else {
            return Err(GptError::TooSmall { size_bytes, sector_size: self.sector_size });
        };
        for placed in self.partitions() {
            if placed.partition.last_lba > last_usable {
                let end = placed.offset + placed.size;
                return Err(GptError::Shrunk { size_bytes, number: placed.number, end });
            }
        }
        let backup_lba = total_sectors - 1;
        if backup_lba == self.backup_lba && last_usable == self.last_usable && total_sectors == self.total_sectors {
            return Ok(false);
        }
        if self.backup_lba != backup_lba && self.backup_lba < total_sectors && self.source != Source::New {
            self.stale_backup_lba = Some(self.backup_lba);
        }
        self.total_sectors = total_sectors;
        self.backup_lba = backup_lba;
        self.last_usable = last_usable;
        Ok(true)
    }

    /// The bytes of the table: a protective MBR with no boot code, the primary header and
    /// entries, the backup entries and header, and zeros over a backup header that
    /// [`Table::relocate_backup`] moved away while no partition covers it (write once after
    /// relocating and before growing into the new space to have it erased; a header left inside
    /// a partition is only bytes in its file system's free space).
    pub fn encode(&self) -> Encoded {
        let ss = self.sector_size;
        let entry_size = self.entry_size as usize;
        let mut entries = vec![0u8; self.entries.len() * entry_size];
        for (i, slot) in self.entries.iter().enumerate() {
            let Some(p) = slot else { continue };
            let e = &mut entries[i * entry_size..(i + 1) * entry_size];
            e[0..16].copy_from_slice(&p.type_guid.to_disk());
            e[16..32].copy_from_slice(&p.guid.to_disk());
            e[32..40].copy_from_slice(&p.first_lba.to_le_bytes());
            e[40..48].copy_from_slice(&p.last_lba.to_le_bytes());
            e[48..56].copy_from_slice(&p.attributes.to_le_bytes());
            for (j, unit) in p.name.encode_utf16().take(MAX_NAME_UNITS).enumerate() {
                e[56 + j * 2..58 + j * 2].copy_from_slice(&unit.to_le_bytes());
            }
        }
        let entries_crc = crc32(&entries);
        let backup_entries_lba = self.backup_lba - self.entry_sectors();
        let header = |current: u64, alternate: u64, entries_lba: u64| {
            let mut h = vec![0u8; ss as usize];
            h[0..8].copy_from_slice(SIGNATURE);
            h[8..12].copy_from_slice(&REVISION.to_le_bytes());
            h[12..16].copy_from_slice(&HEADER_SIZE.to_le_bytes());
            h[24..32].copy_from_slice(&current.to_le_bytes());
            h[32..40].copy_from_slice(&alternate.to_le_bytes());
            h[40..48].copy_from_slice(&self.first_usable.to_le_bytes());
            h[48..56].copy_from_slice(&self.last_usable.to_le_bytes());
            h[56..72].copy_from_slice(&self.disk_guid.to_disk());
            h[72..80].copy_from_slice(&entries_lba.to_le_bytes());
            h[80..84].copy_from_slice(&(self.entries.len() as u32).to_le_bytes());
            h[84..88].copy_from_slice(&self.entry_size.to_le_bytes());
            h[88..92].copy_from_slice(&entries_crc.to_le_bytes());
            let crc = crc32(&h[..HEADER_SIZE as usize]);
            h[16..20].copy_from_slice(&crc.to_le_bytes());
            h
        };
        let mut padded = entries;
        padded.resize((self.entry_sectors() * ss) as usize, 0);
        let primary_header = header(1, self.backup_lba, self.primary_entries_lba);
        let backup_header = header(self.backup_lba, 1, backup_entries_lba);
        let mut regions = Vec::new();
        if self.primary_entries_lba == 2 {
            let mut primary = primary_header;
            primary.extend_from_slice(&padded);
            regions.push((ss, primary));
        } else {
            regions.push((ss, primary_header));
            regions.push((self.primary_entries_lba * ss, padded.clone()));
        }
        // Never inside a partition: one grown over it may hold data by the time of a later write.
        let covered = |lba: u64| self.entries.iter().flatten().any(|p| p.first_lba <= lba && lba <= p.last_lba);
        if let Some(stale) = self.stale_backup_lba.filter(|lba| !covered(*lba)) {
            regions.push((stale * ss, vec![0u8; ss as usize]));
        }
        let mut backup = padded;
        backup.extend_from_slice(&backup_header);
        regions.push((backup_entries_lba * ss, backup));
        Encoded { mbr: self.protective_mbr(), regions }
    }

    /// A protective MBR: one 0xEE partition from LBA 1 over the disk (capped at 2^32-1 sectors).
    fn protective_mbr(&self) -> [u8; 512] {
        let mut m = [0u8; 512];
        let e = 0x1be;
        m[e + 1..e + 4].copy_from_slice(&[0x00, 0x02, 0x00]); // CHS of LBA 1
        m[e + 4] = 0xee;
        m[e + 5..e + 8].copy_from_slice(&[0xff, 0xff, 0xff]);
        m[e + 8..e + 12].copy_from_slice(&1u32.to_le_bytes());
        let size = u32::try_from(self.total_sectors - 1).unwrap_or(u32::MAX);
        m[e + 12..e + 16].copy_from_slice(&size.to_le_bytes());
        m[510] = 0x55;
        m[511] = 0xaa;
        m
    }

    /// Writes the table to `dev` and syncs it: the protective MBR (keeping the boot code of an
    /// MBR already there, GRUB's on a system disk), the primary header and entries, the backup
    /// entries and header. Telling the kernel is the caller's next step.
    pub fn write(&self, dev: &File) -> Result<(), GptError> {
        let encoded = self.encode();
        let mut mbr = encoded.mbr;
        let mut old = [0u8; 512];
        match dev.read_exact_at(&mut old, 0) {
            Ok(()) if old[510..] == [0x55, 0xaa] => mbr[..0x1be].copy_from_slice(&old[..0x1be]),
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
            Err(source) => return Err(GptError::Io { what: "reading the MBR", offset: 0, source }),
        }
        for (offset, bytes) in &encoded.regions {
            dev.write_all_at(bytes, *offset).map_err(|source| GptError::Io {
                what: "writing the GPT",
                offset: *offset,
                source,
            })?;
        }
        dev.write_all_at(&mbr, 0).map_err(|source| GptError::Io { what: "writing the MBR", offset: 0, source })?;
        dev.sync_all().map_err(|source| GptError::Io { what: "syncing the GPT", offset: 0, source })
    }
}

/// The runs of sectors in `first..=last` that no `used` range (sorted by start) covers.
fn free_extents(first: u64, last: u64, used: &[(u64, u64)]) -> Vec<Extent> {
    let mut free = Vec::new();
    let mut next = first;
    for &(a, b) in used {
        if a > next && next <= last {
            free.push(Extent { first_lba: next, last_lba: (a - 1).min(last) });
        }
        next = next.max(b.saturating_add(1));
    }
    if next <= last {
        free.push(Extent { first_lba: next, last_lba: last });
    }
    free
}

/// Free runs with their start rounded up and their end rounded down to `align` sectors; runs
/// that hold no whole aligned unit drop out.
fn aligned(free: &[Extent], align: u64) -> Vec<Extent> {
    free.iter()
        .filter_map(|e| {
            let first = align_up(e.first_lba, align);
            let end = align_down(e.last_lba + 1, align);
            (end > first).then(|| Extent { first_lba: first, last_lba: end - 1 })
        })
        .collect()
}

/// Where a new partition goes among `allocatable` runs (aligned, in disk order), sizes in
/// bytes: with `grow`, the start of the largest run (the first of equals), taking all of it up
/// to `max_size`; without, the start of the first run that holds `min_size`, taking `max_size`
/// (as far as the run goes) when there is one and `min_size` otherwise. `None` when no run
/// holds `min_size`. The minimum rounds up to whole sectors (at least one), the maximum down.
pub fn place(allocatable: &[Extent], sector_size: u64, min_size: u64, max_size: u64, grow: bool) -> Option<Extent> {
    let min = min_size.div_ceil(sector_size).max(1);
    let max = if max_size == 0 { None } else { Some((max_size / sector_size).max(min)) };
    let run = if grow {
        let largest = allocatable.iter().map(Extent::sectors).max()?;
        allocatable.iter().find(|e| e.sectors() == largest)?
    } else {
        allocatable.iter().find(|e| e.sectors() >= min)?
    };
    if run.sectors() < min {
        return None;
    }
    let sectors = match (grow, max) {
        (true, None) => run.sectors(),
        (_, Some(max)) => max.min(run.sectors()),
        (false, None) => min,
    };
    Some(Extent { first_lba: run.first_lba, last_lba: run.first_lba + sectors - 1 })
}

/// Lays the imager's partitions out back to back from the first 1 MiB boundary, each aligned
/// to 1 MiB, on a disk sized to hold them plus 1 MiB at the end for the backup table.
pub fn plan(disk_guid: Guid, specs: &[PartitionSpec]) -> Result<Table, GptError> {
    if specs.len() > ENTRIES as usize {
        return Err(GptError::TooMany(specs.len()));
    }
    let align = ALIGNMENT / SECTOR;
    let mut next = align;
    let mut layout = Vec::new();
    for s in specs {
        if s.size_bytes == 0 || s.size_bytes % SECTOR != 0 {
            return Err(GptError::Size { name: s.name.clone(), size: s.size_bytes });
        }
        check_name(&s.name)?;
        let first = align_up(next, align);
        let last = first + s.size_bytes / SECTOR - 1;
        layout.push((first, last));
        next = last + 1;
    }
    let total_sectors = align_up(next, align) + align;
    let mut table = Table::new(disk_guid, total_sectors * SECTOR)?;
    for (i, (s, (first, last))) in specs.iter().zip(layout).enumerate() {
        let p = Partition {
            name: s.name.clone(),
            type_guid: s.type_guid,
            guid: s.guid,
            first_lba: first,
            last_lba: last,
            attributes: s.attributes,
        };
        table.set_partition(i as u32 + 1, p)?;
    }
    Ok(table)
}

/// CRC-32 (IEEE 802.3, reflected, as GPT uses).
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &byte in data {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[derive(Clone, Copy)]
struct Geometry {
    sector_size: u64,
    total_sectors: u64,
}

/// Why a header copy was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Flaw {
    /// No "EFI PART" signature: no table here at all.
    Absent,
    Invalid(String),
}

impl std::fmt::Display for Flaw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Flaw::Absent => f.write_str("no GPT signature"),
            Flaw::Invalid(why) => f.write_str(why),
        }
    }
}

/// One verified copy of the table: a header and its entries.
struct HeaderCopy {
    alternate_lba: u64,
    first_usable: u64,
    last_usable: u64,
    disk_guid: Guid,
    entries_lba: u64,
    entry_size: u32,
    entries: Vec<Option<Partition>>,
}

impl HeaderCopy {
    fn agrees_with(&self, other: &HeaderCopy) -> bool {
        self.first_usable == other.first_usable
            && self.last_usable == other.last_usable
            && self.disk_guid == other.disk_guid
            && self.entry_size == other.entry_size
            && self.entries == other.entries
    }
}

/// Reads and verifies the header at `lba` and its entry array, or says why this copy cannot
/// be used.
fn read_copy<D: FileExt>(dev: &D, g: Geometry, lba: u64) -> Result<HeaderCopy, Flaw> {
    let ss = g.sector_size;
    let mut h = vec![0u8; ss as usize];
    if !read_at(dev, &mut h, lba * ss, "reading the header")? {
        return Err(Flaw::Absent);
    }
    parse_copy(dev, g, lba, &h)
}

/// Fills `buf` from `offset`; `Ok(false)` when the device ends first.
fn read_at<D: FileExt>(dev: &D, buf: &mut [u8], offset: u64, what: &'static str) -> Result<bool, Flaw> {
    match dev.read_exact_at(buf, offset) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(Flaw::Invalid(format!("{what} at byte {offset}: {e}"))),
    }
}

fn parse_copy<D: FileExt>(dev: &D, g: Geometry, lba: u64, h: &[u8]) -> Result<HeaderCopy, Flaw> {
    let bad = |why: String| Err(Flaw::Invalid(why));
    if &h[0..8] != SIGNATURE {
        return Err(Flaw::Absent);
    }
    let header_size = le32(h, 12) as usize;
    if header_size < HEADER_SIZE as usize || header_size > h.len() {
        return bad(format!("header size {header_size}"));
    }
    let stored_crc = le32(h, 16);
    let mut copy = h[..header_size].to_vec();
    copy[16..20].fill(0);
    if crc32(&copy) != stored_crc {
        return bad("header CRC mismatch".into());
    }
    let my_lba = le64(h, 24);
    if my_lba != lba {
        return bad(format!("header says it is at LBA {my_lba}"));
    }
    let alternate_lba = le64(h, 32);
    let first_usable = le64(h, 40);
    let last_usable = le64(h, 48);
    let mut guid = [0u8; 16];
    guid.copy_from_slice(&h[56..72]);
    let disk_guid = Guid::from_disk(&guid);
    let entries_lba = le64(h, 72);
    let count = le32(h, 80) as u64;
    let entry_size = le32(h, 84);
    let entries_crc = le32(h, 88);
    if entry_size < 128 || !entry_size.is_multiple_of(8) {
        return bad(format!("entry size {entry_size}"));
    }
    let array = count * entry_size as u64;
    if count == 0 || array > MAX_ENTRY_ARRAY {
        return bad(format!("{count} entries of {entry_size} bytes"));
    }
    let entry_sectors = array.div_ceil(g.sector_size);
    if first_usable > last_usable || last_usable >= g.total_sectors {
        return bad(format!(
            "usable LBAs {first_usable}..={last_usable} do not fit a disk of {} sectors",
            g.total_sectors
        ));
    }
    let entries_fit = if lba == 1 {
        entries_lba >= 2 && entries_lba + entry_sectors <= first_usable
    } else {
        entries_lba > last_usable && entries_lba + entry_sectors <= lba
    };
    if !entries_fit {
        return bad(format!("entry array at LBA {entries_lba} overlaps the usable area or the header"));
    }
    if lba == 1 && (alternate_lba <= last_usable || alternate_lba >= g.total_sectors) {
        return bad(format!(
            "backup LBA {alternate_lba} is not after the usable area on a disk of {} sectors",
            g.total_sectors
        ));
    }
    let mut raw = vec![0u8; array as usize];
    if !read_at(dev, &mut raw, entries_lba * g.sector_size, "reading the entry array")? {
        return bad(format!("entry array at LBA {entries_lba} is past the disk end"));
    }
    if crc32(&raw) != entries_crc {
        return bad("entry array CRC mismatch".into());
    }
    let mut entries = Vec::with_capacity(count as usize);
    for (i, e) in raw.chunks_exact(entry_size as usize).enumerate() {
        let mut t = [0u8; 16];
        t.copy_from_slice(&e[0..16]);
        let type_guid = Guid::from_disk(&t);
        if type_guid.is_zero() {
            entries.push(None);
            continue;
        }
        let mut u = [0u8; 16];
        u.copy_from_slice(&e[16..32]);
        let units: Vec<u16> =
            e[56..128].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).take_while(|u| *u != 0).collect();
        let p = Partition {
            name: String::from_utf16_lossy(&units),
            type_guid,
            guid: Guid::from_disk(&u),
            first_lba: le64(e, 32),
            last_lba: le64(e, 40),
            attributes: le64(e, 48),
        };
        if p.first_lba > p.last_lba || p.first_lba < first_usable || p.last_lba > last_usable {
            return bad(format!(
                "partition {} ({}) at LBAs {}..={} is outside the usable LBAs {first_usable}..={last_usable}",
                i + 1,
                p.name,
                p.first_lba,
                p.last_lba
            ));
        }
        entries.push(Some(p));
    }
    let mut used: Vec<(u64, u64, usize)> =
        entries.iter().enumerate().filter_map(|(i, e)| e.as_ref().map(|p| (p.first_lba, p.last_lba, i + 1))).collect();
    used.sort_unstable();
    for w in used.windows(2) {
        if w[1].0 <= w[0].1 {
            return bad(format!("partitions {} and {} overlap", w[0].2, w[1].2));
        }
    }
    Ok(HeaderCopy { alternate_lba, first_usable, last_usable, disk_guid, entries_lba, entry_size, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const LINUX: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";

    fn linux() -> Guid {
        Guid::parse(LINUX).unwrap()
    }

    fn spec(name: &str, mib: u64) -> PartitionSpec {
        PartitionSpec {
            name: name.into(),
            type_guid: linux(),
            guid: Guid::derived(name.as_bytes()),
            size_bytes: mib * MIB,
            attributes: 0,
        }
    }

    /// A table on a disk of `mib` MiB with partitions at fixed LBAs, in entries 1, 2, ...
    fn table(mib: u64, at: &[(u64, u64)]) -> Table {
        let mut t = Table::new(Guid::derived(b"disk"), mib * MIB).unwrap();
        for (i, &(first_lba, last_lba)) in at.iter().enumerate() {
            let name = format!("p{}", i + 1);
            let guid = Guid::derived(name.as_bytes());
            let p = Partition { name, type_guid: linux(), guid, first_lba, last_lba, attributes: 0 };
            t.set_partition(i as u32 + 1, p).unwrap();
        }
        t
    }

    #[test]
    fn talos_layout_plan() {
        // (sizes in MiB, expected (first, last) LBAs, total sectors)
        type Case = (&'static [u64], &'static [(u64, u64)], u64);
        let cases: &[Case] = &[
            (&[100, 1, 1000, 1], &[(2048, 206847), (206848, 208895), (208896, 2256895), (2256896, 2258943)], 2260992),
            (&[1], &[(2048, 4095)], 6144),
        ];
        for (sizes, want, total) in cases {
            let specs: Vec<_> = sizes.iter().enumerate().map(|(i, s)| spec(&format!("p{i}"), *s)).collect();
            let t = plan(Guid::derived(b"d"), &specs).unwrap();
            let got: Vec<_> = t.partitions().iter().map(|x| (x.partition.first_lba, x.partition.last_lba)).collect();
            assert_eq!(&got, want, "{sizes:?}");
            assert_eq!(t.total_sectors(), *total);
            assert!(t.partitions().last().unwrap().partition.last_lba <= t.last_usable());
            assert_eq!((t.first_usable(), t.last_usable(), t.backup_lba()), (34, total - 34, total - 1));
        }
    }

    #[test]
    fn removing_a_partition_frees_its_entry_and_space_only() {
        let mut t = plan(Guid::derived(b"d"), &[spec("a", 1), spec("b", 2), spec("c", 1)]).unwrap();
        let free_before = t.free_extents();
        let removed = t.remove_partition(2).unwrap();
        assert_eq!((removed.number, removed.partition.name.as_str()), (2, "b"));
        assert_eq!((removed.partition.first_lba, removed.partition.last_lba), (4096, 8191));
        let left: Vec<_> = t.partitions().iter().map(|p| (p.number, p.partition.name.clone())).collect();
        assert_eq!(left, [(1, "a".to_string()), (3, "c".to_string())]);
        assert!(t.partition(2).is_none());
        assert_eq!(t.free_extents().len(), free_before.len() + 1);
        assert!(t.free_extents().contains(&Extent { first_lba: 4096, last_lba: 8191 }));
        // The freed entry is the next one a new partition takes.
        let again = t.add_partition("d", linux(), Guid::derived(b"x"), 1 << 20, 0, false).unwrap();
        assert_eq!(again.number, 2);
        // An unused entry, entries past the table, and 0 (numbers are 1-based).
        for bad in [4, 129, u32::MAX, 0] {
            let mut t = t.clone();
            assert!(matches!(t.remove_partition(bad), Err(GptError::NoPartition { number, .. }) if number == bad));
        }
        let mut t2 = t.clone();
        t2.remove_partition(2).unwrap();
        assert!(matches!(t2.remove_partition(2), Err(GptError::NoPartition { number: 2, entries: 128 })));
    }

    #[test]
    fn plan_rejects_bad_sizes_and_names() {
        let mut s = spec("x", 1);
        s.size_bytes = 1000;
        assert!(matches!(plan(Guid::derived(b""), &[s]), Err(GptError::Size { name, size: 1000 }) if name == "x"));
        let long = spec(&"n".repeat(37), 1);
        assert!(matches!(plan(Guid::derived(b""), &[long]), Err(GptError::Name { .. })));
    }

    #[test]
    fn guid_text_and_disk_forms() {
        let g = Guid::parse("C12A7328-F81F-11D2-BA4B-00A0C93EC93B").unwrap();
        assert_eq!(g.to_string(), "c12a7328-f81f-11d2-ba4b-00a0c93ec93b");
        assert_eq!(g.to_disk()[..8], [0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11]);
        assert_eq!(Guid::from_disk(&g.to_disk()), g);
        for bad in ["", "C12A7328F81F11D2BA4B00A0C93EC93B", "C12A7328-F81F-11D2-BA4B-00A0C93EC93G"] {
            assert!(matches!(Guid::parse(bad), Err(GptError::Guid(s)) if s == bad));
        }
        let d = Guid::derived(b"seed");
        assert_eq!(d.0[6] >> 4, 4);
        assert_eq!(d.0[8] >> 6, 2);
    }

    #[test]
    fn crc32_known_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn header_fields_and_crcs() {
        let t = plan(Guid::derived(b"d"), &[spec("A", 1)]).unwrap();
        let e = t.encode();
        assert_eq!(e.regions.len(), 2);
        let (primary_at, primary) = &e.regions[0];
        let (backup_at, backup) = &e.regions[1];
        assert_eq!(*primary_at, 512);
        assert_eq!(&primary[0..8], b"EFI PART");
        let mut h = primary[..92].to_vec();
        let stored = u32::from_le_bytes(h[16..20].try_into().unwrap());
        h[16..20].fill(0);
        assert_eq!(crc32(&h), stored);
        assert_eq!(primary.len(), 512 * 33);
        assert_eq!(backup.len(), 512 * 33);
        assert_eq!(backup_at + 33 * 512, t.total_sectors() * 512);
        assert_eq!(&backup[32 * 512..32 * 512 + 8], b"EFI PART");
        assert_eq!(e.mbr[0x1c2], 0xee);
        assert_eq!(u32::from_le_bytes(e.mbr[0x1ca..0x1ce].try_into().unwrap()), 6143);
        assert_eq!(&e.mbr[510..], &[0x55, 0xaa]);
    }

    #[test]
    fn new_table_geometry() {
        // (size, sector size) -> (first usable, last usable, backup LBA) or too small
        type Case = (u64, u64, Option<(u64, u64, u64)>);
        let cases: &[Case] = &[
            (100 * MIB, 512, Some((34, 204766, 204799))),
            (100 * MIB, 4096, Some((6, 25594, 25599))),
            (3 * MIB, 512, Some((34, 6110, 6143))),
            (2 * MIB, 512, None),
            (2 * MIB, 4096, None),
        ];
        for &(size, ss, want) in cases {
            let got = Table::new_with_sector_size(Guid::ZERO, size, ss);
            match want {
                Some(w) => {
                    let t = got.unwrap();
                    assert_eq!((t.first_usable(), t.last_usable(), t.backup_lba()), w, "{size} / {ss}");
                    assert!(!t.backup_misplaced());
                    assert_eq!(t.source(), Source::New);
                }
                None => assert!(matches!(got, Err(GptError::TooSmall { .. })), "{size} / {ss}: {got:?}"),
            }
        }
        assert!(matches!(Table::new_with_sector_size(Guid::ZERO, 100 * MIB, 1000), Err(GptError::SectorSize(1000))));
    }

    #[test]
    fn free_and_allocatable_runs() {
        // (disk MiB, partitions, free runs, allocatable runs)
        type Case = (u64, &'static [(u64, u64)], &'static [(u64, u64)], &'static [(u64, u64)]);
        let cases: &[Case] = &[
            (100, &[], &[(34, 204766)], &[(2048, 202751)]),
            (100, &[(2048, 204766)], &[(34, 2047)], &[]),
            // sgdisk-style odd ends: the next start rounds up to the next MiB.
            (100, &[(2048, 6000)], &[(34, 2047), (6001, 204766)], &[(6144, 202751)]),
            // A gap under 1 MiB between partitions is not allocatable.
            (100, &[(2048, 4095), (5000, 10239)], &[(34, 2047), (4096, 4999), (10240, 204766)], &[(10240, 202751)]),
            (
                100,
                &[(2048, 4095), (8192, 10239)],
                &[(34, 2047), (4096, 8191), (10240, 204766)],
                &[(4096, 8191), (10240, 202751)],
            ),
        ];
        for (mib, at, free, alloc) in cases {
            let t = table(*mib, at);
            let runs = |v: Vec<Extent>| v.iter().map(|e| (e.first_lba, e.last_lba)).collect::<Vec<_>>();
            assert_eq!(runs(t.free_extents()), *free, "{at:?}");
            assert_eq!(runs(t.allocatable()), *alloc, "{at:?}");
        }
    }

    #[test]
    fn placement() {
        // (disk MiB, partitions, min, max, grow) -> placed LBAs, or None for no space.
        type Case = (u64, &'static [(u64, u64)], u64, u64, bool, Option<(u64, u64)>);
        let cases: &[Case] = &[
            // Fit: the minimum, at the first MiB.
            (100, &[], 10 * MIB, 0, false, Some((2048, 22527))),
            // Grow without a maximum: the whole aligned free run.
            (100, &[], 10 * MIB, 0, true, Some((2048, 202751))),
            // Grow capped at the maximum.
            (100, &[], 10 * MIB, 50 * MIB, true, Some((2048, 104447))),
            // No grow but a maximum: the maximum, as far as the run goes.
            (100, &[], 10 * MIB, 50 * MIB, false, Some((2048, 104447))),
            (100, &[], 10 * MIB, 500 * MIB, false, Some((2048, 202751))),
            // min == max (STATE's 100 MiB on a bigger disk).
            (300, &[], 100 * MIB, 100 * MIB, false, Some((2048, 206847))),
            // Alignment after an odd end.
            (100, &[(2048, 6000)], MIB, 0, false, Some((6144, 8191))),
            // Sizes round: the minimum up to a whole sector, a zero minimum to one sector.
            (100, &[], 1000, 0, false, Some((2048, 2049))),
            (100, &[], 0, 0, false, Some((2048, 2048))),
            // First fit vs largest: a 2 MiB gap first, the rest of the disk later.
            (100, &[(2048, 4095), (8192, 10239)], MIB, 0, false, Some((4096, 6143))),
            (100, &[(2048, 4095), (8192, 10239)], 3 * MIB, 0, false, Some((10240, 16383))),
            (100, &[(2048, 4095), (8192, 10239)], MIB, 0, true, Some((10240, 202751))),
            (100, &[(2048, 4095), (8192, 10239)], MIB, 2 * MIB, true, Some((10240, 14335))),
            // Equal runs: grow takes the first.
            (7, &[(2048, 4095), (6144, 10239)], MIB, 0, true, Some((4096, 6143))),
            // Does not fit.
            (100, &[], 99 * MIB, 0, false, None),
            (100, &[], 99 * MIB, 0, true, None),
            (100, &[(2048, 202751)], MIB, 0, true, None),
            (100, &[(2048, 204766)], 1, 0, false, None),
        ];
        for (mib, at, min, max, grow, want) in cases {
            let mut t = table(*mib, at);
            let got = t.add_partition("new", linux(), Guid::derived(b"new"), *min, *max, *grow);
            let ctx = format!("{mib} MiB, {at:?}, min {min}, max {max}, grow {grow}");
            match want {
                Some((first, last)) => {
                    let p = got.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    assert_eq!((p.partition.first_lba, p.partition.last_lba), (*first, *last), "{ctx}");
                    assert_eq!(p.number as usize, at.len() + 1, "{ctx}");
                    assert_eq!((p.offset, p.size), (first * 512, (last - first + 1) * 512), "{ctx}");
                    assert_eq!(t.partition(p.number), Some(p), "{ctx}");
                }
                None => assert!(matches!(got, Err(GptError::NoSpace { .. })), "{ctx}: {got:?}"),
            }
        }
    }

    #[test]
    fn placement_errors_name_the_partition_and_sizes() {
        let mut t = table(100, &[(2048, 104447)]);
        let err = t.add_partition("EPHEMERAL", linux(), Guid::ZERO, 60 * MIB, 0, true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "partition EPHEMERAL: no free region holds its minimum size of 62914560 bytes (maximum 0); \
             the largest free region is 50331648 bytes"
        );
        let err = t.add_partition("x", linux(), Guid::ZERO, 2 * MIB, MIB, false).unwrap_err();
        assert!(matches!(err, GptError::MinAboveMax { .. }), "{err}");
        let err = t.add_partition(&"n".repeat(37), linux(), Guid::ZERO, MIB, 0, false).unwrap_err();
        assert!(matches!(err, GptError::Name { .. }), "{err}");
        // 36 UTF-16 units is the limit, counted in units, not bytes or chars.
        t.add_partition(&"é".repeat(36), linux(), Guid::ZERO, MIB, 0, false).unwrap();
        let err = t.add_partition(&"😀".repeat(19), linux(), Guid::ZERO, MIB, 0, false).unwrap_err();
        assert!(matches!(err, GptError::Name { .. }), "{err}");
    }

    #[test]
    fn new_partitions_take_the_first_unused_entry() {
        let mut t = table(300, &[]);
        let p = Partition {
            name: "five".into(),
            type_guid: linux(),
            guid: Guid::ZERO,
            first_lba: 2048,
            last_lba: 4095,
            attributes: 0,
        };
        t.set_partition(5, p.clone()).unwrap();
        assert!(matches!(t.set_partition(5, p.clone()), Err(GptError::Taken { number: 5, .. })));
        assert!(matches!(t.set_partition(129, p.clone()), Err(GptError::NoPartition { number: 129, .. })));
        assert!(matches!(t.set_partition(0, p.clone()), Err(GptError::NoPartition { number: 0, .. })));
        let overlap = Partition { first_lba: 4000, last_lba: 5000, ..p.clone() };
        assert!(matches!(t.set_partition(1, overlap), Err(GptError::Overlap { other: 5, .. })));
        let outside = Partition { first_lba: 33, ..p.clone() };
        assert!(matches!(t.set_partition(1, outside), Err(GptError::Bounds { .. })));
        let unused = Partition { type_guid: Guid::ZERO, first_lba: 8192, last_lba: 9000, ..p };
        assert!(matches!(t.set_partition(1, unused), Err(GptError::ZeroType { .. })));
        let numbers: Vec<u32> =
            (0..3).map(|_| t.add_partition("n", linux(), Guid::ZERO, MIB, 0, false).unwrap().number).collect();
        assert_eq!(numbers, [1, 2, 3]);
        let full: Vec<_> = (0..124).map(|_| t.add_partition("n", linux(), Guid::ZERO, 1, 0, false)).collect();
        assert!(full.iter().all(Result::is_ok));
        let err = t.add_partition("last", linux(), Guid::ZERO, 1, 0, false).unwrap_err();
        assert!(matches!(err, GptError::NoFreeEntry { entries: 128, .. }), "{err}");
    }

    #[test]
    fn growing() {
        // (disk MiB, partitions, which to grow, max) -> new last LBA, or None (did not grow).
        type Case = (u64, &'static [(u64, u64)], u32, u64, Option<u64>);
        let cases: &[Case] = &[
            // Into the free space up to the last aligned LBA.
            (100, &[(2048, 22527)], 1, 0, Some(202751)),
            // Capped at the maximum.
            (100, &[(2048, 22527)], 1, 20 * MIB, Some(43007)),
            // Already at (or past) the maximum.
            (100, &[(2048, 22527)], 1, 10 * MIB, None),
            (100, &[(2048, 22527)], 1, 5 * MIB, None),
            // Up to the next partition.
            (100, &[(2048, 22527), (43008, 45055)], 1, 0, Some(43007)),
            // 1 MiB or less of room: Talos does not grow.
            (100, &[(2048, 22527), (24576, 45055)], 1, 0, None),
            (100, &[(2048, 22527), (26624, 45055)], 1, 0, Some(26623)),
            // Nothing after it, or a partition right behind.
            (100, &[(2048, 202751)], 1, 0, None),
            (100, &[(2048, 22527), (22528, 45055)], 1, 0, None),
            // An odd end grows to the aligned end.
            (100, &[(2048, 6000)], 1, 0, Some(202751)),
        ];
        for (mib, at, number, max, want) in cases {
            let mut t = table(*mib, at);
            let ctx = format!("{mib} MiB, {at:?}, grow {number} to {max}");
            let got = t.grow_partition(*number, *max).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(got.as_ref().map(|p| p.partition.last_lba), *want, "{ctx}");
            let now = t.partition(*number).unwrap().partition.last_lba;
            assert_eq!(now, want.unwrap_or(at[*number as usize - 1].1), "{ctx}");
        }
        let mut t = table(100, &[(2048, 22527)]);
        assert!(matches!(t.grow_partition(2, 0), Err(GptError::NoPartition { number: 2, .. })));
        assert_eq!(t.available_growth(1).unwrap(), (202752 - 22528) * 512);
    }

    #[test]
    fn grow_after_relocation() {
        // A 100 MiB disk whose last partition took all the space, then the disk grew to 200 MiB.
        let mut t = table(100, &[(2048, 22527), (22528, 202751)]);
        t.total_sectors = 200 * MIB / 512; // what Table::read reports on the grown disk
        assert!(t.backup_misplaced());
        assert_eq!(t.grow_partition(2, 0).unwrap(), None, "no room before relocating");
        assert!(t.relocate_backup(200 * MIB).unwrap());
        assert!(!t.backup_misplaced());
        assert_eq!((t.last_usable(), t.backup_lba()), (409566, 409599));
        assert!(!t.relocate_backup(200 * MIB).unwrap(), "a second relocation moves nothing");
        let grown = t.grow_partition(2, 0).unwrap().unwrap();
        assert_eq!((grown.partition.first_lba, grown.partition.last_lba), (22528, 407551));
        // A new partition would now find the room instead.
        let mut t = table(100, &[(2048, 202751)]);
        t.relocate_backup(200 * MIB).unwrap();
        let p = t.add_partition("u-data", linux(), Guid::ZERO, 50 * MIB, 0, true).unwrap();
        assert_eq!((p.partition.first_lba, p.partition.last_lba), (202752, 407551));
        // A disk too small for the partitions is refused.
        let err = t.relocate_backup(150 * MIB).unwrap_err();
        assert!(matches!(err, GptError::Shrunk { number: 2, .. }), "{err}");
    }

    /// A disk in memory whose sectors in `bad` fail to read, as a failing disk's do.
    struct Mem {
        bytes: Vec<u8>,
        bad: std::ops::Range<u64>,
    }

    impl FileExt for Mem {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            let end = offset + buf.len() as u64;
            if offset < self.bad.end * 512 && self.bad.start * 512 < end {
                return Err(std::io::Error::from_raw_os_error(5));
            }
            let from = (offset as usize).min(self.bytes.len());
            let n = buf.len().min(self.bytes.len() - from);
            buf[..n].copy_from_slice(&self.bytes[from..from + n]);
            Ok(n)
        }
        fn write_at(&self, _: &[u8], _: u64) -> std::io::Result<usize> {
            unreachable!("reading only")
        }
    }

    fn on_disk(t: &Table, bad: std::ops::Range<u64>) -> Mem {
        let mut bytes = vec![0u8; t.size_bytes() as usize];
        let e = t.encode();
        bytes[..512].copy_from_slice(&e.mbr);
        for (at, b) in e.regions {
            bytes[at as usize..at as usize + b.len()].copy_from_slice(&b);
        }
        Mem { bytes, bad }
    }

    #[test]
    fn unreadable_sectors_count_as_a_damaged_copy() {
        let t = table(10, &[(2048, 4095)]);
        let last = t.backup_lba();
        // (unreadable sectors, copy used, needs repair) or the error's text
        type Case = (std::ops::Range<u64>, Result<(Source, bool), &'static str>);
        let cases: &[Case] = &[
            (0..0, Ok((Source::Primary, false))),
            (1..2, Ok((Source::Backup, true))),
            (10..11, Ok((Source::Backup, true))),
            (last..last + 1, Ok((Source::Primary, true))),
            (
                1..last + 1,
                Err("GPT damaged beyond use: primary header: reading the header at byte 512: \
                     Input/output error (os error 5); backup header at LBA 20479: reading the header at \
                     byte 10485248: Input/output error (os error 5)"),
            ),
        ];
        for (bad, want) in cases {
            let got = Table::read(&on_disk(&t, bad.clone()), t.size_bytes());
            match want {
                Ok(w) => {
                    let r = got.unwrap().unwrap();
                    assert_eq!((r.source(), r.needs_repair()), *w, "{bad:?}");
                    assert_eq!(r.partitions(), t.partitions(), "{bad:?}");
                }
                Err(text) => assert_eq!(got.unwrap_err().to_string(), *text, "{bad:?}"),
            }
        }
    }

    #[test]
    fn relocation_zeroes_the_old_backup_header_only_for_read_tables() {
        let mut t = table(100, &[]);
        t.relocate_backup(200 * MIB).unwrap();
        assert_eq!(t.encode().regions.len(), 2, "a new table has no old backup on disk");
        let mut t = table(100, &[]);
        t.source = Source::Primary;
        t.total_sectors = 200 * MIB / 512;
        t.relocate_backup(200 * MIB).unwrap();
        let regions = t.encode().regions;
        assert_eq!(regions.len(), 3);
        assert_eq!(regions[1], ((100 * MIB / 512 - 1) * 512, vec![0u8; 512]));
        assert_eq!(regions[2].0 + 33 * 512, 200 * MIB);
        // Once a partition grows over it, the old header is left alone.
        t.add_partition("u-data", linux(), Guid::ZERO, MIB, 0, true).unwrap();
        assert_eq!(t.encode().regions.len(), 2);
    }
}

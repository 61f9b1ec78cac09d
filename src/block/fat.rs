//! A read-only FAT12/16/32 reader: the volume label and the files of the root directory,
//! long (VFAT) names included. That is all a nocloud `cidata` disk asks of it, and it needs
//! no mount, no `vfat` module and no codepage tables on the node.
//!
//! On-disk facts (Microsoft's FAT specification): the BIOS parameter block in sector 0, the
//! FAT type decided by the count of data clusters (< 4085 FAT12, < 65525 FAT16, else FAT32),
//! 32-byte directory entries, long-name entries (attribute 0x0F) stored last part first before
//! their short entry and tied to it by a checksum of the 8.3 name.

use std::io::{self, Read, Seek};

use super::{invalid, le16, le32, read_at};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FatKind {
    Fat12,
    Fat16,
    Fat32,
}

const ATTR_VOLUME_ID: u8 = 0x08;
const ATTR_DIRECTORY: u8 = 0x10;
const ATTR_LONG_NAME: u8 = 0x0F;
/// The most a directory is read to: a root with thousands of entries is not a seed disk.
const MAX_DIRECTORY: usize = 1 << 20;

/// An opened FAT volume.
#[derive(Debug)]
pub struct Fat<R> {
    dev: R,
    kind: FatKind,
    cluster_bytes: u64,
    fat_offset: u64,
    /// FAT12/16: the fixed root directory region (offset, bytes).
    root_region: (u64, u64),
    /// FAT32: the root directory's first cluster.
    root_cluster: u32,
    data_offset: u64,
    clusters: u32,
    boot_label: String,
    sector_bytes: u32,
    sectors: u64,
    serial: Option<u32>,
}

/// One entry of a directory, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub directory: bool,
    first_cluster: u32,
    pub size: u32,
}

fn label_text(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).trim_end_matches([' ', '\0']).to_string()
}

impl<R: Read + Seek> Fat<R> {
    /// Reads the boot sector; `Ok(None)` when it is not a FAT file system.
    pub fn open(mut dev: R) -> io::Result<Option<Fat<R>>> {
        let mut boot = [0u8; 512];
        if !read_at(&mut dev, 0, &mut boot)? {
            return Ok(None);
        }
        if boot[510..512] != [0x55, 0xAA] || !matches!(boot[0], 0xEB | 0xE9) {
            return Ok(None);
        }
        // The type string is informational in the specification, but every formatter writes
        // it, and it keeps a boot sector of some other kind from passing for FAT.
        let fat32 = &boot[82..87] == b"FAT32";
        if !fat32 && &boot[54..59] != b"FAT12" && &boot[54..59] != b"FAT16" && &boot[54..57] != b"FAT" {
            return Ok(None);
        }
        let bytes_per_sector = u64::from(le16(&boot, 11));
        let sectors_per_cluster = u64::from(boot[13]);
        let reserved = u64::from(le16(&boot, 14));
        let fats = u64::from(boot[16]);
        let root_entries = u64::from(le16(&boot, 17));
        let media = boot[21];
        let total = match le16(&boot, 19) {
            0 => u64::from(le32(&boot, 32)),
            n => u64::from(n),
        };
        let fat_sectors = match le16(&boot, 22) {
            0 => u64::from(le32(&boot, 36)),
            n => u64::from(n),
        };
        if !matches!(bytes_per_sector, 512 | 1024 | 2048 | 4096)
            || !sectors_per_cluster.is_power_of_two()
            || reserved == 0
            || fats == 0
            || fat_sectors == 0
            || !(media == 0xF0 || media >= 0xF8)
        {
            return Ok(None);
        }
        let root_sectors = (root_entries * 32).div_ceil(bytes_per_sector);
        let data_sector = reserved + fats * fat_sectors + root_sectors;
        if total <= data_sector {
            return Err(invalid("FAT: the data region lies past the end of the volume"));
        }
        let clusters = (total - data_sector) / sectors_per_cluster;
        let kind = match clusters {
            n if n < 4085 => FatKind::Fat12,
            n if n < 65525 => FatKind::Fat16,
            _ => FatKind::Fat32,
        };
        if (kind == FatKind::Fat32) != (root_entries == 0) {
            return Err(invalid("FAT: the root directory does not match the FAT type"));
        }
        // The volume serial number blkid reports as UUID: FAT32 always has one; FAT12/16 when
        // the extended boot signature (0x28, or 0x29 with a label) says so.
        let serial = if kind == FatKind::Fat32 {
            Some(le32(&boot, 67))
        } else {
            matches!(boot[38], 0x28 | 0x29).then(|| le32(&boot, 39))
        };
        let boot_label = if kind == FatKind::Fat32 {
            if boot[66] == 0x29 { label_text(&boot[71..82]) } else { String::new() }
        } else if boot[38] == 0x29 {
            label_text(&boot[43..54])
        } else {
            String::new()
        };
        Ok(Some(Fat {
            dev,
            kind,
            cluster_bytes: sectors_per_cluster * bytes_per_sector,
            fat_offset: reserved * bytes_per_sector,
            root_region: ((reserved + fats * fat_sectors) * bytes_per_sector, root_sectors * bytes_per_sector),
            root_cluster: le32(&boot, 44),
            data_offset: data_sector * bytes_per_sector,
            clusters: u32::try_from(clusters).map_err(|_| invalid("FAT: too many clusters"))?,
            boot_label,
            // Checked against 512..4096 above.
            sector_bytes: bytes_per_sector as u32,
            sectors: total,
            serial,
        }))
    }

    pub fn kind(&self) -> FatKind {
        self.kind
    }

    /// Bytes per logical sector (blkid's BLOCK_SIZE).
    pub fn sector_size(&self) -> u32 {
        self.sector_bytes
    }

    /// Bytes per cluster, the file system's allocation unit.
    pub fn cluster_size(&self) -> u64 {
        self.cluster_bytes
    }

    /// The volume's size in bytes, as its boot sector counts it.
    pub fn size(&self) -> u64 {
        self.sectors * u64::from(self.sector_bytes)
    }

    /// The volume serial number, printed `XXXX-XXXX` as blkid's UUID.
    pub fn serial(&self) -> Option<u32> {
        self.serial
    }

    /// The volume label as blkid reports it: the root directory's volume-label entry, else
    /// the boot sector's, where "NO NAME" means none.
    pub fn label(&mut self) -> io::Result<String> {
        let root = self.root_bytes()?;
        for raw in root.chunks_exact(32) {
            if raw[0] == 0 {
                break;
            }
            if raw[0] != 0xE5 && raw[11] != ATTR_LONG_NAME && raw[11] & ATTR_VOLUME_ID != 0 {
                return Ok(label_text(&raw[..11]));
            }
        }
        Ok(if self.boot_label == "NO NAME" { String::new() } else { self.boot_label.clone() })
    }

    /// The entries of the root directory (not the label, not deleted entries, not `.`/`..`).
    pub fn root(&mut self) -> io::Result<Vec<Entry>> {
        let root = self.root_bytes()?;
        Ok(entries(&root))
    }

    /// The bytes of the root directory's file `name` (compared without regard to ASCII case,
    /// as FAT does); `Ok(None)` when there is none. A file larger than `max` is an error.
    pub fn read_root_file(&mut self, name: &str, max: usize) -> io::Result<Option<Vec<u8>>> {
        let Some(entry) = self.root()?.into_iter().find(|e| !e.directory && e.name.eq_ignore_ascii_case(name)) else {
            return Ok(None);
        };
        let size = entry.size as usize;
        if size > max {
            return Err(invalid(format!("FAT: {name} is {size} bytes, more than the {max} read")));
        }
        if size == 0 {
            return Ok(Some(Vec::new()));
        }
        let mut data = self.chain_bytes(entry.first_cluster, size)?;
        data.truncate(size);
        if data.len() < size {
            return Err(invalid(format!("FAT: {name}: its cluster chain ends before its size")));
        }
        Ok(Some(data))
    }

    fn root_bytes(&mut self) -> io::Result<Vec<u8>> {
        match self.kind {
            FatKind::Fat32 => self.chain_bytes(self.root_cluster, MAX_DIRECTORY),
            _ => {
                let (offset, len) = self.root_region;
                let mut buf = vec![0u8; len.min(MAX_DIRECTORY as u64) as usize];
                if !read_at(&mut self.dev, offset, &mut buf)? {
                    return Err(invalid("FAT: the root directory lies past the end of the device"));
                }
                Ok(buf)
            }
        }
    }

    /// The FAT entry of `cluster`.
    fn next(&mut self, cluster: u32) -> io::Result<u32> {
        let n = u64::from(cluster);
        let (offset, width) = match self.kind {
            FatKind::Fat12 => (n + n / 2, 2),
            FatKind::Fat16 => (n * 2, 2),
            FatKind::Fat32 => (n * 4, 4),
        };
        let mut raw = [0u8; 4];
        if !read_at(&mut self.dev, self.fat_offset + offset, &mut raw[..width])? {
            return Err(invalid("FAT: the allocation table lies past the end of the device"));
        }
        Ok(match self.kind {
            FatKind::Fat12 => {
                let v = u32::from(le16(&raw, 0));
                if cluster % 2 == 1 { v >> 4 } else { v & 0xFFF }
            }
            FatKind::Fat16 => u32::from(le16(&raw, 0)),
            FatKind::Fat32 => le32(&raw, 0) & 0x0FFF_FFFF,
        })
    }

    fn end_of_chain(&self, value: u32) -> bool {
        value
            >= match self.kind {
                FatKind::Fat12 => 0xFF8,
                FatKind::Fat16 => 0xFFF8,
                FatKind::Fat32 => 0x0FFF_FFF8,
            }
    }

    /// Up to `limit` bytes of the cluster chain that starts at `first`.
    fn chain_bytes(&mut self, first: u32, limit: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut cluster = first;
        // A chain longer than the volume has clusters loops.
        for _ in 0..=self.clusters {
            if cluster < 2 || cluster - 2 >= self.clusters {
                return Err(invalid(format!("FAT: cluster {cluster} is outside the volume")));
            }
            let start = out.len();
            out.resize(start + self.cluster_bytes as usize, 0);
            let offset = self.data_offset + u64::from(cluster - 2) * self.cluster_bytes;
            if !read_at(&mut self.dev, offset, &mut out[start..])? {
                return Err(invalid("FAT: a cluster lies past the end of the device"));
            }
            if out.len() >= limit {
                return Ok(out);
            }
            let next = self.next(cluster)?;
            if self.end_of_chain(next) {
                return Ok(out);
            }
            cluster = next;
        }
        Err(invalid("FAT: a cluster chain loops"))
    }
}

/// The checksum of an 8.3 name that ties long-name entries to their short entry.
fn short_name_checksum(name: &[u8]) -> u8 {
    name.iter().fold(0u8, |sum, &b| sum.rotate_right(1).wrapping_add(b))
}

fn short_name(raw: &[u8]) -> String {
    let mut base = raw[..8].to_vec();
    if base[0] == 0x05 {
        base[0] = 0xE5;
    }
    let lower = |bytes: &[u8], yes: bool| -> String {
        let s = String::from_utf8_lossy(bytes).trim_end().to_string();
        if yes { s.to_ascii_lowercase() } else { s }
    };
    let base = lower(&base, raw[12] & 0x08 != 0);
    let ext = lower(&raw[8..11], raw[12] & 0x10 != 0);
    if ext.is_empty() { base } else { format!("{base}.{ext}") }
}

/// The UCS-2 characters of one long-name entry.
fn long_name_part(raw: &[u8]) -> Vec<u16> {
    [(1, 5), (14, 6), (28, 2)].iter().flat_map(|&(at, n)| (0..n).map(move |i| le16(raw, at + 2 * i))).collect()
}

fn entries(dir: &[u8]) -> Vec<Entry> {
    let mut out = Vec::new();
    // The long name gathered so far: (checksum, parts by sequence number).
    let mut long: Option<(u8, Vec<Option<Vec<u16>>>)> = None;
    for raw in dir.chunks_exact(32) {
        match raw[0] {
            0 => break,
            0xE5 => {
                long = None;
                continue;
            }
            _ => {}
        }
        let attr = raw[11];
        if attr == ATTR_LONG_NAME {
            let seq = usize::from(raw[0] & 0x1F);
            if seq == 0 {
                long = None;
                continue;
            }
            if raw[0] & 0x40 != 0 {
                long = Some((raw[13], vec![None; seq]));
            }
            match &mut long {
                Some((sum, parts)) if *sum == raw[13] && seq <= parts.len() => {
                    parts[seq - 1] = Some(long_name_part(raw))
                }
                _ => long = None,
            }
            continue;
        }
        let gathered = long.take();
        if attr & ATTR_VOLUME_ID != 0 || raw[..2] == *b". " || raw[..2] == *b".." {
            continue;
        }
        let name = gathered
            .filter(|(sum, parts)| *sum == short_name_checksum(&raw[..11]) && parts.iter().all(Option::is_some))
            .map(|(_, parts)| {
                let units: Vec<u16> =
                    parts.into_iter().flatten().flatten().take_while(|&u| u != 0 && u != 0xFFFF).collect();
                String::from_utf16_lossy(&units)
            })
            .unwrap_or_else(|| short_name(raw));
        out.push(Entry {
            name,
            directory: attr & ATTR_DIRECTORY != 0,
            first_cluster: u32::from(le16(raw, 20)) << 16 | u32::from(le16(raw, 26)),
            size: le32(raw, 28),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use std::process::Command;

    /// A FAT image made by mkfs.fat and mcopy, as bytes.
    fn image(fat: u8, kib: u32, label: &str, files: &[(&str, &[u8])]) -> (tempfile::TempDir, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("fat.img");
        crate::block::testing::vfat(&img, Some(fat), kib, label, files);
        let bytes = std::fs::read(&img).unwrap();
        (dir, bytes)
    }

    #[test]
    fn reads_the_label_and_long_named_files_of_fat12_16_and_32() {
        let big: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        for (fat, kib, kind) in [(12, 1440, FatKind::Fat12), (16, 20_000, FatKind::Fat16), (32, 70_000, FatKind::Fat32)]
        {
            let files: &[(&str, &[u8])] = &[
                ("meta-data", b"local-hostname: node-1\n"),
                ("network-config", b"version: 2\n"),
                ("user-data", &big),
                ("SHORT.TXT", b"8.3"),
            ];
            let (_dir, bytes) = image(fat, kib, "cidata", files);
            let mut fs = Fat::open(Cursor::new(bytes)).unwrap().expect("a FAT volume");
            assert_eq!(fs.kind(), kind, "FAT{fat}");
            assert_eq!(fs.label().unwrap(), "cidata", "FAT{fat}");
            let names: Vec<String> = fs.root().unwrap().into_iter().map(|e| e.name).collect();
            assert_eq!(names, ["meta-data", "network-config", "user-data", "SHORT.TXT"], "FAT{fat}");
            assert_eq!(fs.read_root_file("meta-data", 1 << 20).unwrap().unwrap(), b"local-hostname: node-1\n");
            assert_eq!(
                fs.read_root_file("USER-DATA", 1 << 20).unwrap().unwrap(),
                big,
                "FAT{fat}: a multi-cluster file"
            );
            assert_eq!(fs.read_root_file("short.txt", 1 << 20).unwrap().unwrap(), b"8.3");
            assert_eq!(fs.read_root_file("vendor-data", 1 << 20).unwrap(), None);
            let err = fs.read_root_file("user-data", 1000).unwrap_err();
            assert_eq!(err.to_string(), "FAT: user-data is 70000 bytes, more than the 1000 read");
        }
    }

    #[test]
    fn the_label_in_the_root_directory_wins_and_no_name_is_none() {
        let (_dir, bytes) = image(16, 20_000, "CIDATA", &[]);
        assert_eq!(Fat::open(Cursor::new(bytes)).unwrap().unwrap().label().unwrap(), "CIDATA");
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("n.img");
        assert!(Command::new("mkfs.fat").arg("-C").arg(&img).arg("1440").output().unwrap().status.success());
        let mut fs = Fat::open(Cursor::new(std::fs::read(&img).unwrap())).unwrap().unwrap();
        assert_eq!(fs.label().unwrap(), "");
    }

    #[test]
    fn other_bytes_are_not_fat_and_a_broken_chain_is_an_error() {
        assert!(Fat::open(Cursor::new(vec![0u8; 4096])).unwrap().is_none());
        assert!(Fat::open(Cursor::new(vec![0u8; 100])).unwrap().is_none());
        let (_dir, mut bytes) = image(12, 1440, "cidata", &[("user-data", &[7u8; 5000])]);
        // Free the file's first cluster in the allocation table: its chain then leads nowhere.
        let mut fs = Fat::open(Cursor::new(bytes.clone())).unwrap().unwrap();
        let first = fs.root().unwrap()[0].first_cluster;
        let at = fs.fat_offset as usize + (first as usize * 3 / 2);
        let v = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let freed = if first % 2 == 1 { v & 0x000F } else { v & 0xF000 };
        bytes[at..at + 2].copy_from_slice(&freed.to_le_bytes());
        let mut fs = Fat::open(Cursor::new(bytes)).unwrap().unwrap();
        let err = fs.read_root_file("user-data", 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "FAT: cluster 0 is outside the volume");
    }
}

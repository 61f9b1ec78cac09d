//! FAT32 written in Rust: a new file system over a partition (or an image file) holding a
//! small tree of files, laid down in one pass. This is what the node makes its EFI system
//! partition with when it installs itself, and what `vfat` volumes are formatted with: no
//! mkfs.fat, no mtools, no mount.
//!
//! On-disk facts (Microsoft's FAT specification, as `mkfs.fat -F 32` writes it): 32 reserved
//! sectors with the boot sector at 0, FSInfo at 1 and their backups at 6 and 7; two FATs
//! sized by the specification's formula; the root directory at cluster 2; every file and
//! directory in contiguous clusters; 8.3 names only (no long-name entries), so every name
//! must already be an upper-case 8.3 name; every timestamp 1980-01-01 00:00, so the same
//! tree and volume id give the same bytes. It never reads what it overwrites and writes
//! nothing past the size it is given.

use std::io::{self, Seek, SeekFrom, Write};

const SECTOR: u64 = 512;
const RESERVED_SECTORS: u64 = 32;
const FATS: u64 = 2;
/// The fewest clusters a FAT32 volume may have; below it a reader takes it for FAT16.
const MIN_CLUSTERS: u64 = 65_525;
const MAX_CLUSTERS: u64 = 0x0FFF_FFF5;
const END_OF_CHAIN: u32 = 0x0FFF_FFFF;
const ATTR_DIRECTORY: u8 = 0x10;
const ATTR_ARCHIVE: u8 = 0x20;
const ATTR_VOLUME_ID: u8 = 0x08;
/// 1980-01-01 as a FAT date (day 1, month 1, year 0); the time is 00:00:00.
const DATE: u16 = (1 << 5) | 1;

#[derive(Debug, thiserror::Error)]
pub enum FatWriteError {
    #[error("a FAT32 file system needs at least {min} clusters; {size} bytes give {clusters}")]
    TooSmall { size: u64, clusters: u64, min: u64 },
    #[error("{size} bytes are too many for FAT32")]
    TooLarge { size: u64 },
    #[error("{name:?} is not an upper-case 8.3 name (A-Z, 0-9, _ and -; 8 characters, a dot, 3)")]
    Name { name: String },
    #[error("the label {label:?} is not 1 to 11 upper-case characters (A-Z, 0-9, _, - and space)")]
    Label { label: String },
    #[error("{path}: {what}")]
    Tree { path: String, what: &'static str },
    #[error("the files need {need} clusters; the file system has {have}")]
    Full { need: u64, have: u64 },
    #[error("writing the file system: {0}")]
    Io(#[from] io::Error),
}

/// What goes into the new file system: directories and files by their path (`EFI/BOOT/BOOTX64.EFI`),
/// each component an upper-case 8.3 name. Parents are made as needed.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    entries: Vec<(Vec<String>, Option<Vec<u8>>)>,
}

impl Tree {
    pub fn new() -> Self {
        Tree::default()
    }

    pub fn file(mut self, path: &str, data: Vec<u8>) -> Self {
        self.entries.push((split(path), Some(data)));
        self
    }

    pub fn dir(mut self, path: &str) -> Self {
        self.entries.push((split(path), None));
        self
    }
}

fn split(path: &str) -> Vec<String> {
    path.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect()
}

/// One node of the laid-out tree: a directory (its children) or a file (its bytes).
#[derive(Debug)]
enum Node {
    Dir { children: Vec<(String, Node)>, cluster: u32 },
    File { data: Vec<u8>, cluster: u32 },
}

impl Node {
    fn child(&mut self, name: &str) -> Option<&mut Node> {
        match self {
            Node::Dir { children, .. } => children.iter_mut().find(|(n, _)| n == name).map(|(_, c)| c),
            Node::File { .. } => None,
        }
    }
}

/// The 11 bytes of an 8.3 name, or why it is not one.
fn short_name(name: &str) -> Result<[u8; 11], FatWriteError> {
    let bad = || FatWriteError::Name { name: name.to_string() };
    let (base, ext) = name.split_once('.').unwrap_or((name, ""));
    let ok = |s: &str, max: usize| {
        s.len() <= max && s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    if base.is_empty() || !ok(base, 8) || !ok(ext, 3) || name.ends_with('.') {
        return Err(bad());
    }
    let mut out = [b' '; 11];
    out[..base.len()].copy_from_slice(base.as_bytes());
    out[8..8 + ext.len()].copy_from_slice(ext.as_bytes());
    Ok(out)
}

fn label_bytes(label: &str) -> Result<[u8; 11], FatWriteError> {
    let ok = !label.is_empty()
        && label.len() <= 11
        && label.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b"_- ".contains(&b));
    if !ok {
        return Err(FatWriteError::Label { label: label.to_string() });
    }
    let mut out = [b' '; 11];
    out[..label.len()].copy_from_slice(label.as_bytes());
    Ok(out)
}

/// The geometry of a FAT32 volume of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub sectors: u64,
    pub sectors_per_cluster: u64,
    pub fat_sectors: u64,
    pub clusters: u64,
}

impl Geometry {
    /// mkfs.fat's cluster size for FAT32 by volume size, and the FAT size by the
    /// specification's formula.
    pub fn of(size: u64) -> Result<Geometry, FatWriteError> {
        let sectors = size / SECTOR;
        let mib = size >> 20;
        let sectors_per_cluster = match mib {
            0..260 => 1,
            260..8192 => 8,
            8192..16384 => 16,
            16384..32768 => 32,
            _ => 64,
        };
        let tmp1 = sectors.saturating_sub(RESERVED_SECTORS);
        let tmp2 = (256 * sectors_per_cluster + FATS) / 2;
        let fat_sectors = tmp1.div_ceil(tmp2);
        let data = sectors.saturating_sub(RESERVED_SECTORS + FATS * fat_sectors);
        let clusters = data / sectors_per_cluster;
        if clusters < MIN_CLUSTERS {
            return Err(FatWriteError::TooSmall { size, clusters, min: MIN_CLUSTERS });
        }
        if clusters > MAX_CLUSTERS || sectors > u64::from(u32::MAX) {
            return Err(FatWriteError::TooLarge { size });
        }
        Ok(Geometry { sectors, sectors_per_cluster, fat_sectors, clusters })
    }

    fn cluster_bytes(&self) -> u64 {
        self.sectors_per_cluster * SECTOR
    }

    fn data_offset(&self) -> u64 {
        (RESERVED_SECTORS + FATS * self.fat_sectors) * SECTOR
    }

    fn cluster_offset(&self, cluster: u32) -> u64 {
        self.data_offset() + u64::from(cluster - 2) * self.cluster_bytes()
    }
}

/// Lays `tree` out from cluster 2 on (the root first, then depth first): each node's first
/// cluster, and the number of clusters used in all.
fn place(node: &mut Node, next: &mut u64, cluster_bytes: u64, is_root: bool) -> u64 {
    let is_dir = matches!(node, Node::Dir { .. });
    let (bytes, first) = match node {
        Node::Dir { children, cluster } => {
            // `.` and `..`, the children, the label in the root; at least one cluster.
            let entries = children.len() as u64 + if is_root { 1 } else { 2 };
            (entries * 32, cluster)
        }
        Node::File { data, cluster } => (data.len() as u64, cluster),
    };
    let count = bytes.div_ceil(cluster_bytes).max(u64::from(is_dir));
    *first = if count == 0 { 0 } else { *next as u32 };
    *next += count;
    let mut used = count;
    if let Node::Dir { children, .. } = node {
        for (_, child) in children.iter_mut() {
            used += place(child, next, cluster_bytes, false);
        }
    }
    used
}

fn dir_entry(name: &[u8; 11], attr: u8, cluster: u32, size: u32) -> [u8; 32] {
    let mut e = [0u8; 32];
    e[..11].copy_from_slice(name);
    e[11] = attr;
    e[16..18].copy_from_slice(&DATE.to_le_bytes()); // created
    e[18..20].copy_from_slice(&DATE.to_le_bytes()); // accessed
    e[20..22].copy_from_slice(&((cluster >> 16) as u16).to_le_bytes());
    e[24..26].copy_from_slice(&DATE.to_le_bytes()); // written
    e[26..28].copy_from_slice(&(cluster as u16).to_le_bytes());
    e[28..32].copy_from_slice(&size.to_le_bytes());
    e
}

/// Formats `dev` (`size` bytes from its start) as FAT32 labelled `label` with serial
/// `volume_id`, and writes `tree` into it.
pub fn format<W: Write + Seek>(
    dev: &mut W,
    size: u64,
    label: &str,
    volume_id: u32,
    tree: Tree,
) -> Result<Geometry, FatWriteError> {
    let label = label_bytes(label)?;
    let g = Geometry::of(size)?;
    let mut root = Node::Dir { children: Vec::new(), cluster: 0 };
    for (path, data) in tree.entries {
        let mut at = &mut root;
        let full = path.join("/");
        for (i, part) in path.iter().enumerate() {
            short_name(part)?;
            let last = i + 1 == path.len();
            if at.child(part).is_none() {
                let Node::Dir { children, .. } = at else {
                    return Err(FatWriteError::Tree { path: full, what: "a file is in the way" });
                };
                let new = match (&data, last) {
                    (Some(bytes), true) => Node::File { data: bytes.clone(), cluster: 0 },
                    _ => Node::Dir { children: Vec::new(), cluster: 0 },
                };
                children.push((part.clone(), new));
            } else if last {
                return Err(FatWriteError::Tree { path: full, what: "given twice" });
            }
            at = match at.child(part) {
                Some(next) => next,
                None => return Err(FatWriteError::Tree { path: full, what: "lost while laying out" }),
            };
        }
    }
    let mut next = 2u64;
    let used = place(&mut root, &mut next, g.cluster_bytes(), true);
    if used > g.clusters {
        return Err(FatWriteError::Full { need: used, have: g.clusters });
    }

    // The FAT: entries 0 and 1, then each node's chain.
    let mut fat = vec![0u32; (next as usize).max(3)];
    fat[0] = 0x0FFF_FFF8;
    fat[1] = END_OF_CHAIN;
    let mut chains: Vec<(u32, u64)> = Vec::new();
    collect_chains(&root, g.cluster_bytes(), true, &mut chains);
    for (first, count) in &chains {
        for i in 0..*count {
            let c = *first as usize + i as usize;
            fat[c] = if i + 1 == *count { END_OF_CHAIN } else { c as u32 + 1 };
        }
    }

    // Boot sector, FSInfo, their backups.
    let mut boot = [0u8; 512];
    boot[..3].copy_from_slice(&[0xEB, 0x58, 0x90]);
    boot[3..11].copy_from_slice(b"mkfs.fat");
    boot[11..13].copy_from_slice(&(SECTOR as u16).to_le_bytes());
    boot[13] = g.sectors_per_cluster as u8;
    boot[14..16].copy_from_slice(&(RESERVED_SECTORS as u16).to_le_bytes());
    boot[16] = FATS as u8;
    boot[21] = 0xF8;
    boot[24..26].copy_from_slice(&63u16.to_le_bytes());
    boot[26..28].copy_from_slice(&255u16.to_le_bytes());
    boot[32..36].copy_from_slice(&(g.sectors as u32).to_le_bytes());
    boot[36..40].copy_from_slice(&(g.fat_sectors as u32).to_le_bytes());
    boot[44..48].copy_from_slice(&2u32.to_le_bytes()); // root directory cluster
    boot[48..50].copy_from_slice(&1u16.to_le_bytes()); // FSInfo sector
    boot[50..52].copy_from_slice(&6u16.to_le_bytes()); // backup boot sector
    boot[64] = 0x80;
    boot[66] = 0x29;
    boot[67..71].copy_from_slice(&volume_id.to_le_bytes());
    boot[71..82].copy_from_slice(&label);
    boot[82..90].copy_from_slice(b"FAT32   ");
    boot[510] = 0x55;
    boot[511] = 0xAA;
    let mut fsinfo = [0u8; 512];
    fsinfo[..4].copy_from_slice(&0x4161_5252u32.to_le_bytes());
    fsinfo[484..488].copy_from_slice(&0x6141_7272u32.to_le_bytes());
    fsinfo[488..492].copy_from_slice(&((g.clusters - used) as u32).to_le_bytes());
    fsinfo[492..496].copy_from_slice(&(next as u32).to_le_bytes());
    fsinfo[508..512].copy_from_slice(&0xAA55_0000u32.to_le_bytes());

    // The reserved area and both FATs are written whole (zeros where nothing is), so nothing
    // an earlier file system left there is read as ours.
    let mut reserved = vec![0u8; (RESERVED_SECTORS * SECTOR) as usize];
    reserved[..512].copy_from_slice(&boot);
    reserved[512..1024].copy_from_slice(&fsinfo);
    reserved[6 * 512..7 * 512].copy_from_slice(&boot);
    reserved[7 * 512..8 * 512].copy_from_slice(&fsinfo);
    dev.seek(SeekFrom::Start(0))?;
    dev.write_all(&reserved)?;
    let fat_bytes = (g.fat_sectors * SECTOR) as usize;
    let mut fat_image: Vec<u8> = fat.iter().flat_map(|e| e.to_le_bytes()).collect();
    fat_image.resize(fat_bytes, 0);
    for _ in 0..FATS {
        dev.write_all(&fat_image)?;
    }
    write_node(dev, &g, &root, 0, Some(&label))?;
    dev.flush()?;
    Ok(g)
}

fn collect_chains(node: &Node, cluster_bytes: u64, is_root: bool, out: &mut Vec<(u32, u64)>) {
    match node {
        Node::Dir { children, cluster } => {
            let entries = children.len() as u64 + if is_root { 1 } else { 2 };
            out.push((*cluster, (entries * 32).div_ceil(cluster_bytes).max(1)));
            for (_, c) in children {
                collect_chains(c, cluster_bytes, false, out);
            }
        }
        Node::File { data, cluster } => {
            let count = (data.len() as u64).div_ceil(cluster_bytes);
            if count > 0 {
                out.push((*cluster, count));
            }
        }
    }
}

/// Writes a directory's entries (and, under it, every child) at its clusters; `parent` is the
/// parent directory's first cluster (0 for the root, as `..` says of it), `label` the
/// volume label the root carries.
fn write_node<W: Write + Seek>(
    dev: &mut W,
    g: &Geometry,
    node: &Node,
    parent: u32,
    label: Option<&[u8; 11]>,
) -> Result<(), FatWriteError> {
    match node {
        Node::File { data, cluster } => {
            if !data.is_empty() {
                dev.seek(SeekFrom::Start(g.cluster_offset(*cluster)))?;
                dev.write_all(data)?;
            }
        }
        Node::Dir { children, cluster } => {
            let mut entries: Vec<u8> = Vec::new();
            match label {
                Some(l) => entries.extend(dir_entry(l, ATTR_VOLUME_ID, 0, 0)),
                None => {
                    entries.extend(dir_entry(b".          ", ATTR_DIRECTORY, *cluster, 0));
                    entries.extend(dir_entry(b"..         ", ATTR_DIRECTORY, parent, 0));
                }
            }
            for (name, child) in children {
                let short = short_name(name)?;
                let e = match child {
                    Node::Dir { cluster: c, .. } => dir_entry(&short, ATTR_DIRECTORY, *c, 0),
                    Node::File { data, cluster: c } => {
                        let size = u32::try_from(data.len()).map_err(|_| FatWriteError::Tree {
                            path: name.clone(),
                            what: "a file of 4 GiB or more does not fit FAT32",
                        })?;
                        dir_entry(&short, ATTR_ARCHIVE, *c, size)
                    }
                };
                entries.extend(e);
            }
            // The rest of the directory's clusters are zeros: the end of the listing.
            let clusters = (entries.len() as u64).div_ceil(g.cluster_bytes()).max(1);
            entries.resize((clusters * g.cluster_bytes()) as usize, 0);
            dev.seek(SeekFrom::Start(g.cluster_offset(*cluster)))?;
            dev.write_all(&entries)?;
            let own = if label.is_some() { 0 } else { *cluster };
            for (_, child) in children {
                write_node(dev, g, child, own, None)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn names_are_upper_case_8_3() {
        assert_eq!(&short_name("BOOTX64.EFI").unwrap(), b"BOOTX64 EFI");
        assert_eq!(&short_name("EFI").unwrap(), b"EFI        ");
        for bad in ["bootx64.efi", "TOOLONGNAME.EFI", "A.LONG", ".EFI", "A.", "A B", ""] {
            assert!(matches!(short_name(bad), Err(FatWriteError::Name { .. })), "{bad:?}");
        }
        assert!(label_bytes("EFI").is_ok());
        assert!(label_bytes("efi").is_err() && label_bytes("TWELVE_CHARS").is_err());
    }

    #[test]
    fn geometry_follows_mkfs_fat() {
        // 100 MiB: one sector per cluster, as `mkfs.fat -F 32` picks.
        let g = Geometry::of(100 << 20).unwrap();
        assert_eq!((g.sectors, g.sectors_per_cluster), (204_800, 1));
        assert!(g.clusters >= MIN_CLUSTERS);
        assert!(g.fat_sectors * 128 >= g.clusters + 2, "the FAT covers every cluster");
        assert_eq!(Geometry::of(2101 << 20).unwrap().sectors_per_cluster, 8);
        assert!(matches!(Geometry::of(16 << 20), Err(FatWriteError::TooSmall { .. })));
    }

    /// What the real tools make of our volume: fsck.fat finds nothing wrong, mtools lists and
    /// reads the files back byte for byte, blkid reads label and serial.
    #[test]
    fn dosfstools_and_mtools_read_what_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("esp.img");
        let big: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
        let mut f = std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&img).unwrap();
        f.set_len(100 << 20).unwrap();
        let tree = Tree::new()
            .file("EFI/BOOT/BOOTX64.EFI", big.clone())
            .file("EFI/BOOT/GRUB.CFG", b"configfile /grub.cfg\n".to_vec())
            .dir("EFI/EMPTY")
            .file("EMPTY.TXT", Vec::new())
            .file("README.TXT", b"talosbox\n".to_vec());
        format(&mut f, 100 << 20, "EFI", 0x1234_abcd, tree).unwrap();
        drop(f);

        let fsck = Command::new("fsck.fat").arg("-n").arg(&img).output().expect("fsck.fat (dosfstools) runs");
        let report = String::from_utf8_lossy(&fsck.stdout).to_string() + &String::from_utf8_lossy(&fsck.stderr);
        assert!(fsck.status.success(), "fsck.fat -n: {report}");
        assert!(!report.contains("differ") && !report.contains("Free cluster summary"), "{report}");

        let mtype = |path: &str| {
            let out = Command::new("mtype")
                .env("MTOOLS_SKIP_CHECK", "1")
                .arg("-i")
                .arg(&img)
                .arg(format!("::{path}"))
                .output()
                .expect("mtype (mtools) runs");
            assert!(out.status.success(), "mtype {path}: {}", String::from_utf8_lossy(&out.stderr));
            out.stdout
        };
        assert_eq!(mtype("/EFI/BOOT/BOOTX64.EFI"), big);
        assert_eq!(mtype("/EFI/BOOT/GRUB.CFG"), b"configfile /grub.cfg\n");
        assert_eq!(mtype("/README.TXT"), b"talosbox\n");
        assert!(mtype("/EMPTY.TXT").is_empty());
        let ls = Command::new("mdir").env("MTOOLS_SKIP_CHECK", "1").arg("-i").arg(&img).arg("::/EFI").output().unwrap();
        let listing = String::from_utf8_lossy(&ls.stdout);
        assert!(listing.contains("BOOT") && listing.contains("EMPTY"), "{listing}");

        let blkid = Command::new("blkid").args(["-p", "-o", "export"]).arg(&img).output().unwrap();
        let ids = String::from_utf8_lossy(&blkid.stdout);
        assert!(ids.contains("TYPE=vfat") && ids.contains("LABEL=EFI"), "{ids}");
        assert!(ids.contains("UUID=1234-ABCD"), "{ids}");

        // And our own reader agrees on label and root files.
        let mut fs = crate::block::fat::Fat::open(std::fs::File::open(&img).unwrap()).unwrap().unwrap();
        assert_eq!(fs.kind(), crate::block::fat::FatKind::Fat32);
        assert_eq!(fs.label().unwrap(), "EFI");
        assert_eq!(fs.read_root_file("README.TXT", 100).unwrap().unwrap(), b"talosbox\n");
    }

    #[test]
    fn the_same_tree_gives_the_same_bytes_and_bad_trees_are_refused() {
        let make = || {
            let mut buf = io::Cursor::new(vec![0u8; 64 << 20]);
            format(&mut buf, 64 << 20, "EFI", 7, Tree::new().file("A/B.BIN", vec![1, 2, 3])).unwrap();
            buf.into_inner()
        };
        assert_eq!(make(), make());
        let mut buf = io::Cursor::new(vec![0u8; 64 << 20]);
        let twice = Tree::new().file("A.BIN", vec![1]).file("A.BIN", vec![2]);
        assert!(matches!(format(&mut buf, 64 << 20, "EFI", 7, twice), Err(FatWriteError::Tree { .. })));
        let under_file = Tree::new().file("A", vec![1]).file("A/B", vec![2]);
        assert!(matches!(format(&mut buf, 64 << 20, "EFI", 7, under_file), Err(FatWriteError::Tree { .. })));
        let full = Tree::new().file("BIG.BIN", vec![0; 70 << 20]);
        assert!(matches!(format(&mut buf, 64 << 20, "EFI", 7, full), Err(FatWriteError::Full { .. })));
    }
}

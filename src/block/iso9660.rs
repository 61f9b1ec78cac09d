//! A read-only ISO 9660 reader: the volume label and the files of the root directory, by
//! their Joliet names when the image has a Joliet tree, else by their Rock Ridge names, else
//! by their plain ISO names. That is all a nocloud `cidata` image (`genisoimage -volid cidata
//! -joliet -rock`, or xorriso's) asks of it, and it needs no mount and no `isofs` module.
//!
//! On-disk facts (ECMA-119, Joliet, SUSP/RRIP 1.12): volume descriptors from sector 16 of
//! 2048 bytes, "CD001" after the type byte (1 primary, 2 supplementary — Joliet when its
//! escape sequence is `%/@`, `%/C` or `%/E` — 255 terminator); directory records with the
//! extent and length little-endian at 2 and 10, flags at 25, the name at 33; Rock Ridge's
//! `NM` entries in the record's system-use area.

use std::io::{self, Read, Seek};

use super::{invalid, le16, le32, read_at};

const SECTOR: u64 = 2048;
const FIRST_DESCRIPTOR: u64 = 16;
/// Descriptors read before giving up on a terminator.
const MAX_DESCRIPTORS: u64 = 32;
const MAX_DIRECTORY: u32 = 1 << 20;
const FLAG_DIRECTORY: u8 = 0x02;
const FLAG_MULTI_EXTENT: u8 = 0x80;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    Joliet,
    /// Rock Ridge where a record has an `NM` entry, the ISO name where not.
    Iso,
}

/// An opened ISO 9660 volume.
#[derive(Debug)]
pub struct Iso9660<R> {
    dev: R,
    label: String,
    block: u64,
    /// The volume space size, in logical blocks.
    blocks: u32,
    uuid: Option<String>,
    /// The root directory to read files from, and how its names are written.
    root: (u32, u32, Names),
}

/// One entry of a directory, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub directory: bool,
    extent: u32,
    pub size: u32,
    multi_extent: bool,
}

fn ucs2(raw: &[u8]) -> String {
    let units: Vec<u16> = raw.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
    String::from_utf16_lossy(&units)
}

/// A dec-datetime (16 digits and a time-zone byte) as `YYYY-MM-DD-HH-MM-SS-CC`; `None` when
/// unset (all digits zero with a zero zone) or not digits.
fn volume_date(raw: &[u8]) -> Option<String> {
    let (digits, zone) = raw.split_at(16);
    if !digits.iter().all(u8::is_ascii_digit) || (digits.iter().all(|&d| d == b'0') && zone[0] == 0) {
        return None;
    }
    let d = |r: std::ops::Range<usize>| std::str::from_utf8(&digits[r]).unwrap_or_default();
    Some(format!("{}-{}-{}-{}-{}-{}-{}", d(0..4), d(4..6), d(6..8), d(8..10), d(10..12), d(12..14), d(14..16)))
}

/// A file identifier without its `;1` version and the `.` of an empty extension.
fn strip_version(name: &str) -> String {
    let base = name.split_once(';').map_or(name, |(b, _)| b);
    base.strip_suffix('.').unwrap_or(base).to_string()
}

impl<R: Read + Seek> Iso9660<R> {
    /// Reads the volume descriptors; `Ok(None)` when it is not an ISO 9660 file system.
    pub fn open(mut dev: R) -> io::Result<Option<Iso9660<R>>> {
        let mut primary = None;
        let mut joliet = None;
        let mut vd = [0u8; SECTOR as usize];
        for n in 0..MAX_DESCRIPTORS {
            if !read_at(&mut dev, (FIRST_DESCRIPTOR + n) * SECTOR, &mut vd)? || &vd[1..6] != b"CD001" {
                break;
            }
            match vd[0] {
                1 if primary.is_none() => primary = Some(vd),
                2 if vd[88..90] == *b"%/" && matches!(vd[90], b'@' | b'C' | b'E') => joliet = Some(vd),
                255 => break,
                _ => {}
            }
        }
        let Some(pvd) = primary else { return Ok(None) };
        let block = u64::from(le16(&pvd, 128));
        if !matches!(block, 512 | 1024 | 2048) {
            return Err(invalid(format!("ISO 9660: a logical block of {block} bytes")));
        }
        let root_of = |d: &[u8; SECTOR as usize]| (le32(d, 156 + 2), le32(d, 156 + 10));
        let mut label = String::from_utf8_lossy(&pvd[40..72]).trim_end().to_string();
        if label.is_empty()
            && let Some(j) = &joliet
        {
            label = ucs2(&j[40..72]).trim_end().to_string();
        }
        let root = match &joliet {
            Some(j) => {
                let (extent, size) = root_of(j);
                (extent, size, Names::Joliet)
            }
            None => {
                let (extent, size) = root_of(&pvd);
                (extent, size, Names::Iso)
            }
        };
        // blkid's UUID: the modification date, else the creation date (ECMA-119 8.4.27, 8.4.26).
        let uuid = volume_date(&pvd[830..847]).or_else(|| volume_date(&pvd[813..830]));
        Ok(Some(Iso9660 { dev, label, block, blocks: le32(&pvd, 80), uuid, root }))
    }

    /// The volume identifier of the primary descriptor (the Joliet one when that is blank).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Bytes per logical block.
    pub fn block_size(&self) -> u32 {
        // One of 512, 1024, 2048: checked in `open`.
        self.block as u32
    }

    /// The volume's size in bytes, as its primary descriptor counts it.
    pub fn size(&self) -> u64 {
        u64::from(self.blocks) * self.block
    }

    /// The volume date blkid reports as UUID, `YYYY-MM-DD-HH-MM-SS-CC`.
    pub fn uuid(&self) -> Option<&str> {
        self.uuid.as_deref()
    }

    /// The entries of the root directory, without `.` and `..`.
    pub fn root(&mut self) -> io::Result<Vec<Entry>> {
        let (extent, size, names) = self.root;
        if size > MAX_DIRECTORY {
            return Err(invalid(format!("ISO 9660: a root directory of {size} bytes")));
        }
        let mut dir = vec![0u8; size as usize];
        if !read_at(&mut self.dev, u64::from(extent) * self.block, &mut dir)? {
            return Err(invalid("ISO 9660: the root directory lies past the end of the device"));
        }
        Ok(records(&dir, names))
    }

    /// The bytes of the root directory's file `name` (compared without regard to ASCII case);
    /// `Ok(None)` when there is none. A file larger than `max` is an error.
    pub fn read_root_file(&mut self, name: &str, max: usize) -> io::Result<Option<Vec<u8>>> {
        let Some(entry) = self.root()?.into_iter().find(|e| !e.directory && e.name.eq_ignore_ascii_case(name)) else {
            return Ok(None);
        };
        if entry.multi_extent {
            return Err(invalid(format!("ISO 9660: {name} is recorded in several extents")));
        }
        let size = entry.size as usize;
        if size > max {
            return Err(invalid(format!("ISO 9660: {name} is {size} bytes, more than the {max} read")));
        }
        let mut data = vec![0u8; size];
        if !read_at(&mut self.dev, u64::from(entry.extent) * self.block, &mut data)? {
            return Err(invalid(format!("ISO 9660: {name} lies past the end of the device")));
        }
        Ok(Some(data))
    }
}

/// The Rock Ridge name in a record's system-use area, if it has one.
fn rock_ridge_name(su: &[u8]) -> Option<String> {
    let mut name = Vec::new();
    let mut found = false;
    let mut i = 0;
    while i + 4 <= su.len() {
        let len = usize::from(su[i + 2]);
        if len < 4 || i + len > su.len() {
            break;
        }
        if &su[i..i + 2] == b"NM" && len >= 5 {
            found = true;
            // Flags: 0x01 continues in the next NM; 0x02/0x04 name `.`/`..`.
            name.extend_from_slice(&su[i + 5..i + len]);
            if su[i + 4] & 0x01 == 0 {
                break;
            }
        }
        i += len;
    }
    found.then(|| String::from_utf8_lossy(&name).into_owned())
}

fn records(dir: &[u8], names: Names) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < dir.len() {
        let len = usize::from(dir[at]);
        if len == 0 {
            // Records do not cross a sector: the rest of this one is padding.
            at = (at / SECTOR as usize + 1) * SECTOR as usize;
            continue;
        }
        if len < 34 || at + len > dir.len() {
            break;
        }
        let rec = &dir[at..at + len];
        at += len;
        let id_len = usize::from(rec[32]);
        if 33 + id_len > rec.len() {
            continue;
        }
        let id = &rec[33..33 + id_len];
        if id == [0] || id == [1] {
            continue;
        }
        let name = match names {
            Names::Joliet => strip_version(&ucs2(id)),
            Names::Iso => {
                let su_start = 33 + id_len + usize::from(id_len % 2 == 0);
                rock_ridge_name(rec.get(su_start..).unwrap_or_default())
                    .unwrap_or_else(|| strip_version(&String::from_utf8_lossy(id)))
            }
        };
        out.push(Entry {
            name,
            directory: rec[25] & FLAG_DIRECTORY != 0,
            extent: le32(rec, 2),
            size: le32(rec, 10),
            multi_extent: rec[25] & FLAG_MULTI_EXTENT != 0,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use std::process::Command;

    const FILES: &[(&str, &[u8])] = &[
        ("meta-data", b"instance-id: i-1\nlocal-hostname: node-1\n"),
        ("network-config", b"version: 2\nethernets: {}\n"),
        ("user-data", b"version: v1alpha1\n"),
    ];

    /// An image made by `tool` (genisoimage or xorriso's mkisofs) with `args` from FILES.
    fn image(tool: &[&str], args: &[&str]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in FILES {
            std::fs::write(dir.path().join(name), bytes).unwrap();
        }
        let iso = dir.path().join("seed.iso");
        let out = Command::new(tool[0])
            .args(&tool[1..])
            .arg("-quiet")
            .arg("-o")
            .arg(&iso)
            .args(args)
            .args(FILES.iter().map(|(n, _)| *n))
            .current_dir(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("{} runs: {e}", tool[0]));
        assert!(out.status.success(), "{}: {}", tool[0], String::from_utf8_lossy(&out.stderr));
        std::fs::read(&iso).unwrap()
    }

    fn check(bytes: Vec<u8>, label: &str, what: &str) {
        let mut iso = Iso9660::open(Cursor::new(bytes)).unwrap().expect("an ISO 9660 volume");
        assert_eq!(iso.label(), label, "{what}");
        let mut names: Vec<String> = iso.root().unwrap().into_iter().map(|e| e.name).collect();
        names.sort();
        assert_eq!(names, ["meta-data", "network-config", "user-data"], "{what}");
        for (name, bytes) in FILES {
            assert_eq!(iso.read_root_file(name, 1 << 20).unwrap().as_deref(), Some(*bytes), "{what}: {name}");
        }
        assert_eq!(iso.read_root_file("vendor-data", 1 << 20).unwrap(), None);
        let err = iso.read_root_file("meta-data", 4).unwrap_err();
        assert_eq!(err.to_string(), "ISO 9660: meta-data is 40 bytes, more than the 4 read");
    }

    #[test]
    fn genisoimage_joliet_and_rock_ridge_as_cloud_init_documents() {
        check(image(&["genisoimage"], &["-volid", "cidata", "-joliet", "-rock"]), "cidata", "genisoimage -J -R");
    }

    #[test]
    fn rock_ridge_names_without_joliet() {
        check(image(&["genisoimage"], &["-volid", "cidata", "-rock"]), "cidata", "genisoimage -R");
        check(image(&["xorriso", "-as", "mkisofs"], &["-V", "CIDATA", "-r"]), "CIDATA", "xorriso -r");
    }

    #[test]
    fn joliet_names_without_rock_ridge() {
        check(image(&["xorriso", "-as", "mkisofs"], &["-V", "cidata", "-J"]), "cidata", "xorriso -J");
    }

    #[test]
    fn plain_iso_names_are_found_without_their_version() {
        let mut iso = Iso9660::open(Cursor::new(image(&["genisoimage"], &["-V", "cidata"]))).unwrap().unwrap();
        let mut names: Vec<String> = iso.root().unwrap().into_iter().map(|e| e.name).collect();
        names.sort();
        // ISO level 1: upper case, 8.3, '-' mapped to '_'.
        assert_eq!(names, ["META_DAT", "NETWORK_", "USER_DAT"]);
    }

    #[test]
    fn other_bytes_are_not_iso9660() {
        assert!(Iso9660::open(Cursor::new(vec![0u8; 40 * 2048])).unwrap().is_none());
        assert!(Iso9660::open(Cursor::new(vec![0u8; 1000])).unwrap().is_none());
    }
}

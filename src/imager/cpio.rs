//! A writer for the cpio "newc" archive format the kernel unpacks as an initramfs.
//!
//! Pure: it turns a list of entries into bytes, sorting them by path and pinning every
//! inode number, owner and timestamp so the same inputs give the same archive. It must never
//! read the host's clock, users or file metadata.

use std::collections::BTreeMap;

/// What an archive entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File(Vec<u8>),
    Symlink(String),
    /// A character device node (major, minor), e.g. `/dev/console` so the kernel can give
    /// `/init` its stdio before devtmpfs is mounted.
    CharDev(u32, u32),
}

/// One entry: a path relative to the archive root (no leading `/`), a permission mode
/// (the type bits are added from `kind`) and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub mode: u32,
    pub kind: Kind,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpioError {
    #[error("cpio entry {path:?}: path must be relative, non-empty and without `.`/`..` parts")]
    BadPath { path: String },
    #[error("cpio entry {path:?}: parent directory {parent:?} is not in the archive")]
    MissingParent { path: String, parent: String },
    #[error("cpio entry {path:?}: {size} bytes does not fit the newc 32-bit size field")]
    TooLarge { path: String, size: usize },
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;
const TRAILER: &str = "TRAILER!!!";

/// An archive being assembled; entries are kept sorted by path.
#[derive(Debug, Default)]
pub struct Archive {
    entries: BTreeMap<String, Entry>,
}

impl Archive {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) an entry, creating any missing parent directories with mode 0755.
    pub fn add(&mut self, path: &str, entry: Entry) -> Result<(), CpioError> {
        check_path(path)?;
        let mut parent = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            self.entries.entry(parent.clone()).or_insert(Entry { mode: 0o755, kind: Kind::Dir });
        }
        self.entries.insert(path.to_string(), entry);
        Ok(())
    }

    pub fn dir(&mut self, path: &str) -> Result<(), CpioError> {
        self.add(path, Entry { mode: 0o755, kind: Kind::Dir })
    }

    pub fn file(&mut self, path: &str, mode: u32, data: Vec<u8>) -> Result<(), CpioError> {
        self.add(path, Entry { mode, kind: Kind::File(data) })
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> Result<(), CpioError> {
        self.add(path, Entry { mode: 0o777, kind: Kind::Symlink(target.to_string()) })
    }

    /// Paths in archive order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Encodes the archive: entries in byte order of their paths (so a directory precedes its
    /// contents), inode numbers counted from 1, uid/gid 0, every mtime `mtime`.
    pub fn encode(&self, mtime: u32) -> Result<Vec<u8>, CpioError> {
        let mut out = Vec::new();
        for (ino, (path, entry)) in (1u32..).zip(&self.entries) {
            if let Some((parent, _)) = path.rsplit_once('/')
                && !self.entries.contains_key(parent)
            {
                return Err(CpioError::MissingParent { path: path.clone(), parent: parent.to_string() });
            }
            let (kind_bits, nlink, data): (u32, u32, &[u8]) = match &entry.kind {
                Kind::Dir => (S_IFDIR, 2, &[]),
                Kind::File(data) => (S_IFREG, 1, data),
                Kind::Symlink(target) => (S_IFLNK, 1, target.as_bytes()),
                Kind::CharDev(..) => (S_IFCHR, 1, &[]),
            };
            let (rdev_major, rdev_minor) = match entry.kind {
                Kind::CharDev(major, minor) => (major, minor),
                _ => (0, 0),
            };
            let size =
                u32::try_from(data.len()).map_err(|_| CpioError::TooLarge { path: path.clone(), size: data.len() })?;
            let header =
                Header { ino, mode: kind_bits | (entry.mode & 0o7777), nlink, mtime, size, rdev_major, rdev_minor };
            write_record(&mut out, &header, path, data);
        }
        let trailer = Header { ino: 0, mode: 0, nlink: 1, mtime: 0, size: 0, rdev_major: 0, rdev_minor: 0 };
        write_record(&mut out, &trailer, TRAILER, &[]);
        Ok(out)
    }
}

struct Header {
    ino: u32,
    mode: u32,
    nlink: u32,
    mtime: u32,
    size: u32,
    rdev_major: u32,
    rdev_minor: u32,
}

fn check_path(path: &str) -> Result<(), CpioError> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.ends_with('/')
        || path.split('/').any(|p| p.is_empty() || p == "." || p == "..")
        || path == TRAILER;
    if bad { Err(CpioError::BadPath { path: path.to_string() }) } else { Ok(()) }
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

fn write_record(out: &mut Vec<u8>, h: &Header, name: &str, data: &[u8]) {
    // newc: magic, then 13 eight-digit hex fields: ino mode uid gid nlink mtime filesize
    // devmajor devminor rdevmajor rdevminor namesize check.
    let namesize = name.len() as u32 + 1;
    let fields = [h.ino, h.mode, 0, 0, h.nlink, h.mtime, h.size, 0, 0, h.rdev_major, h.rdev_minor, namesize, 0];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08X}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(rec: &[u8], i: usize) -> u32 {
        let s = std::str::from_utf8(&rec[6 + i * 8..6 + (i + 1) * 8]).unwrap();
        u32::from_str_radix(s, 16).unwrap()
    }

    #[test]
    fn encodes_records_with_padding_and_trailer() {
        let mut a = Archive::new();
        a.file("init", 0o755, b"abcde".to_vec()).unwrap();
        let bytes = a.encode(1234).unwrap();
        // header 110 + "init\0" 5 = 115 -> pad to 116; data 5 -> pad to 8.
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(field(&bytes, 0), 1); // ino
        assert_eq!(field(&bytes, 1), 0o100755); // mode
        assert_eq!(field(&bytes, 5), 1234); // mtime
        assert_eq!(field(&bytes, 6), 5); // size
        assert_eq!(field(&bytes, 11), 5); // namesize
        assert_eq!(&bytes[110..115], b"init\0");
        assert_eq!(&bytes[116..121], b"abcde");
        let trailer = &bytes[124..];
        assert_eq!(&trailer[..6], b"070701");
        assert_eq!(&trailer[110..121], b"TRAILER!!!\0");
        assert_eq!(bytes.len() % 4, 0);
    }

    #[test]
    fn table_of_entries() {
        // (paths added in this order, expected archive order)
        let cases: &[(&[&str], &[&str])] = &[
            (&["b", "a"], &["a", "b"]),
            (&["lib/modules/x/a.ko"], &["lib", "lib/modules", "lib/modules/x", "lib/modules/x/a.ko"]),
            (&["a-b", "a/b"], &["a", "a-b", "a/b"]),
        ];
        for (add, want) in cases {
            let mut a = Archive::new();
            for p in *add {
                a.file(p, 0o644, vec![]).unwrap();
            }
            assert_eq!(a.paths().collect::<Vec<_>>(), *want, "adding {add:?}");
        }
    }

    #[test]
    fn rejects_bad_paths() {
        for p in ["", "/init", "a//b", "a/./b", "../x", "dir/", "TRAILER!!!"] {
            let mut a = Archive::new();
            assert_eq!(a.dir(p), Err(CpioError::BadPath { path: p.to_string() }), "{p:?}");
        }
    }

    #[test]
    fn symlink_and_dir_records() {
        let mut a = Archive::new();
        a.symlink("sbin/machined", "init").unwrap();
        let bytes = a.encode(0).unwrap();
        // first record: directory "sbin"
        assert_eq!(field(&bytes, 1), 0o040755);
        assert_eq!(field(&bytes, 4), 2);
        let pos = bytes.windows(13).position(|w| w == b"sbin/machined").unwrap() - 110;
        assert_eq!(field(&bytes[pos..], 1), 0o120777);
        assert_eq!(field(&bytes[pos..], 6), 4);
        assert_eq!(field(&bytes[pos..], 0), 2);
    }

    #[test]
    fn char_device_record() {
        let mut a = Archive::new();
        a.add("dev/console", Entry { mode: 0o600, kind: Kind::CharDev(5, 1) }).unwrap();
        let bytes = a.encode(0).unwrap();
        let pos = bytes.windows(11).position(|w| w == b"dev/console").unwrap() - 110;
        let rec = &bytes[pos..];
        assert_eq!((field(rec, 1), field(rec, 6), field(rec, 9), field(rec, 10)), (0o020600, 0, 5, 1));
    }

    #[test]
    fn identical_inputs_identical_bytes() {
        let build = |order: &[&str]| {
            let mut a = Archive::new();
            for p in order {
                a.file(p, 0o644, p.as_bytes().to_vec()).unwrap();
            }
            a.encode(7).unwrap()
        };
        assert_eq!(build(&["x/1", "y", "x/2"]), build(&["y", "x/2", "x/1"]));
    }
}

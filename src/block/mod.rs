//! Block devices and what is on them, read without mounting: the GUID partition table (read,
//! placed and written for the imager and the volume manager), the node's own blkid (`probe`),
//! the two file systems a nocloud seed comes on (vfat and ISO 9660) and the files of their
//! root directories (and FAT32 written, `fat_write`), the disks sysfs lists (`sysblock`), the mkfs command lines (`format`), the
//! META partition's key/value format and its one writer (`meta`), LUKS2 headers, keyslots and
//! dm-crypt tables (`luks2`), the swap area header (`swap`), the CEL expressions that volume
//! configs select disks and locate volumes with (`selector`), and the fast wipe (`wipe`). Its
//! plain data (devices, disks, filesystem types, encryption specs) is in `types`, which the
//! resources re-export.

pub mod encryption;
pub mod fat;
pub mod fat_write;
pub mod format;
pub mod gpt;
pub mod iso9660;
pub mod luks2;
pub mod meta;
pub mod probe;
pub mod selector;
pub mod swap;
pub mod sysblock;
pub mod tpm;
pub mod tpm_key;
pub mod types;
pub mod wipe;

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

pub(crate) fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// The little-endian integers of on-disk structures, at byte `at` of `b`.
pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Fills `buf` from `offset`; `Ok(false)` when the device ends first.
pub(crate) fn read_at<R: Read + Seek>(dev: &mut R, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
    dev.seek(SeekFrom::Start(offset))?;
    match dev.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// A file system this module reads.
#[derive(Debug)]
pub enum Filesystem<R> {
    Vfat(fat::Fat<R>),
    Iso9660(iso9660::Iso9660<R>),
}

impl<R: Read + Seek> Filesystem<R> {
    /// What is on `dev`, when it is one of the file systems read here.
    pub fn probe(mut dev: R) -> io::Result<Option<Filesystem<R>>> {
        // ISO 9660 first: a hybrid image (isohybrid) also has a boot sector at 0.
        let mut magic = [0u8; 5];
        if read_at(&mut dev, 16 * 2048 + 1, &mut magic)? && &magic == b"CD001" {
            return Ok(iso9660::Iso9660::open(dev)?.map(Filesystem::Iso9660));
        }
        Ok(fat::Fat::open(dev)?.map(Filesystem::Vfat))
    }

    /// blkid's TYPE.
    pub fn kind(&self) -> &'static str {
        match self {
            Filesystem::Vfat(_) => "vfat",
            Filesystem::Iso9660(_) => "iso9660",
        }
    }

    pub fn label(&mut self) -> io::Result<String> {
        match self {
            Filesystem::Vfat(fs) => fs.label(),
            Filesystem::Iso9660(fs) => Ok(fs.label().to_string()),
        }
    }

    /// The bytes of the root directory's file `name`, at most `max` of them.
    pub fn read_root_file(&mut self, name: &str, max: usize) -> io::Result<Option<Vec<u8>>> {
        match self {
            Filesystem::Vfat(fs) => fs.read_root_file(name, max),
            Filesystem::Iso9660(fs) => fs.read_root_file(name, max),
        }
    }
}

/// Opens `path` read-only and probes it.
pub fn probe_path(path: &Path) -> io::Result<Option<Filesystem<File>>> {
    Filesystem::probe(File::open(path)?)
}

/// The node's block devices, whole disks and partitions, as the device nodes under `dev`
/// named by `sys_class_block` (`/sys/class/block`, `/dev` on a node), in name order.
pub fn block_devices(sys_class_block: &Path, dev: &Path) -> io::Result<Vec<PathBuf>> {
    let mut names: Vec<String> = std::fs::read_dir(sys_class_block)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // RAM disks hold nothing a node was given; an unbound loop device has no size.
        .filter(|n| !n.starts_with("ram"))
        .filter(|n| {
            std::fs::read_to_string(sys_class_block.join(n).join("size"))
                .is_ok_and(|s| s.trim().parse::<u64>().is_ok_and(|sectors| sectors > 0))
        })
        .collect();
    names.sort();
    Ok(names.into_iter().map(|n| dev.join(n)).collect())
}

/// The first device whose vfat or ISO 9660 label is one of `labels`, with its file system.
/// Devices that cannot be opened or read (a CD drive without a disc) are passed over.
pub fn find_by_label(devices: &[PathBuf], labels: &[&str]) -> Option<(PathBuf, Filesystem<File>)> {
    devices.iter().find_map(|path| {
        let mut fs = probe_path(path).ok()??;
        let label = fs.label().ok()?;
        labels.contains(&label.as_str()).then(|| (path.clone(), fs))
    })
}

/// FAT images made by the real tools, for the tests here and of the nocloud seed.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;
    use std::process::Command;

    /// Formats `img` (created, `kib` KiB) with mkfs.fat (dosfstools), FAT type `fat` or
    /// mkfs.fat's choice, label `label`, and copies `files` into its root with mcopy (mtools),
    /// as cloud-init's documentation makes a vfat seed.
    pub(crate) fn vfat(img: &Path, fat: Option<u8>, kib: u32, label: &str, files: &[(&str, &[u8])]) {
        let mut mkfs = Command::new("mkfs.fat");
        mkfs.arg("-C").args(["-n", label, "-i", "12345678"]);
        if let Some(fat) = fat {
            mkfs.args(["-F", &fat.to_string()]);
        }
        let out = mkfs.arg(img).arg(kib.to_string()).output().expect("mkfs.fat (dosfstools) runs");
        assert!(out.status.success(), "mkfs.fat: {}", String::from_utf8_lossy(&out.stderr));
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in files {
            let src = dir.path().join(name);
            std::fs::write(&src, bytes).unwrap();
            let out = Command::new("mcopy")
                .env("MTOOLS_SKIP_CHECK", "1")
                .arg("-i")
                .arg(img)
                .arg(&src)
                .arg(format!("::{name}"))
                .output()
                .expect("mcopy (mtools) runs");
            assert!(out.status.success(), "mcopy: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn finds_a_seed_among_other_devices_by_label() {
        let dir = tempfile::tempdir().unwrap();
        let vfat = dir.path().join("vfat");
        assert!(
            Command::new("mkfs.fat")
                .args(["-C", "-n", "CIDATA"])
                .arg(&vfat)
                .arg("1440")
                .output()
                .unwrap()
                .status
                .success()
        );
        let other = dir.path().join("other");
        assert!(
            Command::new("mkfs.fat")
                .args(["-C", "-n", "DATA"])
                .arg(&other)
                .arg("1440")
                .output()
                .unwrap()
                .status
                .success()
        );
        let iso = dir.path().join("iso");
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        std::fs::write(files.join("meta-data"), "{}").unwrap();
        let made = Command::new("genisoimage")
            .args(["-quiet", "-volid", "cidata", "-joliet", "-rock", "-o"])
            .arg(&iso)
            .arg(&files)
            .status()
            .unwrap();
        assert!(made.success());
        let zeros = dir.path().join("zeros");
        std::fs::write(&zeros, vec![0u8; 1 << 16]).unwrap();
        let missing = dir.path().join("missing");

        let devices = vec![missing.clone(), zeros.clone(), other.clone(), vfat.clone(), iso.clone()];
        let (found, mut fs) = find_by_label(&devices, &["cidata", "CIDATA"]).unwrap();
        assert_eq!((found, fs.kind(), fs.label().unwrap()), (vfat, "vfat", "CIDATA".to_string()));
        let (found, mut fs) = find_by_label(&devices, &["cidata"]).unwrap();
        assert_eq!((found, fs.kind()), (iso, "iso9660"));
        assert_eq!(fs.read_root_file("meta-data", 10).unwrap().unwrap(), b"{}");
        assert!(find_by_label(&[missing, zeros, other], &["cidata", "CIDATA"]).is_none());
    }

    #[test]
    fn block_devices_lists_those_with_a_size() {
        let sys = tempfile::tempdir().unwrap();
        for (name, size) in [("vda", "20971520"), ("vda1", "2048"), ("loop0", "0"), ("ram0", "8192"), ("sr0", "764")] {
            std::fs::create_dir(sys.path().join(name)).unwrap();
            std::fs::write(sys.path().join(name).join("size"), format!("{size}\n")).unwrap();
        }
        let got = block_devices(sys.path(), Path::new("/dev")).unwrap();
        assert_eq!(got, [PathBuf::from("/dev/sr0"), PathBuf::from("/dev/vda"), PathBuf::from("/dev/vda1")]);
    }
}

//! Wiping a partition or a disk. The fast wipe zeros its first and last MiB, where every
//! signature the node knows lives (the GPT and its backup, xfs's and ext4's primary
//! superblocks, both LUKS2 headers, vfat's boot sector, swap's page, META's two copies are
//! inside the first MiB of a 1 MiB partition). After it the probe finds nothing, so the volume
//! manager makes the volume again; the data blocks in between are left (Talos's fast method).
//! The zeroes wipe writes every byte. Dropping a partition removes its entry from its disk's
//! GPT; telling the kernel is the caller's next step (`kernel::blockdev`).
//!
//! The device is opened exclusively: the kernel refuses that while it is mounted, held by
//! device-mapper or open exclusively elsewhere, so a wipe never pulls a filesystem out from
//! under its mount. Nothing here decides whether a device may be wiped: that is the caller's
//! check against the volumes the node has.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::gpt;

/// How much of each end is zeroed.
pub const WIPE_SPAN: u64 = 1 << 20;

/// How much the zeroes wipe writes at a time.
const ZERO_CHUNK: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum WipeError {
    #[error("opening {path} exclusively (is it mounted or in use?): {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("wiping {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("dropping partition {number} of {disk}: {source}")]
    Table { disk: PathBuf, number: u32, source: gpt::GptError },
    #[error("dropping partition {number} of {disk}: the disk has no partition table")]
    NoTable { disk: PathBuf, number: u32 },
}

impl WipeError {
    /// Whether the device could not be opened because it is in use (EBUSY: mounted, held by
    /// device-mapper, or open exclusively elsewhere).
    pub fn in_use(&self) -> bool {
        matches!(self, WipeError::Open { source, .. } if source.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()))
    }
}

/// Talos's wipe methods (`BlockDeviceWipeDescriptor.Method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// [`fast_wipe`].
    Fast,
    /// [`zeroes_wipe`].
    Zeroes,
}

/// Wipes `path` by `method`; the size of the device.
pub fn wipe(path: &Path, method: Method) -> Result<u64, WipeError> {
    match method {
        Method::Fast => fast_wipe(path),
        Method::Zeroes => zeroes_wipe(path),
    }
}

/// `path` opened for writing, exclusively, and its size.
fn open_exclusive(path: &Path) -> Result<(File, u64), WipeError> {
    let mut dev = OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
        .open(path)
        .map_err(|source| WipeError::Open { path: path.to_path_buf(), source })?;
    let size = dev.seek(SeekFrom::End(0)).map_err(|source| WipeError::Write { path: path.to_path_buf(), source })?;
    Ok((dev, size))
}

/// Zeros the first and last [`WIPE_SPAN`] bytes of `path` (all of it when it is smaller than
/// two spans) and flushes them to the device; the size wiped.
pub fn fast_wipe(path: &Path) -> Result<u64, WipeError> {
    let write_err = |source| WipeError::Write { path: path.to_path_buf(), source };
    let (mut dev, size) = open_exclusive(path)?;
    let zeros = vec![0u8; WIPE_SPAN as usize];
    let zero = |dev: &mut File, at: u64, len: u64| -> std::io::Result<()> {
        dev.seek(SeekFrom::Start(at))?;
        dev.write_all(&zeros[..len as usize])
    };
    let head = size.min(WIPE_SPAN);
    zero(&mut dev, 0, head).map_err(write_err)?;
    let tail_at = size.saturating_sub(WIPE_SPAN).max(head);
    zero(&mut dev, tail_at, size - tail_at).map_err(write_err)?;
    dev.sync_all().map_err(write_err)?;
    Ok(size)
}

/// Writes zeros over every byte of `path`, front to back, and flushes them to the device; the
/// size wiped. Slow on a large disk: it is one pass of plain writes.
pub fn zeroes_wipe(path: &Path) -> Result<u64, WipeError> {
    let write_err = |source| WipeError::Write { path: path.to_path_buf(), source };
    let (mut dev, size) = open_exclusive(path)?;
    dev.seek(SeekFrom::Start(0)).map_err(write_err)?;
    let zeros = vec![0u8; ZERO_CHUNK];
    let mut left = size;
    while left > 0 {
        let n = left.min(ZERO_CHUNK as u64);
        dev.write_all(&zeros[..n as usize]).map_err(write_err)?;
        left -= n;
    }
    dev.sync_all().map_err(write_err)?;
    Ok(size)
}

/// Removes partition `number` (1-based) from the GPT on `disk` (a file or device opened
/// read-write, of `size_bytes` with `sector_size`-byte sectors, at `path`) and writes the
/// table back; the partition removed. The other partitions keep their numbers and places.
pub fn remove_partition(
    disk: &File,
    path: &Path,
    size_bytes: u64,
    sector_size: u64,
    number: u32,
) -> Result<gpt::Placed, WipeError> {
    let table_err = |source| WipeError::Table { disk: path.to_path_buf(), number, source };
    let mut table = gpt::Table::read_with_sector_size(disk, size_bytes, sector_size)
        .map_err(table_err)?
        .ok_or_else(|| WipeError::NoTable { disk: path.to_path_buf(), number })?;
    let removed = table.remove_partition(number).map_err(table_err)?;
    table.write(disk).map_err(table_err)?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn blkid_type(path: &Path) -> String {
        let out = Command::new("blkid").args(["-p", "-o", "value", "-s", "TYPE"]).arg(path).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn a_wiped_filesystem_and_table_are_gone_and_the_middle_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("disk.img");
        std::fs::File::create(&img).unwrap().set_len(300 << 20).unwrap();
        assert!(Command::new("mkfs.xfs").args(["-q", "-f"]).arg(&img).status().unwrap().success());
        assert_eq!(blkid_type(&img), "xfs");
        // A byte in the middle stands for data the fast method leaves.
        let mut f = OpenOptions::new().write(true).open(&img).unwrap();
        f.seek(SeekFrom::Start(100 << 20)).unwrap();
        f.write_all(b"kept").unwrap();
        drop(f);
        assert_eq!(fast_wipe(&img).unwrap(), 300 << 20);
        assert_eq!(blkid_type(&img), "", "no signature is left");
        assert!(crate::block::probe::probe_path(&img, 512).unwrap().is_none());
        let bytes = std::fs::read(&img).unwrap();
        assert!(bytes[..1 << 20].iter().all(|b| *b == 0));
        assert!(bytes[bytes.len() - (1 << 20)..].iter().all(|b| *b == 0));
        assert_eq!(&bytes[100 << 20..(100 << 20) + 4], b"kept");

        // A GPT disk: both headers go, and sgdisk finds no table.
        assert!(Command::new("sgdisk").args(["-o", "-n", "1:2048:+10M"]).arg(&img).output().unwrap().status.success());
        fast_wipe(&img).unwrap();
        let table = crate::block::gpt::Table::read(&std::fs::File::open(&img).unwrap(), 300 << 20).unwrap();
        assert!(table.is_none(), "neither GPT header is left");
        assert_eq!(blkid_type(&img), "");
    }

    #[test]
    fn zeroes_reach_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("disk.img");
        // Not a multiple of the chunk, so the last write is a short one.
        let size = (9 << 20) + 4096 + 512;
        std::fs::write(&img, vec![0x5Au8; size]).unwrap();
        assert!(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img).status().unwrap().success());
        assert_eq!(blkid_type(&img), "ext4");
        assert_eq!(wipe(&img, Method::Zeroes).unwrap(), size as u64);
        let bytes = std::fs::read(&img).unwrap();
        assert_eq!(bytes.len(), size, "the wipe does not grow the device");
        assert!(bytes.iter().all(|b| *b == 0), "a byte at {:?} is left", bytes.iter().position(|b| *b != 0));
        assert_eq!(blkid_type(&img), "");
    }

    fn sgdisk(img: &Path, args: &[&str]) -> String {
        let out = Command::new("sgdisk").args(args).arg(img).output().unwrap();
        assert!(out.status.success(), "sgdisk {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn a_dropped_partition_is_gone_for_sgdisk_and_the_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("disk.img");
        std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
        sgdisk(
            &img,
            &["-o", "-n", "1:2048:+10M", "-c", "1:u-data", "-n", "2:0:+10M", "-c", "2:r-raw", "-n", "3:0:+5M"],
        );
        let before = sgdisk(&img, &["-i", "3"]);

        let disk = OpenOptions::new().read(true).write(true).open(&img).unwrap();
        let removed = remove_partition(&disk, &img, 64 << 20, 512, 2).unwrap();
        drop(disk);
        assert_eq!(removed.number, 2);
        assert_eq!(removed.partition.name, "r-raw");
        assert_eq!(removed.offset, (2048 + 10 * 2048) * 512);
        assert_eq!(removed.size, 10 << 20);

        let verify = sgdisk(&img, &["-v"]);
        assert!(verify.contains("No problems found"), "{verify}");
        let listed = sgdisk(&img, &["-p"]);
        assert!(listed.contains("u-data"), "{listed}");
        assert!(!listed.contains("r-raw"), "{listed}");
        // Partition 3 keeps its number and its place.
        assert_eq!(sgdisk(&img, &["-i", "3"]), before);
        let lines: Vec<&str> = listed.lines().filter(|l| l.trim_start().starts_with(char::is_numeric)).collect();
        assert_eq!(lines.len(), 2, "{listed}");

        // A second drop of the same number names what is missing.
        let disk = OpenOptions::new().read(true).write(true).open(&img).unwrap();
        let e = remove_partition(&disk, &img, 64 << 20, 512, 2).unwrap_err().to_string();
        assert!(e.contains("partition 2") && e.contains("disk.img") && e.contains("no partition 2"), "{e}");
    }

    #[test]
    fn dropping_from_a_disk_without_a_table_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("blank.img");
        std::fs::File::create(&img).unwrap().set_len(8 << 20).unwrap();
        let disk = OpenOptions::new().read(true).write(true).open(&img).unwrap();
        let e = remove_partition(&disk, &img, 8 << 20, 512, 1).unwrap_err();
        assert!(matches!(e, WipeError::NoTable { number: 1, .. }), "{e}");
    }

    #[test]
    fn smaller_than_two_spans_is_zeroed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("meta.img");
        std::fs::write(&img, vec![0xAAu8; 1_500_000]).unwrap();
        fast_wipe(&img).unwrap();
        assert!(std::fs::read(&img).unwrap().iter().all(|b| *b == 0));
    }

    #[test]
    fn a_missing_device_is_an_error_that_names_it() {
        let e = fast_wipe(Path::new("/nonexistent/vdz")).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/vdz"), "{e}");
    }
}

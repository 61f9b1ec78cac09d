//! The fast wipe of a partition or a disk: zeros over its first and last MiB, where every
//! signature the node knows lives (the GPT and its backup, xfs's and ext4's primary
//! superblocks, both LUKS2 headers, vfat's boot sector, swap's page, META's two copies are
//! inside the first MiB of a 1 MiB partition). After it the probe finds nothing, so the volume
//! manager makes the volume again; the data blocks in between are left (Talos's fast method).
//!
//! The device is opened exclusively: the kernel refuses that while it is mounted, held by
//! device-mapper or open exclusively elsewhere, so a wipe never pulls a filesystem out from
//! under its mount.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// How much of each end is zeroed.
pub const WIPE_SPAN: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum WipeError {
    #[error("opening {path} exclusively (is it mounted or in use?): {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("wiping {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Zeros the first and last [`WIPE_SPAN`] bytes of `path` (all of it when it is smaller than
/// two spans) and flushes them to the device; the size wiped.
pub fn fast_wipe(path: &Path) -> Result<u64, WipeError> {
    let open_err = |source| WipeError::Open { path: path.to_path_buf(), source };
    let write_err = |source| WipeError::Write { path: path.to_path_buf(), source };
    let mut dev = OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
        .open(path)
        .map_err(open_err)?;
    let size = dev.seek(SeekFrom::End(0)).map_err(write_err)?;
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

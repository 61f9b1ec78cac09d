//! A node's disks, as Talos's QEMU provisioner gives them: a persistent system disk — a copy of
//! the imager's `disk.raw` (the GRUB disk with its EFI, BIOS, BOOT and META partitions) grown to
//! `--disk-size` — where the node keeps META, STATE and EPHEMERAL, and `--extra-disks` blank
//! ones. Each is a raw file in the cluster directory that QEMU writes in place (no
//! `snapshot=on`), so what a node wrote survives its QEMU being killed, and each is sparse: the
//! copy seeks over the image's holes (SEEK_DATA/SEEK_HOLE) and skips zero blocks, so a 6 GiB
//! disk costs the host what is written to it. With `--blank-disk` the system disk starts blank
//! instead, for a node that installs itself onto it; whether it did, the launcher asks
//! [`holds_installed_layout`] of the disk's file when the node reboots. File names, serials and
//! sizes are decided here, purely; [`make`] is the one effect that writes.
//!
//! Never writes to the image it copies, never overwrites an existing file, and never edits the
//! partition table: the copy keeps the image's GPT, whose backup header the node itself moves
//! to the grown disk's end.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{ProvisionError, io_err};
use crate::block::gpt::Table;

pub const MIB: u64 = 1 << 20;

/// Talos's `--disk` default: the system disk's size, MiB.
pub const DEFAULT_SYSTEM_MIB: u64 = 6144;
/// Talos's `--extra-disks-size` default, MiB.
pub const DEFAULT_EXTRA_MIB: u64 = 5120;
/// The most extra disks per node: each takes a PCI slot on the machine's one bus.
pub const MAX_EXTRA_DISKS: usize = 16;

/// The serial the system disk carries (`/dev/disk/by-id/virtio-talosbox-system`).
pub const SYSTEM_SERIAL: &str = "talosbox-system";
/// The serial of the UKI's ESP image (the boot disk of a UKI node, not one of its disks).
pub const ESP_SERIAL: &str = "talosbox-esp";
/// virtio-blk's serial field holds 20 bytes; a longer serial is cut short in the guest.
pub const SERIAL_MAX: usize = 20;

/// The serial of extra disk `n` (1-based): `talosbox-extra-<n>`.
pub fn extra_serial(n: usize) -> String {
    format!("talosbox-extra-{n}")
}

/// What a disk is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskRole {
    /// The disk the node boots from or keeps its system volumes on; the first of its disks.
    System,
    /// A blank disk for user volumes.
    Extra,
}

/// One disk of one node: the cluster record lists these, and QEMU gets one drive per disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDisk {
    pub role: DiskRole,
    /// The raw file, inside the cluster directory.
    pub path: PathBuf,
    /// The virtio serial the guest sees (`/dev/disk/by-id/virtio-<serial>`).
    pub serial: String,
    pub size_mib: u64,
    /// The image copied into the disk; `None`: the disk starts blank.
    #[serde(default)]
    pub source: Option<PathBuf>,
}

/// The disk flags of `cluster create`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskRequest {
    /// `--disk-size`: the system disk, MiB.
    pub system_mib: u64,
    /// `--extra-disks`: how many blank disks besides.
    pub extra: usize,
    /// `--extra-disks-size`: each extra disk, MiB.
    pub extra_mib: u64,
    /// `--blank-disk`: the system disk starts blank, not as a copy of `disk.raw`.
    pub blank: bool,
}

impl Default for DiskRequest {
    fn default() -> Self {
        DiskRequest { system_mib: DEFAULT_SYSTEM_MIB, extra: 0, extra_mib: DEFAULT_EXTRA_MIB, blank: false }
    }
}

fn bytes(flag: &'static str, mib: u64) -> Result<u64, ProvisionError> {
    mib.checked_mul(MIB)
        .filter(|b| i64::try_from(*b).is_ok())
        .ok_or_else(|| ProvisionError::InvalidDisk { flag, detail: format!("{mib} MiB is too large") })
}

/// Checks the flags against each other and against the image the system disk copies
/// (`image`: its path and length in bytes), before anything is made.
pub fn check(req: &DiskRequest, image: Option<(&Path, u64)>) -> Result<(), ProvisionError> {
    if req.system_mib == 0 {
        return Err(ProvisionError::InvalidDisk { flag: "--disk-size", detail: "must be at least 1 MiB".into() });
    }
    let system = bytes("--disk-size", req.system_mib)?;
    if let Some((path, len)) = image
        && system < len
    {
        return Err(ProvisionError::DiskTooSmall {
            flag: "--disk-size",
            size_mib: req.system_mib,
            image: path.to_path_buf(),
            image_bytes: len,
            image_mib: len.div_ceil(MIB),
        });
    }
    if req.extra > MAX_EXTRA_DISKS {
        return Err(ProvisionError::InvalidDisk {
            flag: "--extra-disks",
            detail: format!("{} asked, at most {MAX_EXTRA_DISKS} per node", req.extra),
        });
    }
    if req.extra > 0 {
        if req.extra_mib == 0 {
            return Err(ProvisionError::InvalidDisk {
                flag: "--extra-disks-size",
                detail: "must be at least 1 MiB".into(),
            });
        }
        bytes("--extra-disks-size", req.extra_mib)?;
    }
    Ok(())
}

/// A node's disks in `dir`, system disk first: `<node>.system.raw` (a copy of `image`, or blank
/// without one) and `<node>.extra-<n>.raw`.
pub fn plan(dir: &Path, node: &str, req: &DiskRequest, image: Option<&Path>) -> Vec<NodeDisk> {
    let system = NodeDisk {
        role: DiskRole::System,
        path: dir.join(format!("{node}.system.raw")),
        serial: SYSTEM_SERIAL.to_string(),
        size_mib: req.system_mib,
        source: image.map(Path::to_path_buf),
    };
    let extras = (1..=req.extra).map(|n| NodeDisk {
        role: DiskRole::Extra,
        path: dir.join(format!("{node}.extra-{n}.raw")),
        serial: extra_serial(n),
        size_mib: req.extra_mib,
        source: None,
    });
    std::iter::once(system).chain(extras).collect()
}

/// Makes a disk's file: new (never over an existing one), readable by this user only (STATE
/// holds the machine configuration), sized, and holding its source image's data. Returns the
/// bytes written.
pub fn make(disk: &NodeDisk) -> Result<u64, ProvisionError> {
    let size = bytes("--disk-size", disk.size_mib)?;
    let src = match &disk.source {
        None => None,
        Some(path) => {
            let file = File::open(path).map_err(io_err("opening disk image", path))?;
            let len = file.metadata().map_err(io_err("reading disk image", path))?.len();
            if len > size {
                return Err(ProvisionError::DiskTooSmall {
                    flag: "--disk-size",
                    size_mib: disk.size_mib,
                    image: path.clone(),
                    image_bytes: len,
                    image_mib: len.div_ceil(MIB),
                });
            }
            Some((file, len))
        }
    };
    let dst = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&disk.path)
        .map_err(io_err("creating disk", &disk.path))?;
    dst.set_len(size).map_err(io_err("sizing disk", &disk.path))?;
    let Some((src, len)) = src else { return Ok(0) };
    copy_sparse(&src, &dst, len).map_err(io_err("copying the disk image into", &disk.path))
}

/// The partitions of Talos's installed layout (EFI, BIOS, BOOT, META) that say a disk can be
/// booted: the ESP, and BOOT with GRUB's files and the kernels (or the ESP's UKIs).
pub const INSTALLED_PARTITIONS: [&str; 2] = ["EFI", "BOOT"];

/// A table holds an installed boot layout: partitions named as [`INSTALLED_PARTITIONS`].
pub fn is_installed_layout(table: &Table) -> bool {
    let parts = table.partitions();
    INSTALLED_PARTITIONS.iter().all(|name| parts.iter().any(|p| p.partition.name == *name))
}

/// Whether the disk image at `path` now holds an installed boot layout (its GPT read with the
/// node's own GPT code): false for a blank disk, or one whose table lacks EFI or BOOT; an
/// error for a file that cannot be read or a table damaged beyond use.
pub fn holds_installed_layout(path: &Path) -> Result<bool, ProvisionError> {
    let file = File::open(path).map_err(io_err("opening the system disk", path))?;
    let len = file.metadata().map_err(io_err("reading the system disk", path))?.len();
    let table = Table::read(&file, len).map_err(|source| ProvisionError::Gpt { path: path.to_path_buf(), source })?;
    Ok(table.as_ref().is_some_and(is_installed_layout))
}

/// How much is read at a time, and the unit a run of zeros is skipped in.
const CHUNK: usize = 1 << 20;
const BLOCK: usize = 4096;

/// Copies the first `len` bytes of `src` into `dst` at the same offsets, reading only the data
/// extents the filesystem reports and writing only the blocks that are not all zero; `dst` must
/// read as zeros there (a new, `set_len` file). Returns the bytes written.
pub fn copy_sparse(src: &File, dst: &File, len: u64) -> std::io::Result<u64> {
    use rustix::fs::{SeekFrom, seek};
    use rustix::io::Errno;
    let mut buf = vec![0u8; CHUNK];
    let mut written = 0u64;
    let mut pos = 0u64;
    while pos < len {
        let (data, hole) = match seek(src, SeekFrom::Data(pos)) {
            Ok(data) => (data, seek(src, SeekFrom::Hole(data))?),
            // No data after pos: the rest is a hole.
            Err(Errno::NXIO) => break,
            // A filesystem that cannot tell: read it all, the zero check still skips.
            Err(Errno::INVAL) | Err(Errno::OPNOTSUPP) => (pos, len),
            Err(e) => return Err(e.into()),
        };
        let end = hole.min(len);
        let mut off = data;
        while off < end {
            let n = usize::try_from(end - off).unwrap_or(CHUNK).min(CHUNK);
            src.read_exact_at(&mut buf[..n], off)?;
            let mut at = off;
            for block in buf[..n].chunks(BLOCK) {
                if block.iter().any(|b| *b != 0) {
                    dst.write_all_at(block, at)?;
                    written += block.len() as u64;
                }
                at += block.len() as u64;
            }
            off += n as u64;
        }
        pos = end.max(pos + 1);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn req(system_mib: u64, extra: usize, extra_mib: u64) -> DiskRequest {
        DiskRequest { system_mib, extra, extra_mib, blank: false }
    }

    #[test]
    fn serials_fit_virtio_and_are_distinct() {
        let mut all: Vec<String> = (1..=MAX_EXTRA_DISKS).map(extra_serial).collect();
        all.extend([SYSTEM_SERIAL.to_string(), ESP_SERIAL.to_string()]);
        for s in &all {
            assert!(s.len() <= SERIAL_MAX, "{s} is longer than virtio's {SERIAL_MAX} bytes");
            assert!(s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'), "{s}");
        }
        let distinct: std::collections::HashSet<&String> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
    }

    #[test]
    fn plan_names_the_files_and_puts_the_system_disk_first() {
        let dir = Path::new("/s/dev");
        let disks = plan(dir, "dev-worker-1", &req(6144, 2, 5120), Some(Path::new("/o/disk.raw")));
        let got: Vec<(DiskRole, &str, &str, u64, Option<&Path>)> = disks
            .iter()
            .map(|d| (d.role, d.path.to_str().unwrap(), d.serial.as_str(), d.size_mib, d.source.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    DiskRole::System,
                    "/s/dev/dev-worker-1.system.raw",
                    "talosbox-system",
                    6144,
                    Some(Path::new("/o/disk.raw"))
                ),
                (DiskRole::Extra, "/s/dev/dev-worker-1.extra-1.raw", "talosbox-extra-1", 5120, None),
                (DiskRole::Extra, "/s/dev/dev-worker-1.extra-2.raw", "talosbox-extra-2", 5120, None),
            ]
        );
        assert_eq!(plan(dir, "n", &req(1, 0, 0), None).len(), 1);
    }

    #[test]
    fn sizes_are_checked_against_the_image_and_each_other() {
        let image = Path::new("/o/disk.raw");
        let len = 1102 * MIB + 512;
        assert!(check(&req(1103, 0, 0), Some((image, len))).is_ok());
        assert!(check(&req(1103, 0, 0), Some((image, 1103 * MIB))).is_ok(), "exactly the image's size");
        let err = check(&req(1102, 0, 0), Some((image, len))).unwrap_err().to_string();
        assert!(err.contains("--disk-size 1102 MiB"), "{err}");
        assert!(err.contains("/o/disk.raw"), "{err}");
        assert!(err.contains(&format!("{len} bytes")), "{err}");
        assert!(err.contains("1103 MiB"), "the size that would do: {err}");
        let err = check(&req(0, 0, 0), None).unwrap_err().to_string();
        assert!(err.contains("--disk-size"), "{err}");
        assert!(check(&req(1, 0, 0), None).is_ok(), "a blank system disk has no image to hold");
        let err = check(&req(6144, MAX_EXTRA_DISKS + 1, 1), None).unwrap_err().to_string();
        assert!(err.contains("--extra-disks") && err.contains("at most 16"), "{err}");
        let err = check(&req(6144, 1, 0), None).unwrap_err().to_string();
        assert!(err.contains("--extra-disks-size"), "{err}");
        assert!(check(&req(6144, 0, 0), None).is_ok(), "no extra disks: their size does not matter");
        let err = check(&req(u64::MAX, 0, 0), None).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
    }

    /// Bytes the filesystem allocated to a file, as `du` (a peer) counts them.
    fn du(path: &Path) -> u64 {
        let out = Command::new("du").args(["-B1", "--"]).arg(path).output().unwrap();
        assert!(out.status.success(), "du: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().parse().unwrap()
    }

    /// A GPT image made by sgdisk, with data scattered between holes and an explicitly written
    /// run of zeros, copied into a disk eight times its size: the copy reads back the same
    /// bytes, is the asked size, costs the host only the data (du), keeps the partitions
    /// (sgdisk reads the same table off it), and leaves the image as it was.
    #[test]
    fn make_copies_an_image_sparsely_and_keeps_its_gpt() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("disk.raw");
        let img = File::create(&image).unwrap();
        img.set_len(16 * MIB).unwrap();
        img.write_all_at(&vec![0u8; 2 * MIB as usize], 8 * MIB).unwrap(); // written zeros: allocated
        img.write_all_at(b"META", 5 * MIB + 17).unwrap();
        img.write_all_at(&[0xa5; 3 * BLOCK + 100], 11 * MIB - 100).unwrap();
        drop(img);
        let sgdisk = |args: &[&str], disk: &Path| {
            let out = Command::new("sgdisk").args(args).arg(disk).output().unwrap();
            (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let (ok, _) =
            sgdisk(&["-n", "1:2048:+1M", "-t", "1:EF00", "-c", "1:EFI", "-n", "2:0:+2M", "-c", "2:META"], &image);
        assert!(ok, "sgdisk could not partition the image");
        let before = std::fs::read(&image).unwrap();

        let disk = NodeDisk {
            role: DiskRole::System,
            path: dir.path().join("n.system.raw"),
            serial: SYSTEM_SERIAL.into(),
            size_mib: 128,
            source: Some(image.clone()),
        };
        let written = make(&disk).unwrap();
        let copy = std::fs::read(&disk.path).unwrap();
        assert_eq!(copy.len() as u64, 128 * MIB);
        assert_eq!(&copy[..before.len()], &before[..], "the image's bytes, at their offsets");
        assert!(copy[before.len()..].iter().all(|b| *b == 0));
        assert_eq!(std::fs::read(&image).unwrap(), before, "the image must stay as it was");
        // The GPT's two headers, its two arrays, META's four bytes and the 0xa5 run: a few
        // blocks. The 2 MiB of written zeros are not copied.
        assert!(written < 128 * 1024, "{written} bytes written");
        let used = du(&disk.path);
        assert!(used <= written + 64 * 1024, "du says {used} bytes allocated for {written} written");
        assert!(used < du(&image), "the copy must cost less than the image with its written zeros");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&disk.path).unwrap().permissions().mode() & 0o777, 0o600);

        // sgdisk finds the same partitions on the copy (the backup header stays where the
        // image had it, for the node to move).
        let (_, table) = sgdisk(&["-p"], &image);
        let (_, copied) = sgdisk(&["-p"], &disk.path);
        let parts =
            |t: &str| t.lines().skip_while(|l| !l.starts_with("Number")).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(parts(&copied), parts(&table), "{copied}");
        assert!(parts(&copied).iter().any(|l| l.contains("META")), "{copied}");

        // Never over an existing file.
        let err = make(&disk).unwrap_err().to_string();
        assert!(err.contains("creating disk") && err.contains("n.system.raw"), "{err}");
    }

    #[test]
    fn blank_disks_are_holes_and_too_small_a_disk_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let blank = NodeDisk {
            role: DiskRole::Extra,
            path: dir.path().join("x.raw"),
            serial: extra_serial(1),
            size_mib: 5120,
            source: None,
        };
        assert_eq!(make(&blank).unwrap(), 0);
        assert_eq!(std::fs::metadata(&blank.path).unwrap().len(), 5120 * MIB);
        assert_eq!(du(&blank.path), 0, "a blank disk costs nothing until written");

        let image = dir.path().join("big.raw");
        File::create(&image).unwrap().set_len(3 * MIB).unwrap();
        let small = NodeDisk {
            role: DiskRole::System,
            path: dir.path().join("s.raw"),
            serial: SYSTEM_SERIAL.into(),
            size_mib: 2,
            source: Some(image),
        };
        let err = make(&small).unwrap_err().to_string();
        assert!(err.contains("--disk-size 2 MiB") && err.contains("big.raw"), "{err}");
    }

    /// The launcher's check on real GPT images made by sgdisk (a peer): a blank disk, a table
    /// without BOOT, and Talos's layout (EFI, BIOS, BOOT, META) on a disk grown afterwards.
    #[test]
    fn the_installed_layout_is_read_off_real_images() {
        let dir = tempfile::tempdir().unwrap();
        let disk = |name: &str, mib: u64, sgdisk_args: &[&str]| {
            let path = dir.path().join(name);
            File::create(&path).unwrap().set_len(mib * MIB).unwrap();
            if !sgdisk_args.is_empty() {
                let out = Command::new("sgdisk").args(sgdisk_args).arg(&path).output().unwrap();
                assert!(out.status.success(), "sgdisk: {}", String::from_utf8_lossy(&out.stderr));
            }
            path
        };
        let blank = disk("blank.raw", 64, &[]);
        assert!(!holds_installed_layout(&blank).unwrap(), "a blank disk");
        let no_boot =
            disk("no-boot.raw", 64, &["-n", "1:0:+8M", "-t", "1:EF00", "-c", "1:EFI", "-n", "2:0:+1M", "-c", "2:META"]);
        assert!(!holds_installed_layout(&no_boot).unwrap(), "EFI without BOOT");
        let talos = [
            "-n",
            "1:0:+100M",
            "-t",
            "1:EF00",
            "-c",
            "1:EFI",
            "-n",
            "2:0:+1M",
            "-t",
            "2:EF02",
            "-c",
            "2:BIOS",
            "-n",
            "3:0:+100M",
            "-t",
            "3:8300",
            "-c",
            "3:BOOT",
            "-n",
            "4:0:+1M",
            "-t",
            "4:8300",
            "-c",
            "4:META",
        ];
        let installed = disk("installed.raw", 256, &talos);
        assert!(holds_installed_layout(&installed).unwrap(), "Talos's layout");
        // The node's disk is larger than what the table was written for (its backup header
        // not yet moved): still read.
        std::fs::OpenOptions::new().write(true).open(&installed).unwrap().set_len(512 * MIB).unwrap();
        assert!(holds_installed_layout(&installed).unwrap(), "a grown disk");
        // Lower-case names are not Talos's.
        let other = disk("other.raw", 256, &["-n", "1:0:+8M", "-c", "1:efi", "-n", "2:0:+8M", "-c", "2:boot"]);
        assert!(!holds_installed_layout(&other).unwrap());
        let err = holds_installed_layout(&dir.path().join("none.raw")).unwrap_err().to_string();
        assert!(err.contains("opening the system disk") && err.contains("none.raw"), "{err}");
    }
}

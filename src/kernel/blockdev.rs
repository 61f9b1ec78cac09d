//! Block devices through their ioctls: a disk's size and logical sector size, and telling the
//! kernel about the partitions of a table just written — BLKPG add, resize and delete, with
//! BLKRRPART (re-read the whole table) as the fallback — since the node has no partprobe or udev.
//!
//! Thin: which partitions to add or resize is the caller's decision (from `block::gpt`); this
//! module passes partition numbers and byte ranges to the kernel and nothing else. It never
//! writes to a disk itself.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::ioctl::{Getter, NoArg, Opcode, Setter, ioctl, opcode};

// Request numbers from linux/fs.h and linux/blkpg.h (interface facts).
const BLKRRPART: Opcode = opcode::none(0x12, 95);
const BLKPG: Opcode = opcode::none(0x12, 105);
// BLKGETSIZE64 is declared with size_t but the kernel writes a u64.
const BLKGETSIZE64: Opcode = opcode::read::<usize>(0x12, 114);
const BLKPG_ADD_PARTITION: i32 = 1;
const BLKPG_DEL_PARTITION: i32 = 2;
const BLKPG_RESIZE_PARTITION: i32 = 3;
const BLKPG_NAME_SIZE: usize = 64;
/// How many more times a partition found busy is asked to go, 50 ms apart.
const DELETE_BUSY_TRIES: u32 = 20;

/// `struct blkpg_partition` from linux/blkpg.h: byte offsets and the partition number.
#[repr(C)]
#[derive(Clone, Copy)]
struct BlkpgPartition {
    start: i64,
    length: i64,
    pno: i32,
    devname: [u8; BLKPG_NAME_SIZE],
    volname: [u8; BLKPG_NAME_SIZE],
}

/// `struct blkpg_ioctl_arg` from linux/blkpg.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct BlkpgIoctlArg {
    op: i32,
    flags: i32,
    datalen: i32,
    data: *mut std::ffi::c_void,
}

// The kernel ABI sizes on 64-bit targets; a layout mistake would hand the kernel garbage.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<BlkpgPartition>() == 152);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<BlkpgIoctlArg>() == 24);

/// Errors on a block device; each names the device and, for partitions, the number and range.
#[derive(Debug, thiserror::Error)]
pub enum BlockDevError {
    #[error("opening {}: {source}", device.display())]
    Open { device: PathBuf, source: std::io::Error },
    #[error("reading the {what} of {}: {source}", device.display())]
    Query { what: &'static str, device: PathBuf, source: std::io::Error },
    #[error("{op} partition {number} on {} (bytes {start}+{length}): {source}", device.display())]
    Partition { op: &'static str, device: PathBuf, number: u32, start: u64, length: u64, source: std::io::Error },
    #[error("re-reading the partition table of {}: {source}", device.display())]
    Reread { device: PathBuf, source: std::io::Error },
    #[error("{} is locked by another writer (waited {} s); trying again later", device.display(), waited.as_secs())]
    Locked { device: PathBuf, waited: std::time::Duration },
    #[error("locking {}: {source}", device.display())]
    Lock { device: PathBuf, source: std::io::Error },
}

impl BlockDevError {
    /// The errno behind the error, to tell "no such partition" (ENXIO) or "in use" (EBUSY)
    /// from other failures.
    pub fn errno(&self) -> Option<i32> {
        match self {
            BlockDevError::Open { source, .. }
            | BlockDevError::Query { source, .. }
            | BlockDevError::Partition { source, .. }
            | BlockDevError::Reread { source, .. }
            | BlockDevError::Lock { source, .. } => source.raw_os_error(),
            BlockDevError::Locked { .. } => Some(rustix::io::Errno::WOULDBLOCK.raw_os_error()),
        }
    }
}

/// An open whole-disk block device (or, for tests, any file: only the ioctls need a device).
#[derive(Debug)]
pub struct BlockDevice {
    file: File,
    path: PathBuf,
}

impl BlockDevice {
    /// Opens `path` read-write, as partitioning needs.
    pub fn open(path: &Path) -> Result<BlockDevice, BlockDevError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| BlockDevError::Open { device: path.into(), source })?;
        Ok(BlockDevice { file, path: path.into() })
    }

    /// Opens the whole disk at `path` and takes its exclusive lock (BSD `flock`, the
    /// convention udev and Talos keep for writers of a disk), waiting up to `timeout`. The lock
    /// lasts as long as the returned device is open.
    pub fn open_locked(path: &Path, timeout: std::time::Duration) -> Result<BlockDevice, BlockDevError> {
        let dev = BlockDevice::open(path)?;
        dev.lock(timeout)?;
        Ok(dev)
    }

    /// Takes the exclusive lock on this device's open file, waiting up to `timeout`.
    pub fn lock(&self, timeout: std::time::Duration) -> Result<(), BlockDevError> {
        use rustix::fs::{FlockOperation, flock};
        let started = std::time::Instant::now();
        loop {
            match flock(&self.file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(()),
                Err(rustix::io::Errno::WOULDBLOCK) if started.elapsed() < timeout => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(BlockDevError::Locked { device: self.path.clone(), waited: started.elapsed() });
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(BlockDevError::Lock { device: self.path.clone(), source: e.into() }),
            }
        }
    }

    /// The device's file, to read and write the partition table through.
    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The size in bytes (BLKGETSIZE64).
    pub fn size_bytes(&self) -> Result<u64, BlockDevError> {
        // SAFETY: BLKGETSIZE64 writes one u64 into the Getter's buffer, which is a u64.
        unsafe { ioctl(self.file.as_fd(), Getter::<BLKGETSIZE64, u64>::new()) }.map_err(|e| BlockDevError::Query {
            what: "size",
            device: self.path.clone(),
            source: e.into(),
        })
    }

    /// The logical sector size in bytes (BLKSSZGET), the unit of the partition table's LBAs.
    pub fn logical_sector_size(&self) -> Result<u64, BlockDevError> {
        rustix::fs::ioctl_blksszget(&self.file).map(u64::from).map_err(|e| BlockDevError::Query {
            what: "logical sector size",
            device: self.path.clone(),
            source: e.into(),
        })
    }

    /// Tells the kernel partition `number` (1-based) is at bytes `start..start+length`; its
    /// device (`<disk>p<number>` or `<disk><number>`) appears.
    pub fn add_partition(&self, number: u32, start: u64, length: u64) -> Result<(), BlockDevError> {
        self.blkpg("adding", BLKPG_ADD_PARTITION, number, start, length)
    }

    /// Tells the kernel partition `number` now spans `length` bytes from `start` (which must be
    /// where it already starts: BLKPG only moves the end). Works while the partition is in use.
    pub fn resize_partition(&self, number: u32, start: u64, length: u64) -> Result<(), BlockDevError> {
        self.blkpg("resizing", BLKPG_RESIZE_PARTITION, number, start, length)
    }

    /// Removes partition `number` from the kernel's view (ENXIO: there was none; EBUSY: in use).
    /// EBUSY is tried again for up to a second: a prober that opened the partition for a moment
    /// (a discovery pass, `blkid`) holds it that long, a mount or an open mapping for good.
    /// Blocks the thread meanwhile.
    pub fn delete_partition(&self, number: u32) -> Result<(), BlockDevError> {
        let mut tries = 0;
        loop {
            match self.blkpg("deleting", BLKPG_DEL_PARTITION, number, 0, 0) {
                Err(e) if e.errno() == Some(rustix::io::Errno::BUSY.raw_os_error()) && tries < DELETE_BUSY_TRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }

    /// Has the kernel re-read the whole table (BLKRRPART): fails with EBUSY while any partition
    /// of the disk is in use, which is why BLKPG comes first.
    pub fn reread_partitions(&self) -> Result<(), BlockDevError> {
        // SAFETY: BLKRRPART takes no argument.
        unsafe { ioctl(self.file.as_fd(), NoArg::<BLKRRPART>::new()) }
            .map_err(|e| BlockDevError::Reread { device: self.path.clone(), source: e.into() })
    }

    fn blkpg(&self, op: &'static str, code: i32, number: u32, start: u64, length: u64) -> Result<(), BlockDevError> {
        let fail = |source: std::io::Error| BlockDevError::Partition {
            op,
            device: self.path.clone(),
            number,
            start,
            length,
            source,
        };
        let out_of_range = || fail(std::io::Error::from(std::io::ErrorKind::InvalidInput));
        let mut part = BlkpgPartition {
            start: i64::try_from(start).map_err(|_| out_of_range())?,
            length: i64::try_from(length).map_err(|_| out_of_range())?,
            pno: i32::try_from(number).map_err(|_| out_of_range())?,
            devname: [0; BLKPG_NAME_SIZE],
            volname: [0; BLKPG_NAME_SIZE],
        };
        let arg = BlkpgIoctlArg {
            op: code,
            flags: 0,
            datalen: std::mem::size_of::<BlkpgPartition>() as i32,
            data: (&raw mut part).cast(),
        };
        // SAFETY: BLKPG reads a `struct blkpg_ioctl_arg` (BlkpgIoctlArg mirrors it, size checked
        // at compile time) whose `data` points at `part`, a `struct blkpg_partition` of
        // `datalen` bytes that lives on this stack frame for the whole call; the kernel only
        // reads both.
        unsafe { ioctl(self.file.as_fd(), Setter::<BLKPG, BlkpgIoctlArg>::new(arg)) }.map_err(|e| fail(e.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_second_writer_waits_for_the_lock_then_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("disk.img");
        std::fs::File::create(&disk).and_then(|f| f.set_len(1 << 20)).unwrap();
        let first = BlockDevice::open_locked(&disk, Duration::from_secs(1)).unwrap();
        let started = Instant::now();
        let refused = BlockDevice::open_locked(&disk, Duration::from_millis(300)).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300), "it waited");
        assert!(matches!(refused, BlockDevError::Locked { .. }), "{refused}");
        assert!(refused.to_string().contains("locked by another writer"), "{refused}");
        // Let go: the next writer gets it while it waits.
        let waiter = std::thread::spawn({
            let disk = disk.clone();
            move || BlockDevice::open_locked(&disk, Duration::from_secs(5)).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(200));
        drop(first);
        waiter.join().unwrap().unwrap();
    }
}

//! Loop devices: attach a file read-only to a free `/dev/loopN` so it can be mounted, or
//! read-write with partition scanning ([`attach_for_partitioning`], `losetup -P`) so a disk
//! image can be partitioned through the kernel as a real disk is.
//!
//! Devices are attached with autoclear, so the kernel detaches them by itself once the last
//! user (the mount) goes away. That has a trap: closing the loop device's fd before `mount()`
//! has taken its own reference detaches the device at once, and the mount then fails reading
//! block 0. [`LoopDevice`] therefore keeps the fd open until it is dropped; drop it only after
//! the mount succeeded. This module never detaches a device it did not attach, and attaches
//! read-write only when asked to by name.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::io::Errno;
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, Setter, ioctl};

/// The loop control device.
pub const LOOP_CONTROL: &str = "/dev/loop-control";

// Request numbers and flags from linux/loop.h (interface facts).
const LOOP_SET_FD: Opcode = 0x4C00;
const LOOP_SET_STATUS64: Opcode = 0x4C04;
const LOOP_SET_CAPACITY: Opcode = 0x4C07;
const LOOP_CONFIGURE: Opcode = 0x4C0A;
const LOOP_CTL_GET_FREE: Opcode = 0x4C82;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LO_FLAGS_PARTSCAN: u32 = 8;
const LO_NAME_SIZE: usize = 64;
const LO_KEY_SIZE: usize = 32;

/// `struct loop_info64` from linux/loop.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; LO_KEY_SIZE],
    lo_init: [u64; 2],
}

/// `struct loop_config` from linux/loop.h (LOOP_CONFIGURE, Linux 5.8+).
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

// The kernel ABI sizes; a layout mistake here would hand the kernel garbage.
const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

impl LoopInfo64 {
    fn new(backing: &Path, lo_flags: u32) -> Self {
        let mut lo_file_name = [0u8; LO_NAME_SIZE];
        let name = backing.as_os_str().as_encoded_bytes();
        let n = name.len().min(LO_NAME_SIZE - 1);
        lo_file_name[..n].copy_from_slice(&name[..n]);
        LoopInfo64 {
            lo_device: 0,
            lo_inode: 0,
            lo_rdevice: 0,
            lo_offset: 0,
            lo_sizelimit: 0,
            lo_number: 0,
            lo_encrypt_type: 0,
            lo_encrypt_key_size: 0,
            lo_flags,
            lo_file_name,
            lo_crypt_name: [0; LO_NAME_SIZE],
            lo_encrypt_key: [0; LO_KEY_SIZE],
            lo_init: [0; 2],
        }
    }
}

/// LOOP_CTL_GET_FREE: no argument, the device number is the ioctl's return value.
struct GetFree;

// SAFETY: LOOP_CTL_GET_FREE takes no argument and writes no user memory; its result is the
// non-negative return value, which `output_from_ptr` passes through.
unsafe impl Ioctl for GetFree {
    type Output = IoctlOutput;
    const IS_MUTATING: bool = false;
    fn opcode(&self) -> Opcode {
        LOOP_CTL_GET_FREE
    }
    fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        std::ptr::null_mut()
    }
    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut std::ffi::c_void) -> rustix::io::Result<IoctlOutput> {
        Ok(out)
    }
}

/// LOOP_SET_FD: the backing fd passed by value as the argument.
struct SetFd(usize);

// SAFETY: LOOP_SET_FD takes an integer fd argument (not a pointer) and writes no user memory.
unsafe impl Ioctl for SetFd {
    type Output = ();
    const IS_MUTATING: bool = false;
    fn opcode(&self) -> Opcode {
        LOOP_SET_FD
    }
    fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        self.0 as *mut std::ffi::c_void
    }
    unsafe fn output_from_ptr(_: IoctlOutput, _: *mut std::ffi::c_void) -> rustix::io::Result<()> {
        Ok(())
    }
}

/// Errors attaching a loop device; each names the backing file and, once known, the device.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("opening {}: {source}", path.display())]
    OpenBacking { path: PathBuf, source: std::io::Error },
    #[error("opening {LOOP_CONTROL}: {source}")]
    OpenControl { source: std::io::Error },
    #[error("asking {LOOP_CONTROL} for a free loop device: {source}")]
    GetFree { source: std::io::Error },
    #[error("opening {}: {source}", device.display())]
    OpenDevice { device: PathBuf, source: std::io::Error },
    #[error("attaching {} to {}: {source}", backing.display(), device.display())]
    Attach { backing: PathBuf, device: PathBuf, source: std::io::Error },
    #[error("attaching {}: every free loop device was taken by someone else first", backing.display())]
    Busy { backing: PathBuf },
    #[error("updating the size of {}: {source}", device.display())]
    Capacity { device: PathBuf, source: std::io::Error },
}

/// An attached loop device. Holds the device fd open (see the module note on autoclear): drop
/// it once the device is mounted, and the kernel detaches the device when the mount goes away.
#[derive(Debug)]
pub struct LoopDevice {
    path: PathBuf,
    number: u32,
    _fd: File,
}

impl LoopDevice {
    /// `/dev/loopN`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// N of `/dev/loopN`.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Has the kernel take the backing file's current size as the device's (LOOP_SET_CAPACITY),
    /// as a disk that grew.
    pub fn set_capacity(&self) -> Result<(), LoopError> {
        // SAFETY: LOOP_SET_CAPACITY takes no argument.
        unsafe { ioctl(self._fd.as_fd(), rustix::ioctl::NoArg::<LOOP_SET_CAPACITY>::new()) }
            .map_err(|e| LoopError::Capacity { device: self.path.clone(), source: e.into() })
    }
}

/// How to hand the backing file to the loop device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMethod {
    /// LOOP_CONFIGURE (Linux 5.8+), falling back to [`AttachMethod::Legacy`] where unsupported.
    Configure,
    /// LOOP_SET_FD then LOOP_SET_STATUS64, for older kernels (and to test that path).
    Legacy,
}

/// Attaches `backing` read-only with autoclear to a free loop device under `dev` (normally `/dev`).
pub fn attach_read_only(backing: &Path, dev: &Path) -> Result<LoopDevice, LoopError> {
    attach_read_only_using(backing, dev, AttachMethod::Configure)
}

/// [`attach_read_only`] with a chosen attach method.
pub fn attach_read_only_using(backing: &Path, dev: &Path, method: AttachMethod) -> Result<LoopDevice, LoopError> {
    let file = File::open(backing).map_err(|source| LoopError::OpenBacking { path: backing.into(), source })?;
    attach(&file, backing, dev, method, LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR)
}

/// Attaches `backing` read-write with autoclear and partition scanning (`losetup -P`), so the
/// kernel keeps partitions of the device (`/dev/loopNpK`) as it does for a disk: scanned at
/// attach, and added or resized later through BLKPG.
pub fn attach_for_partitioning(backing: &Path, dev: &Path) -> Result<LoopDevice, LoopError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(backing)
        .map_err(|source| LoopError::OpenBacking { path: backing.into(), source })?;
    attach(&file, backing, dev, AttachMethod::Configure, LO_FLAGS_AUTOCLEAR | LO_FLAGS_PARTSCAN)
}

fn attach(file: &File, backing: &Path, dev: &Path, method: AttachMethod, flags: u32) -> Result<LoopDevice, LoopError> {
    let control = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev.join("loop-control"))
        .map_err(|source| LoopError::OpenControl { source })?;
    // Another process may take the free device between asking and attaching: ask again then.
    for _ in 0..16 {
        // SAFETY: GetFree's Ioctl impl matches LOOP_CTL_GET_FREE (no argument, int result) and
        // `control` is an open /dev/loop-control.
        let number = unsafe { ioctl(control.as_fd(), GetFree) }.map_err(|e| LoopError::GetFree { source: e.into() })?;
        let number = u32::try_from(number).map_err(|_| LoopError::GetFree {
            source: std::io::Error::other(format!("negative device number {number}")),
        })?;
        let device = dev.join(format!("loop{number}"));
        let fd = open_device(&device, flags & LO_FLAGS_READ_ONLY == 0)?;
        match configure(&fd, file, backing, method, flags) {
            Ok(()) => return Ok(LoopDevice { path: device, number, _fd: fd }),
            Err(Errno::BUSY) => continue,
            Err(e) => return Err(LoopError::Attach { backing: backing.into(), device, source: e.into() }),
        }
    }
    Err(LoopError::Busy { backing: backing.into() })
}

/// Opens the loop device node, waiting briefly for devtmpfs to create a just-added node. The
/// kernel makes the device read-only unless this fd, too, is open for writing.
fn open_device(device: &Path, write: bool) -> Result<File, LoopError> {
    let mut tries = 0;
    loop {
        match OpenOptions::new().read(true).write(write).open(device) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(source) => return Err(LoopError::OpenDevice { device: device.into(), source }),
        }
    }
}

/// LOOP_CONFIGURE in one step; on kernels without it, LOOP_SET_FD then LOOP_SET_STATUS64.
fn configure(
    device: &File,
    backing: &File,
    backing_path: &Path,
    method: AttachMethod,
    flags: u32,
) -> Result<(), Errno> {
    let backing_fd = std::os::fd::AsRawFd::as_raw_fd(backing);
    let info = LoopInfo64::new(backing_path, flags);
    if method == AttachMethod::Configure {
        let config = LoopConfig { fd: backing_fd as u32, block_size: 0, info, reserved: [0; 8] };
        // SAFETY: LOOP_CONFIGURE reads a `struct loop_config`, which LoopConfig mirrors (size
        // checked at compile time); the kernel only reads it, and `backing` stays open meanwhile.
        match unsafe { ioctl(device.as_fd(), Setter::<LOOP_CONFIGURE, LoopConfig>::new(config)) } {
            Err(Errno::INVAL) | Err(Errno::NOTTY) => {}
            other => return other,
        }
    }
    // SAFETY: LOOP_SET_FD takes the backing fd as an integer; `backing` is open for the call.
    unsafe { ioctl(device.as_fd(), SetFd(backing_fd as usize)) }?;
    // SAFETY: LOOP_SET_STATUS64 reads a `struct loop_info64`, which LoopInfo64 mirrors.
    let status = unsafe { ioctl(device.as_fd(), Setter::<LOOP_SET_STATUS64, LoopInfo64>::new(info)) };
    if status.is_err() {
        // Leave no half-configured device behind: without autoclear set it would stay attached.
        // SAFETY: LOOP_CLR_FD (0x4C01) takes no argument.
        let _ = unsafe { ioctl(device.as_fd(), rustix::ioctl::NoArg::<0x4C01>::new()) };
    }
    status
}

/// Whether loop device N is attached, from sysfs (`/sys/block/loopN/loop/backing_file` exists
/// only while it is). Used by tests and diagnostics.
pub fn is_attached(number: u32) -> bool {
    Path::new(&format!("/sys/block/loop{number}/loop/backing_file")).exists()
}

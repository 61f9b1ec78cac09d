//! Growing a mounted filesystem into the rest of its device, as `xfs_growfs` and `resize2fs`
//! do online, through the filesystems' own ioctls (no program is run): xfs's
//! `XFS_IOC_FSGEOMETRY_V1` and `XFS_IOC_FSGROWFSDATA`, ext4's `EXT4_IOC_RESIZE_FS`. A volume
//! whose partition the volume manager grew is grown this way once mounted.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::ioctl::{Getter, Opcode, Setter, ioctl, opcode};

/// `struct xfs_fsop_geom_v1` (linux `fs/xfs/libxfs/xfs_fs.h`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct XfsGeometryV1 {
    blocksize: u32,
    rtextsize: u32,
    agblocks: u32,
    agcount: u32,
    logblocks: u32,
    sectsize: u32,
    inodesize: u32,
    imaxpct: u32,
    datablocks: u64,
    rtblocks: u64,
    rtextents: u64,
    logstart: u64,
    uuid: [u8; 16],
    sunit: u32,
    swidth: u32,
    version: i32,
    flags: u32,
    logsectsize: u32,
    rtsectsize: u32,
    dirblocksize: u32,
}

/// `struct xfs_growfs_data`.
#[repr(C)]
#[derive(Clone, Copy)]
struct XfsGrowData {
    newblocks: u64,
    imaxpct: u32,
}

const XFS_IOC_FSGEOMETRY_V1: Opcode = opcode::read::<XfsGeometryV1>(b'X', 100);
const XFS_IOC_FSGROWFSDATA: Opcode = opcode::write::<XfsGrowData>(b'X', 110);
const EXT4_IOC_RESIZE_FS: Opcode = opcode::write::<u64>(b'f', 16);

/// Less room than this beyond the filesystem is left as it is.
pub const MIN_GROWTH: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum GrowError {
    #[error("opening {}: {source}", path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("{what} on {}: {source}", path.display())]
    Ioctl { what: &'static str, path: PathBuf, source: rustix::io::Errno },
}

/// What a grow did: the filesystem's size in bytes before and after (equal: nothing to do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grown {
    pub before: u64,
    pub after: u64,
}

fn open(path: &Path) -> Result<File, GrowError> {
    File::open(path).map_err(|source| GrowError::Open { path: path.to_path_buf(), source })
}

/// Grows the xfs mounted at `mount_point` to `device_bytes`, the size of the device under it.
pub fn xfs(mount_point: &Path, device_bytes: u64) -> Result<Grown, GrowError> {
    let dir = open(mount_point)?;
    let err = |what| move |source| GrowError::Ioctl { what, path: mount_point.to_path_buf(), source };
    // SAFETY: XFS_IOC_FSGEOMETRY_V1 writes one `xfs_fsop_geom_v1`, which `XfsGeometryV1` is.
    let geometry = unsafe { ioctl(dir.as_fd(), Getter::<XFS_IOC_FSGEOMETRY_V1, XfsGeometryV1>::new()) }
        .map_err(err("XFS_IOC_FSGEOMETRY"))?;
    let block = u64::from(geometry.blocksize.max(1));
    let before = geometry.datablocks * block;
    let blocks = device_bytes / block;
    // mkfs leaves a few blocks past the last whole allocation group: growing by less than a
    // small allocation group is refused by the kernel, and is not worth asking.
    if blocks <= geometry.datablocks + MIN_GROWTH / block {
        return Ok(Grown { before, after: before });
    }
    let grow = XfsGrowData { newblocks: blocks, imaxpct: geometry.imaxpct };
    // SAFETY: XFS_IOC_FSGROWFSDATA reads one `xfs_growfs_data`, which `XfsGrowData` is.
    unsafe { ioctl(dir.as_fd(), Setter::<XFS_IOC_FSGROWFSDATA, XfsGrowData>::new(grow)) }
        .map_err(err("XFS_IOC_FSGROWFSDATA"))?;
    let after = unsafe { ioctl(dir.as_fd(), Getter::<XFS_IOC_FSGEOMETRY_V1, XfsGeometryV1>::new()) }
        .map_err(err("XFS_IOC_FSGEOMETRY"))?
        .datablocks
        * block;
    Ok(Grown { before, after })
}

/// Grows the ext4 mounted at `mount_point` to `device_bytes`.
pub fn ext4(mount_point: &Path, device_bytes: u64) -> Result<Grown, GrowError> {
    let dir = open(mount_point)?;
    let err = |what| move |source| GrowError::Ioctl { what, path: mount_point.to_path_buf(), source };
    let stat = rustix::fs::fstatfs(&dir).map_err(err("statfs"))?;
    let block = (stat.f_bsize as u64).max(1);
    let before = stat.f_blocks * block;
    let blocks = device_bytes / block;
    // statfs counts the blocks after metadata: only a device larger by more than that asks.
    if blocks <= stat.f_blocks + MIN_GROWTH / block {
        return Ok(Grown { before, after: before });
    }
    // SAFETY: EXT4_IOC_RESIZE_FS reads one u64, the new block count.
    unsafe { ioctl(dir.as_fd(), Setter::<EXT4_IOC_RESIZE_FS, u64>::new(blocks)) }.map_err(err("EXT4_IOC_RESIZE_FS"))?;
    let after = rustix::fs::fstatfs(&dir).map_err(err("statfs"))?.f_blocks * block;
    Ok(Grown { before, after })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ioctl_structures_have_the_kernels_sizes() {
        assert_eq!(std::mem::size_of::<XfsGeometryV1>(), 112);
        assert_eq!(std::mem::size_of::<XfsGrowData>(), 16);
    }
}

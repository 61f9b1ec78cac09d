//! Mounts: for early boot the kernel's pseudo filesystems, tmpfs, read-only squashfs, moving
//! mounts, and `switch_root` from the initramfs into the real root; for volumes, bind mounts
//! with their own flags and the unmount of a volume taken away.
//!
//! Every error names the filesystem type, the source and the target, because at PID 1 the error
//! text is all anyone gets. These helpers mount, move, chroot and unmount the one target they
//! are given; they never delete anything except [`free_initramfs`], which deletes only files
//! on the initramfs itself.

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, UnmountFlags, mount, mount_bind, mount_move, mount_remount, unmount as umount};

/// Errors from mounting and switching root.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("creating mount point {}: {source}", target.display())]
    MakeDir { target: PathBuf, source: std::io::Error },
    #[error("mounting {fstype} {source_name} on {}: {source}", target.display())]
    Mount { fstype: String, source_name: String, target: PathBuf, source: std::io::Error },
    #[error("bind-mounting {} on {}: {source}", from.display(), to.display())]
    Bind { from: PathBuf, to: PathBuf, source: std::io::Error },
    #[error("unmounting {}: {source}", target.display())]
    Unmount { target: PathBuf, source: std::io::Error },
    #[error("moving mount {} to {}: {source}", from.display(), to.display())]
    Move { from: PathBuf, to: PathBuf, source: std::io::Error },
    #[error("switching root to {}: {step}: {source}", new_root.display())]
    SwitchRoot { new_root: PathBuf, step: &'static str, source: std::io::Error },
}

/// One filesystem to mount.
#[derive(Debug, Clone, Copy)]
pub struct MountSpec<'a> {
    pub fstype: &'a str,
    pub source: &'a str,
    pub target: &'a Path,
    pub flags: MountFlags,
    pub data: Option<&'a CStr>,
}

const NODEV_NOSUID_NOEXEC: MountFlags = MountFlags::NODEV.union(MountFlags::NOSUID).union(MountFlags::NOEXEC);

/// `/proc`.
pub fn proc(target: &Path) -> MountSpec<'_> {
    MountSpec { fstype: "proc", source: "proc", target, flags: NODEV_NOSUID_NOEXEC, data: None }
}

/// `/sys`.
pub fn sysfs(target: &Path) -> MountSpec<'_> {
    MountSpec { fstype: "sysfs", source: "sysfs", target, flags: NODEV_NOSUID_NOEXEC, data: None }
}

/// The EFI variables, read-only.
pub fn efivarfs(target: &Path) -> MountSpec<'_> {
    MountSpec {
        fstype: "efivarfs",
        source: "efivarfs",
        target,
        flags: NODEV_NOSUID_NOEXEC.union(MountFlags::RDONLY),
        data: None,
    }
}

/// Where the EFI variables are read.
pub const EFIVARS: &str = "/sys/firmware/efi/efivars";

/// Mounts the EFI variables read-only at [`EFIVARS`] unless they are: `Ok(false)` on a BIOS
/// boot (no `/sys/firmware/efi`). The caller loads the efivarfs module first.
pub fn ensure_efivars() -> Result<bool, MountError> {
    let target = Path::new(EFIVARS);
    if !Path::new("/sys/firmware/efi").exists() {
        return Ok(false);
    }
    if !is_mount_point(target) {
        mount_spec(&efivarfs(target))?;
    }
    Ok(true)
}

/// `/dev` (this kernel builds devtmpfs in but does not mount it by itself).
pub fn devtmpfs(target: &Path) -> MountSpec<'_> {
    MountSpec { fstype: "devtmpfs", source: "devtmpfs", target, flags: MountFlags::NOSUID, data: Some(c"mode=0755") }
}

/// A tmpfs with the given options (e.g. `c"mode=0755"`).
pub fn tmpfs<'a>(target: &'a Path, data: &'a CStr) -> MountSpec<'a> {
    MountSpec {
        fstype: "tmpfs",
        source: "tmpfs",
        target,
        flags: MountFlags::NOSUID | MountFlags::NODEV,
        data: Some(data),
    }
}

/// A read-only squashfs from a block device (normally a loop device).
pub fn squashfs_ro<'a>(device: &'a str, target: &'a Path) -> MountSpec<'a> {
    MountSpec { fstype: "squashfs", source: device, target, flags: MountFlags::RDONLY | MountFlags::NODEV, data: None }
}

/// Creates the mount point if needed and mounts.
pub fn mount_spec(spec: &MountSpec<'_>) -> Result<(), MountError> {
    ensure_dir(spec.target)?;
    mount(spec.source, spec.target, spec.fstype, spec.flags, spec.data).map_err(|e| MountError::Mount {
        fstype: spec.fstype.to_string(),
        source_name: spec.source.to_string(),
        target: spec.target.to_path_buf(),
        source: e.into(),
    })
}

/// Bind-mounts `from` on `to` (created if missing), then gives the new mount `flags` (nosuid,
/// nodev, noexec, read-only: a bind mount takes them only through a remount of itself).
pub fn bind(from: &Path, to: &Path, flags: MountFlags) -> Result<(), MountError> {
    ensure_dir(to)?;
    let fail = |e: rustix::io::Errno| MountError::Bind { from: from.into(), to: to.into(), source: e.into() };
    mount_bind(from, to).map_err(fail)?;
    if !flags.is_empty() {
        mount_remount(to, MountFlags::BIND | flags, c"").map_err(fail)?;
    }
    Ok(())
}

/// Changes the flags of the mount at `target` (`bind`: a bind mount, whose flags are its own
/// and not its filesystem's), read-only and back included.
pub fn remount(target: &Path, flags: MountFlags, bind: bool) -> Result<(), MountError> {
    let flags = if bind { flags | MountFlags::BIND } else { flags };
    mount_remount(target, flags, c"").map_err(|e| MountError::Mount {
        fstype: "remount".to_string(),
        source_name: String::new(),
        target: target.into(),
        source: e.into(),
    })
}

/// Unmounts the mount at `target` (not lazily: a busy mount stays, and says so).
pub fn unmount(target: &Path) -> Result<(), MountError> {
    umount(target, UnmountFlags::empty()).map_err(|e| MountError::Unmount { target: target.into(), source: e.into() })
}

/// Whether `path` is the root of a mount: its device differs from its parent's.
pub fn is_mount_point(path: &Path) -> bool {
    let (Ok(here), Ok(parent)) = (rustix::fs::stat(path), rustix::fs::stat(path.join(".."))) else {
        return false;
    };
    here.st_dev != parent.st_dev || here.st_ino == parent.st_ino
}

fn ensure_dir(target: &Path) -> Result<(), MountError> {
    match std::fs::create_dir_all(target) {
        Ok(()) => Ok(()),
        Err(source) => {
            // A read-only tree may already have the directory; only fail if it is really missing.
            if target.is_dir() { Ok(()) } else { Err(MountError::MakeDir { target: target.into(), source }) }
        }
    }
}

/// Moves the mount at `from` to `to` (`mount --move`); `to` must exist.
pub fn move_mount(from: &Path, to: &Path) -> Result<(), MountError> {
    mount_move(from, to).map_err(|e| MountError::Move { from: from.into(), to: to.into(), source: e.into() })
}

/// Deletes the initramfs's own files (everything on `/`'s filesystem, not crossing into other
/// mounts), as switch_root does, to give their memory back. `keep` (the new root) is spared.
/// Best effort: returns how many entries could not be removed.
pub fn free_initramfs(keep: &Path) -> usize {
    let Ok(root) = rustix::fs::stat("/") else { return 1 };
    let mut failures = 0;
    remove_tree(Path::new("/"), root.st_dev, keep, &mut failures);
    failures
}

fn remove_tree(dir: &Path, dev: u64, keep: &Path, failures: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        *failures += 1;
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == keep {
            continue;
        }
        let Ok(st) = rustix::fs::lstat(&path) else {
            *failures += 1;
            continue;
        };
        if st.st_dev != dev {
            continue;
        }
        let is_dir = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
        if is_dir {
            remove_tree(&path, dev, keep, failures);
            // A directory that holds another mount point stays (it cannot be removed; that's fine).
            let _ = std::fs::remove_dir(&path);
        } else if std::fs::remove_file(&path).is_err() {
            *failures += 1;
        }
    }
}

/// Makes `new_root` the root of this process: chdir into it, move its mount onto `/`, and
/// chroot into `.`. The caller execs the new init right after.
pub fn switch_root(new_root: &Path) -> Result<(), MountError> {
    let fail = |step: &'static str| {
        move |e: rustix::io::Errno| MountError::SwitchRoot { new_root: new_root.into(), step, source: e.into() }
    };
    rustix::process::chdir(new_root).map_err(fail("chdir"))?;
    mount_move(".", "/").map_err(fail("moving it onto /"))?;
    rustix::process::chroot(".").map_err(fail("chroot ."))?;
    rustix::process::chdir("/").map_err(fail("chdir /"))?;
    Ok(())
}

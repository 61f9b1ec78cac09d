//! Swap areas on and off: `swapon(2)` and `swapoff(2)` on a block device that carries a swap
//! header, and the kernel's list of active areas (`/proc/swaps`). Making the header is
//! `block::swap`'s job; this module only hands the device to the kernel and takes it back.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `SWAP_FLAG_DISCARD` | `SWAP_FLAG_DISCARD_ONCE` (linux/swap.h): discard the whole area once
/// when it is enabled, not page by page afterwards (util-linux's `swapon --discard=once`).
/// A device without discard support ignores it.
pub const DISCARD_ONCE: i32 = 0x10000 | 0x20000;

#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    #[error("enabling swap on {}: {source}", device.display())]
    On { device: PathBuf, source: std::io::Error },
    #[error("disabling swap on {}: {source}", device.display())]
    Off { device: PathBuf, source: std::io::Error },
    #[error("swap device path {} holds a NUL byte", device.display())]
    Path { device: PathBuf },
}

fn c_path(device: &Path) -> Result<CString, SwapError> {
    CString::new(device.as_os_str().as_bytes()).map_err(|_| SwapError::Path { device: device.to_path_buf() })
}

/// Enables swapping on `device` with `flags` (e.g. [`DISCARD_ONCE`]).
pub fn on(device: &Path, flags: i32) -> Result<(), SwapError> {
    let path = c_path(device)?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call; swapon reads it and
    // keeps no pointer to it.
    let rc = unsafe { libc::swapon(path.as_ptr(), flags) };
    if rc != 0 {
        return Err(SwapError::On { device: device.to_path_buf(), source: std::io::Error::last_os_error() });
    }
    Ok(())
}

/// Disables swapping on `device`; the kernel moves what it holds back into memory first.
pub fn off(device: &Path) -> Result<(), SwapError> {
    let path = c_path(device)?;
    // SAFETY: as in `on`: a NUL-terminated string, read during the call only.
    let rc = unsafe { libc::swapoff(path.as_ptr()) };
    if rc != 0 {
        return Err(SwapError::Off { device: device.to_path_buf(), source: std::io::Error::last_os_error() });
    }
    Ok(())
}

/// The devices and files swapped to, from the text of `/proc/swaps` (`\040` for a space in a
/// name, as the kernel escapes it).
pub fn parse_swaps(text: &str) -> Vec<PathBuf> {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(|name| PathBuf::from(name.replace("\\040", " ")))
        .collect()
}

/// Whether `device` is swapped to now.
pub fn is_active(device: &Path) -> bool {
    std::fs::read_to_string("/proc/swaps").map(|t| parse_swaps(&t).iter().any(|d| d == device)).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_swaps_names_the_areas() {
        let text = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                    /dev/vda3                               partition\t2097148\t\t0\t\t-2\n\
                    /var/swap\\040file                       file\t\t65532\t\t0\t\t-3\n";
        assert_eq!(parse_swaps(text), [PathBuf::from("/dev/vda3"), PathBuf::from("/var/swap file")]);
        assert!(parse_swaps("Filename\tType\tSize\tUsed\tPriority\n").is_empty());
    }

    #[test]
    fn errors_name_the_device() {
        let missing = Path::new("/nonexistent/swap-device");
        let err = on(missing, 0).unwrap_err().to_string();
        assert!(err.starts_with("enabling swap on /nonexistent/swap-device: "), "{err}");
        let err = off(missing).unwrap_err().to_string();
        assert!(err.starts_with("disabling swap on /nonexistent/swap-device: "), "{err}");
    }
}

//! Host tools the imager drives, and the Debian packages that provide them.
//!
//! Finding a tool and running it with a clear error is all this does; a missing tool is
//! reported with the package to install. It must never install anything itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A program (or data file) the imager needs from the host, and its Debian package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub name: &'static str,
    pub package: &'static str,
}

pub const MKSQUASHFS: Tool = Tool { name: "mksquashfs", package: "squashfs-tools" };
pub const XZ: Tool = Tool { name: "xz", package: "xz-utils" };
pub const DEPMOD: Tool = Tool { name: "depmod", package: "kmod" };
pub const MKFS_XFS: Tool = Tool { name: "mkfs.xfs", package: "xfsprogs" };
pub const MKFS_FAT: Tool = Tool { name: "mkfs.fat", package: "dosfstools" };
pub const MMD: Tool = Tool { name: "mmd", package: "mtools" };
pub const MCOPY: Tool = Tool { name: "mcopy", package: "mtools" };
pub const GRUB_MKIMAGE: Tool = Tool { name: "grub-mkimage", package: "grub-common" };
pub const DPKG: Tool = Tool { name: "dpkg", package: "dpkg" };
pub const DPKG_DEB: Tool = Tool { name: "dpkg-deb", package: "dpkg" };
pub const APT_GET: Tool = Tool { name: "apt-get", package: "apt" };
pub const APT_CACHE: Tool = Tool { name: "apt-cache", package: "apt" };
pub const LDD: Tool = Tool { name: "ldd", package: "libc-bin" };

/// Data files (not programs) the imager reads, defaulting to where Debian puts them; a Nix
/// build passes its own store paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    /// systemd's EFI stub (`linuxx64.efi.stub`), the base of the UKI.
    pub efi_stub: PathBuf,
    /// GRUB's i386-pc module directory (with boot.img).
    pub grub_pc: PathBuf,
    /// GRUB's x86_64-efi module directory.
    pub grub_efi: PathBuf,
    /// libfaketime's multi-threaded preload library, to freeze mkfs.xfs's clock.
    pub faketime: PathBuf,
}

impl Default for Files {
    fn default() -> Self {
        Self {
            efi_stub: "/usr/lib/systemd/boot/efi/linuxx64.efi.stub".into(),
            grub_pc: "/usr/lib/grub/i386-pc".into(),
            grub_efi: "/usr/lib/grub/x86_64-efi".into(),
            faketime: "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1".into(),
        }
    }
}

impl Files {
    /// Each file with the Debian package that provides it.
    pub fn with_packages(&self) -> [(&Path, &'static str); 4] {
        [
            (&self.efi_stub, "systemd-boot-efi"),
            (&self.grub_pc, "grub-pc-bin"),
            (&self.grub_efi, "grub-efi-amd64-bin"),
            (&self.faketime, "libfaketime"),
        ]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{}", missing.iter().map(|(n, p)| format!("{n} not found: apt-get install {p}")).collect::<Vec<_>>().join("; "))]
    Missing { missing: Vec<(String, String)> },
    #[error("starting {tool} ({what}): {source}")]
    Spawn { tool: &'static str, what: String, source: std::io::Error },
    #[error("{tool} failed ({what}): {status}: {stderr}")]
    Failed { tool: &'static str, what: String, status: std::process::ExitStatus, stderr: String },
}

/// Looks a program up on PATH and in the sbin directories (root's tools live there).
pub fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Checks every tool and data file at once, so the user gets one error listing all of them.
pub fn require(tools: &[Tool], files: &[(&Path, &str)]) -> Result<(), HostError> {
    let mut missing: Vec<(String, String)> = Vec::new();
    for t in tools {
        if find(t.name).is_none() && !missing.iter().any(|(n, _)| n == t.name) {
            missing.push((t.name.to_string(), t.package.to_string()));
        }
    }
    for (path, package) in files {
        if !path.exists() {
            missing.push((path.display().to_string(), package.to_string()));
        }
    }
    if missing.is_empty() { Ok(()) } else { Err(HostError::Missing { missing }) }
}

/// A command for `tool`, resolved to its full path when found.
pub fn command(tool: Tool) -> Command {
    Command::new(find(tool.name).unwrap_or_else(|| PathBuf::from(tool.name)))
}

/// Runs `cmd` to completion; non-zero exit is an error carrying the tool's stderr.
pub fn run(tool: Tool, what: &str, cmd: &mut Command) -> Result<Output, HostError> {
    let out = cmd.output().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            return HostError::Missing { missing: vec![(tool.name.to_string(), tool.package.to_string())] };
        }
        HostError::Spawn { tool: tool.name, what: what.to_string(), source }
    })?;
    if !out.status.success() {
        return Err(HostError::Failed {
            tool: tool.name,
            what: what.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_name_their_packages_in_one_error() {
        let a = Tool { name: "talosbox-no-such-tool", package: "pkg-a" };
        let b = Tool { name: "talosbox-no-such-tool-2", package: "pkg-b" };
        let err = require(&[a, b], &[(Path::new("/no/such/file"), "pkg-c")]).unwrap_err().to_string();
        assert_eq!(
            err,
            "talosbox-no-such-tool not found: apt-get install pkg-a; \
             talosbox-no-such-tool-2 not found: apt-get install pkg-b; \
             /no/such/file not found: apt-get install pkg-c"
        );
    }

    #[test]
    fn run_reports_failure_with_stderr() {
        let sh = Tool { name: "sh", package: "dash" };
        let err = run(sh, "test", command(sh).args(["-c", "echo boom >&2; exit 3"])).unwrap_err().to_string();
        assert!(err.contains("sh failed (test)") && err.contains("boom"), "{err}");
    }
}

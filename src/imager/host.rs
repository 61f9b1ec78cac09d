//! The host tools and data files the imager uses, with the Debian packages that provide them.
//! Finding and running them is `crate::hosttools`'s job; this never installs anything.

use std::path::{Path, PathBuf};

pub use crate::hosttools::{HostError, Tool, command, find, require, run};

pub const MKSQUASHFS: Tool = Tool { name: "mksquashfs", package: "squashfs-tools" };
pub const XZ: Tool = Tool { name: "xz", package: "xz-utils" };
pub const ZSTD: Tool = Tool { name: "zstd", package: "zstd" };
pub const LZ4: Tool = Tool { name: "lz4", package: "lz4" };
pub const GZIP: Tool = Tool { name: "gzip", package: "gzip" };
pub const DEPMOD: Tool = Tool { name: "depmod", package: "kmod" };
pub const MKFS_XFS: Tool = Tool { name: "mkfs.xfs", package: "xfsprogs" };
pub const GRUB_MKIMAGE: Tool = Tool { name: "grub-mkimage", package: "grub-common" };
pub const DPKG: Tool = Tool { name: "dpkg", package: "dpkg" };
pub const DPKG_DEB: Tool = Tool { name: "dpkg-deb", package: "dpkg" };
pub const APT_GET: Tool = Tool { name: "apt-get", package: "apt" };
pub const APT_CACHE: Tool = Tool { name: "apt-cache", package: "apt" };
pub const DPKG_QUERY: Tool = Tool { name: "dpkg-query", package: "dpkg" };

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
    /// The PEM bundle of CAs the node trusts for https (image URLs, a KMS over TLS), before
    /// the configuration's `TrustedRootsConfig` documents add theirs.
    pub trusted_roots: PathBuf,
}

impl Default for Files {
    fn default() -> Self {
        Self {
            efi_stub: "/usr/lib/systemd/boot/efi/linuxx64.efi.stub".into(),
            grub_pc: "/usr/lib/grub/i386-pc".into(),
            grub_efi: "/usr/lib/grub/x86_64-efi".into(),
            faketime: "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1".into(),
            trusted_roots: "/etc/ssl/certs/ca-certificates.crt".into(),
        }
    }
}

impl Files {
    /// Each file with the Debian package that provides it.
    pub fn with_packages(&self) -> [(&Path, &'static str); 5] {
        [
            (&self.efi_stub, "systemd-boot-efi"),
            (&self.grub_pc, "grub-pc-bin"),
            (&self.grub_efi, "grub-efi-amd64-bin"),
            (&self.faketime, "libfaketime"),
            (&self.trusted_roots, "ca-certificates"),
        ]
    }
}

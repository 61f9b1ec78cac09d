//! The initramfs artifact's names: one per compression, told apart by the file's magic number.
//! The imager names what it builds by these; a node upgrading and the provisioner booting find
//! the initramfs in a directory of artifacts by them. Nothing here decompresses or builds an
//! initramfs; only [`find_initramfs`] looks at a directory.

use std::path::{Path, PathBuf};

pub const CPIO: &str = "initramfs.cpio";
pub const GZIP: &str = "initramfs.gz";
pub const XZ: &str = "initramfs.xz";
pub const ZSTD: &str = "initramfs.zst";
pub const LZ4: &str = "initramfs.lz4";

/// Every name an initramfs artifact can have, in the order a directory is searched.
pub const INITRAMFS_NAMES: &[&str] = &[ZSTD, LZ4, XZ, GZIP, CPIO];

/// The initramfs in a directory of artifacts, whatever its compression.
pub fn find_initramfs(dir: &Path) -> Option<PathBuf> {
    INITRAMFS_NAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// The initramfs name for a file's contents, by its compression's magic number.
pub fn initramfs_name_of(data: &[u8]) -> Option<&'static str> {
    const MAGIC: &[(&[u8], &str)] = &[
        (&[0x28, 0xb5, 0x2f, 0xfd], ZSTD),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0], XZ),
        (&[0x02, 0x21, 0x4c, 0x18], LZ4),
        (&[0x1f, 0x8b], GZIP),
        (b"070701", CPIO),
    ];
    MAGIC.iter().find(|(magic, _)| data.starts_with(magic)).map(|&(_, name)| name)
}

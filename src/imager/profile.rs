//! Image profiles: the data files under `images/` that say what goes into an image
//! (kernel command line, modules, the host programs the node execs, disk sizes, the pinned
//! build time).
//!
//! Parsing and validation only; unknown fields are errors and every error names the field.
//! It must never look at the host or the kernel: checking module names against a kernel is
//! the kernel module's job.

use serde::Deserialize;
use std::path::{Path, PathBuf};

use crate::boot::initramfs;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Profile {
    /// Kernel command line for every boot path (UKI `.cmdline`, GRUB entries).
    pub cmdline: String,
    /// Every timestamp in every artifact (seconds since the epoch).
    pub source_date_epoch: u32,
    /// Seconds GRUB shows its menu.
    #[serde(default)]
    pub grub_timeout: u32,
    /// Compression of the initramfs (the kernel unpacks it before `/init` runs, so its
    /// decoder's speed is boot time): `lz4` (the default: the rootfs inside is compressed
    /// already, and lz4 decodes fastest), `zstd`, `xz`, `gzip` or `none`. It names the file:
    /// `initramfs.lz4`, `.zst`, `.xz`, `.gz`, `initramfs.cpio`.
    #[serde(default = "lz4")]
    pub initramfs_compression: Compression,
    /// squashfs compression of the rootfs: `zstd` (the default: blocks are decompressed only
    /// when read), `lz4`, `xz`, `gzip` or `none`.
    #[serde(default = "zstd")]
    pub rootfs_compression: Compression,
    pub modules: Modules,
    pub disk: Disk,
    /// Network documents the image carries (`LinkConfig`, `ResolverConfig`, … or a v1alpha1
    /// `machine.network`), applied at the platform layer on every boot: a static address
    /// without DHCP. Written to the rootfs as [`super::IMAGE_NETWORK_CONFIG`]; machined checks
    /// and reports them.
    #[serde(default)]
    pub network: Option<String>,
    /// Host programs the node execs (`/usr/sbin/mkfs.xfs`, `/usr/sbin/mkfs.ext4`), carried in
    /// the rootfs at the same absolute paths, with the symlinks that lead to them, the dynamic
    /// loader and every shared library they need (the talosbox binary is static: the rootfs
    /// has no libc of its own).
    #[serde(default)]
    pub programs: Vec<PathBuf>,
    /// Host data files those programs read (`/etc/mke2fs.conf`), carried at the same paths.
    #[serde(default)]
    pub program_files: Vec<PathBuf>,
}

/// Rootfs directories something is mounted over at run time: a file carried there would be
/// hidden.
const MOUNTED_OVER: &[&str] = &["/dev", "/proc", "/sys", "/run", "/tmp", "/system", "/var"];

fn zstd() -> Compression {
    Compression::Zstd
}

fn lz4() -> Compression {
    Compression::Lz4
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Xz,
    Zstd,
    Lz4,
}

impl Compression {
    /// The initramfs file name for this compression.
    pub fn initramfs_name(self) -> &'static str {
        match self {
            Compression::None => initramfs::CPIO,
            Compression::Gzip => initramfs::GZIP,
            Compression::Xz => initramfs::XZ,
            Compression::Zstd => initramfs::ZSTD,
            Compression::Lz4 => initramfs::LZ4,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Modules {
    /// What init loads, in this order, before it mounts the root filesystem: the only modules
    /// the initramfs carries (`/etc/talosbox/modules` there).
    pub boot: Vec<String>,
    /// What machined loads at start, besides the modules of the devices present (in the
    /// rootfs, `/etc/talosbox/modules`).
    #[serde(default)]
    pub load: Vec<String>,
    /// Further modules carried in the rootfs, loaded when something asks for them (a
    /// controller, or the kernel through the `modprobe` applet).
    #[serde(default)]
    pub include: Vec<String>,
    /// Modaliases of devices the image must drive (e.g. QEMU's); every module whose
    /// `modules.alias` pattern matches one is carried in the rootfs, and machined loads
    /// those whose device is present.
    #[serde(default)]
    pub device_modaliases: Vec<String>,
}

/// Partition sizes in MiB, Talos's layout: EFI, BIOS, BOOT, META.
pub type Disk = crate::boot::Sizes;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("reading profile {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("profile {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("profile {}: field {field}: {message}", path.display())]
    Invalid { path: PathBuf, field: &'static str, message: String },
}

impl Profile {
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ProfileError::Read { path: path.to_path_buf(), source })?;
        Self::parse(path, &text)
    }

    /// Parses and validates; `path` is only used in messages.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ProfileError> {
        let p: Profile = serde_saphyr::from_str(text)
            .map_err(|e| ProfileError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
        let invalid =
            |field, message: &str| ProfileError::Invalid { path: path.to_path_buf(), field, message: message.into() };
        if p.cmdline.trim().is_empty() {
            return Err(invalid("cmdline", "must not be empty"));
        }
        if p.cmdline.contains('\n') {
            return Err(invalid("cmdline", "must be one line"));
        }
        if p.modules.boot.is_empty() {
            return Err(invalid(
                "modules.boot",
                "must name the modules that mount the root filesystem (squashfs, loop)",
            ));
        }
        for (field, list) in [
            ("modules.boot", &p.modules.boot),
            ("modules.load", &p.modules.load),
            ("modules.include", &p.modules.include),
        ] {
            if let Some(bad) = list.iter().find(|m| !valid_module_name(m)) {
                return Err(invalid(field, &format!("{bad:?} is not a module name")));
            }
        }
        if p.modules.device_modaliases.iter().any(|a| a.is_empty() || a.contains(char::is_whitespace)) {
            return Err(invalid("modules.device-modaliases", "entries must be non-empty, without spaces"));
        }
        for (field, v) in [
            ("disk.efi-mib", p.disk.efi_mib),
            ("disk.bios-mib", p.disk.bios_mib),
            ("disk.boot-mib", p.disk.boot_mib),
            ("disk.meta-mib", p.disk.meta_mib),
        ] {
            if v == 0 || v > 64 * 1024 {
                return Err(invalid(field, "must be between 1 and 65536"));
            }
        }
        for (field, list) in [("programs", &p.programs), ("program-files", &p.program_files)] {
            for (i, path) in list.iter().enumerate() {
                if !is_normal_absolute(path) {
                    return Err(invalid(field, &format!("{} is not a normal absolute path", path.display())));
                }
                if let Some(dir) = MOUNTED_OVER.iter().find(|d| path.starts_with(d)) {
                    return Err(invalid(
                        field,
                        &format!("{} is under {dir}, which is mounted over at run time", path.display()),
                    ));
                }
                if list[..i].contains(path) {
                    return Err(invalid(field, &format!("{} is listed twice", path.display())));
                }
            }
        }
        if p.disk.efi_mib < 33 {
            return Err(invalid("disk.efi-mib", "FAT32 needs at least 33 MiB"));
        }
        Ok(p)
    }
}

/// `/a/b`: absolute, no `.` or `..`, no empty or trailing components, not `/` itself.
fn is_normal_absolute(path: &Path) -> bool {
    use std::path::Component;
    let mut parts = path.components();
    let rebuilt = parts.clone().fold(PathBuf::new(), |acc, c| acc.join(c));
    parts.next() == Some(Component::RootDir)
        && parts.clone().next().is_some()
        && parts.all(|c| matches!(c, Component::Normal(_)))
        && rebuilt.as_os_str() == path.as_os_str()
}

fn valid_module_name(m: &str) -> bool {
    !m.is_empty() && m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
cmdline: console=ttyS0
source-date-epoch: 1700000000
modules:
  boot: [squashfs, loop]
  load: [virtio_blk, dm-mod]
disk: {efi-mib: 100, bios-mib: 1, boot-mib: 1000, meta-mib: 1}
";

    #[test]
    fn parses_the_minimal_profile() {
        let p = Profile::parse(Path::new("p.yaml"), GOOD).unwrap();
        assert_eq!(p.modules.load, ["virtio_blk", "dm-mod"]);
        assert_eq!(p.modules.boot, ["squashfs", "loop"]);
        assert_eq!(p.rootfs_compression, Compression::Zstd);
        assert_eq!(p.initramfs_compression.initramfs_name(), "initramfs.lz4");
        let zstd = Profile::parse(Path::new("p.yaml"), &format!("{GOOD}initramfs-compression: zstd\n")).unwrap();
        assert_eq!(zstd.initramfs_compression.initramfs_name(), "initramfs.zst");
        assert_eq!(p.grub_timeout, 0);
        assert_eq!(p.network, None);
        assert!(p.programs.is_empty() && p.program_files.is_empty());
        let text =
            format!("{GOOD}programs: [/usr/sbin/mkfs.xfs, /usr/sbin/mkfs.ext4]\nprogram-files: [/etc/mke2fs.conf]\n");
        let carry = Profile::parse(Path::new("p.yaml"), &text).unwrap();
        assert_eq!(carry.programs, [PathBuf::from("/usr/sbin/mkfs.xfs"), PathBuf::from("/usr/sbin/mkfs.ext4")]);
        assert_eq!(carry.program_files, [PathBuf::from("/etc/mke2fs.conf")]);
        let text = format!("{GOOD}network: |\n  apiVersion: v1alpha1\n  kind: LinkConfig\n  name: eth0\n");
        let net = Profile::parse(Path::new("p.yaml"), &text).unwrap();
        assert_eq!(net.network.as_deref(), Some("apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n"));
    }

    #[test]
    fn the_shipped_profiles_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                Profile::load(&path).unwrap_or_else(|e| panic!("{e}"));
                seen += 1;
            }
        }
        assert!(seen > 0, "no profiles under {}", dir.display());
    }

    #[test]
    fn errors_name_the_field() {
        // (edit applied to GOOD, text the error must contain)
        let cases: &[(&str, &str, &str)] = &[
            ("cmdline: console=ttyS0", "cmdline: ''", "field cmdline"),
            ("modules:\n", "modules:\n  colour: red\n", "colour"),
            ("source-date-epoch: 1700000000", "source-date-epoch: soon", "source-date-epoch"),
            ("boot-mib: 1000", "boot-mib: 0", "disk.boot-mib"),
            ("efi-mib: 100", "efi-mib: 10", "disk.efi-mib"),
            ("[squashfs, loop]", "[]", "modules.boot"),
            ("[virtio_blk, dm-mod]", "['virtio blk']", "modules.load"),
            ("source-date-epoch: 1700000000", "source-date-epoch: 1700000000\ninitramfs-compression: brotli", "brotli"),
            ("disk:", "disks:", "disks"),
            ("disk:", "programs: [sbin/mkfs.xfs]\ndisk:", "field programs: sbin/mkfs.xfs is not a normal"),
            ("disk:", "programs: [/usr/sbin/../mkfs.xfs]\ndisk:", "field programs"),
            ("disk:", "programs: [/usr/sbin/mkfs.xfs/]\ndisk:", "field programs"),
            ("disk:", "programs: [//usr/sbin/mkfs.xfs]\ndisk:", "field programs"),
            ("disk:", "programs: [/]\ndisk:", "field programs"),
            ("disk:", "programs: [/a, /a]\ndisk:", "listed twice"),
            ("disk:", "program-files: [/var/lib/x]\ndisk:", "field program-files: /var/lib/x is under /var"),
            ("disk:", "program-file: [/etc/mke2fs.conf]\ndisk:", "program-file"),
        ];
        for (from, to, want) in cases {
            let text = GOOD.replacen(from, to, 1);
            assert_ne!(text, GOOD, "edit {from:?} did not apply");
            let err = Profile::parse(Path::new("p.yaml"), &text).unwrap_err().to_string();
            assert!(err.contains(want), "{to:?}: error {err:?} should mention {want:?}");
            assert!(err.contains("p.yaml"), "{err}");
        }
    }
}

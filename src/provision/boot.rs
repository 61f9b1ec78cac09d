//! Which way a node boots, decided from the flags and the artifacts directory before anything is
//! started: direct kernel + initramfs, a UKI on a FAT ESP (OVMF), or the GRUB disk image (BIOS, or
//! OVMF with `--with-uefi`). Pure: file existence is asked through a closure so tests need no files.
//!
//! Never reads or writes the artifacts themselves.

use std::fmt;
use std::path::{Path, PathBuf};

use super::ProvisionError;

/// The kernel command line of the image profile; `--extra-kernel-args` is appended to it.
pub const DEFAULT_CMDLINE: &str = "console=ttyS0,115200 printk.devkmsg=on talos.platform=metal";

/// Artifact file names the imager writes (the initramfs is named for its compression:
/// [`INITRAMFS_NAMES`]).
pub const KERNEL: &str = "vmlinuz";
pub use crate::boot::initramfs::INITRAMFS_NAMES;
pub const UKI: &str = "talosbox.efi";
pub const DISK: &str = "disk.raw";

/// What the user asked for on the command line.
#[derive(Debug, Clone, Default)]
pub struct BootRequest {
    pub artifacts: PathBuf,
    pub kernel: Option<PathBuf>,
    pub initrd: Option<PathBuf>,
    pub uki: Option<PathBuf>,
    pub disk_image: Option<PathBuf>,
    pub with_uefi: bool,
    pub extra_kernel_args: Option<String>,
}

/// The boot path a cluster's nodes take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootPlan {
    /// `-kernel/-initrd/-append`, under SeaBIOS or OVMF.
    Direct { kernel: PathBuf, initrd: PathBuf, cmdline: String, uefi: bool },
    /// The UKI copied to `\EFI\BOOT\BOOTX64.EFI` on a FAT image built at create time; always OVMF.
    Uki { uki: PathBuf },
    /// The GRUB GPT disk: each node boots its own persistent copy of it (its system disk).
    Disk { image: PathBuf, uefi: bool },
}

impl BootPlan {
    pub fn uefi(&self) -> bool {
        match self {
            BootPlan::Direct { uefi, .. } | BootPlan::Disk { uefi, .. } => *uefi,
            BootPlan::Uki { .. } => true,
        }
    }
}

impl fmt::Display for BootPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fw = if self.uefi() { "UEFI (OVMF)" } else { "BIOS (SeaBIOS)" };
        match self {
            BootPlan::Direct { kernel, initrd, .. } => {
                write!(f, "direct kernel {} + initramfs {}, {fw}", kernel.display(), initrd.display())
            }
            BootPlan::Uki { uki } => write!(f, "UKI {} on a FAT ESP, {fw}", uki.display()),
            BootPlan::Disk { image, .. } => write!(f, "GRUB disk {}, {fw}", image.display()),
        }
    }
}

fn require(
    what: &'static str,
    path: PathBuf,
    exists: &dyn Fn(&Path) -> bool,
    hint: &str,
) -> Result<PathBuf, ProvisionError> {
    if exists(&path) { Ok(path) } else { Err(ProvisionError::MissingArtifact { what, path, hint: hint.to_string() }) }
}

/// Decides the boot path. `--uki` and `--disk-image` exclude each other and the direct flags;
/// with none of them the node boots the artifacts' kernel and initramfs directly.
pub fn resolve(req: &BootRequest, exists: &dyn Fn(&Path) -> bool) -> Result<BootPlan, ProvisionError> {
    let direct_flags = req.kernel.is_some() || req.initrd.is_some();
    let chosen = [req.uki.is_some(), req.disk_image.is_some(), direct_flags].iter().filter(|b| **b).count();
    if chosen > 1 {
        return Err(ProvisionError::Conflict(
            "choose one boot path: --uki, --disk-image, or --kernel/--initrd".to_string(),
        ));
    }
    let fixed_cmdline = |path: &str| {
        ProvisionError::Conflict(format!(
            "--extra-kernel-args needs the direct boot path: the {path}'s kernel command line is fixed in the image"
        ))
    };
    let build_hint =
        " (build the images: talosbox imager --profile images/qemu.yaml --output _out, or pass --artifacts)";
    if let Some(uki) = &req.uki {
        if req.extra_kernel_args.is_some() {
            return Err(fixed_cmdline("UKI"));
        }
        return Ok(BootPlan::Uki { uki: require("UKI", uki.clone(), exists, "")? });
    }
    if let Some(image) = &req.disk_image {
        if req.extra_kernel_args.is_some() {
            return Err(fixed_cmdline("GRUB disk"));
        }
        return Ok(BootPlan::Disk { image: require("disk image", image.clone(), exists, "")?, uefi: req.with_uefi });
    }
    let kernel = req.kernel.clone().unwrap_or_else(|| req.artifacts.join(KERNEL));
    let initrd = req.initrd.clone().unwrap_or_else(|| {
        let candidates = INITRAMFS_NAMES.iter().map(|n| req.artifacts.join(n));
        candidates.clone().find(|p| exists(p)).unwrap_or_else(|| req.artifacts.join(INITRAMFS_NAMES[0]))
    });
    let hint = if direct_flags { "" } else { build_hint };
    let kernel = require("kernel", kernel, exists, hint)?;
    let initrd = require("initramfs", initrd, exists, hint)?;
    let cmdline = match req.extra_kernel_args.as_deref().map(str::trim) {
        Some(extra) if !extra.is_empty() => format!("{DEFAULT_CMDLINE} {extra}"),
        _ => DEFAULT_CMDLINE.to_string(),
    };
    Ok(BootPlan::Direct { kernel, initrd, cmdline, uefi: req.with_uefi })
}

/// The image each node's system disk is a copy of: the GRUB disk a disk boot boots, else the
/// artifacts' `disk.raw` when there is one (direct and UKI nodes keep their volumes on it, as
/// on an installed machine); `None` gives the nodes a blank system disk, as `blank`
/// (`--blank-disk`) asks for a node that installs itself. A disk boot cannot have one: it would
/// have nothing to boot.
pub fn system_image(
    plan: &BootPlan,
    artifacts: &Path,
    exists: &dyn Fn(&Path) -> bool,
    blank: bool,
) -> Result<Option<PathBuf>, ProvisionError> {
    match plan {
        BootPlan::Disk { .. } if blank => Err(ProvisionError::Conflict(
            "--blank-disk and --disk-image exclude each other: a --disk-image node boots its system disk, \
             which --blank-disk would leave with nothing to boot (use --blank-disk with the direct or --uki boot)"
                .to_string(),
        )),
        BootPlan::Disk { image, .. } => Ok(Some(image.clone())),
        BootPlan::Direct { .. } | BootPlan::Uki { .. } if blank => Ok(None),
        BootPlan::Direct { .. } | BootPlan::Uki { .. } => Ok(Some(artifacts.join(DISK)).filter(|p| exists(p))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> BootRequest {
        BootRequest { artifacts: "_out".into(), ..Default::default() }
    }
    fn all(_: &Path) -> bool {
        true
    }
    fn none(_: &Path) -> bool {
        false
    }

    #[test]
    fn default_is_direct_from_artifacts() {
        let plan = resolve(&req(), &all).unwrap();
        assert_eq!(
            plan,
            BootPlan::Direct {
                kernel: "_out/vmlinuz".into(),
                initrd: "_out/initramfs.zst".into(),
                cmdline: DEFAULT_CMDLINE.into(),
                uefi: false
            }
        );
    }

    #[test]
    fn extra_args_are_appended() {
        let r = BootRequest { extra_kernel_args: Some(" talos.debug=1 ".into()), with_uefi: true, ..req() };
        let BootPlan::Direct { cmdline, uefi, .. } = resolve(&r, &all).unwrap() else { panic!("not direct") };
        assert_eq!(cmdline, format!("{DEFAULT_CMDLINE} talos.debug=1"));
        assert!(uefi);
    }

    #[test]
    fn kernel_flag_overrides_one_file_only() {
        let r = BootRequest { kernel: Some("/k".into()), ..req() };
        let BootPlan::Direct { kernel, initrd, .. } = resolve(&r, &all).unwrap() else { panic!("not direct") };
        assert_eq!((kernel, initrd), (PathBuf::from("/k"), PathBuf::from("_out/initramfs.zst")));
    }

    #[test]
    fn the_initramfs_is_found_by_its_compression() {
        let only_lz4 = |p: &Path| !p.to_string_lossy().ends_with(".zst");
        let BootPlan::Direct { initrd, .. } = resolve(&req(), &only_lz4).unwrap() else { panic!("not direct") };
        assert_eq!(initrd, PathBuf::from("_out/initramfs.lz4"));
    }

    #[test]
    fn uki_implies_uefi_and_disk_follows_flag() {
        let r = BootRequest { uki: Some("_out/talosbox.efi".into()), ..req() };
        assert!(resolve(&r, &all).unwrap().uefi());
        let r = BootRequest { disk_image: Some("_out/disk.raw".into()), ..req() };
        assert_eq!(resolve(&r, &all).unwrap(), BootPlan::Disk { image: "_out/disk.raw".into(), uefi: false });
        let r = BootRequest { with_uefi: true, ..r };
        assert!(resolve(&r, &all).unwrap().uefi());
    }

    #[test]
    fn the_system_disk_copies_the_boot_disk_or_the_artifacts_disk_raw() {
        let disk = BootPlan::Disk { image: "/i/my.raw".into(), uefi: false };
        assert_eq!(system_image(&disk, Path::new("_out"), &none, false).unwrap(), Some("/i/my.raw".into()));
        let direct = resolve(&req(), &all).unwrap();
        assert_eq!(system_image(&direct, Path::new("_out"), &all, false).unwrap(), Some("_out/disk.raw".into()));
        assert_eq!(system_image(&direct, Path::new("_out"), &none, false).unwrap(), None, "no disk.raw: a blank disk");
        let uki = BootPlan::Uki { uki: "/u.efi".into() };
        assert_eq!(system_image(&uki, Path::new("/a"), &all, false).unwrap(), Some("/a/disk.raw".into()));
    }

    /// `--blank-disk` leaves a direct or UKI node's system disk blank even with a disk.raw, and
    /// is refused with `--disk-image`, naming both flags.
    #[test]
    fn a_blank_disk_is_for_nodes_that_boot_something_else() {
        let direct = resolve(&req(), &all).unwrap();
        assert_eq!(system_image(&direct, Path::new("_out"), &all, true).unwrap(), None);
        let uki = BootPlan::Uki { uki: "/u.efi".into() };
        assert_eq!(system_image(&uki, Path::new("/a"), &all, true).unwrap(), None);
        let disk = BootPlan::Disk { image: "/i/my.raw".into(), uefi: true };
        let err = system_image(&disk, Path::new("_out"), &all, true).unwrap_err().to_string();
        assert!(err.contains("--blank-disk") && err.contains("--disk-image"), "{err}");
    }

    #[test]
    fn conflicts_and_missing_files_are_errors() {
        let both = BootRequest { uki: Some("a".into()), disk_image: Some("b".into()), ..req() };
        assert!(matches!(resolve(&both, &all), Err(ProvisionError::Conflict(_))));
        let mixed = BootRequest { uki: Some("a".into()), kernel: Some("k".into()), ..req() };
        assert!(matches!(resolve(&mixed, &all), Err(ProvisionError::Conflict(_))));
        let extra = BootRequest { uki: Some("a".into()), extra_kernel_args: Some("x".into()), ..req() };
        assert!(matches!(resolve(&extra, &all), Err(ProvisionError::Conflict(_))));
        let err = resolve(&req(), &none).unwrap_err().to_string();
        assert!(err.contains("_out/vmlinuz does not exist"), "{err}");
        assert!(err.contains("imager"), "{err}");
    }
}

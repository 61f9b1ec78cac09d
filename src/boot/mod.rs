//! The boot disk: Talos's layout of the disk a node boots from (EFI, BIOS, BOOT, META; STATE
//! and EPHEMERAL follow from the volume manager), GRUB's configuration and environment block,
//! the A/B slots on BOOT, the artifacts a slot is written from (and the formats they come in:
//! a UKI's PE sections, the initramfs names), and writing the whole layout onto a disk (an
//! install). The imager lays its disk image out with the same plan; a node
//! installs itself and upgrades with the rest.
//!
//! Nothing here decides when to install or upgrade (machined does), and nothing here writes
//! to a disk it was not handed, or over the slot a node booted from.

pub mod artifacts;
pub mod grub;
pub mod grubenv;
pub mod initramfs;
pub mod install;
pub mod slots;
pub mod uki;

use crate::block::gpt::{self, Guid, PartitionSpec};

pub const EFI_LABEL: &str = "EFI";
pub const BIOS_LABEL: &str = "BIOS";
pub const BOOT_LABEL: &str = "BOOT";
pub const META_LABEL: &str = "META";
pub const EFI_SYSTEM_TYPE: &str = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
pub const BIOS_BOOT_TYPE: &str = "21686148-6449-6E6F-744E-656564454649";
pub const LINUX_DATA_TYPE: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
/// Where the rootfs carries the image's own trusted roots (the build host's bundle), which
/// the node's rendered bundle starts with and a KMS client falls back to.
pub const IMAGE_TRUSTED_ROOTS: &str = "/usr/share/talosbox/ca-certificates.crt";
/// Where the rootfs carries a profile's network documents, read by machined at boot.
pub const IMAGE_NETWORK_CONFIG_PATH: &str = "/usr/share/talosbox/platform-network.yaml";
/// Where the rootfs carries GRUB's images, for a node that installs itself.
pub const GRUB_IMAGES_DIR: &str = "/usr/lib/talosbox/grub";
/// The GRUB images' file names there: the EFI application, the BIOS core image (not yet
/// patched with where it sits) and the BIOS boot sector's code.
pub const GRUB_EFI_IMAGE: &str = "BOOTX64.EFI";
pub const GRUB_CORE_IMAGE: &str = "core.img";
pub const GRUB_BOOT_IMAGE: &str = "boot.img";
/// The ESP's path of the removable-media loader, which firmware boots without boot entries.
pub const ESP_LOADER: &str = "EFI/BOOT/BOOTX64.EFI";

/// The sizes of the boot partitions, in MiB (Talos's: 100, 1, 1000, 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Sizes {
    pub efi_mib: u64,
    pub bios_mib: u64,
    pub boot_mib: u64,
    pub meta_mib: u64,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes { efi_mib: 100, bios_mib: 1, boot_mib: 1000, meta_mib: 1 }
    }
}

/// The four boot partitions in Talos's order, each GUID from `guid(label)`.
pub fn partition_specs(sizes: &Sizes, guid: impl Fn(&str) -> Guid) -> Result<Vec<PartitionSpec>, gpt::GptError> {
    const MIB: u64 = 1 << 20;
    let part = |name: &str, type_guid: &str, mib: u64, attributes: u64| -> Result<PartitionSpec, gpt::GptError> {
        Ok(PartitionSpec {
            name: name.into(),
            type_guid: Guid::parse(type_guid)?,
            guid: guid(name),
            size_bytes: mib * MIB,
            attributes,
        })
    };
    Ok(vec![
        part(EFI_LABEL, EFI_SYSTEM_TYPE, sizes.efi_mib, 0)?,
        part(BIOS_LABEL, BIOS_BOOT_TYPE, sizes.bios_mib, gpt::ATTR_LEGACY_BIOS_BOOTABLE)?,
        part(BOOT_LABEL, LINUX_DATA_TYPE, sizes.boot_mib, 0)?,
        part(META_LABEL, LINUX_DATA_TYPE, sizes.meta_mib, 0)?,
    ])
}

//! The block layer's plain data: the devices and disks sysfs lists, the filesystems mkfs
//! makes, and how a volume is encrypted, with the serialized forms the resources carry. The
//! resources re-export them (as `resources::block`) and give them their resource
//! definitions; nothing here may reach up into the resources, COSI or the controllers.

use serde::{Deserialize, Serialize};

/// Size suffixes as Talos prints them (go-humanize, powers of 1000).
pub fn pretty_size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 10 {
        return format!("{bytes} B");
    }
    let exp = ((bytes as f64).ln() / 1000f64.ln()).floor() as usize;
    let exp = exp.min(UNITS.len() - 1);
    let value = (bytes as f64 / 1000f64.powi(exp as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 { format!("{value:.1} {}", UNITS[exp]) } else { format!("{value:.0} {}", UNITS[exp]) }
}

/// A block device the kernel has, disk or partition: Talos's `BlockDevice`, id the kernel
/// name (`vda`, `vda3`). `generation` moves on every change event, so a prober knows to look
/// again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BlockDevice {
    /// `disk` or `partition`.
    #[serde(rename = "type")]
    pub kind: String,
    pub major: u32,
    pub minor: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub partition_name: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub partition_number: u32,
    /// The sysfs path (`/sys/devices/…/block/vda`).
    pub device_path: String,
    pub generation: u64,
    /// The disk of a partition.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parent: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secondaries: Vec<String>,
}

/// A disk: Talos's `Disk`, id the kernel name. The field names are the ones CEL disk
/// selectors see (`disk.size`, `disk.transport`, …), snake_case as in Talos.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Disk {
    pub dev_path: String,
    pub size: u64,
    pub pretty_size: String,
    pub io_size: u32,
    pub sector_size: u32,
    pub readonly: bool,
    pub cdrom: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub model: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub serial: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub modalias: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub wwid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub bus_path: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sub_system: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub transport: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rotational: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secondary_disks: Vec<String>,
    /// `/dev/disk/by-id/…` and `/dev/disk/by-path/…` names, as udev would make them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub symlinks: Vec<String>,
}

/// Talos's `FilesystemType` (`none` is a raw volume, as META is).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FilesystemType {
    #[default]
    None,
    Xfs,
    Vfat,
    Ext4,
    Iso9660,
    Swap,
    Virtiofs,
}

impl FilesystemType {
    /// What a probe's name (`xfs`, `extfs`, `swap`, …; `""` for nothing) says is on a volume,
    /// as the filesystem to mount it with; `None` for nothing mountable known.
    pub fn from_probe_name(name: &str) -> FilesystemType {
        match name {
            "xfs" => FilesystemType::Xfs,
            "vfat" => FilesystemType::Vfat,
            "extfs" => FilesystemType::Ext4,
            "iso9660" => FilesystemType::Iso9660,
            "swap" => FilesystemType::Swap,
            _ => FilesystemType::None,
        }
    }

    /// The name the prober gives a volume carrying this filesystem (Talos's: ext2/3/4 are
    /// all `extfs`).
    pub fn probe_name(self) -> &'static str {
        match self {
            FilesystemType::Ext4 => "extfs",
            other => other.fstype(),
        }
    }

    /// The kernel's name for it, as `mount(2)` takes it.
    pub fn fstype(self) -> &'static str {
        match self {
            FilesystemType::None => "",
            FilesystemType::Xfs => "xfs",
            FilesystemType::Vfat => "vfat",
            FilesystemType::Ext4 => "ext4",
            FilesystemType::Iso9660 => "iso9660",
            FilesystemType::Swap => "swap",
            FilesystemType::Virtiofs => "virtiofs",
        }
    }
}

/// Talos's `EncryptionProviderType`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncryptionProvider {
    #[default]
    None,
    Luks2,
}

/// Talos's `EncryptionKeyType`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum EncryptionKeyType {
    #[default]
    #[serde(rename = "static")]
    Static,
    #[serde(rename = "nodeID")]
    NodeId,
    #[serde(rename = "kms")]
    Kms,
    #[serde(rename = "tpm")]
    Tpm,
    /// Beyond Talos: a passphrase slot (`static_passphrase`, or one given by `talosctl unlock`).
    #[serde(rename = "recovery")]
    Recovery,
}

/// One LUKS2 key slot, as Talos's `EncryptionKey` holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EncryptionKey {
    pub slot: u32,
    #[serde(rename = "type")]
    pub kind: EncryptionKeyType,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lock_to_state: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub static_passphrase: String,
    #[serde(rename = "kmsEndpoint", skip_serializing_if = "String::is_empty")]
    pub kms_endpoint: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tpm_check_secureboot_status_on_enroll: bool,
    #[serde(rename = "pcrs", skip_serializing_if = "Vec::is_empty")]
    pub tpm_pcrs: Vec<u8>,
    #[serde(rename = "pubKeyPcrs", skip_serializing_if = "Vec::is_empty")]
    pub tpm_pub_key_pcrs: Vec<u8>,
}

/// How a volume is encrypted: Talos's `EncryptionSpec`, carried from the documents into the
/// `VolumeConfig`; the volume manager opens (or first formats) the LUKS2 layer with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EncryptionSpec {
    pub provider: EncryptionProvider,
    pub keys: Vec<EncryptionKey>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cipher: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub key_size: u32,
    #[serde(skip_serializing_if = "is_zero64")]
    pub block_size: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub perf_options: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_discards: bool,
}

pub(crate) fn is_zero(v: &u32) -> bool {
    *v == 0
}
pub(crate) fn is_zero64(v: &u64) -> bool {
    *v == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_as_talos_prints_them() {
        for (bytes, want) in [
            (0, "0 B"),
            (512, "512 B"),
            (1_048_576, "1.0 MB"),
            (104_857_600, "105 MB"),
            (2_147_483_648, "2.1 GB"),
            (6_442_450_944, "6.4 GB"),
            (10_737_418_240, "11 GB"),
        ] {
            assert_eq!(pretty_size(bytes), want, "{bytes}");
        }
    }
}

//! Block resources, under Talos's names and fields (`<Plural>.block.talos.dev`, namespace
//! `runtime`): the devices the kernel has (`BlockDevice`), the disks among them (`Disk`), what
//! a probe found on each (`DiscoveredVolume`), which disk holds the OS (`SystemDisk`), the
//! volumes the node wants (`VolumeConfig`) and how far each got (`VolumeStatus`), who wants
//! each mounted (`VolumeMountRequest`, merged into one `MountRequest` per ready volume), and
//! the mounts made of them (`MountStatus`). Plain data: nothing here reads a device.
//!
//! Beyond Talos, a `VolumeStatus` says for every disk why it was or was not picked for the
//! volume and what size the volume would get there (`diskMatches`), so a selector or a size
//! that surprises can be read back instead of guessed at.

use serde::{Deserialize, Serialize};

use crate::cosi::{PrintColumn, Registry, RegistryError, ResourceDefinition, ResourceSpec, Sensitivity};

pub use super::runtime::NAMESPACE;

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

macro_rules! definition {
    ($t:ty, $name:literal, [$($col:literal => $path:literal),* $(,)?]) => {
        definition!($t, $name, NonSensitive, [$($col => $path),*]);
    };
    ($t:ty, $name:literal, $sensitivity:ident, [$($col:literal => $path:literal),* $(,)?]) => {
        impl ResourceSpec for $t {
            const DEFINITION: ResourceDefinition = ResourceDefinition {
                type_name: $name,
                aliases: &[],
                default_namespace: NAMESPACE,
                print_columns: &[$(PrintColumn { name: $col, json_path: $path }),*],
                sensitivity: Sensitivity::$sensitivity,
            };
        }
    };
}

/// Labels on a `VolumeConfig` (and the `VolumeStatus` and `VolumeMountRequest` made for it)
/// saying what made it, as Talos sets them: the node's own volumes, or a document's kind.
pub const SYSTEM_VOLUME_LABEL: &str = "talos.dev/system-volume";
pub const USER_VOLUME_LABEL: &str = "talos.dev/user-volume";
pub const RAW_VOLUME_LABEL: &str = "talos.dev/raw-volume";
pub const EXISTING_VOLUME_LABEL: &str = "talos.dev/existing-volume";
pub const EXTERNAL_VOLUME_LABEL: &str = "talos.dev/external-volume";
pub const SWAP_VOLUME_LABEL: &str = "talos.dev/swap-volume";
/// The label of the volumes v1alpha1's `machine.disks` asks for.
pub const USER_DISK_LABEL: &str = "talos.dev/user-disk";

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

definition!(BlockDevice, "BlockDevices.block.talos.dev", [
    "Type" => "{.type}",
    "PartitionName" => "{.partitionName}",
    "Generation" => "{.generation}",
]);

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

definition!(Disk, "Disks.block.talos.dev", [
    "Size" => "{.pretty_size}",
    "Read Only" => "{.readonly}",
    "Transport" => "{.transport}",
    "Rotational" => "{.rotational}",
    "WWID" => "{.wwid}",
    "Model" => "{.model}",
    "Serial" => "{.serial}",
]);

/// What a probe found on a block device: Talos's `DiscoveredVolume`, id the kernel name.
/// Locators see these fields as `volume.*` under their protobuf (snake_case) names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiscoveredVolume {
    pub dev_path: String,
    /// `disk` or `partition`.
    #[serde(rename = "type")]
    pub kind: String,
    pub device_path: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parent: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parent_dev_path: String,
    pub size: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub sector_size: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub io_size: u32,
    /// The signature found (`xfs`, `vfat`, `gpt`, `luks`, …); empty: nothing recognized.
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub block_size: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub filesystem_block_size: u32,
    #[serde(skip_serializing_if = "is_zero64")]
    pub probed_size: u64,
    #[serde(rename = "partitionUUID", skip_serializing_if = "String::is_empty")]
    pub partition_uuid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub partition_type: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub partition_label: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub partition_index: u32,
}

definition!(DiscoveredVolume, "DiscoveredVolumes.block.talos.dev", [
    "Type" => "{.type}",
    "Size" => "{.size}",
    "Discovered" => "{.name}",
    "Label" => "{.label}",
    "PartitionLabel" => "{.partitionLabel}",
]);

impl DiscoveredVolume {
    /// The variables a locator sees as `volume`: Talos's protobuf field names.
    pub fn cel_view(&self) -> serde_json::Value {
        serde_json::json!({
            "dev_path": self.dev_path,
            "type": self.kind,
            "device_path": self.device_path,
            "parent": self.parent,
            "parent_dev_path": self.parent_dev_path,
            "size": self.size,
            "sector_size": self.sector_size,
            "io_size": self.io_size,
            "name": self.name,
            "uuid": self.uuid,
            "label": self.label,
            "block_size": self.block_size,
            "filesystem_block_size": self.filesystem_block_size,
            "probed_size": self.probed_size,
            "partition_uuid": self.partition_uuid,
            "partition_type": self.partition_type,
            "partition_label": self.partition_label,
            "partition_index": self.partition_index,
        })
    }
}

/// A request to probe every device again (Talos's `DiscoveryRefreshRequest`, id `refresh`),
/// and the last request the discovery finished (`DiscoveryRefreshStatus`, same id).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiscoveryRefreshRequest {
    pub request: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiscoveryRefreshStatus {
    pub request: u64,
}

pub const REFRESH_ID: &str = "refresh";

/// Whether the volumes of v1alpha1's `machine.disks` are published: `ready` once a
/// configuration is in force (Talos's meaning). `tornDown` is Talos's field for a reset that
/// took them down; nothing sets it here yet. One, id [`USER_DISK_CONFIG_STATUS_ID`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UserDiskConfigStatus {
    pub ready: bool,
    pub torn_down: bool,
}

pub const USER_DISK_CONFIG_STATUS_ID: &str = "user-disks";

definition!(UserDiskConfigStatus, "UserDiskConfigStatuses.block.talos.dev", [
    "Ready" => "{.ready}",
    "Torn Down" => "{.tornDown}",
]);

/// Beyond Talos (#2213): a `DiskWipeConfig` document as the volume manager takes it, id the
/// document's name: every disk `disk_selector` (CEL over the Disk, as a volume's) matches is
/// wiped once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiskWipeConfig {
    pub disk_selector: String,
}

definition!(DiskWipeConfig, "DiskWipeConfigs.block.talos.dev", ["Selector" => "{.diskSelector}"]);

/// What became of each disk a `DiskWipeConfig` selects, id the document's name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiskWipeStatus {
    pub disks: Vec<DiskWipeOutcome>,
}

/// One selected disk: what it is known by across boots, and what was done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiskWipeOutcome {
    pub dev_path: String,
    /// `wwid:<WWID>` or `serial:<serial>`; empty when the disk has neither.
    pub identity: String,
    /// `wiped`, `wiped before` (its record is in META), or why it is not wiped.
    pub outcome: String,
}

definition!(DiskWipeStatus, "DiskWipeStatuses.block.talos.dev", []);

definition!(DiscoveryRefreshRequest, "DiscoveryRefreshRequests.block.talos.dev", ["Request" => "{.request}"]);
definition!(DiscoveryRefreshStatus, "DiscoveryRefreshStatuses.block.talos.dev", ["Request" => "{.request}"]);

/// The disk the OS booted from (the one holding META): Talos's `SystemDisk`, id `system-disk`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SystemDisk {
    #[serde(rename = "diskID")]
    pub disk_id: String,
    pub dev_path: String,
}

impl SystemDisk {
    pub const ID: &'static str = "system-disk";
}

definition!(SystemDisk, "SystemDisks.block.talos.dev", ["Disk" => "{.diskID}"]);

/// Talos's `VolumeType`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    #[default]
    Partition,
    Disk,
    Tmpfs,
    Directory,
    Symlink,
    Overlay,
    External,
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

/// Talos's `VolumePhase`, in its order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumePhase {
    #[default]
    Waiting,
    Failed,
    Missing,
    Located,
    Provisioned,
    Prepared,
    Ready,
    Closed,
}

impl std::fmt::Display for VolumePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            VolumePhase::Waiting => "waiting",
            VolumePhase::Failed => "failed",
            VolumePhase::Missing => "missing",
            VolumePhase::Located => "located",
            VolumePhase::Provisioned => "provisioned",
            VolumePhase::Prepared => "prepared",
            VolumePhase::Ready => "ready",
            VolumePhase::Closed => "closed",
        };
        f.write_str(s)
    }
}

/// Waves: a wave starts only when every volume of the earlier ones is ready.
pub const WAVE_SYSTEM_DISK: i64 = -1;
pub const WAVE_USER_VOLUMES: i64 = 0;
pub const WAVE_LEGACY_USER_DISKS: i64 = 1_000_000;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiskSelector {
    /// CEL over `disk` and `system_disk`.
    #[serde(rename = "match", skip_serializing_if = "String::is_empty")]
    pub expression: String,
    /// What an external volume mounts (a virtiofs tag), in place of a disk.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub external: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PartitionSpec {
    pub min_size: u64,
    /// 0: no limit.
    #[serde(skip_serializing_if = "is_zero64")]
    pub max_size: u64,
    /// Percent of the disk's free space (overrides `maxSize`).
    #[serde(skip_serializing_if = "is_zero64")]
    pub relative_max_size: u64,
    /// The maximum is what to leave free, not what to take.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub negative_max_size: bool,
    pub grow: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label: String,
    #[serde(rename = "typeUUID", skip_serializing_if = "String::is_empty")]
    pub type_uuid: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FilesystemSpec {
    #[serde(rename = "type")]
    pub kind: FilesystemType,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProvisioningSpec {
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub wave: i64,
    pub disk_selector: DiskSelector,
    pub partition_spec: PartitionSpec,
    pub filesystem_spec: FilesystemSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocatorSpec {
    /// CEL over `volume` (and the `disk` it is on).
    #[serde(rename = "match", skip_serializing_if = "String::is_empty")]
    pub expression: String,
    /// CEL over `disk`: the one disk a whole-disk volume is (`volumeType: disk`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub disk_match: String,
}

impl LocatorSpec {
    pub fn is_empty(&self) -> bool {
        self.expression.is_empty() && self.disk_match.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MountSpec {
    /// Where the volume is mounted: an absolute path, or with a parent a path under the
    /// parent's mount (`data` under `/var/mnt`).
    pub target_path: String,
    /// The volume whose mount this one goes under (its `MountStatus` id): the mount waits for
    /// it, and is taken down before it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parent_id: String,
    /// Octal permissions of the mount point once mounted (0: leave as the filesystem has it).
    #[serde(skip_serializing_if = "is_zero")]
    pub file_mode: u32,
    /// A directory volume is also bind-mounted onto this path under the parent's mount (its
    /// own, for a user directory), so the mount flags apply to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_target: Option<String>,
    /// xfs project quotas (`prjquota`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub project_quota_support: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub secure: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_exec: bool,
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

/// A volume the node wants: Talos's `VolumeConfig`, id the volume's name (`STATE`, `u-data`).
/// Sensitive, as in Talos: the encryption keys may hold a passphrase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VolumeConfig {
    #[serde(rename = "parentId", skip_serializing_if = "String::is_empty")]
    pub parent_id: String,
    #[serde(rename = "type")]
    pub kind: VolumeType,
    pub provisioning: ProvisioningSpec,
    #[serde(skip_serializing_if = "is_no_encryption_spec")]
    pub encryption: EncryptionSpec,
    pub locator: LocatorSpec,
    pub mount: MountSpec,
}

impl ProvisioningSpec {
    /// Whether the volume is made by the node at all (Talos: a non-zero provisioning spec);
    /// a volume that is not only waits to be found and never holds back a wave.
    pub fn is_requested(&self) -> bool {
        *self != ProvisioningSpec::default()
    }
}

definition!(VolumeConfig, "VolumeConfigs.block.talos.dev", Sensitive, []);

/// A wish to have a volume mounted: Talos's `VolumeMountRequest`, id the requester's choice
/// (the volume's id for the volume documents). Several requests for one volume merge into
/// one `MountRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VolumeMountRequest {
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    pub requester: String,
    pub read_only: bool,
    pub detached: bool,
    pub disable_access_time: bool,
    pub secure: bool,
    pub no_exec: bool,
}

definition!(VolumeMountRequest, "VolumeMountRequests.block.talos.dev", [
    "Volume" => "{.volumeID}",
    "Requester" => "{.requester}",
]);

/// A mount carried out, seen by one requester: Talos's `VolumeMountStatus`, id that of the
/// requester's `VolumeMountRequest`. A requester that uses the mount holds it with a
/// finalizer; the mount is taken down only once every one of them has let go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VolumeMountStatus {
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    pub requester: String,
    pub target: String,
    pub read_only: bool,
    pub detached: bool,
    pub disable_access_time: bool,
    pub secure: bool,
    pub no_exec: bool,
}

definition!(VolumeMountStatus, "VolumeMountStatuses.block.talos.dev", [
    "Volume ID" => "{.volumeID}",
    "Requester" => "{.requester}",
    "Target" => "{.target}",
]);

/// Talos's `VolumeLifecycle` (id [`VolumeLifecycle::ID`]): while it stands, the volume
/// manager keeps volumes open; machined tears it down at shutdown, and the manager then
/// closes every volume (unmounted first, LUKS2 mappings closed, phase `closed`) before it
/// lets it go. META is never closed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeLifecycle {}

impl VolumeLifecycle {
    pub const ID: &'static str = "volumes";
}

definition!(VolumeLifecycle, "VolumeLifecycles.block.talos.dev", []);

/// What a ready volume is to be mounted with: Talos's `MountRequest`, id the volume's; the
/// merge of its `VolumeMountRequest`s, with the parent mount it goes under.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MountRequest {
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    #[serde(rename = "parentMountID", skip_serializing_if = "String::is_empty")]
    pub parent_mount_id: String,
    pub requesters: Vec<String>,
    #[serde(rename = "requesterIDs")]
    pub requester_ids: Vec<String>,
    pub read_only: bool,
    pub detached: bool,
    pub disable_access_time: bool,
    pub secure: bool,
    pub no_exec: bool,
}

definition!(MountRequest, "MountRequests.block.talos.dev", [
    "Volume" => "{.volumeID}",
    "Parent" => "{.parentMountID}",
    "Requesters" => "{.requesters}",
]);

/// Why a disk was or was not picked for a volume, and the size it would get there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiskMatch {
    pub disk: String,
    pub matched: bool,
    pub reason: String,
    #[serde(skip_serializing_if = "is_zero64")]
    pub size: u64,
}

/// How far a volume got: Talos's `VolumeStatus`, id the volume's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VolumeStatus {
    pub phase: VolumePhase,
    #[serde(skip_serializing_if = "is_waiting")]
    pub pre_fail_phase: VolumePhase,
    #[serde(rename = "type")]
    pub kind: VolumeType,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub location: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mount_location: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub partition_index: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parent_location: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    #[serde(rename = "partitionUUID", skip_serializing_if = "String::is_empty")]
    pub partition_uuid: String,
    #[serde(skip_serializing_if = "is_zero64")]
    pub size: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pretty_size: String,
    #[serde(skip_serializing_if = "is_none_fs")]
    pub filesystem: FilesystemType,
    #[serde(skip_serializing_if = "is_no_encryption")]
    pub encryption_provider: EncryptionProvider,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub encryption_failed_syncs: Vec<String>,
    #[serde(skip_serializing_if = "is_default_mount")]
    pub mount_spec: MountSpec,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error_message: String,
    /// Beyond Talos: every disk considered for provisioning, and what was decided.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disk_matches: Vec<DiskMatch>,
}

definition!(VolumeStatus, "VolumeStatuses.block.talos.dev", [
    "Type" => "{.type}",
    "Phase" => "{.phase}",
    "Location" => "{.location}",
    "Size" => "{.prettySize}",
]);

/// A mount the node made: Talos's `MountStatus`, id the volume's (and its `MountRequest`'s).
/// A swap area enabled is one too, at `/` as in Talos.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MountStatus {
    /// The request it carries out.
    pub spec: MountRequest,
    pub source: String,
    pub target: String,
    pub filesystem: FilesystemType,
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    pub read_only: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub project_quota_support: bool,
}

definition!(MountStatus, "MountStatuses.block.talos.dev", [
    "Source" => "{.source}",
    "Target" => "{.target}",
    "Filesystem" => "{.filesystem}",
    "Volume" => "{.volumeID}",
]);

fn is_zero(v: &u32) -> bool {
    *v == 0
}
fn is_zero64(v: &u64) -> bool {
    *v == 0
}
fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}
fn is_waiting(p: &VolumePhase) -> bool {
    *p == VolumePhase::Waiting
}
fn is_none_fs(f: &FilesystemType) -> bool {
    *f == FilesystemType::None
}
fn is_no_encryption(e: &EncryptionProvider) -> bool {
    *e == EncryptionProvider::None
}
fn is_default_mount(m: &MountSpec) -> bool {
    *m == MountSpec::default()
}
fn is_no_encryption_spec(e: &EncryptionSpec) -> bool {
    *e == EncryptionSpec::default()
}

pub fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register::<BlockDevice>()?;
    registry.register::<Disk>()?;
    registry.register::<DiscoveredVolume>()?;
    registry.register::<DiscoveryRefreshRequest>()?;
    registry.register::<DiscoveryRefreshStatus>()?;
    registry.register::<SystemDisk>()?;
    registry.register::<VolumeConfig>()?;
    registry.register::<VolumeStatus>()?;
    registry.register::<VolumeMountRequest>()?;
    registry.register::<MountRequest>()?;
    registry.register::<MountStatus>()?;
    registry.register::<UserDiskConfigStatus>()?;
    registry.register::<VolumeMountStatus>()?;
    registry.register::<VolumeLifecycle>()?;
    registry.register::<DiskWipeConfig>()?;
    registry.register::<DiskWipeStatus>()?;
    Ok(())
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

    #[test]
    fn phases_keep_talos_order_and_names() {
        use VolumePhase::*;
        let all = [Waiting, Failed, Missing, Located, Provisioned, Prepared, Ready, Closed];
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        for p in all {
            assert_eq!(serde_json::to_value(p).unwrap(), serde_json::json!(p.to_string()));
        }
    }

    #[test]
    fn types_answer_to_talos_names() {
        let mut registry = Registry::new();
        super::super::runtime::register(&mut registry).unwrap();
        register(&mut registry).unwrap();
        for (alias, want) in [
            ("disks", Disk::DEFINITION.type_name),
            ("discoveredvolumes", DiscoveredVolume::DEFINITION.type_name),
            ("volumestatuses", VolumeStatus::DEFINITION.type_name),
            ("volumeconfigs", VolumeConfig::DEFINITION.type_name),
            ("systemdisks", SystemDisk::DEFINITION.type_name),
            ("blockdevices", BlockDevice::DEFINITION.type_name),
        ] {
            assert_eq!(registry.resolve(alias).map(|t| t.type_name()), Ok(want), "{alias}");
        }
    }
}

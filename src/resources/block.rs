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
pub use crate::block::types::{
    BlockDevice, Disk, EncryptionKey, EncryptionKeyType, EncryptionProvider, EncryptionSpec, FilesystemType,
    pretty_size,
};
use crate::block::types::{is_zero, is_zero64};

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

definition!(BlockDevice, "BlockDevices.block.talos.dev", [
    "Type" => "{.type}",
    "PartitionName" => "{.partitionName}",
    "Generation" => "{.generation}",
]);

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

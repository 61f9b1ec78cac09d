//! `VolumeConfigController`: the volumes a node always wants, as Talos makes them —
//! META (located only: the installer or the imager made it; 1 MiB, no filesystem), STATE
//! (100 MiB, xfs, at `/system/state`, 0700, nosuid nodev noexec) and EPHEMERAL (at least
//! 2 GiB, grown into the rest of the system disk, xfs, at `/var`), all in the system disk's
//! wave. Pure: it writes `VolumeConfig`s and touches nothing.

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::block::{
    DiskSelector, FilesystemSpec, FilesystemType, LocatorSpec, MountSpec, NAMESPACE, PartitionSpec, ProvisioningSpec,
    VolumeConfig, VolumeType, WAVE_SYSTEM_DISK,
};

pub const STATE: &str = "STATE";
pub const EPHEMERAL: &str = "EPHEMERAL";
pub const META: &str = super::system_disk::META_VOLUME;
/// Talos's "Linux filesystem data" partition type.
pub const LINUX_DATA: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The system volumes, by id.
pub fn system_volumes() -> Vec<(&'static str, VolumeConfig)> {
    let on_system_disk = |label: &str, partition: PartitionSpec, target: &str, mode: u32| VolumeConfig {
        kind: VolumeType::Partition,
        provisioning: ProvisioningSpec {
            wave: WAVE_SYSTEM_DISK,
            disk_selector: DiskSelector { expression: "system_disk".to_string() },
            partition_spec: PartitionSpec { label: label.to_string(), type_uuid: LINUX_DATA.to_string(), ..partition },
            filesystem_spec: FilesystemSpec { kind: FilesystemType::Xfs, label: label.to_string() },
        },
        locator: LocatorSpec { expression: format!("volume.partition_label == \"{label}\"") },
        mount: MountSpec { target_path: target.to_string(), file_mode: mode, secure: true, no_exec: label == STATE },
        ..VolumeConfig::default()
    };
    vec![
        (
            META,
            VolumeConfig {
                kind: VolumeType::Partition,
                provisioning: ProvisioningSpec { wave: WAVE_SYSTEM_DISK, ..ProvisioningSpec::default() },
                locator: LocatorSpec {
                    expression: format!(
                        "volume.partition_label == \"{META}\" && volume.name in [\"\", \"talosmeta\"] && volume.size == 1048576u"
                    ),
                },
                ..VolumeConfig::default()
            },
        ),
        (
            STATE,
            on_system_disk(
                STATE,
                PartitionSpec { min_size: 100 * MIB, max_size: 100 * MIB, ..PartitionSpec::default() },
                "/system/state",
                0o700,
            ),
        ),
        (
            EPHEMERAL,
            on_system_disk(
                EPHEMERAL,
                PartitionSpec { min_size: 2 * GIB, grow: true, ..PartitionSpec::default() },
                "/var",
                0o755,
            ),
        ),
    ]
}

#[derive(Default)]
pub struct VolumeConfigController;

#[async_trait::async_trait]
impl Controller for VolumeConfigController {
    fn name(&self) -> String {
        "VolumeConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<VolumeConfig>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        ctx.start_tracking_outputs();
        for (id, config) in system_volumes() {
            ctx.apply(NAMESPACE, id, config)?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

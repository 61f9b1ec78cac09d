//! Growing partitions (Talos's `internal/volumes/grow.go`): a located partition that is to
//! grow takes the free space after it on its disk (up to its maximum size), the backup table
//! moved to the disk's end first. A partition only ever grows here; it is never moved or
//! shrunk, and a volume that is not a partition of a known disk is left as it is.

use std::path::{Path, PathBuf};

use super::partition::table_of;
use super::step::advance;
use super::{StepError, VolumeManagerController, lock_disk};
use crate::cosi::Context;
use crate::resources::block::{PartitionSpec, VolumeConfig, VolumePhase, VolumeStatus, pretty_size};

/// Whether the located volume is one to grow: its spec asks, and it is a partition of a disk
/// the node knows.
fn grows(spec: &PartitionSpec, status: &VolumeStatus) -> bool {
    spec.grow && status.partition_index != 0 && !status.parent_location.is_empty()
}

impl VolumeManagerController {
    pub(super) async fn grow(
        &mut self,
        ctx: &Context,
        config: &VolumeConfig,
        status: &VolumeStatus,
    ) -> Result<VolumeStatus, StepError> {
        let spec = &config.provisioning.partition_spec;
        if !grows(spec, status) {
            return Ok(advance(status, VolumePhase::Provisioned));
        }
        let (disk, index, max) = (PathBuf::from(&status.parent_location), status.partition_index, spec.max_size);
        let grown = ctx
            .blocking("growing a partition", move || grow_partition(&disk, index, max))
            .await?
            .map_err(|e| StepError::failed(format!("growing {}: {e}", status.location)))?;
        let mut next = advance(status, VolumePhase::Provisioned);
        if let Some(size) = grown {
            crate::kernel::console::line(&format!("volume: grew {} to {}", status.location, pretty_size(size)));
            next.size = size;
            next.pretty_size = pretty_size(size);
            self.refresh += 1;
        }
        Ok(next)
    }
}

/// Grows partition `index` into the free space after it (up to `max`), moving the backup
/// table to the disk's end first; the new size, or `None` when it did not grow.
fn grow_partition(disk: &Path, index: u32, max: u64) -> Result<Option<u64>, String> {
    let dev = lock_disk(disk)?;
    let mut table = table_of(&dev)?;
    let Some(grown) = table.grow_partition(index, max).map_err(|e| e.to_string())? else { return Ok(None) };
    table.write(dev.file()).map_err(|e| e.to_string())?;
    dev.resize_partition(grown.number, grown.offset, grown.size).map_err(|e| e.to_string())?;
    Ok(Some(grown.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_growing_partition_of_a_known_disk_grows() {
        let spec = |grow| PartitionSpec { grow, ..PartitionSpec::default() };
        let at = |index, parent: &str| VolumeStatus {
            partition_index: index,
            parent_location: parent.into(),
            ..VolumeStatus::default()
        };
        let cases = [
            ("EPHEMERAL grows", spec(true), at(6, "/dev/vda"), true),
            ("STATE keeps its size", spec(false), at(5, "/dev/vda"), false),
            ("a whole disk has no partition to grow", spec(true), at(0, ""), false),
            ("a partition of no disk known", spec(true), at(2, ""), false),
        ];
        for (name, s, status, want) in cases {
            assert_eq!(grows(&s, &status), want, "{name}");
        }
    }
}

//! Provisioning partitions (Talos's `internal/volumes/partition.go`): a volume not found is
//! carved into the first disk its selector picks with room for it ([`volumes::select_disk`]),
//! added to the disk's GPT, and announced to the kernel. A partition is only ever added here,
//! never moved or removed, and one of the same label already on the disk is never made twice.

use std::path::Path;

use super::super::volumes::{self, DiskCandidate, FreeSpace};
use super::{StepError, VolumeManagerController, World, lock_disk};
use crate::block::selector::Vars;
use crate::block::{gpt, probe};
use crate::cosi::Context;
use crate::kernel::blockdev::BlockDevice as KernelDisk;
use crate::resources::block::{VolumeConfig, VolumePhase, VolumeStatus, pretty_size};

/// The kernel name of partition `index` of disk `disk` (`vda5`, `nvme0n1p5`, `loop0p2`).
pub fn partition_name(disk: &str, index: u32) -> String {
    if disk.ends_with(|c: char| c.is_ascii_digit()) { format!("{disk}p{index}") } else { format!("{disk}{index}") }
}

/// Why a volume not found cannot be provisioned at all: it has no disk selector, or no size
/// (no minimum, and it does not grow).
fn cannot_provision(config: &VolumeConfig) -> Option<&'static str> {
    let spec = &config.provisioning.partition_spec;
    (config.provisioning.disk_selector.expression.is_empty() || (spec.min_size == 0 && !spec.grow))
        .then_some("no volume matches the locator, and the volume has no disk selector or size to be provisioned with")
}

impl VolumeManagerController {
    /// Makes the volume's partition on the disk its selector picks, or says why none.
    pub(super) async fn provision(
        &mut self,
        ctx: &Context,
        id: &str,
        config: &VolumeConfig,
        status: &VolumeStatus,
        world: &mut World,
    ) -> Result<VolumeStatus, StepError> {
        if let Some(why) = cannot_provision(config) {
            return Ok(VolumeStatus { error_message: why.into(), ..volumes::advance(status, VolumePhase::Missing) });
        }
        let spec = &config.provisioning.partition_spec;
        let selector = self.expression(&config.provisioning.disk_selector.expression, true).map_err(|e| {
            StepError::failed(format!("disk selector {:?}: {e}", config.provisioning.disk_selector.expression))
        })?;
        // What each disk has free, read from its partition table now.
        let names: Vec<String> = world.disks.iter().map(|(n, _)| n.clone()).collect();
        let dev = self.dev.clone();
        let free: Vec<Result<FreeSpace, String>> = ctx
            .blocking("reading partition tables", move || names.iter().map(|n| disk_free_space(&dev.join(n))).collect())
            .await?;
        let candidates: Vec<DiskCandidate<'_>> = world
            .disks
            .iter()
            .zip(free)
            .map(|((name, disk), free)| DiskCandidate {
                id: name,
                disk,
                system_disk: world.system_disk.as_deref() == Some(name.as_str()),
                free,
            })
            .collect();
        let selection = volumes::select_disk(spec, &candidates, |c| {
            Vars::new().with_disk(c.disk).and_then(|vars| selector.matches(&vars.with_system_disk(c.system_disk)))
        });
        let Some((disk, size)) = selection.chosen.clone() else {
            return Ok(VolumeStatus {
                error_message: "no disk matches the selector with room for the volume (see diskMatches)".into(),
                disk_matches: selection.matches,
                ..volumes::advance(status, VolumePhase::Waiting)
            });
        };
        let disk_path = self.dev.join(&disk);
        let (label, type_uuid) = (spec.label.clone(), spec.type_uuid.clone());
        let volume = id.to_string();
        let placed = ctx
            .blocking("adding a partition", move || add_partition(&disk_path, &volume, &label, &type_uuid, size))
            .await?
            .map_err(|e| StepError::failed(format!("provisioning on {disk}: {e}")))?;
        crate::kernel::console::line(&format!(
            "volume {id}: made partition {} of {disk} ({})",
            placed.number,
            pretty_size(placed.size)
        ));
        self.refresh += 1;
        world.discovery_settled = false;
        let name = partition_name(&disk, placed.number);
        Ok(VolumeStatus {
            location: self.dev.join(&name).display().to_string(),
            parent_location: self.dev.join(&disk).display().to_string(),
            partition_index: placed.number,
            partition_uuid: placed.partition.guid.to_string(),
            size: placed.size,
            pretty_size: pretty_size(placed.size),
            disk_matches: selection.matches,
            ..volumes::advance(status, VolumePhase::Located)
        })
    }
}

/// The disk's partition table as it is to be written: read (following a disk that grew), or
/// a new one on a disk that carries nothing at all.
pub(super) fn table_of(dev: &KernelDisk) -> Result<gpt::Table, String> {
    let size = dev.size_bytes().map_err(|e| e.to_string())?;
    let sector = dev.logical_sector_size().map_err(|e| e.to_string())?;
    let mut table = match gpt::Table::read_with_sector_size(dev.file(), size, sector).map_err(|e| e.to_string())? {
        Some(t) => t,
        None => match probe::probe(dev.file(), probe::Region::whole(size, sector as u32)).map_err(|e| e.to_string())? {
            None => {
                let seed = format!("{}:{size}:{:?}", dev.path().display(), std::time::SystemTime::now());
                gpt::Table::new_with_sector_size(gpt::Guid::derived(seed.as_bytes()), size, sector)
                    .map_err(|e| e.to_string())?
            }
            Some(found) => return Err(format!("it holds {}, not a partition table", found.name())),
        },
    };
    table.relocate_backup(size).map_err(|e| e.to_string())?;
    Ok(table)
}

/// What a disk has free for a new partition, or why it cannot get one.
fn disk_free_space(disk: &Path) -> Result<FreeSpace, String> {
    let dev = KernelDisk::open(disk).map_err(|e| e.to_string())?;
    let table = table_of(&dev)?;
    let ss = table.sector_size();
    let total = table.allocatable().iter().map(|e| e.sectors() * ss).sum();
    Ok(FreeSpace { largest: table.largest_allocatable(), total })
}

/// Adds the partition, writes the table, and tells the kernel. A partition of the same label
/// already on the disk is never made twice: the volume waits for discovery to see it. (An
/// unlabelled one, a `machine.disks` partition, is found again by its index instead.)
fn add_partition(disk: &Path, volume: &str, label: &str, type_uuid: &str, size: u64) -> Result<gpt::Placed, String> {
    let dev = lock_disk(disk)?;
    let mut table = table_of(&dev)?;
    if let Some(existing) = table.partitions().into_iter().find(|p| !label.is_empty() && p.partition.name == label) {
        return Err(format!(
            "partition {} is labelled {label} already; waiting for discovery to see it",
            existing.number
        ));
    }
    let type_guid = gpt::Guid::parse(type_uuid).map_err(|e| e.to_string())?;
    let seed = format!("{}:{volume}:{label}:{:?}", table.disk_guid(), std::time::SystemTime::now());
    let placed = table
        .add_partition(label, type_guid, gpt::Guid::derived(seed.as_bytes()), size, size, false)
        .map_err(|e| e.to_string())?;
    table.write(dev.file()).map_err(|e| e.to_string())?;
    dev.add_partition(placed.number, placed.offset, placed.size).map_err(|e| e.to_string())?;
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_follow_the_kernel() {
        assert_eq!(partition_name("vda", 5), "vda5");
        assert_eq!(partition_name("sdb", 1), "sdb1");
        assert_eq!(partition_name("nvme0n1", 5), "nvme0n1p5");
        assert_eq!(partition_name("loop3", 2), "loop3p2");
        assert_eq!(partition_name("mmcblk0", 1), "mmcblk0p1");
    }

    #[test]
    fn a_volume_needs_a_selector_and_a_size_to_be_provisioned() {
        let config = |selector: &str, min: u64, grow: bool| {
            let mut c = VolumeConfig::default();
            c.provisioning.disk_selector.expression = selector.into();
            c.provisioning.partition_spec.min_size = min;
            c.provisioning.partition_spec.grow = grow;
            c
        };
        let cases = [
            ("a selector and a minimum", config("system_disk", 100 << 20, false), true),
            ("a selector and grow", config("system_disk", 0, true), true),
            ("no selector", config("", 100 << 20, true), false),
            ("no size", config("system_disk", 0, false), false),
        ];
        for (name, c, want) in cases {
            assert_eq!(cannot_provision(&c).is_none(), want, "{name}");
        }
    }
}

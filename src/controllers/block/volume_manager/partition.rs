//! Provisioning partitions (Talos's `internal/volumes/partition.go`): a volume not found is
//! carved into the first disk its selector picks with room for it ([`select_disk`]),
//! added to the disk's GPT, and announced to the kernel. A partition is only ever added here,
//! never moved or removed, and one of the same label already on the disk is never made twice.

use std::path::Path;

use super::step::advance;
use super::{StepError, VolumeManagerController, World, lock_disk};
use crate::block::selector::Vars;
use crate::block::{gpt, probe};
use crate::cosi::Context;
use crate::kernel::blockdev::BlockDevice as KernelDisk;
use crate::resources::block::{Disk, DiskMatch, PartitionSpec, VolumeConfig, VolumePhase, VolumeStatus, pretty_size};

/// The kernel name of partition `index` of disk `disk` (`vda5`, `nvme0n1p5`, `loop0p2`).
pub fn partition_name(disk: &str, index: u32) -> String {
    if disk.ends_with(|c: char| c.is_ascii_digit()) { format!("{disk}p{index}") } else { format!("{disk}{index}") }
}

/// Free space on a disk, as the partition table tells it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct FreeSpace {
    /// The largest contiguous aligned free region, bytes.
    largest: u64,
    /// All free space on the disk, bytes (what a relative size is a percentage of).
    total: u64,
}

/// A disk as the selector sees it, with what provisioning needs to know of it.
#[derive(Debug, Clone)]
struct DiskCandidate<'a> {
    id: &'a str,
    disk: &'a Disk,
    system_disk: bool,
    /// `Err`: the disk has no partition table we can add to (it carries a filesystem, or a
    /// table we cannot read) — the reason says which.
    free: Result<FreeSpace, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum SizeError {
    #[error("{free} bytes free, less than the minimum size {min}")]
    TooSmall { free: u64, min: u64 },
    #[error("the maximum size leaves nothing: {max} bytes to keep free of {free}")]
    Negative { max: u64, free: u64 },
}

/// The size a partition gets in a free region (Talos's `ResolveMaxSize` and its sizing): the
/// minimum, or with `grow` all of the region up to the maximum; never less than the minimum.
fn partition_size(spec: &PartitionSpec, free: FreeSpace) -> Result<u64, SizeError> {
    let max = if spec.relative_max_size != 0 {
        free.total.saturating_mul(spec.relative_max_size) / 100
    } else {
        spec.max_size
    };
    let max = if spec.negative_max_size {
        if max > free.total {
            return Err(SizeError::Negative { max, free: free.total });
        }
        free.total - max
    } else {
        max
    };
    let size = if spec.grow { if max == 0 { free.largest } else { max.min(free.largest) } } else { spec.min_size };
    if size < spec.min_size || size > free.largest || size == 0 {
        return Err(SizeError::TooSmall { free: free.largest, min: spec.min_size.max(1) });
    }
    Ok(size)
}

/// Where a volume is to be provisioned, or why nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Selection {
    /// The chosen disk and the size, if any disk fits.
    chosen: Option<(String, u64)>,
    /// Every disk considered, in order, with the decision.
    matches: Vec<DiskMatch>,
}

/// Picks the first disk (in id order) the selector matches, that is writable and has room.
/// Every disk gets a line saying why it was or was not picked.
fn select_disk<E: std::fmt::Display>(
    spec: &PartitionSpec,
    candidates: &[DiskCandidate<'_>],
    mut matches: impl FnMut(&DiskCandidate<'_>) -> Result<bool, E>,
) -> Selection {
    let mut sorted: Vec<&DiskCandidate<'_>> = candidates.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(b.id));
    let mut chosen = None;
    let mut lines = Vec::new();
    for c in sorted {
        let mut line = DiskMatch { disk: c.id.to_string(), ..DiskMatch::default() };
        match matches(c) {
            Err(e) => line.reason = format!("selector error: {e}"),
            Ok(false) => line.reason = "selector does not match".to_string(),
            Ok(true) if c.disk.readonly => line.reason = "selector matches, but the disk is read-only".to_string(),
            Ok(true) if c.disk.cdrom => line.reason = "selector matches, but the disk is a CD-ROM".to_string(),
            Ok(true) => match &c.free {
                Err(why) => line.reason = format!("selector matches, but {why}"),
                Ok(free) => match partition_size(spec, *free) {
                    Err(e) => line.reason = format!("selector matches, but {e}"),
                    Ok(size) if chosen.is_some() => {
                        line.size = size;
                        line.reason = "selector matches; an earlier disk was picked".to_string();
                    }
                    Ok(size) => {
                        line.matched = true;
                        line.size = size;
                        line.reason = "selector matches and the volume fits".to_string();
                        chosen = Some((c.id.to_string(), size));
                    }
                },
            },
        }
        lines.push(line);
    }
    Selection { chosen, matches: lines }
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
            return Ok(VolumeStatus { error_message: why.into(), ..advance(status, VolumePhase::Missing) });
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
        let selection = select_disk(spec, &candidates, |c| {
            Vars::new().with_disk(c.disk).and_then(|vars| selector.matches(&vars.with_system_disk(c.system_disk)))
        });
        let Some((disk, size)) = selection.chosen.clone() else {
            return Ok(VolumeStatus {
                error_message: "no disk matches the selector with room for the volume (see diskMatches)".into(),
                disk_matches: selection.matches,
                ..advance(status, VolumePhase::Waiting)
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
            ..advance(status, VolumePhase::Located)
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

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

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

    fn spec(min: u64, max: u64, grow: bool) -> PartitionSpec {
        PartitionSpec { min_size: min, max_size: max, grow, ..PartitionSpec::default() }
    }

    #[test]
    fn sizes_follow_min_max_grow_relative_and_negative() {
        let free = |largest, total| FreeSpace { largest, total };
        let relative = |pct, grow| PartitionSpec { relative_max_size: pct, ..spec(MIB, 0, grow) };
        let negative = |max| PartitionSpec { negative_max_size: true, ..spec(MIB, max, true) };
        type Case = (&'static str, PartitionSpec, FreeSpace, Result<u64, SizeError>);
        let cases: Vec<Case> = vec![
            ("fixed STATE", spec(100 * MIB, 100 * MIB, false), free(5 * GIB, 5 * GIB), Ok(100 * MIB)),
            ("EPHEMERAL grows into all of it", spec(2 * GIB, 0, true), free(5 * GIB, 5 * GIB), Ok(5 * GIB)),
            ("grow stops at the maximum", spec(2 * GIB, 3 * GIB, true), free(5 * GIB, 5 * GIB), Ok(3 * GIB)),
            ("grow is held to the region", spec(MIB, 10 * GIB, true), free(2 * GIB, 4 * GIB), Ok(2 * GIB)),
            (
                "too little room",
                spec(2 * GIB, 0, true),
                free(GIB, GIB),
                Err(SizeError::TooSmall { free: GIB, min: 2 * GIB }),
            ),
            (
                "min without grow must fit",
                spec(100 * MIB, 0, false),
                free(50 * MIB, 50 * MIB),
                Err(SizeError::TooSmall { free: 50 * MIB, min: 100 * MIB }),
            ),
            ("a quarter of the free space", relative(25, true), free(4 * GIB, 4 * GIB), Ok(GIB)),
            ("relative without grow takes the minimum", relative(25, false), free(4 * GIB, 4 * GIB), Ok(MIB)),
            ("leave 1 GiB free", negative(GIB), free(4 * GIB, 4 * GIB), Ok(3 * GIB)),
            (
                "leave more than there is",
                negative(5 * GIB),
                free(4 * GIB, 4 * GIB),
                Err(SizeError::Negative { max: 5 * GIB, free: 4 * GIB }),
            ),
            ("nothing asked, nothing free", spec(0, 0, true), free(0, 0), Err(SizeError::TooSmall { free: 0, min: 1 })),
        ];
        for (name, s, f, want) in cases {
            assert_eq!(partition_size(&s, f), want, "{name}");
        }
    }

    fn disk(size: u64) -> Disk {
        Disk { size, ..Disk::default() }
    }

    #[test]
    fn disk_selection_explains_every_disk() {
        let big = disk(20 * GIB);
        let ro = Disk { readonly: true, ..disk(20 * GIB) };
        let cd = Disk { cdrom: true, ..disk(GIB) };
        let free = |b| Ok(FreeSpace { largest: b, total: b });
        let candidates = [
            DiskCandidate { id: "vdc", disk: &big, system_disk: false, free: free(10 * GIB) },
            DiskCandidate { id: "vda", disk: &big, system_disk: true, free: free(GIB) },
            DiskCandidate { id: "vdb", disk: &big, system_disk: true, free: free(10 * GIB) },
            DiskCandidate { id: "sr0", disk: &cd, system_disk: true, free: free(GIB) },
            DiskCandidate { id: "vdd", disk: &ro, system_disk: true, free: free(10 * GIB) },
            DiskCandidate {
                id: "vde",
                disk: &big,
                system_disk: true,
                free: Err("it holds an xfs filesystem, not a partition table".into()),
            },
        ];
        let s = select_disk(&spec(2 * GIB, 0, true), &candidates, |c| Ok::<_, String>(c.system_disk));
        assert_eq!(s.chosen, Some(("vdb".to_string(), 10 * GIB)));
        let lines: Vec<(&str, bool, &str)> =
            s.matches.iter().map(|m| (m.disk.as_str(), m.matched, m.reason.as_str())).collect();
        assert_eq!(
            lines,
            [
                ("sr0", false, "selector matches, but the disk is a CD-ROM"),
                ("vda", false, "selector matches, but 1073741824 bytes free, less than the minimum size 2147483648"),
                ("vdb", true, "selector matches and the volume fits"),
                ("vdc", false, "selector does not match"),
                ("vdd", false, "selector matches, but the disk is read-only"),
                ("vde", false, "selector matches, but it holds an xfs filesystem, not a partition table"),
            ]
        );
        let none = select_disk(&spec(MIB, 0, false), &candidates[..1], |_| Err::<bool, _>("no such key: dsk"));
        assert_eq!(none.chosen, None);
        assert_eq!(none.matches[0].reason, "selector error: no such key: dsk");
    }
}

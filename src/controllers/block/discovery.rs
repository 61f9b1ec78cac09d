//! `DiscoveryController`: what is on every block device, as a `DiscoveredVolume` (id the
//! kernel name) — the signature the node's own prober finds ([`crate::block::probe`]: GPT,
//! xfs, ext, vfat, ISO 9660, squashfs, swap, LUKS), and for a partition the label, type,
//! GUID and index its disk's GPT gives it. A device is probed again when its `generation`
//! moves (the kernel announced a change) and all of them when a `DiscoveryRefreshRequest`
//! asks; the request answered is echoed in `DiscoveryRefreshStatus` once every device has
//! been probed, so the volume manager knows the picture is fresh. Reads devices; never
//! writes one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::block::sysblock::read_u64;
use crate::block::{gpt, probe};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::block::{
    BlockDevice, DiscoveredVolume, DiscoveryRefreshRequest, DiscoveryRefreshStatus, NAMESPACE, REFRESH_ID,
};

pub struct DiscoveryController {
    dev: PathBuf,
    sys_block: PathBuf,
    /// Kernel name → (generation, refresh request) it was last probed at, and the result.
    seen: BTreeMap<String, (u64, u64, DiscoveredVolume)>,
}

impl DiscoveryController {
    pub fn new() -> Self {
        Self::at(PathBuf::from("/dev"), PathBuf::from("/sys/class/block"))
    }

    pub fn at(dev: PathBuf, sys_block: PathBuf) -> Self {
        DiscoveryController { dev, sys_block, seen: BTreeMap::new() }
    }
}

impl Default for DiscoveryController {
    fn default() -> Self {
        Self::new()
    }
}

/// One device to probe.
#[derive(Debug, Clone)]
struct Job {
    name: String,
    device: BlockDevice,
}

/// Probes one device (and, for a partition, reads its entry from the disk's table).
fn discover(dev: &Path, sys_block: &Path, job: &Job) -> DiscoveredVolume {
    let sys = sys_block.join(&job.name);
    let sectors = read_u64(&sys.join("size")).unwrap_or(0);
    let queue = if job.device.kind == "partition" {
        sys_block.join(&job.device.parent).join("queue")
    } else {
        sys.join("queue")
    };
    let sector_size = read_u64(&queue.join("logical_block_size")).unwrap_or(512) as u32;
    let io_size = read_u64(&queue.join("minimum_io_size")).unwrap_or(sector_size as u64) as u32;
    let path = dev.join(&job.name);
    let mut v = DiscoveredVolume {
        dev_path: path.display().to_string(),
        kind: job.device.kind.clone(),
        device_path: job.device.device_path.clone(),
        size: sectors * 512,
        sector_size,
        io_size,
        ..DiscoveredVolume::default()
    };
    if !job.device.parent.is_empty() {
        v.parent = job.device.parent.clone();
        v.parent_dev_path = dev.join(&job.device.parent).display().to_string();
    }
    if v.size > 0
        && let Ok(Some(found)) = probe::probe_path(&path, sector_size)
    {
        v.name = found.name().to_string();
        v.uuid = found.uuid.clone().unwrap_or_default();
        v.label = found.label.clone().unwrap_or_default();
        v.block_size = found.block_size;
        v.filesystem_block_size = found.filesystem_block_size;
        v.probed_size = found.probed_size;
    }
    if job.device.kind == "partition"
        && job.device.partition_number > 0
        && let Some(entry) = partition_entry(&dev.join(&job.device.parent), job.device.partition_number)
    {
        v.partition_index = job.device.partition_number;
        v.partition_label = entry.label;
        v.partition_type = entry.type_guid;
        v.partition_uuid = entry.guid;
    }
    v
}

/// A partition's GPT entry, as the volume's fields want it.
struct Entry {
    label: String,
    type_guid: String,
    guid: String,
}

fn partition_entry(disk: &Path, index: u32) -> Option<Entry> {
    let file = std::fs::File::open(disk).ok()?;
    let size = std::io::Seek::seek(&mut &file, std::io::SeekFrom::End(0)).ok()?;
    let table = gpt::Table::read(&file, size).ok()??;
    let p = table.partition(index)?;
    Some(Entry {
        label: p.partition.name.clone(),
        type_guid: p.partition.type_guid.to_string(),
        guid: p.partition.guid.to_string(),
    })
}

#[async_trait::async_trait]
impl Controller for DiscoveryController {
    fn name(&self) -> String {
        "DiscoveryController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<BlockDevice>(NAMESPACE), Input::weak::<DiscoveryRefreshRequest>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<DiscoveredVolume>(), Output::exclusive::<DiscoveryRefreshStatus>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let request = ctx.get::<DiscoveryRefreshRequest>(NAMESPACE, REFRESH_ID)?.map(|r| r.spec().request).unwrap_or(0);
        let devices: Vec<Job> = ctx
            .list::<BlockDevice>(NAMESPACE)?
            .into_iter()
            .map(|r| Job { name: r.metadata().id.clone(), device: r.spec().clone() })
            .collect();
        let stale: Vec<Job> = devices
            .iter()
            .filter(|j| match self.seen.get(&j.name) {
                Some((generation, req, _)) => *generation != j.device.generation || *req != request,
                None => true,
            })
            .cloned()
            .collect();
        let (dev, sys) = (self.dev.clone(), self.sys_block.clone());
        let probed: Vec<(Job, DiscoveredVolume)> = ctx
            .blocking("probing block devices", move || {
                stale
                    .into_iter()
                    .map(|j| {
                        let v = discover(&dev, &sys, &j);
                        (j, v)
                    })
                    .collect()
            })
            .await?;
        for (job, volume) in probed {
            self.seen.insert(job.name.clone(), (job.device.generation, request, volume));
        }
        let present: std::collections::BTreeSet<&str> = devices.iter().map(|j| j.name.as_str()).collect();
        self.seen.retain(|name, _| present.contains(name.as_str()));
        ctx.start_tracking_outputs();
        for (name, (_, _, volume)) in &self.seen {
            ctx.apply(NAMESPACE, name, volume.clone())?;
        }
        ctx.apply(NAMESPACE, REFRESH_ID, DiscoveryRefreshStatus { request })?;
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

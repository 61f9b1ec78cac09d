//! `DiscoveryController`: what is on every block device, as a `DiscoveredVolume` (id the
//! kernel name) — the signature the node's own prober finds ([`crate::block::probe`]: GPT,
//! xfs, ext, vfat, ISO 9660, squashfs, swap, LUKS), and for a partition the label, type,
//! GUID and index its disk's GPT gives it. A device is probed again when its `generation`
//! moves (the kernel announced a change) and all of them when a `DiscoveryRefreshRequest`
//! asks; the request answered is echoed in `DiscoveryRefreshStatus` once every device has
//! been probed, so the volume manager knows the picture is fresh. A partition whose disk's
//! table cannot be read at that moment (the volume manager may be writing it: a read can see
//! a new header over old entries) is probed again shortly rather than kept without its label,
//! and the refresh is not answered until it reads or [`UNSETTLED_TRIES`] pass. Reads devices;
//! never writes one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::block::sysblock::read_u64;
use crate::block::{gpt, probe};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::block::{
    BlockDevice, DiscoveredVolume, DiscoveryRefreshRequest, DiscoveryRefreshStatus, NAMESPACE, REFRESH_ID,
};

pub struct DiscoveryController {
    dev: PathBuf,
    sys_block: PathBuf,
    /// Kernel name → what it was last probed at, and the result.
    seen: BTreeMap<String, Seen>,
}

/// One device's last probe.
struct Seen {
    generation: u64,
    request: u64,
    volume: DiscoveredVolume,
    /// Probes in a row whose partition entry could not be read (0: it was read, or the
    /// device is no partition).
    unsettled: u32,
}

/// How many probes in a row a partition may fail to read its disk's table before its volume
/// is published without the entry and the refresh answered anyway (a damaged table stays
/// damaged; the volume manager then sees an unlabelled partition, as `blkid` would).
pub const UNSETTLED_TRIES: u32 = 6;

/// The wait before probing an unsettled partition again: 100 ms doubling (3.1 s in all).
fn unsettled_wait(tries: u32) -> Duration {
    Duration::from_millis(100 << tries.saturating_sub(1).min(5))
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

/// Probes one device (and, for a partition, reads its entry from the disk's table); `false`
/// with it when the device is a partition whose disk's table could not be read.
fn discover(dev: &Path, sys_block: &Path, job: &Job) -> (DiscoveredVolume, bool) {
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
    let mut settled = true;
    if job.device.kind == "partition" && job.device.partition_number > 0 {
        match partition_entry(&dev.join(&job.device.parent), job.device.partition_number) {
            Ok(Some(entry)) => {
                v.partition_index = job.device.partition_number;
                v.partition_label = entry.label;
                v.partition_type = entry.type_guid;
                v.partition_uuid = entry.guid;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(device = %job.name, error = %e, "partition table unreadable; probing again");
                settled = false;
            }
        }
    }
    (v, settled)
}

/// A partition's GPT entry, as the volume's fields want it.
struct Entry {
    label: String,
    type_guid: String,
    guid: String,
}

/// `Ok(None)`: the disk has no GPT, or none with this entry (an MBR partition); `Err`: the
/// disk could not be opened or its table not trusted, which may pass.
fn partition_entry(disk: &Path, index: u32) -> Result<Option<Entry>, String> {
    let file = std::fs::File::open(disk).map_err(|e| format!("opening {}: {e}", disk.display()))?;
    let size = std::io::Seek::seek(&mut &file, std::io::SeekFrom::End(0)).map_err(|e| e.to_string())?;
    let Some(table) = gpt::Table::read(&file, size).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    Ok(table.partition(index).map(|p| Entry {
        label: p.partition.name.clone(),
        type_guid: p.partition.type_guid.to_string(),
        guid: p.partition.guid.to_string(),
    }))
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
                Some(seen) => {
                    seen.generation != j.device.generation
                        || seen.request != request
                        || (seen.unsettled > 0 && seen.unsettled < UNSETTLED_TRIES)
                }
                None => true,
            })
            .cloned()
            .collect();
        let (dev, sys) = (self.dev.clone(), self.sys_block.clone());
        let probed: Vec<(Job, (DiscoveredVolume, bool))> = ctx
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
        for (job, (volume, settled)) in probed {
            let before = self.seen.get(&job.name);
            let unsettled = match (settled, before) {
                (true, _) => 0,
                (false, Some(before)) if before.unsettled > 0 => before.unsettled + 1,
                (false, _) => 1,
            };
            // A partition keeps the entry an earlier probe read until its table reads again.
            let volume = match before {
                Some(before) if !settled && !before.volume.partition_label.is_empty() => before.volume.clone(),
                _ => volume,
            };
            self.seen.insert(job.name.clone(), Seen { generation: job.device.generation, request, volume, unsettled });
        }
        let present: std::collections::BTreeSet<&str> = devices.iter().map(|j| j.name.as_str()).collect();
        self.seen.retain(|name, _| present.contains(name.as_str()));
        let waiting = self.seen.values().map(|s| s.unsettled).filter(|n| *n > 0 && *n < UNSETTLED_TRIES).min();
        ctx.start_tracking_outputs();
        for (name, seen) in &self.seen {
            if seen.unsettled == 0 || seen.unsettled >= UNSETTLED_TRIES || !seen.volume.partition_label.is_empty() {
                ctx.apply(NAMESPACE, name, seen.volume.clone())?;
            } else {
                // Not read this time: what was published stays, rather than going away.
                ctx.keep::<DiscoveredVolume>(NAMESPACE, name);
            }
        }
        match waiting {
            Some(tries) => {
                ctx.keep::<DiscoveryRefreshStatus>(NAMESPACE, REFRESH_ID);
                ctx.requeue_after(unsettled_wait(tries));
            }
            None => {
                ctx.apply(NAMESPACE, REFRESH_ID, DiscoveryRefreshStatus { request })?;
            }
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{self, File};
    use std::os::unix::fs::FileExt;

    use super::*;
    use crate::cosi::Harness;

    const MIB: u64 = 1 << 20;

    /// A disk file `dev/disk` of 16 MiB with one partition `BOOT`, its partition file
    /// `dev/disk1`, and the sysfs files the prober reads.
    fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let (dev, sys) = (dir.path().join("dev"), dir.path().join("sys"));
        for (name, size) in [("disk", 16 * MIB), ("disk1", 4 * MIB)] {
            fs::create_dir_all(sys.join(name)).unwrap();
            fs::write(sys.join(name).join("size"), format!("{}\n", size / 512)).unwrap();
        }
        fs::create_dir_all(sys.join("disk/queue")).unwrap();
        fs::write(sys.join("disk/queue/logical_block_size"), "512\n").unwrap();
        fs::create_dir_all(&dev).unwrap();
        File::create(dev.join("disk")).unwrap().set_len(16 * MIB).unwrap();
        File::create(dev.join("disk1")).unwrap().set_len(4 * MIB).unwrap();
        (dir, dev, sys)
    }

    fn write_table(dev: &Path) {
        let file = fs::OpenOptions::new().read(true).write(true).open(dev.join("disk")).unwrap();
        let mut t = gpt::Table::new(gpt::Guid::derived(b"disk"), 16 * MIB).unwrap();
        let linux = gpt::Guid::parse("0FC63DAF-8483-4772-8E79-3D69D8477DE4").unwrap();
        t.add_partition("BOOT", linux, gpt::Guid::derived(b"boot"), 4 * MIB, 0, false).unwrap();
        t.write(&file).unwrap();
    }

    /// What a reader sees halfway through a table write: the primary header's entry CRC no
    /// longer matches, and no backup at the end of the disk.
    fn tear_table(dev: &Path) {
        let file = fs::OpenOptions::new().write(true).open(dev.join("disk")).unwrap();
        file.write_all_at(&[0xff; 128], 1024).unwrap();
        file.write_all_at(&[0; 512], 16 * MIB - 512).unwrap();
    }

    fn seed_devices(h: &Harness, generation: u64) {
        let disk = BlockDevice { kind: "disk".into(), generation, ..BlockDevice::default() };
        let part = BlockDevice {
            kind: "partition".into(),
            parent: "disk".into(),
            partition_number: 1,
            generation,
            ..BlockDevice::default()
        };
        h.seed(NAMESPACE, "disk", disk).unwrap();
        h.seed(NAMESPACE, "disk1", part).unwrap();
    }

    #[tokio::test]
    async fn a_partition_is_probed_again_while_its_table_cannot_be_read() {
        let (_dir, dev, sys) = scratch();
        write_table(&dev);
        tear_table(&dev);
        let h = Harness::start(vec![Box::new(DiscoveryController::at(dev.clone(), sys))]).unwrap();
        seed_devices(&h, 1);
        h.eventually::<DiscoveredVolume, _>(NAMESPACE, "disk", "the disk probed", |r| r.is_some()).await.unwrap();
        // Neither the partition (without its label) nor the refresh answer is published yet.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(h.state().find::<DiscoveredVolume>(NAMESPACE, "disk1").unwrap().is_none());
        assert!(h.state().find::<DiscoveryRefreshStatus>(NAMESPACE, REFRESH_ID).unwrap().is_none());
        // The write completes; no uevent comes for the partition, the retry finds it.
        write_table(&dev);
        let v = h
            .eventually::<DiscoveredVolume, _>(NAMESPACE, "disk1", "BOOT's entry read", |r| {
                r.is_some_and(|r| r.spec().partition_label == "BOOT")
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v.spec().partition_index, 1);
        h.eventually::<DiscoveryRefreshStatus, _>(NAMESPACE, REFRESH_ID, "the refresh answered", |r| r.is_some())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_label_read_once_is_kept_over_torn_reads_and_a_refresh_is_answered_after_the_tries() {
        let (_dir, dev, sys) = scratch();
        write_table(&dev);
        let h = Harness::start(vec![Box::new(DiscoveryController::at(dev.clone(), sys))]).unwrap();
        seed_devices(&h, 1);
        h.eventually::<DiscoveredVolume, _>(NAMESPACE, "disk1", "BOOT's entry read", |r| {
            r.is_some_and(|r| r.spec().partition_label == "BOOT")
        })
        .await
        .unwrap();
        // A change announced and a refresh asked while the table is torn, and it stays torn:
        // the label stays meanwhile, and the refresh is answered once the tries are spent.
        tear_table(&dev);
        seed_devices(&h, 2);
        h.seed(NAMESPACE, REFRESH_ID, DiscoveryRefreshRequest { request: 1 }).unwrap();
        let started = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let status = h.state().find::<DiscoveryRefreshStatus>(NAMESPACE, REFRESH_ID).unwrap().unwrap();
        assert_eq!(status.spec().request, 0, "not answered while the table may still settle");
        let kept = h.state().find::<DiscoveredVolume>(NAMESPACE, "disk1").unwrap().unwrap();
        assert_eq!(kept.spec().partition_label, "BOOT", "a read that failed kept what was known");
        h.eventually::<DiscoveryRefreshStatus, _>(NAMESPACE, REFRESH_ID, "the refresh answered", |r| {
            r.is_some_and(|r| r.spec().request == 1)
        })
        .await
        .unwrap();
        assert!(started.elapsed() >= Duration::from_secs(3), "answered after the tries: {:?}", started.elapsed());
        let kept = h.state().find::<DiscoveredVolume>(NAMESPACE, "disk1").unwrap().unwrap();
        assert_eq!(kept.spec().partition_label, "BOOT");
    }
}

//! `VolumeManagerController`: drives every `VolumeConfig` toward a ready volume, one step per
//! phase (Waiting → Located → Provisioned → Prepared → Ready) as Talos's volume manager does,
//! and records each in its `VolumeStatus`. The decisions are the pure functions of
//! [`super::volumes`]; this file gathers their inputs and carries out what they decide:
//! partitions carved into a disk's GPT (and announced to the kernel), grown into free space,
//! filesystems made by the mkfs programs the rootfs carries, swap headers written.
//!
//! Safety of data comes first: a volume is located before anything is made, a partition is
//! only ever added or grown (never moved or removed), and a filesystem is made only where the
//! probe found nothing. A failed step is retried from where it failed every 30 s. After it
//! changes a disk the manager asks the discovery to probe again, and waits for it before
//! locating anything else, so no decision is taken on a stale picture.
//!
//! Each `VolumeConfig` is held with this controller's finalizer. When one is taken away (its
//! document removed), its `VolumeStatus` is torn down — destroyed once the mount controller
//! has unmounted it and let go — and then the config is released. The partition and what is
//! on it stay on the disk: adding the document back finds them again.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::unlock::Unlocks;
use super::volumes::{self, DiskCandidate, FormatDecision, FreeSpace, Lookup, NotFound, PhaseInputs, Step};
use crate::block::format;
use crate::block::luks2::DmCryptOptions;
use crate::block::selector::{Env, Expression, Vars};
use crate::block::{gpt, probe};
use crate::cosi::{Changes, Context, Controller, EventSource, Input, Output, ReconcileError};
use crate::kernel::blockdev::BlockDevice as KernelDisk;
use crate::resources::block::{
    DiscoveredVolume, DiscoveryRefreshRequest, DiscoveryRefreshStatus, Disk, DiskWipeConfig, DiskWipeOutcome,
    DiskWipeStatus, EncryptionProvider, FilesystemType, MountStatus, NAMESPACE, REFRESH_ID, SystemDisk, VolumeConfig,
    VolumeLifecycle, VolumePhase, VolumeStatus, VolumeType, pretty_size,
};
use crate::resources::secrets::EncryptionSalt;
use crate::services::Reaper;
use std::path::Path;

/// How long a device node may take to appear after the kernel is told of a partition.
const DEVICE_NODE_WAIT: Duration = Duration::from_secs(1);
/// How soon a volume being closed is looked at again when nothing else wakes the manager
/// (a mapping still busy).
const CLOSE_RETRY: Duration = Duration::from_secs(1);
/// The most steps one volume takes in one pass (Waiting → Ready is four).
const MAX_STEPS: usize = 8;

pub struct VolumeManagerController {
    reaper: Arc<Reaper>,
    /// Programs (mkfs) are found under this root; `/` on a node.
    root: String,
    /// Device nodes are under this directory; `/dev` on a node.
    dev: PathBuf,
    failed_at: HashMap<String, Instant>,
    /// The config each failed volume failed with.
    failed_config: HashMap<String, VolumeConfig>,
    /// When a volume was first looked for with nothing discovered.
    started: Option<Instant>,
    refresh: u64,
    compiled: HashMap<(String, bool), Result<Expression, String>>,
    /// Passphrases handed over by `talosctl unlock`.
    unlocks: Arc<Unlocks>,
    /// The node's writer of META, where the wipes done are recorded.
    meta: Option<Arc<crate::block::meta::MetaStore>>,
    /// The wipes this controller did since the node booted (name, identity): `wiped`, not
    /// `wiped before`, in their status.
    wiped_now: std::collections::BTreeSet<(String, String)>,
}

impl VolumeManagerController {
    /// Spawns formatters through `reaper` (machined reaps every child; nothing else may wait).
    pub fn new(reaper: Arc<Reaper>) -> Self {
        VolumeManagerController {
            reaper,
            root: "/".to_string(),
            dev: PathBuf::from("/dev"),
            failed_at: HashMap::new(),
            failed_config: HashMap::new(),
            started: None,
            refresh: 0,
            compiled: HashMap::new(),
            unlocks: Arc::new(Unlocks::default()),
            meta: None,
            wiped_now: Default::default(),
        }
    }

    /// Records the wipes of `DiskWipeConfig` documents through `meta` (without it, none runs).
    pub fn with_meta(mut self, meta: Arc<crate::block::meta::MetaStore>) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Takes the passphrases `unlocks` is given (the node's unlock RPC gives them there).
    pub fn with_unlocks(mut self, unlocks: Arc<Unlocks>) -> Self {
        self.unlocks = unlocks;
        self
    }

    fn expression(&mut self, source: &str, disk: bool) -> Result<Expression, String> {
        self.compiled
            .entry((source.to_string(), disk))
            .or_insert_with(|| {
                let env = if disk { Env::DiskLocator } else { Env::VolumeLocator };
                Expression::compile(source, env).map_err(|e| e.to_string())
            })
            .clone()
    }
}

/// The facts of one pass.
struct World {
    discovered: Vec<DiscoveredVolume>,
    disks: Vec<(String, Disk)>,
    system_disk: Option<String>,
    discovery_settled: bool,
}

/// The kernel name of partition `index` of disk `disk` (`vda5`, `nvme0n1p5`, `loop0p2`).
pub fn partition_name(disk: &str, index: u32) -> String {
    if disk.ends_with(|c: char| c.is_ascii_digit()) { format!("{disk}p{index}") } else { format!("{disk}{index}") }
}

#[async_trait::async_trait]
impl Controller for VolumeManagerController {
    fn name(&self) -> String {
        "VolumeManagerController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::strong::<VolumeConfig>(NAMESPACE),
            Input::weak::<DiscoveredVolume>(NAMESPACE),
            Input::weak::<Disk>(NAMESPACE),
            Input::weak::<SystemDisk>(NAMESPACE),
            Input::weak::<DiscoveryRefreshStatus>(NAMESPACE),
            Input::weak::<MountStatus>(NAMESPACE),
            Input::weak::<EncryptionSalt>(crate::resources::secrets::NAMESPACE),
            Input::weak::<DiskWipeConfig>(NAMESPACE),
            Input::strong::<VolumeLifecycle>(NAMESPACE),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![
            Output::exclusive::<VolumeStatus>(),
            Output::exclusive::<DiscoveryRefreshRequest>(),
            Output::exclusive::<DiskWipeStatus>(),
        ]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(Changes::new("unlock passphrases", self.unlocks.subscribe()))]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let mut configs: Vec<(String, VolumeConfig)> = Vec::new();
        let mut leaving = Vec::new();
        for r in ctx.list::<VolumeConfig>(NAMESPACE)? {
            if r.is_running() {
                ctx.hold(&r)?;
                configs.push((r.metadata().id.clone(), r.spec().clone()));
            } else {
                leaving.push(r);
            }
        }
        configs.sort_by(|a, b| volumes::order_key(&a.0, &a.1).cmp(&volumes::order_key(&b.0, &b.1)));
        let mut statuses: BTreeMap<String, VolumeStatus> = ctx
            .list::<VolumeStatus>(NAMESPACE)?
            .into_iter()
            .filter(|r| r.is_running())
            .map(|r| (r.metadata().id.clone(), r.spec().clone()))
            .collect();
        let settled_request = ctx.get::<DiscoveryRefreshStatus>(NAMESPACE, REFRESH_ID)?.map(|r| r.spec().request);
        let mut world = World {
            discovered: ctx.list::<DiscoveredVolume>(NAMESPACE)?.into_iter().map(|r| r.spec().clone()).collect(),
            disks: ctx
                .list::<Disk>(NAMESPACE)?
                .into_iter()
                .map(|r| (r.metadata().id.clone(), r.spec().clone()))
                .collect(),
            system_disk: ctx.get::<SystemDisk>(NAMESPACE, SystemDisk::ID)?.map(|r| r.spec().disk_id.clone()),
            discovery_settled: false,
        };
        // Settled: the discovery answered our last request and has probed every disk.
        world.discovery_settled = settled_request.is_some_and(|r| r >= self.refresh)
            && world.disks.iter().all(|(_, d)| world.discovered.iter().any(|v| v.dev_path == d.dev_path));

        let mounted: std::collections::BTreeSet<String> =
            ctx.list::<MountStatus>(NAMESPACE)?.into_iter().map(|r| r.metadata().id.clone()).collect();

        // While the lifecycle stands the volumes stay open; once machined tears it down (the
        // node is going down) every volume is closed, and nothing is located or made.
        match ctx.get::<VolumeLifecycle>(NAMESPACE, VolumeLifecycle::ID)? {
            Some(lifecycle) if lifecycle.is_running() => ctx.hold(&lifecycle)?,
            Some(lifecycle) => {
                let mut closed = true;
                for (id, status) in &statuses {
                    if id != super::volume_config::META {
                        closed &= self.close(ctx, id, status, mounted.contains(id)).await?;
                    }
                }
                if closed {
                    if lifecycle.metadata().finalizers.contains(&self.name()) {
                        crate::kernel::console::line("volumes: every volume is closed");
                    }
                    ctx.release(&lifecycle)?;
                } else {
                    ctx.requeue_after(CLOSE_RETRY);
                }
                return Ok(());
            }
            None => {}
        }

        ctx.start_tracking_outputs();
        ctx.apply(NAMESPACE, REFRESH_ID, DiscoveryRefreshRequest { request: self.refresh })?;
        let mut retry_in: Option<Duration> = None;
        // Wipes first: nothing is provisioned on a disk in the pass that wipes it.
        if !self.run_wipes(ctx, &mut world, &statuses, &configs).await? {
            retry_in = Some(volumes::RETRY_AFTER);
        }
        for (id, config) in &configs {
            let mut status = statuses.get(id).cloned().unwrap_or_else(|| volumes::initial(config));
            // What the config says of mounting and filesystem may change while the volume lives;
            // a volume the node does not format keeps the filesystem it was found with.
            status.mount_spec = config.mount.clone();
            status.kind = config.kind;
            if config.provisioning.filesystem_spec.kind != FilesystemType::None {
                status.filesystem = config.provisioning.filesystem_spec.kind;
            }
            // A failed volume whose config changed (a key added, STATE's encryption read from
            // META) is tried again now, not at the next tick.
            // So is one handed a passphrase by `talosctl unlock`.
            if self.failed_config.get(id).is_some_and(|c| c != config) || self.unlocks.waiting(id) {
                self.failed_at.remove(id);
                self.failed_config.remove(id);
            }
            for _ in 0..MAX_STEPS {
                let parent_ready = config.parent_id.is_empty()
                    || statuses.get(&config.parent_id).is_some_and(|s| s.phase == VolumePhase::Ready);
                let inputs = PhaseInputs {
                    phase: status.phase,
                    pre_fail_phase: status.pre_fail_phase,
                    parent_ready,
                    discovery_settled: world.discovery_settled,
                    failed_for: self.failed_at.get(id).map(|t| t.elapsed()).unwrap_or(Duration::MAX),
                    device_gone: {
                        let seen: Vec<&str> = world.discovered.iter().map(|v| v.dev_path.as_str()).collect();
                        volumes::device_gone(&status, &seen, mounted.contains(id), |path| Path::new(path).exists())
                    },
                };
                let phase = status.phase;
                let outcome = match volumes::next_step(&inputs) {
                    Step::Done => break,
                    Step::Wait(why) => {
                        if phase == VolumePhase::Failed {
                            let left = volumes::RETRY_AFTER.saturating_sub(inputs.failed_for);
                            retry_in = Some(retry_in.map_or(left, |r| r.min(left)));
                        } else {
                            status.error_message = why;
                        }
                        break;
                    }
                    Step::Relocate => {
                        crate::kernel::console::line(&format!(
                            "volume {id}: {} is gone; locating it again",
                            status.location
                        ));
                        Ok(VolumeStatus {
                            phase: VolumePhase::Waiting,
                            error_message: format!("{} is gone; locating the volume again", status.location),
                            ..status.clone()
                        })
                    }
                    Step::Retry(from) => {
                        self.failed_at.remove(id);
                        self.failed_config.remove(id);
                        Ok(VolumeStatus { phase: from, ..status.clone() })
                    }
                    Step::LocateAndProvision => {
                        // Only volumes the node makes hold a later wave back.
                        let waves: Vec<(i64, VolumePhase)> = configs
                            .iter()
                            .filter(|(other, c)| other != id && c.provisioning.is_requested())
                            .map(|(other, c)| {
                                (c.provisioning.wave, statuses.get(other).map(|s| s.phase).unwrap_or_default())
                            })
                            .collect();
                        let earlier = volumes::earlier_waves_ready(config.provisioning.wave, &waves);
                        self.locate_and_provision(ctx, id, config, &status, earlier, &mut world).await
                    }
                    Step::Grow => self.grow(ctx, config, &status).await,
                    Step::Prepare => match config.encryption.provider {
                        EncryptionProvider::None => self.prepare_plain(ctx, id, &status).await,
                        EncryptionProvider::Luks2 => self.prepare_encrypted(ctx, id, config, &status).await,
                    },
                    Step::Format => self.format(ctx, id, config, &status).await,
                };
                match outcome {
                    Ok(next) => {
                        let moved = next.phase != status.phase;
                        status = next;
                        statuses.insert(id.clone(), status.clone());
                        if !moved {
                            break;
                        }
                        if status.phase == VolumePhase::Ready && !volumes::is_ready_at_once(status.kind) {
                            crate::kernel::console::line(&format!(
                                "volume {id}: ready at {} ({})",
                                status.location, status.pretty_size
                            ));
                        }
                    }
                    Err(e) if e.again => {
                        status.error_message = e.message;
                        retry_in = Some(retry_in.map_or(DEVICE_NODE_WAIT, |r| r.min(DEVICE_NODE_WAIT)));
                        break;
                    }
                    Err(e) => {
                        crate::kernel::console::line(&format!("volume {id}: {phase}: {}; retrying in 30s", e.message));
                        status = volumes::fail(&status, phase, e.message);
                        self.failed_at.insert(id.clone(), Instant::now());
                        self.failed_config.insert(id.clone(), config.clone());
                        retry_in = Some(retry_in.map_or(volumes::RETRY_AFTER, |r| r.min(volumes::RETRY_AFTER)));
                        break;
                    }
                }
            }
            statuses.insert(id.clone(), status.clone());
            let labels =
                ctx.get::<VolumeConfig>(NAMESPACE, id)?.map(|r| r.metadata().labels.clone()).unwrap_or_default();
            ctx.apply_labeled(NAMESPACE, id, status, labels)?;
        }
        // A volume taken away is closed (unmounted, its mapping closed), then its status goes
        // and the config is let go.
        for config in &leaving {
            let id = &config.metadata().id;
            self.failed_at.remove(id);
            self.failed_config.remove(id);
            if let Some(status) = statuses.get(id)
                && !self.close(ctx, id, status, mounted.contains(id)).await?
            {
                retry_in = Some(retry_in.map_or(CLOSE_RETRY, |r| r.min(CLOSE_RETRY)));
                continue;
            }
            if ctx.remove::<VolumeStatus>(NAMESPACE, id)? {
                ctx.release(config)?;
            }
        }
        // A refresh asked for in this pass.
        ctx.apply(NAMESPACE, REFRESH_ID, DiscoveryRefreshRequest { request: self.refresh })?;
        ctx.cleanup_outputs()?;
        if let Some(after) = retry_in {
            ctx.requeue_after(after);
        }
        Ok(())
    }
}

impl VolumeManagerController {
    /// Runs the `DiskWipeConfig` wipes not done yet (see `disk_wipe`) and writes each one's
    /// status; `false` when one should be tried again later.
    async fn run_wipes(
        &mut self,
        ctx: &mut Context,
        world: &mut World,
        statuses: &BTreeMap<String, VolumeStatus>,
        configs: &[(String, VolumeConfig)],
    ) -> Result<bool, ReconcileError> {
        use super::disk_wipe::{DISK_WIPE_TAG, Decision, decide, parse_records, with_record};
        let wipes = ctx.list::<DiskWipeConfig>(NAMESPACE)?;
        if wipes.is_empty() {
            return Ok(true);
        }
        let mut volumes: Vec<(String, VolumeStatus)> = statuses.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        volumes.extend(self.claims(world, statuses, configs));
        let meta_path = statuses
            .get(super::volume_config::META)
            .filter(|m| m.phase == VolumePhase::Ready && !m.location.is_empty())
            .map(|m| PathBuf::from(&m.location));
        // No wipe runs without its record: it would run again next boot.
        let records = match (&meta_path, &self.meta) {
            // A disk not probed yet may hold a volume no locator has had the chance to find.
            _ if !world.discovery_settled => Err("waiting for every disk to be probed".to_string()),
            (Some(path), Some(_)) => {
                let path = path.clone();
                ctx.blocking("reading the wipes done from META", move || {
                    crate::block::meta::load(&path)
                        .map(|m| m.get(DISK_WIPE_TAG).map(parse_records).unwrap_or_default())
                        .map_err(|e| e.to_string())
                })
                .await?
            }
            (None, _) => Err("waiting for META, where the wipe is recorded".to_string()),
            (_, None) => Err("no META writer here".to_string()),
        };
        let mut settled = true;
        for wipe in wipes {
            let name = wipe.metadata().id.clone();
            let source = wipe.spec().disk_selector.clone();
            let mut outcomes = Vec::new();
            let matcher = match self.expression(&source, true) {
                Ok(m) => m,
                Err(e) => {
                    outcomes.push(DiskWipeOutcome {
                        outcome: format!("disk selector {source:?}: {e}"),
                        ..Default::default()
                    });
                    ctx.apply(NAMESPACE, &name, DiskWipeStatus { disks: outcomes })?;
                    continue;
                }
            };
            for (disk_id, disk) in world.disks.clone() {
                let system_disk = world.system_disk.as_deref() == Some(disk_id.as_str());
                let hit =
                    Vars::new().with_disk(&disk).and_then(|vars| matcher.matches(&vars.with_system_disk(system_disk)));
                match hit {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        outcomes.push(DiskWipeOutcome {
                            dev_path: disk.dev_path.clone(),
                            outcome: format!("disk selector {source:?}: {e}"),
                            ..Default::default()
                        });
                        continue;
                    }
                }
                let records = match &records {
                    Ok(r) => r,
                    Err(why) => {
                        settled = false;
                        outcomes.push(DiskWipeOutcome {
                            dev_path: disk.dev_path.clone(),
                            identity: super::disk_wipe::identity(&disk).unwrap_or_default(),
                            outcome: format!("not wiped yet: {why}"),
                        });
                        continue;
                    }
                };
                let identity = match decide(&name, &disk, system_disk, &volumes, records) {
                    Decision::Done(mut outcome) => {
                        if outcome.outcome == "wiped before"
                            && self.wiped_now.contains(&(name.clone(), outcome.identity.clone()))
                        {
                            outcome.outcome = "wiped".into();
                        }
                        outcomes.push(outcome);
                        continue;
                    }
                    Decision::Wipe { identity } => identity,
                };
                let dev_path = disk.dev_path.clone();
                let wiped = ctx.blocking("wiping a disk", move || wipe_disk(&dev_path)).await?;
                let recorded = match (wiped, &meta_path, &self.meta) {
                    (Ok(()), Some(path), Some(meta)) => {
                        let (n, i) = (name.clone(), identity.clone());
                        meta.update(path.clone(), move |m| {
                            m.set(DISK_WIPE_TAG, with_record(m.get(DISK_WIPE_TAG), &n, &i))
                        })
                        .await
                        .map_err(|e| format!("wiped, but recording it in META failed: {e}"))
                    }
                    (Ok(()), _, _) => Err("wiped, but META is gone".to_string()),
                    (Err(e), _, _) => Err(e),
                };
                let outcome = match recorded {
                    Ok(()) => {
                        crate::kernel::console::line(&format!(
                            "wipe {name}: {} ({identity}) wiped, and recorded in META",
                            disk.dev_path
                        ));
                        self.refresh += 1;
                        world.discovery_settled = false;
                        self.wiped_now.insert((name.clone(), identity.clone()));
                        "wiped".to_string()
                    }
                    Err(e) => {
                        crate::kernel::console::line(&format!("wipe {name}: {}: {e}", disk.dev_path));
                        settled = false;
                        format!("not wiped: {e}")
                    }
                };
                outcomes.push(DiskWipeOutcome { dev_path: disk.dev_path.clone(), identity, outcome });
            }
            ctx.apply(NAMESPACE, &name, DiskWipeStatus { disks: outcomes })?;
        }
        Ok(settled)
    }
}

impl VolumeManagerController {
    /// Takes volume `id` one step further in being closed (see [`volumes::close_step`]): true
    /// once it is closed.
    async fn close(
        &mut self,
        ctx: &mut Context,
        id: &str,
        status: &VolumeStatus,
        mounted: bool,
    ) -> Result<bool, ReconcileError> {
        let mapping = format!("luks2-{id}");
        let mut status = status.clone();
        // Mark, close the mapping, done: three steps at most in a pass.
        for _ in 0..3 {
            let mapping_open = status.encryption_provider == EncryptionProvider::Luks2 && {
                let name = mapping.clone();
                ctx.blocking("looking up a dm-crypt mapping", move || crate::kernel::dm::find(&name))
                    .await?
                    .is_ok_and(|m| m.is_some())
            };
            match volumes::close_step(status.phase, mounted, mapping_open) {
                volumes::CloseStep::MarkClosed => {
                    crate::kernel::console::line(&format!("volume {id}: closing"));
                    status = volumes::advance(&status, VolumePhase::Closed);
                    let labels = ctx
                        .get::<VolumeStatus>(NAMESPACE, id)?
                        .map(|r| r.metadata().labels.clone())
                        .unwrap_or_default();
                    ctx.apply_labeled(NAMESPACE, id, status.clone(), labels)?;
                }
                volumes::CloseStep::WaitUnmount => return Ok(false),
                volumes::CloseStep::CloseMapping => {
                    let name = mapping.clone();
                    match ctx.blocking("closing a dm-crypt mapping", move || crate::kernel::dm::remove(&name)).await? {
                        Ok(_) => crate::kernel::console::line(&format!("volume {id}: closed {mapping}")),
                        Err(e) => {
                            crate::kernel::console::line(&format!("volume {id}: closing {mapping}: {e}; trying again"));
                            return Ok(false);
                        }
                    }
                }
                volumes::CloseStep::Done => return Ok(true),
            }
        }
        Ok(false)
    }

    /// The places volumes not located yet would be found at this pass — a partition a
    /// locator matches, a whole disk a disk volume's locator selects — as located statuses,
    /// so no wipe takes a volume's data before the volume had its chance to be found.
    fn claims(
        &mut self,
        world: &World,
        statuses: &BTreeMap<String, VolumeStatus>,
        configs: &[(String, VolumeConfig)],
    ) -> Vec<(String, VolumeStatus)> {
        let mut claims = Vec::new();
        for (id, config) in configs {
            if statuses.get(id).is_some_and(|s| !s.location.is_empty()) || volumes::is_ready_at_once(config.kind) {
                continue;
            }
            let at = |location: &str, parent: &str| VolumeStatus {
                location: location.to_string(),
                parent_location: parent.to_string(),
                phase: VolumePhase::Located,
                ..VolumeStatus::default()
            };
            if config.kind == VolumeType::Disk {
                let Ok(matcher) = self.expression(&config.locator.disk_match, true) else { continue };
                for (name, disk) in &world.disks {
                    let system_disk = world.system_disk.as_deref() == Some(name.as_str());
                    let hit =
                        Vars::new().with_disk(disk).and_then(|v| matcher.matches(&v.with_system_disk(system_disk)));
                    if hit.unwrap_or(false) {
                        claims.push((id.clone(), at(&disk.dev_path, "")));
                    }
                }
            } else if !config.locator.is_empty()
                && let Ok(Lookup::Found(v)) = self.locate_existing(config, world)
            {
                claims.push((id.clone(), at(&v.dev_path, &v.parent_dev_path)));
            }
        }
        claims
    }
}

/// Wipes the disk at `dev_path` (the fast method: its first and last MiB, where the partition
/// tables and every signature are), drops the kernel's partitions of it, and announces the
/// change, so discovery probes it again.
fn wipe_disk(dev_path: &str) -> Result<(), String> {
    let path = Path::new(dev_path);
    let partitions = kernel_partitions(dev_path);
    let device = lock_disk(path)?;
    crate::block::wipe::fast_wipe(path).map_err(|e| e.to_string())?;
    for part in partitions {
        let Some(name) = Path::new(&part).file_name() else { continue };
        let number = std::fs::read_to_string(Path::new("/sys/class/block").join(name).join("partition"))
            .ok()
            .and_then(|n| n.trim().parse::<u32>().ok());
        if let Some(n) = number {
            device.delete_partition(n).map_err(|e| format!("dropping partition {n} of {dev_path}: {e}"))?;
        }
    }
    if let Some(name) = path.file_name() {
        let _ = std::fs::write(Path::new("/sys/class/block").join(name).join("uevent"), "change");
    }
    Ok(())
}

/// A step that did not go through: `again` when it only has to wait a moment (a device node
/// not there yet), else a failure that waits for the 30 s retry.
#[derive(Debug)]
struct StepError {
    message: String,
    again: bool,
}

impl StepError {
    fn failed(message: impl Into<String>) -> Self {
        StepError { message: message.into(), again: false }
    }
}

impl From<crate::cosi::ContextError> for StepError {
    fn from(e: crate::cosi::ContextError) -> Self {
        StepError::failed(e.to_string())
    }
}

impl VolumeManagerController {
    #[allow(clippy::too_many_arguments)]
    async fn locate_and_provision(
        &mut self,
        ctx: &Context,
        id: &str,
        config: &VolumeConfig,
        status: &VolumeStatus,
        earlier_waves: Result<(), i64>,
        world: &mut World,
    ) -> Result<VolumeStatus, StepError> {
        if volumes::is_ready_at_once(config.kind) {
            let mut next = volumes::advance(status, VolumePhase::Ready);
            if config.kind == VolumeType::External {
                next.location = config.provisioning.disk_selector.external.clone();
                next.mount_location = next.location.clone();
                next.filesystem = config.provisioning.filesystem_spec.kind;
            }
            return Ok(next);
        }
        if config.locator.is_empty() {
            return Err(StepError::failed("volume locator is not set"));
        }
        if config.kind == VolumeType::Disk {
            return self.locate_disk(config, status, world);
        }
        let found = self.locate_existing(config, world).map_err(StepError::failed)?;
        if let Lookup::Found(v) = found {
            let parent = if v.parent_dev_path.is_empty() { String::new() } else { v.parent_dev_path.clone() };
            let mut next = VolumeStatus {
                location: v.dev_path.clone(),
                parent_location: parent,
                partition_index: v.partition_index,
                uuid: v.uuid.clone(),
                partition_uuid: v.partition_uuid.clone(),
                size: v.size,
                pretty_size: pretty_size(v.size),
                disk_matches: Vec::new(),
                ..volumes::advance(status, VolumePhase::Located)
            };
            next.error_message.clear();
            return Ok(next);
        }
        match volumes::not_found(config, earlier_waves) {
            NotFound::Provision => {}
            // Missing is said only once discovery has had its look: a partition the kernel has
            // that discovery has not shown yet may be the one, and right after start there may
            // be no device discovered at all yet.
            NotFound::Missing if !undiscovered(world).is_empty() => {
                return Err(StepError {
                    message: format!("waiting for discovery of {}", undiscovered(world).join(", ")),
                    again: true,
                });
            }
            NotFound::Missing
                if world.disks.is_empty()
                    && world.discovered.is_empty()
                    && self.started.get_or_insert_with(Instant::now).elapsed() < NOTHING_DISCOVERED_GRACE =>
            {
                return Err(StepError { message: "no device is discovered yet".into(), again: true });
            }
            NotFound::Missing => {
                return Ok(VolumeStatus {
                    error_message: "no volume matches the locator, and the volume is not provisioned by the node"
                        .into(),
                    ..volumes::advance(status, VolumePhase::Missing)
                });
            }
            NotFound::Wait(why) => {
                return Ok(VolumeStatus { error_message: why, ..volumes::advance(status, VolumePhase::Waiting) });
            }
        }
        let spec = &config.provisioning.partition_spec;
        if config.provisioning.disk_selector.expression.is_empty() || (spec.min_size == 0 && !spec.grow) {
            return Ok(VolumeStatus {
                error_message:
                    "no volume matches the locator, and the volume has no disk selector or size to be provisioned with"
                        .into(),
                ..volumes::advance(status, VolumePhase::Missing)
            });
        }
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

    /// A whole-disk volume: the one disk its locator picks, as discovered.
    /// What `config`'s locator finds among the discovered volumes (the locator sees the disk
    /// the volume is on, as in Talos).
    fn locate_existing<'w>(&mut self, config: &VolumeConfig, world: &'w World) -> Result<Lookup<'w>, String> {
        let source = &config.locator.expression;
        let locator = self.expression(source, false).map_err(|e| format!("locator {source:?}: {e}"))?;
        let disks = &world.disks;
        volumes::locate(&world.discovered, |v| {
            let on = if v.parent_dev_path.is_empty() { &v.dev_path } else { &v.parent_dev_path };
            let vars = Vars::new().with_volume(&v.cel_view())?;
            let vars = match disks.iter().find(|(_, d)| &d.dev_path == on) {
                Some((_, d)) => vars.with_disk(d)?,
                None => vars,
            };
            locator.matches(&vars)
        })
        .map_err(|e| format!("locator {source:?}: {e}"))
    }

    fn locate_disk(
        &mut self,
        config: &VolumeConfig,
        status: &VolumeStatus,
        world: &World,
    ) -> Result<VolumeStatus, StepError> {
        let source = &config.locator.disk_match;
        let matcher =
            self.expression(source, true).map_err(|e| StepError::failed(format!("disk locator {source:?}: {e}")))?;
        let mut matched = Vec::new();
        for (name, disk) in &world.disks {
            let system_disk = world.system_disk.as_deref() == Some(name.as_str());
            let hit = Vars::new()
                .with_disk(disk)
                .and_then(|vars| matcher.matches(&vars.with_system_disk(system_disk)))
                .map_err(|e| StepError::failed(format!("disk locator {source:?} on {name}: {e}")))?;
            if hit {
                matched.push(name.as_str());
            }
        }
        let Some(name) = volumes::one_disk(&matched).map_err(StepError::failed)? else {
            return Ok(VolumeStatus {
                error_message: "no disk matches the locator".into(),
                ..volumes::advance(status, VolumePhase::Waiting)
            });
        };
        let Some((_, disk)) = world.disks.iter().find(|(n, _)| n == name) else {
            return Err(StepError::failed(format!("disk {name} is gone")));
        };
        let Some(v) = world.discovered.iter().find(|v| v.dev_path == disk.dev_path) else {
            return Ok(VolumeStatus {
                error_message: format!("waiting for {} to be probed", disk.dev_path),
                ..volumes::advance(status, VolumePhase::Waiting)
            });
        };
        Ok(VolumeStatus {
            location: v.dev_path.clone(),
            parent_location: String::new(),
            partition_index: 0,
            uuid: v.uuid.clone(),
            size: v.size,
            pretty_size: pretty_size(v.size),
            disk_matches: Vec::new(),
            ..volumes::advance(status, VolumePhase::Located)
        })
    }

    async fn grow(
        &mut self,
        ctx: &Context,
        config: &VolumeConfig,
        status: &VolumeStatus,
    ) -> Result<VolumeStatus, StepError> {
        let spec = &config.provisioning.partition_spec;
        if !spec.grow || status.partition_index == 0 || status.parent_location.is_empty() {
            return Ok(volumes::advance(status, VolumePhase::Provisioned));
        }
        let (disk, index, max) = (PathBuf::from(&status.parent_location), status.partition_index, spec.max_size);
        let grown = ctx
            .blocking("growing a partition", move || grow_partition(&disk, index, max))
            .await?
            .map_err(|e| StepError::failed(format!("growing {}: {e}", status.location)))?;
        let mut next = volumes::advance(status, VolumePhase::Provisioned);
        if let Some(size) = grown {
            crate::kernel::console::line(&format!("volume: grew {} to {}", status.location, pretty_size(size)));
            next.size = size;
            next.pretty_size = pretty_size(size);
            self.refresh += 1;
        }
        Ok(next)
    }

    /// A volume its config does not encrypt: used as it is, unless it holds LUKS (the config
    /// says nothing of how to open it). STATE waits a moment instead of failing: how it is
    /// encrypted comes from META, read just after META is found.
    async fn prepare_plain(
        &mut self,
        ctx: &Context,
        id: &str,
        status: &VolumeStatus,
    ) -> Result<VolumeStatus, StepError> {
        let at = PathBuf::from(&status.location);
        if at.exists() {
            let probe_at = at.clone();
            let found = ctx
                .blocking("probing a volume", move || probe_name(&probe_at))
                .await?
                .map_err(|e| StepError::failed(format!("probing {}: {e}", at.display())))?;
            if found.name == "luks" {
                let message = "volume is encrypted, but no encryption config provided".to_string();
                return Err(StepError { again: id == super::volume_config::STATE, message });
            }
        }
        Ok(VolumeStatus {
            mount_location: status.location.clone(),
            encryption_provider: EncryptionProvider::None,
            encryption_failed_syncs: Vec::new(),
            ..volumes::advance(status, VolumePhase::Prepared)
        })
    }

    /// Talos's `HandleEncryption` for LUKS2: a blank volume is encrypted, a LUKS2 one opened
    /// (any other content is refused), as `luks2-<id>`; the opened device is what the volume
    /// is formatted and mounted as.
    async fn prepare_encrypted(
        &mut self,
        ctx: &Context,
        id: &str,
        config: &VolumeConfig,
        status: &VolumeStatus,
    ) -> Result<VolumeStatus, StepError> {
        let (location, volume_id, spec) = (status.location.clone(), id.to_string(), config.encryption.clone());
        let salt = ctx
            .get::<EncryptionSalt>(crate::resources::secrets::NAMESPACE, EncryptionSalt::ID)?
            .map(|r| zeroize::Zeroizing::new(r.spec().disk_salt.clone()));
        if spec.keys.iter().any(|k| k.lock_to_state) {
            if id == super::volume_config::STATE {
                return Err(StepError::failed("lockToState: STATE cannot be locked to the salt it keeps"));
            }
            if salt.is_none() {
                // The salt comes once STATE is mounted; its resource wakes this controller.
                return Err(StepError {
                    message: "waiting for the encryption salt on STATE (a key is lockToState)".into(),
                    again: true,
                });
            }
        }
        let given = self.unlocks.take(id);
        let passphrase = given.as_ref().map(|g| g.passphrase.clone());
        let disk = if status.parent_location.is_empty() { location.clone() } else { status.parent_location.clone() };
        let opened = ctx
            .blocking("opening an encrypted volume", move || {
                let _locked = lock_disk(Path::new(&disk))?;
                open_encrypted(&location, &volume_id, &spec, salt.as_deref().map(|s| s.as_slice()), passphrase.as_ref())
            })
            .await?;
        if let Some(given) = given {
            let _ = given.reply.send(match &opened {
                Ok(o) => Ok(o.slot.unwrap_or_default()),
                Err(e) => Err(e.clone()),
            });
        }
        let opened = opened.map_err(|e| StepError::failed(format!("encryption: {e}")))?;
        let how = match (opened.formatted, opened.slot) {
            (true, Some(slot)) => format!("encrypted with key slot {slot}"),
            (false, Some(slot)) => format!("opened with key slot {slot}"),
            (_, None) => "already open".to_string(),
        };
        crate::kernel::console::line(&format!("volume {id}: {} {how} as {}", status.location, opened.mount_location));
        for failure in &opened.failed_syncs {
            crate::kernel::console::line(&format!("volume {id}: key sync: {failure}"));
        }
        if opened.formatted {
            self.refresh += 1;
        }
        Ok(VolumeStatus {
            mount_location: opened.mount_location,
            encryption_provider: EncryptionProvider::Luks2,
            encryption_failed_syncs: opened.failed_syncs,
            ..volumes::advance(status, VolumePhase::Prepared)
        })
    }

    async fn format(
        &mut self,
        ctx: &Context,
        id: &str,
        config: &VolumeConfig,
        status: &VolumeStatus,
    ) -> Result<VolumeStatus, StepError> {
        let device = PathBuf::from(&status.mount_location);
        let wanted = config.provisioning.filesystem_spec.kind;
        if !device.exists() {
            return Err(StepError { message: format!("waiting for {} to appear", device.display()), again: true });
        }
        let probe_at = device.clone();
        let found = ctx
            .blocking("probing a volume", move || probe_name(&probe_at))
            .await?
            .map_err(|e| StepError::failed(format!("probing {}: {e}", device.display())))?;
        if wanted == FilesystemType::None {
            // Raw and existing volumes: never formatted; an existing one is mounted with what
            // it holds.
            let mounted = !config.mount.target_path.is_empty();
            let filesystem =
                volumes::found_filesystem(&found.name, mounted, &status.mount_location).map_err(StepError::failed)?;
            return Ok(VolumeStatus { filesystem, ..volumes::advance(status, VolumePhase::Ready) });
        }
        // The label Talos gives: the system volumes' own, none for the documents' volumes.
        let label = config.provisioning.filesystem_spec.label.clone();
        match volumes::format_decision(wanted, &found.name, found.unfinished) {
            FormatDecision::Keep => Ok(volumes::advance(status, VolumePhase::Ready)),
            FormatDecision::Refuse(why) => Err(StepError::failed(why)),
            FormatDecision::Make if wanted == FilesystemType::Swap => {
                let (at, size, name) = (device.clone(), status.size, label.clone());
                ctx.blocking("writing a swap header", move || write_swap(&at, size, &name))
                    .await?
                    .map_err(|e| StepError::failed(format!("making swap on {}: {e}", device.display())))?;
                crate::kernel::console::line(&format!("volume {id}: made a swap area on {}", status.mount_location));
                self.refresh += 1;
                Ok(volumes::advance(status, VolumePhase::Ready))
            }
            decision @ (FormatDecision::Make | FormatDecision::Remake) => {
                // The size of what is formatted: an opened LUKS2 volume is its partition less
                // the header (16 MiB), which can cross mkfs.xfs's 300 MB floor.
                let size = device_size(&device).unwrap_or(status.size);
                let mut cmd = format::mkfs(&self.root, wanted, &status.mount_location, &label, size)
                    .map_err(|e| StepError::failed(e.to_string()))?;
                if decision == FormatDecision::Remake {
                    crate::kernel::console::line(&format!(
                        "volume {id}: the {} on {} was left unfinished by its mkfs; it is made again",
                        wanted.fstype(),
                        status.mount_location
                    ));
                    cmd = cmd.over_unfinished(wanted);
                }
                crate::kernel::console::line(&format!(
                    "volume {id}: formatting {} as {}",
                    status.mount_location,
                    wanted.fstype()
                ));
                run(self.reaper.clone(), &cmd).await.map_err(StepError::failed)?;
                self.refresh += 1;
                Ok(volumes::advance(status, VolumePhase::Ready))
            }
        }
    }
}

/// Runs a formatter to its end; its stderr, if it fails, is the error.
async fn run(reaper: Arc<Reaper>, cmd: &format::MkfsCommand) -> Result<(), String> {
    reaper.run_to_end(&cmd.program, &cmd.args, &cmd.env).await
}

/// The disk's partition table as it is to be written: read (following a disk that grew), or
/// a new one on a disk that carries nothing at all.
fn table_of(dev: &KernelDisk) -> Result<gpt::Table, String> {
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

/// How long after the first look with no device discovered a volume is still not called
/// missing (the devices' controller may not have listed them yet).
const NOTHING_DISCOVERED_GRACE: Duration = Duration::from_secs(5);

/// The partitions the kernel has, of the disks known or discovered or that a discovered
/// partition is on (discovery may show a device before its disk's resource is there), that
/// discovery has not shown yet.
fn undiscovered(world: &World) -> Vec<String> {
    let mut disks: Vec<&str> = world.disks.iter().map(|(_, d)| d.dev_path.as_str()).collect();
    disks.extend(
        world
            .discovered
            .iter()
            .map(|v| if v.parent_dev_path.is_empty() { v.dev_path.as_str() } else { v.parent_dev_path.as_str() }),
    );
    disks.sort_unstable();
    disks.dedup();
    disks
        .into_iter()
        .flat_map(kernel_partitions)
        .filter(|p| !world.discovered.iter().any(|v| &v.dev_path == p))
        .collect()
}

/// The partitions the kernel has of the disk at `dev_path` (`/dev/vdb` → `/dev/vdb1`, ...),
/// from sysfs.
fn kernel_partitions(dev_path: &str) -> Vec<String> {
    let disk = Path::new(dev_path);
    let (Some(name), Some(dir)) = (disk.file_name(), disk.parent()) else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(Path::new("/sys/class/block").join(name)) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.path().join("partition").is_file())
        .map(|e| dir.join(e.file_name()).display().to_string())
        .collect()
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

/// How long a writer of a disk waits for another to let go of it (Talos's 10 s); past that
/// the step fails and is tried again at the next retry.
const DISK_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The whole disk at `disk`, opened and exclusively locked while the returned device lives:
/// partitioning, growing, encrypting and wiping never interleave on one disk (the API's wipe
/// takes the same lock).
fn lock_disk(disk: &Path) -> Result<KernelDisk, String> {
    KernelDisk::open_locked(disk, DISK_LOCK_TIMEOUT).map_err(|e| e.to_string())
}

/// Writes a swap header over the start of `device` (of `size` bytes) with a fresh random UUID.
fn write_swap(device: &Path, size: u64, label: &str) -> Result<(), String> {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let mut uuid = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut uuid))
        .map_err(|e| format!("reading /dev/urandom: {e}"))?;
    // An RFC 4122 version 4 UUID, as mkswap and Talos make.
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    let page = crate::block::swap::header(rustix::param::page_size(), size, uuid, label).map_err(|e| e.to_string())?;
    let file = std::fs::OpenOptions::new().write(true).open(device).map_err(|e| e.to_string())?;
    file.write_all_at(&page, 0).and_then(|()| file.sync_all()).map_err(|e| e.to_string())
}

/// An encrypted volume opened: the mapped device, the slot that opened it (`None` when the
/// mapping was open already), whether it was formatted now, and the slots that did not sync.
struct Opened {
    mount_location: String,
    slot: Option<u32>,
    formatted: bool,
    failed_syncs: Vec<String>,
}

/// Where the kernel gives the machine's SMBIOS UUID (QEMU's `-uuid`).
const PRODUCT_UUID: &str = "/sys/class/dmi/id/product_uuid";

/// The dm-crypt flags of Talos's `perfOptions` and `allowDiscards`.
fn dm_options(spec: &crate::resources::block::EncryptionSpec) -> Result<DmCryptOptions, String> {
    let mut o = DmCryptOptions { allow_discards: spec.allow_discards, ..DmCryptOptions::default() };
    for opt in &spec.perf_options {
        match opt.as_str() {
            "same_cpu_crypt" => o.same_cpu_crypt = true,
            "no_read_workqueue" => o.no_read_workqueue = true,
            "no_write_workqueue" => o.no_write_workqueue = true,
            other => {
                return Err(format!(
                    "encryption.options: {other:?} is not a dm-crypt performance option (same_cpu_crypt, no_read_workqueue, no_write_workqueue)"
                ));
            }
        }
    }
    Ok(o)
}

/// Opens (or first encrypts) the volume at `location` as `luks2-<volume_id>` in dm-crypt.
fn open_encrypted(
    location: &str,
    volume_id: &str,
    spec: &crate::resources::block::EncryptionSpec,
    salt: Option<&[u8]>,
    given: Option<&zeroize::Zeroizing<Vec<u8>>>,
) -> Result<Opened, String> {
    use crate::block::{encryption, luks2};
    use crate::kernel::dm;
    use std::io::{Seek, SeekFrom};

    let dm_opts = dm_options(spec)?;
    // dm-crypt, and what its one cipher is built from without AES-NI (the xts template over
    // ecb(aes)): the kernel would ask for them itself from inside the table load, where any
    // failure comes back as ENOENT alone.
    for module in ["dm-crypt", "xts", "ecb"] {
        crate::kernel::modules::Loader::shared()
            .and_then(|l| l.load(module))
            .map_err(|e| format!("loading {module}: {e}"))?;
    }
    let name = luks2::mapping_name(volume_id);
    if let Some(m) = dm::find(&name).map_err(|e| e.to_string())? {
        return Ok(Opened {
            mount_location: m.dev_path().display().to_string(),
            slot: None,
            formatted: false,
            failed_syncs: Vec::new(),
        });
    }
    let found = probe_name(Path::new(location))?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(location)
        .map_err(|e| format!("opening {location}: {e}"))?;
    let uuid = std::fs::read_to_string(PRODUCT_UUID).ok().map(|u| u.trim().to_ascii_lowercase());
    let kms = crate::client::kms::GrpcKms;
    let tpm = crate::block::tpm_key::NodeTpm;
    let env = encryption::KeyEnv {
        volume_id,
        machine_uuid: uuid.as_deref(),
        salt,
        kms: Some(&kms),
        tpm: Some(&tpm),
        given: given.map(|g| g.as_slice()),
    };
    let key_len = if spec.key_size == 0 { 64 } else { spec.key_size as usize / 8 };
    let mut timed: Option<luks2::Kdf> = None;
    let mut kdf = || -> Result<luks2::Kdf, String> {
        if let Some(k) = timed {
            return Ok(k);
        }
        let k = encryption::host_kdf(luks2::TALOS_ITER_TIME, key_len)?;
        timed = Some(k);
        Ok(k)
    };
    let (unlocked, formatted) = match found.name.as_str() {
        "" => (encryption::format(&mut file, spec, &env, &mut kdf)?, true),
        "luks" => (encryption::open(&mut file, spec, &env, &mut kdf)?, false),
        other => return Err(format!("block dev type mismatch: {other} != luks")),
    };
    let stat = rustix::fs::fstat(&file).map_err(|e| format!("stat {location}: {e}"))?;
    let devno = format!("{}:{}", rustix::fs::major(stat.st_rdev), rustix::fs::minor(stat.st_rdev));
    let sectors = file.seek(SeekFrom::End(0)).map_err(|e| format!("sizing {location}: {e}"))? / 512;
    let line =
        luks2::dm_crypt_table(&unlocked.header, &unlocked.key, &devno, sectors, &dm_opts).map_err(|e| e.to_string())?;
    let mut fields = line.splitn(3, ' ');
    let (start, length, params) = match (fields.next(), fields.next(), fields.next()) {
        (Some(s), Some(l), Some(p)) => (s.parse::<u64>().unwrap_or(0), l.parse::<u64>().unwrap_or(0), p),
        _ => return Err("the dm-crypt table line is short".into()),
    };
    let dm_uuid = format!("CRYPT-LUKS2-{}-{name}", unlocked.header.uuid.replace('-', ""));
    let mapping = dm::create(&name, &dm_uuid, &[dm::Target { start, length, kind: "crypt", params }], false)
        .map_err(|e| e.to_string())?;
    Ok(Opened {
        mount_location: mapping.dev_path().display().to_string(),
        slot: Some(unlocked.slot),
        formatted,
        failed_syncs: unlocked.failed_syncs,
    })
}

/// The size of a block device (or file) in bytes.
fn device_size(device: &Path) -> Option<u64> {
    use std::io::{Seek, SeekFrom};
    std::fs::File::open(device).and_then(|mut f| f.seek(SeekFrom::End(0))).ok()
}

/// What the probe found on a volume.
struct Found {
    /// Talos's name (`""`: nothing known).
    name: String,
    unfinished: bool,
}

fn probe_name(device: &Path) -> Result<Found, String> {
    let found = probe::probe_path(device, 512).map_err(|e| e.to_string())?;
    Ok(Found {
        name: found.as_ref().map(|f| f.name().to_string()).unwrap_or_default(),
        unfinished: found.is_some_and(|f| f.unfinished),
    })
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
}

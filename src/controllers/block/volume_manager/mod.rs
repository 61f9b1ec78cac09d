//! `VolumeManagerController`: drives every `VolumeConfig` toward a ready volume, one step per
//! phase (Waiting → Located → Provisioned → Prepared → Ready) as Talos's volume manager does,
//! and records each in its `VolumeStatus`. The decisions are pure functions, each in the file
//! of the phase it decides for and table-tested there (the step each phase calls for, the
//! order and the waves in [`step`]); this module gathers their inputs and carries out what they
//! decide, one file per phase as Talos's `internal/volumes` is laid out: [`locate`] finds a
//! volume, [`partition`] carves it into a disk's GPT (and announces it to the kernel),
//! [`grow`] grows it into free space, [`encrypt`] opens or makes its LUKS2 layer, [`format`]
//! makes its filesystem with the mkfs programs the rootfs carries (or writes a swap header),
//! [`close`] closes it, and [`wipe`] runs the `DiskWipeConfig` wipes.
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
//!
//! The KMS and TPM that `kms` and `tpm` keys are sealed with are handed in at construction:
//! a node gives its real ones, a test its fakes. Nothing here reaches a KMS server or a TPM
//! on its own.

mod close;
mod encrypt;
mod format;
mod grow;
mod locate;
mod partition;
mod step;
mod wipe;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::unlock::Unlocks;
use crate::block::encryption::{Kms, Tpm};
use crate::block::probe;
use crate::block::selector::{Env, Expression};
use crate::cosi::{Changes, Context, Controller, EventSource, Input, Output, ReconcileError};
use crate::kernel::blockdev::BlockDevice as KernelDisk;
use crate::resources::block::{
    DiscoveredVolume, DiscoveryRefreshRequest, DiscoveryRefreshStatus, Disk, DiskWipeConfig, DiskWipeStatus,
    EncryptionProvider, FilesystemType, MountStatus, NAMESPACE, REFRESH_ID, SystemDisk, VolumeConfig, VolumeLifecycle,
    VolumePhase, VolumeStatus,
};
use crate::resources::secrets::EncryptionSalt;
use crate::services::Reaper;
use step::{PhaseInputs, Step};

pub use partition::partition_name;

/// How long a device node may take to appear after the kernel is told of a partition.
const DEVICE_NODE_WAIT: Duration = Duration::from_secs(1);
/// How soon a volume being closed is looked at again when nothing else wakes the manager
/// (a mapping still busy).
const CLOSE_RETRY: Duration = Duration::from_secs(1);
/// The most steps one volume takes in one pass (Waiting → Ready is four).
const MAX_STEPS: usize = 8;

pub struct VolumeManagerController {
    reaper: Arc<Reaper>,
    /// Where `kms` keys are sealed and unsealed.
    kms: Arc<dyn Kms>,
    /// The TPM `tpm` keys are sealed to.
    tpm: Arc<dyn Tpm>,
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
    wiped_now: BTreeSet<(String, String)>,
}

impl VolumeManagerController {
    /// Spawns formatters through `reaper` (machined reaps every child; nothing else may wait),
    /// and seals and unseals `kms` and `tpm` keys with `kms` and `tpm`.
    pub fn new(reaper: Arc<Reaper>, kms: Arc<dyn Kms>, tpm: Arc<dyn Tpm>) -> Self {
        VolumeManagerController {
            reaper,
            kms,
            tpm,
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
    /// The volumes something is mounted from.
    mounted: BTreeSet<String>,
}

/// The volumes of one pass: the configs in force in the order they are taken, those taken
/// away, and the statuses as they stand.
struct Volumes {
    configs: Vec<(String, VolumeConfig)>,
    leaving: Vec<crate::cosi::Resource<VolumeConfig>>,
    statuses: BTreeMap<String, VolumeStatus>,
}

/// When the manager looks again: the soonest of what each volume asks for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct RetryIn(Option<Duration>);

impl RetryIn {
    fn at_most(&mut self, after: Duration) {
        self.0 = Some(self.0.map_or(after, |r| r.min(after)));
    }
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
        let Volumes { configs, leaving, mut statuses } = self.volumes(ctx)?;
        let mut world = self.world(ctx)?;

        // While the lifecycle stands the volumes stay open; once machined tears it down (the
        // node is going down) every volume is closed, and nothing is located or made.
        match ctx.get::<VolumeLifecycle>(NAMESPACE, VolumeLifecycle::ID)? {
            Some(lifecycle) if lifecycle.is_running() => ctx.hold(&lifecycle)?,
            Some(lifecycle) => return self.close_all(ctx, &lifecycle, &statuses, &world).await,
            None => {}
        }

        ctx.start_tracking_outputs();
        ctx.apply(NAMESPACE, REFRESH_ID, DiscoveryRefreshRequest { request: self.refresh })?;
        let mut retry_in = RetryIn::default();
        // Wipes first: nothing is provisioned on a disk in the pass that wipes it.
        if !self.run_wipes(ctx, &mut world, &statuses, &configs).await? {
            retry_in.at_most(step::RETRY_AFTER);
        }
        for (id, config) in &configs {
            let status = self.drive(ctx, id, config, &configs, &mut statuses, &mut world, &mut retry_in).await?;
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
                && !self.close(ctx, id, status, world.mounted.contains(id)).await?
            {
                retry_in.at_most(CLOSE_RETRY);
                continue;
            }
            if ctx.remove::<VolumeStatus>(NAMESPACE, id)? {
                ctx.release(config)?;
            }
        }
        // A refresh asked for in this pass.
        ctx.apply(NAMESPACE, REFRESH_ID, DiscoveryRefreshRequest { request: self.refresh })?;
        ctx.cleanup_outputs()?;
        if let Some(after) = retry_in.0 {
            ctx.requeue_after(after);
        }
        Ok(())
    }
}

impl VolumeManagerController {
    /// The volume configs (held, in Talos's order) and statuses of this pass.
    fn volumes(&self, ctx: &mut Context) -> Result<Volumes, ReconcileError> {
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
        configs.sort_by(|a, b| step::order_key(&a.0, &a.1).cmp(&step::order_key(&b.0, &b.1)));
        let statuses = ctx
            .list::<VolumeStatus>(NAMESPACE)?
            .into_iter()
            .filter(|r| r.is_running())
            .map(|r| (r.metadata().id.clone(), r.spec().clone()))
            .collect();
        Ok(Volumes { configs, leaving, statuses })
    }

    /// The disks, what is discovered on them and mounted from them, as this pass sees them.
    fn world(&self, ctx: &Context) -> Result<World, ReconcileError> {
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
            mounted: ctx.list::<MountStatus>(NAMESPACE)?.into_iter().map(|r| r.metadata().id.clone()).collect(),
        };
        // Settled: the discovery answered our last request and has probed every disk.
        world.discovery_settled = settled_request.is_some_and(|r| r >= self.refresh)
            && world.disks.iter().all(|(_, d)| world.discovered.iter().any(|v| v.dev_path == d.dev_path));
        Ok(world)
    }

    /// Takes volume `id` as far toward ready as it goes in this pass (at most [`MAX_STEPS`]
    /// steps), and gives the status it reached.
    #[allow(clippy::too_many_arguments)]
    async fn drive(
        &mut self,
        ctx: &mut Context,
        id: &String,
        config: &VolumeConfig,
        configs: &[(String, VolumeConfig)],
        statuses: &mut BTreeMap<String, VolumeStatus>,
        world: &mut World,
        retry_in: &mut RetryIn,
    ) -> Result<VolumeStatus, ReconcileError> {
        let mut status = statuses.get(id).cloned().unwrap_or_else(|| step::initial(config));
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
                    step::device_gone(&status, &seen, world.mounted.contains(id), |path| Path::new(path).exists())
                },
            };
            let phase = status.phase;
            let outcome = match step::next_step(&inputs) {
                Step::Done => break,
                Step::Wait(why) => {
                    if phase == VolumePhase::Failed {
                        retry_in.at_most(step::RETRY_AFTER.saturating_sub(inputs.failed_for));
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
                    let earlier = step::earlier_waves_ready(config.provisioning.wave, &waves);
                    self.locate_and_provision(ctx, id, config, &status, earlier, world).await
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
                    if status.phase == VolumePhase::Ready && !locate::is_ready_at_once(status.kind) {
                        crate::kernel::console::line(&format!(
                            "volume {id}: ready at {} ({})",
                            status.location, status.pretty_size
                        ));
                    }
                }
                Err(e) if e.again => {
                    status.error_message = e.message;
                    retry_in.at_most(DEVICE_NODE_WAIT);
                    break;
                }
                Err(e) => {
                    crate::kernel::console::line(&format!("volume {id}: {phase}: {}; retrying in 30s", e.message));
                    status = step::fail(&status, phase, e.message);
                    self.failed_at.insert(id.clone(), Instant::now());
                    self.failed_config.insert(id.clone(), config.clone());
                    retry_in.at_most(step::RETRY_AFTER);
                    break;
                }
            }
        }
        Ok(status)
    }
}

/// A step that did not go through: `again` when it only has to wait a moment (a device node
/// not there yet), else a failure that waits for the 30 s retry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StepError {
    message: String,
    again: bool,
}

impl StepError {
    fn failed(message: impl Into<String>) -> Self {
        StepError { message: message.into(), again: false }
    }

    fn again(message: impl Into<String>) -> Self {
        StepError { message: message.into(), again: true }
    }
}

impl From<crate::cosi::ContextError> for StepError {
    fn from(e: crate::cosi::ContextError) -> Self {
        StepError::failed(e.to_string())
    }
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

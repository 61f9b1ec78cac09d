//! machined's side of the machine API: the [`Node`] the API acts on, over the configuration
//! store, the service supervisor, the event log and machined's own log.
//!
//! apid is the only door: it cannot be stopped through the API (there would be no way back
//! in), only restarted.

use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::Status;

use super::config_store::{ApplyGuard, ConfigStore};
use crate::api::events::EventLog;
use crate::api::node::{
    ApplyPermit, BlockDeviceWipe, LogSource, Node, NodeMode, PowerAction, ResetRequest, ServiceAction,
    ServiceEventInfo, ServiceInfo, StoreMode,
};
use crate::controllers::block::system_disk::META_VOLUME;
use crate::kernel::power::PowerAction as Power;
use crate::services::{LogRing, Supervisor, SupervisorError};

/// The services the API may not stop.
const UNSTOPPABLE: &[&str] = &["apid"];

/// How long an unlock waits for the volume manager to try the passphrase (a slot's argon2id
/// takes seconds under emulation, and a volume may have several).
const UNLOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

pub struct MachineNode {
    pub platform: (String, String),
    pub hostname: Box<dyn Fn() -> String + Send + Sync>,
    pub store: Arc<ConfigStore>,
    pub supervisor: Arc<Supervisor>,
    pub events: Arc<EventLog>,
    pub log: LogRing,
    pub power: mpsc::UnboundedSender<Power>,
    pub meta: Arc<crate::block::meta::MetaStore>,
    /// The node's resources (volumes and disks, for Reset); `None` in container mode, where
    /// the node has no disks of its own.
    pub state: Option<crate::cosi::State>,
    /// Where the unlock RPC hands passphrases to the volume manager.
    pub unlocks: Arc<crate::controllers::block::unlock::Unlocks>,
    /// The boot disk's life (upgrades, rollbacks); `None` in container mode.
    pub lifecycle: Option<Arc<super::lifecycle::Lifecycle>>,
}

impl MachineNode {
    /// The volumes, disks and system disk the node knows now.
    fn storage(&self) -> super::reset::Storage {
        use crate::resources::block::{Disk, NAMESPACE, SystemDisk, VolumeStatus};
        let Some(state) = &self.state else { return super::reset::Storage::default() };
        super::reset::Storage {
            volumes: state
                .list::<VolumeStatus>(NAMESPACE)
                .iter()
                .map(|v| (v.metadata().id.clone(), v.spec().location.clone()))
                .collect(),
            disks: state
                .list::<Disk>(NAMESPACE)
                .iter()
                .map(|d| (d.spec().dev_path.clone(), d.spec().readonly))
                .collect(),
            system_disk: state.get::<SystemDisk>(NAMESPACE, SystemDisk::ID).ok().map(|d| d.spec().dev_path.clone()),
        }
    }
}

struct Ring(LogRing);

impl LogSource for Ring {
    fn tail(&self, n: Option<usize>) -> (Vec<String>, u64) {
        self.0.tail(n)
    }
    fn since(&self, from: u64) -> (Vec<String>, u64) {
        self.0.since(from)
    }
    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.subscribe()
    }
}

struct Permit {
    store: Arc<ConfigStore>,
    guard: ApplyGuard,
}

impl ApplyPermit for Permit {
    fn store(&self, text: &str, mode: StoreMode) -> Result<(), Status> {
        let failed = |e: super::config_store::StoreError| Status::internal(e.to_string());
        match mode {
            StoreMode::Now => self.store.apply_now(&self.guard, text).map_err(failed),
            StoreMode::Staged => self.store.apply_staged(&self.guard, text).map_err(failed),
            StoreMode::Try(timeout) => {
                self.store.apply_try(&self.guard, text, timeout);
                Ok(())
            }
        }
    }
}

fn service_status(e: SupervisorError) -> Status {
    match e {
        SupervisorError::Unknown { .. } => Status::not_found(e.to_string()),
        SupervisorError::AlreadyRunning { .. } => Status::failed_precondition(e.to_string()),
        _ => Status::internal(e.to_string()),
    }
}

#[tonic::async_trait]
impl Node for MachineNode {
    fn mode(&self) -> NodeMode {
        if self.store.snapshot().active.is_some() { NodeMode::Configured } else { NodeMode::Maintenance }
    }

    fn hostname(&self) -> String {
        (self.hostname)()
    }

    fn platform(&self) -> (String, String) {
        self.platform.clone()
    }

    fn power(&self, action: PowerAction) -> Result<(), Status> {
        let action = match action {
            PowerAction::Reboot => Power::Reboot,
            PowerAction::PowerOff => Power::PowerOff,
        };
        self.power.send(action).map_err(|_| Status::unavailable("machined is already going down"))
    }

    async fn reset(&self, request: ResetRequest) -> Result<(), Status> {
        let storage = self.storage();
        let plan = super::reset::plan(&request, &storage).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let guard = self
            .store
            .begin_apply()
            .ok_or_else(|| Status::failed_precondition("a configuration apply is in progress"))?;
        if plan.forget_config {
            self.store.forget(&guard).map_err(|e| Status::internal(e.to_string()))?;
        }
        if plan.forget_state_encryption
            && let Some((_, meta)) = storage.volumes.iter().find(|(id, l)| id == META_VOLUME && !l.is_empty())
        {
            let tag = crate::controllers::block::volume_config::STATE_ENCRYPTION_TAG;
            let removed = self
                .meta
                .update(meta.into(), move |m| Ok(m.delete(tag)))
                .await
                .map_err(|e| Status::internal(format!("removing STATE's encryption from META: {e}")))?;
            if removed {
                crate::kernel::console::line("reset: STATE's encryption is removed from META");
            }
        }
        for device in &plan.wipe {
            crate::kernel::console::line(&format!("reset: {} is wiped before the node goes down", device.display()));
        }
        *super::reset_wipes() = plan.wipe;
        self.power(if request.reboot { PowerAction::Reboot } else { PowerAction::PowerOff })
    }

    fn meta(&self) -> Arc<crate::block::meta::MetaStore> {
        Arc::clone(&self.meta)
    }

    async fn query_time(&self, server: &str) -> Result<(std::time::SystemTime, i128), Status> {
        use crate::controllers::network::{NetworkTarget, TimeSyncError, time_sync};
        let clock = crate::kernel::clock::SystemClock;
        match time_sync::query(&NetworkTarget::Node, &clock, server).await {
            Ok(m) => Ok((std::time::SystemTime::now(), m.offset_nanos)),
            Err(e @ (TimeSyncError::Timeout { .. } | TimeSyncError::Io { .. } | TimeSyncError::NoAddress { .. })) => {
                Err(Status::unavailable(e.to_string()))
            }
            Err(e) => Err(Status::failed_precondition(e.to_string())),
        }
    }

    async fn unlock_volume(&self, volume: &str, passphrase: zeroize::Zeroizing<Vec<u8>>) -> Result<u32, Status> {
        use crate::resources::block::{EncryptionProvider, NAMESPACE, VolumeConfig, VolumePhase, VolumeStatus};
        let Some(state) = &self.state else {
            return Err(Status::failed_precondition("this node runs as a process (container mode): it has no volumes"));
        };
        let config = state
            .get::<VolumeConfig>(NAMESPACE, volume)
            .map_err(|_| Status::not_found(format!("no volume {volume} on this node")))?;
        if config.spec().encryption.provider != EncryptionProvider::Luks2 {
            return Err(Status::failed_precondition(format!("volume {volume} is not encrypted")));
        }
        let phase = |state: &crate::cosi::State| {
            state.get::<VolumeStatus>(NAMESPACE, volume).map(|s| s.spec().phase).unwrap_or_default()
        };
        if matches!(phase(state), VolumePhase::Prepared | VolumePhase::Ready) {
            return Err(Status::failed_precondition(format!("volume {volume} is open already")));
        }
        let outcome = self.unlocks.give(volume, passphrase);
        match tokio::time::timeout(UNLOCK_WAIT, outcome).await {
            Ok(Ok(Ok(slot))) => Ok(slot),
            Ok(Ok(Err(why))) => Err(Status::permission_denied(format!("volume {volume} did not open: {why}"))),
            Ok(Err(_)) => Err(Status::aborted(format!("the attempt on volume {volume} was dropped"))),
            Err(_) => {
                self.unlocks.withdraw(volume);
                Err(Status::deadline_exceeded(format!(
                    "volume {volume} was not tried within {}s (it is {})",
                    UNLOCK_WAIT.as_secs(),
                    phase(state)
                )))
            }
        }
    }

    async fn wipe_block_devices(&self, wipes: Vec<BlockDeviceWipe>) -> Result<(), Status> {
        if self.state.is_none() {
            return Err(Status::failed_precondition("this node runs as a process (container mode): it has no disks"));
        }
        let done = tokio::task::spawn_blocking(move || {
            for wipe in &wipes {
                wipe_block_device(wipe, std::path::Path::new("/dev"), std::path::Path::new("/sys/class/block"))?;
            }
            Ok(())
        })
        .await;
        done.map_err(|e| Status::internal(format!("the wipe did not finish: {e}")))?
    }

    async fn upgrade(&self, image: &str, progress: mpsc::UnboundedSender<String>) -> Result<(), Status> {
        let Some(lc) = &self.lifecycle else {
            return Err(Status::failed_precondition(
                "this node runs as a process (container mode): it has no boot disk",
            ));
        };
        let source = if image.starts_with("http://") || image.starts_with("https://") {
            super::lifecycle::Source::Url(image.to_string())
        } else if image.starts_with(crate::api::lifecycle_service::UPLOAD_PREFIX) {
            let root = self.uploads().ok_or_else(|| Status::failed_precondition("this node takes no uploads"))?;
            super::lifecycle::Source::Dir(crate::api::lifecycle_service::upload_dir(&root, image)?)
        } else {
            return Err(Status::invalid_argument(format!(
                "image {image:?}: an http(s) URL of an imager output directory, or an upload (upload:<id>; talosctl upgrade --image DIR uploads one)"
            )));
        };
        let mut send = move |line: String| {
            let _ = progress.send(line);
        };
        lc.upgrade(source, &mut send).await.map(drop).map_err(|e| e.to_status())
    }

    async fn rollback(&self) -> Result<(), Status> {
        let Some(lc) = &self.lifecycle else {
            return Err(Status::failed_precondition(
                "this node runs as a process (container mode): it has no boot disk",
            ));
        };
        lc.rollback().await.map(drop).map_err(|e| e.to_status())
    }

    fn uploads(&self) -> Option<std::path::PathBuf> {
        self.lifecycle.as_ref().map(|lc| lc.scratch.join("uploads"))
    }

    fn services(&self) -> Vec<ServiceInfo> {
        self.supervisor
            .snapshot()
            .into_iter()
            .map(|s| ServiceInfo {
                id: s.name,
                state: s.state.to_string(),
                healthy: None,
                message: s.message,
                last_change: s.history.last().map(|e| e.at),
                events: s
                    .history
                    .into_iter()
                    .map(|e| ServiceEventInfo { message: e.message, state: e.state.to_string(), at: e.at })
                    .collect(),
            })
            .collect()
    }

    async fn service(&self, id: &str, action: ServiceAction) -> Result<(), Status> {
        if self.supervisor.service(id).is_none() {
            return Err(Status::not_found(format!("service {id:?} not found")));
        }
        match action {
            ServiceAction::Stop if UNSTOPPABLE.contains(&id) => Err(Status::failed_precondition(format!(
                "service {id:?} cannot be stopped: it is the API's only door (restart it instead)"
            ))),
            ServiceAction::Stop => self.supervisor.stop(id).await.map_err(service_status),
            ServiceAction::Start => self.supervisor.start_again(id).map_err(service_status),
            ServiceAction::Restart => self.supervisor.restart(id).await.map_err(service_status),
        }
    }

    fn logs(&self, id: &str) -> Option<Arc<dyn LogSource>> {
        let ring = if id == "machined" { Some(self.log.clone()) } else { self.supervisor.logs(id) };
        ring.map(|r| Arc::new(Ring(r)) as Arc<dyn LogSource>)
    }

    fn events(&self) -> Arc<EventLog> {
        self.events.clone()
    }

    fn configs(&self) -> (Option<Arc<str>>, Option<Arc<str>>) {
        let s = self.store.snapshot();
        (s.active.map(|c| c.text().clone()), s.persisted.map(|c| c.text().clone()))
    }

    fn begin_apply(&self) -> Option<Box<dyn ApplyPermit>> {
        let guard = self.store.begin_apply()?;
        Some(Box::new(Permit { store: self.store.clone(), guard }))
    }
}

/// Wipes one device (under `dev`, normally `/dev`), drops its partition when asked, and has
/// the kernel announce the change (a `change` uevent through `sys_class_block`, normally
/// `/sys/class/block`), which moves the device's generation so discovery probes it again.
/// A device that is mounted or held is FailedPrecondition and left as it was.
pub fn wipe_block_device(
    wipe: &BlockDeviceWipe,
    dev: &std::path::Path,
    sys_class_block: &std::path::Path,
) -> Result<(), Status> {
    use crate::block::wipe;
    use crate::kernel::console;
    let path = dev.join(&wipe.device);
    // The volume manager's lock on the whole disk: no wipe while it partitions or encrypts.
    let whole = std::fs::canonicalize(sys_class_block.join(&wipe.device))
        .ok()
        .filter(|p| p.join("partition").is_file())
        .and_then(|p| p.parent().and_then(|d| d.file_name()).map(|d| dev.join(d)))
        .unwrap_or_else(|| path.clone());
    let _locked = crate::kernel::blockdev::BlockDevice::open_locked(&whole, std::time::Duration::from_secs(10))
        .map_err(|e| match e {
            crate::kernel::blockdev::BlockDevError::Locked { .. } => Status::unavailable(e.to_string()),
            e => Status::internal(e.to_string()),
        })?;
    match wipe::wipe(&path, wipe.method) {
        Ok(size) => console::line(&format!("wipe: {} wiped ({:?}, {size} bytes)", path.display(), wipe.method)),
        Err(e) if e.in_use() => {
            return Err(Status::failed_precondition(format!(
                "block device {:?} is mounted or in use: {e}",
                wipe.device
            )));
        }
        Err(e) => return Err(Status::internal(e.to_string())),
    }
    let mut announce = vec![wipe.device.clone()];
    if let Some((disk, number)) = &wipe.drop_partition {
        let disk_path = dev.join(disk);
        let device =
            crate::kernel::blockdev::BlockDevice::open(&disk_path).map_err(|e| Status::internal(e.to_string()))?;
        let size = device.size_bytes().map_err(|e| Status::internal(e.to_string()))?;
        let sector = device.logical_sector_size().map_err(|e| Status::internal(e.to_string()))?;
        wipe::remove_partition(device.file(), &disk_path, size, sector, *number)
            .map_err(|e| Status::internal(e.to_string()))?;
        // The table no longer has it; the kernel's view follows (its node goes, with a remove uevent).
        device.delete_partition(*number).map_err(|e| Status::internal(e.to_string()))?;
        console::line(&format!("wipe: partition {number} dropped from {}", disk_path.display()));
        announce = vec![disk.clone()];
    }
    for name in announce {
        let uevent = sys_class_block.join(&name).join("uevent");
        if let Err(e) = std::fs::write(&uevent, "change") {
            console::line(&format!("wipe: announcing the change of {name} ({}): {e}", uevent.display()));
        }
    }
    Ok(())
}

//! What the machine API needs from the node it runs on, beyond reading the state: the actions
//! machined carries out (power, services, the configuration store, META) and the logs and
//! events it keeps. machined implements [`Node`]; the API depends only on this trait, never on
//! machined.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tonic::Status;

pub use super::authz::NodeMode;
use super::events::EventLog;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    Reboot,
    PowerOff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceAction {
    Start,
    Stop,
    Restart,
}

/// One state change of a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEventInfo {
    pub message: String,
    pub state: String,
    pub at: SystemTime,
}

/// One service as ServiceList reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    pub id: String,
    /// Talos's state names: `Running`, `Waiting`, `Finished` …
    pub state: String,
    /// `None`: health unknown (no health check).
    pub healthy: Option<bool>,
    pub message: String,
    pub last_change: Option<SystemTime>,
    pub events: Vec<ServiceEventInfo>,
}

/// A log that can be tailed and followed by line number.
pub trait LogSource: Send + Sync {
    /// The last `n` lines (all for `None`) and the number of the next line.
    fn tail(&self, n: Option<usize>) -> (Vec<String>, u64);
    /// Lines from number `from` on that are still held, and the next number.
    fn since(&self, from: u64) -> (Vec<String>, u64);
    /// Changes after every new line.
    fn subscribe(&self) -> watch::Receiver<u64>;
}

/// How a stored configuration takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// Stored and in force now.
    Now,
    /// Stored for the next boot.
    Staged,
    /// In force now, not stored, rolled back after the timeout.
    Try(Duration),
}

/// Talos's `ResetRequest.WipeMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WipeMode {
    #[default]
    All,
    SystemDisk,
    UserDisks,
}

impl WipeMode {
    pub fn from_wire(mode: i32) -> Option<WipeMode> {
        match mode {
            0 => Some(WipeMode::All),
            1 => Some(WipeMode::SystemDisk),
            2 => Some(WipeMode::UserDisks),
            _ => None,
        }
    }
}

/// A Reset request, off the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetRequest {
    pub reboot: bool,
    pub mode: WipeMode,
    /// (label, wipe) of each system partition named.
    pub system_partitions: Vec<(String, bool)>,
    pub user_disks: Vec<String>,
}

/// One block device to wipe, checked against the node's volumes and disks by the storage
/// service (`api::storage_service`) before the node is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDeviceWipe {
    /// The kernel name: `vdb`, `vdb2`.
    pub device: String,
    pub method: crate::block::wipe::Method,
    /// After the wipe, remove the partition from its disk's table: (the disk's kernel name,
    /// the partition number). `None` for a disk, or when not asked.
    pub drop_partition: Option<(String, u32)>,
}

/// The right to apply, held for the length of one ApplyConfiguration call.
pub trait ApplyPermit: Send {
    /// Stores (already validated) `text`.
    fn store(&self, text: &str, mode: StoreMode) -> Result<(), Status>;
}

/// The node, as the machine API acts on it.
#[tonic::async_trait]
pub trait Node: Send + Sync + 'static {
    /// Maintenance (no configuration yet) or configured.
    fn mode(&self) -> NodeMode;
    fn hostname(&self) -> String;
    /// Talos's platform name and mode: (`metal`, `metal`) on a node, (`container`,
    /// `container`) for a node run as a process.
    fn platform(&self) -> (String, String);
    /// Asks for a reboot or power-off; returns once it is underway.
    fn power(&self, action: PowerAction) -> Result<(), Status>;
    /// Wipes what `request` names (see `machined::reset`), forgetting the configuration with
    /// STATE, then reboots or powers off; a bad request is refused before anything changes.
    async fn reset(&self, request: ResetRequest) -> Result<(), Status>;
    fn services(&self) -> Vec<ServiceInfo>;
    async fn service(&self, id: &str, action: ServiceAction) -> Result<(), Status>;
    /// The log of a service, or of `machined` itself.
    fn logs(&self, id: &str) -> Option<Arc<dyn LogSource>>;
    fn events(&self) -> Arc<EventLog>;
    /// The configuration in force, and the one stored, as text.
    fn configs(&self) -> (Option<Arc<str>>, Option<Arc<str>>);
    /// The right to apply; `None` while another apply runs.
    fn begin_apply(&self) -> Option<Box<dyn ApplyPermit>>;
    /// The node's one writer of the META partition.
    fn meta(&self) -> Arc<crate::block::meta::MetaStore>;
    /// Asks time server `server` (SNTP, from the node's network): the node's clock when the
    /// answer came, and the server's offset from it in nanoseconds.
    async fn query_time(&self, server: &str) -> Result<(SystemTime, i128), Status>;
    /// Wipes each device in turn (dropping partitions where asked) and has the kernel announce
    /// the change, so discovery probes them again. A device in use is FailedPrecondition.
    async fn wipe_block_devices(&self, wipes: Vec<BlockDeviceWipe>) -> Result<(), Status> {
        let _ = wipes;
        Err(Status::unimplemented("this node cannot wipe block devices"))
    }
    /// Hands `passphrase` to the volume manager for the encrypted volume `volume`, which no
    /// configured key opened, and waits for its one attempt: the key slot it opened. A wrong
    /// passphrase is PermissionDenied.
    async fn unlock_volume(&self, volume: &str, passphrase: zeroize::Zeroizing<Vec<u8>>) -> Result<u32, Status> {
        let _ = (volume, passphrase);
        Err(Status::unimplemented("this node has no encrypted volumes to unlock"))
    }
    /// Writes the version the artifacts at `image` hold (an http(s) URL of an imager output,
    /// or `upload:<id>`, see [`Node::uploads`]) into the slot not booted, to boot once at the
    /// next boot; `progress` gets a line per step. The caller reboots.
    async fn upgrade(&self, image: &str, progress: tokio::sync::mpsc::UnboundedSender<String>) -> Result<(), Status> {
        let _ = (image, progress);
        Err(Status::failed_precondition("this node does not boot from a disk it can upgrade (container mode)"))
    }
    /// Makes the other slot the default and reboots into it.
    async fn rollback(&self) -> Result<(), Status> {
        Err(Status::failed_precondition("this node does not boot from a disk it can roll back (container mode)"))
    }
    /// Where uploaded artifacts are kept, one directory per upload; `None` when the node takes
    /// no uploads.
    fn uploads(&self) -> Option<std::path::PathBuf> {
        None
    }
}

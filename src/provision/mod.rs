//! The QEMU provisioner behind `talosctl cluster create` / `destroy`: boots talosbox nodes from the
//! built artifacts as an ordinary user (user-mode networking with the API port forwarded to
//! 127.0.0.1, a node-to-node LAN over QEMU's multicast socket netdev, optional OVMF and swtpm),
//! gives every node a persistent system disk (a sparse copy of the image's `disk.raw`, or blank
//! for a node that installs itself) and optional blank extra disks, runs each node's QEMU under
//! a launcher of its own that starts it again when the node reboots (from its system disk once
//! the node installed itself there), keeps a state directory per cluster (disks, serial logs,
//! pid files, launch files, a JSON record) and tears it down.
//!
//! It must never need root, touch host networking (no bridges, taps or routes), modify the
//! artifacts it boots from, or signal a process it did not start (pids are checked against their
//! command line before any signal).
//!
//! Pure decisions (boot path, QEMU/swtpm argv, port/MAC/multicast/UUID allocation, disk names and
//! sizes, what a QEMU's end means) live in [`alloc`], [`boot`], [`argv`], [`disks`] and
//! [`launch`] and are tested with tables and golden argv; the effects are in [`cluster`],
//! [`host`], [`launch::run`] and [`disks::make`].

pub mod alloc;
pub mod argv;
pub mod boot;
pub mod cluster;
pub mod configure;
pub mod disks;
pub mod host;
pub mod launch;
pub mod serve;
pub mod state;

use std::path::PathBuf;

pub use cluster::{CreateOptions, Created, DestroyOptions, WaitOptions, create, destroy, show, wait_ready};

/// Everything that can go wrong while provisioning; each message names the file, tool or node.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("invalid cluster name {name:?}: use 1-40 characters from a-z, 0-9 and '-', starting with a letter")]
    InvalidName { name: String },
    #[error("invalid node count: {0}")]
    InvalidNodeCount(String),
    #[error("{what}: {} does not exist{hint}", path.display())]
    MissingArtifact { what: &'static str, path: PathBuf, hint: String },
    #[error("{0}")]
    Conflict(String),
    #[error("path {} is not valid UTF-8; QEMU options need UTF-8 paths", path.display())]
    NonUtf8Path { path: PathBuf },
    #[error("unix socket path {} is {len} bytes, longer than the 107 the kernel allows; use a shorter --state", path.display())]
    SocketPathTooLong { path: PathBuf, len: usize },
    #[error(transparent)]
    Host(#[from] crate::hosttools::HostError),
    #[error("cluster {name:?} already exists at {}; destroy it first (talosctl cluster destroy --name {name})", dir.display())]
    AlreadyExists { name: String, dir: PathBuf },
    #[error("no cluster {name:?} at {}", dir.display())]
    NoSuchCluster { name: String, dir: PathBuf },
    #[error("finding the home directory: $HOME is not set; pass --state")]
    NoHome,
    #[error("{flag}: {detail}")]
    InvalidDisk { flag: &'static str, detail: String },
    #[error(
        "{flag} {size_mib} MiB is smaller than the disk image {} ({image_bytes} bytes): give at least {image_mib} MiB",
        image.display()
    )]
    DiskTooSmall { flag: &'static str, size_mib: u64, image: PathBuf, image_bytes: u64, image_mib: u64 },
    #[error("{action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    #[error("reading cluster record {}: {source}", path.display())]
    Record { path: PathBuf, source: serde_json::Error },
    #[error("reading the ephemeral port range from {}: {detail}", path.display())]
    PortRange { path: PathBuf, detail: String },
    #[error(
        "cluster {cluster:?}: no {wanted} free TCP port(s) on 127.0.0.1 in 10000-65535 outside the ephemeral range {lo}-{hi}"
    )]
    NoFreePort { cluster: String, wanted: usize, lo: u16, hi: u16 },
    #[error("running {tool}: {source}")]
    Spawn { tool: String, source: std::io::Error },
    #[error("starting node {node}: QEMU exited with {status}: {stderr}")]
    QemuStart { node: String, status: String, stderr: String },
    #[error("starting swtpm for node {node}: {detail}")]
    SwtpmStart { node: String, detail: String },
    #[error("node {node}: its launcher {detail} (launcher log: {})", log.display())]
    Launcher { node: String, detail: String, log: PathBuf },
    #[error("reading the partition table of {}: {source}", path.display())]
    Gpt { path: PathBuf, source: crate::block::gpt::GptError },
    #[error("{0}")]
    NotReady(String),
    #[error("{0}")]
    Configure(String),
    #[error("cluster {name:?}: {survivors} would not stop; kept {} so its record of them is not lost (stop them, then destroy again)", dir.display())]
    StillRunning { name: String, dir: PathBuf, survivors: String },
}

/// Shorthand for an I/O error on a path with the action that was being done.
pub(crate) fn io_err(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ProvisionError {
    let path = path.into();
    move |source| ProvisionError::Io { action, path, source }
}

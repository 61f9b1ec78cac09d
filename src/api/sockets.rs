//! machined's three API sockets: the machine API that only apid reaches, and the read-only,
//! filtered state sockets apid and trustd read their configuration and certificates from
//! (Talos's `machine.sock`, `apid/runtime.sock`, `trustd/runtime.sock`); trustd's also takes
//! its record of the certificates it signs (`audit`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::machine_service::MachineApi;
use super::node::Node;
use super::server::{Guard, GuardLayer, PidOf, bind};
use super::state_service::{Scope, StateService};
use crate::cosi::{Registry, State};
use crate::proto::cosi::resource::state_server::StateServer;
use crate::proto::machine::machine_service_server::MachineServiceServer;

/// What apid may read from its state socket (Talos's `apidResourceFilter`, for the types that
/// exist here).
pub const APID_STATE_TYPES: &[&str] = &["APIServiceConfigs.runtime.talos.dev", "ApiCertificates.secrets.talos.dev"];
/// What trustd may read from its state socket.
pub const TRUSTD_STATE_TYPES: &[&str] = &["OSRootSecrets.secrets.talos.dev", "TrustdCertificates.secrets.talos.dev"];

/// Talos's gRPC message size limit.
pub const MAX_MESSAGE_SIZE: usize = 32 << 20;

/// Where the sockets live under a run directory (`/system/run` on a node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketPaths {
    pub machine: PathBuf,
    pub apid_state: PathBuf,
    pub trustd_state: PathBuf,
}

impl SocketPaths {
    pub fn under(run: &Path) -> Self {
        SocketPaths {
            machine: run.join("machined/machine.sock"),
            apid_state: run.join("apid/runtime.sock"),
            trustd_state: run.join("trustd/runtime.sock"),
        }
    }
}

/// The uids of the services, and machined's own.
#[derive(Debug, Clone, Copy)]
pub struct Uids {
    pub machined: u32,
    pub apid: u32,
    pub trustd: u32,
}

fn dirs_for(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Checks that a service running as `uid` can reach `path`: every directory above it must be
/// searchable by that uid (a state directory under a private 0700 parent is not), or the
/// service would start and fail to connect with nothing said.
fn reachable_by(path: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for dir in path.ancestors().skip(1) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let md = std::fs::metadata(dir)?;
        let searchable = if md.uid() == uid { md.mode() & 0o100 != 0 } else { md.mode() & 0o001 != 0 };
        if !searchable {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "uid {uid} cannot reach {}: {} is not searchable by it (mode {:o})",
                    path.display(),
                    dir.display(),
                    md.mode() & 0o7777
                ),
            ));
        }
    }
    Ok(())
}

/// The processes the sockets admit beyond their uid: this node's own apid and trustd, as
/// its supervisor started them. `None`: any process of the uid (a test playing apid).
#[derive(Clone, Default)]
pub struct Peers {
    pub apid: Option<PidOf>,
    pub trustd: Option<PidOf>,
}

/// Binds all three sockets and serves them until `cancel`, admitting any process of the
/// services' uids. Binding errors are returned before anything is served.
pub async fn serve(
    node: Arc<dyn Node>,
    state: State,
    registry: Arc<Registry>,
    paths: &SocketPaths,
    uids: Uids,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    serve_for(node, state, registry, paths, uids, Peers::default(), cancel).await
}

/// [`serve`], admitting only `peers` on the sockets they are given for.
pub async fn serve_for(
    node: Arc<dyn Node>,
    state: State,
    registry: Arc<Registry>,
    paths: &SocketPaths,
    uids: Uids,
    peers: Peers,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    for p in [&paths.machine, &paths.apid_state, &paths.trustd_state] {
        dirs_for(p)?;
    }
    for (p, uid) in [(&paths.machine, uids.apid), (&paths.apid_state, uids.apid), (&paths.trustd_state, uids.trustd)] {
        if uid != uids.machined {
            reachable_by(p, uid)?;
        }
    }
    let owner = |uid: u32| (uid != uids.machined).then_some(uid);
    let machine = bind(&paths.machine, owner(uids.apid))?;
    let apid_state = bind(&paths.apid_state, owner(uids.apid))?;
    let trustd_state = bind(&paths.trustd_state, owner(uids.trustd))?;

    let audit = super::audit::server(node.events());
    let mode_node = node.clone();
    let machine_guard =
        Guard { uids: vec![uids.apid], pid: peers.apid.clone(), roles: Some(Arc::new(move || mode_node.mode())) };
    let time = super::time_service::TimeApi::new(node.clone(), state.clone());
    let storage = super::storage_service::StorageApi::new(node.clone(), state.clone());
    let volumes = super::volume_service::VolumeApi::new(node.clone());
    let lifecycle = super::lifecycle_service::LifecycleApi::new(node.clone());
    let artifacts = super::lifecycle_service::LifecycleApi::new(node.clone());
    let api = MachineApi::new(node, state.clone());
    let machine_server = tonic::transport::Server::builder()
        .layer(GuardLayer(Arc::new(machine_guard)))
        .add_service(MachineServiceServer::new(api).max_decoding_message_size(MAX_MESSAGE_SIZE))
        .add_service(crate::proto::time::time_service_server::TimeServiceServer::new(time))
        .add_service(crate::proto::storage::storage_service_server::StorageServiceServer::new(storage))
        .add_service(crate::proto::talosbox::volume::volume_service_server::VolumeServiceServer::new(volumes))
        .add_service(crate::proto::machine::lifecycle_service_server::LifecycleServiceServer::new(lifecycle))
        .add_service(
            crate::proto::talosbox::lifecycle::artifact_service_server::ArtifactServiceServer::new(artifacts)
                .max_decoding_message_size(MAX_MESSAGE_SIZE),
        )
        .add_service(
            StateServer::new(StateService::new(state.clone(), registry.clone(), Scope::ByRole))
                .max_decoding_message_size(MAX_MESSAGE_SIZE),
        )
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(machine),
            cancel.clone().cancelled_owned(),
        );

    // trustd's socket also takes its record of each certificate request (see `audit`).
    let private = |listener, uid: u32, pid: Option<PidOf>, types: &'static [&'static str], audit| {
        let guard = Guard { uids: vec![uid], pid, roles: None };
        tonic::transport::Server::builder()
            .layer(GuardLayer(Arc::new(guard)))
            .add_service(StateServer::new(StateService::new(state.clone(), registry.clone(), Scope::Only(types))))
            .add_optional_service(audit)
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                cancel.clone().cancelled_owned(),
            )
    };
    let apid_server = private(apid_state, uids.apid, peers.apid.clone(), APID_STATE_TYPES, None);
    let trustd_server = private(trustd_state, uids.trustd, peers.trustd.clone(), TRUSTD_STATE_TYPES, Some(audit));
    let (a, b, c) = tokio::join!(machine_server, apid_server, trustd_server);
    for r in [a, b, c] {
        r.map_err(std::io::Error::other)?;
    }
    Ok(())
}

//! Serving gRPC on a unix socket that only the right process may use.
//!
//! Every request is checked before it reaches a service: the caller's uid (the socket's peer
//! credentials) must be one of those allowed, and on machined's API socket the method must be
//! allowed for the roles apid asserted (`talos-role`) in the node's current mode. A refusal is a
//! gRPC error (PermissionDenied), never a silently dropped connection. The socket file is made
//! owner-only as well, so the check is the second wall, not the only one.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::transport::server::UdsConnectInfo;
use tower::{Layer, Service};

use super::authz::{self, NodeMode};

/// The one process a socket admits now (a service's current pid; `None` while it is not
/// running, when nobody is admitted).
pub type PidOf = Arc<dyn Fn() -> Option<u32> + Send + Sync>;

/// Who may use one socket, and whether methods are checked against roles.
pub struct Guard {
    /// Peer uids admitted.
    pub uids: Vec<u32>,
    /// When set, only the process it names is admitted, whatever else runs as its uid: in
    /// container mode every node's apid shares uid 50, so the uid alone would admit another
    /// node's apid (or anything of that uid) as this node's.
    pub pid: Option<PidOf>,
    /// The node's mode for the role table; `None`: no role check (a private state socket,
    /// where the service itself limits what can be read).
    pub roles: Option<Arc<dyn Fn() -> NodeMode + Send + Sync>>,
}

impl Guard {
    fn check<B>(&self, req: &http::Request<B>) -> Result<(), Status> {
        let uid = req.extensions().get::<UdsConnectInfo>().and_then(|c| c.peer_cred).map(|c| c.uid());
        match uid {
            Some(uid) if self.uids.contains(&uid) => {}
            Some(uid) => {
                return Err(Status::permission_denied(format!("uid {uid} may not use this socket")));
            }
            None => return Err(Status::permission_denied("the caller's credentials are unknown")),
        }
        if let Some(pid_of) = &self.pid {
            let peer = req.extensions().get::<UdsConnectInfo>().and_then(|c| c.peer_cred).and_then(|c| c.pid());
            let own = pid_of();
            match (peer, own) {
                (Some(peer), Some(own)) if u32::try_from(peer).ok() == Some(own) => {}
                (Some(peer), _) => {
                    return Err(Status::permission_denied(format!(
                        "process {peer} may not use this socket: only this node's own service may"
                    )));
                }
                (None, _) => return Err(Status::permission_denied("the caller's process is unknown")),
            }
        }
        if let Some(mode) = &self.roles {
            let roles = super::router::claimed_roles(req.headers());
            authz::authorize(req.uri().path(), &roles, mode())?;
        }
        Ok(())
    }
}

#[derive(Clone)]
pub struct GuardLayer(pub Arc<Guard>);

impl<S> Layer<S> for GuardLayer {
    type Service = Guarded<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Guarded { inner, guard: self.0.clone() }
    }
}

#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    guard: Arc<Guard>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B> Service<http::Request<B>> for Guarded<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if let Err(status) = self.guard.check(&req) {
            return Box::pin(std::future::ready(Ok(status.into_http())));
        }
        Box::pin(self.inner.call(req))
    }
}

/// Binds a unix socket at `path` (replacing a stale one), mode 0600, owned by `owner` when
/// given (so the service user can connect).
pub fn bind(path: &Path, owner: Option<u32>) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    if let Some(uid) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
    }
    Ok(listener)
}

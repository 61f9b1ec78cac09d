//! trustd: signs workers' certificate requests on control planes, on :50001.
//!
//! Authenticated by the machine token (gRPC metadata `token`, compared as SHA-256 digests in
//! constant time), over server-side TLS. Whatever a request asks for, the certificate it gets
//! is a server certificate: ServerAuth only, no Subject Organization (where roles live), so a
//! worker can never mint itself a client identity. Its names are the requester's only: IP SANs
//! the TCP peer's address, DNS SANs none of the control plane's ([`crate::pki::SanPolicy`]
//! has the rule); a request asking for more is refused, naming the SAN and the peer, and a
//! request with no known peer address is refused. Every request with a valid token is logged
//! (peer, SANs, serial or reason) and recorded in machined's event log before its answer; a
//! certificate that could not be recorded is not handed out. Its server certificate, the CA
//! and the token come from resources it follows on its private state socket; a rotated
//! certificate takes effect at the next handshake.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use hyper_util::service::TowerToHyperService;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::door::{Caps, Door};
use crate::pki::tls::{ClientAuth, ServerTls};
use crate::pki::{CertificateAuthority, CsrRequest, SanPolicy, SignError, issue::NODE_CERT_VALIDITY};
use crate::proto::securityapi::{CertificateRequest, CertificateResponse, security_service_server as srv};
use crate::proto::talosbox::trustd::{CertificateEvent, audit_client::AuditClient};
use crate::resources::secrets::{self as sec, OsRoot, TrustdCertificates};

#[derive(Debug, thiserror::Error)]
pub enum TrustdError {
    #[error("machined's state socket is gone")]
    StateGone,
    #[error("state socket {}: {source}", path.display())]
    State { path: PathBuf, source: crate::proto::conn::DialError },
    #[error("listening on {address}: {source}")]
    Listen { address: SocketAddr, source: std::io::Error },
    #[error("TLS: {0}")]
    Tls(#[from] crate::pki::PkiError),
}

/// The signer: what it knows of the OS root and of its own names right now, and where it
/// records what it did.
pub struct Signer {
    root: RwLock<Option<OsRoot>>,
    /// The DNS names of trustd's own certificate: the control plane's, never a worker's.
    reserved: RwLock<Vec<String>>,
    audit: AuditClient<Channel>,
}

impl Signer {
    pub fn new(root: Option<OsRoot>, audit: Channel) -> Self {
        Signer { root: RwLock::new(root), reserved: RwLock::new(Vec::new()), audit: AuditClient::new(audit) }
    }

    pub fn set_root(&self, root: Option<OsRoot>) {
        *self.root.write().unwrap_or_else(|p| p.into_inner()) = root;
    }

    /// The names no worker may have: the DNS SANs of `server` (trustd's certificate) and the
    /// root's certSANs.
    pub fn set_reserved(&self, server: Option<&str>) {
        let mut names =
            server.and_then(|crt| crate::pki::inspect_pem(crt).ok()).map(|i| i.dns_names).unwrap_or_default();
        if let Some(root) = self.root() {
            names.extend(root.cert_san_dns_names);
        }
        *self.reserved.write().unwrap_or_else(|p| p.into_inner()) = names;
    }

    fn root(&self) -> Option<OsRoot> {
        self.root.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn reserved(&self) -> Vec<String> {
        self.reserved.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Logs `event` and records it in machined's event log.
    async fn record(&self, event: CertificateEvent) -> Result<(), Status> {
        crate::kernel::console::log_line("trustd", &super::audit::describe(&event));
        let mut audit = self.audit.clone();
        match tokio::time::timeout(AUDIT_TIMEOUT, audit.record(event)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(s)) => Err(Status::unavailable(format!("recording the request in the event log: {}", s.message()))),
            Err(_) => Err(Status::unavailable(format!(
                "recording the request in the event log: no answer in {AUDIT_TIMEOUT:?}"
            ))),
        }
    }
}

/// How long trustd waits for machined to record a request.
const AUDIT_TIMEOUT: Duration = Duration::from_secs(5);

/// A request's SANs as an event lists them: IPs, then `DNS:` names, then the rest.
fn san_list(r: &CsrRequest) -> Vec<String> {
    let ips = r.ips.iter().map(|ip| ip.to_string());
    ips.chain(r.dns_names.iter().map(|n| format!("DNS:{n}"))).chain(r.other_sans.iter().cloned()).collect()
}

/// Whether `presented` is the machine token, without leaking where they differ.
fn token_matches(presented: &str, token: &str) -> bool {
    let (a, b) = (Sha256::digest(presented.as_bytes()), Sha256::digest(token.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[tonic::async_trait]
impl srv::SecurityService for Arc<Signer> {
    async fn certificate(&self, request: Request<CertificateRequest>) -> Result<Response<CertificateResponse>, Status> {
        let root = self.root().ok_or_else(|| Status::unavailable("trustd has no OS CA yet"))?;
        let presented = request.metadata().get("token").and_then(|v| v.to_str().ok()).unwrap_or("");
        if root.token.is_empty() || !token_matches(presented, &root.token) {
            return Err(Status::unauthenticated("invalid or missing machine token"));
        }
        if root.issuing_ca.key_pem.is_empty() {
            return Err(Status::failed_precondition("this node holds no OS CA key: only control planes sign"));
        }
        // Fail closed: a request whose peer is unknown cannot be given the peer's address.
        let peer = request.remote_addr().ok_or_else(|| {
            crate::kernel::console::log_line("trustd", "refused a request with no peer address");
            Status::permission_denied("trustd does not know the address this request came from")
        })?;
        let mut event = CertificateEvent { peer: peer.to_string(), ..Default::default() };
        let csr = String::from_utf8(request.into_inner().csr);
        let parsed = csr
            .map_err(|_| "csr: not PEM text".to_string())
            .and_then(|csr| CsrRequest::parse(&csr).map_err(|e| format!("csr: {e}")));
        let csr = match parsed {
            Ok(csr) => csr,
            Err(reason) => {
                event.refused = reason.clone();
                self.record(event).await?;
                return Err(Status::invalid_argument(reason));
            }
        };
        event.common_name = csr.common_name.clone().unwrap_or_default();
        event.sans = san_list(&csr);
        let ca = CertificateAuthority::from_pem(&root.issuing_ca.crt_pem, &root.issuing_ca.key_pem)
            .map_err(|e| Status::internal(e.to_string()))?;
        let policy = SanPolicy::new(peer.ip(), self.reserved());
        match crate::pki::sign_csr_as_server(&ca, csr, &policy, NODE_CERT_VALIDITY, SystemTime::now()) {
            Ok(issued) => {
                event.serial = issued.serial.clone();
                self.record(event).await?;
                let cas: String = root.accepted_cas.iter().map(|c| c.crt.as_str()).collect();
                Ok(Response::new(CertificateResponse { ca: cas.into_bytes(), crt: issued.crt_pem.into_bytes() }))
            }
            Err(SignError::Refused(r)) => {
                event.refused = r.to_string();
                self.record(event).await?;
                Err(Status::permission_denied(r.to_string()))
            }
            Err(SignError::Pki(e)) => {
                event.refused = format!("csr: {e}");
                self.record(event).await?;
                Err(Status::invalid_argument(format!("csr: {e}")))
            }
        }
    }
}

/// Runs trustd on `listen` until `cancel`, reading from the state socket at `runtime`.
pub async fn run(runtime: PathBuf, listen: SocketAddr, cancel: CancellationToken) -> Result<(), TrustdError> {
    let channel =
        crate::proto::conn::unix(&runtime).map_err(|source| TrustdError::State { path: runtime.clone(), source })?;
    let (root_tx, mut root_rx) = watch::channel::<Option<OsRoot>>(None);
    let (certs_tx, mut certs_rx) = watch::channel::<Option<TrustdCertificates>>(None);
    let log = |m: &str| crate::kernel::console::log_line("trustd", m);
    tokio::spawn(super::follow::follow(channel.clone(), sec::NAMESPACE, OsRoot::ID, root_tx, cancel.clone(), log));
    tokio::spawn(super::follow::follow(
        channel.clone(),
        sec::NAMESPACE,
        TrustdCertificates::ID,
        certs_tx,
        cancel.clone(),
        log,
    ));

    let signer = Arc::new(Signer::new(None, channel));
    let mut tls: Option<ServerTls> = None;
    loop {
        signer.set_root(root_rx.borrow_and_update().clone());
        let certs = certs_rx.borrow_and_update().clone();
        signer.set_reserved(certs.as_ref().map(|c| c.server.crt_pem.as_str()));
        match (&tls, certs) {
            (None, Some(certs)) => {
                let server = ServerTls::new(&certs.server, &[] as &[&str], ClientAuth::None)?;
                let listener = tokio::net::TcpListener::bind(listen)
                    .await
                    .map_err(|source| TrustdError::Listen { address: listen, source })?;
                crate::kernel::console::log_line("trustd", &format!("serving on {listen}"));
                tokio::spawn(accept(listener, server.config(), signer.clone(), cancel.clone()));
                tls = Some(server);
            }
            (Some(server), Some(certs)) => {
                if let Err(e) = server.set_identity(&certs.server) {
                    log(&format!("new certificate refused, keeping the old one: {e}"));
                }
            }
            _ => {}
        }
        let changed = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = root_rx.changed() => r,
            r = certs_rx.changed() => r,
        };
        if changed.is_err() {
            return Err(TrustdError::StateGone);
        }
    }
}

/// trustd's door: the shared bounded accept loop (each request carries the peer's address,
/// which the signer checks the CSR's IP SANs against).
async fn accept(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    signer: Arc<Signer>,
    cancel: CancellationToken,
) {
    let service = srv::SecurityServiceServer::new(signer).max_decoding_message_size(1 << 20);
    let make = move |_: &rustls::ServerConnection, _: SocketAddr| TowerToHyperService::new(service.clone());
    Door::new("trustd", Caps::DEFAULT).serve(listener, tls, make, cancel, TaskTracker::new()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(token_matches("abcdef.0123456789abcdef", "abcdef.0123456789abcdef"));
        assert!(!token_matches("abcdef.0123456789abcdeg", "abcdef.0123456789abcdef"));
        assert!(!token_matches("", "abcdef.0123456789abcdef"));
    }
}

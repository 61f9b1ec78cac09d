//! trustd: signs workers' certificate requests on control planes, on :50001.
//!
//! Authenticated by the machine token (gRPC metadata `token`, compared as SHA-256 digests in
//! constant time), over server-side TLS. Whatever a request asks for, the certificate it gets
//! is a server certificate: ServerAuth only, no Subject Organization (where roles live), so a
//! worker can never mint itself a client identity. Its server certificate, the CA and the token
//! come from resources it follows on its private state socket; a rotated certificate takes
//! effect at the next handshake.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::pki::tls::{ClientAuth, ServerTls};
use crate::pki::{CertificateAuthority, issue::NODE_CERT_VALIDITY};
use crate::proto::securityapi::{CertificateRequest, CertificateResponse, security_service_server as srv};
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

/// The signer: what it knows of the OS root right now.
pub struct Signer {
    root: RwLock<Option<OsRoot>>,
}

impl Signer {
    pub fn new(root: Option<OsRoot>) -> Self {
        Signer { root: RwLock::new(root) }
    }

    pub fn set_root(&self, root: Option<OsRoot>) {
        *self.root.write().unwrap_or_else(|p| p.into_inner()) = root;
    }

    fn root(&self) -> Option<OsRoot> {
        self.root.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
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
        let csr =
            String::from_utf8(request.into_inner().csr).map_err(|_| Status::invalid_argument("csr: not PEM text"))?;
        let ca = CertificateAuthority::from_pem(&root.issuing_ca.crt_pem, &root.issuing_ca.key_pem)
            .map_err(|e| Status::internal(e.to_string()))?;
        let crt = crate::pki::sign_csr_as_server(&ca, &csr, NODE_CERT_VALIDITY, SystemTime::now())
            .map_err(|e| Status::invalid_argument(format!("csr: {e}")))?;
        let cas: String = root.accepted_cas.iter().map(|c| c.crt.as_str()).collect();
        Ok(Response::new(CertificateResponse { ca: cas.into_bytes(), crt: crt.into_bytes() }))
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
    tokio::spawn(super::follow::follow(channel, sec::NAMESPACE, TrustdCertificates::ID, certs_tx, cancel.clone(), log));

    let signer = Arc::new(Signer::new(None));
    let mut tls: Option<ServerTls> = None;
    loop {
        signer.set_root(root_rx.borrow_and_update().clone());
        let certs = certs_rx.borrow_and_update().clone();
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

async fn accept(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    signer: Arc<Signer>,
    cancel: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let service = srv::SecurityServiceServer::new(signer).max_decoding_message_size(1 << 20);
    loop {
        let (tcp, peer) = tokio::select! {
            () = cancel.cancelled() => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: say so, and do not spin.
                    crate::kernel::console::log_line("trustd", &format!("accepting: {e}"));
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let service = service.clone();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    return crate::kernel::console::log_line(
                        "trustd",
                        &format!("TLS handshake with {peer} refused: {e}"),
                    );
                }
                Err(_) => return,
            };
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                .await;
        });
    }
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

//! apid: the node's one network door. mTLS gRPC on :50000, roles from the client
//! certificate, routing by metadata, frames relayed to machined's socket or another node's apid.
//!
//! It is configured entirely from two resources it follows on its private state socket:
//! `APIServiceConfig` (where to listen; maintenance mode's server-side-only TLS, read-only
//! roles and no forwarding) and `ApiCertificates` (its server certificate, the CAs it accepts
//! clients from, and on control planes the impersonator certificate it forwards with). A new
//! certificate or CA set takes effect at the next handshake without dropping the listener; a
//! new listen address or mode restarts the listener. It never decodes a message.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::door::{Caps, Door};
use super::proxy::{BoxError, Caller, DIAL_TIMEOUT, Proxy, ProxyBody, RemoteDialer, RoleMode, remote_handshake};
use crate::pki::tls::{ClientAuth, ServerTls};
use crate::resources::runtime::{self as rt, ApiServiceConfig};
use crate::resources::secrets::{self as sec, ApiCertificates};

/// How long calls in flight may take to finish when apid stops or its listener is replaced
/// (machined's stop timeout, after which it sends SIGKILL, is longer).
const DRAIN_TIMEOUT: std::time::Duration = super::door::DRAIN_TIMEOUT;

/// Where apid finds machined.
#[derive(Debug, Clone)]
pub struct ApidPaths {
    /// Its private, read-only state socket.
    pub runtime: PathBuf,
    /// machined's API socket, where local calls go.
    pub machine: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum ApidError {
    #[error("state socket {}: {source}", path.display())]
    State { path: PathBuf, source: crate::proto::conn::DialError },
    #[error("listening on {address}: {source}")]
    Listen { address: String, source: std::io::Error },
    #[error("TLS: {0}")]
    Tls(#[from] crate::pki::PkiError),
    #[error("machined's state socket is gone")]
    StateGone,
}

/// `:50000` → all addresses; otherwise the address as written.
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
    if let Some(port) = text.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| format!("listen address {text:?}: bad port"))?;
        return Ok(SocketAddr::new(IpAddr::from([0u8; 16]), port));
    }
    text.parse().map_err(|_| format!("listen address {text:?} is not ADDRESS:PORT or :PORT"))
}

/// This node's names, from its own server certificate's SANs: a `node` naming one of them is
/// answered locally.
#[derive(Default)]
struct LocalNames {
    names: RwLock<Vec<String>>,
}

impl LocalNames {
    fn set_from(&self, crt_pem: &str) {
        let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
        if let Ok(info) = crate::pki::inspect_pem(crt_pem) {
            names.extend(info.ip_addresses.iter().map(|ip| ip.to_string()));
            names.extend(info.dns_names.iter().cloned());
        }
        *self.names.write().unwrap_or_else(|p| p.into_inner()) = names;
    }

    fn is_local(&self, target: &str) -> bool {
        let (host, _) = crate::proto::conn::split_endpoint(target, super::proxy::APID_PORT)
            .unwrap_or_else(|_| (target.to_string(), 0));
        self.names.read().unwrap_or_else(|p| p.into_inner()).contains(&host)
    }
}

/// Dials other apids with the node's impersonator certificate, trusting the accepted CAs.
/// Both are replaced in place when they rotate, so forwarding follows without a restart.
#[derive(Default)]
struct Dialer {
    tls: RwLock<Option<Arc<rustls::ClientConfig>>>,
}

impl Dialer {
    fn set(&self, tls: Option<Arc<rustls::ClientConfig>>) {
        *self.tls.write().unwrap_or_else(|p| p.into_inner()) = tls;
    }
}

#[async_trait::async_trait]
impl RemoteDialer for Dialer {
    async fn dial(&self, target: &str) -> Result<hyper::client::conn::http2::SendRequest<ProxyBody>, BoxError> {
        // Every step within one budget: a peer that accepts TCP but never speaks TLS (or
        // HTTP/2) fails here, naming the step, instead of holding its callers.
        let deadline = tokio::time::Instant::now() + DIAL_TIMEOUT;
        let timed_out = |step: &str| format!("{step} {target}: timed out after {} s", DIAL_TIMEOUT.as_secs());
        let (host, port) = crate::proto::conn::split_endpoint(target, super::proxy::APID_PORT)?;
        let name = rustls::pki_types::ServerName::try_from(host.clone())?;
        let tcp = tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect((host.as_str(), port)))
            .await
            .map_err(|_| timed_out("connecting to"))??;
        tcp.set_nodelay(true)?;
        let config = self.tls.read().unwrap_or_else(|p| p.into_inner()).clone();
        let config = config.ok_or("this node has no client certificate to forward with yet")?;
        let tls = tokio::time::timeout_at(deadline, tokio_rustls::TlsConnector::from(config).connect(name, tcp))
            .await
            .map_err(|_| timed_out("TLS handshake with"))??;
        tokio::time::timeout_at(deadline, remote_handshake(tls))
            .await
            .map_err(|_| timed_out("HTTP/2 handshake with"))?
    }
}

/// Runs apid until `cancel`.
pub async fn run(paths: ApidPaths, cancel: CancellationToken) -> Result<(), ApidError> {
    let channel = crate::proto::conn::unix(&paths.runtime)
        .map_err(|source| ApidError::State { path: paths.runtime.clone(), source })?;
    let (config_tx, mut config_rx) = watch::channel::<Option<ApiServiceConfig>>(None);
    let (certs_tx, mut certs_rx) = watch::channel::<Option<ApiCertificates>>(None);
    let log = |m: &str| crate::kernel::console::log_line("apid", m);
    tokio::spawn(super::follow::follow(
        channel.clone(),
        rt::NAMESPACE,
        ApiServiceConfig::ID,
        config_tx,
        cancel.clone(),
        log,
    ));
    tokio::spawn(super::follow::follow(channel, sec::NAMESPACE, ApiCertificates::ID, certs_tx, cancel.clone(), log));

    let local = Arc::new(LocalNames::default());
    let dialer = Arc::new(Dialer::default());
    let mut serving: Option<(ApiServiceConfig, ServerTls, CancellationToken)> = None;
    // Every connection, so that stopping waits for the calls in flight: a Reboot's answer
    // must reach its caller before machined stops apid.
    let conns = TaskTracker::new();
    let outcome = async {
        loop {
            let config = config_rx.borrow_and_update().clone();
            let certs = certs_rx.borrow_and_update().clone();
            match (config, certs) {
                (Some(config), Some(certs)) => {
                    local.set_from(&certs.server.crt_pem);
                    let cas: Vec<String> = certs.accepted_cas.iter().map(|c| c.crt.clone()).collect();
                    match &certs.client {
                        Some(client) => match crate::pki::tls::client_config(&cas, Some(client)) {
                            Ok(tls) => dialer.set(Some(tls)),
                            Err(e) => log(&format!("client certificate refused, not forwarding with it: {e}")),
                        },
                        None => dialer.set(None),
                    }
                    let same = serving.as_ref().is_some_and(|(c, _, _)| *c == config);
                    if same {
                        if let Some((_, tls, _)) = &serving {
                            // Rotation: the next handshake sees the new certificate and CAs.
                            if let Err(e) = tls.set_identity(&certs.server).and_then(|()| tls.set_client_cas(&cas)) {
                                log(&format!("new certificates refused, keeping the old ones: {e}"));
                            }
                        }
                    } else {
                        if let Some((_, _, stop)) = serving.take() {
                            stop.cancel();
                        }
                        let mode =
                            if config.skip_verifying_client_cert { ClientAuth::None } else { ClientAuth::Required };
                        let tls = ServerTls::new(&certs.server, &cas, mode)?;
                        let address = listen_address(&config.listen_address).map_err(|e| ApidError::Listen {
                            address: config.listen_address.clone(),
                            source: std::io::Error::other(e),
                        })?;
                        let listener = bind_retrying(address)
                            .await
                            .map_err(|source| ApidError::Listen { address: address.to_string(), source })?;
                        let forwarding =
                            (!config.node_routing_disabled).then(|| dialer.clone() as Arc<dyn RemoteDialer>);
                        let role_mode =
                            if config.readonly_role_mode { RoleMode::ReadOnly } else { RoleMode::Certificate };
                        let names = local.clone();
                        let proxy = Arc::new(Proxy::new(
                            paths.machine.clone(),
                            forwarding,
                            Arc::new(move |t: &str| names.is_local(t)),
                            role_mode,
                        ));
                        let stop = cancel.child_token();
                        crate::kernel::console::log_line(
                            "apid",
                            &format!(
                                "serving on {address} ({}{})",
                                if config.skip_verifying_client_cert { "maintenance: server TLS only" } else { "mTLS" },
                                if config.node_routing_disabled { ", no forwarding" } else { "" }
                            ),
                        );
                        tokio::spawn(accept(listener, tls.config(), proxy, stop.clone(), conns.clone()));
                        serving = Some((config, tls, stop));
                    }
                }
                _ => {
                    if let Some((_, _, stop)) = serving.take() {
                        crate::kernel::console::log_line("apid", "configuration gone; not serving");
                        stop.cancel();
                    }
                }
            }
            let changed = tokio::select! {
                // First: machined stopping apid also ends the state socket's watches.
                biased;
                () = cancel.cancelled() => return Ok(()),
                r = config_rx.changed() => r,
                r = certs_rx.changed() => r,
            };
            if changed.is_err() {
                return Err(ApidError::StateGone);
            }
        }
    }
    .await;
    // However apid stops, the calls in flight finish first.
    conns.close();
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, conns.wait()).await;
    outcome
}

/// A TCP listener with SO_REUSEADDR, so a restarted apid can bind again at once; an IPv6
/// wildcard also accepts IPv4.
fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if address.is_ipv6() { tokio::net::TcpSocket::new_v6()? } else { tokio::net::TcpSocket::new_v4()? };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(1024)
}

/// Binds, retrying for a moment: the listener being replaced may still be closing.
async fn bind_retrying(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let mut tries = 0;
    loop {
        match bind(address) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 40 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

/// apid's door: the shared bounded accept loop, each connection served by the proxy as the
/// caller its TLS session and source make it.
async fn accept(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    proxy: Arc<Proxy>,
    stop: CancellationToken,
    conns: TaskTracker,
) {
    let make = move |session: &rustls::ServerConnection, peer: SocketAddr| {
        let caller = Arc::new(Caller::of(session, peer));
        let proxy = proxy.clone();
        hyper::service::service_fn(move |req| {
            let proxy = proxy.clone();
            let caller = caller.clone();
            async move { Ok::<_, std::convert::Infallible>(proxy.handle(req, &caller).await) }
        })
    };
    Door::new("apid", Caps::DEFAULT).serve(listener, tls, make, stop, conns).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(listen_address(":50000").unwrap().port(), 50000);
        assert!(listen_address(":50000").unwrap().ip().is_unspecified());
        assert_eq!(listen_address("127.0.0.2:50000").unwrap().to_string(), "127.0.0.2:50000");
        assert!(listen_address("nope").is_err());
    }
}

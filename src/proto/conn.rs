//! Dialling the Talos API: a gRPC channel over TLS to an apid or trustd endpoint (TCP), or
//! over a unix socket to machined's. The server's name for TLS is the host as given: an IP
//! checks the certificate's IP SANs, a name its DNS SANs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long one connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("{endpoint}: {source}")]
    Connect { endpoint: String, source: tonic::transport::Error },
}

/// `host` and `port` of `endpoint` (`10.5.0.2`, `10.5.0.2:50001`, `[fd00::2]:50000`, `cp1`),
/// with `default_port` when it names none.
pub fn split_endpoint(endpoint: &str, default_port: u16) -> Result<(String, u16), DialError> {
    let bad = |reason: &str| DialError::Endpoint { endpoint: endpoint.to_string(), reason: reason.to_string() };
    let e = endpoint.trim();
    let e = e.strip_prefix("https://").unwrap_or(e);
    if e.is_empty() {
        return Err(bad("empty"));
    }
    if let Ok(sa) = e.parse::<std::net::SocketAddr>() {
        return Ok((sa.ip().to_string(), sa.port()));
    }
    if let Ok(ip) = e.parse::<std::net::IpAddr>() {
        return Ok((ip.to_string(), default_port));
    }
    if let Some(inner) = e.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner
            .parse::<std::net::Ipv6Addr>()
            .map(|ip| (ip.to_string(), default_port))
            .map_err(|_| bad("bad IPv6"));
    }
    match e.rsplit_once(':') {
        Some((host, port)) => {
            let port = port.parse::<u16>().map_err(|_| bad("bad port"))?;
            Ok((host.to_string(), port))
        }
        None => Ok((e.to_string(), default_port)),
    }
}

#[derive(Clone)]
struct TlsConnector {
    host: String,
    port: u16,
    tls: Arc<rustls::ClientConfig>,
    /// The local address to connect from; the kernel's choice when `None`.
    source: Option<std::net::IpAddr>,
}

/// A TCP connection to `host:port` from `source`: the first of the host's addresses of
/// `source`'s family.
async fn connect_from(host: &str, port: u16, source: std::net::IpAddr) -> std::io::Result<tokio::net::TcpStream> {
    let target =
        tokio::net::lookup_host((host, port)).await?.find(|a| a.is_ipv4() == source.is_ipv4()).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::AddrNotAvailable,
                format!("{host} has no address of {source}'s family"),
            )
        })?;
    let socket = if source.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket
        .bind(std::net::SocketAddr::new(source, 0))
        .map_err(|e| std::io::Error::new(e.kind(), format!("binding the source address {source}: {e}")))?;
    socket.connect(target).await
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, std::io::Error>> + Send>>;

impl tower::Service<Uri> for TlsConnector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;
    type Error = std::io::Error;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            let name = ServerName::try_from(me.host.clone())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("server name: {e}")))?;
            let tcp = match me.source {
                Some(source) => connect_from(&me.host, me.port, source).await?,
                None => tokio::net::TcpStream::connect((me.host.as_str(), me.port)).await?,
            };
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(me.tls).connect(name, tcp).await?;
            Ok(TokioIo::new(tls))
        })
    }
}

#[derive(Clone)]
struct UnixConnector(std::path::PathBuf);

impl tower::Service<Uri> for UnixConnector {
    type Response = TokioIo<tokio::net::UnixStream>;
    type Error = std::io::Error;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move { Ok(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) })
    }
}

fn endpoint_for(uri: &str, what: &str) -> Result<Endpoint, DialError> {
    Endpoint::from_shared(uri.to_string())
        .map_err(|e| DialError::Endpoint { endpoint: what.to_string(), reason: e.to_string() })
        .map(|e| e.connect_timeout(CONNECT_TIMEOUT).tcp_nodelay(true))
}

/// A channel to `endpoint` over TLS, connected now (so a refusal is reported here).
pub async fn dial(endpoint: &str, default_port: u16, tls: Arc<rustls::ClientConfig>) -> Result<Channel, DialError> {
    dial_from(endpoint, default_port, tls, None).await
}

/// [`dial`], from the local address `source` when given (what a worker asking trustd for a
/// certificate for that address does, since trustd signs only the address it sees).
pub async fn dial_from(
    endpoint: &str,
    default_port: u16,
    tls: Arc<rustls::ClientConfig>,
    source: Option<std::net::IpAddr>,
) -> Result<Channel, DialError> {
    let (host, port) = split_endpoint(endpoint, default_port)?;
    let shown = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let ep = endpoint_for(&format!("http://{shown}"), &shown)?;
    ep.connect_with_connector(TlsConnector { host, port, tls, source })
        .await
        .map_err(|source| DialError::Connect { endpoint: shown, source })
}

/// A channel to a unix socket, connected lazily (the socket may appear later).
pub fn unix(path: &std::path::Path) -> Result<Channel, DialError> {
    let ep = endpoint_for("http://localhost", &path.display().to_string())?;
    Ok(ep.connect_with_connector_lazy(UnixConnector(path.to_path_buf())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_split_with_default_port() {
        let ok = |e: &str| split_endpoint(e, 50000).unwrap();
        assert_eq!(ok("10.5.0.2"), ("10.5.0.2".into(), 50000));
        assert_eq!(ok("10.5.0.2:50001"), ("10.5.0.2".into(), 50001));
        assert_eq!(ok("https://cp1:7"), ("cp1".into(), 7));
        assert_eq!(ok("fd00::2"), ("fd00::2".into(), 50000));
        assert_eq!(ok("[fd00::2]"), ("fd00::2".into(), 50000));
        assert_eq!(ok("[fd00::2]:1"), ("fd00::2".into(), 1));
        assert!(split_endpoint("cp1:x", 1).is_err());
        assert!(split_endpoint("", 1).is_err());
    }
}

//! The platform a node boots on, named by `talos.platform=` on the kernel command line as
//! Talos names it, and what a platform can tell the node about itself: its network, its
//! hostname, its machine configuration. `metal` tells nothing more (its META key waits for
//! the storage side); [`nocloud`] reads cloud-init's NoCloud seed.

pub mod nocloud;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;

use crate::kernel::cmdline::Cmdline;

/// The platforms a node knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Metal,
    Nocloud,
}

impl Platform {
    /// `talos.platform=` of `cmdline`; no key, or one this node has no support for, is metal
    /// (nothing beyond the kernel command line and the API).
    pub fn from_cmdline(cmdline: &Cmdline) -> Platform {
        match cmdline.get("talos.platform") {
            Some("nocloud") => Platform::Nocloud,
            _ => Platform::Metal,
        }
    }

    /// Talos's name for it (the Version reply's platform name, PlatformMetadata's platform).
    pub fn name(self) -> &'static str {
        match self {
            Platform::Metal => "metal",
            Platform::Nocloud => "nocloud",
        }
    }

    /// Talos's mode for it (the Version reply's platform mode).
    pub fn mode(self) -> &'static str {
        match self {
            Platform::Metal => "metal",
            Platform::Nocloud => "cloud",
        }
    }
}

/// Why a fetch brought nothing back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The server answered 404: there is no such document.
    #[error("{0}: HTTP 404 Not Found")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
}

/// Fetches `url` (plain HTTP) and returns its body as text, at most `max` bytes of it.
pub async fn fetch(url: &str, max: usize) -> Result<String, FetchError> {
    let failed = FetchError::Failed;
    let uri: http::Uri = url.parse().map_err(|e| failed(format!("{url:?} is not a URL: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(failed(format!("{url}: only http:// URLs are fetched")));
    }
    let host = uri.host().ok_or_else(|| failed(format!("{url}: no host")))?.trim_matches(['[', ']']).to_string();
    let port = uri.port_u16().unwrap_or(80);
    let tcp = tokio::time::timeout(Duration::from_secs(10), tokio::net::TcpStream::connect((host.as_str(), port)))
        .await
        .map_err(|_| failed(format!("{url}: connecting timed out")))?
        .map_err(|e| failed(format!("{url}: connecting: {e}")))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| failed(format!("{url}: {e}")))?;
    tokio::spawn(conn);
    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    let path = uri.path_and_query().map(|p| p.to_string()).unwrap_or_else(|| "/".into());
    let request = http::Request::get(path)
        .header(http::header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|e| failed(format!("{url}: {e}")))?;
    let response = tokio::time::timeout(Duration::from_secs(30), sender.send_request(request))
        .await
        .map_err(|_| failed(format!("{url}: no answer in 30 s")))?
        .map_err(|e| failed(format!("{url}: {e}")))?;
    if response.status() == http::StatusCode::NOT_FOUND {
        return Err(FetchError::NotFound(url.to_string()));
    }
    if !response.status().is_success() {
        return Err(failed(format!("{url}: HTTP {}", response.status())));
    }
    let body = Limited::new(response.into_body(), max)
        .collect()
        .await
        .map_err(|e| failed(format!("{url}: reading the body: {e}")))?
        .to_bytes();
    String::from_utf8(body.to_vec()).map_err(|_| failed(format!("{url}: the document is not UTF-8 text")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_from_the_command_line() {
        let p = |s: &str| Platform::from_cmdline(&Cmdline::parse(s));
        assert_eq!(p("console=ttyS0 talos.platform=nocloud"), Platform::Nocloud);
        assert_eq!(p("talos.platform=metal"), Platform::Metal);
        assert_eq!(p("quiet"), Platform::Metal);
        assert_eq!((Platform::Nocloud.name(), Platform::Nocloud.mode()), ("nocloud", "cloud"));
        assert_eq!((Platform::Metal.name(), Platform::Metal.mode()), ("metal", "metal"));
    }
}

//! Configuration from the kernel command line: `talos.config=<http URL>` is fetched, retried
//! until it arrives, validated like any apply, and stored, so a node booted by a launcher that
//! serves its configuration (as Talos's QEMU provisioner does) leaves maintenance without a
//! manual `apply-config --insecure`. `talos.config=none`, no key, or a configuration already
//! stored: nothing to do. A configuration applied through the maintenance API meanwhile wins.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use super::config_store::ConfigStore;
use crate::cosi::{Event, Resource, State};
use crate::kernel::cmdline::Cmdline;
use crate::kernel::console;
use crate::resources::runtime::{KernelCmdline, NAMESPACE};

/// Largest configuration accepted.
const MAX_CONFIG: usize = 4 << 20;
const RETRY: Duration = Duration::from_secs(2);
const RETRY_INVALID: Duration = Duration::from_secs(15);

/// Fetches `url` (plain HTTP) and returns the body.
pub async fn fetch(url: &str) -> Result<String, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("{url}: only http:// URLs are fetched"));
    }
    let host = uri.host().ok_or_else(|| format!("{url}: no host"))?.trim_matches(['[', ']']).to_string();
    let port = uri.port_u16().unwrap_or(80);
    let tcp = tokio::time::timeout(Duration::from_secs(10), tokio::net::TcpStream::connect((host.as_str(), port)))
        .await
        .map_err(|_| format!("{url}: connecting timed out"))?
        .map_err(|e| format!("{url}: connecting: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| format!("{url}: {e}"))?;
    tokio::spawn(conn);
    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    let path = uri.path_and_query().map(|p| p.to_string()).unwrap_or_else(|| "/".into());
    let request = http::Request::get(path)
        .header(http::header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("{url}: {e}"))?;
    let response = tokio::time::timeout(Duration::from_secs(30), sender.send_request(request))
        .await
        .map_err(|_| format!("{url}: no answer in 30 s"))?
        .map_err(|e| format!("{url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{url}: HTTP {}", response.status()));
    }
    let body = Limited::new(response.into_body(), MAX_CONFIG)
        .collect()
        .await
        .map_err(|e| format!("{url}: reading the body: {e}"))?
        .to_bytes();
    String::from_utf8(body.to_vec()).map_err(|_| format!("{url}: the configuration is not UTF-8 text"))
}

/// Waits for the kernel command line, then fetches and stores its `talos.config` URL.
pub async fn from_cmdline(state: State, store: Arc<ConfigStore>, cancel: CancellationToken) {
    let mut watch = state.watch::<KernelCmdline>(NAMESPACE, KernelCmdline::ID);
    let cmdline = loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            e = watch.next() => e,
        };
        match event {
            Ok(Event::Created(r) | Event::Updated { new: r, .. }) => {
                if let Some(c) = Resource::<KernelCmdline>::from_any(&r) {
                    break Cmdline::parse(&c.spec().cmdline);
                }
            }
            Ok(_) => {}
            Err(_) => return,
        }
    };
    let Some(url) = cmdline.get("talos.config").map(str::to_string) else { return };
    if url == "none" || store.snapshot().persisted.is_some() {
        return;
    }
    console::line(&format!("config: fetching talos.config={url}"));
    loop {
        if store.snapshot().persisted.is_some() {
            return;
        }
        let wait = match fetch(&url).await {
            Err(e) => {
                console::line(&format!("config: {e}; retrying"));
                RETRY
            }
            Ok(text) => match crate::config::load(&text).and_then(|l| crate::config::validate(&l.config).map(|_| ())) {
                Err(e) => {
                    console::line(&format!("config: {url}: refused: {e}; retrying"));
                    RETRY_INVALID
                }
                Ok(()) => match store.begin_apply() {
                    None => RETRY,
                    Some(guard) => match store.apply_now(&guard, &text) {
                        Ok(()) => {
                            console::line(&format!("config: stored the configuration from {url}"));
                            return;
                        }
                        Err(e) => {
                            console::line(&format!("config: {e}"));
                            RETRY
                        }
                    },
                },
            },
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

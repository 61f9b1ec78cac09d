//! The operator's HTTP endpoint: `/metrics` (the Prometheus text format) and `/healthz`.
//! Plain HTTP/1 on the address given; it serves nothing else and accepts no input.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;

/// The text format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn answer(metrics: &Metrics, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match (req.method(), req.uri().path()) {
        (&hyper::Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE, metrics.render()),
        (&hyper::Method::GET, "/healthz") => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        (&hyper::Method::GET, _) => (StatusCode::NOT_FOUND, "text/plain", "not found\n".to_string()),
        _ => (StatusCode::METHOD_NOT_ALLOWED, "text/plain", "method not allowed\n".to_string()),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// Binds `addr` now (so a taken port is an error here) and serves until `cancel`.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = cancel.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("metrics endpoint: accepting: {e}");
                        continue;
                    }
                },
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let r = answer(&metrics, &req);
                    async move { Ok::<_, Infallible>(r) }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Ok((bound, handle))
}

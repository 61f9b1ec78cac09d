//! Simulated nodes for the operator's bench and tests (behind `test-harness`): gRPC over
//! mutual TLS, as apid serves it, answering only MachineService Version and
//! ApplyConfiguration — with Talos's reply shape (the dry-run diff as text in `mode_details`,
//! no `diff_json`), so the client's Talos path is what runs. Each node is a listener on its
//! own loopback port; thousands fit in one process.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::{BufMut as _, Bytes, BytesMut};
use http_body_util::{BodyExt as _, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message as _;
use tokio_util::sync::CancellationToken;

use crate::pki::tls::{ClientAuth, ServerTls};
use crate::pki::{SecretsBundle, Validity, issue_server};
use crate::proto::machine as m;

/// What one simulated node reports.
#[derive(Debug, Clone)]
pub struct SimState {
    pub version: String,
    /// The diff its dry runs report; empty: "No changes.".
    pub diff: String,
    /// Calls answered.
    pub calls: u64,
}

/// A set of simulated nodes sharing one server certificate (127.0.0.1), trusting clients of
/// the bundle's OS CA.
pub struct SimNodes {
    pub addrs: Vec<SocketAddr>,
    states: Arc<Vec<Mutex<SimState>>>,
    stop: CancellationToken,
}

impl Drop for SimNodes {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn frame(msg: &impl prost::Message) -> Bytes {
    let body = msg.encode_to_vec();
    let mut b = BytesMut::with_capacity(5 + body.len());
    b.put_u8(0);
    b.put_u32(body.len() as u32);
    b.extend_from_slice(&body);
    b.freeze()
}

type Body = BoxBody<Bytes, Infallible>;

fn reply(data: Option<Bytes>, code: u32, message: &str) -> Response<Body> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from(code));
    if let Ok(v) = http::HeaderValue::from_str(message) {
        trailers.insert("grpc-message", v);
    }
    let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = Vec::new();
    if let Some(d) = data {
        frames.push(Ok(Frame::data(d)));
    }
    frames.push(Ok(Frame::trailers(trailers)));
    let mut r = Response::new(StreamBody::new(futures::stream::iter(frames)).boxed());
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    r
}

async fn answer(state: &Mutex<SimState>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return reply(None, 13, "reading the request"),
    };
    let snapshot = {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.calls += 1;
        s.clone()
    };
    match path.as_str() {
        "/machine.MachineService/Version" => {
            let r = m::VersionResponse {
                messages: vec![m::Version {
                    version: Some(m::VersionInfo { tag: snapshot.version, ..Default::default() }),
                    ..Default::default()
                }],
            };
            reply(Some(frame(&r)), 0, "")
        }
        "/machine.MachineService/ApplyConfiguration" => {
            let Some(msg) = body.get(5..) else { return reply(None, 3, "no message") };
            let Ok(request) = m::ApplyConfigurationRequest::decode(msg) else { return reply(None, 3, "bad message") };
            if !request.dry_run {
                return reply(None, 12, "the simulated node takes dry runs only");
            }
            let diff = if snapshot.diff.is_empty() { "No changes.".to_string() } else { snapshot.diff };
            let r = m::ApplyConfigurationResponse {
                messages: vec![m::ApplyConfiguration {
                    mode: request.mode,
                    mode_details: format!(
                        "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n{diff}"
                    ),
                    ..Default::default()
                }],
            };
            reply(Some(frame(&r)), 0, "")
        }
        other => reply(None, 12, &format!("{other} is not simulated")),
    }
}

impl SimNodes {
    /// Starts `count` nodes reporting `version` and no diff.
    pub async fn start(count: usize, bundle: &SecretsBundle, version: &str) -> Result<SimNodes, String> {
        let ca = bundle.os_ca().map_err(|e| e.to_string())?;
        let identity = issue_server(
            &ca,
            "sim",
            &["127.0.0.1".parse().map_err(|e| format!("{e}"))?],
            &[],
            Validity::starting(SystemTime::now() - Duration::from_secs(60), Duration::from_secs(24 * 3600)),
        )
        .map_err(|e| e.to_string())?;
        let tls = ServerTls::new(&identity, &[bundle.certs.os.crt_pem.as_str()], ClientAuth::Required)
            .map_err(|e| e.to_string())?;
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
        let states: Arc<Vec<Mutex<SimState>>> = Arc::new(
            (0..count)
                .map(|_| Mutex::new(SimState { version: version.into(), diff: String::new(), calls: 0 }))
                .collect(),
        );
        let stop = CancellationToken::new();
        let mut addrs = Vec::with_capacity(count);
        for i in 0..count {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| format!("binding: {e}"))?;
            addrs.push(listener.local_addr().map_err(|e| e.to_string())?);
            let (acceptor, states, stop) = (acceptor.clone(), states.clone(), stop.clone());
            tokio::spawn(async move {
                loop {
                    let tcp = tokio::select! {
                        _ = stop.cancelled() => return,
                        a = listener.accept() => match a { Ok((s, _)) => s, Err(_) => continue },
                    };
                    let (acceptor, states, stop) = (acceptor.clone(), states.clone(), stop.clone());
                    tokio::spawn(async move {
                        let Ok(stream) = acceptor.accept(tcp).await else { return };
                        let service = hyper::service::service_fn(move |req| {
                            let states = states.clone();
                            async move { Ok::<_, Infallible>(answer(&states[i], req).await) }
                        });
                        let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(stream), service);
                        tokio::select! { _ = conn => {}, _ = stop.cancelled() => {} }
                    });
                }
            });
        }
        Ok(SimNodes { addrs, states, stop })
    }

    /// Changes node `i`'s answers.
    pub fn set(&self, i: usize, version: &str, diff: &str) {
        let mut s = self.states[i].lock().unwrap_or_else(|p| p.into_inner());
        s.version = version.into();
        s.diff = diff.into();
    }

    pub fn calls(&self, i: usize) -> u64 {
        self.states[i].lock().unwrap_or_else(|p| p.into_inner()).calls
    }
}

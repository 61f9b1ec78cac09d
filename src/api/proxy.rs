//! apid's transparent proxy: one gRPC call in, the same call out to the local machined socket
//! or another node's apid, frames relayed without decoding.
//!
//! Because nothing here knows a message type, a new RPC works through apid the day machined
//! serves it. What apid does touch is metadata: routing keys are consumed (`node`, `nodes`),
//! the caller's roles are asserted in `talos-role` (an incoming `talos-role` is believed only
//! from an `os:impersonator`, i.e. another control plane's apid), and a forwarded call carries
//! `proxyfrom` so the next apid answers it locally. Request messages are limited in size at
//! their 5-byte header, so an oversized one is refused, never buffered.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::Mutex;
use tonic::Code;

use super::grpc_body::GuardedBody;
use super::router::{self, LocalTargets, Route, keys};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body apid sends either way: relayed frames or an error's empty body.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

pub use crate::proto::{APID_PORT, MAX_MESSAGE_SIZE};

/// Who is calling, as apid's TLS termination established it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Caller {
    /// Roles from the verified client certificate's Subject Organization.
    pub roles: Vec<String>,
}

impl Caller {
    fn is_impersonator(&self) -> bool {
        self.roles.iter().any(|r| r == IMPERSONATOR)
    }
}

const IMPERSONATOR: &str = "os:impersonator";
const READER: &str = "os:reader";

/// How apid treats callers' identities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleMode {
    /// Roles come from the client certificate (and from `talos-role` for impersonators).
    Certificate,
    /// Maintenance mode: nobody has a client certificate; everyone is `os:reader`.
    ReadOnly,
}

/// Dials another node's apid: TLS (with this node's impersonator client certificate) over TCP.
#[async_trait::async_trait]
pub trait RemoteDialer: Send + Sync {
    async fn dial(&self, target: &str) -> Result<SendRequest<ProxyBody>, BoxError>;
}

/// The proxy of one apid.
pub struct Proxy {
    local: Backend,
    remote: Option<Arc<dyn RemoteDialer>>,
    remotes: Mutex<HashMap<String, SendRequest<ProxyBody>>>,
    local_targets: Arc<dyn LocalTargets + Send + Sync>,
    role_mode: RoleMode,
    limit: u64,
}

/// The local machined socket, one multiplexed HTTP/2 connection, redialled when it breaks.
struct Backend {
    socket: PathBuf,
    conn: Mutex<Option<SendRequest<ProxyBody>>>,
}

impl Backend {
    async fn sender(&self) -> Result<SendRequest<ProxyBody>, BoxError> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_ref()
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|e| format!("connecting to machined at {}: {e}", self.socket.display()))?;
        let sender = handshake(stream).await?;
        *conn = Some(sender.clone());
        Ok(sender)
    }
}

/// An HTTP/2 client handshake over `io`, its connection driven by a task of its own.
pub async fn handshake<I>(io: I) -> Result<SendRequest<ProxyBody>, BoxError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(65535 * 32)
        .initial_connection_window_size(65535 * 16)
        .handshake(TokioIo::new(io))
        .await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("proxied connection ended: {e}");
        }
    });
    Ok(sender)
}

impl Proxy {
    /// A proxy to machined at `socket`; `remote` dials other nodes (`None`: forwarding disabled).
    pub fn new(
        socket: PathBuf,
        remote: Option<Arc<dyn RemoteDialer>>,
        local_targets: Arc<dyn LocalTargets + Send + Sync>,
        role_mode: RoleMode,
    ) -> Self {
        Proxy {
            local: Backend { socket, conn: Mutex::new(None) },
            remote,
            remotes: Mutex::new(HashMap::new()),
            local_targets,
            role_mode,
            limit: MAX_MESSAGE_SIZE,
        }
    }

    /// Lowers the request message limit (tests).
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = limit;
        self
    }

    /// Relays one call. Never fails: a refusal is a gRPC error response.
    pub async fn handle(&self, req: Request<Incoming>, caller: &Caller) -> Response<ProxyBody> {
        let route = match router::route(req.headers(), self.local_targets.as_ref(), self.remote.is_some()) {
            Ok(r) => r,
            Err(refusal) => return error_response(refusal.code, &refusal.message),
        };
        let roles = self.roles(req.headers(), caller);
        let (mut parts, body) = req.into_parts();
        let authority = parts.uri.authority().map(|a| a.to_string());
        strip(&mut parts.headers);
        for role in &roles {
            if let Ok(v) = HeaderValue::from_str(role) {
                parts.headers.append(HeaderName::from_static(keys::ROLE), v);
            }
        }
        let path = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
        let exceeded = Arc::new(AtomicBool::new(false));
        let body = GuardedBody::new(body, self.limit, exceeded.clone()).boxed_unsync();
        let call = Call { method: parts.method, headers: parts.headers, path, authority };

        let targets = match route {
            Route::Many(targets) => return self.fan_out(targets, call, body, &exceeded).await,
            single => single,
        };
        match self.send(&targets, &call, body).await {
            Ok(resp) => resp.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed_unsync()),
            Err(_) if exceeded.load(Ordering::SeqCst) => self.too_large(),
            Err((code, message)) => error_response(code, &message),
        }
    }

    fn too_large(&self) -> Response<ProxyBody> {
        error_response(
            Code::ResourceExhausted,
            &format!("request message larger than the limit of {} bytes", self.limit),
        )
    }

    /// Sends `call` with `body` to one target (`Local` or `Remote`).
    async fn send(&self, route: &Route, call: &Call, body: ProxyBody) -> Result<Response<Incoming>, (Code, String)> {
        let mut headers = call.headers.clone();
        let (mut sender, uri, target) = match route {
            Route::Remote(node) => {
                let value = call.authority.as_deref().unwrap_or("unknown");
                if let Ok(v) = HeaderValue::from_str(value) {
                    headers.insert(HeaderName::from_static(keys::PROXY_FROM), v);
                }
                match self.remote_sender(node).await {
                    Ok(s) => (s, format!("https://{}{}", with_port(node), call.path), format!("node {node}")),
                    Err(e) => return Err((Code::Unavailable, format!("node {node}: {e}"))),
                }
            }
            _ => match self.local.sender().await {
                Ok(s) => (s, format!("http://machined{}", call.path), "machined".to_string()),
                Err(e) => return Err((Code::Unavailable, e.to_string())),
            },
        };
        let uri =
            uri.parse::<Uri>().map_err(|e| (Code::InvalidArgument, format!("request path {:?}: {e}", call.path)))?;
        let mut request = Request::new(body);
        *request.method_mut() = call.method.clone();
        *request.uri_mut() = uri;
        *request.headers_mut() = headers;
        *request.version_mut() = http::Version::HTTP_2;
        match sender.send_request(request).await {
            Ok(resp) => Ok(resp),
            Err(e) => {
                if let Route::Remote(node) = route {
                    self.remotes.lock().await.remove(node);
                }
                Err((Code::Unavailable, format!("{target}: {e}")))
            }
        }
    }

    /// `nodes`: the call to every target at once, the replies merged with their hostnames
    /// (see `fanout`). Only `machine.MachineService` and `storage.StorageService` are fanned
    /// out: their replies follow the convention this needs.
    async fn fan_out(
        &self,
        targets: Vec<(String, Route)>,
        call: Call,
        body: ProxyBody,
        exceeded: &AtomicBool,
    ) -> Response<ProxyBody> {
        let Some(streaming) = fan_out_streaming(&call.path) else {
            return error_response(
                Code::InvalidArgument,
                &format!(
                    "one-to-many proxying (nodes metadata) is for machine.MachineService and \
                     storage.StorageService only, not {}: use node",
                    call.path
                ),
            );
        };
        let request = match body.collect().await {
            Ok(c) => c.to_bytes(),
            Err(_) if exceeded.load(Ordering::SeqCst) => return self.too_large(),
            Err(e) => return error_response(Code::InvalidArgument, &format!("reading the request: {e}")),
        };
        let full = |b: Bytes| http_body_util::Full::new(b).map_err(|never| match never {}).boxed_unsync();
        let sent =
            futures::future::join_all(targets.iter().map(|(_, route)| self.send(route, &call, full(request.clone()))))
                .await;
        let replies: Vec<NodeReply> = targets.into_iter().map(|(name, _)| name).zip(sent).collect();
        if streaming { merged_stream(replies) } else { merged_unary(replies).await }
    }
    /// The roles to assert downstream.
    fn roles(&self, headers: &http::HeaderMap, caller: &Caller) -> Vec<String> {
        match self.role_mode {
            RoleMode::ReadOnly => vec![READER.to_string()],
            RoleMode::Certificate if caller.is_impersonator() => {
                let claimed = router::claimed_roles(headers);
                // An impersonator that claims nothing acts as itself (it may call nothing).
                if claimed.is_empty() { caller.roles.clone() } else { claimed }
            }
            RoleMode::Certificate => caller.roles.clone(),
        }
    }

    async fn remote_sender(&self, node: &str) -> Result<SendRequest<ProxyBody>, BoxError> {
        let dialer = self.remote.as_ref().ok_or("no request forwarding")?;
        let mut remotes = self.remotes.lock().await;
        if let Some(s) = remotes.get(node)
            && !s.is_closed()
        {
            return Ok(s.clone());
        }
        let sender = dialer.dial(&with_port(node)).await?;
        remotes.insert(node.to_string(), sender.clone());
        Ok(sender)
    }
}

/// One target's reply in a fan-out: its name, and its response or why there is none.
type NodeReply = (String, Result<Response<Incoming>, (Code, String)>);

/// What is sent to each target: the call's method, path, headers (routing keys stripped, roles
/// set) and the authority it came in on (for `proxyfrom`).
struct Call {
    method: http::Method,
    headers: http::HeaderMap,
    path: String,
    authority: Option<String>,
}

/// Services whose replies follow Talos's `messages` / `metadata` convention (see `fanout`).
const FAN_OUT_SERVICES: &[&str] = &["/machine.MachineService/", "/storage.StorageService/"];

/// Whether a method of the [`FAN_OUT_SERVICES`] streams its replies; `None` for other
/// services and unknown methods.
fn fan_out_streaming(path: &str) -> Option<bool> {
    static METHODS: std::sync::OnceLock<HashMap<String, bool>> = std::sync::OnceLock::new();
    let methods = METHODS.get_or_init(|| {
        crate::proto::rpc_methods()
            .unwrap_or_default()
            .into_iter()
            .filter(|m| FAN_OUT_SERVICES.iter().any(|s| m.path.starts_with(s)))
            .map(|m| (m.path, m.server_streaming))
            .collect()
    });
    methods.get(path).copied()
}

/// The gRPC status a response ended with: from its trailers, or its headers (trailers-only).
fn grpc_status(headers: &http::HeaderMap) -> Option<(i32, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.parse::<i32>().ok()?;
    let message = headers.get("grpc-message").and_then(|m| m.to_str().ok()).map(percent_decode).unwrap_or_default();
    Some((code, message))
}

/// gRPC's percent-encoding of `grpc-message`.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(v) = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn grpc_response(body: ProxyBody) -> Response<ProxyBody> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    resp
}

fn ok_trailers() -> http::HeaderMap {
    let mut t = http::HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static("0"));
    t
}

/// Unary replies, each tagged with its node (or standing for its failure), in one message.
async fn merged_unary(replies: Vec<NodeReply>) -> Response<ProxyBody> {
    use super::fanout::{frame, frames, tag_unary, unary_error};
    let mut merged = Vec::new();
    for (name, reply) in replies {
        let part = match reply {
            Err((code, message)) => unary_error(&name, code as i32, &message),
            Ok(resp) => match grpc_status(resp.headers()) {
                Some((code, message)) if code != 0 => unary_error(&name, code, &message),
                _ => match resp.into_body().collect().await {
                    Err(e) => unary_error(&name, Code::Unavailable as i32, &e.to_string()),
                    Ok(collected) => {
                        let status = collected.trailers().and_then(grpc_status);
                        let data = collected.to_bytes();
                        match status {
                            Some((code, message)) if code != 0 => unary_error(&name, code, &message),
                            _ => frames(&data)
                                .and_then(|f| f.iter().map(|p| tag_unary(p, &name)).collect::<Option<Vec<_>>>())
                                .map(|parts| parts.concat())
                                .unwrap_or_else(|| unary_error(&name, Code::Internal as i32, "malformed reply")),
                        }
                    }
                },
            },
        };
        merged.extend_from_slice(&part);
    }
    let frames = futures::stream::iter([
        Ok::<_, BoxError>(hyper::body::Frame::data(Bytes::from(frame(&merged)))),
        Ok(hyper::body::Frame::trailers(ok_trailers())),
    ]);
    grpc_response(http_body_util::StreamBody::new(frames).boxed_unsync())
}

/// Streamed replies of every node interleaved as they come, each message tagged with its node;
/// a node's failure is one message standing for it.
fn merged_stream(replies: Vec<NodeReply>) -> Response<ProxyBody> {
    use super::fanout::{frame, streamed_error, tag_streamed};
    use futures::StreamExt;
    type Item = Result<hyper::body::Frame<Bytes>, BoxError>;
    let data = |payload: Vec<u8>| -> Item { Ok(hyper::body::Frame::data(Bytes::from(frame(&payload)))) };
    let mut streams = Vec::new();
    for (name, reply) in replies {
        let stream: futures::stream::BoxStream<'static, Item> = match reply {
            Err((code, message)) => {
                futures::stream::once(async move { data(streamed_error(&name, code as i32, &message)) }).boxed()
            }
            Ok(resp) => match grpc_status(resp.headers()) {
                Some((code, message)) if code != 0 => {
                    futures::stream::once(async move { data(streamed_error(&name, code, &message)) }).boxed()
                }
                _ => {
                    let state = (resp.into_body(), Vec::<u8>::new(), name, false);
                    futures::stream::unfold(state, move |(mut body, mut buf, name, done)| async move {
                        if done {
                            return None;
                        }
                        loop {
                            match body.frame().await {
                                Some(Ok(f)) if f.is_data() => {
                                    if let Ok(chunk) = f.into_data() {
                                        buf.extend_from_slice(&chunk);
                                    }
                                    let mut out = Vec::new();
                                    while buf.len() >= 5 {
                                        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                                        if buf.len() < 5 + len {
                                            break;
                                        }
                                        let message: Vec<u8> = buf.drain(..5 + len).skip(5).collect();
                                        out.push(data(tag_streamed(&message, &name)));
                                    }
                                    if !out.is_empty() {
                                        return Some((futures::stream::iter(out), (body, buf, name, false)));
                                    }
                                }
                                Some(Ok(f)) => {
                                    let failed = f.trailers_ref().and_then(grpc_status).filter(|(code, _)| *code != 0);
                                    let out = failed.map(|(code, message)| data(streamed_error(&name, code, &message)));
                                    return Some((
                                        futures::stream::iter(out.into_iter().collect::<Vec<_>>()),
                                        (body, buf, name, true),
                                    ));
                                }
                                Some(Err(e)) => {
                                    let out =
                                        vec![data(streamed_error(&name, Code::Unavailable as i32, &e.to_string()))];
                                    return Some((futures::stream::iter(out), (body, buf, name, true)));
                                }
                                None => return None,
                            }
                        }
                    })
                    .flatten()
                    .boxed()
                }
            },
        };
        streams.push(stream);
    }
    let merged = futures::stream::select_all(streams)
        .chain(futures::stream::once(async { Ok(hyper::body::Frame::trailers(ok_trailers())) }));
    grpc_response(http_body_util::StreamBody::new(merged).boxed_unsync())
}

/// Drops the routing keys and any role claim; the proxy sets its own.
fn strip(headers: &mut http::HeaderMap) {
    for key in [keys::NODE, keys::NODES, keys::ROLE, keys::PROXY_FROM] {
        headers.remove(key);
    }
}

/// `node` with apid's port if it names none (`10.5.0.2` → `10.5.0.2:50000`, `[fd00::2]`,
/// bare IPv6 bracketed).
pub fn with_port(node: &str) -> String {
    if node.parse::<std::net::SocketAddr>().is_ok() {
        return node.to_string();
    }
    if let Ok(ip) = node.parse::<std::net::IpAddr>() {
        return std::net::SocketAddr::new(ip, APID_PORT).to_string();
    }
    if node.starts_with('[') && node.ends_with(']') {
        return format!("{node}:{APID_PORT}");
    }
    match node.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() => node.to_string(),
        _ => format!("{node}:{APID_PORT}"),
    }
}

/// A trailers-only gRPC error response.
pub fn error_response(code: Code, message: &str) -> Response<ProxyBody> {
    let empty = http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync();
    let mut resp = tonic::Status::new(code, message).into_http::<ProxyBody>();
    *resp.body_mut() = empty;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fan_out_is_for_services_with_talos_replies() {
        assert_eq!(fan_out_streaming("/machine.MachineService/Version"), Some(false));
        assert_eq!(fan_out_streaming("/machine.MachineService/Logs"), Some(true));
        assert_eq!(fan_out_streaming("/storage.StorageService/BlockDeviceWipe"), Some(false));
        assert_eq!(fan_out_streaming("/storage.StorageService/Disks"), Some(false));
        assert_eq!(fan_out_streaming("/storage.StorageService/Nothing"), None);
        assert_eq!(fan_out_streaming("/time.TimeService/Time"), None);
        assert_eq!(fan_out_streaming("/cosi.resource.State/List"), None);
    }

    #[test]
    fn nodes_get_apids_port() {
        assert_eq!(with_port("10.5.0.2"), "10.5.0.2:50000");
        assert_eq!(with_port("10.5.0.2:50010"), "10.5.0.2:50010");
        assert_eq!(with_port("fd00::2"), "[fd00::2]:50000");
        assert_eq!(with_port("[fd00::2]"), "[fd00::2]:50000");
        assert_eq!(with_port("[fd00::2]:7"), "[fd00::2]:7");
        assert_eq!(with_port("cp1"), "cp1:50000");
        assert_eq!(with_port("cp1:1234"), "cp1:1234");
    }

    #[test]
    fn errors_are_trailers_only_grpc_responses() {
        let r = error_response(Code::PermissionDenied, "no request forwarding");
        assert_eq!(r.status(), http::StatusCode::OK);
        assert_eq!(r.headers()["grpc-status"], "7");
        assert_eq!(r.headers()["content-type"], "application/grpc");
        assert!(http_body::Body::is_end_stream(r.body()));
    }

    #[test]
    fn roles_are_believed_from_metadata_only_for_impersonators() {
        let proxy = Proxy::new("/nonexistent".into(), None, Arc::new(|_: &str| false), RoleMode::Certificate);
        let mut h = http::HeaderMap::new();
        h.append(keys::ROLE, HeaderValue::from_static("os:admin"));
        let reader = Caller { roles: vec!["os:reader".into()] };
        assert_eq!(proxy.roles(&h, &reader), vec!["os:reader"], "a reader's claim is ignored");
        let imp = Caller { roles: vec!["os:impersonator".into()] };
        assert_eq!(proxy.roles(&h, &imp), vec!["os:admin"]);
        let ro = Proxy::new("/nonexistent".into(), None, Arc::new(|_: &str| false), RoleMode::ReadOnly);
        assert_eq!(ro.roles(&h, &imp), vec!["os:reader"]);
    }
}

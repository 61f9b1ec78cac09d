//! apid's transparent proxy: one gRPC call in, the same call out to the local machined socket
//! or another node's apid, frames relayed without decoding.
//!
//! Because nothing here knows a message type, a new RPC works through apid the day machined
//! serves it. What apid does touch is metadata: routing keys are consumed (`node`, `nodes`),
//! the caller's roles are asserted in `talos-role` (an incoming `talos-role` is believed only
//! from an `os:impersonator`, i.e. another control plane's apid), and a forwarded call carries
//! `proxyfrom` so the next apid answers it locally. Request messages are limited in size at
//! their 5-byte header, so an oversized one is refused, never buffered.
//!
//! Everything a caller can make apid hold is bounded. Dialling another node takes at most
//! [`DIAL_TIMEOUT`] and blocks only the callers of that node; remote connections are kept one
//! per (node, role set) in a pool of up to [`CONNECTIONS_PER_ROLE_SET`], each carrying at most
//! [`STREAMS_PER_CONNECTION`] calls, and each caller (a client certificate, or without one a
//! source address) has at most [`CALLS_PER_CALLER`] calls in flight to a node, so one
//! caller's streams cannot take another's; and what a fan-out buffers (the request
//! it repeats, the unary replies it merges, the partial messages of streamed ones) is capped per
//! call and, across all calls, by [`FAN_OUT_BUFFER_TOTAL`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tonic::Code;

use super::grpc_body::{FrameScanner, GuardedBody};
use super::router::{self, LocalTargets, Route, keys};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body apid sends either way: relayed frames or an error's empty body.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

pub use crate::proto::{APID_PORT, MAX_MESSAGE_SIZE};

/// How long dialling another node's apid may take in all — TCP connect, TLS handshake and the
/// HTTP/2 handshake — before the calls waiting for it fail with `Unavailable`. apids on one
/// network answer in milliseconds; 5 s allows for a busy node while keeping a silent address
/// from holding its callers (and only its callers: nothing else waits on a dial) for long.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTP/2 pings on connections to other apids, also while idle, so a node that went away
/// without a FIN is noticed and its connection replaced rather than kept for the next caller.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(15);
/// How long a ping may go unanswered before the connection is declared dead.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Calls one caller may have in flight to one remote node (streams held open count until
/// they end): more than talosctl's widest use (a few Watches and `logs -f` at once), and less
/// than one connection carries, so one caller never fills a connection by itself.
pub const CALLS_PER_CALLER: usize = 64;
/// Calls carried at once by one connection to a remote node. RFC 9113 §6.5.2 recommends
/// servers allow at least 100 concurrent streams (the door allows 128): 100 never queues
/// behind a conforming peer's limit.
pub const STREAMS_PER_CONNECTION: usize = 100;
/// Connections kept to one remote node for one role set: a new one is dialled when those
/// there are full. With [`CALLS_PER_CALLER`] this is room for at least 12 callers at their
/// limit, and the few role sets stay far below the door's connections per source.
pub const CONNECTIONS_PER_ROLE_SET: usize = 8;
/// A connection to another node unused for this long is dialled again rather than reused:
/// the peer's door closes one idle for `door::IDLE_TIMEOUT` (30 s), and a call must not race
/// that close.
const REMOTE_IDLE_REUSE: Duration = Duration::from_secs(20);
const _: () = assert!(REMOTE_IDLE_REUSE.as_secs() < super::door::IDLE_TIMEOUT.as_secs());
/// How long a call over [`CALLS_PER_CALLER`] (or past a full pool) waits for one to end
/// before it is refused.
const CALLER_QUEUE_WAIT: Duration = Duration::from_secs(1);

/// The most a fan-out request (`nodes`) may hold in total, all its messages together: it is
/// buffered once and repeated to every target. The requests worth fanning out (configs,
/// upgrades, service actions) are kilobytes; 4 MiB is gRPC's own default message limit. A
/// message announcing more is refused at its header, before any of it is read.
pub const FAN_OUT_REQUEST_LIMIT: u64 = 4 << 20;
/// How long a fan-out request may take to arrive whole: a caller trickling it keeps buffer
/// budget from others only this long.
const FAN_OUT_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a fan-out reply may buffer: the merged unary message in total (a client would
/// refuse a larger one anyway), and one message of a streamed reply. A node's reply past it
/// is that node's error in the merged reply.
pub const FAN_OUT_REPLY_LIMIT: u64 = MAX_MESSAGE_SIZE;
/// What all fan-out calls together may buffer at once, requests and replies. Past it a new
/// request is refused with `ResourceExhausted` and a reply is that node's error, so apid's
/// memory stays bounded however many callers fan out.
pub const FAN_OUT_BUFFER_TOTAL: u64 = 64 << 20;

/// Who is calling, as apid's TLS termination established it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Caller {
    /// Roles from the verified client certificate's Subject Organization.
    pub roles: Vec<String>,
    /// Whom [`CALLS_PER_CALLER`] counts: the SHA-256 of the client certificate, or without one
    /// (maintenance) the source as the door counts it (an IPv4 address, an IPv6 /64).
    pub identity: String,
}

impl Caller {
    /// The caller of a connection: its certificate's roles and fingerprint, or its source.
    pub fn of(session: &rustls::ServerConnection, peer: std::net::SocketAddr) -> Caller {
        use base64::Engine as _;
        use sha2::Digest;
        let roles = crate::pki::tls::peer_roles(session)
            .map(|(roles, _unknown)| roles.strings().into_iter().map(str::to_string).collect())
            .unwrap_or_default();
        let identity = match session.peer_certificates().and_then(|chain| chain.first()) {
            Some(leaf) => format!(
                "cert:{}",
                base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(leaf.as_ref()))
            ),
            None => format!("source:{}", super::door::source_key(peer.ip())),
        };
        Caller { roles, identity }
    }

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
    /// The connections to other nodes, a pool per (node, role set). The locks are held only
    /// to find a slot, never across a dial.
    remotes: std::sync::Mutex<HashMap<RemoteKey, Arc<RemotePool>>>,
    local_targets: Arc<dyn LocalTargets + Send + Sync>,
    role_mode: RoleMode,
    limit: u64,
    /// [`FAN_OUT_BUFFER_TOTAL`] bytes, one permit each.
    buffered: Budget,
}

/// A remote connection's key: the node as routed, and the sorted role set of its callers.
type RemoteKey = (String, String);

/// The connections to one node for one role set, and the calls of each caller through them.
#[derive(Default)]
struct RemotePool {
    /// At most [`CONNECTIONS_PER_ROLE_SET`].
    slots: std::sync::Mutex<Vec<Arc<RemoteSlot>>>,
    /// [`CALLS_PER_CALLER`] permits per caller identity; an entry nobody holds a permit of
    /// goes when another is added.
    callers: std::sync::Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl RemotePool {
    /// Whether nothing uses the pool and no connection of it is alive.
    fn unused(self: &Arc<Self>) -> bool {
        Arc::strong_count(self) == 1
            && self.slots.lock().unwrap_or_else(|p| p.into_inner()).iter().all(|s| {
                Arc::strong_count(s) == 1 && s.conn.try_lock().is_ok_and(|c| c.as_ref().is_none_or(|c| c.is_closed()))
            })
    }

    /// The semaphore of `identity`'s calls.
    fn caller(&self, identity: &str) -> Arc<Semaphore> {
        let mut callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        if !callers.contains_key(identity) {
            callers.retain(|_, s| Arc::strong_count(s) > 1);
        }
        callers.entry(identity.to_string()).or_insert_with(|| Arc::new(Semaphore::new(CALLS_PER_CALLER))).clone()
    }

    /// A connection with room for one more call, and that call's permit: the first with room,
    /// else a new one while the pool has fewer than [`CONNECTIONS_PER_ROLE_SET`].
    fn room(&self) -> Option<(Arc<RemoteSlot>, OwnedSemaphorePermit)> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        for slot in slots.iter() {
            if let Ok(permit) = slot.calls.clone().try_acquire_owned() {
                return Some((slot.clone(), permit));
            }
        }
        if slots.len() >= CONNECTIONS_PER_ROLE_SET {
            return None;
        }
        let slot = Arc::new(RemoteSlot::new());
        let permit = slot.calls.clone().try_acquire_owned().ok()?;
        slots.push(slot.clone());
        Some((slot, permit))
    }

    /// Forgets `slot` if its dial failed and nobody else holds it.
    fn drop_failed(&self, slot: &Arc<RemoteSlot>) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|s| !(Arc::ptr_eq(s, slot) && Arc::strong_count(s) == 2));
    }
}

/// One remote connection and the calls in flight on it.
struct RemoteSlot {
    /// Locked only by callers of this slot, while checking or dialling.
    conn: Mutex<Option<SendRequest<ProxyBody>>>,
    /// [`STREAMS_PER_CONNECTION`] permits, one per call in flight, held by its response body.
    calls: Arc<Semaphore>,
    /// When the last call on the connection began.
    last_call: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl RemoteSlot {
    fn new() -> Self {
        RemoteSlot {
            conn: Mutex::new(None),
            calls: Arc::new(Semaphore::new(STREAMS_PER_CONNECTION)),
            last_call: std::sync::Mutex::new(None),
        }
    }

    /// Whether the connection may be idle on the peer's side for long enough that the peer's
    /// door is about to close it: no call on it but the caller's own (which holds a permit),
    /// and none begun for [`REMOTE_IDLE_REUSE`]. Dialling again then is cheaper than a call
    /// that races the peer's GOAWAY.
    fn stale(&self) -> bool {
        let others = STREAMS_PER_CONNECTION - self.calls.available_permits() - 1;
        let last = *self.last_call.lock().unwrap_or_else(|p| p.into_inner());
        others == 0 && last.is_some_and(|t| t.elapsed() >= REMOTE_IDLE_REUSE)
    }

    fn called(&self) {
        *self.last_call.lock().unwrap_or_else(|p| p.into_inner()) = Some(tokio::time::Instant::now());
    }
}

/// What a remote call holds until its reply ends: its caller's permit and its connection's.
type CallPermits = (OwnedSemaphorePermit, OwnedSemaphorePermit);

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

/// An HTTP/2 client handshake over `io` (machined's socket), its connection driven by a task
/// of its own.
pub async fn handshake<I>(io: I) -> Result<SendRequest<ProxyBody>, BoxError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    drive(client_builder(), io).await
}

/// [`handshake`] for another node's apid: with keep-alive pings, so a dead peer is noticed.
pub async fn remote_handshake<I>(io: I) -> Result<SendRequest<ProxyBody>, BoxError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let mut builder = client_builder();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    drive(builder, io).await
}

fn client_builder() -> hyper::client::conn::http2::Builder<TokioExecutor> {
    let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    builder.initial_stream_window_size(65535 * 32).initial_connection_window_size(65535 * 16);
    builder
}

async fn drive<I>(
    builder: hyper::client::conn::http2::Builder<TokioExecutor>,
    io: I,
) -> Result<SendRequest<ProxyBody>, BoxError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = builder.handshake(TokioIo::new(io)).await?;
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
            remotes: std::sync::Mutex::new(HashMap::new()),
            local_targets,
            role_mode,
            limit: MAX_MESSAGE_SIZE,
            buffered: Budget::new(FAN_OUT_BUFFER_TOTAL),
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
        let call = Call {
            method: parts.method,
            headers: parts.headers,
            path,
            authority,
            roles: role_key(&roles),
            caller: caller.identity.clone(),
        };

        let targets = match route {
            Route::Many(targets) => return self.fan_out(targets, call, body, &exceeded).await,
            single => single,
        };
        match self.send(&targets, &call, body).await {
            Ok(resp) => resp,
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

    /// Sends `call` with `body` to one target (`Local` or `Remote`). A remote reply's body
    /// holds its caller's call permit until it ends.
    async fn send(&self, route: &Route, call: &Call, body: ProxyBody) -> Result<Response<ProxyBody>, (Code, String)> {
        let mut headers = call.headers.clone();
        let (mut sender, uri, target, remote) = match route {
            Route::Remote(node) => {
                let value = call.authority.as_deref().unwrap_or("unknown");
                if let Ok(v) = HeaderValue::from_str(value) {
                    headers.insert(HeaderName::from_static(keys::PROXY_FROM), v);
                }
                let (sender, slot, permit) = self.remote_sender(node, &call.roles, &call.caller).await?;
                (
                    sender,
                    format!("https://{}{}", with_port(node), call.path),
                    format!("node {node}"),
                    Some((slot, permit)),
                )
            }
            _ => match self.local.sender().await {
                Ok(s) => (s, format!("http://machined{}", call.path), "machined".to_string(), None),
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
            Ok(resp) => {
                let permit = remote.map(|(_, permit)| permit);
                Ok(resp.map(|b| hold(b.map_err(|e| Box::new(e) as BoxError).boxed_unsync(), permit)))
            }
            Err(e) => {
                if let Some((slot, _)) = remote {
                    // A dead connection is replaced by the next call; a live one stays.
                    let mut conn = slot.conn.lock().await;
                    if conn.as_ref().is_some_and(|c| c.is_closed()) {
                        *conn = None;
                    }
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
        let mut held = Reserved::default();
        let collected = tokio::time::timeout(
            FAN_OUT_READ_TIMEOUT,
            collect_capped(body, FAN_OUT_REQUEST_LIMIT, &self.buffered, &mut held),
        )
        .await;
        let request = match collected {
            Err(_) => {
                return error_response(
                    Code::DeadlineExceeded,
                    &format!(
                        "a fan-out request (nodes metadata) must arrive within {} s",
                        FAN_OUT_READ_TIMEOUT.as_secs()
                    ),
                );
            }
            Ok(Ok((data, _))) => data,
            Ok(Err(Capped::Body(_))) if exceeded.load(Ordering::SeqCst) => return self.too_large(),
            Ok(Err(Capped::Body(e))) => {
                return error_response(Code::InvalidArgument, &format!("reading the request: {e}"));
            }
            Ok(Err(Capped::TooLarge)) => {
                return error_response(
                    Code::ResourceExhausted,
                    &format!(
                        "a fan-out request (nodes metadata) may hold {FAN_OUT_REQUEST_LIMIT} bytes in total, \
                         all its messages together: use node for larger requests"
                    ),
                );
            }
            Ok(Err(Capped::Busy)) => return error_response(Code::ResourceExhausted, &busy()),
        };
        let full = |b: Bytes| http_body_util::Full::new(b).map_err(|never| match never {}).boxed_unsync();
        let sent =
            futures::future::join_all(targets.iter().map(|(_, route)| self.send(route, &call, full(request.clone()))))
                .await;
        drop(request);
        let replies: Vec<NodeReply> = targets.into_iter().map(|(name, _)| name).zip(sent).collect();
        // The request's reservation is kept until the reply ends: its bodies may still be
        // sending.
        let resp = if streaming {
            merged_stream(replies, &self.buffered)
        } else {
            merged_unary(replies, &self.buffered).await
        };
        resp.map(|b| hold(b, held))
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

    /// A connection to `node` for callers with `roles` (dialled if there is none or it died)
    /// and the permits for one call of `caller` on it. Only callers of the same connection
    /// wait for its dial, and at most [`DIAL_TIMEOUT`].
    async fn remote_sender(
        &self,
        node: &str,
        roles: &str,
        caller: &str,
    ) -> Result<(SendRequest<ProxyBody>, Arc<RemoteSlot>, CallPermits), (Code, String)> {
        let dialer = self.remote.as_ref().ok_or((Code::Unavailable, format!("node {node}: no request forwarding")))?;
        let key = (node.to_string(), roles.to_string());
        let pool = {
            let mut remotes = self.remotes.lock().unwrap_or_else(|p| p.into_inner());
            if !remotes.contains_key(&key) {
                // Pools nobody uses whose connections are gone go before a new one is added.
                remotes.retain(|_, p| !p.unused());
            }
            remotes.entry(key.clone()).or_default().clone()
        };
        let calls = pool.caller(caller);
        let mine = match calls.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => match tokio::time::timeout(CALLER_QUEUE_WAIT, calls.acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => {
                    return Err((
                        Code::ResourceExhausted,
                        format!(
                            "node {node}: this caller has {CALLS_PER_CALLER} calls in flight to it, the most one \
                             caller may have; end some first"
                        ),
                    ));
                }
            },
        };
        let (slot, stream) = match pool.room() {
            Some(r) => r,
            None => {
                // Every connection of the pool is full: wait a moment for any call to end.
                let deadline = tokio::time::Instant::now() + CALLER_QUEUE_WAIT;
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if let Some(r) = pool.room() {
                        break r;
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Err((
                            Code::ResourceExhausted,
                            format!(
                                "node {node}: callers with roles [{roles}] fill {CONNECTIONS_PER_ROLE_SET} \
                                 connections of {STREAMS_PER_CONNECTION} calls to it; try again"
                            ),
                        ));
                    }
                }
            }
        };
        let dialled = tokio::time::timeout(DIAL_TIMEOUT, async {
            let mut conn = slot.conn.lock().await;
            if let Some(c) = conn.as_ref()
                && !c.is_closed()
                && !slot.stale()
            {
                slot.called();
                return Ok(c.clone());
            }
            *conn = None;
            let sender = dialer.dial(&with_port(node)).await?;
            *conn = Some(sender.clone());
            slot.called();
            Ok::<_, BoxError>(sender)
        })
        .await;
        let failed = match dialled {
            Ok(Ok(sender)) => return Ok((sender, slot, (mine, stream))),
            Ok(Err(e)) => format!("node {node}: {e}"),
            Err(_) => format!(
                "node {node}: dialling timed out after {} s (TCP connect, TLS and HTTP/2 handshake)",
                DIAL_TIMEOUT.as_secs()
            ),
        };
        drop((mine, stream));
        pool.drop_failed(&slot);
        drop(slot);
        let mut remotes = self.remotes.lock().unwrap_or_else(|p| p.into_inner());
        // Nobody else waits on it: a failed node leaves no pool behind.
        if remotes.get(&key).is_some_and(|p| Arc::ptr_eq(p, &pool))
            && Arc::strong_count(&pool) == 2
            && pool.slots.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
        {
            remotes.remove(&key);
        }
        Err((Code::Unavailable, failed))
    }
}

/// The connection key of a role set: sorted, without repeats.
fn role_key(roles: &[String]) -> String {
    let mut roles = roles.to_vec();
    roles.sort();
    roles.dedup();
    roles.join(",")
}

fn busy() -> String {
    format!(
        "apid is buffering its limit of {FAN_OUT_BUFFER_TOTAL} bytes for fan-out calls (nodes metadata) already; \
         try again, or use node"
    )
}

/// A byte budget: one permit per byte buffered.
struct Budget(Arc<Semaphore>);

impl Budget {
    fn new(bytes: u64) -> Self {
        Budget(Arc::new(Semaphore::new(bytes as usize)))
    }

    /// Adds `n` bytes to `held`, or fails if the budget has not that many left.
    fn reserve(&self, held: &mut Reserved, n: usize) -> Result<(), Capped> {
        if n == 0 {
            return Ok(());
        }
        let n = u32::try_from(n).map_err(|_| Capped::Busy)?;
        let more = self.0.clone().try_acquire_many_owned(n).map_err(|_| Capped::Busy)?;
        match held.0.as_mut() {
            Some(p) => p.merge(more),
            None => held.0 = Some(more),
        }
        Ok(())
    }
}

/// Bytes reserved of a [`Budget`], given back when dropped.
#[derive(Default)]
struct Reserved(Option<OwnedSemaphorePermit>);

/// Why [`collect_capped`] stopped.
#[derive(Debug)]
enum Capped {
    /// More than its limit: a message announcing more, or all of them together.
    TooLarge,
    /// The shared budget is spent.
    Busy,
    /// The body failed.
    Body(BoxError),
}

/// `body` whole, at most `limit` bytes of gRPC frames, each byte reserved in `held` from
/// `budget`. A message whose header announces more than the limit is refused at its header.
async fn collect_capped(
    mut body: ProxyBody,
    limit: u64,
    budget: &Budget,
    held: &mut Reserved,
) -> Result<(Bytes, Option<http::HeaderMap>), Capped> {
    let mut scanner = FrameScanner::new(limit);
    let mut chunks = Vec::new();
    let mut total = 0u64;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Capped::Body)?;
        match frame.into_data() {
            Ok(data) => {
                total += data.len() as u64;
                if total > limit || scanner.scan(&data).is_err() {
                    return Err(Capped::TooLarge);
                }
                budget.reserve(held, data.len())?;
                chunks.push(data);
            }
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    trailers = Some(t);
                }
            }
        }
    }
    let data = match chunks.len() {
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut whole = bytes::BytesMut::with_capacity(total as usize);
            for c in chunks {
                whole.extend_from_slice(&c);
            }
            whole.freeze()
        }
    };
    Ok((data, trailers))
}

/// `body`, keeping `hold` (a permit, a reservation) until it is dropped.
fn hold<T: Send + Unpin + 'static>(body: ProxyBody, hold: T) -> ProxyBody {
    Held { body, _hold: hold }.boxed_unsync()
}

struct Held<T> {
    body: ProxyBody,
    _hold: T,
}

impl<T: Unpin> http_body::Body for Held<T> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// One target's reply in a fan-out: its name, and its response or why there is none.
type NodeReply = (String, Result<Response<ProxyBody>, (Code, String)>);

/// What is sent to each target: the call's method, path, headers (routing keys stripped, roles
/// set) and the authority it came in on (for `proxyfrom`).
struct Call {
    method: http::Method,
    headers: http::HeaderMap,
    path: String,
    authority: Option<String>,
    /// The roles asserted downstream, as a connection key (see [`role_key`]).
    roles: String,
    /// The caller's identity, which [`CALLS_PER_CALLER`] counts.
    caller: String,
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

/// Unary replies, each tagged with its node (or standing for its failure), in one message of
/// at most [`FAN_OUT_REPLY_LIMIT`] bytes: a reply that would take it past is that node's error.
async fn merged_unary(replies: Vec<NodeReply>, budget: &Budget) -> Response<ProxyBody> {
    use super::fanout::{frame, frames, tag_unary, unary_error};
    let mut merged = Vec::new();
    let mut held = Reserved::default();
    for (name, reply) in replies {
        let part = match reply {
            Err((code, message)) => unary_error(&name, code as i32, &message),
            Ok(resp) => match grpc_status(resp.headers()) {
                Some((code, message)) if code != 0 => unary_error(&name, code, &message),
                _ => match collect_capped(
                    resp.into_body(),
                    FAN_OUT_REPLY_LIMIT.saturating_sub(merged.len() as u64),
                    budget,
                    &mut held,
                )
                .await
                {
                    Err(Capped::Body(e)) => unary_error(&name, Code::Unavailable as i32, &e.to_string()),
                    Err(Capped::TooLarge) => unary_error(
                        &name,
                        Code::ResourceExhausted as i32,
                        &format!(
                            "reply larger than what is left of the merged reply's limit of {FAN_OUT_REPLY_LIMIT} bytes"
                        ),
                    ),
                    Err(Capped::Busy) => unary_error(&name, Code::ResourceExhausted as i32, &busy()),
                    Ok((data, trailers)) => {
                        let status = trailers.as_ref().and_then(grpc_status);
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
    grpc_response(hold(http_body_util::StreamBody::new(frames).boxed_unsync(), held))
}

/// Streamed replies of every node interleaved as they come, each message tagged with its node;
/// a node's failure is one message standing for it. A node's message larger than
/// [`FAN_OUT_REPLY_LIMIT`] ends its part with an error at the message's header; the bytes of
/// partial messages are reserved from `budget`.
fn merged_stream(replies: Vec<NodeReply>, budget: &Budget) -> Response<ProxyBody> {
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
                    let budget = Budget(budget.0.clone());
                    let state = (resp.into_body(), Vec::<u8>::new(), name, false, Reserved::default());
                    futures::stream::unfold(state, move |(mut body, mut buf, name, done, mut held)| {
                        let budget = Budget(budget.0.clone());
                        async move {
                        if done {
                            return None;
                        }
                        loop {
                            match body.frame().await {
                                Some(Ok(f)) if f.is_data() => {
                                    if let Ok(chunk) = f.into_data() {
                                        if budget.reserve(&mut held, chunk.len()).is_err() {
                                            let out = vec![data(streamed_error(&name, Code::ResourceExhausted as i32, &busy()))];
                                            return Some((futures::stream::iter(out), (body, Vec::new(), name, true, Reserved::default())));
                                        }
                                        buf.extend_from_slice(&chunk);
                                    }
                                    let mut out = Vec::new();
                                    while buf.len() >= 5 {
                                        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                                        if len as u64 > FAN_OUT_REPLY_LIMIT {
                                            out.push(data(streamed_error(
                                                &name,
                                                Code::ResourceExhausted as i32,
                                                &format!("reply message of {len} bytes exceeds the limit of {FAN_OUT_REPLY_LIMIT} bytes"),
                                            )));
                                            return Some((futures::stream::iter(out), (body, Vec::new(), name, true, Reserved::default())));
                                        }
                                        if buf.len() < 5 + len {
                                            break;
                                        }
                                        let message: Vec<u8> = buf.drain(..5 + len).skip(5).collect();
                                        out.push(data(tag_streamed(&message, &name)));
                                    }
                                    if buf.is_empty() {
                                        // Whole messages only: nothing is buffered any more.
                                        held = Reserved::default();
                                    }
                                    if !out.is_empty() {
                                        return Some((futures::stream::iter(out), (body, buf, name, false, held)));
                                    }
                                }
                                Some(Ok(f)) => {
                                    let failed = f.trailers_ref().and_then(grpc_status).filter(|(code, _)| *code != 0);
                                    let out = failed.map(|(code, message)| data(streamed_error(&name, code, &message)));
                                    return Some((
                                        futures::stream::iter(out.into_iter().collect::<Vec<_>>()),
                                        (body, buf, name, true, held),
                                    ));
                                }
                                Some(Err(e)) => {
                                    let out =
                                        vec![data(streamed_error(&name, Code::Unavailable as i32, &e.to_string()))];
                                    return Some((futures::stream::iter(out), (body, buf, name, true, held)));
                                }
                                None => return None,
                            }
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
        let reader = Caller { roles: vec!["os:reader".into()], ..Caller::default() };
        assert_eq!(proxy.roles(&h, &reader), vec!["os:reader"], "a reader's claim is ignored");
        let imp = Caller { roles: vec!["os:impersonator".into()], ..Caller::default() };
        assert_eq!(proxy.roles(&h, &imp), vec!["os:admin"]);
        let ro = Proxy::new("/nonexistent".into(), None, Arc::new(|_: &str| false), RoleMode::ReadOnly);
        assert_eq!(ro.roles(&h, &imp), vec!["os:reader"]);
    }

    fn body_of(bytes: Vec<u8>) -> ProxyBody {
        http_body_util::Full::new(Bytes::from(bytes)).map_err(|never| match never {}).boxed_unsync()
    }

    fn message(len: usize) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&(len as u32).to_be_bytes());
        m.resize(5 + len, 7);
        m
    }

    fn available(budget: &Budget) -> usize {
        budget.0.available_permits()
    }

    #[tokio::test]
    async fn a_fan_out_request_is_refused_at_the_header_past_its_total() {
        let budget = Budget::new(FAN_OUT_BUFFER_TOTAL);
        // Only the header of a message larger than the limit: refused with nothing buffered.
        let mut held = Reserved::default();
        let header = message(FAN_OUT_REQUEST_LIMIT as usize + 1)[..5].to_vec();
        let r = collect_capped(body_of(header), FAN_OUT_REQUEST_LIMIT, &budget, &mut held).await;
        assert!(matches!(r, Err(Capped::TooLarge)), "{r:?}");
        assert_eq!(available(&budget), FAN_OUT_BUFFER_TOTAL as usize);
        // Messages each within the limit, together past it.
        let mut many = Vec::new();
        for _ in 0..3 {
            many.extend(message(2 << 20));
        }
        let mut held = Reserved::default();
        let r = collect_capped(body_of(many), FAN_OUT_REQUEST_LIMIT, &budget, &mut held).await;
        assert!(matches!(r, Err(Capped::TooLarge)), "{r:?}");
        drop(held);
        assert_eq!(available(&budget), FAN_OUT_BUFFER_TOTAL as usize, "a refusal gives its bytes back");
        // Within the limit: the bytes whole, reserved until the reservation goes.
        let two = [message(10), message(0), message(1000)].concat();
        let mut held = Reserved::default();
        let (data, _) = collect_capped(body_of(two.clone()), FAN_OUT_REQUEST_LIMIT, &budget, &mut held).await.unwrap();
        assert_eq!(data.as_ref(), &two[..]);
        assert_eq!(available(&budget), FAN_OUT_BUFFER_TOTAL as usize - two.len());
        drop(held);
        assert_eq!(available(&budget), FAN_OUT_BUFFER_TOTAL as usize);
    }

    #[tokio::test]
    async fn fan_out_buffering_shares_one_budget() {
        let budget = Budget::new(3000);
        let mut first = Reserved::default();
        collect_capped(body_of(message(2000)), FAN_OUT_REQUEST_LIMIT, &budget, &mut first).await.unwrap();
        let mut second = Reserved::default();
        let r = collect_capped(body_of(message(2000)), FAN_OUT_REQUEST_LIMIT, &budget, &mut second).await;
        assert!(matches!(r, Err(Capped::Busy)), "{r:?}");
        drop((first, second));
        let mut third = Reserved::default();
        collect_capped(body_of(message(2000)), FAN_OUT_REQUEST_LIMIT, &budget, &mut third).await.unwrap();
    }

    #[test]
    fn connections_are_keyed_by_the_role_set() {
        let roles = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(role_key(&roles(&["os:reader", "os:admin", "os:reader"])), "os:admin,os:reader");
        assert_eq!(role_key(&roles(&["os:admin", "os:reader"])), role_key(&roles(&["os:reader", "os:admin"])));
        assert_ne!(role_key(&roles(&["os:reader"])), role_key(&roles(&["os:admin"])));
    }

    /// Dials `silent…` forever; anything else gets a real HTTP/2 server over a pipe whose
    /// replies never end (held-open streams).
    #[derive(Default)]
    struct FakeDialer {
        dials: std::sync::atomic::AtomicUsize,
        servers: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    }

    #[async_trait::async_trait]
    impl RemoteDialer for FakeDialer {
        async fn dial(&self, target: &str) -> Result<SendRequest<ProxyBody>, BoxError> {
            if target.starts_with("silent") {
                futures::future::pending::<()>().await;
            }
            self.dials.fetch_add(1, Ordering::SeqCst);
            let (client, server) = tokio::io::duplex(1 << 16);
            let task = tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
                    type Never = std::convert::Infallible;
                    let body = http_body_util::StreamBody::new(futures::stream::pending::<
                        Result<hyper::body::Frame<Bytes>, Never>,
                    >());
                    let mut resp = Response::new(body);
                    resp.headers_mut().insert("content-type", HeaderValue::from_static("application/grpc"));
                    Ok::<_, Never>(resp)
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(server), service)
                    .await;
            });
            self.servers.lock().unwrap().push(task);
            remote_handshake(client).await
        }
    }

    fn forwarding(dialer: Arc<FakeDialer>) -> Proxy {
        Proxy::new("/nonexistent".into(), Some(dialer), Arc::new(|_: &str| false), RoleMode::Certificate)
    }

    fn call(roles: &str) -> Call {
        call_by(roles, "cert:one")
    }

    fn call_by(roles: &str, caller: &str) -> Call {
        Call {
            method: http::Method::POST,
            headers: http::HeaderMap::new(),
            path: "/machine.MachineService/Version".into(),
            authority: None,
            roles: roles.into(),
            caller: caller.into(),
        }
    }

    fn empty() -> ProxyBody {
        body_of(Vec::new())
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_node_delays_only_its_own_callers_and_only_for_the_dial_timeout() {
        let dialer = Arc::new(FakeDialer::default());
        let proxy = Arc::new(forwarding(dialer.clone()));
        let start = tokio::time::Instant::now();
        let silent = {
            let proxy = proxy.clone();
            tokio::spawn(async move { proxy.send(&Route::Remote("silent".into()), &call("os:reader"), empty()).await })
        };
        tokio::task::yield_now().await;
        // The same roles, another node: not behind the silent dial.
        let good = proxy.send(&Route::Remote("good".into()), &call("os:reader"), empty()).await;
        assert!(good.is_ok(), "{:?}", good.err());
        assert!(start.elapsed() < Duration::from_millis(100), "waited {:?}", start.elapsed());
        assert!(!silent.is_finished());
        let Err((code, message)) = silent.await.unwrap() else { panic!("a silent node answered") };
        assert_eq!(code, Code::Unavailable);
        assert!(message.contains("node silent") && message.contains("timed out"), "{message}");
        let waited = start.elapsed();
        assert!(waited >= DIAL_TIMEOUT && waited < DIAL_TIMEOUT + Duration::from_secs(1), "{waited:?}");
        assert!(!proxy.remotes.lock().unwrap().keys().any(|(n, _)| n == "silent"), "no pool left behind");
    }

    #[tokio::test(start_paused = true)]
    async fn one_caller_cannot_take_every_stream_to_a_node() {
        let dialer = Arc::new(FakeDialer::default());
        let proxy = forwarding(dialer.clone());
        let node = Route::Remote("worker".into());
        let mut open = Vec::new();
        for _ in 0..CALLS_PER_CALLER {
            open.push(proxy.send(&node, &call_by("os:reader", "cert:a"), empty()).await.expect("within the cap"));
        }
        let Err((code, message)) = proxy.send(&node, &call_by("os:reader", "cert:a"), empty()).await else {
            panic!("a call over the cap was let through")
        };
        assert_eq!(code, Code::ResourceExhausted);
        assert!(message.contains("node worker") && message.contains(&CALLS_PER_CALLER.to_string()), "{message}");
        // Another caller of the same role set still has calls, on the same connection first.
        let b = proxy.send(&node, &call_by("os:reader", "cert:b"), empty()).await;
        assert!(b.is_ok(), "{:?}", b.err());
        assert_eq!(dialer.dials.load(Ordering::SeqCst), 1);
        // Another role set has a connection of its own.
        let admin = proxy.send(&node, &call_by("os:admin", "cert:c"), empty()).await;
        assert!(admin.is_ok(), "{:?}", admin.err());
        assert_eq!(dialer.dials.load(Ordering::SeqCst), 2);
        // A stream that ends gives its call back.
        open.pop();
        assert!(proxy.send(&node, &call_by("os:reader", "cert:a"), empty()).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_connection_gets_a_sibling_and_the_pool_is_bounded() {
        let dialer = Arc::new(FakeDialer::default());
        let proxy = forwarding(dialer.clone());
        let node = Route::Remote("worker".into());
        let mut open = Vec::new();
        // Callers at their limit, until every connection of the pool is full.
        let room = CONNECTIONS_PER_ROLE_SET * STREAMS_PER_CONNECTION;
        let callers = room.div_ceil(CALLS_PER_CALLER);
        for c in 0..callers {
            let take = CALLS_PER_CALLER.min(room - open.len());
            for _ in 0..take {
                let caller = format!("cert:{c}");
                open.push(proxy.send(&node, &call_by("os:reader", &caller), empty()).await.expect("the pool has room"));
            }
        }
        assert_eq!(open.len(), room);
        assert_eq!(dialer.dials.load(Ordering::SeqCst), CONNECTIONS_PER_ROLE_SET);
        let Err((code, message)) = proxy.send(&node, &call_by("os:reader", "cert:late"), empty()).await else {
            panic!("a call past a full pool was let through")
        };
        assert_eq!(code, Code::ResourceExhausted);
        assert!(message.contains("os:reader") && message.contains("connections"), "{message}");
        // A call ending makes room for the next caller, on the connection it left.
        open.swap_remove(0);
        assert!(proxy.send(&node, &call_by("os:reader", "cert:late"), empty()).await.is_ok());
        assert_eq!(dialer.dials.load(Ordering::SeqCst), CONNECTIONS_PER_ROLE_SET);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_idle_long_enough_for_the_peer_to_close_it_is_not_reused() {
        let dialer = Arc::new(FakeDialer::default());
        let proxy = forwarding(dialer.clone());
        let node = Route::Remote("worker".into());
        drop(proxy.send(&node, &call("os:admin"), empty()).await.unwrap());
        tokio::time::advance(REMOTE_IDLE_REUSE - Duration::from_secs(1)).await;
        drop(proxy.send(&node, &call("os:admin"), empty()).await.unwrap());
        assert_eq!(dialer.dials.load(Ordering::SeqCst), 1, "reused while fresh");
        // A stream held open keeps the connection in use however long it lasts.
        let held = proxy.send(&node, &call("os:admin"), empty()).await.unwrap();
        tokio::time::advance(REMOTE_IDLE_REUSE * 3).await;
        drop(proxy.send(&node, &call("os:admin"), empty()).await.unwrap());
        assert_eq!(dialer.dials.load(Ordering::SeqCst), 1, "reused while a stream is open");
        drop(held);
        tokio::time::advance(REMOTE_IDLE_REUSE).await;
        drop(proxy.send(&node, &call("os:admin"), empty()).await.unwrap());
        assert_eq!(dialer.dials.load(Ordering::SeqCst), 2, "dialled again after being idle");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_connection_is_replaced() {
        let dialer = Arc::new(FakeDialer::default());
        let proxy = forwarding(dialer.clone());
        let node = Route::Remote("worker".into());
        drop(proxy.send(&node, &call("os:admin"), empty()).await.unwrap());
        for server in dialer.servers.lock().unwrap().drain(..) {
            server.abort();
        }
        // The client's connection task notices the pipe closing.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let again = proxy.send(&node, &call("os:admin"), empty()).await;
        assert!(again.is_ok(), "{:?}", again.err());
        assert_eq!(dialer.dials.load(Ordering::SeqCst), 2);
    }
}

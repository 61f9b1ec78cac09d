//! The door's accept loop, shared by apid (:50000) and trustd (:50001): every TCP connection
//! of the API goes through one bounded path.
//!
//! - **Admission**, before any TLS: at most [`MAX_PER_SOURCE`] connections from one source
//!   (an IPv4 address, or an IPv6 /64) and [`MAX_CONNECTIONS`] in all, plus a small
//!   [`NEWCOMER_RESERVE`] for sources that hold none, so that a flood from a few addresses
//!   that fills the total does not lock out the operator's first connection. Above a cap the
//!   connection is closed at once (a rate-limited line names the peer and the cap); the ones
//!   already open are not touched.
//! - **Time**: the TLS handshake within [`HANDSHAKE_TIMEOUT`]; the HTTP/2 preface within
//!   [`PREFACE_TIMEOUT`] after it; then a connection with no request open for
//!   [`IDLE_TIMEOUT`] is shut down gracefully (GOAWAY). hyper has neither of the last two, so
//!   a watchdog beside each connection counts requests in flight (a guard lives in each
//!   response body, so a streaming Watch or `logs -f` keeps its connection busy until it
//!   ends) and the bytes the peer has sent.
//! - **HTTP/2 limits** chosen in one builder ([`http2`]).
//! - Every request carries tonic's [`TcpConnectInfo`], so a handler can ask
//!   `request.remote_addr()`.
//! - When `stop` fires, the listener closes and each connection is shut down gracefully: the
//!   calls in flight get [`DRAIN_TIMEOUT`] to finish.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::server::TcpConnectInfo;

/// Connections admitted in all. Each costs a descriptor, a TLS session and HTTP/2 buffers
/// (tens of KiB idle, up to the send buffer per stream when busy): 512 keeps the worst case
/// in tens of MiB, far inside the descriptor limit the node's processes raise to
/// (`kernel::rlimit::NOFILE_WANTED`), and is far more than a node's legitimate callers need
/// (an operator, a few talosctls, the other nodes' apids, each holding one connection).
pub const MAX_CONNECTIONS: usize = 512;

/// Connections admitted from one source. One talosctl or apid holds one connection per node;
/// 64 leaves room for many clients behind one NAT address or a fleet operator's pool, while
/// no single address can take more than an eighth of [`MAX_CONNECTIONS`].
pub const MAX_PER_SOURCE: usize = 64;

/// Connections admitted above [`MAX_CONNECTIONS`], only for a source that holds none: a flood
/// from a handful of addresses that fills the total still leaves the next operator's (or
/// enrolling worker's) first connection a way in. Bounded too, so the door's worst case is
/// `MAX_CONNECTIONS + NEWCOMER_RESERVE`.
pub const NEWCOMER_RESERVE: usize = 64;

/// IPv6 sources are counted by their /64: one host gets a whole /64 and could otherwise use a
/// new address for each connection.
const IPV6_SOURCE_PREFIX: u32 = 64;

/// The TLS handshake: a few round trips, milliseconds on any network a node is managed over.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// After TLS, the client's HTTP/2 preface (24 bytes, sent at once by every HTTP/2 client).
pub const PREFACE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection with no request open for this long is shut down gracefully. Clients
/// reconnect on demand (talosctl opens one per command; gRPC channels redial after GOAWAY).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long calls in flight may take to finish when the door stops (machined's stop timeout,
/// after which it sends SIGKILL, is longer), and how long a graceful shutdown of an idle
/// connection may take before it is dropped.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Pings on a connection with streams open, so a peer gone without a FIN (a Watch's client
/// on a dead network) is noticed: a ping every 20 s, the connection closed if its answer
/// takes 10 s.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Streams open at once on one connection. talosctl's widest use is a fan-out or a few
/// Watches; 128 is plenty for that and halves h2's default of 256 per connection × 512
/// connections of buffered requests.
pub const MAX_CONCURRENT_STREAMS: u32 = 128;

/// The size of a request's headers (gRPC metadata: roles, `node`/`nodes` routing lists).
/// 64 KiB holds a fan-out to a few thousand nodes named in `nodes`.
pub const MAX_HEADER_LIST_SIZE: u32 = 64 * 1024;

/// Streams a client may reset before the server accepted them, and streams the server may
/// reset for a client's protocol errors, before the connection is closed (the HTTP/2 "rapid
/// reset" attacks). A legitimate client resets a handful at most.
pub const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 32;
pub const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 128;

/// At most one line per this interval about refused connections (with a count of the ones
/// not logged), so a flood cannot flood the log.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The source already holds [`MAX_PER_SOURCE`] connections.
    PerSource { limit: usize },
    /// The door holds [`MAX_CONNECTIONS`] connections (and the newcomers' reserve is used up,
    /// or this source is not a newcomer).
    Total { limit: usize },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::PerSource { limit } => write!(f, "it holds {limit} connections, the limit per source"),
            Refusal::Total { limit } => write!(f, "the door holds {limit} connections, the limit in all"),
        }
    }
}

/// The caps of a door.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub total: usize,
    pub per_source: usize,
    pub newcomer_reserve: usize,
}

impl Caps {
    pub const DEFAULT: Caps =
        Caps { total: MAX_CONNECTIONS, per_source: MAX_PER_SOURCE, newcomer_reserve: NEWCOMER_RESERVE };
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_source: HashMap<IpAddr, usize>,
}

/// The connections a door holds, by source.
#[derive(Debug)]
pub struct Admission {
    caps: Caps,
    counts: Arc<Mutex<Counts>>,
}

/// One admitted connection; dropping it gives its place back.
#[derive(Debug)]
pub struct Permit {
    counts: Arc<Mutex<Counts>>,
    source: IpAddr,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_source.get_mut(&self.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.per_source.remove(&self.source);
            }
        }
    }
}

/// What a connection from `ip` counts against: IPv4 (also IPv4-mapped IPv6) by address,
/// IPv6 by its /64.
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let mask = u128::MAX << (128 - IPV6_SOURCE_PREFIX);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

impl Admission {
    pub fn new(caps: Caps) -> Self {
        Admission { caps, counts: Arc::default() }
    }

    /// A place for a connection from `ip`, or why there is none.
    pub fn admit(&self, ip: IpAddr) -> Result<Permit, Refusal> {
        let source = source_key(ip);
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let held = counts.per_source.get(&source).copied().unwrap_or(0);
        if held >= self.caps.per_source {
            return Err(Refusal::PerSource { limit: self.caps.per_source });
        }
        let room = if held == 0 { self.caps.total + self.caps.newcomer_reserve } else { self.caps.total };
        if counts.total >= room {
            return Err(Refusal::Total { limit: self.caps.total });
        }
        counts.total += 1;
        *counts.per_source.entry(source).or_insert(0) += 1;
        Ok(Permit { counts: self.counts.clone(), source })
    }

    /// Connections held, in all and from `ip`'s source.
    pub fn held(&self, ip: IpAddr) -> (usize, usize) {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        (counts.total, counts.per_source.get(&source_key(ip)).copied().unwrap_or(0))
    }
}

/// Says at most once per [`REFUSAL_LOG_INTERVAL`] that connections are being refused.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    unsaid: u64,
}

impl RefusalLog {
    /// The line to log for this refusal, if one is due now.
    fn note(&mut self, now: Instant, peer: SocketAddr, why: Refusal) -> Option<String> {
        if self.last.is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL) {
            self.unsaid += 1;
            return None;
        }
        let more = std::mem::take(&mut self.unsaid);
        self.last = Some(now);
        let tail = if more > 0 { format!(" ({more} more refused since the last such line)") } else { String::new() };
        Some(format!("refusing a connection from {peer}: {why}{tail}"))
    }
}

/// The HTTP/2 server settings of the door, all in one place.
pub fn http2() -> hyper::server::conn::http2::Builder<TokioExecutor> {
    let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST_SIZE)
        .keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESET_STREAMS);
    b
}

/// A listener's door: its name (for the log) and its admission.
pub struct Door {
    name: &'static str,
    admission: Admission,
    refusals: Mutex<RefusalLog>,
}

impl Door {
    pub fn new(name: &'static str, caps: Caps) -> Arc<Self> {
        Arc::new(Door { name, admission: Admission::new(caps), refusals: Mutex::default() })
    }

    fn log(&self, message: &str) {
        crate::kernel::console::log_line(self.name, message);
    }

    /// Accepts on `listener` until `stop`, serving each admitted connection over TLS with the
    /// service `make` builds from its TLS session (the peer's certificate is there) and its
    /// source. Every connection is a task of `conns`, so a caller can wait for them to drain.
    pub async fn serve<M, S, B>(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        tls: Arc<rustls::ServerConfig>,
        make: M,
        stop: CancellationToken,
        conns: TaskTracker,
    ) where
        M: Fn(&rustls::ServerConnection, SocketAddr) -> S + Send + Sync + 'static,
        S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let make = Arc::new(make);
        loop {
            let (tcp, peer) = tokio::select! {
                () = stop.cancelled() => return,
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: say so, and do not spin.
                        self.log(&format!("accepting: {e}"));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let permit = match self.admission.admit(peer.ip()) {
                Ok(p) => p,
                Err(why) => {
                    // Closed at once, before any TLS.
                    drop(tcp);
                    let line = self.refusals.lock().unwrap_or_else(|p| p.into_inner()).note(Instant::now(), peer, why);
                    if let Some(line) = line {
                        self.log(&line);
                    }
                    continue;
                }
            };
            let door = self.clone();
            let (acceptor, make, stop) = (acceptor.clone(), make.clone(), stop.clone());
            conns.spawn(async move {
                let _permit = permit;
                door.connection(tcp, peer, acceptor, &*make, stop).await;
            });
        }
    }

    async fn connection<M, S, B>(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        acceptor: tokio_rustls::TlsAcceptor,
        make: &M,
        stop: CancellationToken,
    ) where
        M: Fn(&rustls::ServerConnection, SocketAddr) -> S,
        S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let _ = tcp.set_nodelay(true);
        let info = TcpConnectInfo { local_addr: tcp.local_addr().ok(), remote_addr: Some(peer) };
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            r = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)) => match r {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return self.log(&format!("TLS handshake with {peer} refused: {e}")),
                Err(_) => return tracing::debug!("{}: TLS handshake with {peer} timed out", self.name),
            },
        };
        let activity = Arc::new(Activity::new());
        let service = Tracked { inner: make(stream.get_ref().1, peer), activity: activity.clone(), info };
        let io = Counted { inner: stream, read: activity.clone() };
        let conn = http2().serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        // When the current graceful shutdown gives up and drops the connection.
        let mut draining: Option<tokio::time::Instant> = None;
        loop {
            let next = match draining {
                Some(deadline) => deadline,
                None => activity.next_check(),
            };
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("{}: connection from {peer}: {e}", self.name);
                    }
                    return;
                }
                () = stop.cancelled(), if draining.is_none() => {
                    // The listener stops or is replaced: calls in flight (the apply that
                    // caused the change among them) finish; new ones go to the new listener.
                    conn.as_mut().graceful_shutdown();
                    draining = Some(tokio::time::Instant::now() + DRAIN_TIMEOUT);
                }
                () = tokio::time::sleep_until(next) => {
                    if draining.is_some() {
                        return;
                    }
                    match activity.verdict(Instant::now()) {
                        Verdict::Alive => {}
                        Verdict::NoPreface => {
                            return tracing::debug!("{}: {peer} sent no HTTP/2 preface in {PREFACE_TIMEOUT:?}", self.name);
                        }
                        Verdict::Idle => {
                            tracing::debug!("{}: {peer} idle for {IDLE_TIMEOUT:?}, closing", self.name);
                            conn.as_mut().graceful_shutdown();
                            draining = Some(tokio::time::Instant::now() + DRAIN_TIMEOUT);
                        }
                    }
                }
            }
        }
    }
}

/// The HTTP/2 client preface, which an HTTP/2 connection starts with.
const PREFACE_LEN: u64 = 24;

/// What the watchdog knows of one connection.
struct Activity {
    /// When TLS completed.
    start: Instant,
    /// Bytes the peer has sent after TLS.
    read: AtomicU64,
    /// Requests whose response has not ended.
    in_flight: AtomicUsize,
    /// When the last request began or ended.
    last: Mutex<Instant>,
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Alive,
    NoPreface,
    Idle,
}

impl Activity {
    fn new() -> Self {
        let now = Instant::now();
        Activity { start: now, read: AtomicU64::new(0), in_flight: AtomicUsize::new(0), last: Mutex::new(now) }
    }

    fn last(&self) -> Instant {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn verdict(&self, now: Instant) -> Verdict {
        if self.read.load(Ordering::Relaxed) < PREFACE_LEN {
            if now.duration_since(self.start) >= PREFACE_TIMEOUT {
                return Verdict::NoPreface;
            }
            return Verdict::Alive;
        }
        if self.in_flight.load(Ordering::Acquire) == 0 && now.duration_since(self.last()) >= IDLE_TIMEOUT {
            return Verdict::Idle;
        }
        Verdict::Alive
    }

    /// When the verdict may next change (an early wake-up only re-checks).
    fn next_check(&self) -> tokio::time::Instant {
        let at = if self.read.load(Ordering::Relaxed) < PREFACE_LEN {
            self.start + PREFACE_TIMEOUT
        } else if self.in_flight.load(Ordering::Acquire) > 0 {
            // Busy: no earlier than a full idle period after the end of its last request.
            Instant::now() + IDLE_TIMEOUT
        } else {
            self.last() + IDLE_TIMEOUT
        };
        tokio::time::Instant::from_std(at)
    }

    fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        Busy(self.clone())
    }
}

/// One request in flight, until its response body is done or dropped.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The TLS stream, counting what the peer sends.
struct Counted<T> {
    inner: T,
    read: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before);
        if n > 0 {
            self.read.read.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The service of one connection: each request gets the connection's addresses and counts as
/// in flight until its response ends.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    info: TcpConnectInfo,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> hyper::service::Service<http::Request<Incoming>> for Tracked<S>
where
    S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
{
    type Response = http::Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn call(&self, mut req: http::Request<Incoming>) -> Self::Future {
        req.extensions_mut().insert(self.info.clone());
        let busy = self.activity.begin();
        let future = self.inner.call(req);
        Box::pin(async move {
            let response = future.await?;
            Ok(response.map(|body| TrackedBody { inner: Box::pin(body), _busy: busy }))
        })
    }
}

/// A response body that keeps its request in flight until it is done or dropped.
pub struct TrackedBody<B> {
    inner: Pin<Box<B>>,
    _busy: Busy,
}

impl<B: Body> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.get_mut().inner.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const SMALL: Caps = Caps { total: 4, per_source: 2, newcomer_reserve: 1 };

    #[test]
    fn a_source_is_capped_and_its_places_come_back_on_drop() {
        let a = Admission::new(SMALL);
        let p1 = a.admit(ip("10.0.0.1")).unwrap();
        let p2 = a.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(a.admit(ip("10.0.0.1")).unwrap_err(), Refusal::PerSource { limit: 2 });
        // Another source is not affected.
        let _other = a.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(a.held(ip("10.0.0.1")), (3, 2));
        drop(p1);
        assert_eq!(a.held(ip("10.0.0.1")), (2, 1));
        let _p3 = a.admit(ip("10.0.0.1")).unwrap();
        drop(p2);
        drop(_p3);
        assert_eq!(a.held(ip("10.0.0.1")), (1, 0));
        // An emptied source leaves no entry behind.
        assert!(!a.counts.lock().unwrap().per_source.contains_key(&ip("10.0.0.1")));
    }

    #[test]
    fn the_total_is_capped_with_a_reserve_for_newcomers_only() {
        let b = Admission::new(SMALL);
        let _full: Vec<Permit> =
            ["10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3"].iter().map(|s| b.admit(ip(s)).unwrap()).collect();
        // Full: a source that holds connections is refused by the total...
        assert_eq!(b.admit(ip("10.0.0.1")).unwrap_err(), Refusal::Total { limit: 4 });
        // ...a newcomer gets the reserve, while it lasts.
        let newcomer = b.admit(ip("10.0.0.9")).unwrap();
        assert_eq!(b.admit(ip("10.0.0.10")).unwrap_err(), Refusal::Total { limit: 4 });
        assert_eq!(b.admit(ip("10.0.0.9")).unwrap_err(), Refusal::Total { limit: 4 });
        assert_eq!(b.held(ip("10.0.0.9")), (5, 1));
        drop(newcomer);
        let _again = b.admit(ip("10.0.0.10")).unwrap();
    }

    #[test]
    fn the_real_caps_hold_against_a_flood() {
        let a = Admission::new(Caps::DEFAULT);
        let mut held = Vec::new();
        let mut refused = (0, 0);
        for host in 0..20u8 {
            for _ in 0..250 {
                match a.admit(IpAddr::from([127, 0, 7, 100 + host])) {
                    Ok(p) => held.push(p),
                    Err(Refusal::PerSource { .. }) => refused.0 += 1,
                    Err(Refusal::Total { .. }) => refused.1 += 1,
                }
            }
        }
        // 8 sources fill the total at 64 each; the other 12 get one reserve place each.
        assert_eq!(held.len(), MAX_CONNECTIONS + 12);
        assert_eq!(refused, (8 * (250 - 64), 12 * 249));
        // The operator's first connection still gets in.
        let operator = a.admit(ip("127.0.0.1")).unwrap();
        held.clear();
        drop(operator);
        assert_eq!(a.held(ip("127.0.0.1")), (0, 0));
    }

    #[test]
    fn sources_are_counted_by_ipv4_address_and_ipv6_prefix() {
        assert_eq!(source_key(ip("::ffff:127.0.7.1")), ip("127.0.7.1"));
        assert_eq!(source_key(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        let a = Admission::new(SMALL);
        let _p = [a.admit(ip("2001:db8::1")).unwrap(), a.admit(ip("2001:db8::2")).unwrap()];
        assert_eq!(a.admit(ip("2001:db8::3")).unwrap_err(), Refusal::PerSource { limit: 2 });
        let _q = [a.admit(ip("127.0.7.1")).unwrap(), a.admit(ip("::ffff:127.0.7.1")).unwrap()];
        assert_eq!(a.admit(ip("127.0.7.1")).unwrap_err(), Refusal::PerSource { limit: 2 });
    }

    #[test]
    fn refusals_are_logged_at_most_once_per_interval_with_a_count() {
        let mut log = RefusalLog::default();
        let t0 = Instant::now();
        let peer: SocketAddr = "127.0.7.9:4000".parse().unwrap();
        let why = Refusal::Total { limit: 512 };
        let first = log.note(t0, peer, why).unwrap();
        assert!(first.contains("127.0.7.9:4000") && first.contains("512"), "{first}");
        for i in 1..100 {
            assert!(log.note(t0 + Duration::from_millis(i), peer, why).is_none());
        }
        let next = log.note(t0 + REFUSAL_LOG_INTERVAL, peer, why).unwrap();
        assert!(next.contains("99 more refused"), "{next}");
    }

    #[test]
    fn the_watchdog_waits_for_the_preface_then_for_idleness() {
        let a = Arc::new(Activity::new());
        let t = a.start;
        assert_eq!(a.verdict(t + Duration::from_secs(1)), Verdict::Alive);
        assert_eq!(a.verdict(t + PREFACE_TIMEOUT), Verdict::NoPreface);
        a.read.store(PREFACE_LEN, Ordering::Relaxed);
        assert_eq!(a.verdict(t + PREFACE_TIMEOUT), Verdict::Alive);
        // A stream open (a Watch) keeps the connection alive however long it lasts.
        let busy = a.begin();
        assert_eq!(a.verdict(Instant::now() + IDLE_TIMEOUT * 10), Verdict::Alive);
        drop(busy);
        let ended = a.last();
        assert_eq!(a.verdict(ended + IDLE_TIMEOUT - Duration::from_millis(1)), Verdict::Alive);
        assert_eq!(a.verdict(ended + IDLE_TIMEOUT), Verdict::Idle);
        assert_eq!(a.next_check(), tokio::time::Instant::from_std(ended + IDLE_TIMEOUT));
    }
}

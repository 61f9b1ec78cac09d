//! The host DNS forwarder (Talos's host DNS): a caching DNS forwarder listening on UDP and
//! TCP (`127.0.0.53:53` on a node) that the node's own `resolv.conf` names. Each query is
//! answered from the cache, or forwarded as it came to the upstreams in order — over UDP,
//! again over TCP when the answer was truncated — until one answers; when none does, the
//! asker gets SERVFAIL. Answers are kept by (name, type, class) for their records' smallest
//! TTL ([`cache`]). The wire format is read only as far as [`message`] needs.
//!
//! It opens its sockets in the network namespace of the thread that calls [`Listeners::bind`]
//! and [`Forwarder::serve`]: the controller runs it on a thread of its own inside the
//! namespace it was given. It never resolves anything itself and never forwards to itself.

pub mod cache;
pub mod message;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use cache::Cache;
use message::{Message, RCODE_REFUSED, RCODE_SERVFAIL};

/// How long one upstream has to answer before the next is asked.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a TCP asker may stay silent before the connection is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);
const MAX_MESSAGE: usize = 65_535;

#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("listening for DNS on {proto} {addr}: {source}")]
    Bind {
        proto: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("asking upstream {upstream} over {proto}: {source}")]
    Upstream {
        proto: &'static str,
        upstream: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("upstream {upstream} did not answer within {timeout:?}")]
    Timeout { upstream: SocketAddr, timeout: Duration },
}

/// The forwarder's bound sockets.
pub struct Listeners {
    udp: UdpSocket,
    tcp: TcpListener,
}

impl Listeners {
    /// Binds UDP and TCP on `addr` in the calling thread's network namespace. Needs a tokio
    /// runtime.
    pub async fn bind(addr: SocketAddr) -> Result<Listeners, DnsError> {
        let udp = UdpSocket::bind(addr).await.map_err(|source| DnsError::Bind { proto: "udp", addr, source })?;
        let tcp = TcpListener::bind(addr).await.map_err(|source| DnsError::Bind { proto: "tcp", addr, source })?;
        Ok(Listeners { udp, tcp })
    }
}

pub struct Forwarder {
    listen: SocketAddr,
    upstreams: watch::Receiver<Vec<SocketAddr>>,
    /// The cache, and the upstreams its answers came from.
    cache: Mutex<(Cache, Vec<SocketAddr>)>,
    timeout: Duration,
}

fn unspecified_like(addr: &SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// Whether `response` answers `query`.
fn answers(query: &Message, response: &Message) -> bool {
    response.is_response() && response.id == query.id && response.question == query.question
}

impl Forwarder {
    /// A forwarder for the asker-facing address `listen`, asking the upstreams `upstreams`
    /// holds at the time of each query.
    pub fn new(listen: SocketAddr, upstreams: watch::Receiver<Vec<SocketAddr>>) -> Self {
        Forwarder { listen, upstreams, cache: Mutex::new((Cache::new(), Vec::new())), timeout: UPSTREAM_TIMEOUT }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The cache, emptied first if the upstreams changed since it was filled: as Talos does,
    /// so that answers of a replaced (perhaps poisoned) upstream are not served on.
    fn cache(&self) -> std::sync::MutexGuard<'_, (Cache, Vec<SocketAddr>)> {
        // A panic while holding the lock leaves the cache as consistent as any other moment.
        let mut guard = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.upstreams.borrow();
        if guard.1 != *current {
            guard.0.clear();
            guard.1 = current.clone();
        }
        drop(current);
        guard
    }

    /// Serves both listeners until `cancel` fires.
    pub async fn serve(self: Arc<Self>, listeners: Listeners, cancel: CancellationToken) {
        let udp = Arc::new(listeners.udp);
        let mut tcp_tasks = tokio::task::JoinSet::new();
        let mut udp_tasks = tokio::task::JoinSet::new();
        let mut buf = vec![0u8; MAX_MESSAGE];
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                received = udp.recv_from(&mut buf) => match received {
                    Ok((len, peer)) => {
                        let query = buf[..len].to_vec();
                        let (this, udp) = (Arc::clone(&self), Arc::clone(&udp));
                        udp_tasks.spawn(async move {
                            if let Some(reply) = this.answer(&query, true).await
                                && let Err(e) = udp.send_to(&reply, peer).await
                            {
                                tracing::debug!("host DNS: replying to {peer}: {e}");
                            }
                        });
                    }
                    Err(e) => tracing::debug!("host DNS: receiving over UDP: {e}"),
                },
                accepted = listeners.tcp.accept() => match accepted {
                    Ok((stream, _)) => {
                        let this = Arc::clone(&self);
                        tcp_tasks.spawn(async move { this.serve_tcp(stream).await });
                    }
                    Err(e) => tracing::debug!("host DNS: accepting over TCP: {e}"),
                },
                Some(_) = udp_tasks.join_next(), if !udp_tasks.is_empty() => {}
                Some(_) = tcp_tasks.join_next(), if !tcp_tasks.is_empty() => {}
            }
        }
        udp_tasks.abort_all();
        tcp_tasks.abort_all();
    }

    async fn serve_tcp(&self, mut stream: TcpStream) {
        loop {
            let Ok(Ok(len)) = tokio::time::timeout(TCP_IDLE, stream.read_u16()).await else { return };
            let mut query = vec![0u8; usize::from(len)];
            if stream.read_exact(&mut query).await.is_err() {
                return;
            }
            let Some(reply) = self.answer(&query, false).await else { return };
            let Ok(len) = u16::try_from(reply.len()) else { return };
            if stream.write_u16(len).await.is_err() || stream.write_all(&reply).await.is_err() {
                return;
            }
        }
    }

    /// The reply to one query (`None`: nothing is sent, e.g. the bytes were a response).
    pub async fn answer(&self, query: &[u8], over_udp: bool) -> Option<Vec<u8>> {
        let msg = match message::parse(query) {
            Ok(msg) if !msg.is_response() => msg,
            Ok(_) => return None,
            Err(_) => return message::formerr_for(query),
        };
        let cached = self.cache().0.get(&msg.question, msg.id, Instant::now());
        let reply = match cached {
            Some(reply) => reply,
            None => self.forward(query, &msg).await,
        };
        if over_udp && reply.len() > msg.udp_limit() {
            return match message::parse(&reply) {
                Ok(parsed) => Some(message::truncated_reply(&reply, &parsed)),
                Err(_) => Some(message::error_reply(query, &msg, RCODE_SERVFAIL)),
            };
        }
        Some(reply)
    }

    async fn forward(&self, query: &[u8], msg: &Message) -> Vec<u8> {
        let upstreams = self.upstreams.borrow().clone();
        for upstream in upstreams.into_iter().filter(|u| *u != self.listen) {
            match self.exchange(upstream, query, msg).await {
                // This upstream cannot answer now; another may.
                Ok((_, response)) if matches!(response.rcode(), RCODE_SERVFAIL | RCODE_REFUSED) => {
                    tracing::debug!("host DNS: upstream {upstream} answered rcode {}", response.rcode());
                }
                Ok((bytes, response)) => {
                    self.cache().0.put(&bytes, &response, Instant::now());
                    return bytes;
                }
                Err(e) => tracing::debug!("host DNS: {e}"),
            }
        }
        message::error_reply(query, msg, RCODE_SERVFAIL)
    }

    /// Asks one upstream over UDP, and over TCP if the UDP answer was truncated.
    async fn exchange(
        &self,
        upstream: SocketAddr,
        query: &[u8],
        msg: &Message,
    ) -> Result<(Vec<u8>, Message), DnsError> {
        let udp = tokio::time::timeout(self.timeout, exchange_udp(upstream, query, msg))
            .await
            .map_err(|_| DnsError::Timeout { upstream, timeout: self.timeout })??;
        if !udp.1.truncated() {
            return Ok(udp);
        }
        tokio::time::timeout(self.timeout, exchange_tcp(upstream, query, msg))
            .await
            .map_err(|_| DnsError::Timeout { upstream, timeout: self.timeout })?
    }
}

async fn exchange_udp(upstream: SocketAddr, query: &[u8], msg: &Message) -> Result<(Vec<u8>, Message), DnsError> {
    let err = |source| DnsError::Upstream { proto: "udp", upstream, source };
    let socket = UdpSocket::bind(unspecified_like(&upstream)).await.map_err(err)?;
    // Connected, so a closed port comes back as an error now instead of a timeout.
    socket.connect(upstream).await.map_err(err)?;
    socket.send(query).await.map_err(err)?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let len = socket.recv(&mut buf).await.map_err(err)?;
        if let Ok(response) = message::parse(&buf[..len])
            && answers(msg, &response)
        {
            return Ok((buf[..len].to_vec(), response));
        }
    }
}

async fn exchange_tcp(upstream: SocketAddr, query: &[u8], msg: &Message) -> Result<(Vec<u8>, Message), DnsError> {
    let err = |source| DnsError::Upstream { proto: "tcp", upstream, source };
    let mut stream = TcpStream::connect(upstream).await.map_err(err)?;
    let len = u16::try_from(query.len()).map_err(|_| err(std::io::ErrorKind::InvalidInput.into()))?;
    stream.write_u16(len).await.map_err(err)?;
    stream.write_all(query).await.map_err(err)?;
    let len = stream.read_u16().await.map_err(err)?;
    let mut buf = vec![0u8; usize::from(len)];
    stream.read_exact(&mut buf).await.map_err(err)?;
    match message::parse(&buf) {
        Ok(response) if answers(msg, &response) => Ok((buf, response)),
        _ => Err(err(std::io::Error::new(std::io::ErrorKind::InvalidData, "an answer to another question"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_from_the_cache_until_the_upstreams_change() {
        let listen: SocketAddr = "127.0.0.53:53".parse().unwrap();
        // The forwarder never asks itself, so these tests open no socket.
        let (tx, rx) = watch::channel(Vec::new());
        let fwd = Forwarder::new(listen, rx);
        let query = message::build_query(0x0707, "cached.test", 1);
        let mut answer = query.clone();
        answer[2..4].copy_from_slice(&0x8180u16.to_be_bytes());
        answer[6..8].copy_from_slice(&1u16.to_be_bytes());
        answer.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 9, 8, 7]);
        fwd.cache().0.put(&answer, &message::parse(&answer).unwrap(), Instant::now());

        let reply = fwd.answer(&query, true).await.unwrap();
        assert_eq!(message::answer_ipv4s(&reply).unwrap(), [Ipv4Addr::new(10, 9, 8, 7)], "from the cache");
        let servfail = |reply: &[u8]| message::parse(reply).unwrap().rcode() == RCODE_SERVFAIL;
        let other = message::build_query(0x0808, "other.test", 1);
        assert!(servfail(&fwd.answer(&other, true).await.unwrap()), "no upstream: SERVFAIL");

        tx.send(vec![listen]).unwrap();
        assert!(servfail(&fwd.answer(&query, true).await.unwrap()), "new upstreams: the cache is gone");
        assert_eq!(fwd.answer(&answer, true).await, None, "a response is not answered");
        let formerr = fwd.answer(&[0xab, 0xcd, 0, 0, 0], true).await.unwrap();
        assert_eq!(&formerr[..2], &[0xab, 0xcd], "a broken query gets FORMERR under its ID");
    }
}

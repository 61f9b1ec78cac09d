//! What the DHCPv4 and DHCPv6 clients share: the shape of their state machines (a client
//! looks for a server, requests what one offered, holds a lease, renews it, rebinds it,
//! stops), the events that drive them, their errors, and the session's wait for the next
//! event on the socket and the one timer, and what that timer asks of a client holding a
//! lease (stay, renew, rebind, give it up): the same in both protocols. Each protocol keeps
//! its own messages, leases and other transitions; nothing here sends or knows a wire format.

use std::fmt::{Debug, Display};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kernel::netlink::NetlinkError;
use crate::network::operator::{Notifier, Offer, OperatorSpecs};

/// Receive errors in a row after which the socket is given up and opened anew.
const MAX_RECEIVE_ERRORS: u32 = 16;

/// A protocol's lease, and what it names the rest by.
pub trait Lease: Debug + Clone + PartialEq + Eq {
    /// The protocol's messages.
    type Message: Debug + Clone + PartialEq + Eq;
    /// The state's name while the client looks for a server (`selecting`, `soliciting`).
    const DISCOVERING: &'static str;
    /// Client time at which the lease is to be renewed with the server that granted it (T1).
    fn renew_at(&self) -> Duration;
    /// Client time at which any server is asked to extend it (T2).
    fn rebind_at(&self) -> Duration;
    /// Client time at which it runs out.
    fn expires_at(&self) -> Duration;
}

/// Where one client stands; `L` is its protocol's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State<L: Lease> {
    Init,
    /// DISCOVER or SOLICIT sent, waiting for an offer.
    Discovering {
        xid: u32,
        attempt: u32,
    },
    /// REQUEST sent for `offer` (an OFFER or ADVERTISE).
    Requesting {
        xid: u32,
        offer: Box<L::Message>,
        attempt: u32,
    },
    Bound {
        lease: Box<L>,
    },
    Renewing {
        lease: Box<L>,
        xid: u32,
    },
    Rebinding {
        lease: Box<L>,
        xid: u32,
    },
    Stopped,
}

impl<L: Lease> State<L> {
    pub fn name(&self) -> &'static str {
        match self {
            State::Init => "init",
            State::Discovering { .. } => L::DISCOVERING,
            State::Requesting { .. } => "requesting",
            State::Bound { .. } => "bound",
            State::Renewing { .. } => "renewing",
            State::Rebinding { .. } => "rebinding",
            State::Stopped => "stopped",
        }
    }

    pub fn lease(&self) -> Option<&L> {
        match self {
            State::Bound { lease } | State::Renewing { lease, .. } | State::Rebinding { lease, .. } => Some(lease),
            _ => None,
        }
    }
}

/// A protocol's waits: retransmissions while it looks for a server or requests a lease (the
/// first wait, doubling up to the most), and while it renews or rebinds one (half the time
/// left, but not less than the least, and never past the deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub retransmit_first: Duration,
    pub retransmit_most: Duration,
    pub renew_retransmit_least: Duration,
}

impl Timing {
    /// The wait after sending attempt `attempt` (0 is the first).
    pub fn retransmit(&self, attempt: u32) -> Duration {
        self.retransmit_first.saturating_mul(1 << attempt.min(16)).min(self.retransmit_most)
    }

    /// The wait at `now` before asking again for a lease that must be extended by `deadline`.
    pub fn halfway(&self, now: Duration, deadline: Duration) -> Duration {
        let left = deadline.saturating_sub(now);
        (left / 2).max(self.renew_retransmit_least).min(left)
    }
}

/// What the timer running out asks of a client that holds a lease (RFC 2131 §4.4.5,
/// RFC 8415 §18.2.4–5): each protocol carries it out with its own messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseTimer<L> {
    /// Nothing is due: stay bound and wait this long.
    Wait { lease: Box<L>, wait: Duration },
    /// Ask the server that granted the lease to extend it, in transaction `xid`.
    Renew { lease: Box<L>, xid: u32 },
    /// Ask any server to extend it, in transaction `xid`.
    Rebind { lease: Box<L>, xid: u32 },
    /// It ran out: nothing it granted stands.
    Expire,
}

impl<L: Lease> State<L> {
    /// The timer ran out at client time `now`. A bound client renews at T1, rebinds at T2
    /// and gives the lease up when it runs out, each in a new transaction (`next_xid`); a
    /// renewing client asks again in its own transaction until T2, then rebinds; a rebinding
    /// one asks again until the lease runs out. A state that holds no lease is given back.
    pub fn lease_timer(self, now: Duration, next_xid: u32) -> Result<LeaseTimer<L>, Self> {
        Ok(match self {
            State::Bound { lease } => {
                if now >= lease.expires_at() {
                    LeaseTimer::Expire
                } else if now >= lease.rebind_at() {
                    LeaseTimer::Rebind { lease, xid: next_xid }
                } else if now >= lease.renew_at() {
                    LeaseTimer::Renew { lease, xid: next_xid }
                } else {
                    let wait = lease.renew_at() - now;
                    LeaseTimer::Wait { lease, wait }
                }
            }
            State::Renewing { lease, xid } if now >= lease.rebind_at() => LeaseTimer::Rebind { lease, xid },
            State::Renewing { lease, xid } => LeaseTimer::Renew { lease, xid },
            State::Rebinding { lease, .. } if now >= lease.expires_at() => LeaseTimer::Expire,
            State::Rebinding { lease, xid } => LeaseTimer::Rebind { lease, xid },
            other => return Err(other),
        })
    }
}

/// What drives a client's state machine; `M` is its protocol's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<M> {
    Start,
    Received(Box<M>),
    /// The timer last set ran out.
    Timer,
    Stop,
}

#[derive(Debug, thiserror::Error)]
pub enum DhcpError {
    #[error("{protocol} on {link}: {source}")]
    Netlink {
        protocol: &'static str,
        link: String,
        #[source]
        source: NetlinkError,
    },
    #[error("{protocol} on {link}: the link does not exist")]
    NoLink { protocol: &'static str, link: String },
    #[error("{protocol} on {link}: {action} the socket on port {port}: {source}")]
    Socket {
        protocol: &'static str,
        link: String,
        port: u16,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// What a client's watched status does when its lease goes and when it stops.
pub trait ClientStatus {
    /// The lease is gone: no address is held.
    fn lease_gone(&mut self);
    /// The client stopped.
    fn stopped(&mut self);
}

/// One session's socket and timer, waited on together.
pub struct Session<'a> {
    /// `DHCPv4` or `DHCPv6`, for errors and logs.
    pub protocol: &'static str,
    pub link: &'a str,
    /// The client's port, for errors.
    pub port: u16,
    pub socket: UdpSocket,
    deadline: Option<Instant>,
    receive_errors: u32,
    buf: Vec<u8>,
}

impl<'a> Session<'a> {
    /// A session over `socket` as opening it went, receiving into a buffer of `buf_len` bytes.
    pub fn new(
        protocol: &'static str,
        link: &'a str,
        port: u16,
        buf_len: usize,
        socket: std::io::Result<UdpSocket>,
    ) -> Result<Self, DhcpError> {
        let socket = socket.map_err(|source| DhcpError::Socket {
            protocol,
            link: link.to_string(),
            port,
            action: "opening",
            source,
        })?;
        Ok(Session { protocol, link, port, socket, deadline: None, receive_errors: 0, buf: vec![0u8; buf_len] })
    }

    /// The lease is gone: nothing it offered stands.
    pub fn lease_gone<S: ClientStatus>(&self, offer: &Offer, status: &watch::Sender<S>, notify: &Notifier) {
        tracing::info!(link = %self.link, "{} lease gone", self.protocol);
        offer.set(OperatorSpecs::default(), notify);
        status.send_modify(S::lease_gone);
    }

    /// The client is done: the session ends well.
    pub fn stopped<S: ClientStatus>(&self, status: &watch::Sender<S>) -> Result<(), DhcpError> {
        status.send_modify(S::stopped);
        Ok(())
    }

    /// (Re)sets the one timer to run out `wait` from now.
    pub fn set_timer(&mut self, wait: std::time::Duration) {
        self.deadline = Some(Instant::now() + wait);
    }

    /// The error of `action` on the socket.
    pub fn socket_error(&self, action: &'static str, source: std::io::Error) -> DhcpError {
        DhcpError::Socket { protocol: self.protocol, link: self.link.to_string(), port: self.port, action, source }
    }

    /// Waits for the next event: a stop, the timer, or a datagram that `decode` makes a
    /// message for this client (`Ok(None)`: one that is not, such as another client's
    /// request). A datagram that does not decode is logged and skipped.
    pub async fn next_event<M, E: Display>(
        &mut self,
        stop: &CancellationToken,
        decode: impl Fn(&[u8]) -> Result<Option<M>, E>,
    ) -> Result<Event<M>, DhcpError> {
        loop {
            let deadline = self.deadline;
            let timer = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => return Ok(Event::Stop),
                () = timer => {
                    self.deadline = None;
                    return Ok(Event::Timer);
                }
                received = self.socket.recv_from(&mut self.buf) => {
                    let (n, from) = match received {
                        Ok(got) => {
                            self.receive_errors = 0;
                            got
                        }
                        // A transient error (an ICMP error queued on the socket) must not
                        // drop a lease; one that persists ends the session.
                        Err(source) if self.receive_errors < MAX_RECEIVE_ERRORS => {
                            self.receive_errors += 1;
                            tracing::debug!(link = %self.link, "receiving {}: {source}", self.protocol);
                            continue;
                        }
                        Err(source) => return Err(self.socket_error("receiving on", source)),
                    };
                    match decode(&self.buf[..n]) {
                        Ok(Some(m)) => return Ok(Event::Received(Box::new(m))),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::debug!(link = %self.link, from = %from, "ignoring a {} packet: {e}", self.protocol);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lease acquired at 0 s with T1 100 s, T2 175 s and 200 s valid.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Held;

    impl Lease for Held {
        type Message = ();
        const DISCOVERING: &'static str = "discovering";
        fn renew_at(&self) -> Duration {
            Duration::from_secs(100)
        }
        fn rebind_at(&self) -> Duration {
            Duration::from_secs(175)
        }
        fn expires_at(&self) -> Duration {
            Duration::from_secs(200)
        }
    }

    #[test]
    fn retransmissions_double_up_to_the_most_and_renewals_halve_the_time_left() {
        let secs = Duration::from_secs;
        let t = Timing { retransmit_first: secs(4), retransmit_most: secs(64), renew_retransmit_least: secs(4) };
        let waits: Vec<u64> = (0..8).map(|a| t.retransmit(a).as_secs()).collect();
        assert_eq!(waits, [4, 8, 16, 32, 64, 64, 64, 64]);
        assert_eq!(t.retransmit(u32::MAX), secs(64), "no overflow however many attempts");
        assert_eq!(t.halfway(secs(100), secs(200)), secs(50), "half the time left");
        assert_eq!(t.halfway(secs(100), secs(106)), secs(4), "not less than the least");
        assert_eq!(t.halfway(secs(100), secs(102)), secs(2), "never past the deadline");
        assert_eq!(t.halfway(secs(100), secs(90)), Duration::ZERO, "a deadline passed");
    }

    #[test]
    fn the_lease_timer_renews_rebinds_and_expires_in_order() {
        let lease = Box::new(Held);
        let bound = || State::Bound { lease: lease.clone() };
        let renewing = || State::Renewing { lease: lease.clone(), xid: 7 };
        let rebinding = || State::Rebinding { lease: lease.clone(), xid: 8 };
        let wait = |s| LeaseTimer::Wait { lease: lease.clone(), wait: Duration::from_secs(s) };
        let renew = |xid| LeaseTimer::Renew { lease: lease.clone(), xid };
        let rebind = |xid| LeaseTimer::Rebind { lease: lease.clone(), xid };
        let cases: Vec<(&str, State<Held>, u64, LeaseTimer<Held>)> = vec![
            ("bound before T1 waits for T1", bound(), 40, wait(60)),
            ("bound at T1 renews in a new transaction", bound(), 100, renew(9)),
            ("bound past T2 (a suspended node) rebinds", bound(), 180, rebind(9)),
            ("bound past the end gives it up", bound(), 200, LeaseTimer::Expire),
            ("renewing before T2 asks again in its transaction", renewing(), 150, renew(7)),
            ("renewing at T2 rebinds in the same transaction", renewing(), 175, rebind(7)),
            ("rebinding before the end asks again", rebinding(), 190, rebind(8)),
            ("rebinding at the end gives it up", rebinding(), 200, LeaseTimer::Expire),
        ];
        for (name, state, now, want) in cases {
            assert_eq!(state.lease_timer(Duration::from_secs(now), 9), Ok(want), "{name}");
        }
        assert_eq!(State::<Held>::Init.lease_timer(Duration::ZERO, 9), Err(State::Init));
    }
}

//! The DHCPv4 client's state machine (RFC 2131 §4.4): a pure function of the state, one
//! event and the time since the client started, returning the next state and what to do.
//! The driver owns the socket and the one timer; nothing here sleeps or sends.
//!
//! INIT → SELECTING (DISCOVER, broadcast) → REQUESTING (REQUEST for the first OFFER,
//! broadcast) → BOUND (ACK) → at T1 RENEWING (REQUEST unicast to the server) → at T2
//! REBINDING (REQUEST broadcast) → at expiry the lease is gone and discovery starts over.
//! A NAK anywhere drops the lease and starts over; stopping a bound client releases.

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::network::dhcp_client::{self, Lease as _, LeaseTimer, Timing};

use super::packet::{FLAG_BROADCAST, Message, MessageType, code};

/// Talos's lease time when the server names none.
const DEFAULT_LEASE: Duration = Duration::from_secs(30 * 60);
/// Retransmissions (RFC 2131 §4.1: 4 s, doubling, up to 64 s); while renewing or rebinding
/// at least 4 s apart (RFC 2131 says 60 s; short test leases need less).
const TIMING: Timing = Timing {
    retransmit_first: Duration::from_secs(4),
    retransmit_most: Duration::from_secs(64),
    renew_retransmit_least: Duration::from_secs(4),
};
/// REQUESTs sent for one OFFER before discovery starts over.
const REQUEST_ATTEMPTS: u32 = 4;
/// The earliest a lease is renewed (Talos's minRenewDuration): a server saying T1 = 0 must
/// not have the client renew in a tight loop.
const MIN_RENEW: Duration = Duration::from_secs(5);

/// What the client asks for and says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    pub hardware_addr: Vec<u8>,
    /// Option 61, if any.
    pub client_id: Option<Vec<u8>>,
    pub request_hostname: bool,
    pub request_mtu: bool,
}

impl ClientConfig {
    fn parameters(&self) -> Vec<u8> {
        let mut list = vec![
            code::SUBNET_MASK,
            code::ROUTER,
            code::DNS,
            code::DOMAIN_NAME,
            code::CLASSLESS_ROUTE,
            code::DOMAIN_SEARCH,
            code::NTP,
        ];
        if self.request_mtu {
            list.push(code::INTERFACE_MTU);
        }
        if self.request_hostname {
            list.push(code::HOSTNAME);
        }
        list
    }

    fn message(&self, xid: u32, kind: MessageType) -> Message {
        let mut m = Message::request(xid, kind, &self.hardware_addr);
        if let Some(id) = &self.client_id {
            m.options.set(code::CLIENT_ID, id.clone());
        }
        if kind != MessageType::Release {
            m.options.set(code::PARAMETER_LIST, self.parameters());
            m.options.set(code::MAX_MESSAGE_SIZE, 1500u16.to_be_bytes().to_vec());
        }
        m
    }
}

/// A lease, as the ACK that granted it says, and when it was granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub ack: Message,
    pub address: Ipv4Addr,
    pub prefix_len: u8,
    pub server: Ipv4Addr,
    /// Client time at the ACK.
    pub acquired: Duration,
    pub lease_time: Duration,
    pub t1: Duration,
    pub t2: Duration,
}

impl Lease {
    /// The lease an ACK grants at `now`; `None` for an ACK that grants no address.
    pub fn from_ack(ack: Message, now: Duration, fallback_server: Option<Ipv4Addr>) -> Option<Lease> {
        if ack.yiaddr.is_unspecified() {
            return None;
        }
        let server = ack.server_id().or(fallback_server)?;
        let prefix_len = ack.subnet_mask().map_or(32, |m| u32::from(m).leading_ones() as u8);
        let lease_time = ack.lease_time().map_or(DEFAULT_LEASE, |s| Duration::from_secs(s.into()));
        // RFC 2131 §4.4.5 defaults, and an order the timers can keep: T1 ≤ T2 ≤ lease.
        let mut t2 = ack.rebinding_time().map_or(lease_time * 7 / 8, |s| Duration::from_secs(s.into()));
        t2 = t2.min(lease_time);
        let mut t1 = ack.renewal_time().map_or(lease_time / 2, |s| Duration::from_secs(s.into()));
        t1 = t1.max(MIN_RENEW).min(t2);
        Some(Lease { address: ack.yiaddr, prefix_len, server, acquired: now, lease_time, t1, t2, ack })
    }
}

impl dhcp_client::Lease for Lease {
    type Message = Message;
    const DISCOVERING: &'static str = "selecting";

    fn renew_at(&self) -> Duration {
        self.acquired + self.t1
    }

    fn rebind_at(&self) -> Duration {
        self.acquired + self.t2
    }

    fn expires_at(&self) -> Duration {
        self.acquired + self.lease_time
    }
}

pub type State = dhcp_client::State<Lease>;
pub type Event = dhcp_client::Event<Message>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// 255.255.255.255:67.
    Broadcast,
    /// The server, port 67.
    Server(Ipv4Addr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Send(Box<Message>, Destination),
    /// (Re)sets the one timer to run out this long from now.
    Timer(Duration),
    /// A lease was granted or renewed: what it offers is in force.
    Bound(Box<Lease>),
    /// The lease is gone (expired, refused): nothing it offered stands.
    Expired,
    /// The client is done.
    Stopped,
}

fn discover(config: &ClientConfig, xid: u32, attempt: u32) -> (State, Vec<Action>) {
    let mut m = config.message(xid, MessageType::Discover);
    m.flags = FLAG_BROADCAST;
    (
        State::Discovering { xid, attempt },
        vec![Action::Send(Box::new(m), Destination::Broadcast), Action::Timer(TIMING.retransmit(attempt))],
    )
}

fn request_offer(config: &ClientConfig, xid: u32, offer: Box<Message>, attempt: u32) -> (State, Vec<Action>) {
    let mut m = config.message(xid, MessageType::Request);
    m.flags = FLAG_BROADCAST;
    m.options.set(code::REQUESTED_IP, offer.yiaddr.octets().to_vec());
    if let Some(server) = offer.server_id() {
        m.options.set(code::SERVER_ID, server.octets().to_vec());
    }
    let actions = vec![Action::Send(Box::new(m), Destination::Broadcast), Action::Timer(TIMING.retransmit(attempt))];
    (State::Requesting { xid, offer, attempt }, actions)
}

/// A REQUEST for the lease held (RENEWING, RENEWING's retransmissions and REBINDING): the
/// address in `ciaddr`, no server id or requested address (RFC 2131 §4.3.2).
fn request_lease(config: &ClientConfig, xid: u32, lease: &Lease) -> Message {
    let mut m = config.message(xid, MessageType::Request);
    m.ciaddr = lease.address;
    m
}

fn bound(lease: Lease, now: Duration) -> (State, Vec<Action>) {
    let wait = lease.renew_at().saturating_sub(now);
    let lease = Box::new(lease);
    (State::Bound { lease: lease.clone() }, vec![Action::Bound(lease), Action::Timer(wait)])
}

fn renewing(config: &ClientConfig, lease: Box<Lease>, xid: u32, now: Duration) -> (State, Vec<Action>) {
    let m = request_lease(config, xid, &lease);
    let actions = vec![
        Action::Send(Box::new(m), Destination::Server(lease.server)),
        Action::Timer(TIMING.halfway(now, lease.rebind_at())),
    ];
    (State::Renewing { lease, xid }, actions)
}

fn rebinding(config: &ClientConfig, lease: Box<Lease>, xid: u32, now: Duration) -> (State, Vec<Action>) {
    let m = request_lease(config, xid, &lease);
    let actions =
        vec![Action::Send(Box::new(m), Destination::Broadcast), Action::Timer(TIMING.halfway(now, lease.expires_at()))];
    (State::Rebinding { lease, xid }, actions)
}

/// Whether `m` is a reply to transaction `xid` of this client, of one of `kinds`.
fn answers(m: &Message, xid: u32, config: &ClientConfig, kinds: &[MessageType]) -> bool {
    m.op == super::packet::BOOTREPLY
        && m.xid == xid
        && m.hardware_addr == config.hardware_addr
        && m.message_type().is_some_and(|t| kinds.contains(&t))
}

/// The next state and the actions for `event` at client time `now`. `next_xid` is the
/// transaction id a new exchange uses (the driver draws it at random).
pub fn step(state: State, event: Event, now: Duration, config: &ClientConfig, next_xid: u32) -> (State, Vec<Action>) {
    use MessageType::{Ack, Nak, Offer};
    match (state, event) {
        (State::Stopped, _) => (State::Stopped, vec![]),
        // Stopping: a held lease is released (unicast to its server), anything else dropped.
        (state, Event::Stop) => {
            let mut actions = Vec::new();
            if let Some(lease) = state.lease() {
                let mut m = config.message(next_xid, MessageType::Release);
                m.ciaddr = lease.address;
                m.options.set(code::SERVER_ID, lease.server.octets().to_vec());
                actions.push(Action::Send(Box::new(m), Destination::Server(lease.server)));
                actions.push(Action::Expired);
            }
            actions.push(Action::Stopped);
            (State::Stopped, actions)
        }
        (State::Init, Event::Start | Event::Timer) => discover(config, next_xid, 0),
        (State::Init, Event::Received(_)) => (State::Init, vec![]),
        (State::Discovering { xid, attempt }, Event::Timer) => discover(config, xid, attempt + 1),
        (State::Discovering { xid, attempt }, Event::Received(m)) => {
            if answers(&m, xid, config, &[Offer]) && !m.yiaddr.is_unspecified() && m.server_id().is_some() {
                request_offer(config, xid, m, 0)
            } else {
                (State::Discovering { xid, attempt }, vec![])
            }
        }
        (State::Requesting { xid, offer, attempt }, Event::Timer) => {
            if attempt + 1 >= REQUEST_ATTEMPTS {
                discover(config, next_xid, 0)
            } else {
                request_offer(config, xid, offer, attempt + 1)
            }
        }
        (State::Requesting { xid, offer, attempt }, Event::Received(m)) => {
            if answers(&m, xid, config, &[Nak]) {
                return discover(config, next_xid, 0);
            }
            if answers(&m, xid, config, &[Ack])
                && let Some(lease) = Lease::from_ack(*m, now, offer.server_id())
            {
                return bound(lease, now);
            }
            (State::Requesting { xid, offer, attempt }, vec![])
        }
        (state @ (State::Bound { .. } | State::Renewing { .. } | State::Rebinding { .. }), Event::Timer) => {
            match state.lease_timer(now, next_xid) {
                Ok(LeaseTimer::Wait { lease, wait }) => (State::Bound { lease }, vec![Action::Timer(wait)]),
                Ok(LeaseTimer::Renew { lease, xid }) => renewing(config, lease, xid, now),
                Ok(LeaseTimer::Rebind { lease, xid }) => rebinding(config, lease, xid, now),
                Ok(LeaseTimer::Expire) => expired(config, next_xid),
                Err(state) => (state, vec![]),
            }
        }
        (state @ State::Bound { .. }, Event::Start | Event::Received(_)) => (state, vec![]),
        (State::Renewing { lease, xid } | State::Rebinding { lease, xid }, Event::Received(m))
            if answers(&m, xid, config, &[Ack, Nak]) =>
        {
            match Lease::from_ack(*m.clone(), now, Some(lease.server)) {
                Some(renewed) if m.message_type() == Some(Ack) => bound(renewed, now),
                _ => expired(config, next_xid),
            }
        }
        (state @ (State::Renewing { .. } | State::Rebinding { .. }), _) => (state, vec![]),
        (state @ (State::Discovering { .. } | State::Requesting { .. }), Event::Start) => (state, vec![]),
    }
}

fn expired(config: &ClientConfig, xid: u32) -> (State, Vec<Action>) {
    let (state, mut actions) = discover(config, xid, 0);
    actions.insert(0, Action::Expired);
    (state, actions)
}

#[cfg(test)]
mod tests {
    use super::super::packet::BOOTREPLY;
    use super::*;

    const HW: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const SERVER: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
    const S: Duration = Duration::from_secs(1);

    fn config() -> ClientConfig {
        ClientConfig {
            hardware_addr: HW.to_vec(),
            client_id: Some(vec![1, 2, 0, 0, 0, 0, 1]),
            request_hostname: true,
            request_mtu: true,
        }
    }

    fn reply(kind: MessageType, xid: u32) -> Box<Message> {
        let mut m = Message::request(xid, kind, &HW);
        m.op = BOOTREPLY;
        m.yiaddr = Ipv4Addr::new(10, 9, 0, 50);
        m.options.set(code::SERVER_ID, SERVER.octets().to_vec());
        m.options.set(code::SUBNET_MASK, vec![255, 255, 255, 0]);
        m.options.set(code::LEASE_TIME, 120u32.to_be_bytes().to_vec());
        m.options.set(code::RENEWAL_TIME, 10u32.to_be_bytes().to_vec());
        m.options.set(code::REBINDING_TIME, 100u32.to_be_bytes().to_vec());
        Box::new(m)
    }

    fn lease_at(acquired: Duration) -> Box<Lease> {
        Box::new(Lease::from_ack(*reply(MessageType::Ack, 7), acquired, None).unwrap())
    }

    fn sent(actions: &[Action]) -> Vec<(MessageType, Destination, Ipv4Addr)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Send(m, d) => Some((m.message_type().unwrap(), *d, m.ciaddr)),
                _ => None,
            })
            .collect()
    }

    fn timer(actions: &[Action]) -> Option<Duration> {
        actions.iter().find_map(|a| match a {
            Action::Timer(d) => Some(*d),
            _ => None,
        })
    }

    #[test]
    fn lease_timers_from_the_ack_and_defaults() {
        let l = lease_at(5 * S);
        assert_eq!((l.address, l.prefix_len, l.server), (Ipv4Addr::new(10, 9, 0, 50), 24, SERVER));
        assert_eq!((l.renew_at(), l.rebind_at(), l.expires_at()), (15 * S, 105 * S, 125 * S));
        let mut ack = *reply(MessageType::Ack, 7);
        ack.options = Default::default();
        ack.options.set(code::MESSAGE_TYPE, vec![MessageType::Ack as u8]);
        ack.options.set(code::LEASE_TIME, 800u32.to_be_bytes().to_vec());
        let l = Lease::from_ack(ack.clone(), Duration::ZERO, Some(SERVER)).unwrap();
        assert_eq!((l.t1, l.t2, l.prefix_len), (400 * S, 700 * S, 32), "T1 = 1/2, T2 = 7/8; no mask: /32");
        ack.options.set(code::RENEWAL_TIME, 900u32.to_be_bytes().to_vec());
        let l = Lease::from_ack(ack.clone(), Duration::ZERO, Some(SERVER)).unwrap();
        assert_eq!(l.t1, l.t2, "T1 past T2 is clamped");
        ack.options.set(code::RENEWAL_TIME, 0u32.to_be_bytes().to_vec());
        let l = Lease::from_ack(ack.clone(), Duration::ZERO, Some(SERVER)).unwrap();
        assert_eq!(l.t1, 5 * S, "no renewing in a tight loop");
        assert!(Lease::from_ack(ack.clone(), Duration::ZERO, None).is_none(), "no server id known");
        ack.yiaddr = Ipv4Addr::UNSPECIFIED;
        assert!(Lease::from_ack(ack, Duration::ZERO, Some(SERVER)).is_none(), "no address");
    }

    #[test]
    fn transitions_table() {
        use Destination::{Broadcast, Server};
        use MessageType::*;
        let c = config();
        let offer = reply(Offer, 7);
        let lease = lease_at(Duration::ZERO);
        let leased = Ipv4Addr::new(10, 9, 0, 50);
        let none = Ipv4Addr::UNSPECIFIED;
        // (case, state, event, now, next state, sent, timer)
        type Case = (
            &'static str,
            State,
            Event,
            Duration,
            &'static str,
            Vec<(MessageType, Destination, Ipv4Addr)>,
            Option<Duration>,
        );
        let cases: Vec<Case> = vec![
            (
                "start: discover",
                State::Init,
                Event::Start,
                Duration::ZERO,
                "selecting",
                vec![(Discover, Broadcast, none)],
                Some(4 * S),
            ),
            (
                "no offer: discover again, waiting longer",
                State::Discovering { xid: 7, attempt: 1 },
                Event::Timer,
                9 * S,
                "selecting",
                vec![(Discover, Broadcast, none)],
                Some(16 * S),
            ),
            (
                "offer: request it",
                State::Discovering { xid: 7, attempt: 0 },
                Event::Received(offer.clone()),
                S,
                "requesting",
                vec![(Request, Broadcast, none)],
                Some(4 * S),
            ),
            (
                "an offer for another transaction: ignored",
                State::Discovering { xid: 8, attempt: 0 },
                Event::Received(offer.clone()),
                S,
                "selecting",
                vec![],
                None,
            ),
            (
                "an ack while selecting: ignored",
                State::Discovering { xid: 7, attempt: 0 },
                Event::Received(reply(Ack, 7)),
                S,
                "selecting",
                vec![],
                None,
            ),
            (
                "ack: bound until T1",
                State::Requesting { xid: 7, offer: offer.clone(), attempt: 0 },
                Event::Received(reply(Ack, 7)),
                2 * S,
                "bound",
                vec![],
                Some(10 * S),
            ),
            (
                "nak: discover again",
                State::Requesting { xid: 7, offer: offer.clone(), attempt: 0 },
                Event::Received(reply(Nak, 7)),
                2 * S,
                "selecting",
                vec![(Discover, Broadcast, none)],
                Some(4 * S),
            ),
            (
                "no ack: request again",
                State::Requesting { xid: 7, offer: offer.clone(), attempt: 1 },
                Event::Timer,
                9 * S,
                "requesting",
                vec![(Request, Broadcast, none)],
                Some(16 * S),
            ),
            (
                "never an ack: discover again",
                State::Requesting { xid: 7, offer: offer.clone(), attempt: 3 },
                Event::Timer,
                60 * S,
                "selecting",
                vec![(Discover, Broadcast, none)],
                Some(4 * S),
            ),
            (
                "T1: renew, unicast to the server",
                State::Bound { lease: lease.clone() },
                Event::Timer,
                10 * S,
                "renewing",
                vec![(Request, Server(SERVER), leased)],
                Some(45 * S),
            ),
            (
                "early timer while bound: wait on",
                State::Bound { lease: lease.clone() },
                Event::Timer,
                3 * S,
                "bound",
                vec![],
                Some(7 * S),
            ),
            (
                "no answer to the renewal: ask again",
                State::Renewing { lease: lease.clone(), xid: 9 },
                Event::Timer,
                55 * S,
                "renewing",
                vec![(Request, Server(SERVER), leased)],
                Some(22 * S + Duration::from_millis(500)),
            ),
            (
                "T2: rebind, broadcast",
                State::Renewing { lease: lease.clone(), xid: 9 },
                Event::Timer,
                100 * S,
                "rebinding",
                vec![(Request, Broadcast, leased)],
                Some(10 * S),
            ),
            (
                "renewed: bound again, timers from now",
                State::Renewing { lease: lease.clone(), xid: 7 },
                Event::Received(reply(Ack, 7)),
                11 * S,
                "bound",
                vec![],
                Some(10 * S),
            ),
            (
                "renewal refused: the lease is gone",
                State::Renewing { lease: lease.clone(), xid: 7 },
                Event::Received(reply(Nak, 7)),
                11 * S,
                "selecting",
                vec![(Discover, Broadcast, none)],
                Some(4 * S),
            ),
            (
                "rebound by any server",
                State::Rebinding { lease: lease.clone(), xid: 7 },
                Event::Received(reply(Ack, 7)),
                101 * S,
                "bound",
                vec![],
                Some(10 * S),
            ),
            (
                "expiry: the lease is gone, discovery starts over",
                State::Rebinding { lease: lease.clone(), xid: 9 },
                Event::Timer,
                120 * S,
                "selecting",
                vec![(Discover, Broadcast, none)],
                Some(4 * S),
            ),
            (
                "stop while bound: release, unicast",
                State::Bound { lease: lease.clone() },
                Event::Stop,
                20 * S,
                "stopped",
                vec![(Release, Server(SERVER), leased)],
                None,
            ),
            (
                "stop while renewing: release",
                State::Renewing { lease: lease.clone(), xid: 9 },
                Event::Stop,
                20 * S,
                "stopped",
                vec![(Release, Server(SERVER), leased)],
                None,
            ),
            (
                "stop without a lease: nothing to release",
                State::Discovering { xid: 7, attempt: 0 },
                Event::Stop,
                S,
                "stopped",
                vec![],
                None,
            ),
            ("stopped stays stopped", State::Stopped, Event::Timer, S, "stopped", vec![], None),
        ];
        for (name, state, event, now, want_state, want_sent, want_timer) in cases {
            let (next, actions) = step(state, event, now, &c, 99);
            assert_eq!(next.name(), want_state, "case {name:?}: state");
            assert_eq!(sent(&actions), want_sent, "case {name:?}: sent");
            assert_eq!(timer(&actions), want_timer, "case {name:?}: timer");
        }
    }

    #[test]
    fn bound_and_expired_are_announced() {
        let c = config();
        let offer = reply(MessageType::Offer, 7);
        let (_, actions) = step(
            State::Requesting { xid: 7, offer, attempt: 0 },
            Event::Received(reply(MessageType::Ack, 7)),
            S,
            &c,
            1,
        );
        assert!(matches!(&actions[0], Action::Bound(l) if l.acquired == S && l.address == Ipv4Addr::new(10, 9, 0, 50)));
        let (_, actions) =
            step(State::Rebinding { lease: lease_at(Duration::ZERO), xid: 9 }, Event::Timer, 130 * S, &c, 1);
        assert_eq!(actions[0], Action::Expired);
        let (_, actions) = step(State::Bound { lease: lease_at(Duration::ZERO) }, Event::Stop, S, &c, 1);
        assert_eq!(actions[1..], [Action::Expired, Action::Stopped]);
    }

    #[test]
    fn requests_carry_what_rfc_2131_asks() {
        let c = config();
        let (_, actions) = step(State::Init, Event::Start, Duration::ZERO, &c, 42);
        let Action::Send(discover, _) = &actions[0] else { panic!("no discover") };
        assert_eq!((discover.xid, discover.flags), (42, FLAG_BROADCAST));
        assert_eq!(discover.client_id(), Some(&[1, 2, 0, 0, 0, 0, 1][..]));
        let params = discover.options.get(code::PARAMETER_LIST).unwrap();
        for want in [
            code::SUBNET_MASK,
            code::ROUTER,
            code::DNS,
            code::NTP,
            code::CLASSLESS_ROUTE,
            code::INTERFACE_MTU,
            code::HOSTNAME,
        ] {
            assert!(params.contains(&want), "parameter {want} requested");
        }
        let no_hostname = ClientConfig { request_hostname: false, request_mtu: false, client_id: None, ..c.clone() };
        let (_, actions) = step(State::Init, Event::Start, Duration::ZERO, &no_hostname, 42);
        let Action::Send(discover, _) = &actions[0] else { panic!("no discover") };
        let params = discover.options.get(code::PARAMETER_LIST).unwrap();
        assert!(!params.contains(&code::HOSTNAME) && !params.contains(&code::INTERFACE_MTU));
        assert_eq!(discover.client_id(), None);

        let (_, actions) =
            step(State::Discovering { xid: 42, attempt: 0 }, Event::Received(reply(MessageType::Offer, 42)), S, &c, 1);
        let Action::Send(request, _) = &actions[0] else { panic!("no request") };
        assert_eq!(request.options.get(code::REQUESTED_IP), Some(&[10, 9, 0, 50][..]));
        assert_eq!(request.options.get(code::SERVER_ID), Some(&SERVER.octets()[..]));
        assert_eq!(request.ciaddr, Ipv4Addr::UNSPECIFIED);

        let (_, actions) = step(State::Bound { lease: lease_at(Duration::ZERO) }, Event::Timer, 10 * S, &c, 5);
        let Action::Send(renew, _) = &actions[0] else { panic!("no renew") };
        assert_eq!(renew.options.get(code::REQUESTED_IP), None, "renewals name the address in ciaddr only");
        assert_eq!(renew.options.get(code::SERVER_ID), None);
        assert_eq!(renew.flags, 0, "unicast replies");
    }
}

//! The DHCPv6 client's state machine for one IA_NA (RFC 8415 §18): a pure function of the
//! state, one event and the client's time, returning the next state and what to do. Every
//! message goes to All_DHCP_Relay_Agents_and_Servers; the driver owns socket and timer.
//!
//! SOLICIT → ADVERTISE → REQUEST → REPLY (bound; a REPLY to the SOLICIT with rapid commit
//! binds at once) → at T1 RENEW (to the server that granted it) → at T2 REBIND (to any) → at
//! the valid lifetime's end the address is gone and soliciting starts over. Stopping a bound
//! client releases its address.

use std::net::Ipv6Addr;
use std::time::Duration;

use crate::network::dhcp_client::{self, Lease as _, LeaseTimer, Timing};

use super::packet::{IaAddress, IaNa, Message, code, kind, status};

/// Retransmissions from 1 s (RFC 8415's SOL_TIMEOUT and REQ_TIMEOUT), doubling, up to 32 s;
/// while renewing or rebinding at least 2 s apart.
const TIMING: Timing = Timing {
    retransmit_first: Duration::from_secs(1),
    retransmit_most: Duration::from_secs(32),
    renew_retransmit_least: Duration::from_secs(2),
};
/// REQUESTs sent for one ADVERTISE before soliciting starts over (REQ_MAX_RC).
const REQUEST_ATTEMPTS: u32 = 10;
/// The earliest an address is renewed (Talos's minRenewDuration).
const MIN_RENEW: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// The DUID of option 1.
    pub duid: Vec<u8>,
    pub iaid: u32,
    pub request_fqdn: bool,
}

impl ClientConfig {
    fn message(&self, kind: u8, xid: u32) -> Message {
        let mut m = Message::new(kind, xid);
        m.options.push(code::CLIENT_ID, self.duid.clone());
        m.options.push(code::ELAPSED_TIME, vec![0, 0]);
        if kind != super::packet::kind::RELEASE {
            let mut oro = vec![code::DNS_SERVERS, code::DOMAIN_LIST, code::NTP_SERVER];
            if self.request_fqdn {
                oro.push(code::CLIENT_FQDN);
            }
            m.options.push(code::ORO, oro.iter().flat_map(|c| c.to_be_bytes()).collect());
        }
        m
    }

    fn ia(&self, addresses: Vec<IaAddress>) -> Vec<u8> {
        IaNa { iaid: self.iaid, t1: 0, t2: 0, addresses, status: None }.encode()
    }
}

/// An address granted in a REPLY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub reply: Message,
    pub server_id: Vec<u8>,
    pub address: Ipv6Addr,
    pub acquired: Duration,
    pub t1: Duration,
    pub t2: Duration,
    pub valid: Duration,
}

impl dhcp_client::Lease for Lease {
    type Message = Message;
    const DISCOVERING: &'static str = "soliciting";

    fn renew_at(&self) -> Duration {
        self.acquired + self.t1
    }

    fn rebind_at(&self) -> Duration {
        self.acquired + self.t2
    }

    fn expires_at(&self) -> Duration {
        self.acquired + self.valid
    }
}

impl Lease {
    /// The lease a REPLY grants for the client's IA at `now`; `None` if it grants none.
    pub fn from_reply(reply: Message, now: Duration, config: &ClientConfig) -> Option<Lease> {
        if reply.status() != status::SUCCESS {
            return None;
        }
        let server_id = reply.server_id()?.to_vec();
        let ia = reply.ia_na().filter(|ia| ia.iaid == config.iaid && ia.status.unwrap_or(status::SUCCESS) == 0)?;
        let address = ia.addresses.iter().find(|a| a.valid > 0)?;
        let secs = |s: u32| Duration::from_secs(s.into());
        let valid = secs(address.valid);
        let preferred = secs(address.preferred.min(address.valid));
        // RFC 8415 §21.4: T1 and T2 of 0 leave them to the client (0.5 and 0.8 of the
        // preferred lifetime); they never pass the valid lifetime.
        let t2 = if ia.t2 == 0 { preferred * 4 / 5 } else { secs(ia.t2) }.min(valid);
        let t1 = if ia.t1 == 0 { preferred / 2 } else { secs(ia.t1) }.max(MIN_RENEW).min(t2);
        Some(Lease { address: address.address, server_id, acquired: now, t1, t2, valid, reply })
    }
}

pub type State = dhcp_client::State<Lease>;
pub type Event = dhcp_client::Event<Message>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send to All_DHCP_Relay_Agents_and_Servers.
    Send(Box<Message>),
    Timer(Duration),
    Bound(Box<Lease>),
    Expired,
    Stopped,
}

fn solicit(config: &ClientConfig, xid: u32, attempt: u32) -> (State, Vec<Action>) {
    let mut m = config.message(kind::SOLICIT, xid);
    m.options.push(code::IA_NA, config.ia(vec![]));
    (State::Discovering { xid, attempt }, vec![Action::Send(Box::new(m)), Action::Timer(TIMING.retransmit(attempt))])
}

fn request(config: &ClientConfig, xid: u32, advertise: Box<Message>, attempt: u32) -> (State, Vec<Action>) {
    let mut m = config.message(kind::REQUEST, xid);
    if let Some(server) = advertise.server_id() {
        m.options.push(code::SERVER_ID, server.to_vec());
    }
    let addresses = advertise.ia_na().map(|ia| ia.addresses).unwrap_or_default();
    m.options.push(code::IA_NA, config.ia(addresses));
    (
        State::Requesting { xid, offer: advertise, attempt },
        vec![Action::Send(Box::new(m)), Action::Timer(TIMING.retransmit(attempt))],
    )
}

/// RENEW (to the granting server) or REBIND (to any): the held address, lifetimes 0.
fn extend(config: &ClientConfig, lease: &Lease, xid: u32, rebind: bool) -> Message {
    let mut m = config.message(if rebind { kind::REBIND } else { kind::RENEW }, xid);
    if !rebind {
        m.options.push(code::SERVER_ID, lease.server_id.clone());
    }
    m.options.push(code::IA_NA, config.ia(vec![IaAddress { address: lease.address, preferred: 0, valid: 0 }]));
    m
}

fn bound(lease: Lease, now: Duration) -> (State, Vec<Action>) {
    let wait = lease.renew_at().saturating_sub(now);
    let lease = Box::new(lease);
    (State::Bound { lease: lease.clone() }, vec![Action::Bound(lease), Action::Timer(wait)])
}

fn renewing(config: &ClientConfig, lease: Box<Lease>, xid: u32, now: Duration) -> (State, Vec<Action>) {
    let m = extend(config, &lease, xid, false);
    let wait = TIMING.halfway(now, lease.rebind_at());
    (State::Renewing { lease, xid }, vec![Action::Send(Box::new(m)), Action::Timer(wait)])
}

fn rebinding(config: &ClientConfig, lease: Box<Lease>, xid: u32, now: Duration) -> (State, Vec<Action>) {
    let m = extend(config, &lease, xid, true);
    let wait = TIMING.halfway(now, lease.expires_at());
    (State::Rebinding { lease, xid }, vec![Action::Send(Box::new(m)), Action::Timer(wait)])
}

fn expired(config: &ClientConfig, xid: u32) -> (State, Vec<Action>) {
    let (state, mut actions) = solicit(config, xid, 0);
    actions.insert(0, Action::Expired);
    (state, actions)
}

/// Whether `m` answers transaction `xid` of this client with a message of `kind`.
fn answers(m: &Message, xid: u32, config: &ClientConfig, kind: u8) -> bool {
    m.kind == kind && m.xid == xid && m.client_id() == Some(config.duid.as_slice())
}

/// The next state and the actions for `event` at client time `now`; `next_xid` is the
/// transaction id a new exchange uses.
pub fn step(state: State, event: Event, now: Duration, config: &ClientConfig, next_xid: u32) -> (State, Vec<Action>) {
    let next_xid = next_xid & 0x00ff_ffff;
    match (state, event) {
        (State::Stopped, _) => (State::Stopped, vec![]),
        (state, Event::Stop) => {
            let mut actions = Vec::new();
            if let Some(lease) = state.lease() {
                let mut m = config.message(kind::RELEASE, next_xid);
                m.options.push(code::SERVER_ID, lease.server_id.clone());
                m.options
                    .push(code::IA_NA, config.ia(vec![IaAddress { address: lease.address, preferred: 0, valid: 0 }]));
                actions.push(Action::Send(Box::new(m)));
                actions.push(Action::Expired);
            }
            actions.push(Action::Stopped);
            (State::Stopped, actions)
        }
        (State::Init, Event::Start | Event::Timer) => solicit(config, next_xid, 0),
        (State::Init, Event::Received(_)) => (State::Init, vec![]),
        (State::Discovering { xid, attempt }, Event::Timer) => solicit(config, xid, attempt + 1),
        (State::Discovering { xid, attempt }, Event::Received(m)) => {
            if answers(&m, xid, config, kind::ADVERTISE)
                && m.status() == status::SUCCESS
                && m.ia_na().is_some_and(|ia| !ia.addresses.is_empty())
            {
                return request(config, xid, m, 0);
            }
            // A server with rapid commit answers the SOLICIT with its REPLY.
            if answers(&m, xid, config, kind::REPLY)
                && m.rapid_commit()
                && let Some(lease) = Lease::from_reply(*m, now, config)
            {
                return bound(lease, now);
            }
            (State::Discovering { xid, attempt }, vec![])
        }
        (State::Requesting { xid, offer: advertise, attempt }, Event::Timer) => {
            if attempt + 1 >= REQUEST_ATTEMPTS {
                solicit(config, next_xid, 0)
            } else {
                request(config, xid, advertise, attempt + 1)
            }
        }
        (State::Requesting { xid, offer: advertise, attempt }, Event::Received(m)) => {
            if !answers(&m, xid, config, kind::REPLY) {
                return (State::Requesting { xid, offer: advertise, attempt }, vec![]);
            }
            match Lease::from_reply(*m, now, config) {
                Some(lease) => bound(lease, now),
                None => solicit(config, next_xid, 0),
            }
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
        (State::Renewing { lease: _, xid } | State::Rebinding { lease: _, xid }, Event::Received(m))
            if answers(&m, xid, config, kind::REPLY) =>
        {
            match Lease::from_reply(*m, now, config) {
                Some(renewed) => bound(renewed, now),
                // NoBinding and the like: the address is not ours any more.
                None => expired(config, next_xid),
            }
        }
        (state @ (State::Renewing { .. } | State::Rebinding { .. }), _) => (state, vec![]),
        (state @ (State::Discovering { .. } | State::Requesting { .. }), Event::Start) => (state, vec![]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const DUID: [u8; 10] = [0, 3, 0, 1, 2, 0, 0, 0, 0, 1];
    const SERVER: [u8; 8] = [0, 1, 0, 1, 9, 9, 9, 9];

    fn config() -> ClientConfig {
        ClientConfig { duid: DUID.to_vec(), iaid: 7, request_fqdn: true }
    }

    fn answer(kind: u8, xid: u32, t1: u32, t2: u32) -> Box<Message> {
        let mut m = Message::new(kind, xid);
        m.options.push(code::CLIENT_ID, DUID.to_vec());
        m.options.push(code::SERVER_ID, SERVER.to_vec());
        let address = IaAddress { address: "fd00:9::150".parse().unwrap(), preferred: 100, valid: 120 };
        m.options.push(code::IA_NA, IaNa { iaid: 7, t1, t2, addresses: vec![address], status: None }.encode());
        Box::new(m)
    }

    fn lease_at(at: Duration) -> Box<Lease> {
        Box::new(Lease::from_reply(*answer(kind::REPLY, 1, 10, 80), at, &config()).unwrap())
    }

    fn sent(actions: &[Action]) -> Vec<u8> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Send(m) => Some(m.kind),
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
    fn lease_timers() {
        let l = lease_at(2 * S);
        assert_eq!(l.address, "fd00:9::150".parse::<Ipv6Addr>().unwrap());
        assert_eq!((l.renew_at(), l.rebind_at(), l.expires_at()), (12 * S, 82 * S, 122 * S));
        let l = Lease::from_reply(*answer(kind::REPLY, 1, 0, 0), Duration::ZERO, &config()).unwrap();
        assert_eq!((l.t1, l.t2), (50 * S, 80 * S), "0.5 and 0.8 of the preferred lifetime");
        let mut other_ia = config();
        other_ia.iaid = 8;
        assert!(Lease::from_reply(*answer(kind::REPLY, 1, 0, 0), Duration::ZERO, &other_ia).is_none());
        let mut refused = *answer(kind::REPLY, 1, 0, 0);
        refused.options.push(code::STATUS_CODE, vec![0, status::NO_BINDING as u8]);
        assert!(Lease::from_reply(refused, Duration::ZERO, &config()).is_none());
    }

    #[test]
    fn transitions_table() {
        let c = config();
        let lease = lease_at(Duration::ZERO);
        type Case = (&'static str, State, Event, Duration, &'static str, Vec<u8>, Option<Duration>);
        let cases: Vec<Case> = vec![
            ("start: solicit", State::Init, Event::Start, Duration::ZERO, "soliciting", vec![kind::SOLICIT], Some(S)),
            (
                "no advertise: solicit again",
                State::Discovering { xid: 1, attempt: 2 },
                Event::Timer,
                3 * S,
                "soliciting",
                vec![kind::SOLICIT],
                Some(8 * S),
            ),
            (
                "advertise: request",
                State::Discovering { xid: 1, attempt: 0 },
                Event::Received(answer(kind::ADVERTISE, 1, 0, 0)),
                S,
                "requesting",
                vec![kind::REQUEST],
                Some(S),
            ),
            (
                "another transaction's advertise: ignored",
                State::Discovering { xid: 2, attempt: 0 },
                Event::Received(answer(kind::ADVERTISE, 1, 0, 0)),
                S,
                "soliciting",
                vec![],
                None,
            ),
            (
                "a rapid-commit reply to the solicit: bound",
                State::Discovering { xid: 1, attempt: 0 },
                Event::Received({
                    let mut m = answer(kind::REPLY, 1, 10, 80);
                    m.options.push(code::RAPID_COMMIT, vec![]);
                    m
                }),
                S,
                "bound",
                vec![],
                Some(10 * S),
            ),
            (
                "reply: bound until T1",
                State::Requesting { xid: 1, offer: answer(kind::ADVERTISE, 1, 0, 0), attempt: 0 },
                Event::Received(answer(kind::REPLY, 1, 10, 80)),
                S,
                "bound",
                vec![],
                Some(10 * S),
            ),
            (
                "no reply: request again",
                State::Requesting { xid: 1, offer: answer(kind::ADVERTISE, 1, 0, 0), attempt: 0 },
                Event::Timer,
                2 * S,
                "requesting",
                vec![kind::REQUEST],
                Some(2 * S),
            ),
            (
                "T1: renew",
                State::Bound { lease: lease.clone() },
                Event::Timer,
                10 * S,
                "renewing",
                vec![kind::RENEW],
                Some(35 * S),
            ),
            (
                "renewed: bound again",
                State::Renewing { lease: lease.clone(), xid: 5 },
                Event::Received(answer(kind::REPLY, 5, 10, 80)),
                11 * S,
                "bound",
                vec![],
                Some(10 * S),
            ),
            (
                "T2: rebind",
                State::Renewing { lease: lease.clone(), xid: 5 },
                Event::Timer,
                80 * S,
                "rebinding",
                vec![kind::REBIND],
                Some(20 * S),
            ),
            (
                "valid lifetime over: solicit again",
                State::Rebinding { lease: lease.clone(), xid: 5 },
                Event::Timer,
                120 * S,
                "soliciting",
                vec![kind::SOLICIT],
                Some(S),
            ),
            (
                "stop while bound: release",
                State::Bound { lease: lease.clone() },
                Event::Stop,
                20 * S,
                "stopped",
                vec![kind::RELEASE],
                None,
            ),
            (
                "stop while soliciting",
                State::Discovering { xid: 1, attempt: 0 },
                Event::Stop,
                S,
                "stopped",
                vec![],
                None,
            ),
        ];
        for (name, state, event, now, want_state, want_sent, want_timer) in cases {
            let (next, actions) = step(state, event, now, &c, 9);
            assert_eq!(next.name(), want_state, "case {name:?}: state");
            assert_eq!(sent(&actions), want_sent, "case {name:?}: sent");
            assert_eq!(timer(&actions), want_timer, "case {name:?}: timer");
        }
    }

    #[test]
    fn messages_carry_what_rfc_8415_asks() {
        let c = config();
        let (_, actions) = step(State::Init, Event::Start, Duration::ZERO, &c, 0x1234_5678);
        let Action::Send(solicit) = &actions[0] else { panic!("no solicit") };
        assert_eq!(solicit.xid, 0x34_5678, "24-bit transaction id");
        assert_eq!(solicit.client_id(), Some(&DUID[..]));
        assert_eq!(solicit.server_id(), None);
        assert_eq!(solicit.ia_na().unwrap().iaid, 7);
        let (_, actions) = step(
            State::Discovering { xid: 1, attempt: 0 },
            Event::Received(answer(kind::ADVERTISE, 1, 0, 0)),
            S,
            &c,
            2,
        );
        let Action::Send(request) = &actions[0] else { panic!("no request") };
        assert_eq!(request.server_id(), Some(&SERVER[..]));
        assert_eq!(request.ia_na().unwrap().addresses[0].address, "fd00:9::150".parse::<Ipv6Addr>().unwrap());
        let (_, actions) = step(State::Bound { lease: lease_at(Duration::ZERO) }, Event::Timer, 80 * S, &c, 3);
        let Action::Send(rebind) = &actions[0] else { panic!("no rebind") };
        assert_eq!((rebind.kind, rebind.server_id()), (kind::REBIND, None), "rebinding asks any server");
        let (_, actions) = step(State::Bound { lease: lease_at(Duration::ZERO) }, Event::Stop, S, &c, 3);
        let Action::Send(release) = &actions[0] else { panic!("no release") };
        assert_eq!(release.server_id(), Some(&SERVER[..]));
        assert_eq!(actions[1..], [Action::Expired, Action::Stopped]);
    }
}

//! The DHCPv4 operator: a DHCP client for one link whose lease becomes operator-layer
//! specs (the address, the default or classless routes, DNS, NTP, hostname and domain,
//! MTU), as Talos's `operator.DHCP4`.
//!
//! Three parts: [`packet`], the wire codec; [`machine`], the RFC 2131 state machine as a
//! pure function; [`specs`], the lease as specs. [`Dhcp4Operator`] only drives them: a
//! UDP socket on 0.0.0.0:68 bound to the link (replies come broadcast, as the requests ask),
//! one timer, and the offer it keeps for `OperatorSpecController`. It never configures the
//! kernel: the address reaches the link through the merge and AddressSpecController.

pub mod machine;
pub mod packet;
pub mod specs;

use std::net::{Ipv4Addr, SocketAddr};

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kernel::netlink::{Netlink, NetlinkError};
use crate::kernel::netns::NetNs;
use crate::network::dhcp_client::{ClientStatus, DhcpError, Session};
use crate::network::operator::{Notifier, Offer, Operator, OperatorSpecs, run_sessions};
use crate::resources::network::{ClientIdentifier, ClientIdentifierSpec, Dhcp4OperatorSpec};

use machine::{Action, ClientConfig, Destination, Event, State};
use packet::{CLIENT_PORT, Message, SERVER_PORT};

const PROTOCOL: &str = "DHCPv4";

pub type Dhcp4Error = DhcpError;

/// Where a client stands, for logs and tests: its state, how many ACKs it has had (the
/// first lease and every renewal), how often it fell back to rebinding, the address it
/// holds and the releases it sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dhcp4Status {
    pub state: &'static str,
    pub acks: u64,
    pub rebinds: u64,
    pub address: Option<Ipv4Addr>,
    pub releases: u64,
}

impl ClientStatus for Dhcp4Status {
    fn stopped(&mut self) {
        self.state = "stopped";
    }

    fn lease_gone(&mut self) {
        self.address = None;
    }
}

pub struct Dhcp4Operator {
    netns: Option<NetNs>,
    link_name: String,
    spec: Dhcp4OperatorSpec,
    offer: Offer,
    status: watch::Sender<Dhcp4Status>,
}

impl Dhcp4Operator {
    /// A client for `link_name` in `netns` (`None`: the caller's namespace, the node's).
    pub fn new(netns: Option<NetNs>, link_name: &str, spec: Dhcp4OperatorSpec) -> Self {
        Dhcp4Operator {
            netns,
            link_name: link_name.to_string(),
            spec,
            offer: Offer::default(),
            status: watch::Sender::new(Dhcp4Status::default()),
        }
    }

    /// Watches where the client stands.
    pub fn status(&self) -> watch::Receiver<Dhcp4Status> {
        self.status.subscribe()
    }

    fn netlink(&self) -> Result<Netlink, NetlinkError> {
        match &self.netns {
            Some(ns) => Netlink::connect_in(ns),
            None => Netlink::connect(),
        }
    }

    /// One run of the client, from discovery to stop; an error ends it (and it is run again).
    async fn session(&self, stop: &CancellationToken, notify: &Notifier) -> Result<(), Dhcp4Error> {
        let link = self.link_name.clone();
        let netlink_error = |source| DhcpError::Netlink { protocol: PROTOCOL, link: link.clone(), source };
        let netlink = self.netlink().map_err(netlink_error)?;
        let kernel_link = netlink
            .link(&link)
            .await
            .map_err(netlink_error)?
            .ok_or_else(|| DhcpError::NoLink { protocol: PROTOCOL, link: link.clone() })?;
        drop(netlink);
        let config = ClientConfig {
            client_id: client_identifier(&self.spec.client_identifier, &kernel_link.hardware_addr, &link),
            hardware_addr: kernel_link.hardware_addr,
            request_hostname: !self.spec.skip_hostname_request,
            request_mtu: true,
        };
        let address = SocketAddr::from((Ipv4Addr::UNSPECIFIED, CLIENT_PORT));
        let socket = crate::kernel::udp::bound_to_link(self.netns.as_ref(), address, &link, true);
        let mut session = Session::new(PROTOCOL, &link, CLIENT_PORT, 2048, socket)?;

        let started = Instant::now();
        let mut state = State::Init;
        let mut event = Event::Start;
        loop {
            let previous = state.name();
            let (next, actions) = machine::step(state, event, started.elapsed(), &config, random_u32());
            state = next;
            for action in actions {
                match action {
                    Action::Send(message, to) => self.send(&session.socket, &message, to).await,
                    Action::Timer(wait) => session.set_timer(wait),
                    Action::Bound(lease) => {
                        tracing::info!(
                            link = %link,
                            address = %lease.address,
                            prefix_len = lease.prefix_len,
                            server = %lease.server,
                            lease_time = ?lease.lease_time,
                            renew_in = ?lease.t1,
                            "DHCPv4 ACK"
                        );
                        let options = specs::SpecOptions {
                            link_name: &link,
                            route_metric: self.spec.route_metric,
                            use_hostname: !self.spec.skip_hostname_request,
                            use_routes: !self.spec.skip_routes,
                        };
                        self.offer.set(specs::lease_specs(&lease.ack, lease.prefix_len, options), notify);
                        self.status.send_modify(|s| {
                            s.acks += 1;
                            s.address = Some(lease.address);
                        });
                    }
                    Action::Expired => session.lease_gone(&self.offer, &self.status, notify),
                    Action::Stopped => return session.stopped(&self.status),
                }
            }
            if state.name() != previous {
                tracing::debug!(link = %link, from = previous, to = state.name(), "DHCPv4 state");
            }
            let rebinding = matches!(state, State::Rebinding { .. }) && previous != state.name();
            self.status.send_modify(|s| {
                s.state = state.name();
                s.rebinds += u64::from(rebinding);
            });
            event = session.next_event(stop, |datagram| Message::decode(datagram).map(replies)).await?;
        }
    }

    async fn send(&self, socket: &tokio::net::UdpSocket, message: &Message, to: Destination) {
        let ip = match to {
            Destination::Broadcast => Ipv4Addr::BROADCAST,
            Destination::Server(ip) => ip,
        };
        let kind = message.message_type();
        if let Err(e) = socket.send_to(&message.encode(), SocketAddr::from((ip, SERVER_PORT))).await {
            // Not fatal: the timer retransmits (a unicast renewal fails until the address is
            // on the link, for one).
            tracing::warn!(link = %self.link_name, to = %ip, "sending DHCPv4 {kind:?}: {e}");
        } else {
            tracing::debug!(link = %self.link_name, to = %ip, "sent DHCPv4 {kind:?}");
            if kind == Some(packet::MessageType::Release) {
                self.status.send_modify(|s| s.releases += 1);
            }
        }
    }
}

/// Option 61 as Talos's `GetDHCP4ClientIdentifier` makes it: none; the hardware type and
/// address (RFC 2132 §9.14); or the configured DUID's bytes (ignored, as Talos does, when
/// they are not hex).
pub fn client_identifier(spec: &ClientIdentifierSpec, hardware_addr: &[u8], link: &str) -> Option<Vec<u8>> {
    match spec.client_identifier {
        ClientIdentifier::MAC if !hardware_addr.is_empty() => {
            let mut id = vec![1u8];
            id.extend_from_slice(hardware_addr);
            Some(id)
        }
        ClientIdentifier::DUID => match decode_hex(&spec.duid_raw_hex) {
            Some(duid) if duid.len() >= 2 => Some(duid),
            _ => {
                tracing::error!(
                    link,
                    "DHCPv4 client identifier: duidRawHex {:?} is no DUID; ignored",
                    spec.duid_raw_hex
                );
                None
            }
        },
        _ => None,
    }
}

pub(crate) fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let text: String = text.chars().filter(|c| *c != ':').collect();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// Only replies are for a client; a request on the wire (another client's) is not.
fn replies(m: Message) -> Option<Message> {
    (m.op == packet::BOOTREPLY).then_some(m)
}

/// A transaction id nobody can predict from outside: the std hasher's per-process random
/// keys over the clock and a counter.
pub(crate) fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.finish() as u32
}

#[async_trait::async_trait]
impl Operator for Dhcp4Operator {
    async fn run(&self, stop: CancellationToken, notify: Notifier) {
        run_sessions(&stop, || self.session(&stop, &notify), || self.offer.set(OperatorSpecs::default(), &notify))
            .await;
    }

    fn prefix(&self) -> String {
        format!("dhcp4/{}", self.link_name)
    }

    fn specs(&self) -> OperatorSpecs {
        self.offer.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_identifiers_as_talos_makes_them() {
        let hw = [0x02, 0, 0, 0, 0, 0x01];
        let spec = |kind, duid: &str| ClientIdentifierSpec { client_identifier: kind, duid_raw_hex: duid.into() };
        assert_eq!(client_identifier(&spec(ClientIdentifier::NONE, ""), &hw, "eth0"), None);
        assert_eq!(client_identifier(&spec(ClientIdentifier::MAC, ""), &hw, "eth0"), Some(vec![1, 2, 0, 0, 0, 0, 1]));
        assert_eq!(client_identifier(&spec(ClientIdentifier::MAC, ""), &[], "eth0"), None, "no hardware address");
        assert_eq!(
            client_identifier(&spec(ClientIdentifier::DUID, "00:03:00:01:02:00:00:00:00:01"), &hw, "eth0"),
            Some(vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 1])
        );
        assert_eq!(client_identifier(&spec(ClientIdentifier::DUID, "000300010200000000zz"), &hw, "eth0"), None);
        assert_eq!(client_identifier(&spec(ClientIdentifier::DUID, ""), &hw, "eth0"), None);
    }

    #[test]
    fn transaction_ids_differ() {
        let ids: std::collections::HashSet<u32> = (0..100).map(|_| random_u32()).collect();
        assert!(ids.len() > 95);
    }
}

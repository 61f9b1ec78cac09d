//! The DHCPv6 operator: a DHCPv6 client for one link whose IA_NA address, DNS servers, NTP
//! servers and FQDN become operator-layer specs, as Talos's `operator.DHCP6`. Routes are not
//! its business: IPv6 default routes come from router advertisements.
//!
//! [`packet`] is the codec and [`machine`] the RFC 8415 state machine, both pure;
//! [`Dhcp6Operator`] drives them over a UDP socket on [::]:546 bound to the link, sending to
//! ff02::1:2 port 547 from the link-local address, which it first waits to see through
//! duplicate address detection. It never configures the kernel.

pub mod machine;
pub mod packet;

use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kernel::netlink::{self, Groups, Netlink, NetlinkError, NetlinkEvents, address_flags};
use crate::kernel::netns::NetNs;
use crate::network::dhcp_client::{ClientStatus, DhcpError, Session};
use crate::network::dhcp4::{decode_hex, random_u32};
use crate::network::operator::{Notifier, Offer, Operator, OperatorSpecs, run_sessions};
use crate::resources::network::{
    AddressSpec, ClientIdentifier, ClientIdentifierSpec, ConfigLayer, Dhcp6OperatorSpec, HostnameSpec, ResolverSpec,
    TimeServerSpec,
};
use crate::types::IpPrefix;

use machine::{Action, ClientConfig, Event, Lease, State};
use packet::{ALL_SERVERS, CLIENT_PORT, Message, SERVER_PORT};

/// How long to wait for the link-local address to pass DAD before trying anyway (Talos's).
const LINK_LOCAL_WAIT: Duration = Duration::from_secs(30);

const PROTOCOL: &str = "DHCPv6";

pub type Dhcp6Error = DhcpError;

/// Where a client stands, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dhcp6Status {
    pub state: &'static str,
    pub replies: u64,
    pub address: Option<Ipv6Addr>,
    pub releases: u64,
}

impl ClientStatus for Dhcp6Status {
    fn lease_gone(&mut self) {
        self.address = None;
    }

    fn stopped(&mut self) {
        self.state = "stopped";
    }
}

pub struct Dhcp6Operator {
    netns: Option<NetNs>,
    link_name: String,
    spec: Dhcp6OperatorSpec,
    offer: Offer,
    status: watch::Sender<Dhcp6Status>,
}

/// What a REPLY offers, as Talos's DHCP6 `parseReply` makes it.
pub fn lease_specs(lease: &Lease, link_name: &str, use_hostname: bool) -> OperatorSpecs {
    let reply = &lease.reply;
    let mut specs = OperatorSpecs {
        addresses: vec![AddressSpec::static_address(
            link_name,
            IpPrefix::host(IpAddr::V6(lease.address)),
            ConfigLayer::Operator,
        )],
        ..Default::default()
    };
    let dns = reply.dns_servers();
    if !dns.is_empty() {
        specs.resolvers.push(ResolverSpec {
            dns_servers: dns.into_iter().map(IpAddr::V6).collect(),
            config_layer: ConfigLayer::Operator,
            ..Default::default()
        });
    }
    if use_hostname && let Some(fqdn) = reply.fqdn() {
        let (hostname, domainname) = fqdn.split_once('.').unwrap_or((&fqdn, ""));
        specs.hostnames.push(HostnameSpec {
            hostname: hostname.to_string(),
            domainname: domainname.to_string(),
            config_layer: ConfigLayer::Operator,
        });
    }
    let ntp = reply.ntp_servers();
    if !ntp.is_empty() {
        specs.time_servers.push(TimeServerSpec {
            time_servers: ntp.iter().map(ToString::to_string).collect(),
            config_layer: ConfigLayer::Operator,
            ..Default::default()
        });
    }
    specs
}

/// The client's DUID as Talos's `GetDHCPv6ClientIdentifier` picks it: the configured raw
/// DUID, else a link-layer DUID (type 3, Ethernet) of the link's hardware address.
pub fn client_duid(spec: &ClientIdentifierSpec, hardware_addr: &[u8], link: &str) -> Vec<u8> {
    if spec.client_identifier == ClientIdentifier::DUID {
        match decode_hex(&spec.duid_raw_hex) {
            Some(duid) if duid.len() >= 2 => return duid,
            _ => tracing::error!(
                link,
                "DHCPv6 client identifier: duidRawHex {:?} is no DUID; ignored",
                spec.duid_raw_hex
            ),
        }
    }
    let mut duid = vec![0, 3, 0, 1];
    duid.extend_from_slice(hardware_addr);
    duid
}

/// Whether link `index` has a link-local address out of DAD. One whose DAD failed counts,
/// as in Talos (it warns and carries on): it is no longer tentative.
pub fn link_local_ready(addresses: &[netlink::Address], index: u32) -> bool {
    addresses.iter().any(|a| {
        a.link_index == index
            && matches!(a.prefix.addr(), IpAddr::V6(ip) if ip.is_unicast_link_local())
            && a.flags & address_flags::TENTATIVE == 0
    })
}

impl Dhcp6Operator {
    /// A client for `link_name` in `netns` (`None`: the caller's namespace).
    pub fn new(netns: Option<NetNs>, link_name: &str, spec: Dhcp6OperatorSpec) -> Self {
        Dhcp6Operator {
            netns,
            link_name: link_name.to_string(),
            spec,
            offer: Offer::default(),
            status: watch::Sender::new(Dhcp6Status::default()),
        }
    }

    pub fn status(&self) -> watch::Receiver<Dhcp6Status> {
        self.status.subscribe()
    }

    fn netlink_error(&self) -> impl Fn(NetlinkError) -> Dhcp6Error + '_ {
        |source| DhcpError::Netlink { protocol: PROTOCOL, link: self.link_name.clone(), source }
    }

    /// Waits, woken by address events, until the link has a link-local address that is no
    /// longer tentative: before that it has no source address for its SOLICIT.
    async fn wait_link_local(&self, netlink: &Netlink, index: u32, stop: &CancellationToken) -> Result<(), Dhcp6Error> {
        let mut events = match &self.netns {
            Some(ns) => NetlinkEvents::in_namespace(ns, Groups::ADDRESSES),
            None => NetlinkEvents::new(Groups::ADDRESSES),
        };
        let mut subscription = events.subscribe().map_err(self.netlink_error())?;
        let deadline = Instant::now() + LINK_LOCAL_WAIT;
        loop {
            let addresses = netlink.addresses(Some(crate::types::Family::Inet6)).await.map_err(self.netlink_error())?;
            if link_local_ready(&addresses, index) {
                return Ok(());
            }
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(link = %self.link_name, "no usable link-local address after {LINK_LOCAL_WAIT:?}; trying anyway");
                    return Ok(());
                }
                batch = subscription.next_batch() => {
                    if let Err(e) = batch {
                        // Without events, look again at Talos's pace rather than spin.
                        tracing::debug!(link = %self.link_name, "address events: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }

    async fn session(&self, stop: &CancellationToken, notify: &Notifier) -> Result<(), Dhcp6Error> {
        let link = self.link_name.clone();
        let netlink = match &self.netns {
            Some(ns) => Netlink::connect_in(ns),
            None => Netlink::connect(),
        }
        .map_err(self.netlink_error())?;
        let kernel_link = netlink
            .link(&link)
            .await
            .map_err(self.netlink_error())?
            .ok_or_else(|| DhcpError::NoLink { protocol: PROTOCOL, link: link.clone() })?;
        self.wait_link_local(&netlink, kernel_link.index, stop).await?;
        drop(netlink);
        let hw = &kernel_link.hardware_addr;
        let iaid = hw.iter().rev().take(4).rev().fold(0u32, |acc, b| (acc << 8) | u32::from(*b));
        let config = ClientConfig {
            duid: client_duid(&self.spec.client_identifier, hw, &link),
            iaid,
            request_fqdn: !self.spec.skip_hostname_request,
        };
        let address = SocketAddr::from((Ipv6Addr::UNSPECIFIED, CLIENT_PORT));
        let socket = crate::kernel::udp::bound_to_link(self.netns.as_ref(), address, &link, false);
        let mut session = Session::new(PROTOCOL, &link, CLIENT_PORT, 4096, socket)?;
        let servers = SocketAddrV6::new(ALL_SERVERS, SERVER_PORT, 0, kernel_link.index);

        let started = Instant::now();
        let mut state = State::Init;
        let mut event = Event::Start;
        loop {
            let (next, actions) = machine::step(state, event, started.elapsed(), &config, random_u32());
            state = next;
            for action in actions {
                match action {
                    Action::Send(message) => match session.socket.send_to(&message.encode(), servers).await {
                        Ok(_) if message.kind == packet::kind::RELEASE => self.status.send_modify(|s| s.releases += 1),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(link = %link, "sending DHCPv6 message {}: {e}", message.kind),
                    },
                    Action::Timer(wait) => session.set_timer(wait),
                    Action::Bound(lease) => {
                        tracing::info!(link = %link, address = %lease.address, valid = ?lease.valid, renew_in = ?lease.t1, "DHCPv6 REPLY");
                        let use_hostname = !self.spec.skip_hostname_request;
                        self.offer.set(lease_specs(&lease, &link, use_hostname), notify);
                        self.status.send_modify(|s| {
                            s.replies += 1;
                            s.address = Some(lease.address);
                        });
                    }
                    Action::Expired => session.lease_gone(&self.offer, &self.status, notify),
                    Action::Stopped => return session.stopped(&self.status),
                }
            }
            self.status.send_modify(|s| s.state = state.name());
            event = session.next_event(stop, |datagram| Message::decode(datagram).map(Some)).await?;
        }
    }
}

#[async_trait::async_trait]
impl Operator for Dhcp6Operator {
    async fn run(&self, stop: CancellationToken, notify: Notifier) {
        run_sessions(&stop, || self.session(&stop, &notify), || self.offer.set(OperatorSpecs::default(), &notify))
            .await;
    }

    fn prefix(&self) -> String {
        format!("dhcp6/{}", self.link_name)
    }

    fn specs(&self) -> OperatorSpecs {
        self.offer.get()
    }
}

#[cfg(test)]
mod tests {
    use super::packet::{IaAddress, IaNa, code, encode_name, kind};
    use super::*;

    #[test]
    fn link_local_readiness() {
        let address = |index, prefix: &str, flags| netlink::Address {
            flags,
            ..netlink::Address::new(index, prefix.parse().unwrap())
        };
        let tentative = address_flags::TENTATIVE;
        assert!(!link_local_ready(&[], 2), "none yet");
        assert!(!link_local_ready(&[address(2, "fe80::1/64", tentative)], 2), "still in DAD");
        assert!(!link_local_ready(&[address(2, "fd00::1/64", 0)], 2), "not link-local");
        assert!(!link_local_ready(&[address(3, "fe80::1/64", 0)], 2), "another link's");
        assert!(link_local_ready(&[address(2, "fe80::1/64", address_flags::PERMANENT)], 2));
        assert!(link_local_ready(&[address(2, "fe80::1/64", address_flags::DADFAILED)], 2), "DAD failed: carry on");
    }

    #[test]
    fn duids_as_talos_picks_them() {
        let hw = [2, 0, 0, 0, 0, 1];
        let spec = |kind, duid: &str| ClientIdentifierSpec { client_identifier: kind, duid_raw_hex: duid.into() };
        let ll = vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 1];
        assert_eq!(client_duid(&spec(ClientIdentifier::NONE, ""), &hw, "eth0"), ll);
        assert_eq!(client_duid(&spec(ClientIdentifier::MAC, ""), &hw, "eth0"), ll);
        assert_eq!(
            client_duid(&spec(ClientIdentifier::DUID, "0001000100000001"), &hw, "eth0"),
            [0, 1, 0, 1, 0, 0, 0, 1]
        );
        assert_eq!(client_duid(&spec(ClientIdentifier::DUID, "nothex"), &hw, "eth0"), ll, "a bad DUID is ignored");
    }

    #[test]
    fn a_reply_becomes_specs() {
        let config = ClientConfig { duid: vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 1], iaid: 1, request_fqdn: true };
        let mut reply = Message::new(kind::REPLY, 1);
        reply.options.push(code::CLIENT_ID, config.duid.clone());
        reply.options.push(code::SERVER_ID, vec![0, 1]);
        let address = IaAddress { address: "fd00:9::150".parse().unwrap(), preferred: 120, valid: 120 };
        reply
            .options
            .push(code::IA_NA, IaNa { iaid: 1, t1: 0, t2: 0, addresses: vec![address], status: None }.encode());
        reply.options.push(code::DNS_SERVERS, "fd00:9::1".parse::<Ipv6Addr>().unwrap().octets().to_vec());
        let mut fqdn = vec![0];
        fqdn.extend(encode_name("node1.talosbox.test"));
        reply.options.push(code::CLIENT_FQDN, fqdn);
        let lease = Lease::from_reply(reply, Duration::ZERO, &config).unwrap();
        let specs = lease_specs(&lease, "eth0", true);
        assert_eq!(specs.addresses[0].id(), "eth0/fd00:9::150/128");
        assert_eq!(specs.addresses[0].config_layer, ConfigLayer::Operator);
        assert_eq!(specs.resolvers[0].dns_servers, ["fd00:9::1".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            (specs.hostnames[0].hostname.as_str(), specs.hostnames[0].domainname.as_str()),
            ("node1", "talosbox.test")
        );
        assert!(specs.routes.is_empty() && specs.links.is_empty() && specs.time_servers.is_empty());
        assert!(lease_specs(&lease, "eth0", false).hostnames.is_empty());
    }
}

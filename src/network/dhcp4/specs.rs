//! What a DHCPv4 ACK offers, as operator-layer specs: Talos's `dhcpparse.ParseDHCP4Ack`.
//! Pure: the ACK and the operator's settings in, specs out.

use std::net::{IpAddr, Ipv4Addr};

use super::packet::Message;
use crate::network::operator::OperatorSpecs;
use crate::resources::network::{
    AddressFlags, AddressSpec, ConfigLayer, Family, HostnameSpec, LinkSpec, ResolverSpec, RouteProtocol, RouteSpec,
    RouteType, RoutingTable, Scope, TimeServerSpec,
};
use crate::types::IpPrefix;

/// The operator's settings that shape the specs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecOptions<'a> {
    pub link_name: &'a str,
    pub route_metric: u32,
    /// Take the hostname and domain the server sends.
    pub use_hostname: bool,
    /// Install the routes the server sends (the default route, or the classless ones).
    pub use_routes: bool,
}

fn prefix(addr: Ipv4Addr, len: u8) -> IpPrefix {
    IpPrefix::new(IpAddr::V4(addr), len.min(32)).unwrap_or_else(|_| IpPrefix::host(IpAddr::V4(addr)))
}

fn contains(net: &IpPrefix, ip: Ipv4Addr) -> bool {
    net.contains(&IpAddr::V4(ip))
}

/// The specs of the lease `ack` grants, `prefix_len` being its subnet.
pub fn lease_specs(ack: &Message, prefix_len: u8, options: SpecOptions<'_>) -> OperatorSpecs {
    let SpecOptions { link_name, route_metric, use_hostname, use_routes } = options;
    let address = prefix(ack.yiaddr, prefix_len);
    let mut specs = OperatorSpecs {
        addresses: vec![AddressSpec {
            priority: route_metric,
            ..AddressSpec::static_address(link_name, address, ConfigLayer::Operator)
        }],
        ..Default::default()
    };
    if let Some(mtu) = ack.interface_mtu() {
        specs.links.push(LinkSpec {
            name: link_name.to_string(),
            mtu: mtu.into(),
            up: true,
            config_layer: ConfigLayer::Operator,
            ..Default::default()
        });
    }
    let route = |destination: Option<IpPrefix>, gateway: Option<Ipv4Addr>, scope: Scope| {
        let mut r = RouteSpec {
            family: Family::INET4,
            destination,
            source: Some(IpAddr::V4(ack.yiaddr)),
            gateway: gateway.map(IpAddr::V4),
            out_link_name: link_name.to_string(),
            table: RoutingTable::MAIN,
            priority: route_metric,
            scope,
            route_type: RouteType::UNICAST,
            protocol: RouteProtocol::BOOT,
            config_layer: ConfigLayer::Operator,
            ..Default::default()
        };
        r.normalize();
        r
    };
    if use_routes {
        // RFC 3442: with classless static routes, the router option is ignored.
        match ack.classless_routes().filter(|r| !r.is_empty()) {
            Some(classless) => {
                let mut on_link: Vec<Ipv4Addr> = Vec::new();
                for r in classless {
                    let gateway = (!r.router.is_unspecified()).then_some(r.router);
                    specs.routes.push(route(Some(prefix(r.destination, r.prefix_len)), gateway, Scope::GLOBAL));
                    // A gateway outside the lease's subnet is reachable only through a
                    // route to it on the link (AWS's 169.254.0.1 for a /32 lease).
                    if let Some(gw) = gateway
                        && !contains(&address, gw)
                        && !on_link.contains(&gw)
                    {
                        on_link.push(gw);
                        specs.routes.push(route(Some(prefix(gw, 32)), None, Scope::LINK));
                    }
                }
            }
            None => {
                for gw in ack.routers() {
                    specs.routes.push(route(None, Some(gw), Scope::GLOBAL));
                    if !contains(&address, gw) {
                        specs.routes.push(route(Some(prefix(gw, 32)), None, Scope::LINK));
                    }
                }
            }
        }
    }
    if use_hostname
        && let Some(name) = ack.hostname()
        && let Ok(mut spec) = HostnameSpec::from_fqdn(&name, ConfigLayer::Operator)
    {
        if let Some(domain) = ack.domain_name() {
            spec.domainname = domain;
        }
        specs.hostnames.push(spec);
    }
    let mut search = ack.domain_search();
    if let Some(domain) = ack.domain_name()
        && !search.contains(&domain)
    {
        search.push(domain);
    }
    let dns = ack.dns_servers();
    if !dns.is_empty() || !search.is_empty() {
        specs.resolvers.push(ResolverSpec {
            dns_servers: dns.into_iter().map(IpAddr::V4).collect(),
            search_domains: search,
            config_layer: ConfigLayer::Operator,
            ..Default::default()
        });
    }
    let ntp = ack.ntp_servers();
    if !ntp.is_empty() {
        specs.time_servers.push(TimeServerSpec {
            time_servers: ntp.iter().map(ToString::to_string).collect(),
            config_layer: ConfigLayer::Operator,
            ..Default::default()
        });
    }
    // Talos's address flags for a lease: permanent, as for a static address.
    debug_assert_eq!(specs.addresses[0].flags, AddressFlags::PERMANENT);
    specs
}

#[cfg(test)]
mod tests {
    use super::super::packet::{BOOTREPLY, ClasslessRoute, MessageType, code};
    use super::*;

    fn ack() -> Message {
        let mut m = Message::request(1, MessageType::Ack, &[2, 0, 0, 0, 0, 1]);
        m.op = BOOTREPLY;
        m.yiaddr = Ipv4Addr::new(10, 9, 0, 50);
        m.options.set(code::SUBNET_MASK, vec![255, 255, 255, 0]);
        m.options.set(code::ROUTER, vec![10, 9, 0, 1]);
        m.options.set(code::DNS, vec![10, 9, 0, 1]);
        m.options.set(code::NTP, vec![10, 9, 0, 2]);
        m.options.set(code::HOSTNAME, b"node1".to_vec());
        m.options.set(code::DOMAIN_NAME, b"example.org".to_vec());
        m
    }

    fn opts(use_routes: bool) -> SpecOptions<'static> {
        SpecOptions { link_name: "eth0", route_metric: 1024, use_hostname: true, use_routes }
    }

    fn ids(specs: &OperatorSpecs) -> Vec<String> {
        specs.routes.iter().map(RouteSpec::id).collect()
    }

    #[test]
    fn a_plain_lease() {
        let specs = lease_specs(&ack(), 24, opts(true));
        let a = &specs.addresses[0];
        assert_eq!(
            (a.id(), a.priority, a.config_layer),
            ("eth0/10.9.0.50/24".to_string(), 1024, ConfigLayer::Operator)
        );
        assert_eq!((a.scope, a.flags, a.family), (Scope::GLOBAL, AddressFlags::PERMANENT, Family::INET4));
        assert_eq!(ids(&specs), ["inet4/10.9.0.1//1024"], "the default route, the gateway on the subnet");
        let r = &specs.routes[0];
        assert_eq!(
            (r.source, r.protocol, r.scope),
            (Some("10.9.0.50".parse().unwrap()), RouteProtocol::BOOT, Scope::GLOBAL)
        );
        assert!(specs.links.is_empty(), "no MTU option: no link spec");
        assert_eq!(specs.hostnames[0].fqdn(), "node1.example.org");
        assert_eq!(specs.resolvers[0].dns_servers, ["10.9.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(specs.resolvers[0].search_domains, ["example.org"]);
        assert_eq!(specs.time_servers[0].time_servers, ["10.9.0.2"]);
    }

    #[test]
    fn mtu_gateway_off_subnet_and_switches() {
        let mut m = ack();
        m.options.set(code::INTERFACE_MTU, 1400u16.to_be_bytes().to_vec());
        m.options.set(code::ROUTER, vec![192, 168, 1, 1]);
        let specs = lease_specs(&m, 24, opts(true));
        assert_eq!((specs.links[0].name.as_str(), specs.links[0].mtu, specs.links[0].up), ("eth0", 1400, true));
        assert_eq!(ids(&specs), ["inet4/192.168.1.1//1024", "inet4//192.168.1.1/32/1024"]);
        assert_eq!(specs.routes[1].scope, Scope::LINK);
        let quiet = lease_specs(&m, 24, SpecOptions { use_hostname: false, ..opts(false) });
        assert!(quiet.routes.is_empty() && quiet.hostnames.is_empty());
        assert_eq!(quiet.addresses.len(), 1);
    }

    #[test]
    fn classless_routes_replace_the_router() {
        let mut m = ack();
        let routes = [
            ClasslessRoute {
                destination: Ipv4Addr::new(172, 16, 0, 0),
                prefix_len: 12,
                router: Ipv4Addr::new(10, 9, 0, 254),
            },
            ClasslessRoute { destination: Ipv4Addr::UNSPECIFIED, prefix_len: 0, router: Ipv4Addr::new(169, 254, 0, 1) },
            ClasslessRoute { destination: Ipv4Addr::new(10, 8, 0, 0), prefix_len: 16, router: Ipv4Addr::UNSPECIFIED },
        ];
        m.options.set(code::CLASSLESS_ROUTE, ClasslessRoute::encode(&routes));
        let specs = lease_specs(&m, 24, opts(true));
        assert_eq!(
            ids(&specs),
            [
                "inet4/10.9.0.254/172.16.0.0/12/1024",
                "inet4/169.254.0.1//1024",
                "inet4//169.254.0.1/32/1024",
                "inet4//10.8.0.0/16/1024"
            ],
            "the router option ignored; an on-link route to the off-subnet gateway; an on-link destination"
        );
        assert_eq!(specs.routes[3].scope, Scope::LINK);
    }
}

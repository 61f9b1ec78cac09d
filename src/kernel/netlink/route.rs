//! Routes: list every table, add (present is fine) or replace, delete (absent is fine).

use std::fmt;
use std::net::IpAddr;

use futures::TryStreamExt;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteMetric, RouteNextHop, RouteScope,
    RouteType, RouteVia,
};
use rustix::io::Errno;

use super::{Netlink, NetlinkError, Scope, is_errno, kernel_error};
use crate::types::{Family, IpPrefix};

/// Routing table numbers (`RT_TABLE_*`).
pub const TABLE_DEFAULT: u32 = 253;
pub const TABLE_MAIN: u32 = 254;
pub const TABLE_LOCAL: u32 = 255;
/// What the one-byte header field holds for a table that does not fit in it.
const TABLE_COMPAT: u8 = 252;

/// `RTPROT_*` route protocols: who installed a route.
pub mod protocol {
    pub const UNSPEC: u8 = 0;
    pub const REDIRECT: u8 = 1;
    pub const KERNEL: u8 = 2;
    pub const BOOT: u8 = 3;
    pub const STATIC: u8 = 4;
    pub const RA: u8 = 9;
    pub const DHCP: u8 = 16;
}

/// `RTN_UNICAST`: the only route type [`Netlink::add_route`] makes.
const RTN_UNICAST: u8 = 1;

/// A route. Listed, it is what the kernel holds; handed to [`Netlink::add_route`] it is the
/// route to install, and to [`Netlink::delete_route`] the one to remove.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    /// Must be a network prefix (host bits clear) for the kernel to take it; `/0` is a
    /// default route.
    pub destination: IpPrefix,
    pub gateway: Option<IpAddr>,
    /// `RTA_PREFSRC`: the source address for traffic the host originates.
    pub source: Option<IpAddr>,
    pub out_link: Option<u32>,
    pub table: u32,
    /// The metric (`RTA_PRIORITY`); 0 leaves the kernel's default (0 for IPv4, 1024 for IPv6).
    pub priority: u32,
    pub scope: Scope,
    /// `RTPROT_*` ([`protocol`]).
    pub protocol: u8,
    /// `RTN_*`: 1 unicast, 2 local, 3 broadcast, 5 multicast, … Listing shows every type.
    pub kind: u8,
    /// RTNH_F_ONLINK: the gateway is on the link even if no address's prefix covers it.
    pub onlink: bool,
    /// `RTAX_MTU`; 0 for none.
    pub mtu: u32,
    /// `RTA_MULTIPATH`: the next hops of a multipath route (then `gateway` and `out_link`
    /// are none).
    pub next_hops: Vec<NextHop>,
}

/// One next hop of a multipath route.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NextHop {
    pub gateway: Option<IpAddr>,
    /// The output link's index; 0 for none.
    pub out_link: u32,
    /// 1 to 256 (the kernel keeps weight − 1 in a byte).
    pub weight: u32,
}

impl Route {
    /// A unicast route to `destination` in the main table, global scope, static protocol.
    pub fn new(destination: IpPrefix) -> Route {
        Route {
            destination,
            gateway: None,
            source: None,
            out_link: None,
            table: TABLE_MAIN,
            priority: 0,
            scope: Scope::Global,
            protocol: protocol::STATIC,
            kind: RTN_UNICAST,
            onlink: false,
            mtu: 0,
            next_hops: Vec::new(),
        }
    }

    pub fn family(&self) -> Family {
        self.destination.family()
    }
}

impl fmt::Display for Route {
    /// As `ip route` would show it: `10.0.0.0/24 via 10.0.0.1 dev 3 table 254 metric 100`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.destination.is_empty() {
            write!(f, "default ({})", self.family())?;
        } else {
            write!(f, "{}", self.destination)?;
        }
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        if let Some(link) = self.out_link {
            write!(f, " dev {link}")?;
        }
        if let Some(src) = self.source {
            write!(f, " src {src}")?;
        }
        write!(f, " table {}", self.table)?;
        if self.priority != 0 {
            write!(f, " metric {}", self.priority)?;
        }
        if self.onlink {
            f.write_str(" onlink")?;
        }
        for hop in &self.next_hops {
            f.write_str(" nexthop")?;
            if let Some(gw) = hop.gateway {
                write!(f, " via {gw}")?;
            }
            write!(f, " dev {} weight {}", hop.out_link, hop.weight)?;
        }
        Ok(())
    }
}

fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(a) => Some(IpAddr::V4(*a)),
        RouteAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

pub(crate) fn route_from_message(msg: &RouteMessage) -> Option<Route> {
    let h = &msg.header;
    let family = match h.address_family {
        AddressFamily::Inet => Family::Inet4,
        AddressFamily::Inet6 => Family::Inet6,
        _ => return None,
    };
    let mut route = Route {
        destination: IpPrefix::any(family),
        gateway: None,
        source: None,
        out_link: None,
        table: u32::from(h.table),
        priority: 0,
        scope: u8::from(h.scope).into(),
        protocol: u8::from(h.protocol),
        kind: u8::from(h.kind),
        onlink: h.flags.contains(RouteFlags::Onlink),
        mtu: 0,
        next_hops: Vec::new(),
    };
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Destination(a) => {
                route.destination = IpPrefix::new(ip_of(a)?, h.destination_prefix_length).ok()?
            }
            RouteAttribute::Gateway(a) => route.gateway = ip_of(a),
            RouteAttribute::Via(RouteVia::Inet(a)) => route.gateway = Some(IpAddr::V4(*a)),
            RouteAttribute::Via(RouteVia::Inet6(a)) => route.gateway = Some(IpAddr::V6(*a)),
            RouteAttribute::PrefSource(a) => route.source = ip_of(a),
            RouteAttribute::Oif(i) => route.out_link = Some(*i),
            RouteAttribute::Table(t) => route.table = *t,
            RouteAttribute::Priority(p) => route.priority = *p,
            RouteAttribute::MultiPath(hops) => route.next_hops = hops.iter().map(next_hop_from).collect(),
            RouteAttribute::Metrics(metrics) => {
                for m in metrics {
                    if let RouteMetric::Mtu(mtu) = m {
                        route.mtu = *mtu;
                    }
                }
            }
            _ => {}
        }
    }
    Some(route)
}

fn next_hop_from(hop: &RouteNextHop) -> NextHop {
    let mut gateway = None;
    for attr in &hop.attributes {
        match attr {
            RouteAttribute::Gateway(a) => gateway = ip_of(a),
            RouteAttribute::Via(RouteVia::Inet(a)) => gateway = Some(IpAddr::V4(*a)),
            RouteAttribute::Via(RouteVia::Inet6(a)) => gateway = Some(IpAddr::V6(*a)),
            _ => {}
        }
    }
    NextHop { gateway, out_link: hop.interface_index, weight: u32::from(hop.hops) + 1 }
}

/// A gateway attribute for a route of `family`: a gateway of the other family (IPv4 routed
/// via an IPv6 neighbour) goes in RTA_VIA.
fn gateway_attribute(family: Family, gw: IpAddr) -> RouteAttribute {
    if Family::of(&gw) == family {
        RouteAttribute::Gateway(RouteAddress::from(gw))
    } else {
        RouteAttribute::Via(match gw {
            IpAddr::V4(a) => RouteVia::Inet(a),
            IpAddr::V6(a) => RouteVia::Inet6(a),
        })
    }
}

/// The message that installs `route`.
fn add_message(route: &Route) -> RouteMessage {
    let mut msg = match_message(route);
    msg.header.scope = RouteScope::from(u8::from(route.scope));
    msg.header.protocol = route.protocol.into();
    msg.header.kind = RouteType::from(route.kind);
    if route.mtu != 0 {
        msg.attributes.push(RouteAttribute::Metrics(vec![RouteMetric::Mtu(route.mtu)]));
    }
    msg
}

/// The message that names `route` for deletion: the kernel treats an unspecified type,
/// protocol and `RT_SCOPE_NOWHERE` as "any", and matches on the rest.
fn match_message(route: &Route) -> RouteMessage {
    let family = match route.family() {
        Family::Inet4 => AddressFamily::Inet,
        Family::Inet6 => AddressFamily::Inet6,
    };
    let mut header = RouteHeader {
        address_family: family,
        destination_prefix_length: route.destination.bits(),
        table: u8::try_from(route.table).unwrap_or(TABLE_COMPAT),
        scope: RouteScope::from(u8::from(Scope::Nowhere)),
        kind: RouteType::from(0),
        ..RouteHeader::default()
    };
    if route.onlink {
        header.flags |= RouteFlags::Onlink;
    }
    let mut msg = RouteMessage::default();
    msg.header = header;
    let addr = |a: IpAddr| RouteAddress::from(a);
    if !route.destination.is_empty() {
        msg.attributes.push(RouteAttribute::Destination(addr(route.destination.addr())));
    }
    if let Some(gw) = route.gateway {
        msg.attributes.push(gateway_attribute(route.family(), gw));
    }
    if !route.next_hops.is_empty() {
        let hops = route
            .next_hops
            .iter()
            .map(|hop| {
                let mut next = RouteNextHop::default();
                next.hops = u8::try_from(hop.weight.clamp(1, 256) - 1).unwrap_or(u8::MAX);
                next.interface_index = hop.out_link;
                if let Some(gw) = hop.gateway {
                    next.attributes.push(gateway_attribute(route.family(), gw));
                }
                next
            })
            .collect();
        msg.attributes.push(RouteAttribute::MultiPath(hops));
    }
    if let Some(src) = route.source {
        msg.attributes.push(RouteAttribute::PrefSource(addr(src)));
    }
    if let Some(link) = route.out_link {
        msg.attributes.push(RouteAttribute::Oif(link));
    }
    if route.priority != 0 {
        msg.attributes.push(RouteAttribute::Priority(route.priority));
    }
    msg.attributes.push(RouteAttribute::Table(route.table));
    msg
}

impl Netlink {
    /// The routes of one family, or of both for `None`, in every table (filter on
    /// [`Route::table`] and [`Route::kind`]; the local table is full of the kernel's own).
    pub async fn routes(&self, family: Option<Family>) -> Result<Vec<Route>, NetlinkError> {
        let families = match family {
            Some(f) => vec![f],
            None => vec![Family::Inet4, Family::Inet6],
        };
        let mut routes = Vec::new();
        for family in families {
            let mut msg = RouteMessage::default();
            msg.header.address_family = match family {
                Family::Inet4 => AddressFamily::Inet,
                Family::Inet6 => AddressFamily::Inet6,
            };
            let messages: Vec<RouteMessage> = self
                .handle()
                .route()
                .get(msg)
                .execute()
                .try_collect()
                .await
                .map_err(|e| NetlinkError::List { what: "routes", source: kernel_error(e) })?;
            routes.extend(messages.iter().filter_map(route_from_message));
        }
        Ok(routes)
    }

    /// Adds `route`; the same route already there is success.
    pub async fn add_route(&self, route: &Route) -> Result<(), NetlinkError> {
        match self.handle().route().add(add_message(route)).execute().await {
            Ok(()) => Ok(()),
            Err(e) => {
                let source = kernel_error(e);
                if is_errno(&source, &[Errno::EXIST]) {
                    Ok(())
                } else {
                    Err(NetlinkError::Route { action: "adding", route: route.to_string(), source })
                }
            }
        }
    }

    /// Adds `route`, replacing one to the same destination in the same table with the same
    /// metric (and, for IPv4, TOS) whatever its gateway or link (`ip route replace`).
    pub async fn replace_route(&self, route: &Route) -> Result<(), NetlinkError> {
        self.handle().route().add(add_message(route)).replace().execute().await.map_err(|e| NetlinkError::Route {
            action: "replacing",
            route: route.to_string(),
            source: kernel_error(e),
        })
    }

    /// Deletes `route` (matched on destination, table, and the gateway, link, source and
    /// metric it gives); absent is success.
    pub async fn delete_route(&self, route: &Route) -> Result<(), NetlinkError> {
        match self.handle().route().del(match_message(route)).execute().await {
            Ok(()) => Ok(()),
            Err(e) => {
                let source = kernel_error(e);
                if is_errno(&source, &[Errno::SRCH, Errno::NOENT, Errno::NODEV]) {
                    Ok(())
                } else {
                    Err(NetlinkError::Route { action: "deleting", route: route.to_string(), source })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway_route() -> Route {
        Route {
            gateway: Some("192.168.1.1".parse().unwrap()),
            out_link: Some(3),
            table: 1000,
            priority: 100,
            onlink: true,
            mtu: 1400,
            source: Some("192.168.1.5".parse().unwrap()),
            ..Route::new(IpPrefix::any(Family::Inet4))
        }
    }

    #[test]
    fn a_route_goes_to_the_kernel_and_back_unchanged() {
        let route = gateway_route();
        let back = route_from_message(&add_message(&route)).unwrap();
        assert_eq!(back, route);
        let v6 = Route { table: TABLE_MAIN, ..Route::new("fd00:1::/64".parse().unwrap()) };
        assert_eq!(route_from_message(&add_message(&v6)).unwrap(), v6);
    }

    #[test]
    fn a_multipath_route_goes_to_the_kernel_and_back_unchanged() {
        use rtnetlink::packet_core::{Emitable, Parseable};
        let route = Route {
            next_hops: vec![
                NextHop { gateway: Some("10.5.0.1".parse().unwrap()), out_link: 3, weight: 1 },
                NextHop { gateway: Some("fe80::1".parse().unwrap()), out_link: 4, weight: 256 },
            ],
            ..Route::new("10.9.0.0/16".parse().unwrap())
        };
        let msg = add_message(&route);
        let mut buf = vec![0; msg.buffer_len()];
        msg.emit(&mut buf);
        let back = route_from_message(&RouteMessage::parse(&buf).unwrap()).unwrap();
        assert_eq!(back, route, "through the wire bytes, an IPv6 next hop of an IPv4 route as RTA_VIA");
        assert!(route.to_string().ends_with("nexthop via fe80::1 dev 4 weight 256"), "{route}");
    }

    #[test]
    fn big_tables_go_in_the_attribute() {
        let msg = add_message(&gateway_route());
        assert_eq!(msg.header.table, TABLE_COMPAT);
        assert!(msg.attributes.contains(&RouteAttribute::Table(1000)));
        assert_eq!(add_message(&Route::new("10.0.0.0/8".parse().unwrap())).header.table, 254);
    }

    #[test]
    fn deleting_matches_any_type_protocol_and_scope() {
        let msg = match_message(&gateway_route());
        assert_eq!(u8::from(msg.header.kind), 0);
        assert_eq!(u8::from(msg.header.protocol), 0);
        assert_eq!(u8::from(msg.header.scope), 255);
        assert!(msg.attributes.contains(&RouteAttribute::Priority(100)));
    }

    #[test]
    fn routes_print_like_ip_route() {
        assert_eq!(
            gateway_route().to_string(),
            "default (inet4) via 192.168.1.1 dev 3 src 192.168.1.5 table 1000 metric 100 onlink"
        );
        assert_eq!(Route::new("10.0.0.0/8".parse().unwrap()).to_string(), "10.0.0.0/8 table 254");
    }
}

//! `RouteStatusController`: every route in every table of the kernel, as a `RouteStatus` in
//! `network` with Talos's id (`[<table>/][<link>/ for inet6]<family>/<gateway>/<dst>/<metric>`).
//! A pure observer: no inputs, woken by the link and route multicast groups, it lists the
//! kernel and writes what it sees, removing the statuses of routes that are gone. It never
//! changes the kernel.

use std::collections::HashMap;

use crate::kernel::netlink::{self, Groups, Netlink, NetlinkError};
use crate::resources::network::{
    Family, RouteFlags, RouteNextHop, RouteProtocol, RouteStatus, RouteType, RoutingTable, Scope, route_id,
};

use super::NetworkTarget;
use super::route_spec::RTNH_F_ONLINK;
use super::status_observe::{KernelStatus, StatusController};

pub type RouteStatusController = StatusController<RouteStatus>;

impl RouteStatusController {
    /// Observes the namespace `target` names.
    pub fn new(target: NetworkTarget) -> Self {
        StatusController::with(target, "RouteStatusController", Groups::LINKS | Groups::ROUTES)
    }
}

/// The status of one kernel route, its links named as `names` says.
pub(crate) fn route_status(route: &netlink::Route, names: &HashMap<u32, String>) -> RouteStatus {
    let name = |index: u32| names.get(&index).cloned().unwrap_or_default();
    let destination = (!route.destination.is_empty()).then_some(route.destination);
    RouteStatus {
        family: match route.family() {
            crate::types::Family::Inet4 => Family::INET4,
            crate::types::Family::Inet6 => Family::INET6,
        },
        destination,
        source: route.source,
        gateway: route.gateway,
        out_link_index: route.out_link.unwrap_or(0),
        out_link_name: route.out_link.map(name).unwrap_or_default(),
        table: RoutingTable(route.table),
        priority: route.priority,
        scope: Scope(route.scope.into()),
        route_type: RouteType(route.kind),
        // Only the on-link flag is carried up from the kernel's rtm_flags.
        flags: RouteFlags(if route.onlink { RTNH_F_ONLINK } else { 0 }),
        protocol: RouteProtocol(route.protocol),
        mtu: route.mtu,
        next_hops: route
            .next_hops
            .iter()
            .map(|hop| RouteNextHop { gateway: hop.gateway, out_link_name: name(hop.out_link), weight: hop.weight })
            .collect(),
    }
}

/// Talos's id of a route status.
pub(crate) fn status_id(status: &RouteStatus) -> String {
    route_id(
        status.table,
        status.family,
        status.destination.as_ref(),
        status.gateway.as_ref(),
        status.priority,
        &status.out_link_name,
    )
}

#[async_trait::async_trait]
impl KernelStatus for RouteStatus {
    async fn observe(netlink: &Netlink) -> Result<Vec<(String, Self)>, NetlinkError> {
        let names: HashMap<u32, String> = netlink.links().await?.into_iter().map(|l| (l.index, l.name)).collect();
        let routes = netlink.routes(None).await?;
        // Two kernel routes with one id (they differ only in what the id leaves out, such as
        // the type): the first listed is reported, as Talos's last write per id would be one.
        let mut seen = std::collections::HashSet::new();
        Ok(routes
            .iter()
            .map(|r| route_status(r, &names))
            .filter_map(|status| {
                let id = status_id(&status);
                seen.insert(id.clone()).then_some((id, status))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth0() -> HashMap<u32, String> {
        [(3, "eth0".to_string()), (4, "eth1".to_string())].into()
    }

    #[test]
    fn kernel_routes_become_statuses_with_talos_ids() {
        let default = netlink::Route {
            gateway: Some("10.5.0.1".parse().unwrap()),
            out_link: Some(3),
            priority: 1024,
            ..netlink::Route::new(crate::types::IpPrefix::any(crate::types::Family::Inet4))
        };
        let status = route_status(&default, &eth0());
        assert_eq!(status.destination, None, "a default route has no destination");
        assert_eq!((status.out_link_index, status.out_link_name.as_str()), (3, "eth0"));
        assert_eq!(
            (status.table, status.protocol, status.route_type),
            (RoutingTable::MAIN, RouteProtocol::STATIC, RouteType::UNICAST)
        );
        assert_eq!(status_id(&status), "inet4/10.5.0.1//1024");

        let sourced = netlink::Route {
            source: Some("10.5.0.2".parse().unwrap()),
            table: 100,
            priority: 50,
            onlink: true,
            mtu: 1400,
            out_link: Some(3),
            ..netlink::Route::new("10.9.0.0/16".parse().unwrap())
        };
        let status = route_status(&sourced, &eth0());
        assert_eq!(status_id(&status), "100/inet4//10.9.0.0/16/50");
        assert_eq!((status.flags, status.mtu), (RouteFlags(RTNH_F_ONLINK), 1400));

        let v6 =
            netlink::Route { out_link: Some(3), priority: 256, ..netlink::Route::new("fd00::/64".parse().unwrap()) };
        assert_eq!(status_id(&route_status(&v6, &eth0())), "eth0/inet6//fd00::/64/256");

        let multipath = netlink::Route {
            next_hops: vec![netlink::NextHop { gateway: Some("10.6.0.1".parse().unwrap()), out_link: 4, weight: 3 }],
            ..netlink::Route::new("10.9.0.0/16".parse().unwrap())
        };
        let status = route_status(&multipath, &eth0());
        assert_eq!(
            status.next_hops,
            vec![RouteNextHop { gateway: Some("10.6.0.1".parse().unwrap()), out_link_name: "eth1".into(), weight: 3 }]
        );
    }
}

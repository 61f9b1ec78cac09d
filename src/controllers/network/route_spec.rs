//! `RouteSpecController`: puts the merged `RouteSpec`s of `network` in the kernel's routing
//! tables, and takes them out again when a spec goes away.
//!
//! Idempotent, as Talos's: the kernel's routes that match a spec (family, destination,
//! gateway, table, metric) are compared with it — scope, type, protocol, output link,
//! source, MTU, on-link — and one that drifted is deleted before the wanted one is added;
//! EEXIST is success. Multipath routes carry their next hops and weights. A route whose
//! link (or a next hop's link) does not exist yet waits. Woken by the link and
//! route multicast groups, so a route deleted behind its back, or dropped by the kernel with
//! its link going down, is added again as soon as it can be. It holds each spec with a
//! finalizer until the route is out of the kernel. Which routes are wanted is decided
//! upstream.

use std::collections::HashMap;

use crate::cosi::{Context, Resource};
use crate::kernel::netlink::{self, Groups, Netlink, NetlinkError};
use crate::resources::network::{DEFAULT_ROUTE_METRIC, Family, RouteSpec, RouteType};

use super::NetworkTarget;
use super::address_spec::kernel_prefix;
use super::spec_apply::{KernelSpec, SpecApplyController, apply_each};

/// `RTNH_F_ONLINK` in a spec's flags (`rtm_flags`, as Talos sends them): the gateway is on
/// the link even if no address's prefix covers it.
pub const RTNH_F_ONLINK: u32 = 0x4;

pub type RouteSpecController = SpecApplyController<RouteSpec>;

impl RouteSpecController {
    /// Applies routes in the namespace `target` names.
    pub fn new(target: NetworkTarget) -> Self {
        SpecApplyController::with(target, "RouteSpecController", Groups::LINKS | Groups::ROUTES)
    }
}

pub(crate) fn kernel_family(family: Family) -> crate::types::Family {
    if family == Family::INET6 { crate::types::Family::Inet6 } else { crate::types::Family::Inet4 }
}

/// What the kernel must hold for `spec`, its links' indexes looked up in `links`; and
/// whether every link it names is there.
pub(crate) fn wanted(spec: &RouteSpec, links: &HashMap<String, u32>) -> (netlink::Route, bool) {
    let index = |name: &str| if name.is_empty() { Some(None) } else { links.get(name).map(|i| Some(*i)) };
    let link_index = index(&spec.out_link_name);
    let mut complete = link_index.is_some();
    let next_hops = spec
        .next_hops
        .iter()
        .map(|hop| {
            let out_link = index(&hop.out_link_name);
            complete &= out_link.is_some();
            netlink::NextHop {
                gateway: hop.gateway,
                out_link: out_link.flatten().unwrap_or(0),
                // Talos: an unsaid weight is 1.
                weight: hop.weight.max(1),
            }
        })
        .collect();
    let family = kernel_family(spec.family);
    let destination =
        spec.destination.map(|d| kernel_prefix(&d).network()).unwrap_or_else(|| crate::types::IpPrefix::any(family));
    let route = netlink::Route {
        destination,
        gateway: spec.gateway,
        source: spec.source,
        out_link: link_index.flatten(),
        table: spec.table.0,
        priority: spec.priority,
        scope: spec.scope.0.into(),
        protocol: spec.protocol.0,
        // A spec that names no type means a plain unicast route; the kernel takes no other.
        kind: if spec.route_type == RouteType::UNSPEC { RouteType::UNICAST.0 } else { spec.route_type.0 },
        onlink: spec.flags.0 & RTNH_F_ONLINK != 0,
        mtu: spec.mtu,
        next_hops,
    };
    (route, complete)
}

/// Whether the kernel's `route` is one of the spec's (Talos's `findMatchingRoutes`): same
/// family, destination, gateway, table and metric — an IPv6 metric of 0 being the kernel's
/// 1024.
fn is_match(route: &netlink::Route, want: &netlink::Route) -> bool {
    let metric = route.priority == want.priority
        || (want.family() == crate::types::Family::Inet6
            && want.priority == 0
            && route.priority == DEFAULT_ROUTE_METRIC);
    route.family() == want.family()
        && route.destination == want.destination
        && route.gateway == want.gateway
        && route.table == want.table
        && metric
}

/// Whether a matching kernel route is what the spec asks for.
fn in_place(route: &netlink::Route, want: &netlink::Route) -> bool {
    route.scope == want.scope
        && route.protocol == want.protocol
        && route.kind == want.kind
        && (want.out_link.is_none() || route.out_link == want.out_link)
        && (want.source.is_none() || route.source == want.source)
        && route.mtu == want.mtu
        && route.onlink == want.onlink
        && route.next_hops == want.next_hops
}

/// What to do about one spec: delete these kernel routes, then add this one.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    pub delete: Vec<netlink::Route>,
    pub add: Option<netlink::Route>,
}

/// The kernel's routes by what [`is_match`] compares but the metric (destination — and with
/// it the family —, gateway, table), listed once per reconcile, so each spec looks at the
/// few routes that can match rather than scanning them all (O(N²) for a thousand routes).
pub(crate) type KernelRoutes = HashMap<(crate::types::IpPrefix, Option<std::net::IpAddr>, u32), Vec<netlink::Route>>;

pub(crate) fn index_routes(kernel: Vec<netlink::Route>) -> KernelRoutes {
    let mut by_key = KernelRoutes::with_capacity(kernel.len());
    for r in kernel {
        by_key.entry((r.destination, r.gateway, r.table)).or_default().push(r);
    }
    by_key
}

/// The pure decision for one spec, given the kernel's links (name → index) and routes.
pub(crate) fn step(spec: &RouteSpec, tearing_down: bool, links: &HashMap<String, u32>, kernel: &KernelRoutes) -> Step {
    let (want, complete) = wanted(spec, links);
    if !tearing_down && !complete {
        // A link it names is not there (yet): applied when it appears.
        return Step::default();
    }
    let candidates = kernel.get(&(want.destination, want.gateway, want.table)).map(Vec::as_slice).unwrap_or_default();
    let matching: Vec<&netlink::Route> = candidates.iter().filter(|r| is_match(r, &want)).collect();
    if tearing_down {
        return Step { delete: matching.into_iter().cloned().collect(), add: None };
    }
    let found = matching.iter().any(|r| in_place(r, &want));
    Step {
        delete: matching.into_iter().filter(|r| !in_place(r, &want)).cloned().collect(),
        add: (!found).then_some(want),
    }
}

async fn run_step(netlink: &Netlink, step: Step) -> Result<(), NetlinkError> {
    for stale in &step.delete {
        netlink.delete_route(stale).await?;
    }
    if let Some(want) = &step.add {
        netlink.add_route(want).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl KernelSpec for RouteSpec {
    async fn sync(netlink: &Netlink, ctx: &mut Context, specs: &[Resource<Self>]) -> Result<(), NetlinkError> {
        let kernel = index_routes(netlink.routes(None).await?);
        // Many requests in flight on the one socket rather than one round trip after another.
        // A route whose gateway another spec's route makes reachable may fail this once; it
        // is retried when that route's event wakes the next reconcile.
        apply_each(netlink, ctx, specs, |spec, going, links| step(spec, going, links, &kernel), run_step).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::{ConfigLayer, RouteFlags, RouteNextHop, RouteProtocol, RoutingTable, Scope};

    /// The decision over a listing, as `sync` makes it.
    fn step(spec: &RouteSpec, tearing_down: bool, links: &HashMap<String, u32>, kernel: &[netlink::Route]) -> Step {
        super::step(spec, tearing_down, links, &index_routes(kernel.to_vec()))
    }

    fn default_via(gw: &str, link: &str) -> RouteSpec {
        let mut spec = RouteSpec {
            family: Family::INET4,
            gateway: Some(gw.parse().unwrap()),
            out_link_name: link.into(),
            table: RoutingTable::MAIN,
            priority: 1024,
            route_type: RouteType::UNICAST,
            protocol: RouteProtocol::STATIC,
            config_layer: ConfigLayer::Cmdline,
            ..RouteSpec::default()
        };
        spec.normalize();
        spec
    }

    #[test]
    fn what_the_kernel_gets() {
        let mut spec = RouteSpec {
            destination: Some("10.9.0.7/16".parse().unwrap()),
            source: Some("10.5.0.2".parse().unwrap()),
            table: RoutingTable(100),
            mtu: 1400,
            flags: RouteFlags(RTNH_F_ONLINK),
            route_type: RouteType::UNSPEC,
            ..default_via("10.5.0.1", "eth0")
        };
        spec.normalize();
        let links: HashMap<String, u32> = [("eth0".to_string(), 3)].into();
        let (want, complete) = wanted(&spec, &links);
        assert!(complete);
        assert_eq!(want.destination.to_string(), "10.9.0.0/16", "host bits cleared");
        assert_eq!((want.table, want.priority, want.mtu, want.onlink), (100, 1024, 1400, true));
        assert_eq!((want.kind, want.protocol, want.out_link), (1, 4, Some(3)), "no type said: unicast");
        assert_eq!(want.source, Some("10.5.0.2".parse().unwrap()));
        let (default, _) = wanted(&default_via("10.5.0.1", "eth0"), &links);
        assert!(default.destination.is_empty());
        assert_eq!(default.scope, netlink::Scope::Global);
    }

    #[test]
    fn steps_table() {
        let links: HashMap<String, u32> = [("eth0".to_string(), 3)].into();
        let spec = default_via("10.5.0.1", "eth0");
        let (want, _) = wanted(&spec, &links);
        assert_eq!(step(&spec, false, &links, &[]), Step { delete: vec![], add: Some(want.clone()) }, "missing: added");
        assert_eq!(step(&default_via("10.5.0.1", "eth9"), false, &links, &[]), Step::default(), "no link yet: waits");
        assert_eq!(step(&spec, false, &links, std::slice::from_ref(&want)), Step::default(), "in place");
        let other_gw = netlink::Route { gateway: Some("10.5.0.254".parse().unwrap()), ..want.clone() };
        assert_eq!(
            step(&spec, false, &links, std::slice::from_ref(&other_gw)),
            Step { delete: vec![], add: Some(want.clone()) },
            "another gateway is another route"
        );
        for drifted in [
            netlink::Route { mtu: 1300, ..want.clone() },
            netlink::Route { protocol: 3, ..want.clone() },
            netlink::Route { out_link: Some(4), ..want.clone() },
            netlink::Route { scope: netlink::Scope::Link, ..want.clone() },
            netlink::Route { onlink: true, ..want.clone() },
            netlink::Route { source: Some("10.5.0.9".parse().unwrap()), ..want.clone() },
        ] {
            let wanted_source = RouteSpec { source: Some("10.5.0.2".parse().unwrap()), ..spec.clone() };
            let check = if drifted.source.is_some() { &wanted_source } else { &spec };
            let s = step(check, false, &links, std::slice::from_ref(&drifted));
            assert_eq!(s.delete, vec![drifted.clone()], "drift {drifted}: deleted");
            assert!(s.add.is_some(), "drift {drifted}: added again");
        }
        let kernel_source = netlink::Route { source: Some("10.5.0.9".parse().unwrap()), ..want.clone() };
        assert_eq!(step(&spec, false, &links, &[kernel_source]), Step::default(), "no source said: any is fine");
        assert_eq!(
            step(&spec, true, &links, std::slice::from_ref(&want)),
            Step { delete: vec![want.clone()], add: None },
            "tearing down: deleted"
        );
        assert_eq!(step(&spec, true, &HashMap::new(), &[]), Step::default(), "tearing down, link gone: nothing");

        // IPv6: a metric of 0 is the kernel's 1024.
        let v6 = RouteSpec {
            family: Family::INET6,
            destination: Some("fd00:1::/64".parse().unwrap()),
            gateway: None,
            priority: 0,
            scope: Scope::LINK,
            ..spec.clone()
        };
        let kernel6 = netlink::Route { priority: 1024, ..wanted(&v6, &links).0 };
        assert_eq!(step(&v6, false, &links, &[kernel6]), Step::default());
    }

    #[test]
    fn multipath_routes_wait_for_every_link_and_compare_their_hops() {
        let links: HashMap<String, u32> = [("eth0".to_string(), 3), ("eth1".to_string(), 4)].into();
        let hop = |gw: &str, link: &str, weight: u32| RouteNextHop {
            gateway: Some(gw.parse().unwrap()),
            out_link_name: link.into(),
            weight,
        };
        let mut spec = RouteSpec {
            gateway: None,
            out_link_name: String::new(),
            next_hops: vec![hop("10.5.0.1", "eth0", 0), hop("10.6.0.1", "eth1", 2)],
            ..default_via("10.5.0.1", "eth0")
        };
        spec.normalize();
        let (want, complete) = wanted(&spec, &links);
        assert!(complete);
        assert_eq!(
            want.next_hops,
            vec![
                netlink::NextHop { gateway: Some("10.5.0.1".parse().unwrap()), out_link: 3, weight: 1 },
                netlink::NextHop { gateway: Some("10.6.0.1".parse().unwrap()), out_link: 4, weight: 2 },
            ],
            "an unsaid weight is 1"
        );
        let only_eth0: HashMap<String, u32> = [("eth0".to_string(), 3)].into();
        assert_eq!(step(&spec, false, &only_eth0, &[]), Step::default(), "a hop's link missing: waits");
        assert_eq!(step(&spec, false, &links, std::slice::from_ref(&want)), Step::default());
        let mut reweighted = want.clone();
        reweighted.next_hops[1].weight = 5;
        assert_eq!(
            step(&spec, false, &links, std::slice::from_ref(&reweighted)),
            Step { delete: vec![reweighted], add: Some(want) },
            "another weight: replaced"
        );
    }
}

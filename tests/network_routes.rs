//! `RouteSpecController` and `RouteStatusController` against this host's kernel, with the
//! address and link controllers in the pipeline, each test in a fresh network namespace that
//! vanishes with it however it ends; the host's namespace is never touched. Specs go in as
//! candidates in `network-config` and through the merges, as on a node; changes behind the
//! controllers' back are made with `ip` inside the namespace. Needs root (CI runs as root);
//! without it the tests fail loudly rather than pass.

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use talosbox::controllers::network::{
    AddressSpecController, LinkSpecController, NetworkTarget, RTNH_F_ONLINK, RouteSpecController,
    RouteStatusController, merge_controllers,
};
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::netlink::{self, Groups, LinkKind, Netlink, NetlinkEvents};
use talosbox::kernel::netns::NetNs;
use talosbox::resources::network::{
    AddressFlags, AddressSpec, CONFIG_NAMESPACE, ConfigLayer, Family, LinkSpec, NAMESPACE, RouteFlags, RouteNextHop,
    RouteProtocol, RouteSpec, RouteStatus, RouteType, RoutingTable, layered_id,
};

const WAIT: Duration = Duration::from_secs(10);
const LAYER: ConfigLayer = ConfigLayer::MachineConfiguration;

fn fresh_ns() -> NetNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "network_routes tests need root (network namespaces, rtnetlink); run them as root as CI does"
    );
    let ns = NetNs::new().expect("creating a network namespace");
    assert!(!ns.same_as(&NetNs::current().unwrap()).unwrap(), "the fresh namespace is the host's");
    ns
}

/// Runs `ip ARGS` inside `ns`; fails the test if it fails.
fn ip(ns: &NetNs, args: &[&str]) {
    let out = ns.run(|| Command::new("ip").args(args).output()).expect("entering the namespace").expect("running ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// The merges, the address and route Spec controllers and the route Status controller in
/// `ns`; with `links`, the LinkSpecController too.
fn start(ns: &NetNs, links: bool) -> Harness {
    let target = NetworkTarget::Namespace(ns.clone());
    let mut controllers: Vec<Box<dyn Controller>> = merge_controllers();
    controllers.push(Box::new(AddressSpecController::new(target.clone())));
    controllers.push(Box::new(RouteSpecController::new(target.clone())));
    controllers.push(Box::new(RouteStatusController::new(target.clone())));
    if links {
        controllers.push(Box::new(LinkSpecController::new(target)));
    }
    Harness::start(controllers).unwrap()
}

async fn veth(nl: &Netlink) {
    nl.create_link("a", &LinkKind::Veth { peer: "b".into() }).await.unwrap();
    nl.set_link_up("a", true).await.unwrap();
    nl.set_link_up("b", true).await.unwrap();
}

fn want_address(h: &Harness, address: AddressSpec) {
    h.seed(CONFIG_NAMESPACE, &layered_id(LAYER, &address.id()), address).unwrap();
}

fn route(destination: Option<&str>, gateway: Option<&str>, link: &str, priority: u32) -> RouteSpec {
    let mut spec = RouteSpec {
        family: Family::INET4,
        destination: destination.map(|d| d.parse().unwrap()),
        gateway: gateway.map(|g| g.parse().unwrap()),
        out_link_name: link.into(),
        table: RoutingTable::MAIN,
        priority,
        route_type: RouteType::UNICAST,
        protocol: RouteProtocol::STATIC,
        config_layer: LAYER,
        ..RouteSpec::default()
    };
    spec.normalize();
    spec
}

fn want_route(h: &Harness, spec: &RouteSpec) {
    h.seed(CONFIG_NAMESPACE, &layered_id(LAYER, &spec.id()), spec.clone()).unwrap();
}

fn unwant_route(h: &Harness, spec: &RouteSpec) {
    h.unseed::<RouteSpec>(CONFIG_NAMESPACE, &layered_id(LAYER, &spec.id())).unwrap();
}

/// Waits, driven by the namespace's rtnetlink events, until the kernel satisfies `pred`
/// (given its routes and addresses); panics with what it last saw.
async fn kernel_eventually(
    ns: &NetNs,
    nl: &Netlink,
    what: &str,
    pred: impl Fn(&[netlink::Route], &[netlink::Address]) -> bool,
) -> Vec<netlink::Route> {
    let mut events = NetlinkEvents::in_namespace(ns, Groups::ALL).subscribe().unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let routes = nl.routes(None).await.unwrap();
        let addresses = nl.addresses(None).await.unwrap();
        if pred(&routes, &addresses) {
            return routes;
        }
        if tokio::time::timeout_at(deadline, events.next_batch()).await.is_err() {
            let routes: Vec<String> = routes.iter().filter(|r| r.table != 255).map(|r| r.to_string()).collect();
            panic!("timed out after {WAIT:?} waiting for the kernel: {what}; last seen: {routes:?} {addresses:?}");
        }
    }
}

fn gateway(r: &netlink::Route, gw: &str) -> bool {
    r.gateway == Some(gw.parse::<IpAddr>().unwrap())
}

fn default_via<'a>(routes: &'a [netlink::Route], gw: &str, table: u32) -> Option<&'a netlink::Route> {
    routes.iter().find(|r| r.destination.is_empty() && r.table == table && gateway(r, gw))
}

fn has_address(addresses: &[netlink::Address], prefix: &str) -> bool {
    let prefix: talosbox::types::IpPrefix = prefix.parse().unwrap();
    addresses.iter().any(|a| a.prefix == prefix)
}

#[tokio::test]
async fn a_default_route_via_a_gateway_comes_back_and_goes_with_its_spec() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    veth(&nl).await;
    let a = nl.link("a").await.unwrap().unwrap().index;
    let h = start(&ns, false);
    want_address(&h, AddressSpec::static_address("a", "10.5.0.2/24".parse().unwrap(), LAYER));
    let default = route(None, Some("10.5.0.1"), "a", 1024);
    want_route(&h, &default);

    let routes =
        kernel_eventually(&ns, &nl, "default via 10.5.0.1", |r, _| default_via(r, "10.5.0.1", 254).is_some()).await;
    let kernel = default_via(&routes, "10.5.0.1", 254).unwrap();
    assert_eq!((kernel.out_link, kernel.priority, kernel.protocol), (Some(a), 1024, 4));
    let status = h
        .assert_eventually::<RouteStatus, _>(NAMESPACE, "inet4/10.5.0.1//1024", "the route's status", |r| r.is_some())
        .await
        .unwrap();
    let status = status.spec();
    assert_eq!((status.out_link_name.as_str(), status.out_link_index), ("a", a));
    assert_eq!((status.table, status.route_type, status.destination), (RoutingTable::MAIN, RouteType::UNICAST, None));
    // The kernel's own prefix route is observed too.
    h.assert_eventually::<RouteStatus, _>(NAMESPACE, "inet4//10.5.0.0/24/0", "the prefix route", |r| r.is_some()).await;

    ip(&ns, &["route", "del", "default", "via", "10.5.0.1"]);
    kernel_eventually(&ns, &nl, "re-added after deletion", |r, _| default_via(r, "10.5.0.1", 254).is_some()).await;
    // Drift: the same route with another MTU is replaced by the wanted one.
    ip(&ns, &["route", "replace", "default", "via", "10.5.0.1", "dev", "a", "metric", "1024", "mtu", "1300"]);
    kernel_eventually(&ns, &nl, "MTU back to none", |r, _| default_via(r, "10.5.0.1", 254).is_some_and(|d| d.mtu == 0))
        .await;

    unwant_route(&h, &default);
    kernel_eventually(&ns, &nl, "removed with its spec", |r, _| default_via(r, "10.5.0.1", 254).is_none()).await;
    h.assert_absent::<RouteSpec>(NAMESPACE, &default.id()).await;
    h.assert_absent::<RouteStatus>(NAMESPACE, "inet4/10.5.0.1//1024").await;
    h.stop().await;
}

#[tokio::test]
async fn routes_in_other_tables_with_metric_source_mtu_and_an_on_link_gateway() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    veth(&nl).await;
    let h = start(&ns, false);
    want_address(&h, AddressSpec::static_address("a", "10.5.0.2/24".parse().unwrap(), LAYER));
    let sourced = RouteSpec {
        table: RoutingTable(100),
        source: Some("10.5.0.2".parse().unwrap()),
        mtu: 1400,
        ..route(Some("10.9.0.0/16"), Some("10.5.0.1"), "a", 50)
    };
    // A gateway no address on the link covers: the kernel takes it only as on-link.
    let onlink = RouteSpec {
        table: RoutingTable(200),
        flags: RouteFlags(RTNH_F_ONLINK),
        ..route(None, Some("192.168.99.1"), "a", 10)
    };
    want_route(&h, &sourced);
    want_route(&h, &onlink);

    let routes = kernel_eventually(&ns, &nl, "both routes", |r, _| {
        r.iter().any(|r| r.table == 100 && gateway(r, "10.5.0.1")) && default_via(r, "192.168.99.1", 200).is_some()
    })
    .await;
    let t100 = routes.iter().find(|r| r.table == 100).unwrap();
    assert_eq!(t100.destination.to_string(), "10.9.0.0/16");
    assert_eq!((t100.priority, t100.mtu, t100.source), (50, 1400, Some("10.5.0.2".parse().unwrap())));
    assert!(default_via(&routes, "192.168.99.1", 200).unwrap().onlink);

    let status = h
        .assert_eventually::<RouteStatus, _>(NAMESPACE, "100/inet4/10.5.0.1/10.9.0.0/16/50", "status", |r| r.is_some())
        .await
        .unwrap();
    let status = status.spec();
    assert_eq!((status.priority, status.mtu, status.source), (50, 1400, Some("10.5.0.2".parse().unwrap())));
    let status = h
        .assert_eventually::<RouteStatus, _>(NAMESPACE, "200/inet4/192.168.99.1//10", "on-link status", |r| r.is_some())
        .await
        .unwrap();
    assert_eq!(status.spec().flags, RouteFlags(RTNH_F_ONLINK));

    ip(&ns, &["route", "del", "10.9.0.0/16", "table", "100"]);
    kernel_eventually(&ns, &nl, "table 100 route back", |r, _| r.iter().any(|r| r.table == 100)).await;
    h.stop().await;
}

#[tokio::test]
async fn a_link_that_flaps_gets_its_addresses_and_routes_back() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    veth(&nl).await;
    // No LinkSpecController: the link stays down until the test brings it up.
    let h = start(&ns, false);
    want_address(&h, AddressSpec::static_address("a", "10.5.0.2/24".parse().unwrap(), LAYER));
    let v6 = AddressSpec {
        flags: AddressFlags::PERMANENT | AddressFlags::NODAD,
        ..AddressSpec::static_address("a", "fd00:5::2/64".parse().unwrap(), LAYER)
    };
    want_address(&h, v6);
    let default = route(None, Some("10.5.0.1"), "a", 1024);
    want_route(&h, &default);
    let all_there = |r: &[netlink::Route], a: &[netlink::Address]| {
        default_via(r, "10.5.0.1", 254).is_some() && has_address(a, "10.5.0.2/24") && has_address(a, "fd00:5::2/64")
    };
    kernel_eventually(&ns, &nl, "addresses and the default route", all_there).await;

    // Down: the kernel drops the route through the link and its IPv6 address.
    ip(&ns, &["link", "set", "dev", "a", "down"]);
    kernel_eventually(&ns, &nl, "the route gone while the link is down", |r, _| {
        default_via(r, "10.5.0.1", 254).is_none()
    })
    .await;
    ip(&ns, &["link", "set", "dev", "a", "up"]);
    kernel_eventually(&ns, &nl, "everything back after the flap", all_there).await;
    h.stop().await;
}

#[tokio::test]
async fn a_route_waits_for_its_link_made_by_a_link_spec() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    let h = start(&ns, true);
    want_address(&h, AddressSpec::static_address("a", "10.5.0.2/24".parse().unwrap(), LAYER));
    let default = route(None, Some("10.5.0.1"), "a", 1024);
    want_route(&h, &default);
    h.assert_eventually::<RouteSpec, _>(NAMESPACE, &default.id(), "merged", |r| r.is_some()).await;

    // The link comes from a logical link spec; address and route follow it.
    let veth = LinkSpec {
        logical: true,
        kind: "veth".into(),
        link_type: talosbox::resources::network::LinkType::ETHER,
        veth: talosbox::resources::network::VethSpec { peer_name: "b".into() },
        ..LinkSpec::up("a", LAYER)
    };
    h.seed(CONFIG_NAMESPACE, &layered_id(LAYER, "a"), veth).unwrap();
    kernel_eventually(&ns, &nl, "the route on the new link", |r, a| {
        default_via(r, "10.5.0.1", 254).is_some() && has_address(a, "10.5.0.2/24")
    })
    .await;
    // A flap with the LinkSpecController there: it brings the link back up itself.
    ip(&ns, &["link", "set", "dev", "a", "down"]);
    kernel_eventually(&ns, &nl, "back after the flap", |r, _| default_via(r, "10.5.0.1", 254).is_some()).await;
    h.stop().await;
}

#[tokio::test]
async fn a_multipath_route_with_weights() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    veth(&nl).await;
    nl.create_link("c", &LinkKind::Veth { peer: "d".into() }).await.unwrap();
    nl.set_link_up("c", true).await.unwrap();
    nl.set_link_up("d", true).await.unwrap();
    let (a, c) = (nl.link("a").await.unwrap().unwrap().index, nl.link("c").await.unwrap().unwrap().index);
    let h = start(&ns, false);
    want_address(&h, AddressSpec::static_address("a", "10.5.0.2/24".parse().unwrap(), LAYER));
    want_address(&h, AddressSpec::static_address("c", "10.6.0.2/24".parse().unwrap(), LAYER));
    let hop = |gw: &str, link: &str, weight: u32| RouteNextHop {
        gateway: Some(gw.parse().unwrap()),
        out_link_name: link.into(),
        weight,
    };
    let mut multipath = RouteSpec {
        next_hops: vec![hop("10.5.0.1", "a", 1), hop("10.6.0.1", "c", 2)],
        ..route(Some("10.9.0.0/16"), None, "", 100)
    };
    multipath.normalize();
    want_route(&h, &multipath);

    let hops = |r: &[netlink::Route]| {
        r.iter().find(|r| r.destination.to_string() == "10.9.0.0/16").map(|r| r.next_hops.clone()).unwrap_or_default()
    };
    let routes = kernel_eventually(&ns, &nl, "the multipath route", |r, _| hops(r).len() == 2).await;
    let got = hops(&routes);
    assert_eq!((got[0].out_link, got[0].weight, got[1].out_link, got[1].weight), (a, 1, c, 2));
    assert_eq!(got[1].gateway, Some("10.6.0.1".parse().unwrap()));
    let status = h
        .assert_eventually::<RouteStatus, _>(NAMESPACE, "inet4//10.9.0.0/16/100", "multipath status", |r| {
            r.is_some_and(|r| r.spec().next_hops.len() == 2)
        })
        .await
        .unwrap();
    assert_eq!(status.spec().next_hops[1], hop("10.6.0.1", "c", 2));

    unwant_route(&h, &multipath);
    kernel_eventually(&ns, &nl, "removed with its spec", |r, _| hops(r).is_empty()).await;
    h.stop().await;
}

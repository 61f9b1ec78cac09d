//! `LinkSpecController` against this host's kernel, each test in a fresh network namespace
//! that vanishes with it however it ends; the host's namespace is never touched. Link specs
//! go in as candidates in `network-config` and through the merge, as on a node; changes
//! behind the controller's back are made with `ip` inside the namespace. veth and bridge
//! exist on this kernel; dummy, vlan and bond do not, and are covered by the pure tests of
//! the decision and of the netlink messages (they need the VM). Needs root (CI runs as root);
//! without it the tests fail loudly rather than pass.

use std::process::Command;
use std::time::Duration;

use talosbox::controllers::network::{LinkMergeController, LinkSpecController, LinkStatusController, NetworkTarget};
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::netlink::{self, BridgeSettings, Groups, LinkData, LinkKind, Netlink, NetlinkEvents};
use talosbox::kernel::netns::NetNs;
use talosbox::resources::network::{
    BridgeMasterSpec, BridgeSlave, CONFIG_NAMESPACE, ConfigLayer, LINK_KIND_BRIDGE, LINK_KIND_VETH, LinkSpec,
    LinkStatus, LinkType, NAMESPACE, StpSpec, VethSpec, layered_id,
};

const WAIT: Duration = Duration::from_secs(10);
const LAYER: ConfigLayer = ConfigLayer::MachineConfiguration;

fn fresh_ns() -> NetNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "network_links tests need root (network namespaces, rtnetlink); run them as root as CI does"
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

fn start(ns: &NetNs) -> Harness {
    let controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(LinkMergeController::new(CONFIG_NAMESPACE, NAMESPACE)),
        Box::new(LinkSpecController::new(NetworkTarget::Namespace(ns.clone()))),
        Box::new(LinkStatusController::new(NetworkTarget::Namespace(ns.clone()))),
    ];
    Harness::start(controllers).unwrap()
}

fn want(h: &Harness, spec: &LinkSpec) {
    h.seed(CONFIG_NAMESPACE, &layered_id(LAYER, &spec.name), spec.clone()).unwrap();
}

fn unwant(h: &Harness, name: &str) {
    h.unseed::<LinkSpec>(CONFIG_NAMESPACE, &layered_id(LAYER, name)).unwrap();
}

fn logical(name: &str, kind: &str) -> LinkSpec {
    LinkSpec { logical: true, kind: kind.into(), link_type: LinkType::ETHER, ..LinkSpec::up(name, LAYER) }
}

fn veth(name: &str, peer: &str) -> LinkSpec {
    LinkSpec { veth: VethSpec { peer_name: peer.into() }, ..logical(name, LINK_KIND_VETH) }
}

/// Waits, driven by the namespace's link events, until the kernel's links satisfy `pred`;
/// panics with what it last saw.
async fn links_eventually(
    ns: &NetNs,
    nl: &Netlink,
    what: &str,
    pred: impl Fn(&[netlink::Link]) -> bool,
) -> Vec<netlink::Link> {
    let mut events = NetlinkEvents::in_namespace(ns, Groups::LINKS).subscribe().unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let links = nl.links().await.unwrap();
        if pred(&links) {
            return links;
        }
        if tokio::time::timeout_at(deadline, events.next_batch()).await.is_err() {
            let seen: Vec<_> = links.iter().map(|l| (&l.name, &l.kind, l.mtu, l.up, l.master, &l.data)).collect();
            panic!("timed out after {WAIT:?} waiting for the kernel: {what}; last seen: {seen:?}");
        }
    }
}

fn named<'a>(links: &'a [netlink::Link], name: &str) -> Option<&'a netlink::Link> {
    links.iter().find(|l| l.name == name)
}

#[tokio::test]
async fn a_veth_pair_comes_and_goes_with_its_spec() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    // A link of another kind under the wanted name is replaced.
    nl.create_link("a", &LinkKind::Bridge(BridgeSettings::default())).await.unwrap();
    let h = start(&ns);
    want(&h, &LinkSpec { mtu: 1400, ..veth("a", "b") });
    let links = links_eventually(&ns, &nl, "veth a-b, up, MTU 1400", |l| {
        named(l, "a").is_some_and(|a| a.kind == "veth" && a.up && a.mtu == 1400) && named(l, "b").is_some()
    })
    .await;
    let (a, b) = (named(&links, "a").unwrap(), named(&links, "b").unwrap());
    assert_eq!((a.parent, b.parent, b.kind.as_str()), (Some(b.index), Some(a.index), "veth"));
    assert!(!b.up, "the peer has no spec: left down");

    unwant(&h, "a");
    links_eventually(&ns, &nl, "both ends gone with the spec", |l| named(l, "a").is_none() && named(l, "b").is_none())
        .await;
    h.assert_absent::<LinkSpec>(NAMESPACE, "a").await;
    h.stop().await;
}

#[tokio::test]
async fn mtu_and_up_are_put_back_and_a_physical_link_stays() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    // Made outside the controller and wanted without `logical`: configured, never deleted.
    nl.create_link("a", &LinkKind::Veth { peer: "b".into() }).await.unwrap();
    let h = start(&ns);
    want(&h, &LinkSpec { mtu: 1400, ..LinkSpec::up("a", LAYER) });
    let up_1400 = |l: &[netlink::Link]| named(l, "a").is_some_and(|a| a.up && a.mtu == 1400);
    links_eventually(&ns, &nl, "a up with MTU 1400", up_1400).await;

    ip(&ns, &["link", "set", "dev", "a", "mtu", "1500"]);
    links_eventually(&ns, &nl, "MTU put back", up_1400).await;
    ip(&ns, &["link", "set", "dev", "a", "down"]);
    links_eventually(&ns, &nl, "brought back up", up_1400).await;
    ip(&ns, &["link", "set", "dev", "a", "down"]);
    ip(&ns, &["link", "set", "dev", "a", "mtu", "9000"]);
    links_eventually(&ns, &nl, "both put back", up_1400).await;

    // A spec saying down takes it down.
    want(&h, &LinkSpec { mtu: 1400, up: false, ..LinkSpec::up("a", LAYER) });
    h.assert_eventually::<LinkSpec, _>(NAMESPACE, "a", "merged down", |r| r.is_some_and(|r| !r.spec().up)).await;
    links_eventually(&ns, &nl, "a down", |l| named(l, "a").is_some_and(|a| !a.up)).await;

    unwant(&h, "a");
    h.assert_absent::<LinkSpec>(NAMESPACE, "a").await;
    assert!(nl.link("a").await.unwrap().is_some(), "a link that is not logical is never deleted");
    h.stop().await;
}

#[tokio::test]
async fn a_bridge_is_made_and_a_veth_becomes_its_port() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    let h = start(&ns);
    // STP only: this host's kernel has no bridge vlan filtering (the pure tests and the VM
    // cover it).
    let bridge = LinkSpec {
        bridge_master: BridgeMasterSpec { stp: StpSpec { enabled: true }, ..Default::default() },
        ..logical("br0", LINK_KIND_BRIDGE)
    };
    // The port's spec comes first and its master does not exist yet: order is the
    // controller's business.
    want(&h, &LinkSpec { bridge_slave: BridgeSlave { master_name: "br0".into() }, ..veth("a", "b") });
    want(&h, &bridge);
    let enslaved = |l: &[netlink::Link]| {
        let Some(br) = named(l, "br0") else { return false };
        br.kind == "bridge"
            && br.up
            && matches!(br.data, LinkData::Bridge(BridgeSettings { stp: true, .. }))
            && named(l, "a").is_some_and(|a| a.master == Some(br.index) && a.up)
    };
    let links = links_eventually(&ns, &nl, "br0 with STP, a its port", enslaved).await;
    let br0 = named(&links, "br0").unwrap().index;
    h.assert_eventually::<LinkStatus, _>(NAMESPACE, "br0", "br0's status with STP", |r| {
        r.is_some_and(|r| r.spec().bridge_master.stp.enabled && r.spec().kind == "bridge")
    })
    .await;
    h.assert_eventually::<LinkStatus, _>(NAMESPACE, "a", "a's status, a port of br0", |r| {
        r.is_some_and(|r| r.spec().master_index == br0)
    })
    .await;

    ip(&ns, &["link", "set", "dev", "a", "nomaster"]);
    links_eventually(&ns, &nl, "a enslaved again", enslaved).await;
    ip(&ns, &["link", "set", "br0", "type", "bridge", "stp_state", "0"]);
    links_eventually(&ns, &nl, "bridge settings put back", enslaved).await;

    unwant(&h, "br0");
    let links = links_eventually(&ns, &nl, "br0 deleted with its spec", |l| named(l, "br0").is_none()).await;
    assert_eq!(named(&links, "a").unwrap().master, None, "the port is free");
    h.assert_absent::<LinkSpec>(NAMESPACE, "br0").await;
    unwant(&h, "a");
    links_eventually(&ns, &nl, "the veth deleted with its spec", |l| named(l, "a").is_none()).await;
    h.stop().await;
}

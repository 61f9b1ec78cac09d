//! The network controllers against this host's kernel, each test in a fresh network
//! namespace that vanishes with it however it ends; the host's namespace is never touched.
//! The kernel command line goes in as a `KernelCmdline` resource, and the tests watch it come
//! out as merged specs, addresses on a veth, and statuses. Changes behind the controllers'
//! back are made with `ip` run inside the namespace. Needs root (CI runs as root); without it
//! the tests fail loudly rather than pass.

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use talosbox::controllers::network::{
    AddressSpecController, AddressStatusController, CmdlineConfigController, LinkStatusController, NetworkTarget,
    merge_controllers,
};
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::netlink::{self, Groups, LinkKind, Netlink, NetlinkEvents};
use talosbox::kernel::netns::NetNs;
use talosbox::resources::network::{
    AddressSpec, AddressStatus, ConfigLayer, Family, LinkStatus, NAMESPACE, RouteSpec, RoutingTable, Scope,
};
use talosbox::resources::runtime::{self, KernelCmdline};

const WAIT: Duration = Duration::from_secs(10);

fn fresh_ns() -> NetNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "network_controllers tests need root (network namespaces, rtnetlink); run them as root as CI does"
    );
    let ns = NetNs::new().expect("creating a network namespace");
    assert!(!ns.same_as(&NetNs::current().unwrap()).unwrap(), "the fresh namespace is the host's");
    ns
}

/// Runs `ip ARGS` inside `ns`; fails the test if it fails.
fn ip(ns: &NetNs, args: &[&str]) -> String {
    let out = ns.run(|| Command::new("ip").args(args).output()).expect("entering the namespace").expect("running ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The whole pipeline from the command line to the kernel and back, in `ns`.
fn controllers(ns: &NetNs) -> Vec<Box<dyn Controller>> {
    let target = NetworkTarget::Namespace(ns.clone());
    let mut controllers: Vec<Box<dyn Controller>> = vec![Box::new(CmdlineConfigController::new())];
    controllers.extend(merge_controllers());
    controllers.push(Box::new(AddressSpecController::new(target.clone())));
    controllers.push(Box::new(AddressStatusController::new(target.clone())));
    controllers.push(Box::new(LinkStatusController::new(target)));
    controllers
}

fn set_cmdline(h: &Harness, text: &str) {
    h.seed(runtime::NAMESPACE, KernelCmdline::ID, KernelCmdline { cmdline: text.into() }).unwrap();
}

async fn veth(nl: &Netlink, name: &str, peer: &str) {
    nl.create_link(name, &LinkKind::Veth { peer: peer.into() }).await.unwrap();
    nl.set_link_up(name, true).await.unwrap();
    nl.set_link_up(peer, true).await.unwrap();
}

/// Waits, driven by the namespace's rtnetlink events, until the kernel's addresses satisfy
/// `pred`; panics with what it last saw.
async fn kernel_eventually(
    ns: &NetNs,
    nl: &Netlink,
    what: &str,
    pred: impl Fn(&[netlink::Address]) -> bool,
) -> Vec<netlink::Address> {
    let mut events = NetlinkEvents::in_namespace(ns, Groups::ALL).subscribe().unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let addresses = nl.addresses(None).await.unwrap();
        if pred(&addresses) {
            return addresses;
        }
        if tokio::time::timeout_at(deadline, events.next_batch()).await.is_err() {
            panic!("timed out after {WAIT:?} waiting for the kernel: {what}; last seen: {addresses:?}");
        }
    }
}

fn has(addresses: &[netlink::Address], index: u32, prefix: &str) -> Option<netlink::Address> {
    let prefix: talosbox::types::IpPrefix = prefix.parse().unwrap();
    addresses.iter().find(|a| a.link_index == index && a.prefix == prefix).cloned()
}

const CMDLINE: &str = "console=ttyS0 ip=10.5.0.2::10.5.0.1:255.255.255.0::a:off";

#[tokio::test]
async fn cmdline_ip_becomes_merged_specs_and_the_address_on_the_veth() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    veth(&nl, "a", "b").await;
    let a = nl.link("a").await.unwrap().unwrap();
    let h = Harness::start(controllers(&ns)).unwrap();
    set_cmdline(&h, CMDLINE);

    // Merged into `network`, at the cmdline layer.
    let address = AddressSpec::static_address("a", "10.5.0.2/24".parse().unwrap(), ConfigLayer::Cmdline);
    h.assert_spec(NAMESPACE, "a/10.5.0.2/24", &address).await;
    let route = h
        .assert_eventually::<RouteSpec, _>(NAMESPACE, "inet4/10.5.0.1//1024", "the default route", |r| r.is_some())
        .await
        .unwrap();
    let route = route.spec();
    assert_eq!(route.gateway, Some("10.5.0.1".parse::<IpAddr>().unwrap()));
    assert_eq!((route.destination, route.out_link_name.as_str()), (None, "a"));
    assert_eq!((route.family, route.table, route.priority), (Family::INET4, RoutingTable::MAIN, 1024));
    assert_eq!(route.config_layer, ConfigLayer::Cmdline);

    // On the kernel's veth, and reported back.
    let got = kernel_eventually(&ns, &nl, "10.5.0.2/24 on a", |l| has(l, a.index, "10.5.0.2/24").is_some()).await;
    let kernel = has(&got, a.index, "10.5.0.2/24").unwrap();
    assert_eq!(kernel.scope, netlink::Scope::Global);
    assert!(ip(&ns, &["-o", "addr", "show", "dev", "a"]).contains("inet 10.5.0.2/24"));
    let status = h
        .assert_eventually::<AddressStatus, _>(NAMESPACE, "a/10.5.0.2/24", "the address status", |r| r.is_some())
        .await
        .unwrap();
    let status = status.spec();
    assert_eq!((status.link_index, status.link_name.as_str()), (a.index, "a"));
    assert_eq!((status.family, status.scope), (Family::INET4, Scope::GLOBAL));
    h.stop().await;
}

#[tokio::test]
async fn an_address_deleted_or_changed_behind_its_back_comes_back() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    veth(&nl, "a", "b").await;
    let a = nl.link("a").await.unwrap().unwrap().index;
    let h = Harness::start(controllers(&ns)).unwrap();
    set_cmdline(&h, CMDLINE);
    kernel_eventually(&ns, &nl, "applied", |l| has(l, a, "10.5.0.2/24").is_some()).await;

    ip(&ns, &["addr", "del", "10.5.0.2/24", "dev", "a"]);
    kernel_eventually(&ns, &nl, "re-added after deletion", |l| has(l, a, "10.5.0.2/24").is_some()).await;

    // Drift: the same address with another scope is replaced by the wanted one.
    ip(&ns, &["addr", "replace", "10.5.0.2/24", "dev", "a", "scope", "link"]);
    kernel_eventually(&ns, &nl, "scope back to global", |l| {
        has(l, a, "10.5.0.2/24").is_some_and(|x| x.scope == netlink::Scope::Global)
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn an_address_waits_for_its_link_and_leaves_with_its_spec() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    let h = Harness::start(controllers(&ns)).unwrap();
    set_cmdline(&h, CMDLINE);
    h.assert_eventually::<AddressSpec, _>(NAMESPACE, "a/10.5.0.2/24", "merged", |r| r.is_some()).await;

    // Wanted before the link exists: applied the moment it appears.
    veth(&nl, "a", "b").await;
    let a = nl.link("a").await.unwrap().unwrap().index;
    kernel_eventually(&ns, &nl, "applied once the link appeared", |l| has(l, a, "10.5.0.2/24").is_some()).await;

    // The command line no longer says it: the spec goes, and the address with it.
    set_cmdline(&h, "console=ttyS0");
    h.assert_absent::<AddressSpec>(NAMESPACE, "a/10.5.0.2/24").await;
    kernel_eventually(&ns, &nl, "removed with its spec", |l| has(l, a, "10.5.0.2/24").is_none()).await;
    h.assert_absent::<AddressStatus>(NAMESPACE, "a/10.5.0.2/24").await;
    h.stop().await;
}

#[tokio::test]
async fn statuses_mirror_the_kernel() {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).unwrap();
    let h = Harness::start(controllers(&ns)).unwrap();
    let lo = h.assert_eventually::<LinkStatus, _>(NAMESPACE, "lo", "loopback", |r| r.is_some()).await.unwrap();
    assert_eq!(lo.spec().link_type.to_string(), "loopback");

    veth(&nl, "a", "b").await;
    nl.set_link_mtu("a", 1400).await.unwrap();
    let (a, b) = (nl.link("a").await.unwrap().unwrap(), nl.link("b").await.unwrap().unwrap());
    let status = h
        .assert_eventually::<LinkStatus, _>(NAMESPACE, "a", "veth a, MTU 1400", |r| {
            r.is_some_and(|r| r.spec().mtu == 1400)
        })
        .await
        .unwrap();
    let status = status.spec();
    assert_eq!((status.index, status.kind.as_str(), status.veth.peer_name.as_str()), (a.index, "veth", "b"));
    assert_eq!((status.link_index, status.hardware_addr.0.clone()), (b.index, a.hardware_addr.clone()));
    assert!(status.flags.contains(talosbox::resources::network::LinkFlags::UP));

    // Addresses someone else adds are observed too, with the kernel's own view of them.
    ip(&ns, &["link", "set", "lo", "up"]);
    ip(&ns, &["addr", "add", "fd00:5::2/64", "dev", "a", "nodad"]);
    let lo4 =
        h.assert_eventually::<AddressStatus, _>(NAMESPACE, "lo/127.0.0.1/8", "lo's address", |r| r.is_some()).await;
    assert_eq!(lo4.unwrap().spec().scope, Scope::HOST);
    let v6 =
        h.assert_eventually::<AddressStatus, _>(NAMESPACE, "a/fd00:5::2/64", "a's v6 address", |r| r.is_some()).await;
    assert_eq!(v6.unwrap().spec().family, Family::INET6);

    // A link that goes takes its statuses with it.
    nl.delete_link("a").await.unwrap();
    h.assert_absent::<LinkStatus>(NAMESPACE, "a").await;
    h.assert_absent::<LinkStatus>(NAMESPACE, "b").await;
    h.assert_absent::<AddressStatus>(NAMESPACE, "a/fd00:5::2/64").await;
    h.stop().await;
}

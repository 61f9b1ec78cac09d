//! The rtnetlink layer against this host's kernel: links (veth, bridge), addresses and routes,
//! idempotence, and the event source. Every test makes its own fresh network namespace, which
//! vanishes with the test however it ends; the host's namespace is never touched. `ip` is used
//! only to look at and to change the namespace behind the layer's back. Needs root (CI runs as
//! root); without it the tests fail loudly rather than pass.

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use talosbox::cosi::{Context, Controller, EventSource, Input, Output, ReconcileError};
use talosbox::kernel::netlink::{
    Address, Groups, Link, LinkKind, Netlink, NetlinkError, NetlinkEvents, OperState, Route, Scope, TABLE_MAIN,
    address_flags,
};
use talosbox::kernel::netns::NetNs;
use talosbox::types::{Family, IpPrefix};

const WAIT: Duration = Duration::from_secs(10);

/// A fresh network namespace and a routing socket inside it.
fn fresh() -> (NetNs, Netlink) {
    let ns = fresh_ns();
    let nl = Netlink::connect_in(&ns).expect("connecting rtnetlink in the namespace");
    (ns, nl)
}

fn fresh_ns() -> NetNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "kernel_netlink tests need root (network namespaces, rtnetlink); run them as root as CI does"
    );
    let ns = NetNs::new().expect("creating a network namespace");
    assert!(!ns.same_as(&NetNs::current().unwrap()).unwrap(), "the fresh namespace is the host's");
    ns
}

/// Runs `ip ARGS` inside `ns` and returns its stdout; fails the test if it fails.
fn ip(ns: &NetNs, args: &[&str]) -> String {
    let out = ns.run(|| Command::new("ip").args(args).output()).expect("entering the namespace").expect("running ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn p(s: &str) -> IpPrefix {
    s.parse().unwrap()
}

fn addr(s: &str) -> IpAddr {
    s.parse().unwrap()
}

async fn link(nl: &Netlink, name: &str) -> Link {
    nl.link(name).await.unwrap().unwrap_or_else(|| panic!("no link {name}"))
}

/// A veth pair `a`/`b`, both up.
async fn veth_up(nl: &Netlink) -> (Link, Link) {
    nl.create_link("a", &LinkKind::Veth { peer: "b".into() }).await.unwrap();
    nl.set_link_up("a", true).await.unwrap();
    nl.set_link_up("b", true).await.unwrap();
    (link(nl, "a").await, link(nl, "b").await)
}

#[tokio::test]
async fn a_fresh_namespace_has_only_loopback() {
    let (_ns, nl) = fresh();
    let links = nl.links().await.unwrap();
    assert_eq!(links.len(), 1, "{links:?}");
    let lo = &links[0];
    assert_eq!((lo.name.as_str(), lo.kind.as_str(), lo.up, lo.link_type), ("lo", "", false, 772));
    assert!(nl.link("eth0").await.unwrap().is_none());
    assert!(nl.addresses(None).await.unwrap().is_empty());
    nl.set_link_up("lo", true).await.unwrap();
    let addrs = nl.addresses(None).await.unwrap();
    let lo4 = addrs.iter().find(|a| a.family() == Family::Inet4).expect("no 127.0.0.1 on lo");
    assert_eq!((lo4.prefix, lo4.scope, lo4.link_index), (p("127.0.0.1/8"), Scope::Host, lo.index));
}

#[tokio::test]
async fn veth_and_bridge_links_are_created_configured_and_deleted() {
    let (ns, nl) = fresh();
    let veth = LinkKind::Veth { peer: "b".into() };
    nl.create_link("a", &veth).await.unwrap();
    nl.create_link("a", &veth).await.expect("creating an existing veth again is success");
    nl.create_link("br0", &LinkKind::Bridge(Default::default())).await.unwrap();
    nl.create_link("br0", &LinkKind::Bridge(Default::default()))
        .await
        .expect("creating an existing bridge again is success");
    match nl.create_link("br0", &veth).await {
        Err(NetlinkError::KindMismatch { name, found, .. }) => {
            assert_eq!((name.as_str(), found.as_str()), ("br0", "bridge"))
        }
        other => panic!("a veth over a bridge's name: {other:?}"),
    }

    let (a, b, br) = (link(&nl, "a").await, link(&nl, "b").await, link(&nl, "br0").await);
    assert_eq!((a.kind.as_str(), b.kind.as_str(), br.kind.as_str()), ("veth", "veth", "bridge"));
    assert_eq!(a.parent, Some(b.index), "a veth's IFLA_LINK is its peer");
    assert_eq!(a.hardware_addr.len(), 6);
    assert_eq!(a.hardware_addr_string().len(), 17);
    assert!(!a.up && a.master.is_none());

    for name in ["a", "b", "br0"] {
        nl.set_link_up(name, true).await.unwrap();
    }
    nl.set_link_up("a", true).await.expect("bringing up an up link is success");
    nl.set_link_mtu("a", 1400).await.unwrap();
    nl.set_link_master("a", Some("br0")).await.unwrap();
    nl.set_link_master("a", Some("br0")).await.expect("enslaving twice is success");

    let a = link(&nl, "a").await;
    assert!(a.up, "{a:?}");
    assert_eq!((a.mtu, a.master), (1400, Some(br.index)));
    // Both ends are up, so the kernel runs them; its operstate follows carrier.
    let b = link(&nl, "b").await;
    assert!(b.running && b.lower_up && b.operstate == OperState::Up, "{b:?}");
    let shown = ip(&ns, &["-o", "link", "show", "dev", "a"]);
    assert!(shown.contains("mtu 1400") && shown.contains("master br0"), "{shown}");

    nl.set_link_master("a", None).await.unwrap();
    assert_eq!(link(&nl, "a").await.master, None);
    nl.set_link_up("a", false).await.unwrap();
    let a = link(&nl, "a").await;
    assert!(!a.up && !a.running, "{a:?}");
    assert!(link(&nl, "b").await.operstate != OperState::Up, "b kept carrier with its peer down");

    match nl.set_link_master("a", Some("nope")).await {
        Err(NetlinkError::NoSuchLink { name }) => assert_eq!(name, "nope"),
        other => panic!("enslaving to a missing bridge: {other:?}"),
    }
    match nl.set_link_up("nope", true).await {
        Err(e @ NetlinkError::NoSuchLink { .. }) => assert_eq!(e.to_string(), "link nope does not exist"),
        other => panic!("bringing up a missing link: {other:?}"),
    }
    let err = nl.set_link_mtu("a", 10).await.unwrap_err().to_string();
    assert!(err.starts_with("setting the MTU of link a: "), "{err}");

    nl.delete_link("a").await.unwrap();
    assert!(nl.link("b").await.unwrap().is_none(), "deleting one end of a veth deletes both");
    nl.delete_link("a").await.expect("deleting an absent link is success");
    nl.delete_link("br0").await.unwrap();
    let names: Vec<String> = nl.links().await.unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["lo"]);
}

#[tokio::test]
async fn addresses_are_added_listed_and_deleted_idempotently() {
    let (ns, nl) = fresh();
    let (a, _) = veth_up(&nl).await;
    let v4 = Address::new(a.index, p("10.10.0.1/24"));
    let v6 = Address { flags: address_flags::NODAD, ..Address::new(a.index, p("fd00:10::1/64")) };
    let link_local = Address { scope: Scope::Link, priority: 300, ..Address::new(a.index, p("169.254.7.7/16")) };
    for address in [&v4, &v6, &link_local] {
        nl.add_address(address).await.unwrap();
        nl.add_address(address).await.expect("adding an address twice is success");
    }

    let listed4 = nl.addresses(Some(Family::Inet4)).await.unwrap();
    assert!(listed4.iter().all(|a| a.family() == Family::Inet4));
    let got = listed4.iter().find(|x| x.prefix == v4.prefix).expect("10.10.0.1/24 not listed");
    assert_eq!((got.link_index, got.scope), (a.index, Scope::Global));
    assert!(got.flags & address_flags::PERMANENT != 0, "{got:?}");
    let got = listed4.iter().find(|x| x.prefix == link_local.prefix).expect("169.254.7.7/16 not listed");
    assert_eq!((got.scope, got.priority), (Scope::Link, 300));

    let listed6 = nl.addresses(Some(Family::Inet6)).await.unwrap();
    let got = listed6.iter().find(|x| x.prefix == v6.prefix).expect("fd00:10::1/64 not listed");
    assert!(got.flags & address_flags::NODAD != 0 && got.flags & address_flags::TENTATIVE == 0, "{got:?}");
    assert_eq!(nl.addresses(None).await.unwrap().len(), listed4.len() + listed6.len());

    let shown = ip(&ns, &["-o", "addr", "show", "dev", "a"]);
    assert!(shown.contains("inet 10.10.0.1/24") && shown.contains("inet6 fd00:10::1/64"), "{shown}");
    // The kernel made the prefix route for the /24 with the asked metric on the link-local one.
    let routes = ip(&ns, &["route", "show", "dev", "a"]);
    assert!(routes.contains("169.254.0.0/16 proto kernel scope link src 169.254.7.7 metric 300"), "{routes}");

    for address in [&v4, &v6] {
        nl.delete_address(address).await.unwrap();
        nl.delete_address(address).await.expect("deleting an absent address is success");
    }
    let left: Vec<IpPrefix> = nl.addresses(None).await.unwrap().into_iter().map(|a| a.prefix).collect();
    assert!(!left.contains(&v4.prefix) && !left.contains(&v6.prefix), "{left:?}");
    nl.delete_address(&Address::new(9999, p("10.9.9.9/24"))).await.expect("deleting on a gone link is success");

    let err = nl.add_address(&Address::new(9999, p("10.9.9.9/24"))).await.unwrap_err().to_string();
    assert!(err.starts_with("adding address 10.9.9.9/24 on link 9999: "), "{err}");
}

#[tokio::test]
async fn routes_in_main_and_other_tables_with_gateways() {
    let (ns, nl) = fresh();
    let (a, _) = veth_up(&nl).await;
    nl.add_address(&Address::new(a.index, p("10.20.0.1/24"))).await.unwrap();
    nl.add_address(&Address { flags: address_flags::NODAD, ..Address::new(a.index, p("fd00:20::1/64")) })
        .await
        .unwrap();

    let via = Route {
        gateway: Some(addr("10.20.0.254")),
        out_link: Some(a.index),
        priority: 100,
        source: Some(addr("10.20.0.1")),
        ..Route::new(p("10.30.0.0/16"))
    };
    let onlink = Route {
        gateway: Some(addr("192.0.2.1")),
        out_link: Some(a.index),
        onlink: true,
        ..Route::new(p("10.40.0.0/16"))
    };
    let table100 = Route {
        gateway: Some(addr("10.20.0.254")),
        out_link: Some(a.index),
        table: 100,
        ..Route::new(IpPrefix::any(Family::Inet4))
    };
    let big_table = Route { out_link: Some(a.index), table: 1000, scope: Scope::Link, ..Route::new(p("10.50.0.0/24")) };
    let v6 = Route { gateway: Some(addr("fd00:20::fe")), out_link: Some(a.index), ..Route::new(p("fd00:30::/64")) };
    let v6_default = Route { out_link: Some(a.index), priority: 2048, ..Route::new(IpPrefix::any(Family::Inet6)) };
    let all = [&via, &onlink, &table100, &big_table, &v6, &v6_default];
    for route in all {
        nl.add_route(route).await.unwrap_or_else(|e| panic!("{e}"));
        nl.add_route(route).await.expect("adding a route twice is success");
    }

    let listed = nl.routes(None).await.unwrap();
    for want in all {
        let got = listed
            .iter()
            .find(|r| r.destination == want.destination && r.table == want.table)
            .unwrap_or_else(|| panic!("{want} not listed in {listed:#?}"));
        assert_eq!((got.gateway, got.out_link, got.source), (want.gateway, want.out_link, want.source), "{got}");
        assert_eq!((got.onlink, got.scope, got.protocol), (want.onlink, want.scope, want.protocol), "{got}");
        if want.priority != 0 {
            assert_eq!(got.priority, want.priority, "{got}");
        }
    }
    assert!(listed.iter().any(|r| r.table == TABLE_MAIN && r.destination == p("10.20.0.0/24")), "no prefix route");
    assert!(nl.routes(Some(Family::Inet6)).await.unwrap().iter().all(|r| r.family() == Family::Inet6));
    let shown = ip(&ns, &["route", "show", "table", "100"]);
    assert_eq!(shown.trim(), "default via 10.20.0.254 dev a proto static");
    let shown = ip(&ns, &["route", "show", "10.40.0.0/16"]);
    assert!(shown.contains("via 192.0.2.1 dev a proto static onlink"), "{shown}");

    // Replacing moves the one route to a new gateway rather than adding a second.
    let moved = Route { gateway: Some(addr("10.20.0.253")), ..via.clone() };
    nl.replace_route(&moved).await.unwrap();
    let to_30: Vec<Route> = nl
        .routes(Some(Family::Inet4))
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.destination == via.destination)
        .collect();
    assert_eq!(to_30.len(), 1, "{to_30:?}");
    assert_eq!(to_30[0].gateway, moved.gateway);

    // A gateway outside every prefix needs onlink; the error names the route.
    let unreachable =
        Route { gateway: Some(addr("192.0.2.9")), out_link: Some(a.index), ..Route::new(p("10.60.0.0/16")) };
    let err = nl.add_route(&unreachable).await.unwrap_err().to_string();
    assert!(err.starts_with("adding route 10.60.0.0/16 via 192.0.2.9 dev "), "{err}");

    for route in [&moved, &onlink, &table100, &big_table, &v6, &v6_default] {
        nl.delete_route(route).await.unwrap_or_else(|e| panic!("{e}"));
        nl.delete_route(route).await.expect("deleting an absent route is success");
    }
    let left = nl.routes(None).await.unwrap();
    for gone in all {
        assert!(!left.iter().any(|r| r.destination == gone.destination && r.table == gone.table), "{gone} left");
    }
    assert_eq!(ip(&ns, &["route", "show", "table", "100"]).trim(), "");
}

async fn batch(sub: &mut talosbox::kernel::netlink::Subscription) -> talosbox::kernel::netlink::Batch {
    tokio::time::timeout(WAIT, sub.next_batch()).await.expect("no netlink event came").expect("reading events")
}

#[tokio::test]
async fn events_report_changes_made_behind_the_layers_back_one_burst_at_a_time() {
    let (ns, nl) = fresh();
    let (a, _) = veth_up(&nl).await;
    let mut all = NetlinkEvents::in_namespace(&ns, Groups::ALL).subscribe().unwrap();
    let mut links_only = NetlinkEvents::in_namespace(&ns, Groups::LINKS).subscribe().unwrap();

    ip(&ns, &["addr", "add", "10.70.0.1/24", "dev", "a"]);
    let got = batch(&mut all).await;
    // The address, and the prefix and local routes the kernel adds for it.
    assert!(got.addresses >= 1 && got.routes >= 1 && !got.overflowed, "{got:?}");

    // Twenty changes in one go are one batch.
    let script: String = (1..=20).map(|i| format!("addr add 10.71.0.{i}/32 dev a\n")).collect();
    let path = std::env::temp_dir().join(format!("talosbox-netlink-batch-{}", std::process::id()));
    std::fs::write(&path, script).unwrap();
    ip(&ns, &["-batch", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    let got = batch(&mut all).await;
    assert!(got.addresses >= 20, "the burst was split: {got:?}");

    ip(&ns, &["addr", "del", "10.70.0.1/24", "dev", "a"]);
    let got = batch(&mut all).await;
    assert!(got.addresses >= 1, "{got:?}");

    // The links-only socket saw none of that, only the link going down.
    nl.set_link_up("a", false).await.unwrap();
    let got = batch(&mut links_only).await;
    assert!(got.links >= 1 && got.addresses == 0 && got.routes == 0, "{got:?}");
    assert_eq!(a.name, "a");
}

/// Reports each reconcile on a channel; woken only by its netlink source.
struct Observer {
    events: Option<NetlinkEvents>,
    reconciled: tokio::sync::mpsc::UnboundedSender<()>,
}

#[async_trait::async_trait]
impl Controller for Observer {
    fn name(&self) -> String {
        "AddressObserverController".into()
    }
    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }
    fn outputs(&self) -> Vec<Output> {
        Vec::new()
    }
    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        self.events.take().map(|e| Box::new(e) as Box<dyn EventSource>).into_iter().collect()
    }
    async fn reconcile(&mut self, _ctx: &mut Context) -> Result<(), ReconcileError> {
        let _ = self.reconciled.send(());
        Ok(())
    }
}

#[tokio::test]
async fn the_event_source_wakes_its_controller() {
    let (ns, nl) = fresh();
    let (a, _) = veth_up(&nl).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let events = NetlinkEvents::in_namespace(&ns, Groups::ADDRESSES);
    assert_eq!(EventSource::name(&events), "netlink ipv4 addresses, ipv6 addresses");
    let observer = Observer { events: Some(events), reconciled: tx };
    let harness = talosbox::cosi::Harness::start(vec![Box::new(observer)]).unwrap();
    tokio::time::timeout(WAIT, rx.recv()).await.expect("no first reconcile").unwrap();

    // An address deleted behind the controller's back wakes it.
    nl.add_address(&Address::new(a.index, p("10.80.0.1/24"))).await.unwrap();
    tokio::time::timeout(WAIT, rx.recv()).await.expect("adding an address woke nothing").unwrap();
    while rx.try_recv().is_ok() {}
    ip(&ns, &["addr", "del", "10.80.0.1/24", "dev", "a"]);
    tokio::time::timeout(WAIT, rx.recv()).await.expect("deleting an address woke nothing").unwrap();
    harness.stop().await;
}

#[test]
fn work_on_a_namespace_thread_sees_only_that_namespace() {
    let ns = fresh_ns();
    let names = ns
        .block_on(|| async {
            // Netlink::connect binds to the calling thread's namespace: here, the fresh one.
            let nl = Netlink::connect().unwrap();
            nl.create_link("inside", &LinkKind::Bridge(Default::default())).await.unwrap();
            nl.links().await.unwrap().into_iter().map(|l| l.name).collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(names, ["lo", "inside"]);
    assert!(ns.run(|| NetNs::current().unwrap().same_as(&ns).unwrap()).unwrap());
    let host = Command::new("ip").args(["link", "show", "inside"]).output().unwrap();
    assert!(!host.status.success(), "the bridge showed up in the host's namespace");
    // Outside a tokio runtime connecting is an error, never a panic.
    assert!(matches!(Netlink::connect_in(&ns), Err(NetlinkError::Connect { .. })));
    assert!(matches!(Netlink::connect(), Err(NetlinkError::Connect { .. })));
}

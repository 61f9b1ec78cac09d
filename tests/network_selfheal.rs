//! Self-healing through the whole networking pipeline, as on a node: the configuration goes
//! in as the `MachineConfig` resource; the config controllers, the merges, the spec
//! controllers and the DHCP operators carry it to the kernel; the status controllers read
//! the kernel back. Each test runs in fresh network namespaces — the node's on one end of a
//! veth, a peer with dnsmasq on the other — that vanish with it however it ends. Changes
//! behind machined's back are made with `ip` inside the node's namespace, and every wait is
//! on the kernel's rtnetlink events, dnsmasq's log or the client's status, with a timeout.
//!
//! A veth is not a physical link (`LinkStatus::physical`: Ethernet with no kind), so, as on
//! Talos, no default DHCP runs on it: the DHCP cases configure it with
//! `machine.network.interfaces[].dhcp: true`.
//!
//! Needs root and dnsmasq; without either the tests fail loudly.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use talosbox::controllers::config::machine_config::parse;
use talosbox::controllers::network::{
    AddressConfigController, AddressSpecController, AddressStatusController, CmdlineConfigController,
    EtcFileController, HostDnsConfigController, HostnameConfigController, LinkConfigController, LinkSpecController,
    LinkStatusController, NetworkStatusController, NetworkTarget, NodeAddressController, OperatorConfigController,
    OperatorFactory, OperatorSpecController, ResolverConfigController, RouteConfigController, RouteSpecController,
    RouteStatusController, TimeServerConfigController, merge_controllers, resolver_spec_controller,
    time_server_spec_controller,
};
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::netlink::{self, Groups, Netlink, NetlinkEvents};
use talosbox::kernel::netns::NetNs;
use talosbox::network::dhcp4::{Dhcp4Operator, Dhcp4Status};
use talosbox::network::operator::Operator;
use talosbox::resources::config::{self as cfg, MachineConfig};
use talosbox::resources::network::{
    AddressSpec, ConfigLayer, LinkStatus, NAMESPACE, Operator as OperatorKind, OperatorSpec, RouteSpec,
};

const WAIT: Duration = Duration::from_secs(30);
/// The node's MAC on `a`, which dnsmasq holds 10.9.0.77 for.
const MAC: &str = "02:00:00:00:09:01";
const LEASED: &str = "10.9.0.77/24";

fn fresh_ns() -> NetNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "network_selfheal tests need root (network namespaces, DHCP ports); run them as root as CI does"
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

/// A path `ip … netns` takes for a namespace held only by a descriptor of this process.
fn ns_path(ns: &NetNs) -> String {
    format!("/proc/{}/fd/{}", std::process::id(), ns.as_fd().as_raw_fd())
}

/// The two ends: `a` (MAC [`MAC`], left down: the pipeline brings it up) in the node's
/// namespace, `b` (10.9.0.1/24) up in the peer's.
fn wire() -> (NetNs, NetNs) {
    let (node, peer) = (fresh_ns(), fresh_ns());
    ip(&node, &["link", "add", "name", "a", "address", MAC, "type", "veth", "peer", "name", "b"]);
    ip(&node, &["link", "set", "dev", "b", "netns", &ns_path(&peer)]);
    ip(&peer, &["link", "set", "dev", "lo", "up"]);
    ip(&peer, &["addr", "add", "10.9.0.1/24", "dev", "b"]);
    ip(&peer, &["link", "set", "dev", "b", "up"]);
    (node, peer)
}

/// dnsmasq serving DHCPv4 on `b` (10.9.0.50–99, 10.9.0.77 held for [`MAC`], router and DNS
/// 10.9.0.1), its log gathered line by line; killed on drop, however the test ends.
struct Dnsmasq {
    child: Child,
    log: watch::Receiver<Vec<String>>,
    peer: NetNs,
    args: Vec<String>,
    dir: tempfile::TempDir,
}

impl Dnsmasq {
    fn start(peer: &NetNs, extra: &[&str]) -> Dnsmasq {
        assert!(
            std::path::Path::new("/usr/sbin/dnsmasq").exists(),
            "network_selfheal tests need dnsmasq (apt-get install dnsmasq-base)"
        );
        let dir = tempfile::tempdir().unwrap();
        let mut args: Vec<String> = [
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--log-facility=-",
            "--log-dhcp",
            "--port=0",
            "--no-resolv",
            "--no-hosts",
            "--no-ping",
            "--user=root",
            "--group=root",
            "--pid-file=",
            "--interface=b",
            "--except-interface=lo",
            "--bind-interfaces",
            "--dhcp-authoritative",
            "--dhcp-range=10.9.0.50,10.9.0.99,255.255.255.0,2m",
            "--dhcp-option=option:router,10.9.0.1",
            "--dhcp-option=option:dns-server,10.9.0.1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--dhcp-host={MAC},10.9.0.77"));
        args.push(format!("--dhcp-leasefile={}", dir.path().join("leases").display()));
        args.extend(extra.iter().map(|s| s.to_string()));
        let (child, log) = Self::spawn(peer, &args);
        Dnsmasq { child, log, peer: peer.clone(), args, dir }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again with the same arguments, a fresh log and an empty lease file: it
    /// remembers nothing of the lease it gave.
    fn restart_forgetting(&mut self) {
        self.stop();
        std::fs::write(self.dir.path().join("leases"), "").unwrap();
        (self.child, self.log) = Self::spawn(&self.peer, &self.args);
    }

    fn spawn(peer: &NetNs, args: &[String]) -> (Child, watch::Receiver<Vec<String>>) {
        let mut child = peer
            .run(|| {
                Command::new("/usr/sbin/dnsmasq")
                    .args(args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
            })
            .expect("entering the peer namespace")
            .expect("starting dnsmasq");
        let stderr = child.stderr.take().unwrap();
        let (tx, log) = watch::channel(Vec::new());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                tx.send_modify(|l| l.push(line));
            }
        });
        (child, log)
    }

    fn count(&self, what: &str) -> usize {
        self.log.borrow().iter().filter(|l| l.contains(what)).count()
    }

    /// Waits until dnsmasq has logged `what` at least `n` times.
    async fn logged(&self, what: &str, n: usize) {
        let mut log = self.log.clone();
        let wait = log.wait_for(|lines| lines.iter().filter(|l| l.contains(what)).count() >= n);
        if !matches!(tokio::time::timeout(WAIT, wait).await, Ok(Ok(_))) {
            panic!(
                "dnsmasq did not log {what:?} {n} times within {WAIT:?}; its log:\n{}",
                self.log.borrow().join("\n")
            );
        }
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The DHCPv4 clients the pipeline started, for the test to watch.
type Started = Arc<Mutex<Vec<Arc<Dhcp4Operator>>>>;

/// The node's networking controllers (those of `talosbox::controllers::all` for the
/// network, with the target pointed at `node`), less the ones that act on the host outside
/// rtnetlink: the hostname (UTS), `/etc` files on disk, the DNS listener and the clock.
fn node_pipeline(node: &NetNs) -> (Harness, Started) {
    let target = NetworkTarget::Namespace(node.clone());
    let started: Started = Arc::default();
    let made = Arc::clone(&started);
    let netns = node.clone();
    // As `OperatorSpecController::new(target)` makes them, keeping a handle on each.
    let factory: OperatorFactory = Box::new(move |spec: &OperatorSpec| -> Option<Arc<dyn Operator>> {
        match spec.operator {
            OperatorKind::Dhcp4 => {
                let operator = Arc::new(Dhcp4Operator::new(Some(netns.clone()), &spec.link_name, spec.dhcp4.clone()));
                made.lock().unwrap().push(Arc::clone(&operator));
                Some(operator)
            }
            OperatorKind::Dhcp6 => Some(Arc::new(talosbox::network::dhcp6::Dhcp6Operator::new(
                Some(netns.clone()),
                &spec.link_name,
                spec.dhcp6.clone(),
            ))),
            OperatorKind::Vip => None,
        }
    });
    let mut controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(CmdlineConfigController::new()),
        Box::new(AddressConfigController::new()),
        Box::new(RouteConfigController::new()),
        Box::new(LinkConfigController::new()),
        Box::new(HostnameConfigController::new()),
        Box::new(ResolverConfigController::new()),
        Box::new(TimeServerConfigController::new()),
        Box::new(OperatorConfigController::new()),
    ];
    controllers.extend(merge_controllers());
    controllers.push(Box::new(AddressSpecController::new(target.clone())));
    controllers.push(Box::new(AddressStatusController::new(target.clone())));
    controllers.push(Box::new(LinkStatusController::new(target.clone())));
    controllers.push(Box::new(LinkSpecController::new(target.clone())));
    controllers.push(Box::new(RouteSpecController::new(target.clone())));
    controllers.push(Box::new(RouteStatusController::new(target)));
    controllers.push(Box::new(OperatorSpecController::with_factory(factory)));
    controllers.push(Box::new(resolver_spec_controller()));
    controllers.push(Box::new(time_server_spec_controller()));
    controllers.push(Box::new(NodeAddressController));
    controllers.push(Box::new(EtcFileController));
    controllers.push(Box::new(NetworkStatusController));
    controllers.push(Box::new(HostDnsConfigController));
    let registry = Arc::new(talosbox::resources::registry().unwrap());
    let h = Harness::start_with(talosbox::cosi::State::in_memory(), registry, controllers).unwrap().with_timeout(WAIT);
    (h, started)
}

/// Applies `interfaces` (the YAML list under `machine.network.interfaces`, indented by 6)
/// as the node's configuration.
fn configure(h: &Harness, interfaces: &str) {
    let yaml = format!("version: v1alpha1\nmachine:\n  type: worker\n  network:\n    interfaces:\n{interfaces}");
    h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, parse(&yaml).unwrap()).unwrap();
}

const DHCP: &str = "      - interface: a\n        dhcp: true\n";

/// What the kernel of the node's namespace holds, as the test reads it.
struct Kernel {
    ns: NetNs,
    nl: Netlink,
}

struct Seen {
    routes: Vec<netlink::Route>,
    addresses: Vec<netlink::Address>,
}

impl Seen {
    fn address(&self, prefix: &str) -> Option<&netlink::Address> {
        let prefix: talosbox::types::IpPrefix = prefix.parse().unwrap();
        self.addresses.iter().find(|a| a.prefix == prefix)
    }

    /// The IPv4 addresses of global scope (on `a`: the only link with any).
    fn global4(&self) -> Vec<String> {
        self.addresses
            .iter()
            .filter(|a| a.prefix.addr().is_ipv4() && a.scope == netlink::Scope::Global)
            .map(|a| a.prefix.to_string())
            .collect()
    }

    /// The IPv4 default routes of the main table, as (gateway, metric).
    fn defaults4(&self) -> Vec<(IpAddr, u32)> {
        self.routes
            .iter()
            .filter(|r| r.destination.is_empty() && r.table == 254 && r.destination.addr().is_ipv4())
            .filter_map(|r| r.gateway.map(|g| (g, r.priority)))
            .collect()
    }

    fn has_default(&self, gateway: &str, metric: u32) -> bool {
        self.defaults4().contains(&(gateway.parse().unwrap(), metric))
    }
}

impl Kernel {
    fn new(ns: &NetNs) -> Kernel {
        Kernel { ns: ns.clone(), nl: Netlink::connect_in(ns).unwrap() }
    }

    async fn now(&self) -> Seen {
        Seen { routes: self.nl.routes(None).await.unwrap(), addresses: self.nl.addresses(None).await.unwrap() }
    }

    /// Waits, driven by the namespace's rtnetlink events, until the kernel satisfies `pred`;
    /// panics with what it last saw.
    async fn until(&self, what: &str, wait: Duration, pred: impl Fn(&Seen) -> bool) -> Seen {
        let mut events = NetlinkEvents::in_namespace(&self.ns, Groups::ALL).subscribe().unwrap();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let seen = self.now().await;
            if pred(&seen) {
                return seen;
            }
            if tokio::time::timeout_at(deadline, events.next_batch()).await.is_err() {
                panic!(
                    "timed out after {wait:?} waiting for the kernel: {what}; it has addresses {:?}, default routes {:?}",
                    seen.global4(),
                    seen.defaults4()
                );
            }
        }
    }

    async fn eventually(&self, what: &str, pred: impl Fn(&Seen) -> bool) -> Seen {
        self.until(what, WAIT, pred).await
    }
}

async fn status_until(
    operator: &Dhcp4Operator,
    what: &str,
    wait: Duration,
    pred: impl FnMut(&Dhcp4Status) -> bool,
) -> Dhcp4Status {
    let mut rx = operator.status();
    let got = match tokio::time::timeout(wait, rx.wait_for(pred)).await {
        Ok(Ok(s)) => Some(s.clone()),
        _ => None,
    };
    got.unwrap_or_else(|| {
        panic!("the DHCPv4 client did not get to {what} within {wait:?}; it is at {:?}", *operator.status().borrow())
    })
}

fn only_operator(started: &Started) -> Arc<Dhcp4Operator> {
    let started = started.lock().unwrap();
    assert_eq!(started.len(), 1, "one DHCPv4 client on a");
    Arc::clone(&started[0])
}

/// The configuration's static 10.9.0.77/24 on `a` beats the same address leased by DHCP,
/// in the kernel: while it is configured the address carries the static metric (0) for its
/// prefix route, not the lease's 1024; configured away again (DHCP still on), the lease's
/// address is the one in force, with the lease's metric — the same client and lease
/// throughout, never restarted. Each change of hands sets the metric in place: the lease's
/// default route through the address is never dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_address_beats_the_same_leased_one_and_removing_it_brings_the_lease_back() {
    let (node, peer) = wire();
    let dnsmasq = Dnsmasq::start(&peer, &[]);
    let kernel = Kernel::new(&node);
    let (h, started) = node_pipeline(&node);

    // DHCP only: the lease's address, metric 1024, and its default route.
    configure(&h, DHCP);
    let seen = kernel
        .eventually("the leased address and default route", |k| {
            k.address(LEASED).is_some_and(|a| a.priority == 1024) && k.has_default("10.9.0.1", 1024)
        })
        .await;
    assert_eq!(seen.global4(), [LEASED]);
    dnsmasq.logged("DHCPACK(b)", 1).await;
    let lease = h.state().find::<AddressSpec>(NAMESPACE, "a/10.9.0.77/24").unwrap().unwrap();
    assert_eq!((lease.spec().config_layer, lease.spec().priority), (ConfigLayer::Operator, 1024));

    // The same address configured statically, DHCP kept: the configuration wins.
    configure(&h, "      - interface: a\n        dhcp: true\n        addresses: [10.9.0.77/24]\n");
    // Only the address's metric changes, in place: it is never off the link, so the
    // lease's default route through it is there the moment the new metric is.
    let seen = kernel.eventually("the static address", |k| k.address(LEASED).is_some_and(|a| a.priority == 0)).await;
    assert!(seen.has_default("10.9.0.1", 1024), "the lease's default route kept: {:?}", seen.defaults4());
    assert_eq!(seen.global4(), [LEASED], "one address, not two");
    let merged = h
        .assert_eventually::<AddressSpec, _>(NAMESPACE, "a/10.9.0.77/24", "the configuration's address", |r| {
            r.is_some_and(|r| r.spec().config_layer == ConfigLayer::MachineConfiguration)
        })
        .await
        .unwrap();
    assert_eq!(merged.spec().priority, 0);

    // The static address configured away: the lease's is back in the kernel.
    configure(&h, DHCP);
    let seen =
        kernel.eventually("the leased address again", |k| k.address(LEASED).is_some_and(|a| a.priority == 1024)).await;
    assert!(seen.has_default("10.9.0.1", 1024), "the lease's default route kept: {:?}", seen.defaults4());
    assert_eq!(seen.global4(), [LEASED]);
    h.assert_eventually::<AddressSpec, _>(NAMESPACE, "a/10.9.0.77/24", "the lease's address merged", |r| {
        r.is_some_and(|r| r.spec().config_layer == ConfigLayer::Operator)
    })
    .await;
    let operator = only_operator(&started);
    assert_eq!(operator.status().borrow().acks, 1, "one lease throughout: {:?}", *operator.status().borrow());
    assert_eq!(started.lock().unwrap().len(), 1, "the client never restarted");
    h.stop().await;
}

/// Talos #8146: a link switched from DHCP to a static address keeps nothing of its lease in
/// the kernel — not the leased address, not the lease's default route — while the static
/// address and the configuration's own default route (another gateway and metric) are
/// there. The client released its lease with the server. Switched back, the static address
/// and route go and a new client's lease is in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_from_dhcp_to_static_leaves_no_lease_behind() {
    let (node, peer) = wire();
    let dnsmasq = Dnsmasq::start(&peer, &[]);
    let kernel = Kernel::new(&node);
    let (h, started) = node_pipeline(&node);

    configure(&h, DHCP);
    kernel
        .eventually("the lease in the kernel", |k| k.address(LEASED).is_some() && k.has_default("10.9.0.1", 1024))
        .await;
    let operator = only_operator(&started);

    configure(
        &h,
        "      - interface: a\n        dhcp: false\n        addresses: [10.9.0.5/24]\n        routes:\n\
         \x20         - network: 0.0.0.0/0\n            gateway: 10.9.0.254\n            metric: 100\n",
    );
    let seen = kernel
        .eventually("only the static address and route", |k| {
            k.global4() == ["10.9.0.5/24"] && k.defaults4() == [("10.9.0.254".parse().unwrap(), 100)]
        })
        .await;
    assert!(seen.address(LEASED).is_none());
    dnsmasq.logged("DHCPRELEASE(b)", 1).await;
    status_until(&operator, "stopped", WAIT, |s| s.state == "stopped" && s.releases == 1).await;
    h.assert_list::<OperatorSpec, _>(NAMESPACE, "no operator", |l| l.is_empty()).await;
    h.assert_list::<RouteSpec, _>(NAMESPACE, "no lease route", |l| {
        l.iter().all(|r| r.spec().config_layer != ConfigLayer::Operator)
    })
    .await;
    // The client is stopped and nothing of it is wanted: the kernel stays as it is.
    let seen = kernel.now().await;
    assert_eq!(seen.global4(), ["10.9.0.5/24"]);
    assert_eq!(seen.defaults4(), [("10.9.0.254".parse().unwrap(), 100)]);

    // And back to DHCP: the static address and route go, a new client's lease comes.
    configure(&h, DHCP);
    kernel
        .eventually("only the lease", |k| {
            k.global4() == [LEASED] && k.defaults4() == [("10.9.0.1".parse().unwrap(), 1024)]
        })
        .await;
    assert_eq!(started.lock().unwrap().len(), 2, "a new client for the new operator");
    h.stop().await;
}

/// A leased address deleted behind machined's back comes back with its default route, and
/// so does the default route deleted alone.
/// A DHCP link taken down and up behind machined's back gets its leased address and
/// default route back: the kernel drops every route over a link that goes down, and whether the client merely kept its lease or was stopped with the link and leased
/// again, the address and the lease's default route are in the kernel once the link is up.
/// Taken down and left down, the link is brought up again by its spec, and the same holds.
/// Its carrier lost (the peer's end down), the lease is given up, and with the carrier
/// back a fresh one is acquired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_that_flaps_gets_its_lease_and_default_route_back() {
    let (node, peer) = wire();
    let dnsmasq = Dnsmasq::start(&peer, &[]);
    let kernel = Kernel::new(&node);
    let (h, _started) = node_pipeline(&node);

    configure(&h, DHCP);
    kernel
        .eventually("the lease in the kernel", |k| k.address(LEASED).is_some() && k.has_default("10.9.0.1", 1024))
        .await;

    // The leased address deleted behind machined's back (the kernel takes the default
    // route through it along): both are put back.
    ip(&node, &["addr", "del", LEASED, "dev", "a"]);
    kernel
        .eventually("the leased address back", |k| k.address(LEASED).is_some() && k.has_default("10.9.0.1", 1024))
        .await;
    ip(&node, &["route", "del", "default", "via", "10.9.0.1"]);
    kernel.eventually("the lease's default route back", |k| k.has_default("10.9.0.1", 1024)).await;

    // Down and up in one go: the kernel flushes every route over the link as it goes down
    // and restores none as it comes up, so a default route afterwards is one put back.
    // (Looking in between would race the controllers, which may be quicker than the test.)
    let batch = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(batch.path(), "link set dev a down\nlink set dev a up\n").unwrap();
    ip(&node, &["-batch", batch.path().to_str().unwrap()]);
    kernel
        .eventually("the lease back after the flap", |k| k.address(LEASED).is_some() && k.has_default("10.9.0.1", 1024))
        .await;
    h.assert_eventually::<LinkStatus, _>(NAMESPACE, "a", "a up", |r| r.is_some_and(|r| r.spec().link_state)).await;

    // Taken down and left down: the link's spec wants it up, and it comes back up with
    // its lease and route.
    ip(&node, &["link", "set", "dev", "a", "down"]);
    kernel
        .eventually("a up again, with its lease", |k| k.address(LEASED).is_some() && k.has_default("10.9.0.1", 1024))
        .await;
    dnsmasq.logged("DHCPACK(b)", 1).await;

    // The cable pulled: the peer's end down, `a` without carrier. The client, which needs
    // its link up, is stopped and its lease goes from the kernel; with the carrier back it
    // discovers again and the lease is back.
    let discovers = dnsmasq.count("DHCPDISCOVER(b)");
    ip(&peer, &["link", "set", "dev", "b", "down"]);
    kernel.eventually("the lease gone with the carrier", |k| k.address(LEASED).is_none()).await;
    ip(&peer, &["link", "set", "dev", "b", "up"]);
    kernel
        .eventually("the lease back with the carrier", |k| {
            k.address(LEASED).is_some() && k.has_default("10.9.0.1", 1024)
        })
        .await;
    dnsmasq.logged("DHCPDISCOVER(b)", discovers + 1).await;
    h.stop().await;
}

/// On a statically configured link, an address and then a route deleted behind machined's
/// back with `ip` come back; so does the default route the kernel dropped with the address.
/// A flap, which flushes the link's routes and its IPv6 address, is repaired too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_and_a_route_deleted_behind_its_back_come_back() {
    let (node, _peer) = wire();
    let kernel = Kernel::new(&node);
    let (h, _started) = node_pipeline(&node);
    configure(
        &h,
        "      - interface: a\n        addresses: [10.9.0.5/24, fd00:9::5/64]\n        routes:\n\
         \x20         - network: 0.0.0.0/0\n            gateway: 10.9.0.1\n\
         \x20         - network: 172.16.0.0/12\n            gateway: 10.9.0.254\n            metric: 50\n",
    );
    let has_172 = |k: &Seen| {
        k.routes
            .iter()
            .any(|r| r.destination.to_string() == "172.16.0.0/12" && r.gateway == Some("10.9.0.254".parse().unwrap()))
    };
    let configured = |k: &Seen| k.address("10.9.0.5/24").is_some() && k.has_default("10.9.0.1", 1024) && has_172(k);
    kernel.eventually("the configured address and routes", configured).await;

    // Each `ip … del` succeeds only if what it deletes was there; looking at the kernel
    // afterwards would race the controllers putting it back.
    ip(&node, &["addr", "del", "10.9.0.5/24", "dev", "a"]);
    kernel.eventually("the address and its routes back", configured).await;

    ip(&node, &["route", "del", "default", "via", "10.9.0.1"]);
    ip(&node, &["route", "del", "172.16.0.0/12"]);
    kernel.eventually("the routes back", configured).await;

    // A flap: the kernel flushes the link's IPv6 addresses as it goes down (and its routes),
    // and keeps its IPv4 ones; everything configured comes back.
    let with_v6 = |k: &Seen| configured(k) && k.address("fd00:9::5/64").is_some();
    kernel.eventually("the IPv6 address", with_v6).await;
    let batch = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(batch.path(), "link set dev a down\nlink set dev a up\n").unwrap();
    ip(&node, &["-batch", batch.path().to_str().unwrap()]);
    kernel.eventually("all of it back after a flap", with_v6).await;
    h.stop().await;
}

/// A lease that expires is given up and a fresh one acquired. dnsmasq gives no lease
/// shorter than two minutes (it raises a shorter range, and overrides option 51 with the
/// range's time), and the client has no clock to drive from a test, so the expiry here is
/// real: a 2-minute lease with T1 5 s and T2 8 s, its server killed once it is bound. The
/// client renews and rebinds unanswered, and at the lease's end — not before — the leased
/// address and its default route leave the kernel. dnsmasq is then started again with an
/// empty lease file, and the client, discovering again, gets a fresh lease (a new DISCOVER
/// to a server that remembers nothing) that puts the address and route back. This test
/// takes over two minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_given_up_and_a_fresh_one_acquired() {
    const LEASE: Duration = Duration::from_secs(120);
    let (node, peer) = wire();
    let mut dnsmasq = Dnsmasq::start(&peer, &["--dhcp-option=option:T1,5", "--dhcp-option=option:T2,8"]);
    let kernel = Kernel::new(&node);
    let (h, started) = node_pipeline(&node);
    configure(&h, DHCP);
    let leased = |k: &Seen| k.address(LEASED).is_some() && k.has_default("10.9.0.1", 1024);
    kernel.eventually("the lease in the kernel", leased).await;
    let operator = only_operator(&started);
    status_until(&operator, "bound", WAIT, |s| s.state == "bound" && s.acks == 1).await;
    let bound_at = tokio::time::Instant::now();
    dnsmasq.stop();

    // Unanswered, the client renews, then rebinds; the lease stands meanwhile.
    status_until(&operator, "rebinding", WAIT, |s| s.state == "rebinding").await;
    assert!(leased(&kernel.now().await), "the lease stands until it expires");
    // At expiry, nothing of it is left in the kernel.
    kernel
        .until("the expired lease gone", LEASE + WAIT, |k| {
            k.address(LEASED).is_none() && k.defaults4().is_empty() && k.global4().is_empty()
        })
        .await;
    let held = bound_at.elapsed();
    assert!(held >= LEASE - Duration::from_secs(2), "gone only at expiry, not after {held:?}");
    let status = operator.status().borrow().clone();
    assert_eq!((status.address, status.acks), (None, 1), "{status:?}");

    // A server again, which remembers nothing: a fresh lease from a new discovery.
    dnsmasq.restart_forgetting();
    kernel.eventually("a fresh lease in the kernel", leased).await;
    dnsmasq.logged("DHCPDISCOVER(b)", 1).await;
    dnsmasq.logged("DHCPACK(b)", 1).await;
    let status = status_until(&operator, "bound again", WAIT, |s| s.state == "bound" && s.acks == 2).await;
    assert_eq!(status.address, Some("10.9.0.77".parse().unwrap()));
    assert_eq!(started.lock().unwrap().len(), 1, "the same client throughout");
    h.stop().await;
}

/// The lease's route metric changed in the configuration (`dhcpOptions.routeMetric`): the
/// client is restarted with it and the kernel has the lease's default route at the new
/// metric only — none left behind at the old one — and the address once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_dhcp_route_metric_leaves_no_route_at_the_old_one() {
    let (node, peer) = wire();
    let _dnsmasq = Dnsmasq::start(&peer, &[]);
    let kernel = Kernel::new(&node);
    let (h, started) = node_pipeline(&node);
    configure(&h, DHCP);
    kernel
        .eventually("the lease in the kernel", |k| k.address(LEASED).is_some() && k.has_default("10.9.0.1", 1024))
        .await;

    configure(&h, "      - interface: a\n        dhcp: true\n        dhcpOptions:\n          routeMetric: 2048\n");
    let seen = kernel
        .eventually("only the new metric", |k| {
            k.defaults4() == [("10.9.0.1".parse().unwrap(), 2048)]
                && k.address(LEASED).is_some_and(|a| a.priority == 2048)
        })
        .await;
    assert_eq!(seen.global4(), [LEASED]);
    assert_eq!(started.lock().unwrap().len(), 2, "the client restarted with the new metric");
    h.stop().await;
}

/// DHCPv6 from the configuration (`dhcpOptions.ipv6`): the IA_NA address dnsmasq leases is
/// in the kernel, and after a flap — which flushes every IPv6 address of the link, the
/// link-local one the client speaks from included — it is there again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dhcpv6_address_flushed_by_a_flap_comes_back() {
    let (node, peer) = wire();
    ip(&peer, &["addr", "add", "fd00:9::1/64", "dev", "b", "nodad"]);
    let _dnsmasq = Dnsmasq::start(&peer, &["--dhcp-range=fd00:9::100,fd00:9::1ff,64,2m"]);
    let kernel = Kernel::new(&node);
    let (h, _started) = node_pipeline(&node);
    configure(&h, "      - interface: a\n        dhcp: true\n        dhcpOptions:\n          ipv6: true\n");
    let leased6 = |k: &Seen| {
        k.addresses
            .iter()
            .find(|a| {
                a.prefix.bits() == 128
                    && matches!(a.prefix.addr(), IpAddr::V6(v6) if v6.segments()[..7] == [0xfd00, 9, 0, 0, 0, 0, 0]
                    && (0x100..=0x1ff).contains(&v6.segments()[7]))
            })
            .map(|a| a.prefix)
    };
    let seen = kernel
        .eventually("the IA_NA address and the IPv4 lease", |k| leased6(k).is_some() && k.address(LEASED).is_some())
        .await;
    let address = leased6(&seen).unwrap();

    let batch = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(batch.path(), "link set dev a down\nlink set dev a up\n").unwrap();
    ip(&node, &["-batch", batch.path().to_str().unwrap()]);
    kernel
        .eventually("an IA_NA address back after the flap", |k| leased6(k).is_some() && k.has_default("10.9.0.1", 1024))
        .await;
    let back = leased6(&kernel.now().await).unwrap();
    assert_eq!(back, address, "the same address, which dnsmasq holds for the client");
    h.stop().await;
}

/// Switched from DHCP to a static address that is the lease's own: the client is stopped
/// and releases its lease (which takes its offer away), yet the address is in the kernel —
/// now the configuration's, at the static metric (re-added for that, as any drifted
/// address is) — and the lease's default route is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_to_the_leases_own_address_keeps_it() {
    let (node, peer) = wire();
    let dnsmasq = Dnsmasq::start(&peer, &[]);
    let kernel = Kernel::new(&node);
    let (h, started) = node_pipeline(&node);
    configure(&h, DHCP);
    kernel.eventually("the lease in the kernel", |k| k.address(LEASED).is_some_and(|a| a.priority == 1024)).await;
    let operator = only_operator(&started);

    configure(&h, "      - interface: a\n        addresses: [10.9.0.77/24]\n");
    dnsmasq.logged("DHCPRELEASE(b)", 1).await;
    status_until(&operator, "stopped", WAIT, |s| s.state == "stopped").await;
    let seen = kernel
        .eventually("the static address, no lease route", |k| {
            k.address(LEASED).is_some_and(|a| a.priority == 0) && k.defaults4().is_empty()
        })
        .await;
    assert_eq!(seen.global4(), [LEASED]);
    h.assert_list::<OperatorSpec, _>(NAMESPACE, "no operator", |l| l.is_empty()).await;
    h.assert_eventually::<AddressSpec, _>(NAMESPACE, "a/10.9.0.77/24", "the configuration's", |r| {
        r.is_some_and(|r| r.spec().config_layer == ConfigLayer::MachineConfiguration)
    })
    .await;
    h.stop().await;
}

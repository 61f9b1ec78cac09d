//! The DHCP operators against a real server: dnsmasq in a fresh network namespace on one
//! end of a veth, the operator pipeline in another on the other end. An OperatorSpec is
//! seeded as a candidate; the merge, OperatorSpecController, the merges of what the lease
//! offers, AddressSpecController and the status controllers carry it to the kernel and back.
//! The route spec controller is not part of this pipeline: routes are asserted as merged
//! RouteSpecs. Waits are driven by watches (resources, the client's status, dnsmasq's log),
//! each with a timeout. Needs root and dnsmasq; without either the tests fail loudly.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use talosbox::controllers::network::{
    AddressSpecController, AddressStatusController, LinkStatusController, NetworkTarget, OperatorFactory,
    OperatorSpecController, merge_controllers,
};
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::netns::NetNs;
use talosbox::network::dhcp4::{Dhcp4Operator, Dhcp4Status};
use talosbox::network::dhcp6::{Dhcp6Operator, Dhcp6Status};
use talosbox::network::operator::Operator;
use talosbox::resources::network::{
    AddressSpec, AddressStatus, CONFIG_NAMESPACE, ClientIdentifier, ConfigLayer, Dhcp4OperatorSpec, Dhcp6OperatorSpec,
    Family, LinkSpec, NAMESPACE, Operator as OperatorKind, OperatorSpec, ResolverSpec, RouteSpec, TimeServerSpec,
    layered_id,
};

const WAIT: Duration = Duration::from_secs(30);

fn fresh_ns() -> NetNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "network_dhcp tests need root (network namespaces, DHCP ports); run them as root as CI does"
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

/// A path `ip … netns` takes for a namespace held only by a descriptor of this process.
fn ns_path(ns: &NetNs) -> String {
    format!("/proc/{}/fd/{}", std::process::id(), ns.as_fd().as_raw_fd())
}

/// The two ends: `a` in the client namespace, `b` (10.9.0.1/24, fd00:9::1/64) in the
/// server's.
fn wire() -> (NetNs, NetNs) {
    let (client, server) = (fresh_ns(), fresh_ns());
    ip(&client, &["link", "add", "name", "a", "type", "veth", "peer", "name", "b"]);
    ip(&client, &["link", "set", "dev", "b", "netns", &ns_path(&server)]);
    ip(&client, &["link", "set", "dev", "a", "up"]);
    ip(&server, &["link", "set", "dev", "lo", "up"]);
    ip(&server, &["addr", "add", "10.9.0.1/24", "dev", "b"]);
    ip(&server, &["addr", "add", "fd00:9::1/64", "dev", "b", "nodad"]);
    ip(&server, &["link", "set", "dev", "b", "up"]);
    (client, server)
}

/// dnsmasq serving DHCP on `b`, its log (stderr) gathered line by line; killed on drop,
/// however the test ends.
struct Dnsmasq {
    child: Child,
    log: watch::Receiver<Vec<String>>,
    server: NetNs,
    args: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    fn start(server: &NetNs, extra: &[&str]) -> Dnsmasq {
        assert!(
            std::path::Path::new("/usr/sbin/dnsmasq").exists(),
            "network_dhcp tests need dnsmasq (apt-get install dnsmasq-base)"
        );
        let dir = tempfile::tempdir().unwrap();
        let leases = dir.path().join("leases");
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
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--dhcp-leasefile={}", leases.display()));
        args.extend(extra.iter().map(|s| s.to_string()));
        let (child, log) = Self::spawn(server, &args);
        Dnsmasq { child, log, server: server.clone(), args, _dir: dir }
    }

    /// Stops it (its lease file stays).
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again with the same arguments and lease file, and a fresh log.
    fn restart(&mut self) {
        self.stop();
        (self.child, self.log) = Self::spawn(&self.server, &self.args);
    }

    fn spawn(server: &NetNs, args: &[String]) -> (Child, watch::Receiver<Vec<String>>) {
        let mut child = server
            .run(|| {
                Command::new("/usr/sbin/dnsmasq")
                    .args(args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
            })
            .expect("entering the server namespace")
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

    fn count(lines: &[String], what: &str) -> usize {
        lines.iter().filter(|l| l.contains(what)).count()
    }

    /// Waits until dnsmasq has logged `what` at least `n` times.
    async fn logged(&self, what: &str, n: usize) {
        let mut log = self.log.clone();
        let wait = log.wait_for(|lines| Self::count(lines, what) >= n);
        match tokio::time::timeout(WAIT, wait).await {
            Ok(Ok(_)) => {}
            _ => panic!(
                "dnsmasq did not log {what:?} {n} times within {WAIT:?}; its log:\n{}",
                self.log.borrow().join("\n")
            ),
        }
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The operators a pipeline started, for the test to watch.
#[derive(Default)]
struct Started {
    v4: Mutex<Vec<Arc<Dhcp4Operator>>>,
    v6: Mutex<Vec<Arc<Dhcp6Operator>>>,
}

/// The pipeline in `client`, with the operators it starts handed to the test.
fn pipeline(client: &NetNs) -> (Vec<Box<dyn Controller>>, Arc<Started>) {
    let target = NetworkTarget::Namespace(client.clone());
    let started: Arc<Started> = Arc::default();
    let made = Arc::clone(&started);
    let netns = client.clone();
    let factory: OperatorFactory = Box::new(move |spec: &OperatorSpec| -> Option<Arc<dyn Operator>> {
        let netns = Some(netns.clone());
        match spec.operator {
            OperatorKind::Dhcp4 => {
                let operator = Arc::new(Dhcp4Operator::new(netns, &spec.link_name, spec.dhcp4.clone()));
                made.v4.lock().unwrap().push(Arc::clone(&operator));
                Some(operator)
            }
            OperatorKind::Dhcp6 => {
                let operator = Arc::new(Dhcp6Operator::new(netns, &spec.link_name, spec.dhcp6.clone()));
                made.v6.lock().unwrap().push(Arc::clone(&operator));
                Some(operator)
            }
            OperatorKind::Vip => None,
        }
    });
    let mut controllers: Vec<Box<dyn Controller>> = merge_controllers();
    controllers.push(Box::new(OperatorSpecController::with_factory(factory)));
    controllers.push(Box::new(AddressSpecController::new(target.clone())));
    controllers.push(Box::new(AddressStatusController::new(target.clone())));
    controllers.push(Box::new(LinkStatusController::new(target)));
    (controllers, started)
}

async fn status_until(operator: &Dhcp4Operator, what: &str, pred: impl FnMut(&Dhcp4Status) -> bool) -> Dhcp4Status {
    let mut rx = operator.status();
    let got = match tokio::time::timeout(WAIT, rx.wait_for(pred)).await {
        Ok(Ok(s)) => Some(s.clone()),
        _ => None,
    };
    got.unwrap_or_else(|| {
        panic!("the DHCPv4 client did not get to {what} within {WAIT:?}; it is at {:?}", *operator.status().borrow())
    })
}

fn dhcp4(link: &str) -> OperatorSpec {
    OperatorSpec {
        operator: OperatorKind::Dhcp4,
        link_name: link.into(),
        require_up: true,
        dhcp4: Dhcp4OperatorSpec { route_metric: 1024, ..Default::default() },
        config_layer: ConfigLayer::Default,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dhcp4_lease_reaches_the_kernel_renews_at_t1_and_is_released_on_stop() {
    let (client, server) = wire();
    let dnsmasq = Dnsmasq::start(
        &server,
        &[
            "--dhcp-range=10.9.0.50,10.9.0.99,255.255.255.0,2m",
            "--dhcp-option=option:router,10.9.0.1",
            "--dhcp-option=option:dns-server,10.9.0.1",
            "--dhcp-option=option:ntp-server,10.9.0.2",
            "--dhcp-option=option:mtu,1400",
            "--dhcp-option=option:T1,5",
            "--domain=talosbox.test",
        ],
    );
    let (controllers, started) = pipeline(&client);
    let h = Harness::start(controllers).unwrap().with_timeout(WAIT);
    h.seed(CONFIG_NAMESPACE, &layered_id(ConfigLayer::Default, "dhcp4/a"), dhcp4("a")).unwrap();

    // The lease: an address on `a` in the kernel, from dnsmasq's range.
    let statuses = h
        .assert_list::<AddressStatus, _>(NAMESPACE, "a leased IPv4 address on a", |l| {
            l.iter().any(|s| s.spec().link_name == "a" && s.spec().family == Family::INET4)
        })
        .await;
    let leased = statuses.iter().find(|s| s.spec().link_name == "a" && s.spec().family == Family::INET4).unwrap();
    let address = leased.spec().address;
    assert_eq!(address.bits(), 24);
    let IpAddr::V4(v4) = address.addr() else { panic!("not IPv4") };
    assert!((50..=99).contains(&v4.octets()[3]) && v4.octets()[..3] == [10, 9, 0], "{address} from the range");
    assert!(ip(&client, &["-o", "addr", "show", "dev", "a"]).contains(&format!("inet {address}")));
    dnsmasq.logged("DHCPACK(b)", 1).await;

    // The merged specs carry what dnsmasq said, at the operator layer.
    let merged = h.state().find::<AddressSpec>(NAMESPACE, &format!("a/{address}")).unwrap().expect("merged address");
    assert_eq!((merged.spec().config_layer, merged.spec().priority), (ConfigLayer::Operator, 1024));
    let candidate = format!("dhcp4/a/a/{address}");
    assert!(h.state().find::<AddressSpec>(CONFIG_NAMESPACE, &candidate).unwrap().is_some(), "candidate {candidate}");
    let route = h
        .assert_eventually::<RouteSpec, _>(NAMESPACE, "inet4/10.9.0.1//1024", "the default route", |r| r.is_some())
        .await
        .unwrap();
    let route = route.spec();
    assert_eq!((route.destination, route.gateway), (None, Some("10.9.0.1".parse().unwrap())));
    assert_eq!((route.out_link_name.as_str(), route.source), ("a", Some(address.addr())));
    assert_eq!(route.config_layer, ConfigLayer::Operator);
    let resolvers = h
        .assert_eventually::<ResolverSpec, _>(NAMESPACE, ResolverSpec::ID, "dnsmasq's DNS", |r| {
            r.is_some_and(|r| r.spec().dns_servers.contains(&"10.9.0.1".parse().unwrap()))
        })
        .await
        .unwrap();
    assert_eq!(resolvers.spec().search_domains, ["talosbox.test"]);
    h.assert_eventually::<TimeServerSpec, _>(NAMESPACE, TimeServerSpec::ID, "dnsmasq's NTP", |r| {
        r.is_some_and(|r| r.spec().time_servers == ["10.9.0.2"])
    })
    .await;
    h.assert_eventually::<LinkSpec, _>(NAMESPACE, "a", "the lease's MTU", |r| r.is_some_and(|r| r.spec().mtu == 1400))
        .await;

    // Renewal at T1 (5 s): a second REQUEST/ACK, unicast, the same address kept.
    let operator = Arc::clone(&started.v4.lock().unwrap()[0]);
    let renewed = status_until(&operator, "a renewed lease", |s| s.acks >= 2).await;
    assert_eq!(renewed.address.map(IpAddr::V4), Some(address.addr()));
    dnsmasq.logged("DHCPACK(b)", 2).await;
    let log = dnsmasq.log.borrow().clone();
    assert_eq!(Dnsmasq::count(&log, "DHCPDISCOVER(b)"), 1, "renewed, not discovered again:\n{}", log.join("\n"));
    // OFFER and the first ACK went broadcast, as asked; the renewal named its address in
    // ciaddr, so its ACK came unicast.
    assert_eq!(Dnsmasq::count(&log, "broadcast response"), 2, "{}", log.join("\n"));

    // Stopping the operator releases the lease, and its address leaves the kernel.
    h.unseed::<OperatorSpec>(CONFIG_NAMESPACE, &layered_id(ConfigLayer::Default, "dhcp4/a")).unwrap();
    dnsmasq.logged("DHCPRELEASE(b)", 1).await;
    status_until(&operator, "stopped", |s| s.state == "stopped" && s.releases == 1).await;
    h.assert_absent::<AddressSpec>(NAMESPACE, &format!("a/{address}")).await;
    h.assert_absent::<RouteSpec>(NAMESPACE, "inet4/10.9.0.1//1024").await;
    h.assert_absent::<AddressStatus>(NAMESPACE, &format!("a/{address}")).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dhcp6_gets_an_ia_na_address_and_dns_renews_at_t1_and_releases_on_stop() {
    let (client, server) = wire();
    let dnsmasq = Dnsmasq::start(
        &server,
        &["--dhcp-range=fd00:9::100,fd00:9::1ff,64,2m", "--dhcp-option=option6:dns-server,[fd00:9::1]"],
    );
    let (controllers, started) = pipeline(&client);
    let h = Harness::start(controllers).unwrap().with_timeout(WAIT);
    let spec = OperatorSpec {
        operator: OperatorKind::Dhcp6,
        link_name: "a".into(),
        require_up: true,
        dhcp6: Dhcp6OperatorSpec { route_metric: 1024, ..Default::default() },
        config_layer: ConfigLayer::Default,
        ..Default::default()
    };
    h.seed(CONFIG_NAMESPACE, &layered_id(ConfigLayer::Default, "dhcp6/a"), spec).unwrap();

    // The IA_NA address, a /128 from dnsmasq's range, on the link in the kernel. The client
    // first waited for the link-local address to pass DAD: it had no source address before.
    let in_range = |s: &AddressStatus| {
        s.link_name == "a"
            && s.address.bits() == 128
            && matches!(s.address.addr(), IpAddr::V6(v6) if v6.segments()[..7] == [0xfd00, 9, 0, 0, 0, 0, 0]
                && (0x100..=0x1ff).contains(&v6.segments()[7]))
    };
    let statuses = h
        .assert_list::<AddressStatus, _>(NAMESPACE, "the IA_NA address on a", |l| l.iter().any(|s| in_range(s.spec())))
        .await;
    let address = statuses.iter().find(|s| in_range(s.spec())).unwrap().spec().address;
    dnsmasq.logged("DHCPREPLY(b)", 1).await;
    let log = dnsmasq.log.borrow().clone();
    for exchange in ["DHCPSOLICIT(b)", "DHCPADVERTISE(b)", "DHCPREQUEST(b)"] {
        assert!(Dnsmasq::count(&log, exchange) >= 1, "no {exchange} in dnsmasq's log:\n{}", log.join("\n"));
    }
    let merged = h.state().find::<AddressSpec>(NAMESPACE, &format!("a/{address}")).unwrap().expect("merged address");
    assert_eq!((merged.spec().config_layer, merged.spec().family), (ConfigLayer::Operator, Family::INET6));
    h.assert_eventually::<ResolverSpec, _>(NAMESPACE, ResolverSpec::ID, "dnsmasq's IPv6 DNS", |r| {
        r.is_some_and(|r| r.spec().dns_servers.contains(&"fd00:9::1".parse().unwrap()))
    })
    .await;
    let operator = Arc::clone(&started.v6.lock().unwrap()[0]);
    let status = status6_until(&operator, "bound", WAIT, |s| s.state == "bound").await;
    assert_eq!(status.address.map(IpAddr::V6), Some(address.addr()));

    // Renewal at T1: dnsmasq's shortest lease is 2 minutes and it sets T1 to half of it, so
    // the client RENEWs to the server that granted the lease after a minute, and keeps it.
    // The status is published as each step lands: the second reply may be counted while the
    // state still says renewing, so wait for both.
    let renewed =
        status6_until(&operator, "a renewed lease", Duration::from_secs(100), |s| s.replies >= 2 && s.state == "bound")
            .await;
    assert_eq!((renewed.state, renewed.address.map(IpAddr::V6)), ("bound", Some(address.addr())));
    dnsmasq.logged("DHCPRENEW(b)", 1).await;
    dnsmasq.logged("DHCPREPLY(b)", 2).await;
    let log = dnsmasq.log.borrow().clone();
    assert_eq!(Dnsmasq::count(&log, "DHCPSOLICIT(b)"), 1, "renewed, not solicited again:\n{}", log.join("\n"));
    assert!(
        h.state().find::<AddressSpec>(NAMESPACE, &format!("a/{address}")).unwrap().is_some(),
        "kept through the renewal"
    );

    // Stopping releases the address with the server and takes it off the link.
    h.unseed::<OperatorSpec>(CONFIG_NAMESPACE, &layered_id(ConfigLayer::Default, "dhcp6/a")).unwrap();
    dnsmasq.logged("DHCPRELEASE(b)", 1).await;
    status6_until(&operator, "stopped", WAIT, |s| s.state == "stopped" && s.releases == 1).await;
    h.assert_absent::<AddressStatus>(NAMESPACE, &format!("a/{address}")).await;
    h.stop().await;
}

async fn status6_until(
    operator: &Dhcp6Operator,
    what: &str,
    wait: Duration,
    pred: impl FnMut(&Dhcp6Status) -> bool,
) -> Dhcp6Status {
    let mut rx = operator.status();
    let got = match tokio::time::timeout(wait, rx.wait_for(pred)).await {
        Ok(Ok(s)) => Some(s.clone()),
        _ => None,
    };
    got.unwrap_or_else(|| {
        panic!("the DHCPv6 client did not get to {what} within {wait:?}; it is at {:?}", *operator.status().borrow())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dhcp4_rebinds_at_t2_when_its_server_is_gone() {
    let (client, server) = wire();
    let mut dnsmasq = Dnsmasq::start(
        &server,
        &[
            "--dhcp-range=10.9.0.50,10.9.0.99,255.255.255.0,2m",
            "--dhcp-option=option:router,10.9.0.1",
            "--dhcp-option=option:T1,5",
            "--dhcp-option=option:T2,8",
        ],
    );
    let (controllers, started) = pipeline(&client);
    let h = Harness::start(controllers).unwrap().with_timeout(WAIT);
    h.seed(CONFIG_NAMESPACE, &layered_id(ConfigLayer::Default, "dhcp4/a"), dhcp4("a")).unwrap();
    // A lease: its address is merged into `network`.
    h.assert_list::<AddressSpec, _>(NAMESPACE, "the leased address", |l| l.iter().any(|a| a.spec().link_name == "a"))
        .await;
    let operator = Arc::clone(&started.v4.lock().unwrap()[0]);
    let first = status_until(&operator, "a first lease", |s| s.acks == 1).await;
    let leased = first.address.unwrap();

    // The server goes away: the unicast renewal at T1 gets no answer. A server is back
    // before T2, but the client asks it only at T2, by broadcast, and is bound again.
    dnsmasq.stop();
    status_until(&operator, "renewing", |s| s.state == "renewing").await;
    assert_eq!(operator.status().borrow().acks, 1, "nobody answered the renewal");
    dnsmasq.restart();
    let rebound = status_until(&operator, "bound again after rebinding", |s| s.acks == 2).await;
    assert_eq!((rebound.rebinds, rebound.address), (1, Some(leased)), "rebound, the same address kept");
    dnsmasq.logged("DHCPACK(b)", 1).await;
    let log = dnsmasq.log.borrow().clone();
    assert_eq!(Dnsmasq::count(&log, "DHCPDISCOVER(b)"), 0, "no new discovery:\n{}", log.join("\n"));
    // The lease never lapsed: its address stayed wanted throughout.
    assert!(h.state().find::<AddressSpec>(NAMESPACE, &format!("a/{leased}/24")).unwrap().is_some());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dhcp4_classless_routes_hostname_and_client_identifier() {
    let (client, server) = wire();
    ip(&client, &["link", "set", "dev", "a", "address", "02:00:00:00:09:01"]);
    let dnsmasq = Dnsmasq::start(
        &server,
        &[
            "--dhcp-range=10.9.0.50,10.9.0.99,255.255.255.0,2m",
            "--dhcp-option=option:router,10.9.0.1",
            // RFC 3442: the router option is to be ignored when these are present.
            "--dhcp-option=option:classless-static-route,172.16.0.0/12,10.9.0.254,0.0.0.0/0,10.9.0.2",
            "--dhcp-host=id:01:02:00:00:00:09:01,10.9.0.77,node1",
            "--domain=talosbox.test",
        ],
    );
    let (controllers, started) = pipeline(&client);
    let h = Harness::start(controllers).unwrap().with_timeout(WAIT);
    let mut spec = dhcp4("a");
    spec.dhcp4.client_identifier.client_identifier = ClientIdentifier::MAC;
    h.seed(CONFIG_NAMESPACE, &layered_id(ConfigLayer::Default, "dhcp4/a"), spec).unwrap();

    // The host entry is keyed by the client identifier (01 and the MAC): its address and
    // name come back only if the client sent it.
    h.assert_eventually::<AddressStatus, _>(NAMESPACE, "a/10.9.0.77/24", "the reserved address", |r| r.is_some()).await;
    let operator = Arc::clone(&started.v4.lock().unwrap()[0]);
    status_until(&operator, "bound", |s| s.acks >= 1).await;
    let leases = std::fs::read_to_string(dnsmasq._dir.path().join("leases")).unwrap();
    assert!(leases.contains("10.9.0.77 node1 01:02:00:00:00:09:01"), "dnsmasq's leases: {leases}");

    for (id, gateway) in [("inet4/10.9.0.254/172.16.0.0/12/1024", "10.9.0.254"), ("inet4/10.9.0.2//1024", "10.9.0.2")] {
        let route = h.assert_eventually::<RouteSpec, _>(NAMESPACE, id, "a classless route", |r| r.is_some()).await;
        assert_eq!(route.unwrap().spec().gateway, Some(gateway.parse().unwrap()));
    }
    let routes = h.state().list::<RouteSpec>(NAMESPACE);
    assert!(
        routes.iter().all(|r| r.spec().gateway != Some("10.9.0.1".parse().unwrap())),
        "the router option is ignored: {:?}",
        routes.iter().map(|r| r.id().to_string()).collect::<Vec<_>>()
    );
    let hostname = h
        .assert_eventually::<talosbox::resources::network::HostnameSpec, _>(NAMESPACE, "hostname", "the name", |r| {
            r.is_some()
        })
        .await
        .unwrap();
    assert_eq!((hostname.spec().hostname.as_str(), hostname.spec().domainname.as_str()), ("node1", "talosbox.test"));
    assert_eq!(hostname.spec().config_layer, ConfigLayer::Operator);
    h.stop().await;
}

//! Networking figures, talosbox's network controllers beside systemd-networkd given the same
//! configuration, each run in a fresh network namespace with one veth pair (`nb0`, its peer
//! `nb1`), both ends up before the clock starts:
//!
//! - converge N (1, 100, 1000): N static IPv4 addresses `10.100.x.y/16` on `nb0` and N routes
//!   `172.16.x.y/32 via 10.100.255.254` (metric 1024, protocol static, main table).
//!   talosbox: the clock starts before the controller runtime is built (registry, the merge
//!   controllers, LinkSpec-, AddressSpec- and RouteSpecController on a 2-worker tokio runtime,
//!   as machined runs them) and the N + N layered candidates (and a LinkSpec bringing `nb0` up)
//!   are seeded into `network-config` at the configuration layer; the merges carry them to
//!   `network` and the spec controllers to the kernel. networkd: its wrapper (`unshare -m`,
//!   the bind mount of its config, the tmpfs on `/run/systemd`, `ip netns exec`, `/sys`
//!   read-only) is made ready first, not counted (its cost is printed apart); the clock starts
//!   when it is told to exec `/lib/systemd/systemd-networkd`, with one `.network` file
//!   holding the same N `Address=` and N `[Route]` sections. Both clocks stop when the kernel holds every one of
//!   the N addresses on `nb0` and every one of the N routes (exact sets, gateway and metric
//!   checked), as seen by an observer polling the kernel from a thread of its own (a dump
//!   every max(1 ms, 3 × the dump's own time), so its resolution is a few ms at N = 1000 and
//!   the same for both).
//! - DHCPv4 lease: dnsmasq (started and ready, its log says so, before the clock) serves
//!   `10.200.0.100–199/24` on `nb1` in a second namespace. talosbox: from the runtime's start
//!   (merges, LinkSpec-, LinkStatus-, OperatorSpec-, AddressSpec- and RouteSpecController) and
//!   seeding a DHCPv4 OperatorSpec for `nb0` (and the LinkSpec); networkd: from its exec with
//!   `DHCP=ipv4`. Both until a leased `10.200.0.x` address is on `nb0`.
//!
//! Every run gets new namespaces (named `tbnb<pid>-…`, deleted on drop however the run
//! ends), checked empty before the clock starts; networkd and dnsmasq are killed by their
//! process group when their run ends, failed or not. After each networkd run the process is
//! checked to be networkd itself (its wrapper exec'd all the way), and after each converge
//! run the kernel is checked to hold exactly N of each, no more.
//!
//! `cargo bench --bench network --features test-harness` prints a table, then
//! `ROW<TAB>name<TAB>value<TAB>anchor<TAB>unit` lines for `tests/bench` (value: talosbox,
//! anchor: networkd, medians in ms). Needs root, `/lib/systemd/systemd-networkd` (Debian's
//! `systemd`), dnsmasq and `ip`. RUNS sets the runs per figure (default 3, the median is
//! shown); NS the address counts (default "1 100 1000"). Nothing here asserts a target: the
//! table shows the ratios beside them.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use talosbox::controllers::network::{
    AddressSpecController, LinkSpecController, LinkStatusController, NetworkTarget, OperatorSpecController,
    RouteSpecController, merge_controllers,
};
use talosbox::cosi::{Controller, Resource, ResourceSpec, Runtime, State};
use talosbox::kernel::netlink::{self as nl, Netlink};
use talosbox::kernel::netns::NetNs;
use talosbox::resources::network::{
    AddressSpec, CONFIG_NAMESPACE, ConfigLayer, Dhcp4OperatorSpec, Family, LinkSpec, Operator, OperatorSpec,
    RouteProtocol, RouteSpec, RouteType, RoutingTable, layered_id, operator_id,
};
use talosbox::types::Family as NlFamily;
use talosbox::types::IpPrefix;
use tokio_util::sync::CancellationToken;

const LINK: &str = "nb0";
const PEER: &str = "nb1";
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 100, 255, 254);
const METRIC: u32 = 1024;
const LAYER: ConfigLayer = ConfigLayer::MachineConfiguration;
/// A run that has not converged by then failed.
const LIMIT: Duration = Duration::from_secs(60);
const NETWORKD: &str = "/lib/systemd/systemd-networkd";
const DNSMASQ: &str = "/usr/sbin/dnsmasq";

type Outcome<T> = Result<T, String>;

/// Address i: 10.100.x.y/16, all on the one subnet the gateway is on.
fn address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 100, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// Route i: 172.16.x.y/32 via the gateway.
fn destination(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(172, 16, (i / 250) as u8, (i % 250 + 1) as u8)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn ip(args: &[&str]) -> Outcome<()> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("running ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// A named network namespace (`ip netns add`, which `ip netns exec` needs for networkd),
/// deleted on drop.
struct NamedNs {
    name: String,
    ns: NetNs,
}

impl NamedNs {
    /// An empty one with loopback up.
    fn bare(tag: &str) -> Outcome<NamedNs> {
        let name = format!("tbnb{}-{tag}", std::process::id());
        // Left over from a killed earlier run of this same process id: start clean.
        let _ = Command::new("ip").args(["netns", "del", &name]).stderr(Stdio::null()).status();
        ip(&["netns", "add", &name])?;
        // From here on, drop deletes it.
        let ns = NetNs::open(format!("/run/netns/{name}")).map_err(|e| format!("opening netns {name}: {e}"));
        let ns = match ns {
            Ok(ns) => NamedNs { name, ns },
            Err(e) => {
                let _ = Command::new("ip").args(["netns", "del", &name]).status();
                return Err(e);
            }
        };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// One with the veth pair, both ends up; the peer moved into `peer_ns` if given.
    fn with_veth(tag: &str, peer_ns: Option<&NamedNs>) -> Outcome<NamedNs> {
        let ns = NamedNs::bare(tag)?;
        ip(&["-n", &ns.name, "link", "add", LINK, "type", "veth", "peer", "name", PEER])?;
        match peer_ns {
            Some(peer) => {
                ip(&["-n", &ns.name, "link", "set", PEER, "netns", &peer.name])?;
                ip(&["-n", &peer.name, "link", "set", PEER, "up"])?;
            }
            None => ip(&["-n", &ns.name, "link", "set", PEER, "up"])?,
        }
        ip(&["-n", &ns.name, "link", "set", LINK, "up"])?;
        Ok(ns)
    }
}

impl Drop for NamedNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// What the kernel holds that the figures look at.
#[derive(Default)]
struct Snapshot {
    links: Vec<String>,
    /// IPv4 addresses on `nb0`.
    addresses: HashSet<(Ipv4Addr, u8)>,
    /// Destinations of IPv4 main-table routes via the gateway at the metric.
    routes: HashSet<Ipv4Addr>,
    /// Every IPv4 address but loopback's, and every IPv4 main-table route, for the fresh check.
    other_addresses: usize,
    main_routes: usize,
}

async fn snapshot(netlink: &Netlink, with_routes: bool) -> Outcome<Snapshot> {
    let links = netlink.links().await.map_err(|e| e.to_string())?;
    let index = links.iter().find(|l| l.name == LINK).map(|l| l.index);
    let mut s = Snapshot { links: links.into_iter().map(|l| l.name).collect(), ..Snapshot::default() };
    for a in netlink.addresses(Some(NlFamily::Inet4)).await.map_err(|e| e.to_string())? {
        let IpAddr::V4(v4) = a.prefix.addr() else { continue };
        if Some(a.link_index) == index {
            s.addresses.insert((v4, a.prefix.bits()));
        }
        if !v4.is_loopback() {
            s.other_addresses += 1;
        }
    }
    if with_routes {
        for r in netlink.routes(Some(NlFamily::Inet4)).await.map_err(|e| e.to_string())? {
            if r.table != nl::TABLE_MAIN {
                continue;
            }
            s.main_routes += 1;
            if let IpAddr::V4(dst) = r.destination.addr()
                && r.destination.bits() == 32
                && r.gateway == Some(IpAddr::V4(GATEWAY))
                && r.priority == METRIC
            {
                s.routes.insert(dst);
            }
        }
    }
    Ok(s)
}

/// Whether the kernel holds all N addresses and N routes.
fn converged(s: &Snapshot, n: usize) -> bool {
    (0..n).all(|i| s.addresses.contains(&(address(i), 16))) && (0..n).all(|i| s.routes.contains(&destination(i)))
}

fn leased(s: &Snapshot) -> bool {
    s.addresses.iter().any(|(a, len)| *len == 24 && a.octets()[..3] == [10, 200, 0])
}

/// Polls the kernel of a namespace from a thread of its own (so neither side's runtime runs
/// it) from `go` until `done` holds; reports when it first saw it, with the last snapshot.
struct Observer {
    go: mpsc::Sender<Instant>,
    thread: std::thread::JoinHandle<Outcome<(Instant, Snapshot)>>,
}

impl Observer {
    fn start(ns: &NetNs, with_routes: bool, done: impl Fn(&Snapshot) -> bool + Send + 'static) -> Outcome<Observer> {
        let ns = ns.clone();
        let (go, started) = mpsc::channel::<Instant>();
        let (ready_tx, ready) = mpsc::channel::<Outcome<()>>();
        let thread = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("observer runtime: {e}")));
                    return Err("no runtime".to_string());
                }
            };
            rt.block_on(async move {
                let netlink = match Netlink::connect_in(&ns) {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("observer netlink: {e}")));
                        return Err("no netlink".to_string());
                    }
                };
                let _ = ready_tx.send(Ok(()));
                let start = started.recv().map_err(|_| "the run ended before it began".to_string())?;
                loop {
                    let t0 = Instant::now();
                    let s = snapshot(&netlink, with_routes).await?;
                    let seen = Instant::now();
                    if done(&s) {
                        return Ok((seen, s));
                    }
                    if seen.duration_since(start) > LIMIT {
                        return Err(format!(
                            "not there within {LIMIT:?}: {} addresses on {LINK}, {} routes via the gateway",
                            s.addresses.len(),
                            s.routes.len()
                        ));
                    }
                    let pause = (seen - t0).mul_f64(3.0).max(Duration::from_millis(1));
                    tokio::time::sleep(pause).await;
                }
            })
        });
        ready.recv().map_err(|_| "the observer thread died".to_string())??;
        Ok(Observer { go, thread })
    }

    fn go(&self, start: Instant) {
        let _ = self.go.send(start);
    }

    fn wait(self) -> Outcome<(Instant, Snapshot)> {
        self.thread.join().map_err(|_| "the observer panicked".to_string())?
    }
}

/// A snapshot of `ns` right now, from a runtime of its own.
fn snapshot_now(ns: &NetNs, with_routes: bool) -> Outcome<Snapshot> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let netlink = Netlink::connect_in(ns).map_err(|e| e.to_string())?;
        snapshot(&netlink, with_routes).await
    })
}

/// Refuses to start the clock on a namespace holding anything but what the run set up.
fn assert_fresh(ns: &NamedNs, links: &[&str]) -> Outcome<()> {
    let s = snapshot_now(&ns.ns, true)?;
    let mut have = s.links.clone();
    have.sort();
    let mut want: Vec<String> = links.iter().map(|s| s.to_string()).collect();
    want.sort();
    if have != want || s.other_addresses != 0 || s.main_routes != 0 {
        return Err(format!(
            "namespace {} is not fresh: links {have:?}, {} IPv4 addresses, {} main-table routes",
            ns.name, s.other_addresses, s.main_routes
        ));
    }
    Ok(())
}

/// A process (and its process group) killed on drop, however the run ends.
struct Killed {
    child: Child,
    what: &'static str,
    log: PathBuf,
    stdin: Option<std::process::ChildStdin>,
}

impl Killed {
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// The command name of the process now (what it exec'd last).
    fn comm(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/comm", self.child.id())).unwrap_or_default().trim().to_string()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        // Spawned as the leader of its own process group: the group is it and whatever it
        // started, and nothing else.
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        if self.child.wait().is_err() {
            eprintln!("network bench: could not reap {} ({})", self.what, self.child.id());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A directory networkd (user systemd-network) can read, removed on drop.
struct ConfDir(PathBuf);

impl ConfDir {
    fn new(tag: &str, network: &str) -> Outcome<ConfDir> {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tbnb{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let conf = ConfDir(dir);
        let file = conf.0.join("10-nb0.network");
        std::fs::write(&file, network).map_err(|e| format!("writing {}: {e}", file.display()))?;
        for (path, mode) in [(&conf.0, 0o755), (&file, 0o644)] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("chmod {}: {e}", path.display()))?;
        }
        Ok(conf)
    }
}

impl Drop for ConfDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// networkd's wrapper (BUILD.md, "systemd-networkd as a side-by-side peer"): a private mount
/// namespace with `conf` over /etc/systemd/network and a tmpfs on /run/systemd, then `ip netns
/// exec` (its own sysfs of the namespace), /sys read-only so networkd does not wait for udev;
/// there it says "ready" and waits for a line on its stdin before it execs `program`. Every
/// step execs, so the child's pid ends up being `program`'s. Returns once it is ready.
fn networkd_wrapper(ns: &str, conf: &Path, program: &str, tag: &str) -> Outcome<Killed> {
    let script = format!(
        "set -e; mount --bind {conf} /etc/systemd/network; mount -t tmpfs tmpfs /run/systemd; \
         mkdir /run/systemd/netif; chown systemd-network:systemd-network /run/systemd/netif; \
         exec ip netns exec {ns} sh -c 'mount -o remount,ro /sys && echo ready && read go && exec {program}'",
        conf = conf.display()
    );
    let log = std::env::temp_dir().join(format!("tbnb{}-{tag}.log", std::process::id()));
    let err = std::fs::File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let mut child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .env("SYSTEMD_LOG_LEVEL", "info")
        .env("SYSTEMD_LOG_TARGET", "console")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting {program}: {e}"))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let mut killed = Killed { child, what: "systemd-networkd", log, stdin };
    let (tx, rx) = mpsc::channel();
    if let Some(stdout) = stdout {
        // Drains its stdout for as long as it lives, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(line) if line == "ready" => Ok(killed),
        _ => {
            let _ = killed.child.try_wait();
            Err(format!("networkd's wrapper did not get ready; its log:\n{}", killed.log_tail()))
        }
    }
}

impl Killed {
    /// Lets a ready wrapper exec its program; the clock's start, just before.
    fn go(&mut self) -> Outcome<Instant> {
        use std::io::Write;
        let start = Instant::now();
        let mut stdin = self.stdin.take().ok_or("the wrapper has no stdin")?;
        stdin.write_all(b"go\n").map_err(|e| format!("releasing the wrapper: {e}"))?;
        Ok(start)
    }
}

/// How long the wrapper alone takes to get ready (not counted in networkd's figures).
fn wrapper_cost() -> Outcome<Duration> {
    let ns = NamedNs::bare("wrap")?;
    let conf = ConfDir::new("wrap", "")?;
    let start = Instant::now();
    let mut w = networkd_wrapper(&ns.name, &conf.0, "/bin/true", "wrap")?;
    let took = start.elapsed();
    w.go()?;
    let status = w.child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("the wrapper failed: {}", w.log_tail()));
    }
    Ok(took)
}

/// After a run: networkd ran as itself (not stuck in its wrapper) and is still alive.
fn check_networkd(nd: &mut Killed) -> Outcome<()> {
    let comm = nd.comm();
    if !nd.alive() || comm != "systemd-network" {
        return Err(format!("networkd is not running as itself (comm {comm:?}); its log:\n{}", nd.log_tail()));
    }
    Ok(())
}

fn static_candidates(n: usize) -> (Vec<AddressSpec>, Vec<RouteSpec>) {
    let addresses = (0..n)
        .map(|i| {
            let prefix: IpPrefix = format!("{}/16", address(i)).parse().expect("a valid prefix");
            AddressSpec::static_address(LINK, prefix, LAYER)
        })
        .collect();
    let routes = (0..n)
        .map(|i| {
            let mut route = RouteSpec {
                family: Family::INET4,
                destination: Some(format!("{}/32", destination(i)).parse().expect("a valid prefix")),
                gateway: Some(IpAddr::V4(GATEWAY)),
                out_link_name: LINK.into(),
                table: RoutingTable::MAIN,
                priority: METRIC,
                route_type: RouteType::UNICAST,
                protocol: RouteProtocol::STATIC,
                config_layer: LAYER,
                ..RouteSpec::default()
            };
            route.normalize();
            route
        })
        .collect();
    (addresses, routes)
}

fn seed<T: ResourceSpec>(state: &State, id: &str, spec: T) -> Outcome<()> {
    state
        .create(Resource::new(CONFIG_NAMESPACE, layered_id(LAYER, id), spec), "")
        .map(|_| ())
        .map_err(|e| format!("seeding {id}: {e}"))
}

/// Runs talosbox's controllers (as machined does: a 2-worker runtime) on a fresh state,
/// after `seed_all` put the candidates in, until the observer is satisfied.
fn run_talosbox(
    controllers: impl FnOnce() -> Vec<Box<dyn Controller>> + Send,
    seed_all: impl FnOnce(&State) -> Outcome<()> + Send,
    observer: Observer,
) -> Outcome<(Duration, Snapshot)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async move {
        let start = Instant::now();
        observer.go(start);
        let registry = talosbox::resources::registry().map_err(|e| e.to_string())?;
        let state = State::in_memory();
        let mut runtime = Runtime::new(state.clone(), Arc::new(registry));
        for c in controllers() {
            runtime.register_boxed(c).map_err(|e| e.to_string())?;
        }
        let cancel = CancellationToken::new();
        let task = tokio::spawn(runtime.run(cancel.clone()));
        let seeded = seed_all(&state);
        let seen = tokio::task::spawn_blocking(move || observer.wait()).await.map_err(|e| e.to_string());
        cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        seeded?;
        let (at, s) = seen??;
        Ok((at - start, s))
    })
}

/// After a converge run: exactly N of each, nothing extra.
fn check_exact(s: &Snapshot, n: usize) -> Outcome<()> {
    let addresses = s.addresses.iter().filter(|(a, _)| a.octets()[..2] == [10, 100]).count();
    if addresses != n || s.routes.len() != n {
        return Err(format!("the kernel holds {addresses} addresses and {} routes, not {n} of each", s.routes.len()));
    }
    Ok(())
}

fn talosbox_static(n: usize) -> Outcome<Duration> {
    let ns = NamedNs::with_veth("tb", None)?;
    assert_fresh(&ns, &["lo", LINK, PEER])?;
    let target = NetworkTarget::Namespace(ns.ns.clone());
    let observer = Observer::start(&ns.ns, true, move |s| converged(s, n))?;
    let (took, s) = run_talosbox(
        move || {
            let mut c = merge_controllers();
            c.push(Box::new(LinkSpecController::new(target.clone())));
            c.push(Box::new(AddressSpecController::new(target.clone())));
            c.push(Box::new(RouteSpecController::new(target)));
            c
        },
        move |state| {
            seed(state, LINK, LinkSpec::up(LINK, LAYER))?;
            let (addresses, routes) = static_candidates(n);
            for a in addresses {
                seed(state, &a.id(), a)?;
            }
            for r in routes {
                seed(state, &r.id(), r)?;
            }
            Ok(())
        },
        observer,
    )?;
    check_exact(&s, n)?;
    Ok(took)
}

fn networkd_static(n: usize) -> Outcome<Duration> {
    let ns = NamedNs::with_veth("nd", None)?;
    assert_fresh(&ns, &["lo", LINK, PEER])?;
    let mut network =
        format!("[Match]\nName={LINK}\n\n[Network]\nLinkLocalAddressing=no\nIPv6AcceptRA=no\nKeepConfiguration=no\n");
    for i in 0..n {
        network += &format!("Address={}/16\n", address(i));
    }
    for i in 0..n {
        network += &format!("\n[Route]\nDestination={}/32\nGateway={GATEWAY}\nMetric={METRIC}\n", destination(i));
    }
    let conf = ConfDir::new("static", &network)?;
    let observer = Observer::start(&ns.ns, true, move |s| converged(s, n))?;
    let mut nd = networkd_wrapper(&ns.name, &conf.0, NETWORKD, "nd")?;
    let start = nd.go()?;
    observer.go(start);
    let (at, s) = observer.wait().map_err(|e| format!("{e}; networkd's log:\n{}", nd.log_tail()))?;
    check_networkd(&mut nd)?;
    check_exact(&s, n)?;
    Ok(at - start)
}

/// dnsmasq serving DHCPv4 on the peer in `server`, ready (its log says the range is served);
/// killed on drop.
fn dnsmasq(server: &NamedNs) -> Outcome<Killed> {
    ip(&["-n", &server.name, "addr", "add", "10.200.0.1/24", "dev", PEER])?;
    let leases = std::env::temp_dir().join(format!("tbnb{}-leases", std::process::id()));
    let _ = std::fs::remove_file(&leases);
    let mut child = server
        .ns
        .run(|| {
            Command::new(DNSMASQ)
                .args([
                    "--keep-in-foreground",
                    "--conf-file=/dev/null",
                    "--log-facility=-",
                    "--port=0",
                    "--no-resolv",
                    "--no-hosts",
                    "--no-ping",
                    "--user=root",
                    "--group=root",
                    "--pid-file=",
                    "--bind-interfaces",
                    "--except-interface=lo",
                    "--dhcp-authoritative",
                    "--dhcp-range=10.200.0.100,10.200.0.199,255.255.255.0,2m",
                ])
                .arg(format!("--interface={PEER}"))
                .arg(format!("--dhcp-leasefile={}", leases.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .process_group(0)
                .spawn()
        })
        .map_err(|e| format!("entering {}: {e}", server.name))?
        .map_err(|e| format!("starting dnsmasq: {e}"))?;
    let stderr = child.stderr.take();
    let killed = Killed { child, what: "dnsmasq", log: leases, stdin: None };
    let (tx, rx) = mpsc::channel();
    if let Some(stderr) = stderr {
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut log = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("DHCP, IP range") => return Ok(killed),
            Ok(line) => log.push(line),
            Err(_) => return Err(format!("dnsmasq did not say it serves DHCP; its log:\n{}", log.join("\n"))),
        }
    }
}

fn talosbox_dhcp() -> Outcome<Duration> {
    let server = NamedNs::bare("tbs")?;
    let ns = NamedNs::with_veth("tbd", Some(&server))?;
    assert_fresh(&ns, &["lo", LINK])?;
    let _dnsmasq = dnsmasq(&server)?;
    let target = NetworkTarget::Namespace(ns.ns.clone());
    let observer = Observer::start(&ns.ns, false, leased)?;
    let (took, _) = run_talosbox(
        move || {
            let mut c = merge_controllers();
            c.push(Box::new(LinkSpecController::new(target.clone())));
            c.push(Box::new(LinkStatusController::new(target.clone())));
            c.push(Box::new(OperatorSpecController::new(target.clone())));
            c.push(Box::new(AddressSpecController::new(target.clone())));
            c.push(Box::new(RouteSpecController::new(target)));
            c
        },
        move |state| {
            seed(state, LINK, LinkSpec::up(LINK, LAYER))?;
            let spec = OperatorSpec {
                operator: Operator::Dhcp4,
                link_name: LINK.into(),
                require_up: true,
                dhcp4: Dhcp4OperatorSpec { route_metric: METRIC, ..Dhcp4OperatorSpec::default() },
                config_layer: LAYER,
                ..OperatorSpec::default()
            };
            seed(state, &operator_id(&spec), spec)
        },
        observer,
    )?;
    Ok(took)
}

fn networkd_dhcp() -> Outcome<Duration> {
    let server = NamedNs::bare("nds")?;
    let ns = NamedNs::with_veth("ndd", Some(&server))?;
    assert_fresh(&ns, &["lo", LINK])?;
    let _dnsmasq = dnsmasq(&server)?;
    let conf = ConfDir::new(
        "dhcp",
        &format!(
            "[Match]\nName={LINK}\n\n[Network]\nDHCP=ipv4\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n\n\
             [DHCPv4]\nRouteMetric={METRIC}\n"
        ),
    )?;
    let observer = Observer::start(&ns.ns, false, leased)?;
    let mut nd = networkd_wrapper(&ns.name, &conf.0, NETWORKD, "ndd")?;
    let start = nd.go()?;
    observer.go(start);
    let (at, _) = observer.wait().map_err(|e| format!("{e}; networkd's log:\n{}", nd.log_tail()))?;
    check_networkd(&mut nd)?;
    Ok(at - start)
}

/// `runs` runs of `f`, in ms; the first failure ends the series.
fn series(what: &str, runs: usize, mut f: impl FnMut() -> Outcome<Duration>) -> Option<Vec<f64>> {
    let mut v = Vec::new();
    for i in 0..runs {
        match f() {
            Ok(d) => v.push(d.as_secs_f64() * 1000.0),
            Err(e) => {
                eprintln!("network bench: {what}, run {}: {e}", i + 1);
                return None;
            }
        }
    }
    Some(v)
}

struct Figure {
    name: String,
    talosbox: Option<Vec<f64>>,
    networkd: Option<Vec<f64>>,
    /// The most the talosbox/networkd ratio may be.
    target: f64,
}

fn main() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("network bench: needs root (network namespaces, rtnetlink, networkd's private mounts)");
        std::process::exit(1);
    }
    for (path, what) in [(NETWORKD, "apt-get install systemd"), (DNSMASQ, "apt-get install dnsmasq-base")] {
        if !Path::new(path).exists() {
            eprintln!("network bench: {path} missing ({what})");
            std::process::exit(1);
        }
    }
    let runs: usize = std::env::var("RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(3).max(1);
    let counts: Vec<usize> = std::env::var("NS")
        .unwrap_or_else(|_| "1 100 1000".into())
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let wrapper = series("networkd's wrapper", runs, wrapper_cost);

    let mut figures = Vec::new();
    for n in counts {
        let name = format!("converge {n} addresses + {n} routes");
        let talosbox = series(&format!("talosbox, {name}"), runs, || talosbox_static(n));
        let networkd = series(&format!("networkd, {name}"), runs, || networkd_static(n));
        let target = if n >= 1000 { 0.5 } else { f64::NAN };
        figures.push(Figure { name, talosbox, networkd, target });
    }
    let talosbox = series("talosbox, DHCPv4 lease", runs, talosbox_dhcp);
    let networkd = series("networkd, DHCPv4 lease", runs, networkd_dhcp);
    figures.push(Figure { name: "DHCPv4 lease from dnsmasq".into(), talosbox, networkd, target: 1.0 });

    println!(
        "network bench: median of {runs} runs, ms; each run in fresh namespaces on a veth; talosbox from its \
         controller runtime's start + seeding, networkd from its exec, both to the kernel holding it all"
    );
    if let Some(w) = &wrapper {
        println!("networkd's wrapper, made ready before its clock starts (not counted): {:.1} ms median", median(w));
    }
    println!();
    println!(
        "{:<42} {:>10} {:>10} {:>7} {:>8}   runs (talosbox | networkd)",
        "figure", "talosbox", "networkd", "ratio", "target"
    );
    let mut rows = Vec::new();
    let show = |v: &Option<Vec<f64>>| v.as_ref().map_or("failed".to_string(), |v| format!("{:.1}", median(v)));
    let list = |v: &Option<Vec<f64>>| {
        v.as_ref().map_or("-".to_string(), |v| v.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(" "))
    };
    for f in &figures {
        let (ratio, verdict) = match (&f.talosbox, &f.networkd) {
            (Some(t), Some(n)) => {
                let r = median(t) / median(n);
                let verdict = if f.target.is_nan() {
                    "-".to_string()
                } else if r <= f.target {
                    format!("≤{:.1} met", f.target)
                } else {
                    format!("≤{:.1} MISSED", f.target)
                };
                rows.push(format!("ROW\t{}\t{:.1}\t{:.1}\tms", f.name, median(t), median(n)));
                (format!("{r:.2}x"), verdict)
            }
            _ => ("-".to_string(), "-".to_string()),
        };
        println!(
            "{:<42} {:>10} {:>10} {:>7} {:>8}   {} | {}",
            f.name,
            show(&f.talosbox),
            show(&f.networkd),
            ratio,
            verdict,
            list(&f.talosbox),
            list(&f.networkd)
        );
    }
    for r in rows {
        println!("{r}");
    }
}

//! Hole 4 of the door: thousands of idle connections, plain TCP that never speaks and TLS that
//! never sends the HTTP/2 preface (or sends it and then nothing), from several loopback
//! sources, against a maintenance node's apid (:50000, no credentials needed) and a control
//! plane's trustd (:50001). The door caps them per source and in all, refuses the rest at
//! once, closes the admitted ones within its handshake, preface and idle timeouts, and a
//! legitimate caller still gets through while the flood lasts.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use talosbox::api::door;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::harness::{Cluster, Maintenance, Node, open_fds, text};

/// Flood sources: 127.0.7.100 … 127.0.7.119, 250 connections each.
const SOURCES: u8 = 20;
const PER_SOURCE: usize = 250;
/// A refused attempt is tried again after this long, while the flood lasts, so the caps stay
/// full as the door closes admitted connections.
const RETRY: Duration = Duration::from_secs(2);
/// A connection the server closed this soon after it was opened was refused, not admitted
/// (the door's first timeout is the handshake's).
const REFUSED_WITHIN: Duration = Duration::from_millis(2500);
/// Slack on each timeout, for a loaded machine.
const SLACK: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// TCP only, never a byte.
    Silent,
    /// A TLS handshake, then nothing.
    TlsOnly,
    /// TLS and the HTTP/2 preface and SETTINGS, answering the server's SETTINGS and PINGs
    /// (so keep-alive does not close it), and never a request.
    Preface,
}

#[derive(Debug)]
struct Outcome {
    source: u8,
    /// The slot's first attempt (all of them are made before the door's first timeout).
    first: bool,
    kind: Kind,
    admitted: bool,
    opened: Instant,
    /// TLS done (TLS kinds, admitted).
    tls: Option<Instant>,
    /// The server's first GOAWAY (Preface).
    goaway: Option<Instant>,
    /// When the server closed it; `None`: still open when the test gave up.
    closed: Option<Instant>,
}

fn kind_of(j: usize) -> Kind {
    match j % 4 {
        0 => Kind::Silent,
        1 => Kind::TlsOnly,
        _ => Kind::Preface,
    }
}

fn source(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 7, 100 + i)
}

/// Lets this process hold the flood's descriptors.
fn raise_own_nofile() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    let _ = setrlimit(Resource::Nofile, Rlimit { current: l.maximum, maximum: l.maximum });
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    // Two floods may run side by side.
    assert!(now >= 2 * (SOURCES as u64) * (PER_SOURCE as u64) + 1000, "RLIMIT_NOFILE {now} is too low for the flood");
}

/// The soft and hard `Max open files` of `pid`.
fn nofile_of(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_string();
    let f: Vec<&str> = line["Max open files".len()..].split_whitespace().collect();
    (f[0].to_string(), f[1].to_string())
}

/// Of `pids`, the one holding the socket listening on `address:port`.
fn listener_pid(address: Ipv4Addr, port: u16, pids: &[u32]) -> Option<u32> {
    let le = u32::from_le_bytes(address.octets());
    let want4 = format!("{le:08X}:{port:04X}");
    let want6 = format!("0000000000000000FFFF0000{le:08X}:{port:04X}");
    let mut inodes = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(file).unwrap_or_default().lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && (f[1] == want4 || f[1] == want6) && f[3] == "0A" {
                inodes.push(format!("socket:[{}]", f[9]));
            }
        }
    }
    pids.iter().copied().find(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| inodes.iter().any(|i| l.to_string_lossy() == *i)))
    })
}

/// One attempt: connect from `src`, speak as `kind`, wait until the server closes it or
/// `give_up`.
async fn attempt(
    src: u8,
    target: SocketAddr,
    kind: Kind,
    tls: Arc<rustls::ClientConfig>,
    give_up: tokio::time::Instant,
) -> Outcome {
    let mut o = Outcome {
        source: src,
        first: true,
        kind,
        admitted: false,
        opened: Instant::now(),
        tls: None,
        goaway: None,
        closed: None,
    };
    let connected = async {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind(SocketAddr::new(source(src).into(), 0))?;
        sock.connect(target).await
    };
    let tcp = match tokio::time::timeout_at(give_up, connected).await {
        Ok(Ok(t)) => t,
        _ => {
            o.closed = Some(Instant::now());
            return o;
        }
    };
    o.opened = Instant::now();
    match kind {
        Kind::Silent => {
            let mut tcp = tcp;
            let mut buf = [0u8; 64];
            loop {
                match tokio::time::timeout_at(give_up, tcp.read(&mut buf)).await {
                    Err(_) => break,
                    Ok(Ok(n)) if n > 0 => continue,
                    Ok(_) => {
                        o.closed = Some(Instant::now());
                        break;
                    }
                }
            }
            o.admitted = o.closed.is_none_or(|c| c.duration_since(o.opened) > REFUSED_WITHIN);
        }
        Kind::TlsOnly | Kind::Preface => {
            let name = rustls::pki_types::ServerName::IpAddress(target.ip().into());
            let hs = tokio_rustls::TlsConnector::from(tls).connect(name, tcp);
            let mut s = match tokio::time::timeout_at(give_up, hs).await {
                Ok(Ok(s)) => s,
                Ok(Err(_)) => {
                    o.closed = Some(Instant::now());
                    return o;
                }
                Err(_) => return o,
            };
            o.admitted = true;
            o.tls = Some(Instant::now());
            if kind == Kind::Preface {
                let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
                hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
                if s.write_all(&hello).await.is_err() {
                    o.closed = Some(Instant::now());
                    return o;
                }
            }
            loop {
                let mut head = [0u8; 9];
                match tokio::time::timeout_at(give_up, s.read_exact(&mut head)).await {
                    Err(_) => return o,
                    Ok(Err(_)) => break,
                    Ok(Ok(_)) => {}
                }
                let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
                let mut payload = vec![0u8; len];
                if s.read_exact(&mut payload).await.is_err() {
                    break;
                }
                let (ty, flags) = (head[3], head[4]);
                // TLS-only says nothing at all: an answer to the server's SETTINGS would be
                // an invalid preface, which the server closes at once.
                let reply = match ty {
                    _ if kind == Kind::TlsOnly => Vec::new(),
                    4 if flags & 1 == 0 => vec![0, 0, 0, 4, 1, 0, 0, 0, 0],
                    6 if flags & 1 == 0 => [&[0u8, 0, 8, 6, 1, 0, 0, 0, 0][..], &payload].concat(),
                    7 => {
                        o.goaway.get_or_insert_with(Instant::now);
                        Vec::new()
                    }
                    _ => Vec::new(),
                };
                if !reply.is_empty() && s.write_all(&reply).await.is_err() {
                    break;
                }
            }
            o.closed = Some(Instant::now());
        }
    }
    o
}

/// One flood slot: attempts until one is admitted, or the flood stops.
async fn slot(
    src: u8,
    target: SocketAddr,
    kind: Kind,
    tls: Arc<rustls::ClientConfig>,
    flooding: Arc<AtomicBool>,
    give_up: tokio::time::Instant,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    loop {
        let mut o = attempt(src, target, kind, tls.clone(), give_up).await;
        o.first = out.is_empty();
        let admitted = o.admitted;
        out.push(o);
        if admitted || !flooding.load(Ordering::Relaxed) || tokio::time::Instant::now() >= give_up {
            return out;
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The flood against `target`, running on `rt` until `flooding` is cleared.
fn flood(
    rt: &tokio::runtime::Runtime,
    target: SocketAddr,
    flooding: Arc<AtomicBool>,
    give_up: Duration,
) -> Vec<tokio::task::JoinHandle<Vec<Outcome>>> {
    let tls = talosbox::pki::tls::insecure_client_config(None).unwrap();
    let give_up = tokio::time::Instant::now() + give_up;
    let mut handles = Vec::new();
    for i in 0..SOURCES {
        let _guard = rt.enter();
        for j in 0..PER_SOURCE {
            handles.push(rt.spawn(slot(i, target, kind_of(j), tls.clone(), flooding.clone(), give_up)));
        }
        // Source by source, so the first ones reach the per-source cap and the total fills.
        std::thread::sleep(Duration::from_millis(150));
    }
    handles
}

/// The most admitted connections open at once, of `outcomes` picked by `which`.
fn most_at_once(outcomes: &[Outcome], which: impl Fn(&Outcome) -> bool, end: Instant) -> usize {
    let mut events: Vec<(Instant, i32)> = Vec::new();
    for o in outcomes.iter().filter(|o| o.admitted && which(o)) {
        events.push((o.opened, 1));
        events.push((o.closed.unwrap_or(end), -1));
    }
    // Closings first at equal instants.
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    most as usize
}

struct Report {
    attempts: usize,
    refused: usize,
    admitted: usize,
    still_open: usize,
    most: usize,
    most_any_source: usize,
    /// Of the first attempts: admitted in all, from the first source, from the busiest one.
    first_admitted: usize,
    first_from_first_source: usize,
    first_from_any_source: usize,
    /// Per kind: (admitted, slowest close after its timeout's start, fastest).
    silent: (usize, Duration, Duration),
    tls_only: (usize, Duration, Duration),
    preface: (usize, Duration, Duration),
}

fn report(outcomes: &[Outcome]) -> Report {
    let end = Instant::now();
    let admitted: Vec<&Outcome> = outcomes.iter().filter(|o| o.admitted).collect();
    let timing = |kind: Kind| {
        let mut n = 0;
        let (mut slow, mut fast) = (Duration::ZERO, Duration::MAX);
        for o in admitted.iter().filter(|o| o.kind == kind) {
            n += 1;
            let (from, to) = match kind {
                Kind::Silent => (o.opened, o.closed),
                Kind::TlsOnly => (o.tls.unwrap_or(o.opened), o.closed),
                Kind::Preface => (o.tls.unwrap_or(o.opened), o.goaway.or(o.closed)),
            };
            let took = to.unwrap_or(end).duration_since(from);
            slow = slow.max(took);
            fast = fast.min(took);
        }
        (n, slow, fast)
    };
    Report {
        attempts: outcomes.len(),
        refused: outcomes.len() - admitted.len(),
        admitted: admitted.len(),
        still_open: admitted.iter().filter(|o| o.closed.is_none()).count(),
        most: most_at_once(outcomes, |_| true, end),
        first_admitted: admitted.iter().filter(|o| o.first).count(),
        first_from_first_source: admitted.iter().filter(|o| o.first && o.source == 0).count(),
        first_from_any_source: (0..SOURCES)
            .map(|s| admitted.iter().filter(|o| o.first && o.source == s).count())
            .max()
            .unwrap_or(0),
        most_any_source: (0..SOURCES).map(|s| most_at_once(outcomes, |o| o.source == s, end)).max().unwrap_or(0),
        silent: timing(Kind::Silent),
        tls_only: timing(Kind::TlsOnly),
        preface: timing(Kind::Preface),
    }
}

fn check(r: &Report) {
    let caps = door::Caps::DEFAULT;
    assert_eq!(r.still_open, 0, "admitted connections the server never closed");
    // The first attempts, all made before any admitted one times out: the first source
    // fills its cap exactly, none goes beyond it, and the total fills (plus one newcomer's
    // place for each source that came after it was full).
    assert_eq!(r.first_from_first_source, caps.per_source, "the first source should fill its cap exactly");
    assert!(r.first_from_any_source <= caps.per_source, "a source got {} connections", r.first_from_any_source);
    assert!(
        (caps.total..=caps.total + caps.newcomer_reserve).contains(&r.first_admitted),
        "{} connections admitted; the cap is {} (+{} for newcomers)",
        r.first_admitted,
        caps.total,
        caps.newcomer_reserve
    );
    // Over the whole flood, seen from this side (which sees a close a moment after the door
    // gave the place back, hence the few of slack).
    assert!(r.most <= caps.total + caps.newcomer_reserve + 8, "{} connections open at once", r.most);
    assert!(r.most_any_source <= caps.per_source + 8, "a source held {} connections at once", r.most_any_source);
    assert!(r.refused > 0);
    let within = |(n, slow, fast): (usize, Duration, Duration), timeout: Duration, what: &str| {
        assert!(n > 0, "no {what} connection was admitted");
        assert!(
            slow <= timeout + SLACK,
            "a {what} connection was closed {slow:?} after its start (timeout {timeout:?})"
        );
        assert!(fast + Duration::from_millis(500) >= timeout, "a {what} connection was closed early, after {fast:?}");
    };
    within(r.silent, door::HANDSHAKE_TIMEOUT, "silent TCP");
    within(r.tls_only, door::PREFACE_TIMEOUT, "TLS without preface");
    within(r.preface, door::IDLE_TIMEOUT, "idle HTTP/2");
}

fn print(what: &str, r: &Report) {
    eprintln!(
        "{what}: {} attempts, {} refused, {} admitted (first wave {}, {} from the first source; \
         {} at most at once, {} from one source); \
         closed after: silent {} in {:?}..{:?}, TLS-only {} in {:?}..{:?}, idle HTTP/2 {} in {:?}..{:?}; {} left open",
        r.attempts,
        r.refused,
        r.admitted,
        r.first_admitted,
        r.first_from_first_source,
        r.most,
        r.most_any_source,
        r.silent.0,
        r.silent.2,
        r.silent.1,
        r.tls_only.0,
        r.tls_only.2,
        r.tls_only.1,
        r.preface.0,
        r.preface.2,
        r.preface.1,
        r.still_open
    );
}

/// Every attempt of the flood's slots, once they have all ended.
fn gather(rt: &tokio::runtime::Runtime, handles: Vec<tokio::task::JoinHandle<Vec<Outcome>>>) -> Vec<Outcome> {
    rt.block_on(async {
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.unwrap());
        }
        all
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Waits until `pid` holds at most `fds` descriptors; the count it settled at.
fn fds_settle(pid: u32, fds: usize, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let n = open_fds(pid);
        if n <= fds || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn idle_connections_to_a_maintenance_node_are_capped_and_closed() {
    raise_own_nofile();
    let m = Maintenance::up("door", "127.0.7.1");
    m.ctl.ok(&["gen", "config", "door", "https://127.0.7.1:6443"]);
    let apid = m.node.service_pid("apid");
    let machined = m.node.pid();
    // Who serves the maintenance API: apid, not machined.
    assert_eq!(listener_pid(Ipv4Addr::new(127, 0, 7, 1), 50000, &[machined, apid]), Some(apid));
    let (soft, hard) = nofile_of(apid);
    let want = hard
        .parse::<u64>()
        .map_or(talosbox::kernel::rlimit::NOFILE_WANTED, |h| h.min(talosbox::kernel::rlimit::NOFILE_WANTED));
    assert_eq!(soft, want.to_string(), "apid's RLIMIT_NOFILE soft limit (hard {hard})");
    let fds_before = (open_fds(apid), open_fds(machined));

    let rt = runtime();
    let flooding = Arc::new(AtomicBool::new(true));
    let target: SocketAddr = "127.0.7.1:50000".parse().unwrap();
    let handles = flood(&rt, target, flooding.clone(), door::IDLE_TIMEOUT + Duration::from_secs(45));
    let fds_flood = open_fds(apid);

    // A legitimate caller, while the flood holds the caps.
    let t = Instant::now();
    let version = m.ctl.run(&["-e", "127.0.7.1", "version", "--insecure", "--short"]);
    let version_took = t.elapsed();
    assert!(version.status.success(), "version during the flood:\n{}", text(&version));
    let t = Instant::now();
    let apply = m.ctl.run(&["-e", "127.0.7.1", "apply-config", "--insecure", "--dry-run", "-f", "worker.yaml"]);
    let apply_took = t.elapsed();
    assert!(apply.status.success(), "apply-config --dry-run during the flood:\n{}", text(&apply));
    std::thread::sleep(Duration::from_secs(2));
    let fds_peak = fds_flood.max(open_fds(apid));
    flooding.store(false, Ordering::Relaxed);

    let outcomes = gather(&rt, handles);
    let r = report(&outcomes);
    let fds_after = (fds_settle(apid, fds_before.0 + 4, Duration::from_secs(10)), open_fds(machined));
    print("apid (maintenance)", &r);
    eprintln!(
        "apid fds {} -> {} during -> {} after; machined fds {} -> {}; version took {version_took:?}, \
         apply-config --dry-run {apply_took:?}",
        fds_before.0, fds_peak, fds_after.0, fds_before.1, fds_after.1
    );
    check(&r);
    assert!(fds_peak > fds_before.0 + door::MAX_CONNECTIONS / 2, "the flood never reached apid");
    assert!(fds_after.0 <= fds_before.0 + 4, "apid's descriptors: {} before, {} after", fds_before.0, fds_after.0);
    assert!(fds_after.1 <= fds_before.1 + 4, "machined's descriptors: {} before, {} after", fds_before.1, fds_after.1);
}

#[test]
fn idle_connections_to_trustd_do_not_block_enrolment() {
    raise_own_nofile();
    let c = Cluster::up("door-trustd", "127.0.7.2", &[]);
    let worker = Node::start(&c.ctl.dir, "w1", "127.0.7.3");
    worker.wait_line("stage: maintenance");
    let trustd = c.cp.service_pid("trustd");
    assert_eq!(listener_pid(Ipv4Addr::new(127, 0, 7, 2), 50001, &[c.cp.pid(), trustd]), Some(trustd));
    let fds_before = open_fds(trustd);

    let rt = runtime();
    let flooding = Arc::new(AtomicBool::new(true));
    let target: SocketAddr = "127.0.7.2:50001".parse().unwrap();
    let handles = flood(&rt, target, flooding.clone(), door::IDLE_TIMEOUT + Duration::from_secs(60));
    let fds_flood = open_fds(trustd);

    // The worker enrols while the flood holds trustd's caps.
    let t = Instant::now();
    c.ctl.eventually(&["-e", "127.0.7.3", "--insecure", "apply-config", "-f", "worker.yaml"], Duration::from_secs(20));
    c.ctl.eventually(&["-n", "127.0.7.3", "version"], Duration::from_secs(60));
    let enrolled = t.elapsed();
    let fds_peak = fds_flood.max(open_fds(trustd));
    flooding.store(false, Ordering::Relaxed);

    let outcomes = gather(&rt, handles);
    let r = report(&outcomes);
    let fds_after = fds_settle(trustd, fds_before + 4, Duration::from_secs(10));
    print("trustd", &r);
    eprintln!("trustd fds {fds_before} -> {fds_peak} during -> {fds_after} after; the worker enrolled in {enrolled:?}");
    check(&r);
    assert!(fds_after <= fds_before + 4, "trustd's descriptors: {fds_before} before, {fds_after} after");
    // The refusals were said, and not once per connection.
    let log = c.ctl.ok(&["-n", "127.0.7.2", "logs", "trustd"]);
    let lines = log.lines().filter(|l| l.contains("refusing a connection from") && l.contains("127.0.7.1")).count();
    assert!(lines >= 1 && lines < r.refused / 10, "{lines} refusal lines for {} refusals:\n{log}", r.refused);
}

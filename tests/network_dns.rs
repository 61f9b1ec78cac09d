//! The host DNS forwarder against a real upstream: each test in a fresh network namespace
//! (loopback up) where `DnsResolveCacheController` listens on 127.0.0.53 and dnsmasq, started
//! inside the same namespace, serves `example.test` on 127.0.0.2. Queries are built by hand
//! and sent over UDP and TCP from sockets made in the namespace. Needs root (CI runs as root)
//! and dnsmasq; without either the tests fail loudly rather than pass.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use talosbox::controllers::network::{DnsResolveCacheController, NetworkTarget};
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::netns::NetNs;
use talosbox::network::dns::message::{self, RCODE_NOERROR, RCODE_SERVFAIL};
use talosbox::resources::network::{DnsResolveCache, HostDnsConfig, NAMESPACE, ResolverStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(10);
const LISTEN: &str = "127.0.0.53:53";
const UPSTREAM: &str = "127.0.0.2";
/// Nothing listens here: an upstream that is down.
const DOWN: &str = "127.0.0.3";
const TYPE_A: u16 = 1;

fn fresh_ns() -> NetNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "network_dns tests need root (network namespaces, port 53); run them as root as CI does"
    );
    let ns = NetNs::new().expect("creating a network namespace");
    let out = ns.run(|| Command::new("ip").args(["link", "set", "lo", "up"]).output()).unwrap().expect("running ip");
    assert!(out.status.success(), "ip link set lo up: {}", String::from_utf8_lossy(&out.stderr));
    ns
}

/// dnsmasq in `ns` on 127.0.0.2:53, answering example.test (and below) with 10.1.2.3 for
/// 300 s, forwarding nothing. Returns once it has said it started (it listens before that).
struct Dnsmasq {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    fn start(ns: &NetNs) -> Dnsmasq {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("dnsmasq.pid");
        let spawned = ns.run(|| {
            Command::new("dnsmasq")
                .args(["--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll"])
                .args(["--bind-interfaces", &format!("--listen-address={UPSTREAM}"), "--port=53"])
                .args(["--address=/example.test/10.1.2.3", "--local-ttl=300", "--log-facility=-"])
                .arg(format!("--pid-file={}", pid.display()))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
        });
        let mut child =
            spawned.unwrap().unwrap_or_else(|e| panic!("starting dnsmasq (is dnsmasq-base installed?): {e}"));
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut seen = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                seen.push_str(&line);
                seen.push('\n');
                if line.contains("started, version") {
                    let _ = tx.send(Ok(()));
                    // Keep draining so dnsmasq never blocks on a full pipe.
                    continue;
                }
            }
            let _ = tx.send(Err(seen));
        });
        match rx.recv_timeout(WAIT) {
            Ok(Ok(())) => Dnsmasq { child, _dir: dir },
            Ok(Err(log)) => panic!("dnsmasq exited before it started:\n{log}"),
            Err(_) => panic!("dnsmasq did not start within {WAIT:?}"),
        }
    }

    fn stop(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn forwarder(ns: &NetNs, upstreams: &[&str]) -> Harness {
    let listen: SocketAddr = LISTEN.parse().unwrap();
    let controller = DnsResolveCacheController::new(NetworkTarget::Namespace(ns.clone()), listen);
    let h = Harness::start(vec![Box::new(controller) as Box<dyn Controller>]).unwrap();
    let resolvers =
        ResolverStatus { dns_servers: upstreams.iter().map(|s| s.parse().unwrap()).collect(), search_domains: vec![] };
    h.seed(NAMESPACE, ResolverStatus::ID, resolvers).unwrap();
    h.seed(NAMESPACE, HostDnsConfig::ID, HostDnsConfig { enabled: true, ..Default::default() }).unwrap();
    for proto in ["udp", "tcp"] {
        let want = DnsResolveCache { status: DnsResolveCache::RUNNING.into() };
        h.assert_spec(NAMESPACE, &format!("{proto}-{LISTEN}"), &want).await;
    }
    h
}

async fn ask_udp(ns: &NetNs, id: u16, name: &str) -> Vec<u8> {
    let socket = ns.run(|| std::net::UdpSocket::bind("127.0.0.1:0")).unwrap().unwrap();
    socket.set_nonblocking(true).unwrap();
    let socket = tokio::net::UdpSocket::from_std(socket).unwrap();
    socket.send_to(&message::build_query(id, name, TYPE_A), LISTEN).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let (len, from) = tokio::time::timeout(WAIT, socket.recv_from(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("no UDP answer for {name} within {WAIT:?}"))
        .unwrap();
    assert_eq!(from, LISTEN.parse::<SocketAddr>().unwrap());
    buf.truncate(len);
    buf
}

async fn ask_tcp(ns: &NetNs, id: u16, name: &str) -> Vec<u8> {
    let stream = ns.run(|| std::net::TcpStream::connect(LISTEN)).unwrap().unwrap();
    stream.set_nonblocking(true).unwrap();
    let mut stream = tokio::net::TcpStream::from_std(stream).unwrap();
    let query = message::build_query(id, name, TYPE_A);
    stream.write_u16(query.len() as u16).await.unwrap();
    stream.write_all(&query).await.unwrap();
    let read = async {
        let len = stream.read_u16().await.unwrap();
        let mut buf = vec![0u8; usize::from(len)];
        stream.read_exact(&mut buf).await.unwrap();
        buf
    };
    tokio::time::timeout(WAIT, read).await.unwrap_or_else(|_| panic!("no TCP answer for {name} within {WAIT:?}"))
}

fn assert_answer(reply: &[u8], id: u16, name: &str) -> u32 {
    let msg = message::parse(reply).unwrap();
    assert_eq!((msg.id, msg.rcode()), (id, RCODE_NOERROR), "answer for {name}");
    assert_eq!(msg.question.name, name);
    assert_eq!(message::answer_ipv4s(reply).unwrap(), [Ipv4Addr::new(10, 1, 2, 3)], "dnsmasq's record for {name}");
    msg.min_ttl().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_over_udp_and_tcp_caches_and_fails_over() {
    let ns = fresh_ns();
    let dnsmasq = Dnsmasq::start(&ns);
    // The first upstream is down: every query falls back to the second.
    let h = forwarder(&ns, &[DOWN, UPSTREAM]).await;

    let ttl = assert_answer(&ask_udp(&ns, 0x1111, "example.test").await, 0x1111, "example.test");
    assert!(ttl > 0 && ttl <= 300, "dnsmasq's TTL: {ttl}");
    assert_answer(&ask_tcp(&ns, 0x2222, "tcp.example.test").await, 0x2222, "tcp.example.test");

    // With the upstream gone, what was asked before comes from the cache, over either
    // transport; what was not gets SERVFAIL.
    dnsmasq.stop();
    let cached = ask_udp(&ns, 0x3333, "example.test").await;
    let aged = assert_answer(&cached, 0x3333, "example.test");
    assert!(aged <= ttl, "a cached answer's TTL only goes down: {aged} after {ttl}");
    assert_answer(&ask_tcp(&ns, 0x4444, "tcp.example.test").await, 0x4444, "tcp.example.test");
    for reply in [ask_udp(&ns, 0x5555, "new.example.test").await, ask_tcp(&ns, 0x6666, "new.example.test").await] {
        let msg = message::parse(&reply).unwrap();
        assert_eq!(msg.rcode(), RCODE_SERVFAIL, "every upstream down: SERVFAIL");
        assert_eq!((msg.question.name.as_str(), msg.answers), ("new.example.test", 0));
    }

    // Disabled, it stops listening and withdraws its status.
    h.seed(NAMESPACE, HostDnsConfig::ID, HostDnsConfig::default()).unwrap();
    h.assert_absent::<DnsResolveCache>(NAMESPACE, &format!("udp-{LISTEN}")).await;
    let refused = ns.run(|| std::net::TcpStream::connect(LISTEN)).unwrap();
    assert!(refused.is_err(), "nothing listens on {LISTEN} once disabled");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_upstream_at_all_is_servfail() {
    let ns = fresh_ns();
    let h = forwarder(&ns, &[DOWN]).await;
    let reply = ask_udp(&ns, 0x7777, "example.test").await;
    let msg = message::parse(&reply).unwrap();
    assert_eq!((msg.id, msg.rcode()), (0x7777, RCODE_SERVFAIL));
    h.stop().await;
}

/// A hand-made upstream on 127.0.0.4:53: over UDP it answers every query truncated (TC set,
/// no records); over TCP with `records` A records for 10.1.2.3, TTL 60.
fn truncating_upstream(ns: &NetNs, records: usize) -> tokio::task::JoinHandle<()> {
    const ADDR: &str = "127.0.0.4:53";
    let udp = ns.run(|| std::net::UdpSocket::bind(ADDR)).unwrap().unwrap();
    let tcp = ns.run(|| std::net::TcpListener::bind(ADDR)).unwrap().unwrap();
    udp.set_nonblocking(true).unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = tokio::net::UdpSocket::from_std(udp).unwrap();
    let tcp = tokio::net::TcpListener::from_std(tcp).unwrap();
    let answer = move |query: &[u8], truncated: bool| {
        let mut out = query.to_vec();
        let flags: u16 = 0x8180 | if truncated { 0x0200 } else { 0 };
        out[2..4].copy_from_slice(&flags.to_be_bytes());
        if !truncated {
            out[6..8].copy_from_slice(&(records as u16).to_be_bytes());
            for _ in 0..records {
                out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 1, 2, 3]);
            }
        }
        out
    };
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        loop {
            tokio::select! {
                Ok((len, peer)) = udp.recv_from(&mut buf) => {
                    let _ = udp.send_to(&answer(&buf[..len], true), peer).await;
                }
                Ok((mut stream, _)) = tcp.accept() => {
                    let len = stream.read_u16().await.unwrap();
                    let mut query = vec![0u8; usize::from(len)];
                    stream.read_exact(&mut query).await.unwrap();
                    let reply = answer(&query, false);
                    stream.write_u16(reply.len() as u16).await.unwrap();
                    stream.write_all(&reply).await.unwrap();
                }
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_upstream_answer_is_fetched_over_tcp_and_truncated_for_small_askers() {
    let ns = fresh_ns();
    // 40 records of 16 bytes: more than a classic 512-byte UDP answer holds.
    let upstream = truncating_upstream(&ns, 40);
    let h = forwarder(&ns, &["127.0.0.4"]).await;

    let full = ask_tcp(&ns, 0x0101, "big.test").await;
    let msg = message::parse(&full).unwrap();
    assert_eq!((msg.rcode(), msg.answers, msg.truncated()), (RCODE_NOERROR, 40, false), "fetched over TCP");

    // Over UDP without EDNS the asker gets the question with TC set, and retries over TCP.
    let small = ask_udp(&ns, 0x0202, "big.test").await;
    let msg = message::parse(&small).unwrap();
    assert!(msg.truncated() && msg.answers == 0, "truncated for a 512-byte asker: {msg:?}");
    assert_eq!(msg.id, 0x0202);
    upstream.abort();
    h.stop().await;
}

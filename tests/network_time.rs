//! The time sync client against a stand-in SNTP server: each test in a fresh network
//! namespace (loopback up) where a small UDP responder in the test answers on 127.0.0.5:123
//! with this host's time, and `TimeSyncController` keeps a clock of the test's own — one
//! that starts an hour slow and records every adjustment — so the host's clock is never
//! touched. (chrony would be a real peer, but installing it removes systemd-timesyncd.)
//! Needs root (CI runs as root); without it the tests fail loudly rather than pass.

use std::io;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use talosbox::controllers::config::machine_config::parse;
use talosbox::controllers::network::{NetworkTarget, PollBounds, TimeSyncController};
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::clock::{Clock, shifted};
use talosbox::kernel::netns::NetNs;
use talosbox::network::sntp::{self, Adjustment, Timestamp};
use talosbox::resources::config::{self as cfg, MachineConfig};
use talosbox::resources::network::{NAMESPACE, TimeServerStatus};
use talosbox::resources::time::{self, TimeStatus};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(10);
const SERVER: &str = "127.0.0.5";
/// Nothing answers here.
const DOWN: &str = "127.0.0.9";
const HOUR: i128 = 3600 * 1_000_000_000;

fn fresh_ns() -> NetNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "network_time tests need root (network namespaces, port 123); run them as root as CI does"
    );
    let ns = NetNs::new().expect("creating a network namespace");
    let out = ns.run(|| Command::new("ip").args(["link", "set", "lo", "up"]).output()).unwrap().expect("running ip");
    assert!(out.status.success(), "ip link set lo up: {}", String::from_utf8_lossy(&out.stderr));
    ns
}

/// The stand-in server: answers every client request with the host's time.
fn serve_sntp(ns: &NetNs) -> tokio::task::JoinHandle<()> {
    let socket = ns.run(|| std::net::UdpSocket::bind((SERVER, sntp::PORT))).unwrap().unwrap();
    socket.set_nonblocking(true).unwrap();
    let socket = tokio::net::UdpSocket::from_std(socket).unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((len, peer)) = socket.recv_from(&mut buf).await {
            if let Some(reply) = sntp::serve(&buf[..len], Timestamp::from_system(SystemTime::now())) {
                let _ = socket.send_to(&reply, peer).await;
            }
        }
    })
}

/// A clock `offset` nanoseconds off the host's that applies adjustments to itself only.
struct TestClock {
    offset: Mutex<i128>,
    adjustments: watch::Sender<Vec<Adjustment>>,
}

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        shifted(SystemTime::now(), *self.offset.lock().unwrap())
    }

    fn adjust(&self, adjustment: Adjustment) -> io::Result<()> {
        let (Adjustment::Slew(by) | Adjustment::Step(by)) = adjustment;
        *self.offset.lock().unwrap() += by;
        self.adjustments.send_modify(|a| a.push(adjustment));
        Ok(())
    }
}

fn start(ns: &NetNs, offset: i128) -> (Harness, Arc<TestClock>) {
    let clock = Arc::new(TestClock { offset: Mutex::new(offset), adjustments: watch::channel(Vec::new()).0 });
    let bounds = PollBounds {
        min: Duration::from_millis(200),
        max: Duration::from_millis(800),
        retry: Duration::from_millis(100),
    };
    let controller = TimeSyncController::new(NetworkTarget::Namespace(ns.clone()), clock.clone() as Arc<dyn Clock>)
        .with_poll_bounds(bounds);
    (Harness::start(vec![Box::new(controller) as Box<dyn Controller>]).unwrap(), clock)
}

fn servers(h: &Harness, list: &[&str]) {
    let status = TimeServerStatus { time_servers: list.iter().map(|s| s.to_string()).collect(), use_nts: false };
    h.seed(NAMESPACE, TimeServerStatus::ID, status).unwrap();
}

async fn adjustments(clock: &TestClock, what: &str, pred: impl Fn(&[Adjustment]) -> bool) -> Vec<Adjustment> {
    let mut rx = clock.adjustments.subscribe();
    let found = match tokio::time::timeout(WAIT, rx.wait_for(|a| pred(a))).await {
        Ok(Ok(a)) => Some(a.clone()),
        _ => None,
    };
    found.unwrap_or_else(|| panic!("timed out after {WAIT:?} waiting for the clock: {what}; saw {:?}", *rx.borrow()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_slow_clock_is_stepped_then_slewed() {
    let ns = fresh_ns();
    let server = serve_sntp(&ns);
    let (h, clock) = start(&ns, -HOUR);
    // Nothing is reported before the servers are known.
    assert!(h.state().find::<TimeStatus>(time::NAMESPACE, TimeStatus::ID).unwrap().is_none());
    servers(&h, &[DOWN, SERVER]);

    let seen = adjustments(&clock, "a step of about an hour", |a| !a.is_empty()).await;
    let Adjustment::Step(by) = seen[0] else { panic!("an hour off is stepped, not slewed: {seen:?}") };
    assert!((by - HOUR).abs() < 1_000_000_000, "stepped by {by} ns, not about an hour");
    let want = TimeStatus { synced: true, epoch: 1, sync_disabled: false };
    h.assert_spec(time::NAMESPACE, TimeStatus::ID, &want).await;

    // The next polls find the clock close: slewed, and the epoch stays.
    let seen = adjustments(&clock, "a second adjustment", |a| a.len() >= 2).await;
    match seen[1] {
        Adjustment::Slew(by) => assert!(by.unsigned_abs() < 400_000_000, "slewed by {by} ns"),
        other => panic!("a clock within the limit is slewed, got {other:?}"),
    }
    assert!(clock.offset.lock().unwrap().unsigned_abs() < 400_000_000, "the clock is close now");
    h.assert_spec(time::NAMESPACE, TimeStatus::ID, &want).await;
    server.abort();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_is_not_synced_and_disabled_is() {
    let ns = fresh_ns();
    let (h, clock) = start(&ns, -HOUR);
    servers(&h, &[DOWN]);
    h.assert_spec(time::NAMESPACE, TimeStatus::ID, &TimeStatus::default()).await;

    let config = "version: v1alpha1\nmachine:\n  type: worker\n  time:\n    disabled: true\n";
    h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, parse(config).unwrap()).unwrap();
    let want = TimeStatus { synced: true, epoch: 0, sync_disabled: true };
    h.assert_spec(time::NAMESPACE, TimeStatus::ID, &want).await;
    assert!(clock.adjustments.borrow().is_empty(), "nothing adjusted the clock");
    h.stop().await;
}

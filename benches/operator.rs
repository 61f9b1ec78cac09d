//! The fleet operator at scale: one engine polling MACHINES (default 1000) simulated nodes —
//! each its own mutual-TLS gRPC listener on loopback answering Version and a dry-run
//! ApplyConfiguration as Talos does (`operator::simnode`) — from the standalone SQLite store,
//! through the real gRPC node client, every machine Available and in sync.
//!
//! Measured over DURATION seconds (default 30) after one full poll interval of warm-up
//! (INTERVAL seconds, default 5, so 1000 machines ask for 200 polls/s):
//! - polls per second, against the rate the interval asks for;
//! - CPU per machine: the operator's threads only (the simulated nodes run on threads of
//!   their own, read apart in /proc/self/task), in CPU-µs per machine per second;
//! - RSS per machine: the growth of the process's RSS from before the operator started
//!   (nodes already up) to the end, per machine.
//!
//! `cargo bench --bench operator --features test-harness` prints them and
//! `ROW<TAB>name<TAB>value<TAB>anchor<TAB>unit` lines for tests/bench; nothing here asserts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use talosbox::operator::metrics::{self, Metrics, PollResult};
use talosbox::operator::model::{MachineState, MachineStatus};
use talosbox::operator::node::GrpcNodes;
use talosbox::operator::simnode::SimNodes;
use talosbox::operator::store::sqlite::SqliteStore;
use talosbox::operator::store::{FleetAdmin, Store};
use talosbox::operator::{Context, Engine, OperatorConfig, testing};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time (utime + stime, clock ticks) of this process's threads whose name starts with
/// `prefix`.
fn thread_ticks(prefix: &str) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        // After the name: state is field 3 of stat(5); utime and stime are 14 and 15.
        let utime: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
        let stime: u64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        total += utime + stime;
    }
    total
}

fn main() {
    let machines = env("MACHINES", 1000) as usize;
    let interval = Duration::from_secs(env("INTERVAL", 5));
    let duration = Duration::from_secs(env("DURATION", 30));
    let ticks_per_sec = rustix::param::clock_ticks_per_second() as f64;

    // The nodes: their own runtime and threads, named apart from the operator's.
    let nodes_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("simnode")
        .enable_all()
        .build()
        .expect("the nodes' runtime");
    let bundle = talosbox::pki::SecretsBundle::from_yaml(testing::bundle_yaml()).expect("bundle");
    let sims = nodes_rt.block_on(SimNodes::start(machines, &bundle, "v1")).expect("starting the simulated nodes");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(4)
        .thread_name("operator")
        .enable_all()
        .build()
        .expect("the operator's runtime");
    let dir = tempfile::tempdir().expect("a fleet directory");
    let store = Arc::new(SqliteStore::open_dir(dir.path()).expect("the fleet database"));
    let text = testing::rendered(&[]);
    rt.block_on(async {
        testing::seed_fleet(store.as_ref(), "default").await;
        for (i, addr) in sims.addrs.iter().enumerate() {
            let mut m = testing::machine(&format!("m{i:04}"));
            m.spec.endpoint = addr.to_string();
            let m = store.apply_machine(m).await.expect("adding a machine");
            let m = store.add_finalizer(&m.key(), &m.metadata.resource_version).await.expect("finalizer");
            let status = MachineStatus {
                state: Some(MachineState::Available),
                observed_version: "v1".into(),
                config_hash: talosbox::operator::render::hash(&text),
                observed_generation: m.metadata.generation,
                ..MachineStatus::default()
            };
            store.update_status(&m.key(), &m.metadata.resource_version, &status).await.expect("status");
        }
    });

    let rss_before = rss_kib();
    let metrics = Arc::new(Metrics::new());
    let config = OperatorConfig { poll_interval: interval, ..OperatorConfig::default() };
    let ctx = Context::new(store.clone() as Arc<dyn Store>, Arc::new(GrpcNodes::default()), metrics.clone(), config)
        .expect("the operator's configuration");
    let engine = Arc::new(Engine::new(ctx));
    let cancel = tokio_util::sync::CancellationToken::new();
    let running = {
        let (e, c) = (engine.clone(), cancel.clone());
        rt.spawn(async move { e.run(c).await })
    };
    let keys: Vec<_> = (0..machines).map(|i| testing::key(&format!("m{i:04}"))).collect();
    let total = |result| keys.iter().map(|k| metrics.count(metrics::POLL_TOTAL, k, Some(result))).sum::<u64>();

    eprintln!("operator bench: {machines} machines, interval {interval:?}; warming up for one interval");
    std::thread::sleep(interval + interval / 5);
    let (polls0, errors0, cpu0, t0) =
        (total(PollResult::Success), total(PollResult::Error), thread_ticks("operator"), Instant::now());
    std::thread::sleep(duration);
    let (polls1, errors1, cpu1, elapsed) =
        (total(PollResult::Success), total(PollResult::Error), thread_ticks("operator"), t0.elapsed());
    let rss_after = rss_kib();
    cancel.cancel();
    let _ = rt.block_on(running);

    let rate = (polls1 - polls0) as f64 / elapsed.as_secs_f64();
    let asked = machines as f64 / interval.as_secs_f64();
    let cpu_secs = (cpu1 - cpu0) as f64 / ticks_per_sec;
    let cpu_us_per_machine_s = cpu_secs * 1e6 / machines as f64 / elapsed.as_secs_f64();
    let cpu_us_per_poll = if polls1 > polls0 { cpu_secs * 1e6 / (polls1 - polls0) as f64 } else { 0.0 };
    let rss_per_machine = (rss_after.saturating_sub(rss_before)) as f64 / machines as f64;
    let drifted = rt
        .block_on(store.list())
        .map(|l| l.iter().filter(|m| m.state() != Some(MachineState::Available)).count())
        .unwrap_or(0);
    println!(
        "operator: {machines} machines, interval {interval:?}: {rate:.1} polls/s (asked {asked:.1}), {} failed polls, \
         operator CPU {:.1}% of one core = {cpu_us_per_machine_s:.1} µs/machine/s ({cpu_us_per_poll:.0} µs/poll), \
         RSS {rss_before} -> {rss_after} KiB = {rss_per_machine:.1} KiB/machine, {drifted} not Available",
        errors1 - errors0,
        cpu_secs * 100.0 / elapsed.as_secs_f64(),
    );
    println!(
        "ROW\tpolls/s, {machines} machines every {}s (anchor: the rate asked)\t{rate:.1}\t{asked:.1}\tpolls/s",
        interval.as_secs()
    );
    println!("ROW\toperator CPU per machine\t{cpu_us_per_machine_s:.2}\t-\tCPU-µs per machine per s");
    println!("ROW\toperator CPU per poll\t{cpu_us_per_poll:.0}\t-\tCPU-µs");
    println!("ROW\toperator RSS per machine\t{rss_per_machine:.1}\t-\tKiB");
    drop(sims);
}

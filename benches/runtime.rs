//! Resource runtime figures: watch fan-out throughput, latency of a three-controller chain
//! over 10 000 resources, and memory per 100 000 resources — each beside its floor measured in
//! the same run: a bare Tokio broadcast channel fanning out the same events, three tasks
//! passing a message over channels, and a plain map holding the same specs.
//!
//! `cargo bench --bench runtime` prints them, then `ROW<TAB>name<TAB>value<TAB>anchor<TAB>unit`
//! lines for `tests/bench`; nothing here asserts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use talosbox::controllers::generic_merge::{GenericMergeController, Mergeable};
use talosbox::controllers::generic_transform::TransformController;
use talosbox::cosi::{
    Controller, Event, InMemoryState, Registry, Resource, ResourceDefinition, ResourceSpec, Runtime, Sensitivity, State,
};
use tokio_util::sync::CancellationToken;

/// Counts live heap bytes, for the memory figure.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

macro_rules! spec_type {
    ($name:ident, $type_name:literal, $ns:literal { $($field:ident: $ty:ty),* }) => {
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        struct $name { $($field: $ty),* }
        impl ResourceSpec for $name {
            const DEFINITION: ResourceDefinition = ResourceDefinition {
                type_name: $type_name,
                aliases: &[],
                default_namespace: $ns,
                print_columns: &[],
                sensitivity: Sensitivity::NonSensitive,
            };
        }
    };
}

spec_type!(BenchInput, "BenchInputs.bench.talos.dev", "bench-in" { value: u64 });
spec_type!(BenchSpec, "BenchSpecs.bench.talos.dev", "bench-config" { key: String, layer: u8, value: u64 });
spec_type!(BenchStatus, "BenchStatuses.bench.talos.dev", "bench-out" { value: u64 });

impl Mergeable for BenchSpec {
    type Layer = u8;

    fn layer(&self) -> u8 {
        self.layer
    }

    fn merge_id(&self) -> String {
        self.key.clone()
    }
}

/// Stage 1: each input becomes a layered candidate; stage 3: each merged spec is "applied"
/// and reported as a status. Both are transform instances.
fn stages() -> (TransformController<BenchInput, BenchSpec>, TransformController<BenchSpec, BenchStatus>) {
    let config = TransformController::new(
        "BenchConfigController",
        "bench-in",
        "bench-config",
        |_, input: &Resource<BenchInput>| {
            Ok(Some(BenchSpec { key: input.id().to_string(), layer: 4, value: input.spec().value }))
        },
    )
    .with_output_id(|id| format!("machine/{id}"))
    .with_shared_output();
    let status =
        TransformController::new("BenchStatusController", "bench", "bench-out", |_, spec: &Resource<BenchSpec>| {
            Ok(Some(BenchStatus { value: spec.spec().value }))
        });
    (config, status)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn fanout(watchers: usize, updates: u64) -> (Duration, f64) {
    let state = State::new(Arc::new(InMemoryState::with_history(updates as usize + 16)));
    state.create(Resource::new("bench-in", "x", BenchInput { value: 0 }), "").expect("create");
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let mut watch = state.watch_kind::<BenchInput>("bench-in");
        tasks.push(tokio::spawn(async move {
            let mut seen = 0u64;
            while seen < updates {
                match watch.next().await {
                    Ok(Event::Updated { .. }) => seen += 1,
                    Ok(_) => {}
                    Err(e) => panic!("watcher failed: {e}"),
                }
            }
        }));
    }
    let start = Instant::now();
    let writer = {
        let state = state.clone();
        std::thread::spawn(move || {
            let mut current = state.get::<BenchInput>("bench-in", "x").expect("get");
            for v in 1..=updates {
                current = state.update(current.with_spec(BenchInput { value: v }), "").expect("update");
            }
        })
    };
    for t in tasks {
        t.await.expect("watcher");
    }
    writer.join().expect("writer");
    let elapsed = start.elapsed();
    (elapsed, updates as f64 / elapsed.as_secs_f64())
}

async fn chain(resources: u64, samples: u64) -> (Duration, Duration, Duration) {
    // Room for the initial burst, which the bench reads while the controllers write it.
    let state = State::new(Arc::new(InMemoryState::with_history(4 * resources as usize)));
    let (config, status) = stages();
    let controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(config),
        Box::new(GenericMergeController::<BenchSpec>::new("bench-config", "bench")),
        Box::new(status),
    ];
    let mut registry = Registry::new();
    for ns in ["bench-in", "bench-config", "bench", "bench-out"] {
        registry.add_namespace(ns, "").expect("namespace");
    }
    registry.register::<BenchInput>().expect("type");
    registry.register::<BenchSpec>().expect("type");
    registry.register::<BenchStatus>().expect("type");
    let mut runtime = Runtime::new(state.clone(), Arc::new(registry));
    for c in controllers {
        runtime.register_boxed(c).expect("register");
    }
    let cancel = CancellationToken::new();
    let task = tokio::spawn(runtime.run(cancel.clone()));

    let mut out = state.watch_kind::<BenchStatus>("bench-out");
    let start = Instant::now();
    for i in 0..resources {
        state.create(Resource::new("bench-in", format!("r{i:05}"), BenchInput { value: 0 }), "").expect("seed");
    }
    let mut ready = 0;
    while ready < resources {
        match out.next().await {
            Ok(Event::Created(_)) => ready += 1,
            Ok(_) => {}
            Err(e) => panic!("output watch failed: {e}"),
        }
    }
    let settle = start.elapsed();

    let mut latencies = Vec::with_capacity(samples as usize);
    for s in 0..samples {
        let id = format!("r{:05}", (s * 7919) % resources);
        let value = s + 1;
        let current = state.get::<BenchInput>("bench-in", &id).expect("get");
        let t0 = Instant::now();
        state.update(current.with_spec(BenchInput { value }), "").expect("update");
        loop {
            match out.next().await {
                Ok(Event::Updated { new, .. }) if new.metadata.id == id => {
                    if Resource::<BenchStatus>::from_any(&new).is_some_and(|r| r.spec().value == value) {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => panic!("output watch failed: {e}"),
            }
        }
        latencies.push(t0.elapsed());
    }
    cancel.cancel();
    let _ = task.await;
    latencies.sort();
    (percentile(&latencies, 0.5), percentile(&latencies, 0.99), settle)
}

fn memory(resources: u64) -> f64 {
    let state = State::in_memory();
    let before = LIVE.load(Ordering::SeqCst);
    for i in 0..resources {
        let spec = BenchSpec { key: format!("eth{}", i % 64), layer: 4, value: i };
        state
            .create(Resource::new("bench-config", format!("configuration/r{i:06}"), spec), "BenchConfigController")
            .expect("create");
    }
    let after = LIVE.load(Ordering::SeqCst);
    let bytes = (after - before) as f64;
    drop(state);
    bytes
}

/// The floor of fan-out: the same number of receivers on a bare broadcast channel, each
/// counting `updates` events (reference-counted, as the state's are).
async fn fanout_floor(watchers: usize, updates: u64) -> f64 {
    let (tx, _) = tokio::sync::broadcast::channel::<Arc<BenchInput>>(updates as usize + 16);
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let mut rx = tx.subscribe();
        tasks.push(tokio::spawn(async move {
            let mut seen = 0u64;
            while seen < updates {
                if rx.recv().await.is_ok() {
                    seen += 1;
                }
            }
        }));
    }
    let start = Instant::now();
    let writer = std::thread::spawn(move || {
        for v in 1..=updates {
            let _ = tx.send(Arc::new(BenchInput { value: v }));
        }
    });
    for t in tasks {
        t.await.expect("receiver");
    }
    writer.join().expect("writer");
    updates as f64 / start.elapsed().as_secs_f64()
}

/// The floor of a three-stage chain: three tasks passing a message along channels; p50, p99.
async fn chain_floor(samples: u64) -> (Duration, Duration) {
    let (first_tx, mut rx1) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let (tx2, mut rx2) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let (tx3, mut rx3) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let (tx_out, mut out) = tokio::sync::mpsc::unbounded_channel::<u64>();
    tokio::spawn(async move {
        while let Some(v) = rx1.recv().await {
            let _ = tx2.send(v);
        }
    });
    tokio::spawn(async move {
        while let Some(v) = rx2.recv().await {
            let _ = tx3.send(v);
        }
    });
    tokio::spawn(async move {
        while let Some(v) = rx3.recv().await {
            let _ = tx_out.send(v);
        }
    });
    let mut latencies = Vec::with_capacity(samples as usize);
    for s in 0..samples {
        let t0 = Instant::now();
        let _ = first_tx.send(s);
        let _ = out.recv().await;
        latencies.push(t0.elapsed());
    }
    latencies.sort();
    (percentile(&latencies, 0.5), percentile(&latencies, 0.99))
}

/// The floor of memory: the same specs under the same ids in a plain map.
fn memory_floor(resources: u64) -> f64 {
    let before = LIVE.load(Ordering::SeqCst);
    let mut map = std::collections::BTreeMap::new();
    for i in 0..resources {
        let spec = BenchSpec { key: format!("eth{}", i % 64), layer: 4, value: i };
        map.insert(format!("configuration/r{i:06}"), Arc::new(spec));
    }
    let bytes = (LIVE.load(Ordering::SeqCst) - before) as f64;
    drop(map);
    bytes
}

fn row(name: &str, value: f64, anchor: f64, unit: &str) {
    println!("ROW\t{name}\t{value:.1}\t{anchor:.1}\t{unit}");
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let mut rows = Vec::new();
    rt.block_on(async {
        println!("talosbox resource runtime bench ({} cores)", std::thread::available_parallelism().map_or(0, |n| n.get()));
        for (watchers, updates) in [(1usize, 200_000u64), (10, 100_000), (100, 20_000)] {
            let (elapsed, per_watcher) = fanout(watchers, updates).await;
            let floor = fanout_floor(watchers, updates).await;
            println!(
                "watch fan-out: {watchers:>3} kind-watchers, {updates} updates in {:.1} ms: {:.0} updates/s delivered to each watcher, {:.0} events/s in all (bare broadcast channel: {floor:.0}/s)",
                elapsed.as_secs_f64() * 1e3,
                per_watcher,
                per_watcher * watchers as f64
            );
            rows.push((format!("updates/s to each of {watchers} watchers"), per_watcher, floor, "updates/s"));
        }
        let (p50, p99, settle) = chain(10_000, 2_000).await;
        let (f50, f99) = chain_floor(2_000).await;
        println!(
            "chain input -> merge -> output over 10000 resources: p50 {:.1} us, p99 {:.1} us (initial 10000 settled in {:.1} ms; three bare channel hops: p50 {:.1} us, p99 {:.1} us)",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            settle.as_secs_f64() * 1e3,
            f50.as_secs_f64() * 1e6,
            f99.as_secs_f64() * 1e6
        );
        rows.push(("controller chain p50".into(), p50.as_secs_f64() * 1e6, f50.as_secs_f64() * 1e6, "us"));
        rows.push(("controller chain p99".into(), p99.as_secs_f64() * 1e6, f99.as_secs_f64() * 1e6, "us"));
    });
    let bytes = memory(100_000);
    let floor = memory_floor(100_000);
    println!(
        "memory: 100000 resources hold {:.1} MiB of heap ({:.0} bytes per resource; a plain map of the same specs: {:.0})",
        bytes / (1024.0 * 1024.0),
        bytes / 100_000.0,
        floor / 100_000.0
    );
    rows.push(("heap per resource".into(), bytes / 100_000.0, floor / 100_000.0, "bytes"));
    for (name, value, anchor, unit) in rows {
        row(&name, value, anchor, unit);
    }
}

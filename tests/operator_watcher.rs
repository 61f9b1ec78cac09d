//! The drift watcher and reconciler on the memory store with simulated nodes (no processes):
//! the Go watcher's behavioural table (a config diff or a version divergence marks an
//! Available machine Drifted; an in-sync node, an Installing, an already Drifted, a dryrun and
//! a disable machine are not written; a deleted machine is no error), a poll deliberately
//! interleaved with an apply that the conditional write must win, and the engine's whole
//! loop: install from maintenance, drift, re-apply, upgrade, unreachable nodes, panics,
//! deletion, orphaning.

use std::sync::Arc;
use std::time::Duration;

use talosbox::operator::engine::{Context, Engine, OperatorConfig, Queue};
use talosbox::operator::metrics::{self, Metrics, PollResult};
use talosbox::operator::model::{MachineState, MachineStatus, RECONCILE_MODE_ANNOTATION, TalosMachine};
use talosbox::operator::store::memory::MemoryStore;
use talosbox::operator::store::{FleetAdmin, Store};
use talosbox::operator::testing::{self, FakeNode, FakeNodes, key, machine, rendered};
use talosbox::operator::watcher::{self, PollOutcome};
use tokio::sync::mpsc;

struct Setup {
    store: Arc<MemoryStore>,
    nodes: Arc<FakeNodes>,
    ctx: Arc<Context>,
}

async fn setup(config: OperatorConfig) -> Setup {
    let store = Arc::new(MemoryStore::new());
    testing::seed_fleet(store.as_ref(), "default").await;
    let nodes = FakeNodes::new();
    let ctx = Context::new(store.clone(), nodes.clone(), Arc::new(Metrics::new()), config).unwrap();
    Setup { store, nodes, ctx }
}

/// A machine already Available, its node in sync (config rendered, version v1).
async fn available(s: &Setup, name: &str, mode: Option<&str>) -> TalosMachine {
    let mut m = machine(name);
    if let Some(mode) = mode {
        m.metadata.annotations.insert(RECONCILE_MODE_ANNOTATION.into(), mode.into());
    }
    let m = s.store.apply_machine(m).await.unwrap();
    let m = s.store.add_finalizer(&m.key(), &m.metadata.resource_version).await.unwrap();
    let text = rendered(&[]);
    let status = MachineStatus {
        state: Some(MachineState::Available),
        observed_version: "v1".into(),
        config_hash: talosbox::operator::render::hash(&text),
        observed_generation: 1,
        ..MachineStatus::default()
    };
    let m = s.store.update_status(&m.key(), &m.metadata.resource_version, &status).await.unwrap();
    s.nodes.set(name, FakeNode::configured("v1", &text));
    m
}

fn other_hostname() -> String {
    rendered(&["machine: {network: {hostname: changed-by-hand}}".into()])
}

fn queue() -> (Queue, mpsc::UnboundedReceiver<talosbox::operator::MachineKey>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Queue::from_sender(tx), rx)
}

// The Go operator's TestUpdateResourceStatusMarksDrift and TestUpdateResourceStatusMissingMachine.
#[tokio::test]
async fn the_watcher_table() {
    struct Case {
        name: &'static str,
        state: MachineState,
        mode: Option<&'static str>,
        node_version: &'static str,
        node_config_differs: bool,
        want_state: MachineState,
        want_written: bool,
        want_enqueued: bool,
    }
    use MachineState::*;
    let cases = [
        Case {
            name: "config-diff",
            state: Available,
            mode: None,
            node_version: "v1",
            node_config_differs: true,
            want_state: Drifted,
            want_written: true,
            want_enqueued: true,
        },
        Case {
            name: "version-divergence",
            state: Available,
            mode: None,
            node_version: "v0",
            node_config_differs: false,
            want_state: Drifted,
            want_written: true,
            want_enqueued: true,
        },
        Case {
            name: "in-sync",
            state: Available,
            mode: None,
            node_version: "v1",
            node_config_differs: false,
            want_state: Available,
            want_written: false,
            want_enqueued: false,
        },
        // Installing is not watchable: the poll reads it fresh and asks nothing of the node.
        Case {
            name: "installing",
            state: Installing,
            mode: None,
            node_version: "v1",
            node_config_differs: true,
            want_state: Installing,
            want_written: false,
            want_enqueued: false,
        },
        Case {
            name: "already-drifted",
            state: Drifted,
            mode: None,
            node_version: "v1",
            node_config_differs: true,
            want_state: Drifted,
            want_written: false,
            want_enqueued: true,
        },
        Case {
            name: "dryrun",
            state: Available,
            mode: Some("DryRun"),
            node_version: "v1",
            node_config_differs: true,
            want_state: Available,
            want_written: false,
            want_enqueued: true,
        },
        Case {
            name: "disable",
            state: Available,
            mode: Some("disable"),
            node_version: "v1",
            node_config_differs: true,
            want_state: Available,
            want_written: false,
            want_enqueued: true,
        },
    ];
    for c in cases {
        let s = setup(OperatorConfig::default()).await;
        let m = available(&s, c.name, c.mode).await;
        let m = if c.state != Available {
            let status = MachineStatus { state: Some(c.state), ..m.status.clone() };
            s.store.update_status(&m.key(), &m.metadata.resource_version, &status).await.unwrap()
        } else {
            m
        };
        s.nodes.update(c.name, |n| {
            n.version = c.node_version.into();
            if c.node_config_differs {
                n.config = Some(other_hostname());
            }
        });
        let (q, mut rx) = queue();
        let outcome = watcher::poll_once(&s.ctx, &q, &m.key()).await;
        let after = s.store.get(&m.key()).await.unwrap().unwrap();
        assert_eq!(after.state(), Some(c.want_state), "{}: {outcome:?}", c.name);
        let written = after.metadata.resource_version != m.metadata.resource_version;
        assert_eq!(written, c.want_written, "{}: written", c.name);
        let events = s.store.events(&m.key()).await.unwrap();
        assert_eq!(events.len(), usize::from(c.want_written), "{}: {events:?}", c.name);
        if c.want_written {
            let e = &events[0];
            assert_eq!((e.type_.as_str(), e.reason.as_str()), ("Warning", "NodeDriftDetected"));
            if c.node_config_differs {
                assert!(e.note.contains("changed-by-hand"), "the event carries the diff: {}", e.note);
            } else {
                assert!(e.note.contains("version: desired v1, node reports v0"), "{}", e.note);
            }
        }
        assert_eq!(rx.try_recv().is_ok(), c.want_enqueued, "{}: enqueued", c.name);
        if c.state == Installing {
            assert_eq!(outcome, PollOutcome::NotReady);
            assert_eq!(s.nodes.count(c.name, "dry_run"), 0, "an Installing machine's node is not asked");
        }
    }

    // A deleted machine is no error: the poll says it is gone and writes nothing.
    let s = setup(OperatorConfig::default()).await;
    let (q, mut rx) = queue();
    assert_eq!(watcher::poll_once(&s.ctx, &q, &key("never-was")).await, PollOutcome::Gone);
    assert!(rx.try_recv().is_err());
}

// A poll reads the machine (Available), asks the node, and while it waits for the dry run the
// reconciler applies and writes Installing. The poll's Drifted write must lose.
#[tokio::test]
async fn a_poll_racing_an_apply_cannot_overwrite_installing() {
    let s = setup(OperatorConfig::default()).await;
    let m = available(&s, "race", None).await;
    s.nodes.update("race", |n| n.config = Some(other_hostname()));
    let gate = s.nodes.gate_next_dry_run();
    let (q, mut rx) = queue();
    let ctx = s.ctx.clone();
    let poll = tokio::spawn(async move { watcher::poll_once(&ctx, &q, &key("race")).await });
    tokio::time::timeout(Duration::from_secs(10), gate.entered.notified()).await.expect("the poll reached the node");

    // The reconciler's move, conditional on what it read (the same version the poll read).
    let current = s.store.get(&key("race")).await.unwrap().unwrap();
    assert_eq!(current.metadata.resource_version, m.metadata.resource_version, "nothing wrote in between yet");
    let installing = MachineStatus { state: Some(MachineState::Installing), ..current.status.clone() };
    s.store.update_status(&current.key(), &current.metadata.resource_version, &installing).await.unwrap();
    gate.release.notify_one();

    let outcome = poll.await.unwrap();
    assert_eq!(outcome, PollOutcome::Polled { fetch: outcome_fetch(&outcome), ok: true, drift: true, marked: false });
    let after = s.store.get(&key("race")).await.unwrap().unwrap();
    assert_eq!(after.state(), Some(MachineState::Installing), "the stale poll did not stomp Installing");
    assert!(s.store.events(&key("race")).await.unwrap().is_empty(), "no drift event for a write that lost");
    assert!(rx.try_recv().is_ok(), "the drift still enqueues a reconcile, which reads the machine fresh");
}

fn outcome_fetch(o: &PollOutcome) -> Option<Duration> {
    match o {
        PollOutcome::Polled { fetch, .. } => *fetch,
        _ => None,
    }
}

fn fast() -> OperatorConfig {
    OperatorConfig {
        poll_interval: Duration::from_millis(150),
        readiness_retry: Duration::from_millis(50),
        readiness_retry_max: Duration::from_millis(200),
        health_recheck: Duration::from_millis(50),
        dryrun_requeue: Duration::from_millis(200),
        error_backoff: Duration::from_millis(50),
        error_backoff_max: Duration::from_millis(200),
        ..OperatorConfig::default()
    }
}

async fn eventually<F: Fn() -> Fut, Fut: std::future::Future<Output = bool>>(what: &str, f: F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "{what} did not happen within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn state(store: &MemoryStore, name: &str) -> Option<MachineState> {
    store.get(&key(name)).await.unwrap().and_then(|m| m.state())
}

fn start(s: &Setup) -> (Arc<Engine>, tokio_util::sync::CancellationToken, tokio::task::JoinHandle<()>) {
    let engine = Arc::new(Engine::new(s.ctx.clone()));
    let cancel = tokio_util::sync::CancellationToken::new();
    let (e, c) = (engine.clone(), cancel.clone());
    let handle = tokio::spawn(async move { e.run(c).await.unwrap() });
    (engine, cancel, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_is_installed_drifts_and_is_repaired() {
    let s = setup(fast()).await;
    s.nodes.set("n1", FakeNode::maintenance("v1"));
    let (engine, cancel, handle) = start(&s);
    s.store.apply_machine(machine("n1")).await.unwrap();

    // Pending -> Installing (maintenance apply) -> Available.
    eventually("n1 Available", || async { state(&s.store, "n1").await == Some(MachineState::Available) }).await;
    assert_eq!(s.nodes.count("n1", "apply_maintenance"), 1);
    assert_eq!(s.nodes.get("n1").config.as_deref(), Some(rendered(&[]).as_str()));
    let reasons =
        |evs: Vec<talosbox::operator::model::MachineEvent>| evs.into_iter().map(|e| e.reason).collect::<Vec<_>>();
    assert_eq!(reasons(s.store.events(&key("n1")).await.unwrap()), ["ConfigApplied", "Available"]);

    // Healthy and unchanged: polls go on, nothing is written, nothing reconciled.
    let rv = s.store.get(&key("n1")).await.unwrap().unwrap().metadata.resource_version;
    let polls = |s: &Setup| s.ctx.metrics.count(metrics::POLL_TOTAL, &key("n1"), Some(PollResult::Success));
    let before = polls(&s);
    eventually("three more polls", || async { polls(&s) >= before + 3 }).await;
    assert_eq!(s.store.get(&key("n1")).await.unwrap().unwrap().metadata.resource_version, rv, "no writes");
    assert_eq!(s.nodes.count("n1", "apply"), 0);
    assert_eq!(s.nodes.count("n1", "unhealthy"), 1, "no reconcile after the one that made it Available");
    assert_eq!(s.ctx.metrics.registered_now(), 1);

    // Out of band: someone applies another config to the node.
    s.nodes.update("n1", |n| n.config = Some(other_hostname()));
    eventually("the drift repaired", || async { s.nodes.get("n1").config.as_deref() == Some(rendered(&[]).as_str()) })
        .await;
    eventually("n1 Available again", || async {
        state(&s.store, "n1").await == Some(MachineState::Available)
            && s.store.events(&key("n1")).await.unwrap().len() >= 5
    })
    .await;
    let evs = reasons(s.store.events(&key("n1")).await.unwrap());
    assert_eq!(evs, ["ConfigApplied", "Available", "NodeDriftDetected", "ConfigApplied", "Available"]);
    assert_eq!(s.ctx.metrics.count(metrics::DRIFT_DETECTED_TOTAL, &key("n1"), None), 1);
    assert_eq!(s.nodes.count("n1", "apply"), 1, "a handled drift is applied once");

    // The node's version diverges: Upgrade with spec.image, Upgrading, then Available.
    s.nodes.update("n1", |n| n.version = "v0".into());
    eventually("upgraded", || async {
        s.nodes.count("n1", "upgrade") == 1 && state(&s.store, "n1").await == Some(MachineState::Available)
    })
    .await;
    assert_eq!(s.nodes.get("n1").version, "v1");
    let evs = reasons(s.store.events(&key("n1")).await.unwrap());
    assert!(evs.ends_with(&["NodeDriftDetected".into(), "UpgradeStarted".into(), "Available".into()]), "{evs:?}");

    cancel.cancel();
    handle.await.unwrap();
    assert_eq!(s.ctx.metrics.registered_now(), 0, "a stopped watcher counts nothing");
    drop(engine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_node_is_counted_never_drift() {
    let s = setup(fast()).await;
    available(&s, "down", None).await;
    s.nodes.update("down", |n| n.down = true);
    let (_engine, cancel, handle) = start(&s);
    eventually("three failed polls", || async {
        s.ctx.metrics.count(metrics::FETCH_ERRORS_TOTAL, &key("down"), None) >= 3
    })
    .await;
    assert_eq!(
        s.ctx.metrics.count(metrics::POLL_TOTAL, &key("down"), Some(PollResult::Error)),
        s.ctx.metrics.count(metrics::FETCH_ERRORS_TOTAL, &key("down"), None)
    );
    assert_eq!(state(&s.store, "down").await, Some(MachineState::Available));
    assert_eq!(s.ctx.metrics.count(metrics::DRIFT_DETECTED_TOTAL, &key("down"), None), 0);
    assert!(s.store.events(&key("down")).await.unwrap().is_empty());
    cancel.cancel();
    handle.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_poll_is_isolated_and_a_deleted_machine_stops_at_once() {
    let s = setup(fast()).await;
    available(&s, "bad", None).await;
    available(&s, "good", None).await;
    s.nodes.update("bad", |n| n.panic_on_dry_run = true);
    let (engine, cancel, handle) = start(&s);
    eventually("the panicking machine counted as failed polls", || async {
        s.ctx.metrics.count(metrics::POLL_TOTAL, &key("bad"), Some(PollResult::Error)) >= 2
    })
    .await;
    let good = s.ctx.metrics.count(metrics::POLL_TOTAL, &key("good"), Some(PollResult::Success));
    eventually("the other machine still polled", || async {
        s.ctx.metrics.count(metrics::POLL_TOTAL, &key("good"), Some(PollResult::Success)) > good + 1
    })
    .await;
    assert_eq!(s.ctx.metrics.registered_now(), 2);

    // Deleted: unregistered at once, its series gone, no more calls to its node.
    s.store.delete_machine(&key("good")).await.unwrap();
    // It has the operator's finalizer: the reconciler lets it go (policy preserve).
    eventually("good deleted", || async { s.store.get(&key("good")).await.unwrap().is_none() }).await;
    eventually("good unregistered", || async { !engine.watcher.has(&key("good")) }).await;
    let calls = s.nodes.count("good", "version");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(s.nodes.count("good", "version"), calls, "no poll after deletion");
    assert!(!s.ctx.metrics.render().contains("name=\"good\""), "its series are gone");
    assert_eq!(s.ctx.metrics.registered_now(), 1);
    assert_eq!(s.nodes.count("good", "reset"), 0, "deletionPolicy preserve leaves the node");
    cancel.cancel();
    handle.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dryrun_reports_disable_is_left_alone_and_reset_on_delete() {
    let s = setup(fast()).await;
    available(&s, "dry", Some("dryrun")).await;
    available(&s, "off", Some("DISABLE")).await;
    let mut reset = machine("gone");
    reset.spec.deletion_policy = talosbox::operator::model::DeletionPolicy::Reset;
    s.nodes.set("gone", FakeNode::maintenance("v1"));
    for n in ["dry", "off"] {
        s.nodes.update(n, |n| n.config = Some(other_hostname()));
    }
    let (_engine, cancel, handle) = start(&s);
    s.store.apply_machine(reset).await.unwrap();
    eventually("a DryRun event", || async {
        s.store
            .events(&key("dry"))
            .await
            .unwrap()
            .iter()
            .any(|e| e.reason == "DryRun" && e.note.contains("changed-by-hand"))
    })
    .await;
    eventually("off polled", || async { s.ctx.metrics.count(metrics::DRIFT_DETECTED_TOTAL, &key("off"), None) >= 2 })
        .await;
    for n in ["dry", "off"] {
        assert_eq!(state(&s.store, n).await, Some(MachineState::Available), "{n} never written");
        assert_eq!(s.nodes.count(n, "apply"), 0, "{n}'s node never written");
        assert!(s.store.events(&key(n)).await.unwrap().iter().all(|e| e.reason != "NodeDriftDetected"));
    }
    assert!(s.store.events(&key("off")).await.unwrap().is_empty());

    eventually("gone Available", || async { state(&s.store, "gone").await == Some(MachineState::Available) }).await;
    s.store.delete_machine(&key("gone")).await.unwrap();
    eventually("gone deleted", || async { s.store.get(&key("gone")).await.unwrap().is_none() }).await;
    assert_eq!(s.nodes.count("gone", "reset"), 1, "deletionPolicy reset resets the node");
    cancel.cancel();
    handle.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_whose_fleet_is_gone_is_orphaned_and_not_reset() {
    let s = setup(fast()).await;
    let mut m = machine("orphan");
    m.spec.deletion_policy = talosbox::operator::model::DeletionPolicy::Reset;
    s.nodes.set("orphan", FakeNode::maintenance("v1"));
    let (_engine, cancel, handle) = start(&s);
    s.store.apply_machine(m.clone()).await.unwrap();
    eventually("Available", || async { state(&s.store, "orphan").await == Some(MachineState::Available) }).await;
    s.store.delete_secret("default", "fleet").await.unwrap();
    m.spec.config.patches.push("machine: {network: {hostname: next}}".into());
    s.store.apply_machine(m).await.unwrap();
    eventually("Orphaned", || async { state(&s.store, "orphan").await == Some(MachineState::Orphaned) }).await;
    assert!(
        s.store
            .events(&key("orphan"))
            .await
            .unwrap()
            .iter()
            .any(|e| e.reason == "Orphaned" && e.note.contains("fleet"))
    );
    s.store.delete_machine(&key("orphan")).await.unwrap();
    eventually("deleted", || async { s.store.get(&key("orphan")).await.unwrap().is_none() }).await;
    assert_eq!(s.nodes.count("orphan", "reset"), 0, "an Orphaned machine is not reset");
    cancel.cancel();
    handle.await.unwrap();
}

#[test]
fn a_zero_poll_interval_is_refused() {
    let store = Arc::new(MemoryStore::new());
    let config = OperatorConfig { poll_interval: Duration::ZERO, ..OperatorConfig::default() };
    let e = Context::new(store, FakeNodes::new(), Arc::new(Metrics::new()), config).err().unwrap();
    assert!(e.to_string().contains("poll interval"), "{e}");
}

//! The operator's Kubernetes backend (kube-rs) against `operator::kube::fake`, an in-process
//! fake of the Kubernetes API server: no kube-apiserver can run on the machines these tests
//! run on, so the fake serves exactly what the backend uses (TalosMachine list/watch/get,
//! metadata and status merge patches answered 409 when their resourceVersion is stale,
//! events.k8s.io Events, Secrets, ConfigMaps, Leases) with the API server's semantics.
//!
//! The backend passes the same store conformance suite as the others, runs the same engine
//! (install, drift, repair) with events through the events API, and elects one leader of
//! two replicas with a Lease, the other taking over when the leader stops.
#![cfg(feature = "kubernetes")]

use std::sync::Arc;
use std::time::Duration;

use talosbox::operator::kube::fake::FakeApiServer;
use talosbox::operator::kube::{KubeStore, LEASE_NAME, run_elected};
use talosbox::operator::metrics::{self, Metrics, PollResult};
use talosbox::operator::model::MachineState;
use talosbox::operator::store::{FleetAdmin, Store};
use talosbox::operator::testing::{self, FakeNode, FakeNodes, key, machine, rendered};
use talosbox::operator::{Context, Engine, OperatorConfig, conformance};

fn fast() -> OperatorConfig {
    OperatorConfig {
        poll_interval: Duration::from_millis(200),
        readiness_retry: Duration::from_millis(50),
        readiness_retry_max: Duration::from_millis(200),
        health_recheck: Duration::from_millis(50),
        error_backoff: Duration::from_millis(50),
        error_backoff_max: Duration::from_millis(200),
        ..OperatorConfig::default()
    }
}

async fn eventually<F: Fn() -> Fut, Fut: std::future::Future<Output = bool>>(what: &str, f: F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "{what} did not happen within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_store_conforms() {
    let api = FakeApiServer::start().await.unwrap();
    let store = Arc::new(KubeStore::new(api.client(), None, "test"));
    conformance::run(store, &api, "kube").await;
    // The stale writes were answered by the API server with 409, not decided client-side.
    let conflicts: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|(m, p, code)| m == "PATCH" && p.ends_with("/status") && *code == 409)
        .collect();
    assert!(!conflicts.is_empty(), "no 409 on a status patch: {:?}", api.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_repairs_drift_through_the_api_server() {
    let api = FakeApiServer::start().await.unwrap();
    testing::seed_fleet(&api, "default").await;
    let nodes = FakeNodes::new();
    nodes.set("k1", FakeNode::maintenance("v1"));
    let store: Arc<dyn Store> = Arc::new(KubeStore::new(api.client(), Some("default".into()), "replica-a"));
    let metrics = Arc::new(Metrics::new());
    let ctx = Context::new(store.clone(), nodes.clone(), metrics.clone(), fast()).unwrap();
    let engine = Arc::new(Engine::new(ctx));
    let cancel = tokio_util::sync::CancellationToken::new();
    let run = {
        let (e, c) = (engine.clone(), cancel.clone());
        tokio::spawn(async move { e.run(c).await })
    };
    api.apply_machine(machine("k1")).await.unwrap();
    let state = |store: Arc<dyn Store>| async move { store.get(&key("k1")).await.unwrap().and_then(|m| m.state()) };
    eventually("k1 Available", || state(store.clone()).map_eq(Some(MachineState::Available))).await;

    nodes.update("k1", |n| n.config = Some(rendered(&["machine: {network: {hostname: by-hand}}".into()])));
    eventually("k1 repaired", || async {
        nodes.get("k1").config.as_deref() == Some(rendered(&[]).as_str())
            && state(store.clone()).await == Some(MachineState::Available)
            && api.events(&key("k1")).await.unwrap().iter().filter(|e| e.reason == "Available").count() == 2
    })
    .await;
    let reasons: Vec<String> = api.events(&key("k1")).await.unwrap().into_iter().map(|e| e.reason).collect();
    assert_eq!(reasons, ["ConfigApplied", "Available", "NodeDriftDetected", "ConfigApplied", "Available"]);
    // Events went through events.k8s.io/v1 with what the API server requires.
    let drift = api.raw_events().into_iter().find(|e| e["reason"] == "NodeDriftDetected").unwrap();
    assert_eq!(drift["type"], "Warning");
    assert_eq!(drift["regarding"]["kind"], "TalosMachine");
    assert_eq!(drift["reportingController"], "talosbox.dev/operator");
    assert!(drift["note"].as_str().unwrap().contains("by-hand"));
    assert_eq!(metrics.count(metrics::DRIFT_DETECTED_TOTAL, &key("k1"), None), 1);

    // Deleted through the API: the finalizer held it until the operator let it go.
    api.delete_machine(&key("k1")).await.unwrap();
    eventually("k1 gone", || async { store.get(&key("k1")).await.unwrap().is_none() }).await;
    eventually("k1 unregistered", || async { !engine.watcher.has(&key("k1")) }).await;
    cancel.cancel();
    run.await.unwrap().unwrap();
}

trait MapEq<T> {
    fn map_eq(self, want: T) -> impl std::future::Future<Output = bool>;
}

impl<F: std::future::Future<Output = T>, T: PartialEq> MapEq<T> for F {
    async fn map_eq(self, want: T) -> bool {
        self.await == want
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_of_two_leads_and_the_other_takes_over() {
    let api = FakeApiServer::start().await.unwrap();
    testing::seed_fleet(&api, "default").await;
    let nodes = FakeNodes::new();
    nodes.set("l1", FakeNode::configured("v1", &rendered(&[])));
    let lease = Duration::from_secs(1);
    let replica = |name: &'static str| {
        let metrics = Arc::new(Metrics::new());
        let cancel = tokio_util::sync::CancellationToken::new();
        let task = {
            let (client, metrics, nodes, cancel) = (api.client(), metrics.clone(), nodes.clone(), cancel.clone());
            tokio::spawn(async move {
                run_elected(client, "talosbox-system", name, lease, fast(), metrics, nodes, None, cancel).await.unwrap()
            })
        };
        (metrics, cancel, task)
    };
    let (ma, ca, ta) = replica("replica-a");
    eventually("a leads", || async { api.lease_holder("talosbox-system", LEASE_NAME).as_deref() == Some("replica-a") })
        .await;
    let (mb, cb, tb) = replica("replica-b");
    api.apply_machine(machine("l1")).await.unwrap();
    eventually("a polls l1", || async { ma.count(metrics::POLL_TOTAL, &key("l1"), Some(PollResult::Success)) >= 2 })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(api.lease_holder("talosbox-system", LEASE_NAME).as_deref(), Some("replica-a"), "a renews its Lease");
    assert_eq!(mb.count(metrics::POLL_TOTAL, &key("l1"), Some(PollResult::Success)), 0, "the follower does not poll");
    assert_eq!(mb.registered_now(), 0);

    // a stops (without releasing: as a crash would); b takes the Lease once it expires.
    ca.cancel();
    ta.await.unwrap();
    eventually("b leads", || async { api.lease_holder("talosbox-system", LEASE_NAME).as_deref() == Some("replica-b") })
        .await;
    eventually("b polls l1", || async { mb.count(metrics::POLL_TOTAL, &key("l1"), Some(PollResult::Success)) >= 1 })
        .await;
    cb.cancel();
    tb.await.unwrap();
}

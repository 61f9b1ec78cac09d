//! The store conformance suite (behind `test-harness`): what every [`Store`] backend must do
//! the same way — memory, SQLite and the Kubernetes API (through the fake API server) each
//! run it. Conditional writes above all: a write with a stale resourceVersion is a conflict,
//! and of two writers that read the same version exactly one wins.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::model::{MachineEvent, MachineState, MachineStatus, now_rfc3339};
use super::store::{FleetAdmin, Store, StoreError, WatchEvent};
use super::testing::machine;

async fn next_event(
    rx: &mut tokio::sync::mpsc::Receiver<WatchEvent>,
    want: impl Fn(&WatchEvent) -> bool,
) -> WatchEvent {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ev = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("no matching watch event within 20 s")
            .expect("the watch ended");
        if want(&ev) {
            return ev;
        }
    }
}

/// Runs every check against `store`, seeded through `admin`. Machines are named with
/// `prefix` so several runs can share a backend.
pub async fn run(store: Arc<dyn Store>, admin: &dyn FleetAdmin, prefix: &str) {
    let name = |s: &str| format!("{prefix}-{s}");
    let mut watch = store.watch().await.expect("watching");

    // Create: generation 1, a resourceVersion, no status; get and list see it.
    let mut m = machine(&name("a"));
    m.status.state = Some(MachineState::Available); // a user's status is not taken
    let created = admin.apply_machine(m.clone()).await.expect("creating");
    let key = created.key();
    assert_eq!(created.metadata.generation, 1);
    assert!(!created.metadata.resource_version.is_empty());
    assert_eq!(created.status, MachineStatus::default(), "apply does not write status");
    let got = store.get(&key).await.unwrap().expect("created machine is there");
    assert_eq!(got.spec, m.spec);
    assert_eq!(got.metadata.resource_version, created.metadata.resource_version);
    assert!(store.list().await.unwrap().iter().any(|x| x.key() == key));
    next_event(&mut watch, |e| matches!(e, WatchEvent::Applied(x) if x.key() == key)).await;
    assert_eq!(store.get(&crate::operator::MachineKey::new("default", name("none"))).await.unwrap(), None);

    // Status: conditional on the resourceVersion; the generation stays.
    let rv0 = created.metadata.resource_version.clone();
    let mut status = MachineStatus { state: Some(MachineState::Available), ..MachineStatus::default() };
    status.observed_version = "v1".into();
    let written = store.update_status(&key, &rv0, &status).await.expect("a status write at the current version");
    assert_ne!(written.metadata.resource_version, rv0);
    assert_eq!(written.metadata.generation, 1);
    assert_eq!(written.status.state, Some(MachineState::Available));
    assert_eq!(store.get(&key).await.unwrap().unwrap().status, written.status);
    let stale = store.update_status(&key, &rv0, &MachineStatus::default()).await.unwrap_err();
    assert!(stale.is_conflict(), "a stale write is a conflict: {stale}");
    assert_eq!(store.get(&key).await.unwrap().unwrap().status.state, Some(MachineState::Available));
    let missing = crate::operator::MachineKey::new("default", name("missing"));
    assert!(matches!(store.update_status(&missing, "1", &status).await, Err(StoreError::NotFound { .. })));

    // A spec change bumps the generation and keeps the status; the same spec changes nothing.
    let same = admin.apply_machine(m.clone()).await.unwrap();
    assert_eq!(same.metadata.resource_version, written.metadata.resource_version, "an unchanged apply writes nothing");
    let mut changed = m.clone();
    changed.spec.version = "v2".into();
    let changed = admin.apply_machine(changed).await.unwrap();
    assert_eq!(changed.metadata.generation, 2);
    assert_eq!(changed.status.state, Some(MachineState::Available), "apply keeps the status");
    assert!(
        store.update_status(&key, &written.metadata.resource_version, &status).await.unwrap_err().is_conflict(),
        "a spec change makes an earlier read stale"
    );

    // Two writers that read the same version: exactly one wins.
    let rv = changed.metadata.resource_version.clone();
    let drifted = MachineStatus { state: Some(MachineState::Drifted), ..status.clone() };
    let installing = MachineStatus { state: Some(MachineState::Installing), ..status.clone() };
    let (a, b) = tokio::join!(store.update_status(&key, &rv, &drifted), store.update_status(&key, &rv, &installing));
    assert!(a.is_ok() != b.is_ok(), "exactly one of two racing writes wins: {a:?} / {b:?}");
    let loser = if a.is_ok() { b } else { a };
    assert!(loser.unwrap_err().is_conflict());

    // Events, oldest first.
    for reason in ["First", "Second"] {
        let e = MachineEvent {
            type_: "Normal".into(),
            reason: reason.into(),
            action: reason.into(),
            note: "ü note".into(),
            time: now_rfc3339(),
        };
        store.record_event(&key, &e).await.unwrap();
    }
    let reasons: Vec<String> = admin.events(&key).await.unwrap().into_iter().map(|e| e.reason).collect();
    let first = reasons.iter().position(|r| r == "First").expect("event recorded");
    assert_eq!(reasons.get(first + 1).map(String::as_str), Some("Second"), "{reasons:?}");

    // Secrets and ConfigMaps.
    let data = BTreeMap::from([("k".to_string(), "v\nü".to_string())]);
    admin.put_secret("default", &name("s"), data.clone()).await.unwrap();
    admin.put_config_map("default", &name("c"), data.clone()).await.unwrap();
    assert_eq!(store.secret("default", &name("s")).await.unwrap(), Some(data.clone()));
    assert_eq!(store.config_map("default", &name("c")).await.unwrap(), Some(data.clone()));
    assert_eq!(store.secret("default", &name("c")).await.unwrap(), None, "a ConfigMap is not a Secret");
    admin.delete_secret("default", &name("s")).await.unwrap();
    assert_eq!(store.secret("default", &name("s")).await.unwrap(), None);

    // Finalizers hold a deletion until removed, conditionally; then the machine is gone.
    let now = store.get(&key).await.unwrap().unwrap();
    let held = store.add_finalizer(&key, &now.metadata.resource_version).await.unwrap();
    assert!(held.metadata.finalizers.iter().any(|f| f == crate::operator::model::FINALIZER));
    assert!(store.add_finalizer(&key, &now.metadata.resource_version).await.unwrap_err().is_conflict());
    assert!(admin.delete_machine(&key).await.unwrap());
    let deleting = store.get(&key).await.unwrap().expect("held by its finalizer");
    assert!(deleting.deleting());
    next_event(&mut watch, |e| matches!(e, WatchEvent::Applied(x) if x.key() == key && x.deleting())).await;
    assert!(store.remove_finalizer(&key, &held.metadata.resource_version).await.unwrap_err().is_conflict());
    store.remove_finalizer(&key, &deleting.metadata.resource_version).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None);
    next_event(&mut watch, |e| matches!(e, WatchEvent::Deleted(k) if *k == key)).await;

    // Without a finalizer a deletion is immediate.
    // (A watch may coalesce: a machine made and deleted between two looks is never seen,
    // which is all the engine needs. So the creation is awaited first.)
    let b = admin.apply_machine(machine(&name("b"))).await.unwrap();
    next_event(&mut watch, |e| matches!(e, WatchEvent::Applied(x) if x.key() == b.key())).await;
    assert!(admin.delete_machine(&b.key()).await.unwrap());
    assert_eq!(store.get(&b.key()).await.unwrap(), None);
    next_event(&mut watch, |e| matches!(e, WatchEvent::Deleted(k) if *k == b.key())).await;
    assert!(!admin.delete_machine(&b.key()).await.unwrap(), "deleting what is gone says so");

    // A machine that is not valid is refused, naming the field.
    let mut bad = machine(&name("c"));
    bad.spec.endpoint.clear();
    let e = admin.apply_machine(bad).await.unwrap_err().to_string();
    assert!(e.contains("spec.endpoint"), "{e}");
}

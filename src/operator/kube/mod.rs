//! The operator's Kubernetes backend (the `kubernetes` feature): TalosMachine custom resources
//! (`talosbox operator crd`), Secrets and ConfigMaps read through the API server with kube-rs,
//! events through `events.k8s.io/v1`, and leader election with a `coordination.k8s.io/v1`
//! Lease, so that of several replicas only one polls and reconciles.
//!
//! Status and finalizer writes are JSON merge patches carrying `metadata.resourceVersion`:
//! the API server refuses a stale one with 409 Conflict, which becomes
//! [`StoreError::Conflict`] — the same conditional write as the standalone store's.
//!
//! Tested against [`fake`], an in-process stand-in for the API server (no kube-apiserver can
//! run on the machines this is built on): it serves exactly the requests made here.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent as KubeWatchEvent,
    WatchParams,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::engine::{Context, Engine, EngineError, OperatorConfig};
use super::metrics::Metrics;
use super::model::{FINALIZER, MachineEvent, MachineKey, MachineStatus, TalosMachine};
use super::node::NodeClient;
use super::store::{Store, StoreError, WatchEvent, resync};

#[cfg(feature = "test-harness")]
pub mod fake;

/// The name of the events' reporting controller.
pub const REPORTING_CONTROLLER: &str = "talosbox.dev/operator";
/// The leader-election Lease's name.
pub const LEASE_NAME: &str = "talosbox-operator";

fn resource() -> ApiResource {
    ApiResource {
        group: super::model::GROUP.into(),
        version: super::model::VERSION.into(),
        api_version: super::model::API_VERSION.into(),
        kind: super::model::KIND.into(),
        plural: super::model::PLURAL.into(),
    }
}

/// The TalosMachines of one namespace, or of all.
pub struct KubeStore {
    client: kube::Client,
    namespace: Option<String>,
    /// Names this replica in the events it reports.
    instance: String,
}

impl KubeStore {
    pub fn new(client: kube::Client, namespace: Option<String>, instance: &str) -> KubeStore {
        KubeStore { client, namespace, instance: instance.to_string() }
    }

    fn machines(&self) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource()),
            None => Api::all_with(self.client.clone(), &resource()),
        }
    }

    fn machines_in(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &resource())
    }

    fn error(&self, key: Option<&MachineKey>, expected: &str, e: kube::Error) -> StoreError {
        if let (Some(key), kube::Error::Api(status)) = (key, &e) {
            match status.code {
                409 => return StoreError::Conflict { key: key.clone(), expected: expected.to_string() },
                404 => return StoreError::NotFound { key: key.clone() },
                _ => {}
            }
        }
        StoreError::Backend { store: "kubernetes".into(), detail: e.to_string() }
    }
}

fn decode(obj: DynamicObject) -> Result<TalosMachine, StoreError> {
    let what = format!(
        "{}/{}",
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default()
    );
    serde_json::to_value(&obj)
        .and_then(serde_json::from_value)
        .map_err(|e| StoreError::Invalid { what: format!("TalosMachine {what}"), detail: e.to_string() })
}

/// A status as a merge patch: every field present, absent ones as null, so the patch
/// replaces the status rather than merging into it.
fn status_patch(status: &MachineStatus) -> serde_json::Value {
    let mut v = serde_json::to_value(status).unwrap_or_else(|_| serde_json::json!({}));
    if let Some(map) = v.as_object_mut() {
        for field in ["state", "observedVersion", "configHash", "observedGeneration", "imported", "conditions"] {
            map.entry(field).or_insert(serde_json::Value::Null);
        }
    }
    v
}

fn text_data(
    data: Option<BTreeMap<String, k8s_openapi::ByteString>>,
    strings: Option<BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> =
        data.unwrap_or_default().into_iter().filter_map(|(k, v)| String::from_utf8(v.0).ok().map(|s| (k, s))).collect();
    out.extend(strings.unwrap_or_default());
    out
}

impl KubeStore {
    async fn patch_metadata(
        &self,
        key: &MachineKey,
        expected: &str,
        finalizers: Vec<String>,
    ) -> Result<TalosMachine, StoreError> {
        let patch = serde_json::json!({"metadata": {"resourceVersion": expected, "finalizers": finalizers}});
        let obj = self
            .machines_in(&key.namespace)
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| self.error(Some(key), expected, e))?;
        decode(obj)
    }

    async fn current(&self, key: &MachineKey, expected: &str) -> Result<TalosMachine, StoreError> {
        let m = self.get(key).await?.ok_or_else(|| StoreError::NotFound { key: key.clone() })?;
        if m.metadata.resource_version != expected {
            return Err(StoreError::Conflict { key: key.clone(), expected: expected.to_string() });
        }
        Ok(m)
    }
}

#[async_trait]
impl Store for KubeStore {
    fn name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("kubernetes (namespace {ns})"),
            None => "kubernetes (all namespaces)".into(),
        }
    }

    async fn list(&self) -> Result<Vec<TalosMachine>, StoreError> {
        let list = self.machines().list(&ListParams::default()).await.map_err(|e| self.error(None, "", e))?;
        list.items.into_iter().map(decode).collect()
    }

    async fn get(&self, key: &MachineKey) -> Result<Option<TalosMachine>, StoreError> {
        let obj =
            self.machines_in(&key.namespace).get_opt(&key.name).await.map_err(|e| self.error(Some(key), "", e))?;
        obj.map(decode).transpose()
    }

    async fn update_status(
        &self,
        key: &MachineKey,
        expected: &str,
        status: &MachineStatus,
    ) -> Result<TalosMachine, StoreError> {
        let patch = serde_json::json!({"metadata": {"resourceVersion": expected}, "status": status_patch(status)});
        let obj = self
            .machines_in(&key.namespace)
            .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| self.error(Some(key), expected, e))?;
        decode(obj)
    }

    async fn add_finalizer(&self, key: &MachineKey, expected: &str) -> Result<TalosMachine, StoreError> {
        let m = self.current(key, expected).await?;
        if m.metadata.finalizers.iter().any(|f| f == FINALIZER) {
            return Ok(m);
        }
        let mut finalizers = m.metadata.finalizers.clone();
        finalizers.push(FINALIZER.into());
        self.patch_metadata(key, expected, finalizers).await
    }

    async fn remove_finalizer(&self, key: &MachineKey, expected: &str) -> Result<(), StoreError> {
        let m = self.current(key, expected).await?;
        let finalizers = m.metadata.finalizers.into_iter().filter(|f| f != FINALIZER).collect();
        match self.patch_metadata(key, expected, finalizers).await {
            Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn record_event(&self, key: &MachineKey, event: &MachineEvent) -> Result<(), StoreError> {
        let uid = self.get(key).await.ok().flatten().map(|m| m.metadata.uid).filter(|u| !u.is_empty());
        let now = jiff_now();
        let e = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", key.name)),
                namespace: Some(key.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: Some(event.note.clone()),
            type_: Some(event.type_.clone()),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(ObjectReference {
                api_version: Some(super::model::API_VERSION.into()),
                kind: Some(super::model::KIND.into()),
                name: Some(key.name.clone()),
                namespace: Some(key.namespace.clone()),
                uid,
                ..ObjectReference::default()
            }),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &key.namespace);
        api.create(&PostParams::default(), &e).await.map_err(|err| self.error(None, "", err))?;
        Ok(())
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let s = api.get_opt(name).await.map_err(|e| self.error(None, "", e))?;
        Ok(s.map(|s| text_data(s.data, s.string_data)))
    }

    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let c = api.get_opt(name).await.map_err(|e| self.error(None, "", e))?;
        Ok(c.map(|c| c.data.unwrap_or_default()))
    }

    async fn watch(&self) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        let (tx, rx) = mpsc::channel(4096);
        let api = self.machines();
        // The first list happens here, so an unreachable API server is an error now.
        let first = api.list(&ListParams::default()).await.map_err(|e| self.error(None, "", e))?;
        tokio::spawn(async move {
            let mut known: HashMap<MachineKey, String> = HashMap::new();
            let mut listed = Some(first);
            let mut backoff = Duration::from_millis(200);
            loop {
                let list = match listed.take() {
                    Some(l) => l,
                    None => match api.list(&ListParams::default()).await {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::warn!("kubernetes: listing TalosMachines: {e}");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(30));
                            continue;
                        }
                    },
                };
                let mut version = list.metadata.resource_version.clone().unwrap_or_default();
                let machines: Vec<TalosMachine> = list.items.into_iter().filter_map(|o| decode(o).ok()).collect();
                for event in resync(&mut known, machines) {
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
                let stream = match api.watch(&WatchParams::default().timeout(290), &version).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("kubernetes: watching TalosMachines: {e}");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                        continue;
                    }
                };
                backoff = Duration::from_millis(200);
                let mut stream = stream.boxed();
                loop {
                    let event = match stream.try_next().await {
                        Ok(Some(e)) => e,
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!("kubernetes: the TalosMachine watch failed: {e}");
                            break;
                        }
                    };
                    let out = match event {
                        KubeWatchEvent::Added(o) | KubeWatchEvent::Modified(o) => match decode(o) {
                            Ok(m) => {
                                version = m.metadata.resource_version.clone();
                                known.insert(m.key(), version.clone());
                                WatchEvent::Applied(Box::new(m))
                            }
                            Err(e) => {
                                tracing::warn!("kubernetes: {e}");
                                continue;
                            }
                        },
                        KubeWatchEvent::Deleted(o) => {
                            let key = MachineKey::new(
                                o.metadata.namespace.unwrap_or_default(),
                                o.metadata.name.unwrap_or_default(),
                            );
                            known.remove(&key);
                            WatchEvent::Deleted(key)
                        }
                        KubeWatchEvent::Bookmark(b) => {
                            version = b.metadata.resource_version;
                            continue;
                        }
                        KubeWatchEvent::Error(status) => {
                            // 410 Gone: the version is too old; list again.
                            tracing::info!("kubernetes: watch ended: {status}; listing again");
                            break;
                        }
                    };
                    if tx.send(out).await.is_err() {
                        return;
                    }
                }
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(rx)
    }
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// Whether `identity` holds (or took, or renewed) the Lease after this call.
pub async fn try_lead(api: &Api<Lease>, name: &str, identity: &str, duration: Duration) -> Result<bool, kube::Error> {
    let now = jiff_now();
    let seconds = duration.as_secs().max(1) as i32;
    let spec = |transitions: Option<i32>, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(seconds),
        acquire_time: acquired.or(Some(MicroTime(now))),
        renew_time: Some(MicroTime(now)),
        lease_transitions: transitions,
        ..LeaseSpec::default()
    };
    let Some(lease) = api.get_opt(name).await? else {
        let lease = Lease {
            metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
            spec: Some(spec(Some(0), None)),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let current = lease.spec.clone().unwrap_or_default();
    let holder = current.holder_identity.clone().unwrap_or_default();
    let held_for = current.lease_duration_seconds.unwrap_or(seconds).max(1) as i64;
    let expired = current.renew_time.as_ref().map(|t| now.as_second() - t.0.as_second() > held_for).unwrap_or(true);
    let new_spec = if holder == identity {
        spec(current.lease_transitions, current.acquire_time.clone())
    } else if holder.is_empty() || expired {
        spec(Some(current.lease_transitions.unwrap_or(0) + 1), None)
    } else {
        return Ok(false);
    };
    // Replace carries the resourceVersion read: of two replicas taking an expired Lease, one
    // gets 409 and stays a follower.
    let updated = Lease { metadata: lease.metadata.clone(), spec: Some(new_spec) };
    match api.replace(name, &PostParams::default(), &updated).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// How long a Lease is held without renewal before another replica may take it.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

/// Runs the engine on the Kubernetes store while this replica holds the Lease
/// `lease_namespace/talosbox-operator`; stops it as soon as the Lease is lost (before another
/// replica can have taken it) and campaigns again.
pub async fn run_with_leader_election(
    client: kube::Client,
    lease_namespace: &str,
    identity: &str,
    config: OperatorConfig,
    metrics: Arc<Metrics>,
    nodes: Arc<dyn NodeClient>,
    cancel: CancellationToken,
) -> Result<(), EngineError> {
    run_elected(client, lease_namespace, identity, LEASE_DURATION, config, metrics, nodes, None, cancel).await
}

/// [`run_with_leader_election`] with the Lease duration and the store's namespace given.
#[allow(clippy::too_many_arguments)]
pub async fn run_elected(
    client: kube::Client,
    lease_namespace: &str,
    identity: &str,
    lease_duration: Duration,
    config: OperatorConfig,
    metrics: Arc<Metrics>,
    nodes: Arc<dyn NodeClient>,
    namespace: Option<String>,
    cancel: CancellationToken,
) -> Result<(), EngineError> {
    config.validate()?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), lease_namespace);
    let renew_every = lease_duration / 3;
    while !cancel.is_cancelled() {
        match try_lead(&leases, LEASE_NAME, identity, lease_duration).await {
            Ok(true) => {}
            Ok(false) => {
                tokio::select! { _ = cancel.cancelled() => break, _ = tokio::time::sleep(renew_every) => continue }
            }
            Err(e) => {
                tracing::warn!("leader election: {e}");
                tokio::select! { _ = cancel.cancelled() => break, _ = tokio::time::sleep(renew_every) => continue }
            }
        }
        tracing::info!(identity, "leading: the operator runs");
        let store: Arc<dyn Store> = Arc::new(KubeStore::new(client.clone(), namespace.clone(), identity));
        let ctx = Context::new(store, nodes.clone(), metrics.clone(), config.clone())?;
        let engine = Arc::new(Engine::new(ctx));
        let term = cancel.child_token();
        let mut running = {
            let (engine, term) = (engine.clone(), term.clone());
            tokio::spawn(async move { engine.run(term).await })
        };
        let mut last_renewal = tokio::time::Instant::now();
        let mut ended = None;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(renew_every) => {}
                // An engine that stopped by itself (its watch could not start) must not leave a
                // leader that does nothing: stand down and campaign again.
                outcome = &mut running => {
                    ended = Some(outcome);
                    break;
                }
            }
            match try_lead(&leases, LEASE_NAME, identity, lease_duration).await {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::warn!(identity, "leader election: the Lease was taken; stopping");
                    break;
                }
                // Give up before the Lease can expire for the others.
                Err(e) if last_renewal.elapsed() + renew_every >= lease_duration => {
                    tracing::warn!(identity, "leader election: cannot renew the Lease ({e}); stopping");
                    break;
                }
                Err(e) => tracing::warn!(identity, "leader election: renewing: {e}"),
            }
        }
        term.cancel();
        let outcome = match ended {
            Some(o) => o,
            None => running.await,
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!("the engine stopped: {e}");
                tokio::select! { _ = cancel.cancelled() => {}, _ = tokio::time::sleep(renew_every) => {} }
            }
            Err(e) => tracing::warn!("the engine's task failed: {e}"),
        }
    }
    Ok(())
}

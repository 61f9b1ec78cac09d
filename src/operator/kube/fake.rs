//! A fake Kubernetes API server, in process, for testing the Kubernetes backend where no
//! kube-apiserver can run (behind `test-harness`). It speaks HTTP/1.1 and JSON on loopback
//! and covers what the backend sends, with the API server's semantics for each:
//! - TalosMachines: list (one namespace or all) with the list's resourceVersion, watch
//!   (`?watch=true&resourceVersion=N`: the events after N replayed, then new ones streamed as
//!   JSON lines), get, merge patches of the object's metadata and of the status subresource —
//!   a patch whose `metadata.resourceVersion` is not the current one is answered 409
//!   Conflict and changes nothing; a deleting object whose last finalizer goes is deleted;
//! - events.k8s.io/v1 Events: create;
//! - Secrets and ConfigMaps: get;
//! - coordination.k8s.io/v1 Leases: get, create (409 if it exists), update (409 when stale).
//!
//! Anything else is 404 with a Status, so a request the backend starts making is noticed.
//! Users change the fleet through its [`FleetAdmin`] side, as kubectl would.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::operator::model::{MachineEvent, MachineKey, TalosMachine, now_rfc3339};
use crate::operator::store::{FleetAdmin, StoreError, admit, merge_apply};

type Body = BoxBody<Bytes, Infallible>;

#[derive(Default)]
struct State {
    rv: u64,
    uid: u64,
    machines: BTreeMap<(String, String), Value>,
    /// Every watch event, as (resourceVersion, type, object).
    history: Vec<(u64, &'static str, Value)>,
    watchers: Vec<(Option<String>, mpsc::Sender<Bytes>)>,
    secrets: BTreeMap<(String, String), Value>,
    config_maps: BTreeMap<(String, String), Value>,
    leases: BTreeMap<(String, String), Value>,
    events: Vec<Value>,
    /// Every request: method, path, and the status answered.
    requests: Vec<(String, String, u16)>,
}

impl State {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Records a watch event and sends it to the watchers of its namespace.
    fn emit(&mut self, kind: &'static str, obj: Value) {
        let rv = self.rv;
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or("").to_string();
        let line = Bytes::from(format!("{}\n", json!({"type": kind, "object": obj})));
        self.history.push((rv, kind, obj));
        self.watchers.retain(|(wns, tx)| {
            if wns.as_ref().is_some_and(|w| *w != ns) {
                return !tx.is_closed();
            }
            tx.try_send(line.clone()).is_ok() || !tx.is_closed()
        });
    }

    /// Stores a machine object at a new resourceVersion (or deletes it, when deleting with no
    /// finalizers left).
    fn store_machine(&mut self, mut obj: Value) -> Value {
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = (
            obj["metadata"]["namespace"].as_str().unwrap_or("").to_string(),
            obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
        );
        let finalizers_empty = obj["metadata"]["finalizers"].as_array().is_none_or(|f| f.is_empty());
        if !obj["metadata"]["deletionTimestamp"].is_null() && finalizers_empty {
            self.machines.remove(&key);
            self.emit("DELETED", obj.clone());
        } else {
            let kind = if self.machines.contains_key(&key) { "MODIFIED" } else { "ADDED" };
            self.machines.insert(key, obj.clone());
            self.emit(kind, obj.clone());
        }
        obj
    }
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn status(code: u16, reason: &str, message: String) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}),
    )
}

fn full(code: u16, v: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

/// The fake server and its fleet.
pub struct FakeApiServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FakeApiServer {
    /// Starts a server on a free loopback port.
    pub async fn start() -> std::io::Result<FakeApiServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let stop = CancellationToken::new();
        let (st, cancel) = (state.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    _ = cancel.cancelled() => return,
                    a = listener.accept() => match a { Ok((s, _)) => s, Err(_) => continue },
                };
                let st = st.clone();
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, Infallible>(handle(&st, req).await) }
                    });
                    let conn =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    tokio::select! { _ = conn => {}, _ = cancel.cancelled() => {} }
                });
            }
        });
        Ok(FakeApiServer { addr, state, stop })
    }

    /// A kube client for this server (plain HTTP; namespace `default`).
    pub fn client(&self) -> kube::Client {
        let uri: http::Uri = format!("http://{}", self.addr).parse().expect("a loopback URL");
        let config = kube::Config::new(uri);
        kube::Client::try_from(config).expect("a kube client for the fake API server")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The requests answered so far: (method, path, status).
    pub fn requests(&self) -> Vec<(String, String, u16)> {
        self.lock().requests.clone()
    }

    /// The Lease's holder.
    pub fn lease_holder(&self, namespace: &str, name: &str) -> Option<String> {
        self.lock()
            .leases
            .get(&(namespace.into(), name.into()))
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
    }

    /// Makes the Lease look expired (its holder stopped renewing long ago).
    pub fn expire_lease(&self, namespace: &str, name: &str) {
        let mut st = self.lock();
        let rv = st.next_rv();
        if let Some(l) = st.leases.get_mut(&(namespace.into(), name.into())) {
            l["spec"]["renewTime"] = json!("2000-01-01T00:00:00.000000Z");
            l["metadata"]["resourceVersion"] = json!(rv.to_string());
        }
    }

    /// The Events created, as the API server holds them.
    pub fn raw_events(&self) -> Vec<Value> {
        self.lock().events.clone()
    }
}

async fn handle(state: &Arc<Mutex<State>>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query: BTreeMap<String, String> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Value = if body.is_empty() { Value::Null } else { serde_json::from_slice(&body).unwrap_or(Value::Null) };
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();

    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    if method == Method::GET && watch {
        let ns = match segments.as_slice() {
            ["apis", "talosbox.dev", "v1alpha1", "talosmachines"] => None,
            ["apis", "talosbox.dev", "v1alpha1", "namespaces", ns, "talosmachines"] => Some(ns.to_string()),
            _ => {
                let (code, v) = status(404, "NotFound", format!("no watch at {path}"));
                return full(code, &v);
            }
        };
        let from: u64 = query.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        let (tx, rx) = mpsc::channel::<Bytes>(4096);
        {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            st.requests.push(("WATCH".into(), path.clone(), 200));
            for (rv, kind, obj) in st.history.iter() {
                let in_ns = ns.as_ref().is_none_or(|n| obj["metadata"]["namespace"].as_str() == Some(n.as_str()));
                if *rv > from && in_ns {
                    let _ = tx.try_send(Bytes::from(format!("{}\n", json!({"type": kind, "object": obj}))));
                }
            }
            st.watchers.push((ns, tx));
        }
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
        });
        let mut r = Response::new(StreamBody::new(stream).boxed());
        r.headers_mut()
            .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
        return r;
    }

    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    let (code, v) = route(&mut st, &method, &segments, body);
    st.requests.push((method.to_string(), path, code));
    full(code, &v)
}

fn precondition(current: &Value, patch: &Value) -> Result<(), (u16, Value)> {
    let want = &patch["metadata"]["resourceVersion"];
    if want.is_null() || *want == current["metadata"]["resourceVersion"] {
        return Ok(());
    }
    Err(status(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on talosmachines.talosbox.dev {:?}: the object has been modified; please apply your changes to the latest version and try again",
            current["metadata"]["name"].as_str().unwrap_or("")
        ),
    ))
}

fn route(st: &mut State, method: &Method, segments: &[&str], body: Value) -> (u16, Value) {
    match (method, segments) {
        (&Method::GET, ["apis", "talosbox.dev", "v1alpha1", "talosmachines"]) => {
            let items: Vec<Value> = st.machines.values().cloned().collect();
            (
                200,
                json!({"apiVersion": "talosbox.dev/v1alpha1", "kind": "TalosMachineList", "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
            )
        }
        (&Method::GET, ["apis", "talosbox.dev", "v1alpha1", "namespaces", ns, "talosmachines"]) => {
            let items: Vec<Value> = st.machines.iter().filter(|((n, _), _)| n == ns).map(|(_, v)| v.clone()).collect();
            (
                200,
                json!({"apiVersion": "talosbox.dev/v1alpha1", "kind": "TalosMachineList", "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
            )
        }
        (_, ["apis", "talosbox.dev", "v1alpha1", "namespaces", ns, "talosmachines", name, rest @ ..]) => {
            let key = (ns.to_string(), name.to_string());
            let Some(current) = st.machines.get(&key).cloned() else {
                return status(404, "NotFound", format!("talosmachines.talosbox.dev {name:?} not found"));
            };
            match (method, rest) {
                (&Method::GET, [] | ["status"]) => (200, current),
                (&Method::PATCH, ["status"]) => {
                    if let Err(e) = precondition(&current, &body) {
                        return e;
                    }
                    let mut obj = current;
                    merge(&mut obj["status"], &body["status"]);
                    (200, st.store_machine(obj))
                }
                (&Method::PATCH, []) => {
                    if let Err(e) = precondition(&current, &body) {
                        return e;
                    }
                    let mut obj = current;
                    for field in ["finalizers", "annotations", "labels"] {
                        if let Some(v) = body["metadata"].get(field) {
                            merge(&mut obj["metadata"][field], v);
                        }
                    }
                    (200, st.store_machine(obj))
                }
                _ => status(405, "MethodNotAllowed", format!("{method} on a TalosMachine is not served here")),
            }
        }
        (&Method::POST, ["apis", "events.k8s.io", "v1", "namespaces", ns, "events"]) => {
            let mut e = body;
            st.uid += 1;
            let name = format!("{}{:x}", e["metadata"]["generateName"].as_str().unwrap_or("event."), st.uid);
            e["metadata"]["name"] = json!(name);
            e["metadata"]["namespace"] = json!(ns);
            let rv = st.next_rv();
            e["metadata"]["resourceVersion"] = json!(rv.to_string());
            if e["eventTime"].is_null()
                || e["reportingController"].is_null()
                || e["action"].is_null()
                || e["reason"].is_null()
            {
                return status(
                    422,
                    "Invalid",
                    "events.k8s.io/v1 Event: eventTime, reportingController, action and reason are required".into(),
                );
            }
            if e["note"].as_str().is_some_and(|n| n.len() > 1024) {
                return status(422, "Invalid", "note: Too long: may not be longer than 1024".into());
            }
            st.events.push(e.clone());
            (201, e)
        }
        (&Method::GET, ["api", "v1", "namespaces", ns, kind @ ("secrets" | "configmaps"), name]) => {
            let key = (ns.to_string(), name.to_string());
            let found = if *kind == "secrets" { st.secrets.get(&key) } else { st.config_maps.get(&key) };
            match found {
                Some(v) => (200, v.clone()),
                None => status(404, "NotFound", format!("{kind} {name:?} not found")),
            }
        }
        (&Method::GET, ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", name]) => {
            match st.leases.get(&(ns.to_string(), name.to_string())) {
                Some(l) => (200, l.clone()),
                None => status(404, "NotFound", format!("leases.coordination.k8s.io {name:?} not found")),
            }
        }
        (&Method::POST, ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases"]) => {
            let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
            let key = (ns.to_string(), name.clone());
            if st.leases.contains_key(&key) {
                return status(409, "AlreadyExists", format!("leases.coordination.k8s.io {name:?} already exists"));
            }
            let mut l = body;
            let rv = st.next_rv();
            l["metadata"]["resourceVersion"] = json!(rv.to_string());
            l["metadata"]["namespace"] = json!(ns);
            st.leases.insert(key, l.clone());
            (201, l)
        }
        (&Method::PUT, ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", name]) => {
            let key = (ns.to_string(), name.to_string());
            let Some(current) = st.leases.get(&key).cloned() else {
                return status(404, "NotFound", format!("leases.coordination.k8s.io {name:?} not found"));
            };
            if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on leases.coordination.k8s.io {name:?}: the object has been modified"
                    ),
                );
            }
            let mut l = body;
            let rv = st.next_rv();
            l["metadata"]["resourceVersion"] = json!(rv.to_string());
            st.leases.insert(key, l.clone());
            (200, l)
        }
        _ => status(404, "NotFound", format!("the fake API server does not serve {method} /{}", segments.join("/"))),
    }
}

fn to_machine(v: &Value) -> Result<TalosMachine, StoreError> {
    serde_json::from_value(v.clone())
        .map_err(|e| StoreError::Invalid { what: "TalosMachine".into(), detail: e.to_string() })
}

#[async_trait]
impl FleetAdmin for FakeApiServer {
    async fn apply_machine(&self, machine: TalosMachine) -> Result<TalosMachine, StoreError> {
        let machine = admit(machine)?;
        let key = machine.key();
        let mut st = self.lock();
        let k = (key.namespace.clone(), key.name.clone());
        let existing = st.machines.get(&k).map(to_machine).transpose()?;
        let (mut merged, changed) = merge_apply(existing.as_ref(), machine);
        if !changed {
            return Ok(merged);
        }
        if existing.is_none() {
            st.uid += 1;
            merged.metadata.uid = format!("00000000-0000-0000-0000-{:012x}", st.uid);
        }
        let obj = serde_json::to_value(&merged)
            .map_err(|e| StoreError::Invalid { what: key.to_string(), detail: e.to_string() })?;
        to_machine(&st.store_machine(obj))
    }

    async fn delete_machine(&self, key: &MachineKey) -> Result<bool, StoreError> {
        let mut st = self.lock();
        let Some(mut obj) = st.machines.get(&(key.namespace.clone(), key.name.clone())).cloned() else {
            return Ok(false);
        };
        if obj["metadata"]["deletionTimestamp"].is_null() {
            obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            st.store_machine(obj);
        }
        Ok(true)
    }

    async fn put_secret(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) -> Result<(), StoreError> {
        let data: BTreeMap<String, String> =
            data.into_iter().map(|(k, v)| (k, base64::engine::general_purpose::STANDARD.encode(v))).collect();
        let obj = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "type": "Opaque", "data": data});
        self.lock().secrets.insert((namespace.into(), name.into()), obj);
        Ok(())
    }

    async fn put_config_map(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<(), StoreError> {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data});
        self.lock().config_maps.insert((namespace.into(), name.into()), obj);
        Ok(())
    }

    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        self.lock().secrets.remove(&(namespace.into(), name.into()));
        Ok(())
    }

    async fn events(&self, key: &MachineKey) -> Result<Vec<MachineEvent>, StoreError> {
        Ok(self
            .lock()
            .events
            .iter()
            .filter(|e| {
                e["regarding"]["name"] == json!(key.name) && e["regarding"]["namespace"] == json!(key.namespace)
            })
            .map(|e| MachineEvent {
                type_: e["type"].as_str().unwrap_or("").into(),
                reason: e["reason"].as_str().unwrap_or("").into(),
                action: e["action"].as_str().unwrap_or("").into(),
                note: e["note"].as_str().unwrap_or("").into(),
                time: e["eventTime"].as_str().unwrap_or("").into(),
            })
            .collect())
    }
}

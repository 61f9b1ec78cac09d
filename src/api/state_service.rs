//! `cosi.resource.State` over the wire: Get, List and Watch of the node's resources, read-only.
//!
//! Two scopes. On machined's API socket the caller's roles (asserted by apid in `talos-role`)
//! decide access: sensitive types need `os:admin`, refused with PermissionDenied, never
//! answered with an empty list. On the private state sockets apid and trustd read, a fixed
//! allow-list of types decides, whatever the roles. Writes are not offered at all. Types are
//! accepted by any registered name; an empty namespace means the type's default one.

use std::sync::Arc;

use tonic::{Code, Request, Response, Status};

use super::stream::{BoxStream, produce};
use super::timestamp;
use crate::cosi::{
    Access, AnyResource, Event, IdQuery, LabelOp, LabelQuery, LabelTerm, ListOptions, Registry, State, StateError,
    StateView, WatchError, WatchOptions, WatchStart,
};
use crate::proto::cosi::resource as wire;

/// Who may read what through one State endpoint.
#[derive(Debug, Clone)]
pub enum Scope {
    /// By the caller's roles (machined's API socket).
    ByRole,
    /// Only these types, in full (a service's private state socket).
    Only(&'static [&'static str]),
}

pub struct StateService {
    state: State,
    registry: Arc<Registry>,
    scope: Scope,
}

impl StateService {
    pub fn new(state: State, registry: Arc<Registry>, scope: Scope) -> Self {
        StateService { state, registry, scope }
    }

    /// The view this request may read, and the type's full name and namespace.
    fn view<T>(
        &self,
        req: &Request<T>,
        type_name: &str,
        namespace: &str,
    ) -> Result<(StateView, String, String), Status> {
        let registered = self.registry.resolve(type_name).map_err(|e| Status::new(Code::NotFound, e.to_string()))?;
        let full = registered.type_name().to_string();
        let access = match &self.scope {
            Scope::ByRole => Access::for_roles(&super::roles(req.metadata())),
            Scope::Only(allowed) => {
                if !allowed.contains(&full.as_str()) {
                    return Err(Status::new(Code::PermissionDenied, format!("{full} is not readable here")));
                }
                Access::All
            }
        };
        let namespace = if namespace.is_empty() {
            registered.definition().default_namespace.to_string()
        } else {
            namespace.to_string()
        };
        Ok((StateView::new(self.state.clone(), self.registry.clone(), access), full, namespace))
    }
}

fn status(e: StateError) -> Status {
    let code = match &e {
        StateError::NotFound { .. } | StateError::UnknownType { .. } => Code::NotFound,
        StateError::PermissionDenied { .. } => Code::PermissionDenied,
        _ => Code::Internal,
    };
    Status::new(code, e.to_string())
}

/// A stored resource in COSI's wire form: both spec encodings where the type has both.
pub fn to_wire(r: &AnyResource) -> wire::Resource {
    let m = &r.metadata;
    wire::Resource {
        metadata: Some(wire::Metadata {
            namespace: m.namespace.clone(),
            r#type: m.type_name.clone(),
            id: m.id.clone(),
            version: m.version.to_string(),
            owner: m.owner.clone(),
            phase: m.phase.to_string(),
            created: Some(timestamp(m.created)),
            updated: Some(timestamp(m.updated)),
            finalizers: m.finalizers.iter().cloned().collect(),
            labels: m.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            annotations: m.annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }),
        spec: Some(wire::Spec {
            proto_spec: r.spec.to_proto().unwrap_or_default(),
            yaml_spec: r.spec.to_yaml().unwrap_or_default(),
        }),
    }
}

pub(crate) fn label_query(q: &wire::LabelQuery) -> Result<LabelQuery, Status> {
    use wire::label_term::Operation;
    let mut out = LabelQuery::all();
    for t in &q.terms {
        let op = Operation::try_from(t.op).map_err(|_| Status::invalid_argument(format!("label term op {}", t.op)))?;
        #[allow(deprecated)]
        let (op, invert) = match op {
            Operation::Exists => (LabelOp::Exists, t.invert),
            Operation::NotExists => (LabelOp::Exists, !t.invert),
            Operation::Equal => (LabelOp::Equal, t.invert),
            Operation::In => (LabelOp::In, t.invert),
            Operation::Lt => (LabelOp::Lt, t.invert),
            Operation::Lte => (LabelOp::Lte, t.invert),
            Operation::LtNumeric => (LabelOp::LtNumeric, t.invert),
            Operation::LteNumeric => (LabelOp::LteNumeric, t.invert),
        };
        out = out.with(LabelTerm { key: t.key.clone(), op, values: t.value.clone(), invert });
    }
    Ok(out)
}

fn list_options(labels: &[wire::LabelQuery], ids: Option<&wire::IdQuery>) -> Result<ListOptions, Status> {
    let labels = match labels {
        [] => LabelQuery::all(),
        [one] => label_query(one)?,
        _ => return Err(Status::invalid_argument("more than one label query (an OR of queries) is not supported")),
    };
    let ids = match ids.map(|q| q.regexp.as_str()).filter(|p| !p.is_empty()) {
        None => IdQuery::all(),
        Some(p) => IdQuery::regex(p).map_err(|e| Status::invalid_argument(format!("id query {p:?}: {e}")))?,
    };
    Ok(ListOptions { labels, ids })
}

fn event(kind: wire::EventType, resource: Option<&AnyResource>, old: Option<&AnyResource>) -> wire::Event {
    wire::Event {
        resource: resource.map(to_wire),
        event_type: kind as i32,
        old: old.map(to_wire),
        error: None,
        bookmark: None,
    }
}

#[tonic::async_trait]
impl wire::state_server::State for StateService {
    async fn get(&self, req: Request<wire::GetRequest>) -> Result<Response<wire::GetResponse>, Status> {
        let (view, full, ns) = self.view(&req, &req.get_ref().r#type, &req.get_ref().namespace)?;
        let r = view.get(&ns, &full, &req.get_ref().id).map_err(status)?;
        Ok(Response::new(wire::GetResponse { resource: Some(to_wire(&r)) }))
    }

    type ListStream = BoxStream<wire::ListResponse>;

    async fn list(&self, req: Request<wire::ListRequest>) -> Result<Response<Self::ListStream>, Status> {
        let (view, full, ns) = self.view(&req, &req.get_ref().r#type, &req.get_ref().namespace)?;
        let opts = req.get_ref().options.clone().unwrap_or_default();
        let options = list_options(&opts.label_query, opts.id_query.as_ref())?;
        let items: Vec<Result<wire::ListResponse, Status>> = view
            .list(&ns, &full, &options)
            .map_err(status)?
            .iter()
            .map(|r| Ok(wire::ListResponse { resource: Some(to_wire(r)) }))
            .collect();
        Ok(Response::new(Box::pin(futures::stream::iter(items))))
    }

    type WatchStream = BoxStream<wire::WatchResponse>;

    async fn watch(&self, req: Request<wire::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let (view, full, ns) = self.view(&req, &req.get_ref().r#type, &req.get_ref().namespace)?;
        let r = req.into_inner();
        let opts = r.options.unwrap_or_default();
        if opts.start_from_bookmark.is_some() {
            return Err(Status::unimplemented("resuming a watch from a bookmark is not supported"));
        }
        let v1 = r.api_version >= 1;
        let mut watch = match &r.id {
            Some(id) => view.watch(&ns, &full, id).map_err(status)?,
            None => {
                let start = if opts.bootstrap_contents {
                    WatchStart::Bootstrap
                } else if opts.tail_events > 0 {
                    WatchStart::Tail(opts.tail_events as usize)
                } else {
                    WatchStart::Live
                };
                let filter = list_options(&opts.label_query, opts.id_query.as_ref())?;
                view.watch_kind(&ns, &full, &WatchOptions { start, filter }).map_err(status)?
            }
        };
        let single = r.id.is_some();
        // Raced against the client going: a watch of a resource nobody changes would
        // otherwise wait here for ever.
        Ok(Response::new(produce(64, move |tx| async move {
            use wire::EventType as T;
            loop {
                let out = match watch.next().await {
                    Ok(Event::Created(r)) => event(T::Created, Some(&r), None),
                    Ok(Event::Updated { old, new }) => event(T::Updated, Some(&new), Some(&old)),
                    Ok(Event::Destroyed(r)) => event(T::Destroyed, Some(&r), None),
                    // Only kind watches of api_version 1 speak of bootstrapping.
                    Ok(Event::Bootstrapped) if v1 && !single => event(T::Bootstrapped, None, None),
                    Ok(Event::Bootstrapped) => continue,
                    Err(WatchError::Closed) => return,
                    Err(e) => {
                        let msg = e.to_string();
                        let item = if v1 {
                            Ok(wire::WatchResponse {
                                event: vec![wire::Event {
                                    event_type: T::Errored as i32,
                                    error: Some(msg),
                                    ..Default::default()
                                }],
                            })
                        } else {
                            Err(Status::aborted(msg))
                        };
                        let _ = tx.send(item).await;
                        return;
                    }
                };
                if tx.send(Ok(wire::WatchResponse { event: vec![out] })).await.is_err() {
                    return;
                }
            }
        })))
    }
}

//! The state: the contract every backend keeps, its errors and watch events, and the typed
//! facade controllers and the API use.
//!
//! A backend stores type-erased resources and enforces the write rules (versions, owners,
//! phases, finalizers); it never interprets a spec.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::broadcast;

use super::resource::{AnyResource, LabelQuery, Resource, ResourceSpec};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("resource {reference} not found")]
    NotFound { reference: String },
    #[error("resource {reference} already exists")]
    AlreadyExists { reference: String },
    #[error("resource {reference}: version conflict: expected {expected}, found {actual}")]
    VersionConflict { reference: String, expected: u64, actual: u64 },
    #[error("resource {reference} is owned by {owner:?}; refusing write by {writer:?}")]
    OwnerConflict { reference: String, owner: String, writer: String },
    #[error("resource {reference} is tearing down")]
    PhaseConflict { reference: String },
    #[error("resource {reference} has pending finalizers: {}", finalizers.join(", "))]
    PendingFinalizers { reference: String, finalizers: Vec<String> },
    #[error("resource {reference}: spec is {spec_type}, metadata says {type_name}")]
    TypeMismatch { reference: String, spec_type: String, type_name: String },
}

impl StateError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, StateError::NotFound { .. })
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, StateError::VersionConflict { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// The watcher fell behind the bounded history; `missed` events are gone. The watch goes
    /// on from the oldest retained event; a consumer that needs every event re-lists.
    #[error("watch fell behind: {missed} events were dropped from the bounded history")]
    Overrun { missed: u64 },
    #[error("watch closed: the state is gone")]
    Closed,
}

/// What happened to a resource. `Bootstrapped` marks the end of a watch's initial snapshot.
#[derive(Debug, Clone)]
pub enum Event {
    Created(Arc<AnyResource>),
    Updated { old: Arc<AnyResource>, new: Arc<AnyResource> },
    Destroyed(Arc<AnyResource>),
    Bootstrapped,
}

impl Event {
    /// The resource as it is after the event (as it was, for `Destroyed`).
    pub fn resource(&self) -> Option<&Arc<AnyResource>> {
        match self {
            Event::Created(r) | Event::Destroyed(r) => Some(r),
            Event::Updated { new, .. } => Some(new),
            Event::Bootstrapped => None,
        }
    }
}

/// A stream of events for one kind (namespace + type), optionally narrowed to one id.
pub struct Watch {
    initial: VecDeque<Event>,
    rx: broadcast::Receiver<Event>,
    id: Option<String>,
}

impl Watch {
    /// Built by backends: `snapshot` is emitted as `Created` events then `Bootstrapped`.
    pub fn new(snapshot: Vec<Arc<AnyResource>>, rx: broadcast::Receiver<Event>, id: Option<String>) -> Self {
        let mut initial: VecDeque<Event> = snapshot.into_iter().map(Event::Created).collect();
        initial.push_back(Event::Bootstrapped);
        Watch { initial, rx, id }
    }

    fn wanted(&self, event: &Event) -> bool {
        match (&self.id, event.resource()) {
            (Some(id), Some(r)) => r.metadata.id == *id,
            _ => true,
        }
    }

    pub async fn next(&mut self) -> Result<Event, WatchError> {
        if let Some(event) = self.initial.pop_front() {
            return Ok(event);
        }
        loop {
            match self.rx.recv().await {
                Ok(event) if self.wanted(&event) => return Ok(event),
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(missed)) => return Err(WatchError::Overrun { missed }),
                Err(broadcast::error::RecvError::Closed) => return Err(WatchError::Closed),
            }
        }
    }

    /// The next event if one is ready, without waiting.
    pub fn try_next(&mut self) -> Option<Result<Event, WatchError>> {
        if let Some(event) = self.initial.pop_front() {
            return Some(Ok(event));
        }
        loop {
            match self.rx.try_recv() {
                Ok(event) if self.wanted(&event) => return Some(Ok(event)),
                Ok(_) => continue,
                Err(broadcast::error::TryRecvError::Empty) => return None,
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    return Some(Err(WatchError::Overrun { missed }));
                }
                Err(broadcast::error::TryRecvError::Closed) => return Some(Err(WatchError::Closed)),
            }
        }
    }
}

/// What every state backend implements. `owner` is the writer's identity: a controller's
/// name, or the empty string for writes from outside the runtime.
pub trait StateBackend: Send + Sync {
    fn get(&self, namespace: &str, type_name: &str, id: &str) -> Result<Arc<AnyResource>, StateError>;
    fn list(&self, namespace: &str, type_name: &str, query: &LabelQuery) -> Vec<Arc<AnyResource>>;
    /// Stores a new resource at version 1, owned by `owner`.
    fn create(&self, resource: AnyResource, owner: &str) -> Result<Arc<AnyResource>, StateError>;
    /// Replaces spec, labels and annotations if the stored version is `expected_version`.
    /// Phase and finalizers are kept: they change only through their own calls. A resource
    /// tearing down is refused: it is on its way out.
    fn update(&self, resource: AnyResource, expected_version: u64, owner: &str)
    -> Result<Arc<AnyResource>, StateError>;
    /// Moves a resource to the tearing-down phase; returns it.
    fn teardown(&self, namespace: &str, type_name: &str, id: &str, owner: &str)
    -> Result<Arc<AnyResource>, StateError>;
    /// Removes a resource; refused while it holds finalizers.
    fn destroy(&self, namespace: &str, type_name: &str, id: &str, owner: &str) -> Result<(), StateError>;
    /// Adds a finalizer (anyone may; refused while tearing down).
    fn add_finalizer(
        &self,
        namespace: &str,
        type_name: &str,
        id: &str,
        finalizer: &str,
    ) -> Result<Arc<AnyResource>, StateError>;
    fn remove_finalizer(
        &self,
        namespace: &str,
        type_name: &str,
        id: &str,
        finalizer: &str,
    ) -> Result<Arc<AnyResource>, StateError>;
    /// Watches a kind: a snapshot of what exists, `Bootstrapped`, then every change in order.
    fn watch_kind(&self, namespace: &str, type_name: &str) -> Watch;
    /// Watches one resource: its current value if any, `Bootstrapped`, then its changes.
    fn watch(&self, namespace: &str, type_name: &str, id: &str) -> Watch;
}

/// The typed facade over a backend; cheap to clone.
#[derive(Clone)]
pub struct State {
    backend: Arc<dyn StateBackend>,
}

impl State {
    pub fn new(backend: Arc<dyn StateBackend>) -> Self {
        State { backend }
    }

    /// A fresh in-memory state with the default history size.
    pub fn in_memory() -> Self {
        State::new(Arc::new(super::memory::InMemoryState::new()))
    }

    pub fn backend(&self) -> &dyn StateBackend {
        &*self.backend
    }

    pub fn get<T: ResourceSpec>(&self, namespace: &str, id: &str) -> Result<Resource<T>, StateError> {
        let any = self.backend.get(namespace, T::DEFINITION.type_name, id)?;
        typed(&any)
    }

    /// Like `get`, but absence is `None` instead of an error.
    pub fn find<T: ResourceSpec>(&self, namespace: &str, id: &str) -> Result<Option<Resource<T>>, StateError> {
        match self.get(namespace, id) {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn list<T: ResourceSpec>(&self, namespace: &str) -> Vec<Resource<T>> {
        self.list_labeled(namespace, &LabelQuery::all())
    }

    pub fn list_labeled<T: ResourceSpec>(&self, namespace: &str, query: &LabelQuery) -> Vec<Resource<T>> {
        self.backend.list(namespace, T::DEFINITION.type_name, query).iter().filter_map(Resource::from_any).collect()
    }

    pub fn create<T: ResourceSpec>(&self, resource: Resource<T>, owner: &str) -> Result<Resource<T>, StateError> {
        typed(&self.backend.create(resource.into_any(), owner)?)
    }

    /// Updates from a resource previously read: its `metadata.version` is the expected one.
    pub fn update<T: ResourceSpec>(&self, resource: Resource<T>, owner: &str) -> Result<Resource<T>, StateError> {
        let expected = resource.version();
        typed(&self.backend.update(resource.into_any(), expected, owner)?)
    }

    pub fn teardown<T: ResourceSpec>(&self, namespace: &str, id: &str, owner: &str) -> Result<Resource<T>, StateError> {
        typed(&self.backend.teardown(namespace, T::DEFINITION.type_name, id, owner)?)
    }

    pub fn destroy<T: ResourceSpec>(&self, namespace: &str, id: &str, owner: &str) -> Result<(), StateError> {
        self.backend.destroy(namespace, T::DEFINITION.type_name, id, owner)
    }

    pub fn add_finalizer<T: ResourceSpec>(&self, namespace: &str, id: &str, finalizer: &str) -> Result<(), StateError> {
        self.backend.add_finalizer(namespace, T::DEFINITION.type_name, id, finalizer).map(drop)
    }

    pub fn remove_finalizer<T: ResourceSpec>(
        &self,
        namespace: &str,
        id: &str,
        finalizer: &str,
    ) -> Result<(), StateError> {
        self.backend.remove_finalizer(namespace, T::DEFINITION.type_name, id, finalizer).map(drop)
    }

    pub fn watch_kind<T: ResourceSpec>(&self, namespace: &str) -> Watch {
        self.backend.watch_kind(namespace, T::DEFINITION.type_name)
    }

    pub fn watch<T: ResourceSpec>(&self, namespace: &str, id: &str) -> Watch {
        self.backend.watch(namespace, T::DEFINITION.type_name, id)
    }
}

fn typed<T: ResourceSpec>(any: &Arc<AnyResource>) -> Result<Resource<T>, StateError> {
    Resource::from_any(any).ok_or_else(|| StateError::TypeMismatch {
        reference: any.metadata.reference(),
        spec_type: any.spec.definition().type_name.to_string(),
        type_name: T::DEFINITION.type_name.to_string(),
    })
}

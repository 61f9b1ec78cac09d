//! The state: the contract every backend keeps, its errors, and the typed facade controllers
//! and the API use.
//!
//! A backend stores type-erased resources and enforces the write rules (versions, owners,
//! phases, finalizers); it never interprets a spec.

use std::sync::Arc;

use super::query::{LabelQuery, ListOptions, WatchOptions};
use super::resource::{AnyResource, Resource, ResourceSpec};
pub use super::watch::{Event, Watch, WatchError};

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
    #[error("{type_name} is sensitive: reading it needs the os:admin role")]
    PermissionDenied { type_name: String },
    #[error("unknown resource type {type_name:?}")]
    UnknownType { type_name: String },
}

impl StateError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, StateError::NotFound { .. })
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, StateError::VersionConflict { .. })
    }
}

/// What every state backend implements. `owner` is the writer's identity: a controller's
/// name, or the empty string for writes from outside the runtime.
pub trait StateBackend: Send + Sync {
    fn get(&self, namespace: &str, type_name: &str, id: &str) -> Result<Arc<AnyResource>, StateError>;
    /// The matching resources, in id order.
    fn list(&self, namespace: &str, type_name: &str, options: &ListOptions) -> Vec<Arc<AnyResource>>;
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
    /// Adds a finalizer, in any phase: anyone may hold a resource, even one on its way out.
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
    /// Watches a kind as `options` say: a bootstrap snapshot, tail events or nothing, then
    /// every change in order, narrowed by the options' query.
    fn watch_kind(&self, namespace: &str, type_name: &str, options: &WatchOptions) -> Watch;
    /// Watches one resource on a subscription of its own (writes to other ids never push it
    /// behind): its current value if any, `Bootstrapped`, then its changes.
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
        self.list_with(namespace, &ListOptions::default())
    }

    pub fn list_labeled<T: ResourceSpec>(&self, namespace: &str, labels: &LabelQuery) -> Vec<Resource<T>> {
        self.list_with(namespace, &ListOptions { labels: labels.clone(), ..Default::default() })
    }

    pub fn list_with<T: ResourceSpec>(&self, namespace: &str, options: &ListOptions) -> Vec<Resource<T>> {
        self.backend.list(namespace, T::DEFINITION.type_name, options).iter().filter_map(Resource::from_any).collect()
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

    /// Watches a kind from a bootstrap snapshot.
    pub fn watch_kind<T: ResourceSpec>(&self, namespace: &str) -> Watch {
        self.watch_kind_with::<T>(namespace, &WatchOptions::default())
    }

    pub fn watch_kind_with<T: ResourceSpec>(&self, namespace: &str, options: &WatchOptions) -> Watch {
        self.backend.watch_kind(namespace, T::DEFINITION.type_name, options)
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

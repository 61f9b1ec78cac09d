//! The resource runtime: typed resources in a watched state, a registry of every type,
//! controllers that reconcile them, and a read-only role-scoped view for the API. Every
//! other part of the node is built on it; it knows nothing of networking, storage or the
//! API, and never touches the kernel.

pub mod backoff;
pub mod blocking;
pub mod controller;
pub mod definition;
pub mod jsonpath;
pub mod memory;
pub mod query;
pub mod registry;
pub mod resource;
pub mod runtime;
pub mod source;
pub mod state;
pub mod timestamp;
pub mod view;
pub mod watch;

#[cfg(any(test, feature = "test-harness"))]
pub mod conformance;
#[cfg(any(test, feature = "test-harness"))]
pub mod harness;

pub use backoff::Backoff;
pub use blocking::{BlockingError, blocking};
pub use controller::{
    Context, ContextError, Controller, Input, InputKind, Output, OutputKind, Pointer, ReconcileError, Waker,
};
pub use definition::{PrintColumn, ResourceDefinition, Sensitivity, TypeNames};
#[cfg(any(test, feature = "test-harness"))]
pub use harness::Harness;
pub use memory::InMemoryState;
pub use query::{IdQuery, LabelOp, LabelQuery, LabelTerm, ListOptions, WatchOptions, WatchStart};
pub use registry::{LookupError, META_NAMESPACE, NamespaceSpec, Registry, RegistryError, ResourceDefinitionSpec};
pub use resource::{AnyResource, CodecError, Metadata, Phase, Resource, ResourceSpec, ResourceType, SpecObject};
pub use runtime::{Runtime, RuntimeError};
pub use source::{Changes, EventSource, SourceError, Timer};
pub use state::{State, StateBackend, StateError};
pub use view::{Access, StateView};
pub use watch::{Cursor, Event, EventRing, Watch, WatchError};

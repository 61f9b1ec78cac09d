//! The resource runtime: typed resources in a watched state, and controllers that reconcile
//! them. Every other part of the node is built on it; it knows nothing of networking,
//! storage or the API, and never touches the kernel.

pub mod conformance;
pub mod controller;
pub mod harness;
pub mod memory;
pub mod resource;
pub mod runtime;
pub mod state;

pub use controller::{Context, Controller, Input, InputKind, Output, OutputKind, ReconcileError, Waker};
pub use harness::Harness;
pub use memory::InMemoryState;
pub use resource::{
    AnyResource, LabelQuery, LabelTerm, Metadata, Phase, PrintColumn, Resource, ResourceDefinition, ResourceSpec,
    Sensitivity,
};
pub use runtime::{Backoff, Runtime, RuntimeError};
pub use state::{Event, State, StateBackend, StateError, Watch, WatchError};

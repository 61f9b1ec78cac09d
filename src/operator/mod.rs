//! The fleet operator: keeps a fleet of Talos(box) nodes at their desired configuration and
//! version. A watcher polls each Available machine's node (Version and a dry-run
//! ApplyConfiguration of the config rendered exactly as an apply would send it) and marks a
//! diverged machine Drifted; a reconciler re-applies or upgrades and brings it back to
//! Available. The specification is the drift-detection seed; see the README's operator section.
//!
//! The engine is shared by two stores behind one [`store::Store`] trait: SQLite in a fleet
//! directory (standalone, the default) and, with the `kubernetes` feature, a Kubernetes API
//! server (TalosMachine custom resources). Nodes are reached through [`node::NodeClient`].
//!
//! It must never write a machine's status except conditionally on the resourceVersion it
//! read, never treat a node error as drift, and never act on a `disable` machine.

pub mod crd;
pub mod engine;
pub mod http;
#[cfg(feature = "kubernetes")]
pub mod kube;
pub mod metrics;
pub mod model;
pub mod node;
pub mod reconciler;
pub mod render;
pub mod store;
pub mod watcher;

#[cfg(any(test, feature = "test-harness"))]
pub mod conformance;
#[cfg(feature = "test-harness")]
pub mod simnode;
#[cfg(any(test, feature = "test-harness"))]
pub mod testing;

pub use engine::{Context, Engine, EngineError, OperatorConfig};
pub use model::{MachineKey, MachineState, TalosMachine};

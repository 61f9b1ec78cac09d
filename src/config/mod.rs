//! Machine configuration documents: load, validate, patch and diff Talos-compatible configs.
//!
//! A config is one or more YAML documents: the legacy `v1alpha1` document and the
//! multi-document kinds (`LinkConfig`, `VolumeConfig`, ...). [`load`] checks every field against
//! Talos's schema and refuses what Talos refuses, naming the document and the field;
//! [`validate`] checks what the values mean; [`patch`] applies strategic-merge and JSON patches;
//! [`diff()`] compares two configs for dry runs, without ever showing a secret.
//!
//! This module is pure: it never touches files, the network or the clock, so the API server,
//! talosctl and the controllers can all use it and its tests need nothing but text.
//!
//! Where things live: `schema_table.rs` lists every kind's fields and types (Talos's facts),
//! `policy.rs` says which fields are secrets, which are kept but not acted on, and which need a
//! reboot (talosbox's decisions), `typed.rs`, `network.rs` and `block.rs` hold the typed views
//! of the fields talosbox acts on (machine, network, volumes), reading through `reader.rs`.
//! Every kind in the table already loads, patches and diffs; to act on one, add its typed view
//! beside `typed.rs` (reading [`Document::value`]) and, if its group's defaults do not fit, its
//! rules in `policy.rs`.

pub mod block;
mod check;
pub mod diff;
mod document;
mod emit;
mod error;
mod fuzz;
pub mod generate;
#[cfg(test)]
pub(crate) mod golden;
pub mod install;
mod json6902;
mod load;
mod merge;
pub mod network;
mod parse;
pub mod patch;
mod policy;
mod reader;
mod scalar;
mod schema;
mod schema_table;
mod textdiff;
mod typed;
mod validate;
mod value;

pub use block::BlockView;
pub use diff::{Diff, diff, mode_details};
pub use document::{Config, DocId, Document};
pub use error::ConfigError;
pub use fuzz::fuzz_load;
pub use load::{Loaded, load};
pub use network::NetworkView;
pub use policy::Effect;
pub use typed::{CertAndKey, CertSan, Endpoint, Hostname, Install, MachineType, MachineView, Pem, TimeServer, Token};
pub use validate::validate;
pub use value::{Map, Path, Seg, Value};

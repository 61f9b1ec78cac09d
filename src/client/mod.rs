//! The client side of the Talos API: a session with a node ([`api`]), the KMS client of disk
//! encryption keys ([`kms`]), and, under their client names, the talosconfig file ([`config`])
//! and dialling endpoints ([`conn`]). Those two live with the wire types in `proto`, because
//! the servers mint talosconfigs and dial the same way. talosctl, the operator and the
//! provisioner use this module; it depends only on the wire types and the PKI, never on a
//! server.

pub mod api;
pub mod health;
pub mod kms;

pub use crate::proto::{conn, talosconfig as config};

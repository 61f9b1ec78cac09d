//! The client side of the Talos API: the talosconfig file ([`config`]) and dialling endpoints
//! ([`conn`]). talosctl, the worker's certificate controller and the services use it; it
//! depends only on the wire types (`api::proto`) and the PKI, never on a server.

pub mod api;
pub mod config;
pub mod conn;
pub mod health;
pub mod kms;
pub mod state;

//! talosbox: an immutable, API-only Linux OS whose whole userland is this one library and
//! the binary that dispatches into it by name.

pub mod api;
pub mod applets;
pub mod block;
pub mod boot;
pub mod client;
pub mod config;
pub mod controllers;
pub mod cosi;
pub mod hosttools;
pub mod imager;
pub mod kernel;
pub mod machined;
pub mod network;
#[cfg(feature = "operator")]
pub mod operator;
pub mod panic;
pub mod pki;
pub mod platform;
pub mod proto;
pub mod provision;
pub mod resources;
pub mod services;
pub mod types;
pub mod version;
pub mod yaml;

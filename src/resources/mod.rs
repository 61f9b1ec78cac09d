//! Typed resource specs, per domain, under Talos's type names. Plain data: nothing here
//! reads a file or talks to the kernel.

pub mod block;
pub mod config;
pub mod files;
pub mod network;
mod pem;
pub mod runtime;
pub mod secrets;
pub mod time;

use crate::cosi::{Registry, RegistryError};

/// A registry of every resource type and namespace of a node.
pub fn registry() -> Result<Registry, RegistryError> {
    let mut registry = Registry::new();
    runtime::register(&mut registry)?;
    config::register(&mut registry)?;
    secrets::register(&mut registry)?;
    network::register(&mut registry)?;
    files::register(&mut registry)?;
    time::register(&mut registry)?;
    block::register(&mut registry)?;
    Ok(registry)
}

//! Configuration controllers: the machine configuration in force, as resources.

pub mod machine_config;

pub use machine_config::MachineConfigController;

use std::sync::Arc;
use std::time::SystemTime;

/// What the configuration store holds: what machined's store publishes and
/// [`MachineConfigController`] turns into resources. Texts are already validated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredConfig {
    /// The stored configuration (what the next boot uses).
    pub persisted: Option<Arc<str>>,
    /// The configuration in force.
    pub active: Option<Arc<str>>,
    /// While a try-mode apply is in force: when it falls back.
    pub try_until: Option<SystemTime>,
    /// The store is waiting for its volume (STATE) to be mounted: whether there is a
    /// configuration is not known yet.
    pub pending: bool,
}

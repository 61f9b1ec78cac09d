//! Time resources, under Talos's names: `TimeStatus` (id `node`, in the `runtime` namespace
//! as Talos's `v1alpha1` one), whether the clock is synchronized and how often it jumped.
//! Plain data.

use serde::{Deserialize, Serialize};

use crate::cosi::{PrintColumn, Registry, RegistryError, ResourceDefinition, ResourceSpec, Sensitivity};

pub use super::runtime::NAMESPACE;

/// Whether the node's clock can be trusted yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct TimeStatus {
    /// Synchronized once, or sync is disabled, or the boot timeout passed.
    pub synced: bool,
    /// Bumped each time the clock jumped by more than the epoch limit.
    pub epoch: u64,
    pub sync_disabled: bool,
}

impl TimeStatus {
    pub const ID: &'static str = "node";
}

impl ResourceSpec for TimeStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "TimeStatuses.v1alpha1.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Synced", json_path: "{.synced}" },
            PrintColumn { name: "Epoch", json_path: "{.epoch}" },
            PrintColumn { name: "SyncDisabled", json_path: "{.syncDisabled}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

pub fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register::<TimeStatus>()
}

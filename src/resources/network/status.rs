//! Whether networking is ready.

use serde::{Deserialize, Serialize};

use super::NAMESPACE;
use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};

/// Whether networking is ready, id `status` (Talos's network `Status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkStatus {
    /// The node has an address other than loopback.
    pub address_ready: bool,
    /// A default route (or another way out) exists.
    pub connectivity_ready: bool,
    /// The hostname is set.
    pub hostname_ready: bool,
    /// `/etc/resolv.conf`, `/etc/hosts` are rendered.
    pub etc_files_ready: bool,
}

impl NetworkStatus {
    pub const ID: &'static str = "status";
}

impl ResourceSpec for NetworkStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "NetworkStatuses.net.talos.dev",
        aliases: &["netstatus", "netstatuses"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Address", json_path: "{.addressReady}" },
            PrintColumn { name: "Connectivity", json_path: "{.connectivityReady}" },
            PrintColumn { name: "Hostname", json_path: "{.hostnameReady}" },
            PrintColumn { name: "Etc", json_path: "{.etcFilesReady}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

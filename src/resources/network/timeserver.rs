//! Time servers: the desired NTP servers and those in force.

use serde::{Deserialize, Serialize};

use super::{ConfigLayer, NAMESPACE, is_default};
use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};

/// The desired NTP servers, merged id `timeservers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct TimeServerSpec {
    #[serde(rename = "timeServers")]
    pub time_servers: Vec<String>,
    #[serde(rename = "useNTS", skip_serializing_if = "is_default")]
    pub use_nts: bool,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
}

impl TimeServerSpec {
    pub const ID: &'static str = "timeservers";
}

impl ResourceSpec for TimeServerSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "TimeServerSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Timeservers", json_path: "{.timeServers}" },
            PrintColumn { name: "UseNTS", json_path: "{.useNTS}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The time servers in force, id `timeservers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct TimeServerStatus {
    #[serde(rename = "timeServers")]
    pub time_servers: Vec<String>,
    #[serde(rename = "useNTS")]
    pub use_nts: bool,
}

impl TimeServerStatus {
    pub const ID: &'static str = "timeservers";
}

impl ResourceSpec for TimeServerStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "TimeServerStatuses.net.talos.dev",
        aliases: &["timeserver", "timeservers"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Timeservers", json_path: "{.timeServers}" },
            PrintColumn { name: "UseNTS", json_path: "{.useNTS}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

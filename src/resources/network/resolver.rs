//! Resolvers: the desired DNS servers and search domains, and those in force.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{ConfigLayer, NAMESPACE, is_default};
use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};

/// The desired DNS servers and search domains, merged id `resolvers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ResolverSpec {
    pub dns_servers: Vec<IpAddr>,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub search_domains: Vec<String>,
    /// The machine configuration set the search domains explicitly (perhaps to none): they
    /// replace the lower layers' instead of joining them.
    #[serde(skip_serializing_if = "is_default")]
    pub search_domains_overridden: bool,
}

impl ResolverSpec {
    pub const ID: &'static str = "resolvers";
}

impl ResourceSpec for ResolverSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "ResolverSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Layer", json_path: "{.layer}" },
            PrintColumn { name: "Resolvers", json_path: "{.dnsServers}" },
            PrintColumn { name: "Search Domains", json_path: "{.searchDomains}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The resolvers in force, id `resolvers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ResolverStatus {
    pub dns_servers: Vec<IpAddr>,
    pub search_domains: Vec<String>,
}

impl ResolverStatus {
    pub const ID: &'static str = "resolvers";
}

impl ResourceSpec for ResolverStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "ResolverStatuses.net.talos.dev",
        aliases: &["resolvers"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Resolvers", json_path: "{.dnsServers}" },
            PrintColumn { name: "Search Domains", json_path: "{.searchDomains}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

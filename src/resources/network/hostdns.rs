//! The host DNS forwarder: its settings and its listeners.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{NAMESPACE, empty_as_none, is_default};
use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};

/// The host DNS forwarder's settings, id `config` (Talos's `HostDNSConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct HostDnsConfig {
    pub enabled: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listen_addresses: Vec<std::net::SocketAddr>,
    #[serde(rename = "serviceHostDNSAddress", with = "empty_as_none", skip_serializing_if = "Option::is_none")]
    pub service_host_dns_address: Option<IpAddr>,
    #[serde(skip_serializing_if = "is_default")]
    pub resolve_member_names: bool,
    #[serde(rename = "serviceHostDNSAddressV6", with = "empty_as_none", skip_serializing_if = "Option::is_none")]
    pub service_host_dns_address_v6: Option<IpAddr>,
}

impl HostDnsConfig {
    pub const ID: &'static str = "config";
}

impl ResourceSpec for HostDnsConfig {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "HostDNSConfigs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[PrintColumn { name: "Enabled", json_path: "{.enabled}" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// One listener of the host DNS forwarder, id `<proto>-<address>` (`udp-127.0.0.53:53`),
/// Talos's `DNSResolveCache`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct DnsResolveCache {
    pub status: String,
}

impl DnsResolveCache {
    pub const RUNNING: &'static str = "running";
}

impl ResourceSpec for DnsResolveCache {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "DNSResolveCaches.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[PrintColumn { name: "Status", json_path: "{.status}" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

//! Addresses: the desired ones of a link and those the kernel reports.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{AddressFlags, ConfigLayer, Family, NAMESPACE, Scope, is_default};
use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};
use crate::types::IpPrefix;

/// `eth0/10.0.0.2/24`.
pub fn address_id(link_name: &str, address: &IpPrefix) -> String {
    format!("{link_name}/{address}")
}

/// A desired address on a link. Merged id: [`address_id`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressSpec {
    pub address: IpPrefix,
    pub link_name: String,
    pub family: Family,
    #[serde(default)]
    pub scope: Scope,
    #[serde(default)]
    pub flags: AddressFlags,
    #[serde(rename = "announceWithARP", default, skip_serializing_if = "is_default")]
    pub announce_with_arp: bool,
    #[serde(default, skip_serializing_if = "is_default")]
    pub priority: u32,
    #[serde(rename = "layer", default)]
    pub config_layer: ConfigLayer,
}

impl AddressSpec {
    /// A global, permanent address of its own family (what a static address from any
    /// config source looks like).
    pub fn static_address(link_name: &str, address: IpPrefix, layer: ConfigLayer) -> AddressSpec {
        AddressSpec {
            address,
            link_name: link_name.to_string(),
            family: Family::of(&address.addr()),
            scope: Scope::GLOBAL,
            flags: AddressFlags::PERMANENT,
            announce_with_arp: false,
            priority: 0,
            config_layer: layer,
        }
    }

    pub fn id(&self) -> String {
        address_id(&self.link_name, &self.address)
    }
}

impl ResourceSpec for AddressSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "AddressSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// An address as the kernel reports it, id `<link>/<address>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressStatus {
    pub address: IpPrefix,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anycast: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multicast: Option<IpAddr>,
    #[serde(default)]
    pub link_index: u32,
    pub link_name: String,
    pub family: Family,
    #[serde(default)]
    pub scope: Scope,
    #[serde(default)]
    pub flags: AddressFlags,
    #[serde(default)]
    pub priority: u32,
}

impl ResourceSpec for AddressStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "AddressStatuses.net.talos.dev",
        aliases: &["address", "addresses"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Address", json_path: "{.address}" },
            PrintColumn { name: "Link", json_path: "{.linkName}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

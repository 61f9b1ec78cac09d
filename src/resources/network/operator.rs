//! Operators: the dynamic config sources (DHCPv4, DHCPv6, VIP) to run on a link.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{ClientIdentifier, ConfigLayer, NAMESPACE, empty_as_none, is_default};
use crate::cosi::{ResourceDefinition, ResourceSpec, Sensitivity};

/// `dhcp4/eth0`, `vip/eth0/10.0.0.10`.
pub fn operator_id(spec: &OperatorSpec) -> String {
    match spec.operator {
        Operator::Vip => {
            let ip = spec.vip.ip.map(|ip| ip.to_string()).unwrap_or_default();
            format!("{}/{}/{ip}", spec.operator, spec.link_name)
        }
        Operator::Dhcp4 | Operator::Dhcp6 => format!("{}/{}", spec.operator, spec.link_name),
    }
}

/// The dynamic config sources, Talos's `Operator` (names and numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub enum Operator {
    #[default]
    #[serde(rename = "dhcp4")]
    Dhcp4 = 0,
    #[serde(rename = "dhcp6")]
    Dhcp6 = 1,
    #[serde(rename = "vip")]
    Vip = 2,
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operator::Dhcp4 => "dhcp4",
            Operator::Dhcp6 => "dhcp6",
            Operator::Vip => "vip",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientIdentifierSpec {
    pub client_identifier: ClientIdentifier,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub duid_raw_hex: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Dhcp4OperatorSpec {
    pub route_metric: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub skip_hostname_request: bool,
    #[serde(skip_serializing_if = "is_default")]
    pub client_identifier: ClientIdentifierSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub skip_routes: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Dhcp6OperatorSpec {
    pub route_metric: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub skip_hostname_request: bool,
    #[serde(skip_serializing_if = "is_default")]
    pub client_identifier: ClientIdentifierSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct VipOperatorSpec {
    #[serde(with = "empty_as_none")]
    pub ip: Option<IpAddr>,
    #[serde(rename = "gratuitousARP")]
    pub gratuitous_arp: bool,
}

/// An operator to run on a link. Merged id: [`operator_id`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct OperatorSpec {
    pub operator: Operator,
    pub link_name: String,
    pub require_up: bool,
    #[serde(skip_serializing_if = "is_default")]
    pub dhcp4: Dhcp4OperatorSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub dhcp6: Dhcp6OperatorSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub vip: VipOperatorSpec,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
}

impl OperatorSpec {
    /// Equality without the layer: an operator whose layer alone changed is the same
    /// operator, and its goroutine (here: task) is not restarted.
    pub fn same_operator(&self, other: &OperatorSpec) -> bool {
        OperatorSpec { config_layer: other.config_layer, ..self.clone() } == *other
    }
}

impl ResourceSpec for OperatorSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "OperatorSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };
}

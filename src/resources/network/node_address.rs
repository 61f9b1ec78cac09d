//! Node addresses: the curated sets of this node's addresses, and the filters of the
//! filtered ones.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{AddressSortAlgorithm, NAMESPACE};
use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};
use crate::types::IpPrefix;

/// A curated set of this node's addresses; ids [`NodeAddress::DEFAULT_ID`] and the others,
/// and `<set>-<filter>` for filtered sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeAddress {
    pub addresses: Vec<IpPrefix>,
    pub sort_algorithm: AddressSortAlgorithm,
}

impl NodeAddress {
    /// The one address the node goes by (etcd's advertised peer address …).
    pub const DEFAULT_ID: &'static str = "default";
    /// The addresses of the links that are up, now.
    pub const CURRENT_ID: &'static str = "current";
    /// Every address the node has had: never forgets one.
    pub const ACCUMULATIVE_ID: &'static str = "accumulative";
    /// Current minus external and SideroLink addresses: what services listen on.
    pub const ROUTED_ID: &'static str = "routed";

    /// The addresses without prefixes, each once, in order.
    pub fn ips(&self) -> Vec<IpAddr> {
        let mut ips: Vec<IpAddr> = Vec::new();
        for p in &self.addresses {
            if !ips.contains(&p.addr()) {
                ips.push(p.addr());
            }
        }
        ips
    }
}

/// `current-k8s` for the `current` set through filter `k8s`.
pub fn filtered_node_address_id(kind: &str, filter_id: &str) -> String {
    format!("{kind}-{filter_id}")
}

impl ResourceSpec for NodeAddress {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "NodeAddresses.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Addresses", json_path: "{.addresses}" },
            PrintColumn { name: "SortAlgorithm", json_path: "{.sortAlgorithm}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// Which addresses a filtered node address set keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeAddressFilter {
    /// If not empty, an address must be in one of these.
    pub include_subnets: Vec<IpPrefix>,
    /// An address in any of these is dropped.
    pub exclude_subnets: Vec<IpPrefix>,
}

impl NodeAddressFilter {
    pub fn keeps(&self, ip: &IpAddr) -> bool {
        (self.include_subnets.is_empty() || self.include_subnets.iter().any(|s| s.contains(ip)))
            && !self.exclude_subnets.iter().any(|s| s.contains(ip))
    }
}

impl ResourceSpec for NodeAddressFilter {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "NodeAddressFilters.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Include Subnets", json_path: "{.includeSubnets}" },
            PrintColumn { name: "Exclude Subnets", json_path: "{.excludeSubnets}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::test_util::{ip, prefix};

    #[test]
    fn node_addresses_and_filters() {
        let na = NodeAddress {
            addresses: vec![prefix("10.0.0.2/24"), prefix("10.0.0.2/32"), prefix("2001:db8::2/64")],
            sort_algorithm: AddressSortAlgorithm::V1,
        };
        assert_eq!(na.ips(), [ip("10.0.0.2"), ip("2001:db8::2")]);
        let f = NodeAddressFilter {
            include_subnets: vec![prefix("10.0.0.0/8")],
            exclude_subnets: vec![prefix("10.5.0.0/16")],
        };
        assert!(f.keeps(&ip("10.0.0.2")));
        assert!(!f.keeps(&ip("10.5.0.1")));
        assert!(!f.keeps(&ip("192.168.0.1")));
        assert!(NodeAddressFilter::default().keeps(&ip("192.168.0.1")));
        assert_eq!(filtered_node_address_id(NodeAddress::CURRENT_ID, "k8s"), "current-k8s");
    }
}

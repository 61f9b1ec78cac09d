//! Network resources: the layered candidates of `network-config`, the merged desired specs
//! and the observed statuses of `network`, under Talos's type names, ids, YAML field names and
//! value names (`family: inet4`, `scope: global`, `layer: cmdline`), so `talosctl get
//! addresses -o yaml` reads the same on both.
//!
//! The same spec type lives in both namespaces: in `network-config` one candidate per config
//! source, id `<layer>/<id>`; in `network` the one winner per id. How candidates merge (the
//! higher layer wins; links fold field by field; resolvers and time servers append within a
//! layer) lives with the merge controllers, in `controllers/network/merge.rs`.
//!
//! Kernel values (families, scopes, route types, link types …) are numeric newtypes carrying
//! Talos's names for the values it knows, so whatever the kernel reports passes through
//! unchanged. Plain data: nothing here talks to the kernel.

mod address;
mod device_config;
mod hardware_addr;
mod hostdns;
mod hostname;
mod link;
mod node_address;
mod operator;
mod resolver;
mod route;
mod status;
#[cfg(test)]
pub(crate) mod test_util;
mod timeserver;
mod values;

pub use crate::types::NetworkValueError;
/// A bond's settings are one type from the kernel adapter up to the configuration; here it
/// goes by Talos's name.
pub use crate::types::bond::{
    AdLacpActive, AdSelect, ArpAllTargets, ArpValidate, BondMode, BondSettings as BondMasterSpec, BondXmitHashPolicy,
    FailOverMac, LacpRate, PrimaryReselect,
};
pub use address::{AddressSpec, AddressStatus, address_id};
pub use device_config::DeviceConfigSpec;
pub use hardware_addr::HardwareAddr;
pub use hostdns::{DnsResolveCache, HostDnsConfig};
pub use hostname::{HostnameSpec, HostnameStatus};
pub use link::{
    BondSlave, BridgeMasterSpec, BridgeSlave, BridgeVlanSpec, LINK_KIND_BOND, LINK_KIND_BRIDGE, LINK_KIND_DUMMY,
    LINK_KIND_VETH, LINK_KIND_VLAN, LINK_KIND_VRF, LINK_KIND_WIREGUARD, LinkSpec, LinkStatus, StpSpec, VethSpec,
    VlanSpec, link_id, vlan_link_name,
};
pub use node_address::{NodeAddress, NodeAddressFilter, filtered_node_address_id};
pub use operator::{
    ClientIdentifierSpec, Dhcp4OperatorSpec, Dhcp6OperatorSpec, Operator, OperatorSpec, VipOperatorSpec, operator_id,
};
pub use resolver::{ResolverSpec, ResolverStatus};
pub use route::{DEFAULT_ROUTE_METRIC, RouteNextHop, RouteSpec, RouteStatus, route_id};
pub use status::NetworkStatus;
pub use timeserver::{TimeServerSpec, TimeServerStatus};
pub use values::{
    AddressFlags, AddressSortAlgorithm, ClientIdentifier, Duplex, Family, HardwareAddress, LinkFlags, LinkType,
    OperationalState, Port, RouteFlags, RouteProtocol, RouteType, RoutingTable, Scope, VlanProtocol, netmask_bits,
};

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cosi::{Registry, RegistryError};
use crate::types::is_default;

/// Merged desired specs and observed statuses.
pub const NAMESPACE: &str = "network";
/// Layered candidates, one per config source, ids `<layer>/<id>`.
pub const CONFIG_NAMESPACE: &str = "network-config";

// ---------------------------------------------------------------------------------------------
// Config layers and ids

/// Where a candidate comes from, lowest priority first: the one enum that decides every
/// conflict in the subsystem. Names and numbers as Talos's `ConfigLayer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub enum ConfigLayer {
    #[default]
    #[serde(rename = "default")]
    Default = 0,
    #[serde(rename = "cmdline")]
    Cmdline = 1,
    #[serde(rename = "platform")]
    Platform = 2,
    #[serde(rename = "operator")]
    Operator = 3,
    #[serde(rename = "configuration")]
    MachineConfiguration = 4,
}

impl ConfigLayer {
    pub const ALL: [ConfigLayer; 5] = [
        ConfigLayer::Default,
        ConfigLayer::Cmdline,
        ConfigLayer::Platform,
        ConfigLayer::Operator,
        ConfigLayer::MachineConfiguration,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConfigLayer::Default => "default",
            ConfigLayer::Cmdline => "cmdline",
            ConfigLayer::Platform => "platform",
            ConfigLayer::Operator => "operator",
            ConfigLayer::MachineConfiguration => "configuration",
        }
    }
}

impl fmt::Display for ConfigLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ConfigLayer {
    type Err = NetworkValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ConfigLayer::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| NetworkValueError::Unknown { kind: "config layer", value: s.to_string() })
    }
}

/// The id of a candidate in `network-config`: `cmdline/eth0/10.0.0.2/24`.
pub fn layered_id(layer: ConfigLayer, id: &str) -> String {
    format!("{layer}/{id}")
}

/// Go's zero `netip.Addr`/`netip.Prefix` is written as an empty string: `None` here.
mod empty_as_none {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<T: Display, S: Serializer>(value: &Option<T>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => serializer.collect_str(v),
            None => serializer.serialize_str(""),
        }
    }

    pub fn deserialize<'de, T, D>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let s: Option<String> = Option::deserialize(deserializer)?;
        match s.as_deref() {
            None | Some("") => Ok(None),
            Some(s) => s.parse().map(Some).map_err(de::Error::custom),
        }
    }
}

/// Registers both network namespaces and every network type.
pub fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.add_namespace(NAMESPACE, "Networking resources.")?;
    registry.add_namespace(CONFIG_NAMESPACE, "Networking configuration resources.")?;
    registry.register::<AddressSpec>()?;
    registry.register::<AddressStatus>()?;
    registry.register::<RouteSpec>()?;
    registry.register::<RouteStatus>()?;
    registry.register::<LinkSpec>()?;
    registry.register::<LinkStatus>()?;
    registry.register::<HostnameSpec>()?;
    registry.register::<HostnameStatus>()?;
    registry.register::<ResolverSpec>()?;
    registry.register::<ResolverStatus>()?;
    registry.register::<TimeServerSpec>()?;
    registry.register::<TimeServerStatus>()?;
    registry.register::<OperatorSpec>()?;
    registry.register::<NodeAddress>()?;
    registry.register::<NodeAddressFilter>()?;
    registry.register::<HardwareAddr>()?;
    registry.register::<DeviceConfigSpec>()?;
    registry.register::<NetworkStatus>()?;
    registry.register::<HostDnsConfig>()?;
    registry.register::<DnsResolveCache>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosi::Sensitivity;
    use crate::resources::network::test_util::{assert_yaml, ip, prefix};

    #[test]
    fn the_node_registry_takes_every_network_type() {
        let registry = crate::resources::registry().unwrap();
        let cases = [
            ("address", "AddressStatuses.net.talos.dev"),
            ("addresses", "AddressStatuses.net.talos.dev"),
            ("addressspecs", "AddressSpecs.net.talos.dev"),
            ("link", "LinkStatuses.net.talos.dev"),
            ("links", "LinkStatuses.net.talos.dev"),
            ("linkspec", "LinkSpecs.net.talos.dev"),
            ("routes", "RouteStatuses.net.talos.dev"),
            ("routespecs", "RouteSpecs.net.talos.dev"),
            ("hostname", "HostnameStatuses.net.talos.dev"),
            ("hostnamespecs", "HostnameSpecs.net.talos.dev"),
            ("resolvers", "ResolverStatuses.net.talos.dev"),
            ("resolverspec", "ResolverSpecs.net.talos.dev"),
            ("timeservers", "TimeServerStatuses.net.talos.dev"),
            ("timeserverspecs", "TimeServerSpecs.net.talos.dev"),
            ("operatorspecs", "OperatorSpecs.net.talos.dev"),
            ("nodeaddresses", "NodeAddresses.net.talos.dev"),
            ("nodeaddressfilters", "NodeAddressFilters.net.talos.dev"),
            ("hardwareaddresses", "HardwareAddresses.net.talos.dev"),
            ("deviceconfigspecs", "DeviceConfigSpecs.net.talos.dev"),
            ("netstatus", "NetworkStatuses.net.talos.dev"),
            ("networkstatuses.net", "NetworkStatuses.net.talos.dev"),
            // NetworkStatuses abbreviates to `ns`, but the declared alias of Namespaces wins.
            ("ns", "Namespaces.meta.cosi.dev"),
        ];
        for (name, want) in cases {
            assert_eq!(registry.resolve(name).map(|t| t.type_name()), Ok(want), "{name}");
        }
        assert!(registry.contains_namespace(NAMESPACE) && registry.contains_namespace(CONFIG_NAMESPACE));
        for sensitive in ["LinkSpecs.net.talos.dev", "OperatorSpecs.net.talos.dev", "DeviceConfigSpecs.net.talos.dev"] {
            assert_eq!(registry.get(sensitive).unwrap().definition().sensitivity, Sensitivity::Sensitive);
        }
    }

    #[test]
    fn config_layers_order_and_names() {
        let names: Vec<String> = ConfigLayer::ALL.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["default", "cmdline", "platform", "operator", "configuration"]);
        assert!(ConfigLayer::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(ConfigLayer::ALL.map(|l| l as u8), [0, 1, 2, 3, 4]);
        assert_eq!("Configuration".parse(), Ok(ConfigLayer::MachineConfiguration));
        assert!("dhcp".parse::<ConfigLayer>().is_err());
        assert_eq!(serde_json::to_value(ConfigLayer::Cmdline).unwrap(), serde_json::json!("cmdline"));
        assert_eq!(layered_id(ConfigLayer::Cmdline, "eth0/10.0.0.2/24"), "cmdline/eth0/10.0.0.2/24");
    }

    #[test]
    fn specs_render_as_talos() {
        assert_yaml(
            &AddressSpec::static_address("eth0", prefix("10.0.0.2/24"), ConfigLayer::Cmdline),
            "address: 10.0.0.2/24\nlinkName: eth0\nfamily: inet4\nscope: global\nflags: permanent\nlayer: cmdline\n",
        );
        // Talos's own route golden (TestRoutSpecMarshalYAML).
        let route = RouteSpec {
            family: Family::INET6,
            destination: Some(prefix("192.168.3.4/25")),
            source: Some(ip("1.1.1.1")),
            gateway: Some(ip("2.2.2.2")),
            out_link_name: "eth0".into(),
            table: RoutingTable::LOCAL,
            priority: 1024,
            scope: Scope::HOST,
            route_type: RouteType::ANYCAST,
            flags: RouteFlags::OFFLOAD | RouteFlags::CLONED,
            protocol: RouteProtocol::BOOT,
            config_layer: ConfigLayer::Platform,
            mtu: 1400,
            next_hops: Vec::new(),
        };
        assert_yaml(
            &route,
            "family: inet6\ndst: 192.168.3.4/25\nsrc: 1.1.1.1\ngateway: 2.2.2.2\noutLinkName: eth0\ntable: local\n\
             priority: 1024\nscope: host\ntype: anycast\nflags: cloned,offload\nprotocol: boot\nlayer: platform\n\
             mtu: 1400\n",
        );
        let default_route = RouteSpec {
            family: Family::INET4,
            gateway: Some(ip("10.0.0.1")),
            table: RoutingTable::MAIN,
            ..RouteSpec::default()
        };
        assert_yaml(
            &default_route,
            "family: inet4\ndst: \"\"\nsrc: \"\"\ngateway: 10.0.0.1\ntable: main\nscope: global\ntype: unspec\n\
             flags: \"\"\nprotocol: unspec\nlayer: default\n",
        );
        let link = LinkSpec {
            name: "eth0".into(),
            logical: true,
            up: true,
            mtu: 1437,
            kind: "vlan".into(),
            link_type: LinkType::ETHER,
            parent_name: "eth1".into(),
            bond_slave: BondSlave { master_name: "bond0".into(), slave_index: 1 },
            vlan: VlanSpec { vid: 25, protocol: VlanProtocol::IEEE_802_1AD },
            config_layer: ConfigLayer::MachineConfiguration,
            ..LinkSpec::default()
        };
        assert_yaml(
            &link,
            "name: eth0\nlogical: true\nup: true\nmtu: 1437\nkind: vlan\ntype: ether\nparentName: eth1\n\
             masterName: bond0\nslaveIndex: 1\nvlan:\n  vlanID: 25\n  vlanProtocol: 802.1ad\nlayer: configuration\n",
        );
        assert_yaml(
            &OperatorSpec {
                operator: Operator::Dhcp4,
                link_name: "eth0".into(),
                require_up: true,
                dhcp4: Dhcp4OperatorSpec { route_metric: 1024, ..Default::default() },
                config_layer: ConfigLayer::MachineConfiguration,
                ..Default::default()
            },
            "operator: dhcp4\nlinkName: eth0\nrequireUp: true\ndhcp4:\n  routeMetric: 1024\nlayer: configuration\n",
        );
        assert_yaml(
            &HostnameSpec {
                hostname: "node1".into(),
                domainname: "example.org".into(),
                config_layer: ConfigLayer::Cmdline,
            },
            "hostname: node1\ndomainname: example.org\nlayer: cmdline\n",
        );
        assert_yaml(
            &ResolverSpec {
                dns_servers: vec![ip("1.1.1.1"), ip("2606:4700::1111")],
                config_layer: ConfigLayer::Platform,
                search_domains: vec!["example.org".into()],
                search_domains_overridden: false,
            },
            "dnsServers:\n- 1.1.1.1\n- 2606:4700::1111\nlayer: platform\nsearchDomains:\n- example.org\n",
        );
        assert_yaml(
            &TimeServerSpec {
                time_servers: vec!["pool.ntp.org".into()],
                use_nts: false,
                config_layer: ConfigLayer::Default,
            },
            "timeServers:\n- pool.ntp.org\nlayer: default\n",
        );
        assert_yaml(
            &NetworkStatus {
                address_ready: true,
                connectivity_ready: true,
                hostname_ready: false,
                etc_files_ready: true,
            },
            "addressReady: true\nconnectivityReady: true\nhostnameReady: false\netcFilesReady: true\n",
        );
        assert_yaml(
            &DeviceConfigSpec { device: serde_json::json!({"interface": "eth0", "mtu": 1500, "dhcp": true}) },
            "device:\n  dhcp: true\n  interface: eth0\n  mtu: 1500\n",
        );
    }
}

//! Links: the desired ones (with their vlan, bond, bridge and veth settings, and where a
//! port is enslaved) and those the kernel reports.

use serde::{Deserialize, Serialize};

use super::{
    BondMasterSpec, ConfigLayer, Duplex, HardwareAddress, LinkFlags, LinkType, NAMESPACE, OperationalState, Port,
    VlanProtocol, is_default,
};
use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};

pub const LINK_KIND_VLAN: &str = "vlan";
pub const LINK_KIND_BOND: &str = "bond";
pub const LINK_KIND_BRIDGE: &str = "bridge";
pub const LINK_KIND_VRF: &str = "vrf";
pub const LINK_KIND_VETH: &str = "veth";
pub const LINK_KIND_WIREGUARD: &str = "wireguard";
pub const LINK_KIND_DUMMY: &str = "dummy";

pub fn link_id(link_name: &str) -> String {
    link_name.to_string()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct VlanSpec {
    #[serde(rename = "vlanID")]
    pub vid: u16,
    #[serde(rename = "vlanProtocol")]
    pub protocol: VlanProtocol,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct StpSpec {
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct BridgeVlanSpec {
    pub filtering_enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct BridgeMasterSpec {
    #[serde(skip_serializing_if = "is_default")]
    pub stp: StpSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub vlan: BridgeVlanSpec,
}

/// Where a bonded link is enslaved; inline in the link spec (`masterName`, `slaveIndex`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct BondSlave {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub master_name: String,
    #[serde(skip_serializing_if = "is_default")]
    pub slave_index: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct BridgeSlave {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub master_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct VethSpec {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub peer_name: String,
}

/// A desired link: an existing one to set up, or a logical one (`kind`) to create. Merged
/// id: the link name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct LinkSpec {
    pub name: String,
    /// Created on the fly when missing (bond, vlan, bridge, dummy, veth).
    pub logical: bool,
    pub up: bool,
    pub mtu: u32,
    /// Only for logical links.
    pub kind: String,
    #[serde(rename = "type")]
    pub link_type: LinkType,
    #[serde(rename = "hardwareAddr", skip_serializing_if = "HardwareAddress::is_empty")]
    pub hardware_address: HardwareAddress,
    /// The link a VLAN sits on.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parent_name: String,
    #[serde(flatten)]
    pub bond_slave: BondSlave,
    #[serde(skip_serializing_if = "is_default")]
    pub bridge_slave: BridgeSlave,
    #[serde(skip_serializing_if = "is_default")]
    pub vlan: VlanSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub bond_master: BondMasterSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub bridge_master: BridgeMasterSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub veth: VethSpec,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
    /// The multicast flag to force, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multicast: Option<bool>,
}

impl LinkSpec {
    /// A link brought up at `layer`, nothing else said about it.
    pub fn up(name: &str, layer: ConfigLayer) -> LinkSpec {
        LinkSpec { name: name.to_string(), up: true, config_layer: layer, ..LinkSpec::default() }
    }

    /// Folds a candidate from the same or a higher layer in, as Talos's `LinkSpecSpec.Merge`:
    /// every field it sets (non-zero) wins, the rest stay; so a lower layer's `logical`/`kind`
    /// for a bond survives a higher layer that only sets the MTU. A zero value cannot be
    /// forced from a higher layer (`up: false` does not take a link down).
    pub fn merge_from(&mut self, other: &LinkSpec) {
        fn update<T: Default + PartialEq + Clone>(target: &mut T, source: &T) {
            if *source != T::default() {
                *target = source.clone();
            }
        }
        update(&mut self.logical, &other.logical);
        update(&mut self.up, &other.up);
        update(&mut self.mtu, &other.mtu);
        update(&mut self.kind, &other.kind);
        update(&mut self.link_type, &other.link_type);
        update(&mut self.parent_name, &other.parent_name);
        update(&mut self.bond_slave, &other.bond_slave);
        update(&mut self.vlan, &other.vlan);
        update(&mut self.bridge_master, &other.bridge_master);
        update(&mut self.bridge_slave, &other.bridge_slave);
        update(&mut self.veth, &other.veth);
        update(&mut self.bond_master, &other.bond_master);
        update(&mut self.hardware_address, &other.hardware_address);
        if other.multicast.is_some() {
            self.multicast = other.multicast;
        }
        self.config_layer = other.config_layer;
    }
}

impl ResourceSpec for LinkSpec {
    // Sensitive as in Talos, whose link specs may carry WireGuard keys.
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "LinkSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };
}

/// A link as the kernel (rtnetlink, ethtool, sysfs) reports it, id = the link name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct LinkStatus {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub alias: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alt_names: Vec<String>,
    pub index: u32,
    #[serde(rename = "type")]
    pub link_type: LinkType,
    pub link_index: u32,
    pub flags: LinkFlags,
    pub hardware_addr: HardwareAddress,
    pub permanent_addr: HardwareAddress,
    pub broadcast_addr: HardwareAddress,
    pub mtu: u32,
    pub queue_disc: String,
    #[serde(skip_serializing_if = "is_default")]
    pub master_index: u32,
    pub operational_state: OperationalState,
    pub kind: String,
    pub slave_kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub bus_path: String,
    #[serde(rename = "pciID", skip_serializing_if = "String::is_empty")]
    pub pci_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub driver: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub driver_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub firmware_version: String,
    #[serde(rename = "productID", skip_serializing_if = "String::is_empty")]
    pub product_id: String,
    #[serde(rename = "vendorID", skip_serializing_if = "String::is_empty")]
    pub vendor_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub product: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub vendor: String,
    pub link_state: bool,
    #[serde(rename = "speedMbit", skip_serializing_if = "is_default")]
    pub speed_megabits: i64,
    pub port: Port,
    pub duplex: Duplex,
    #[serde(skip_serializing_if = "is_default")]
    pub vlan: VlanSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub bridge_master: BridgeMasterSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub bond_master: BondMasterSpec,
    #[serde(skip_serializing_if = "is_default")]
    pub veth: VethSpec,
}

impl LinkStatus {
    /// A physical link: an Ethernet device that is no logical kind (what gets a default
    /// DHCP operator).
    pub fn physical(&self) -> bool {
        self.link_type == LinkType::ETHER && self.kind.is_empty()
    }
}

impl ResourceSpec for LinkStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "LinkStatuses.net.talos.dev",
        aliases: &["link", "links"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Alias", json_path: "{.alias}" },
            PrintColumn { name: "Type", json_path: "{.type}" },
            PrintColumn { name: "Kind", json_path: "{.kind}" },
            PrintColumn { name: "Hw Addr", json_path: "{.hardwareAddr}" },
            PrintColumn { name: "Oper State", json_path: "{.operationalState}" },
            PrintColumn { name: "Link State", json_path: "{.linkState}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The name of a VLAN link on `base` (`eth0.100`), kept within the kernel's 15 characters
/// as Talos does: a long base is cut to 4 characters plus a hash of the whole.
pub fn vlan_link_name(base: &str, vlan_id: u16) -> String {
    const MAX_LINK_NAME: usize = 15;
    if base.len() + 5 <= MAX_LINK_NAME {
        return format!("{base}.{vlan_id}");
    }
    use sha2::Digest;
    let hash = sha2::Sha256::digest(base.as_bytes());
    let prefix: String = base.chars().take(4).collect();
    let hex: String = hash[..(MAX_LINK_NAME - prefix.len() - 5) / 2].iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}.{vlan_id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::test_util::{assert_yaml, ip};
    use crate::resources::network::{
        AdLacpActive, AdSelect, ArpAllTargets, ArpValidate, BondMode, BondXmitHashPolicy, FailOverMac, LacpRate,
        PrimaryReselect,
    };

    /// Every bond setting set, so each shows under its Talos name (and the zero ones that
    /// are skipped, skipped).
    #[test]
    fn a_bond_renders_as_talos() {
        let bond = LinkSpec {
            name: "bond0".into(),
            logical: true,
            up: true,
            kind: LINK_KIND_BOND.into(),
            link_type: LinkType::ETHER,
            bond_master: BondMasterSpec {
                mode: BondMode::ACTIVE_BACKUP,
                hash_policy: BondXmitHashPolicy::LAYER34,
                lacp_rate: LacpRate::FAST,
                arp_validate: ArpValidate::ALL,
                arp_all_targets: ArpAllTargets::ALL,
                primary_index: Some(3),
                primary_reselect: PrimaryReselect::BETTER,
                fail_over_mac: FailOverMac::ACTIVE,
                ad_select: AdSelect::COUNT,
                mii_mon: 100,
                up_delay: 200,
                down_delay: 300,
                arp_interval: 400,
                resend_igmp: 1,
                min_links: 2,
                lp_interval: 1,
                packets_per_slave: 1,
                num_peer_notif: 1,
                tlb_dynamic_lb: 1,
                all_slaves_active: 1,
                use_carrier: true,
                ad_actor_sys_prio: 65535,
                ad_user_port_key: 7,
                peer_notify_delay: 500,
                arp_ip_targets: vec![ip("10.0.0.1"), ip("10.0.0.2")],
                ns_ip6_targets: vec![ip("fd00::1")],
                ad_lacp_active: Some(AdLacpActive::ON),
                missed_max: 2,
                primary: "eth1".into(),
            },
            config_layer: ConfigLayer::MachineConfiguration,
            ..LinkSpec::default()
        };
        assert_yaml(
            &bond,
            "name: bond0\nlogical: true\nup: true\nmtu: 0\nkind: bond\ntype: ether\nbondMaster:\n  mode: active-backup\n\
             \x20 xmitHashPolicy: layer3+4\n  lacpRate: fast\n  arpValidate: all\n  arpAllTargets: all\n  primaryIndex: 3\n\
             \x20 primaryReselect: better\n  failOverMac: active\n  adSelect: count\n  miimon: 100\n  updelay: 200\n\
             \x20 downdelay: 300\n  arpInterval: 400\n  resendIgmp: 1\n  minLinks: 2\n  lpInterval: 1\n\
             \x20 packetsPerSlave: 1\n  numPeerNotif: 1\n  tlbLogicalLb: 1\n  allSlavesActive: 1\n  useCarrier: true\n\
             \x20 adActorSysPrio: 65535\n  adUserPortKey: 7\n  peerNotifyDelay: 500\n  arpIpTargets:\n  - 10.0.0.1\n\
             \x20 - 10.0.0.2\n  nsIp6Targets:\n  - fd00::1\n  adLacpActive: \"on\"\n  missedMax: 2\n  primary: eth1\n\
             layer: configuration\n",
        );
        let mut rr = LinkSpec { name: "bond1".into(), ..LinkSpec::default() };
        rr.bond_master.fill_defaults();
        assert_yaml(
            &rr,
            "name: bond1\nlogical: false\nup: false\nmtu: 0\nkind: \"\"\ntype: netrom\nbondMaster:\n  mode: balance-rr\n\
             \x20 xmitHashPolicy: layer2\n  lacpRate: slow\n  arpValidate: none\n  arpAllTargets: any\n\
             \x20 primaryReselect: always\n  failOverMac: none\n  resendIgmp: 1\n  lpInterval: 1\n  packetsPerSlave: 1\n\
             \x20 numPeerNotif: 1\n  tlbLogicalLb: 1\n  useCarrier: true\n  missedMax: 2\nlayer: default\n",
        );
    }

    #[test]
    fn vlan_link_names_as_talos() {
        let cases = [
            ("eth0", 1, "eth0.1"),
            ("en9s0", 4095, "en9s0.4095"),
            ("0123456789", 4095, "0123456789.4095"),
            ("enx12545f8c99cd", 25, "enx1ee6413.25"),
            ("enx12545f8c99cd", 4095, "enx1ee6413.4095"),
            ("enx12545f8c99ce", 4095, "enx1ef972f.4095"),
        ];
        for (base, id, want) in cases {
            assert_eq!(vlan_link_name(base, id), want);
        }
    }
}

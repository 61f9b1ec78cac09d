//! The nocloud `network-config` (cloud-init network config, version 1 and version 2, bare or
//! under a `network:` key) as `platform`-layer candidates, with the rules of Talos's nocloud
//! platform (`platform/nocloud/metadata.go`): v1 `physical`, `bond`, `vlan` and `nameserver`
//! entries with `dhcp`/`dhcp4`, `static`/`static6` and `ipv6_dhcpv6-stateful` subnets; v2
//! `ethernets`, `bonds` and `vlans` with addresses, gateways, routes (with `on-link`),
//! DHCP and nameservers. A link matched by MAC takes the node's name for it.
//!
//! Pure: reading the `cidata` disk is the storage side's job; a controller hands the text in
//! with the node's links. Fields cloud-init has and Talos does not act on are ignored.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;

use crate::resources::network::{
    AdLacpActive, AddressSpec, BondMasterSpec, BondMode, BondSlave, BondXmitHashPolicy, ConfigLayer,
    DEFAULT_ROUTE_METRIC, Dhcp4OperatorSpec, Dhcp6OperatorSpec, Family, LINK_KIND_BOND, LINK_KIND_VLAN, LacpRate,
    LinkSpec, LinkStatus, LinkType, Operator, OperatorSpec, ResolverSpec, RouteProtocol, RouteSpec, RouteType,
    RoutingTable, Scope, VlanProtocol, VlanSpec, netmask_bits,
};
use crate::types::IpPrefix;

const LAYER: ConfigLayer = ConfigLayer::Platform;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NocloudError {
    #[error("nocloud network-config: not YAML: {0}")]
    Yaml(String),
    #[error("nocloud network-config: neither a network nor a version key")]
    Unrecognized,
    #[error("nocloud network-config: version {0} is not supported (1 or 2)")]
    Version(u32),
    #[error("nocloud network-config: {link}: {what} {value:?}: {reason}")]
    Invalid { link: String, what: &'static str, value: String, reason: String },
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Wrapped {
    network: Option<NetworkConfig>,
    version: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NetworkConfig {
    version: u32,
    config: Vec<ConfigV1>,
    ethernets: BTreeMap<String, Ethernet>,
    bonds: BTreeMap<String, Bond>,
    vlans: BTreeMap<String, Vlan>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SubnetV1 {
    address: String,
    netmask: String,
    gateway: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ParamsV1 {
    #[serde(rename = "bond-lacp-rate")]
    lacp_rate: String,
    #[serde(rename = "bond-miimon")]
    miimon: u32,
    #[serde(rename = "bond-mode")]
    mode: String,
    #[serde(rename = "bond-xmit-hash-policy")]
    hash_policy: String,
    #[serde(rename = "up-delay")]
    up_delay: u32,
    #[serde(rename = "down-delay")]
    down_delay: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ConfigV1 {
    mac_address: String,
    name: String,
    mtu: u32,
    subnets: Vec<SubnetV1>,
    address: Vec<String>,
    #[serde(rename = "type")]
    kind: String,
    bond_interfaces: Vec<String>,
    vlan_id: u16,
    vlan_link: String,
    params: ParamsV1,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Match {
    name: String,
    macaddress: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Nameservers {
    search: Vec<String>,
    addresses: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RouteV2 {
    to: String,
    via: String,
    metric: u32,
    table: u32,
    #[serde(rename = "on-link")]
    on_link: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Ethernet {
    #[serde(rename = "match")]
    matching: Match,
    dhcp4: bool,
    dhcp6: bool,
    addresses: Vec<String>,
    gateway4: String,
    gateway6: String,
    mtu: u32,
    nameservers: Nameservers,
    routes: Vec<RouteV2>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct BondParams {
    mode: String,
    #[serde(rename = "lacp-rate")]
    lacp_rate: String,
    #[serde(rename = "transmit-hash-policy")]
    hash_policy: String,
    #[serde(rename = "mii-monitor-interval")]
    miimon: u32,
    #[serde(rename = "up-delay")]
    up_delay: u32,
    #[serde(rename = "down-delay")]
    down_delay: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Bond {
    #[serde(flatten)]
    ethernet: Ethernet,
    interfaces: Vec<String>,
    parameters: BondParams,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Vlan {
    #[serde(flatten)]
    ethernet: Ethernet,
    id: u16,
    link: String,
}

/// What a nocloud network-config says, as platform-layer candidates.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PlatformNetwork {
    pub addresses: Vec<AddressSpec>,
    pub routes: Vec<RouteSpec>,
    pub links: Vec<LinkSpec>,
    pub operators: Vec<OperatorSpec>,
    pub resolvers: Vec<ResolverSpec>,
    /// A MAC named no link of the node: parse again when the links change (Talos's
    /// `needsReconcile`).
    pub unmatched_mac: bool,
}

fn invalid(link: &str, what: &'static str, value: &str, reason: impl Into<String>) -> NocloudError {
    NocloudError::Invalid { link: link.to_string(), what, value: value.to_string(), reason: reason.into() }
}

fn ip(link: &str, what: &'static str, s: &str) -> Result<IpAddr, NocloudError> {
    s.parse().map_err(|_| invalid(link, what, s, "not an IP address"))
}

fn cidr(link: &str, s: &str) -> Result<IpPrefix, NocloudError> {
    s.parse().map_err(|e: crate::types::PrefixError| invalid(link, "address", s, e.to_string()))
}

fn named<T: std::str::FromStr + Default>(link: &str, what: &'static str, s: &str) -> Result<T, NocloudError> {
    if s.is_empty() {
        return Ok(T::default());
    }
    s.parse().map_err(|_| invalid(link, what, s, "unknown name"))
}

/// The node's link with `mac` (its permanent address, else its current one), if any.
fn link_by_mac<'a>(links: &'a [(String, LinkStatus)], mac: &str) -> Option<&'a str> {
    links.iter().filter(|(_, s)| s.physical()).find_map(|(name, s)| {
        let addr = if s.permanent_addr.is_empty() { &s.hardware_addr } else { &s.permanent_addr };
        addr.to_string().eq_ignore_ascii_case(mac).then_some(name.as_str())
    })
}

fn address(link: &str, prefix: IpPrefix) -> AddressSpec {
    AddressSpec::static_address(link, prefix, LAYER)
}

fn gateway_route(link: &str, gateway: IpAddr, priority: u32) -> RouteSpec {
    let mut route = RouteSpec {
        family: Family::of(&gateway),
        gateway: Some(gateway),
        out_link_name: link.to_string(),
        table: RoutingTable::MAIN,
        priority,
        protocol: RouteProtocol::STATIC,
        route_type: RouteType::UNICAST,
        config_layer: LAYER,
        ..RouteSpec::default()
    };
    route.normalize();
    route
}

fn dhcp4(link: &str) -> OperatorSpec {
    OperatorSpec {
        operator: Operator::Dhcp4,
        link_name: link.to_string(),
        require_up: true,
        dhcp4: Dhcp4OperatorSpec { route_metric: DEFAULT_ROUTE_METRIC, ..Default::default() },
        config_layer: LAYER,
        ..OperatorSpec::default()
    }
}

fn dhcp6(link: &str, metric: u32) -> OperatorSpec {
    OperatorSpec {
        operator: Operator::Dhcp6,
        link_name: link.to_string(),
        require_up: true,
        dhcp6: Dhcp6OperatorSpec { route_metric: metric, ..Default::default() },
        config_layer: LAYER,
        ..OperatorSpec::default()
    }
}

#[allow(clippy::too_many_arguments)]
fn bond_link(
    name: &str,
    mtu: u32,
    mode: &str,
    hash_policy: &str,
    lacp_rate: &str,
    miimon: u32,
    up_delay: u32,
    down_delay: u32,
) -> Result<LinkSpec, NocloudError> {
    let mode: BondMode = named(name, "bond mode", mode)?;
    let mut master = BondMasterSpec {
        mode,
        hash_policy: named::<BondXmitHashPolicy>(name, "transmit hash policy", hash_policy)?,
        lacp_rate: named::<LacpRate>(name, "lacp rate", lacp_rate)?,
        mii_mon: miimon,
        up_delay,
        down_delay,
        ad_lacp_active: (mode == BondMode::IEEE_802_3AD).then_some(AdLacpActive::ON),
        ..BondMasterSpec::default()
    };
    master.fill_defaults();
    Ok(LinkSpec {
        name: name.to_string(),
        logical: true,
        up: true,
        mtu,
        kind: LINK_KIND_BOND.to_string(),
        link_type: LinkType::ETHER,
        bond_master: master,
        config_layer: LAYER,
        ..LinkSpec::default()
    })
}

fn vlan_link(name: &str, mtu: u32, parent: &str, vid: u16) -> LinkSpec {
    LinkSpec {
        name: name.to_string(),
        logical: true,
        up: true,
        mtu,
        kind: LINK_KIND_VLAN.to_string(),
        link_type: LinkType::ETHER,
        parent_name: parent.to_string(),
        vlan: VlanSpec { vid, protocol: VlanProtocol::IEEE_802_1Q },
        config_layer: LAYER,
        ..LinkSpec::default()
    }
}

fn resolver(servers: Vec<IpAddr>) -> ResolverSpec {
    ResolverSpec { dns_servers: servers, config_layer: LAYER, ..ResolverSpec::default() }
}

fn v1_subnets(out: &mut PlatformNetwork, entry: &ConfigV1, name: &str) -> Result<(), NocloudError> {
    for subnet in &entry.subnets {
        match subnet.kind.as_str() {
            "dhcp" | "dhcp4" => out.operators.push(dhcp4(name)),
            "static" | "static6" => {
                let v6 = subnet.kind == "static6";
                let prefix = if subnet.address.contains('/') {
                    cidr(name, &subnet.address)?
                } else {
                    let addr = ip(name, "address", &subnet.address)?;
                    let mask = ip(name, "netmask", &subnet.netmask)?;
                    let bits = netmask_bits(&mask)
                        .ok_or_else(|| invalid(name, "netmask", &subnet.netmask, "not a netmask"))?;
                    IpPrefix::new(addr, bits).map_err(|e| invalid(name, "netmask", &subnet.netmask, e.to_string()))?
                };
                out.addresses.push(address(name, prefix));
                if !subnet.gateway.is_empty() {
                    let gw = ip(name, "gateway", &subnet.gateway)?;
                    let priority = if v6 { 2 * DEFAULT_ROUTE_METRIC } else { DEFAULT_ROUTE_METRIC };
                    out.routes.push(gateway_route(name, gw, priority));
                }
            }
            "ipv6_dhcpv6-stateful" => out.operators.push(dhcp6(name, 2 * DEFAULT_ROUTE_METRIC)),
            _ => {}
        }
    }
    Ok(())
}

fn v1(config: &NetworkConfig, links: &[(String, LinkStatus)]) -> Result<PlatformNetwork, NocloudError> {
    let mut out = PlatformNetwork::default();
    let mut physical_names: BTreeMap<String, String> = BTreeMap::new();
    let mut enslaved: BTreeMap<String, (String, u32)> = BTreeMap::new();
    for entry in &config.config {
        match entry.kind.as_str() {
            "nameserver" => {
                let servers = entry.address.iter().map(|a| ip("nameserver", "address", a)).collect::<Result<_, _>>()?;
                out.resolvers.push(resolver(servers));
            }
            "bond" => {
                let p = &entry.params;
                let link = bond_link(
                    &entry.name,
                    entry.mtu,
                    &p.mode,
                    &p.hash_policy,
                    &p.lacp_rate,
                    p.miimon,
                    p.up_delay,
                    p.down_delay,
                )?;
                out.links.push(link);
                for (index, slave) in entry.bond_interfaces.iter().enumerate() {
                    enslaved.insert(slave.clone(), (entry.name.clone(), index as u32));
                }
                v1_subnets(&mut out, entry, &entry.name)?;
            }
            "vlan" => {
                let parent = physical_names.get(&entry.vlan_link).cloned().unwrap_or_else(|| entry.vlan_link.clone());
                out.links.push(vlan_link(&entry.name, entry.mtu, &parent, entry.vlan_id));
                v1_subnets(&mut out, entry, &entry.name)?;
            }
            "physical" => {
                let mut name = entry.name.clone();
                if !entry.mac_address.is_empty() {
                    match link_by_mac(links, &entry.mac_address) {
                        Some(found) => name = found.to_string(),
                        None => out.unmatched_mac = true,
                    }
                }
                physical_names.insert(entry.name.clone(), name.clone());
                out.links.push(LinkSpec { mtu: entry.mtu, ..LinkSpec::up(&name, LAYER) });
                v1_subnets(&mut out, entry, &name)?;
            }
            _ => {}
        }
    }
    for (slave, (master, index)) in enslaved {
        let name = physical_names.get(&slave).cloned().unwrap_or(slave);
        for link in out.links.iter_mut().filter(|l| l.name == name) {
            link.bond_slave = BondSlave { master_name: master.clone(), slave_index: index };
        }
    }
    Ok(out)
}

fn v2_ethernet(
    out: &mut PlatformNetwork,
    name: &str,
    eth: &Ethernet,
    dns: &mut Vec<IpAddr>,
) -> Result<(), NocloudError> {
    if eth.dhcp4 {
        out.operators.push(dhcp4(name));
    }
    if eth.dhcp6 {
        out.operators.push(dhcp6(name, DEFAULT_ROUTE_METRIC));
    }
    for a in &eth.addresses {
        out.addresses.push(address(name, cidr(name, a)?));
    }
    if !eth.gateway4.is_empty() {
        out.routes.push(gateway_route(name, ip(name, "gateway4", &eth.gateway4)?, DEFAULT_ROUTE_METRIC));
    }
    if !eth.gateway6.is_empty() {
        out.routes.push(gateway_route(name, ip(name, "gateway6", &eth.gateway6)?, 2 * DEFAULT_ROUTE_METRIC));
    }
    for a in &eth.nameservers.addresses {
        dns.push(ip(name, "nameserver", a)?);
    }
    for r in &eth.routes {
        let gw = ip(name, "route via", &r.via)?;
        let to = match r.to.as_str() {
            "default" if gw.is_ipv4() => "0.0.0.0/0".to_string(),
            "default" => "::/0".to_string(),
            other => other.to_string(),
        };
        let destination: IpPrefix =
            to.parse().map_err(|e: crate::types::PrefixError| invalid(name, "route to", &r.to, e.to_string()))?;
        let table = if r.table == 0 { RoutingTable::MAIN } else { RoutingTable(r.table) };
        let mut priority = if r.metric == 0 { DEFAULT_ROUTE_METRIC } else { r.metric };
        if gw.is_ipv6() && priority == DEFAULT_ROUTE_METRIC {
            priority = 2 * DEFAULT_ROUTE_METRIC;
        }
        let mut route = RouteSpec {
            family: Family::of(&gw),
            destination: Some(destination),
            gateway: Some(gw),
            out_link_name: name.to_string(),
            table,
            priority,
            protocol: RouteProtocol::STATIC,
            route_type: RouteType::UNICAST,
            config_layer: LAYER,
            ..RouteSpec::default()
        };
        route.normalize();
        out.routes.push(route);
        if r.on_link {
            // The gateway is reachable on the link itself, whatever the addresses say.
            out.routes.push(RouteSpec {
                family: Family::of(&gw),
                destination: Some(IpPrefix::host(gw)),
                out_link_name: name.to_string(),
                scope: Scope::LINK,
                table,
                priority: if r.metric == 0 { DEFAULT_ROUTE_METRIC } else { r.metric },
                protocol: RouteProtocol::STATIC,
                route_type: RouteType::UNICAST,
                config_layer: LAYER,
                ..RouteSpec::default()
            });
        }
    }
    Ok(())
}

fn v2(config: &NetworkConfig, links: &[(String, LinkStatus)]) -> Result<PlatformNetwork, NocloudError> {
    let mut out = PlatformNetwork::default();
    let mut dns = Vec::new();
    for (key, eth) in &config.ethernets {
        let mut bond_slave = BondSlave::default();
        for (bond_name, bond) in &config.bonds {
            if let Some(index) = bond.interfaces.iter().position(|i| i == key) {
                bond_slave = BondSlave { master_name: bond_name.clone(), slave_index: index as u32 };
            }
        }
        let mut name = key.clone();
        if !eth.matching.macaddress.is_empty() {
            match link_by_mac(links, &eth.matching.macaddress) {
                Some(found) => name = found.to_string(),
                None => out.unmatched_mac = true,
            }
        }
        out.links.push(LinkSpec { mtu: eth.mtu, bond_slave, ..LinkSpec::up(&name, LAYER) });
        v2_ethernet(&mut out, &name, eth, &mut dns)?;
    }
    for (name, bond) in &config.bonds {
        let p = &bond.parameters;
        out.links.push(bond_link(
            name,
            bond.ethernet.mtu,
            &p.mode,
            &p.hash_policy,
            &p.lacp_rate,
            p.miimon,
            p.up_delay,
            p.down_delay,
        )?);
        v2_ethernet(&mut out, name, &bond.ethernet, &mut dns)?;
    }
    for (name, vlan) in &config.vlans {
        out.links.push(vlan_link(name, vlan.ethernet.mtu, &vlan.link, vlan.id));
        v2_ethernet(&mut out, name, &vlan.ethernet, &mut dns)?;
    }
    if !dns.is_empty() {
        out.resolvers.push(resolver(dns));
    }
    Ok(out)
}

/// Reads a nocloud `network-config` against the node's links (for `mac_address` and
/// `match.macaddress`).
pub fn parse_network_config(text: &str, links: &[(String, LinkStatus)]) -> Result<PlatformNetwork, NocloudError> {
    let wrapped: Wrapped = serde_saphyr::from_str(text).map_err(|e| NocloudError::Yaml(e.to_string()))?;
    let config: NetworkConfig = match (wrapped.network, wrapped.version) {
        (Some(config), _) => config,
        (None, Some(_)) => serde_saphyr::from_str(text).map_err(|e| NocloudError::Yaml(e.to_string()))?,
        (None, None) => return Err(NocloudError::Unrecognized),
    };
    match config.version {
        1 => v1(&config, links),
        2 => v2(&config, links),
        other => Err(NocloudError::Version(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::{HardwareAddress, operator_id};

    fn links() -> Vec<(String, LinkStatus)> {
        let ether = |mac: &str| LinkStatus {
            link_type: LinkType::ETHER,
            hardware_addr: mac.parse::<HardwareAddress>().unwrap(),
            ..LinkStatus::default()
        };
        vec![("enp0s3".into(), ether("52:54:00:00:00:01")), ("enp0s4".into(), ether("52:54:00:00:00:02"))]
    }

    fn ids<T>(specs: &[T], id: impl Fn(&T) -> String) -> Vec<String> {
        specs.iter().map(id).collect()
    }

    const V1: &str = r#"version: 1
config:
  - type: physical
    name: eth0
    mac_address: "52:54:00:00:00:01"
    mtu: 1450
    subnets:
      - type: static
        address: 192.168.1.11
        netmask: 255.255.255.0
        gateway: 192.168.1.1
      - type: static6
        address: "2001:db8::11/64"
        gateway: "2001:db8::1"
  - type: physical
    name: eth1
    mac_address: "52:54:00:00:00:02"
  - type: physical
    name: eth2
    subnets:
      - type: dhcp
      - type: ipv6_dhcpv6-stateful
  - type: bond
    name: bond0
    bond_interfaces: [eth1, eth2]
    params:
      bond-mode: 802.3ad
      bond-lacp-rate: fast
      bond-miimon: 100
  - type: vlan
    name: eth0.10
    vlan_link: eth0
    vlan_id: 10
    subnets:
      - type: static
        address: 10.10.0.2/24
  - type: nameserver
    address: [8.8.8.8, 1.1.1.1]
    search: [lan]
"#;

    #[test]
    fn version_1() {
        let n = parse_network_config(V1, &links()).unwrap();
        assert!(!n.unmatched_mac);
        assert_eq!(ids(&n.links, |l| l.name.clone()), ["enp0s3", "enp0s4", "eth2", "bond0", "eth0.10"]);
        assert_eq!(n.links[0].mtu, 1450);
        assert_eq!(n.links[1].bond_slave, BondSlave { master_name: "bond0".into(), slave_index: 0 });
        assert_eq!(n.links[2].bond_slave, BondSlave { master_name: "bond0".into(), slave_index: 1 });
        let bond = &n.links[3];
        assert_eq!(
            (bond.kind.as_str(), bond.bond_master.mode, bond.bond_master.lacp_rate),
            ("bond", BondMode::IEEE_802_3AD, LacpRate::FAST)
        );
        assert_eq!((bond.bond_master.mii_mon, bond.bond_master.ad_lacp_active), (100, Some(AdLacpActive::ON)));
        assert_eq!(n.links[4].parent_name, "enp0s3", "a VLAN on a MAC-matched link follows its name");
        assert_eq!(n.links[4].vlan.vid, 10);
        assert_eq!(
            ids(&n.addresses, AddressSpec::id),
            ["enp0s3/192.168.1.11/24", "enp0s3/2001:db8::11/64", "eth0.10/10.10.0.2/24"]
        );
        assert!(n.addresses.iter().all(|a| a.config_layer == LAYER));
        assert_eq!(ids(&n.routes, RouteSpec::id), ["inet4/192.168.1.1//1024", "enp0s3/inet6/2001:db8::1//2048"]);
        assert_eq!(ids(&n.operators, operator_id), ["dhcp4/eth2", "dhcp6/eth2"]);
        assert_eq!(n.operators[1].dhcp6.route_metric, 2048);
        assert_eq!(n.resolvers[0].dns_servers, ["8.8.8.8".parse::<IpAddr>().unwrap(), "1.1.1.1".parse().unwrap()]);
    }

    const V2: &str = r#"network:
  version: 2
  ethernets:
    eth0:
      match:
        macaddress: "52:54:00:00:00:01"
      addresses: [192.168.1.11/24, "2001:db8::11/64"]
      gateway4: 192.168.1.1
      gateway6: "2001:db8::1"
      mtu: 1500
      nameservers:
        addresses: [10.0.0.53]
      routes:
        - to: 10.20.0.0/16
          via: 192.168.1.254
          metric: 50
        - to: default
          via: "fe80::1"
          on-link: true
    eth1:
      dhcp4: true
      dhcp6: true
    eth2: {}
  bonds:
    bond0:
      interfaces: [eth2]
      addresses: [10.30.0.2/24]
      parameters:
        mode: active-backup
  vlans:
    vlan100:
      id: 100
      link: eth0
      addresses: [10.100.0.2/24]
"#;

    #[test]
    fn version_2() {
        let n = parse_network_config(V2, &links()).unwrap();
        assert_eq!(ids(&n.links, |l| l.name.clone()), ["enp0s3", "eth1", "eth2", "bond0", "vlan100"]);
        assert_eq!(n.links[2].bond_slave, BondSlave { master_name: "bond0".into(), slave_index: 0 });
        assert_eq!(
            (n.links[3].bond_master.mode, n.links[3].bond_master.ad_lacp_active),
            (BondMode::ACTIVE_BACKUP, None)
        );
        assert_eq!(n.links[4].vlan, VlanSpec { vid: 100, protocol: VlanProtocol::IEEE_802_1Q });
        assert_eq!(
            ids(&n.addresses, AddressSpec::id),
            ["enp0s3/192.168.1.11/24", "enp0s3/2001:db8::11/64", "bond0/10.30.0.2/24", "vlan100/10.100.0.2/24"]
        );
        assert_eq!(
            ids(&n.routes, RouteSpec::id),
            [
                "inet4/192.168.1.1//1024",
                "enp0s3/inet6/2001:db8::1//2048",
                "inet4/192.168.1.254/10.20.0.0/16/50",
                "enp0s3/inet6/fe80::1//2048",
                "enp0s3/inet6//fe80::1/128/1024",
            ]
        );
        let on_link = n.routes.last().unwrap();
        assert_eq!((on_link.scope, on_link.gateway), (Scope::LINK, None));
        assert_eq!(ids(&n.operators, operator_id), ["dhcp4/eth1", "dhcp6/eth1"]);
        assert_eq!(n.operators[1].dhcp6.route_metric, DEFAULT_ROUTE_METRIC);
        assert_eq!(n.resolvers.len(), 1);
        assert_eq!(n.resolvers[0].dns_servers, ["10.0.0.53".parse::<IpAddr>().unwrap()]);

        // The bare form reads the same; an unmatched MAC keeps the written name.
        let bare: Vec<&str> = V2.lines().skip(1).map(|l| l.strip_prefix("  ").unwrap_or(l)).collect();
        let bare = bare.join("\n");
        let n2 = parse_network_config(&bare, &links()).unwrap();
        assert_eq!(n2, n);
        let n3 = parse_network_config(V2, &[]).unwrap();
        assert!(n3.unmatched_mac);
        assert_eq!(n3.links[0].name, "eth0");
    }

    #[test]
    fn errors_say_what() {
        let cases = [
            ("hello: world\n", NocloudError::Unrecognized.to_string()),
            ("version: 3\n", NocloudError::Version(3).to_string()),
            (
                "version: 2\nethernets:\n  eth0:\n    addresses: [10.0.0.1]\n",
                "nocloud network-config: eth0: address \"10.0.0.1\": prefix \"10.0.0.1\": missing /<prefix length>"
                    .into(),
            ),
            (
                "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    subnets:\n      - type: static\n        address: 10.0.0.2\n        netmask: 255.0.255.0\n",
                "nocloud network-config: eth0: netmask \"255.0.255.0\": not a netmask".into(),
            ),
            (
                "version: 1\nconfig:\n  - type: bond\n    name: bond0\n    params:\n      bond-mode: fastest\n",
                "nocloud network-config: bond0: bond mode \"fastest\": unknown name".into(),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_network_config(text, &[]).unwrap_err().to_string(), want, "{text}");
        }
        assert!(matches!(parse_network_config("[", &[]), Err(NocloudError::Yaml(_))));
    }
}

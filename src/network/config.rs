//! A machine config's networking ([`NetworkView`]) as layered candidate specs: addresses,
//! routes, links, hostname, resolvers, time servers and DHCP operators, each with Talos's
//! rules (`address_config.go`, `route_config.go`, `link_config.go`, `operator_config.go`,
//! `hostname_config.go`, `resolver_config.go`, `timeserver_config.go`).
//!
//! The layer is a parameter: the machine configuration writes these at `configuration`, an
//! image's own network documents at `platform`. Device selectors are resolved here against
//! the node's links ([`resolve_devices`]), since a selector picks links only the kernel
//! knows. Pure: no state, no kernel; the config controllers feed it and write what it returns.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::str::FromStr;

use crate::config::network::{
    Device, DeviceSelector, DhcpConfig, DhcpOptions, LinkKind, NetworkView, Route, glob_match,
};
use crate::network::cmdline::LinkResolver;
use crate::resources::network::{
    AddressFlags, AddressSpec, BondMasterSpec, BondSlave, BridgeMasterSpec, BridgeSlave, BridgeVlanSpec,
    ClientIdentifier, ClientIdentifierSpec, ConfigLayer, DEFAULT_ROUTE_METRIC, Dhcp4OperatorSpec, Dhcp6OperatorSpec,
    Family, HardwareAddress, HostnameSpec, LINK_KIND_BOND, LINK_KIND_BRIDGE, LINK_KIND_DUMMY, LINK_KIND_VLAN, LinkSpec,
    LinkStatus, LinkType, Operator, OperatorSpec, ResolverSpec, RouteProtocol, RouteSpec, RouteType, RoutingTable,
    Scope, StpSpec, TimeServerSpec, VlanProtocol, VlanSpec, vlan_link_name,
};
use crate::types::IpPrefix;

/// Talos's default DNS servers (`DefaultPrimaryResolver`, `DefaultSecondaryResolver`).
pub const DEFAULT_RESOLVERS: [&str; 2] = ["1.1.1.1", "8.8.8.8"];
/// Talos's default NTP server (`DefaultNTPServer`), spoken to with NTS.
pub const DEFAULT_TIME_SERVER: &str = "time.cloudflare.com";

/// Whether `selector` picks the link (Talos's `selectDevices`): every glob it sets matches,
/// and `physical`, when set, agrees; a selector that sets nothing picks nothing.
pub fn selector_matches(selector: &DeviceSelector, link: &LinkStatus) -> bool {
    let pairs = [
        (&selector.hardware_addr, link.hardware_addr.to_string()),
        (&selector.permanent_addr, link.permanent_addr.to_string()),
        (&selector.pci_id, link.pci_id.clone()),
        (&selector.driver, link.driver.clone()),
        (&selector.bus_path, link.bus_path.clone()),
    ];
    let mut matched: Option<bool> = None;
    for (pattern, value) in pairs {
        let Some(pattern) = pattern else { continue };
        if !glob_match(pattern, &value) {
            return false;
        }
        matched = Some(true);
    }
    if let Some(physical) = selector.physical {
        matched = Some(physical == link.physical());
    }
    matched.unwrap_or(false)
}

/// The devices with their selectors resolved, as Talos's `DeviceConfigController`: a device
/// with a `deviceSelector` becomes one device per link it picks (none: dropped, with a
/// warning), a bond's `deviceSelectors` become its interfaces (never the bond itself).
pub fn resolve_devices(devices: &[Device], links: &[(String, LinkStatus)]) -> Vec<Device> {
    let mut out = Vec::new();
    for device in devices {
        if let Some(selector) = &device.selector {
            let picked: Vec<&String> =
                links.iter().filter(|(_, status)| selector_matches(selector, status)).map(|(n, _)| n).collect();
            if picked.is_empty() {
                tracing::warn!(index = device.index, ?selector, "no network device matches the device selector");
            }
            out.extend(picked.into_iter().map(|name| device.on(name)));
            continue;
        }
        let mut device = device.clone();
        if let Some(bond) = &mut device.bond
            && !bond.device_selectors.is_empty()
        {
            let own = device.interface.clone().unwrap_or_default();
            let mut members = Vec::new();
            for selector in &bond.device_selectors {
                for (name, status) in links {
                    if *name != own && selector_matches(selector, status) && !members.contains(name) {
                        members.push(name.clone());
                    }
                }
            }
            if members.is_empty() {
                tracing::warn!(bond = own, "no network device matches the bond's device selectors");
                continue;
            }
            bond.interfaces = members;
            bond.device_selectors.clear();
        }
        out.push(device);
    }
    out
}

fn interface(device: &Device, links: &LinkResolver) -> String {
    links.resolve(device.interface.as_deref().unwrap_or_default())
}

/// Devices that take part (not `ignore`d), with their resolved link names.
fn active<'a>(devices: &'a [Device], links: &LinkResolver) -> impl Iterator<Item = (&'a Device, String)> {
    let names: Vec<String> = devices.iter().map(|d| interface(d, links)).collect();
    devices.iter().zip(names).filter(|(d, _)| !d.ignore)
}

/// The links the machine configuration says to leave alone.
pub fn ignored_links(devices: &[Device], links: &LinkResolver) -> BTreeSet<String> {
    devices.iter().filter(|d| d.ignore).map(|d| interface(d, links)).collect()
}

// ---------------------------------------------------------------------------------------------
// Addresses

fn static_address(link: &str, address: &IpPrefix, priority: u32, layer: ConfigLayer) -> AddressSpec {
    let mut spec = AddressSpec::static_address(link, *address, layer);
    spec.priority = priority;
    spec
}

/// The loopback address every node has, at the default layer (Talos's `loopbackDefaults`:
/// `127.0.0.1/8`, host scope; the kernel adds `::1` itself, where IPv6 is on).
pub fn loopback_addresses() -> Vec<AddressSpec> {
    let lo = IpPrefix::new(IpAddr::from([127, 0, 0, 1]), 8).unwrap_or_else(|_| IpPrefix::host([127, 0, 0, 1].into()));
    vec![AddressSpec {
        address: lo,
        link_name: "lo".into(),
        family: Family::INET4,
        scope: Scope::HOST,
        flags: AddressFlags::PERMANENT,
        announce_with_arp: false,
        priority: 0,
        config_layer: ConfigLayer::Default,
    }]
}

/// Static addresses of the devices, their VLANs and the link documents.
pub fn address_specs(
    view: &NetworkView,
    devices: &[Device],
    links: &LinkResolver,
    layer: ConfigLayer,
) -> Vec<AddressSpec> {
    let mut out = Vec::new();
    for (device, name) in active(devices, links) {
        out.extend(device.addresses.iter().map(|a| static_address(&name, a, 0, layer)));
        let original = device.interface.as_deref().unwrap_or_default();
        for vlan in &device.vlans {
            let vlan_name = vlan_link_name(original, vlan.vlan_id);
            out.extend(vlan.addresses.iter().map(|a| static_address(&vlan_name, a, 0, layer)));
        }
    }
    for doc in &view.links {
        let name = links.resolve(&doc.name);
        out.extend(
            doc.addresses.iter().map(|a| static_address(&name, &a.address, a.route_priority.unwrap_or(0), layer)),
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Routes

/// One route as Talos's `RouteConfigController` builds it.
fn route(link: &str, route: &Route, layer: ConfigLayer) -> RouteSpec {
    let mut spec = RouteSpec {
        destination: route.destination,
        gateway: route.gateway,
        source: route.source,
        ..RouteSpec::default()
    };
    spec.normalize();
    let normalized_family = spec.family;
    spec.family = if spec.gateway.is_some_and(|g| g.is_ipv6()) || spec.destination.is_some_and(|d| d.addr().is_ipv6()) {
        Family::INET6
    } else if normalized_family != Family(0) {
        normalized_family
    } else {
        Family::INET4
    };
    spec.priority = route.metric.unwrap_or(DEFAULT_ROUTE_METRIC);
    spec.mtu = route.mtu;
    spec.table = route.table.as_deref().and_then(|t| RoutingTable::from_str(t).ok()).unwrap_or(RoutingTable::MAIN);
    spec.protocol = RouteProtocol::STATIC;
    spec.out_link_name = link.to_string();
    spec.config_layer = layer;
    spec.route_type = if spec.destination.is_some_and(|d| d.addr().is_multicast()) {
        RouteType::MULTICAST
    } else {
        RouteType::UNICAST
    };
    spec
}

/// Routes of the devices, their VLANs and the link documents.
pub fn route_specs(view: &NetworkView, devices: &[Device], links: &LinkResolver, layer: ConfigLayer) -> Vec<RouteSpec> {
    let mut out = Vec::new();
    for (device, name) in active(devices, links) {
        out.extend(device.routes.iter().map(|r| route(&name, r, layer)));
        let original = device.interface.as_deref().unwrap_or_default();
        for vlan in &device.vlans {
            let vlan_name = vlan_link_name(original, vlan.vlan_id);
            out.extend(vlan.routes.iter().map(|r| route(&vlan_name, r, layer)));
        }
    }
    for doc in &view.links {
        let name = links.resolve(&doc.name);
        out.extend(doc.routes.iter().map(|r| route(&name, r, layer)));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Links

fn parse_or_default<T: FromStr + Default>(name: &str) -> T {
    if name.is_empty() { T::default() } else { name.parse().unwrap_or_default() }
}

/// A bond's master settings, the primary resolved to its link and the driver's defaults
/// filled in as Talos does.
fn bond_master(options: &BondMasterSpec, links: &LinkResolver) -> BondMasterSpec {
    let primary = if options.primary.is_empty() { String::new() } else { links.resolve(&options.primary) };
    let mut spec = BondMasterSpec { primary, ..options.clone() };
    spec.fill_defaults();
    spec
}

fn make_logical(link: &mut LinkSpec, kind: &str) {
    link.logical = true;
    link.kind = kind.to_string();
    link.link_type = LinkType::ETHER;
}

fn vlan_protocol(mode: &str) -> VlanProtocol {
    if mode == "802.1ad" { VlanProtocol::IEEE_802_1AD } else { VlanProtocol::IEEE_802_1Q }
}

/// Every link the configuration sets up or creates: the devices (MTU, bond, bridge, dummy,
/// VLANs) and their bond and bridge ports, the link documents and their ports, and the links
/// a DHCP document names (brought up implicitly), as Talos's `LinkConfigController`.
pub fn link_specs(view: &NetworkView, devices: &[Device], links: &LinkResolver, layer: ConfigLayer) -> Vec<LinkSpec> {
    let mut map: BTreeMap<String, LinkSpec> = BTreeMap::new();
    let up = |name: &str| LinkSpec::up(name, layer);

    // Which physical links are ports, and of what.
    let mut bonded: BTreeMap<String, (String, u32)> = BTreeMap::new();
    let mut bridged: BTreeMap<String, String> = BTreeMap::new();
    for (device, name) in active(devices, links) {
        if let Some(bond) = &device.bond {
            for (index, port) in bond.interfaces.iter().enumerate() {
                bonded.insert(links.resolve(port), (name.clone(), index as u32));
            }
        }
        if let Some(bridge) = &device.bridge {
            for port in &bridge.interfaces {
                bridged.insert(links.resolve(port), name.clone());
            }
        }
        if let Some(master) = &device.bridge_port {
            bridged.insert(name.clone(), links.resolve(master));
        }
    }

    for (device, name) in active(devices, links) {
        let link = map.entry(name.clone()).or_insert_with(|| up(&name));
        if device.mtu != 0 {
            link.mtu = device.mtu;
        }
        if let Some(bond) = &device.bond {
            make_logical(link, LINK_KIND_BOND);
            link.bond_master = bond_master(&bond.options, links);
        }
        if let Some(bridge) = &device.bridge {
            make_logical(link, LINK_KIND_BRIDGE);
            link.bridge_master = BridgeMasterSpec {
                stp: StpSpec { enabled: bridge.stp },
                vlan: BridgeVlanSpec { filtering_enabled: bridge.vlan_filtering },
            };
        }
        if device.dummy {
            make_logical(link, LINK_KIND_DUMMY);
        }
        // Talos names a VLAN after the interface as written, before aliases resolve.
        let original = device.interface.as_deref().unwrap_or_default();
        for vlan in &device.vlans {
            let vlan_name = vlan_link_name(original, vlan.vlan_id);
            let mut spec = up(&vlan_name);
            make_logical(&mut spec, LINK_KIND_VLAN);
            spec.mtu = vlan.mtu;
            spec.parent_name = name.clone();
            spec.vlan = VlanSpec { vid: vlan.vlan_id, protocol: VlanProtocol::IEEE_802_1Q };
            map.insert(vlan_name, spec);
        }
    }
    for (port, (master, index)) in bonded {
        let link = map.entry(port.clone()).or_insert_with(|| up(&port));
        link.bond_slave = BondSlave { master_name: master, slave_index: index };
    }
    for (port, master) in bridged {
        let link = map.entry(port.clone()).or_insert_with(|| up(&port));
        link.bridge_slave = BridgeSlave { master_name: master };
    }

    for doc in &view.links {
        let name = links.resolve(&doc.name);
        let link = map.entry(name.clone()).or_insert_with(|| LinkSpec {
            name: name.clone(),
            config_layer: layer,
            ..LinkSpec::default()
        });
        link.up = doc.up.unwrap_or(true);
        if let Some(mtu) = doc.mtu {
            link.mtu = mtu;
        }
        // Only logical links may set their hardware address.
        link.hardware_address = match doc.kind {
            LinkKind::Physical | LinkKind::Vlan { .. } => HardwareAddress::default(),
            _ => doc.hardware_addr.as_ref().map(|m| HardwareAddress(m.0.clone())).unwrap_or_default(),
        };
        if doc.multicast.is_some() {
            link.multicast = doc.multicast;
        }
        let mut ports: Vec<(String, LinkSpec)> = Vec::new();
        match &doc.kind {
            LinkKind::Physical => {}
            LinkKind::Dummy => make_logical(link, LINK_KIND_DUMMY),
            LinkKind::Vlan { vlan_id, mode, parent } => {
                make_logical(link, LINK_KIND_VLAN);
                link.up = true;
                link.parent_name = links.resolve(parent);
                link.vlan = VlanSpec { vid: *vlan_id, protocol: vlan_protocol(mode) };
            }
            LinkKind::Bond { links: members, options } => {
                make_logical(link, LINK_KIND_BOND);
                link.bond_master = bond_master(options, links);
                for (index, member) in members.iter().enumerate() {
                    let member = links.resolve(member);
                    let mut spec = up(&member);
                    spec.bond_slave = BondSlave { master_name: name.clone(), slave_index: index as u32 };
                    ports.push((member, spec));
                }
            }
            LinkKind::Bridge { links: members, stp, vlan_filtering } => {
                make_logical(link, LINK_KIND_BRIDGE);
                link.bridge_master = BridgeMasterSpec {
                    stp: StpSpec { enabled: *stp },
                    vlan: BridgeVlanSpec { filtering_enabled: *vlan_filtering },
                };
                for member in members {
                    let member = links.resolve(member);
                    let mut spec = up(&member);
                    spec.bridge_slave = BridgeSlave { master_name: name.clone() };
                    ports.push((member, spec));
                }
            }
        }
        for (member, spec) in ports {
            let existing = map.entry(member).or_insert_with(|| spec.clone());
            existing.bond_slave = spec.bond_slave;
            existing.bridge_slave = spec.bridge_slave;
        }
    }
    for dhcp in view.dhcp4.iter().chain(&view.dhcp6) {
        let name = links.resolve(&dhcp.name);
        map.entry(name.clone()).or_insert_with(|| up(&name));
    }
    map.into_values().collect()
}

/// The links the devices name (and their bond and bridge ports): with default DHCP on,
/// every other physical link is brought up at the default layer.
pub fn configured_links(devices: &[Device], links: &LinkResolver) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for device in devices {
        out.insert(interface(device, links));
        let ports =
            device.bond.iter().flat_map(|b| &b.interfaces).chain(device.bridge.iter().flat_map(|b| &b.interfaces));
        out.extend(ports.map(|p| links.resolve(p)));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Operators

fn dhcp_from_options(link: &str, options: &DhcpOptions, layer: ConfigLayer) -> Vec<OperatorSpec> {
    let metric = if options.route_metric == 0 { DEFAULT_ROUTE_METRIC } else { options.route_metric };
    let mut out = Vec::new();
    if options.ipv4 {
        out.push(OperatorSpec {
            operator: Operator::Dhcp4,
            link_name: link.to_string(),
            require_up: true,
            dhcp4: Dhcp4OperatorSpec { route_metric: metric, ..Default::default() },
            config_layer: layer,
            ..OperatorSpec::default()
        });
    }
    if options.ipv6 {
        let client_identifier = if options.duid_v6.is_empty() {
            ClientIdentifierSpec::default()
        } else {
            ClientIdentifierSpec { client_identifier: ClientIdentifier::DUID, duid_raw_hex: options.duid_v6.clone() }
        };
        out.push(OperatorSpec {
            operator: Operator::Dhcp6,
            link_name: link.to_string(),
            require_up: true,
            dhcp6: Dhcp6OperatorSpec { route_metric: metric, client_identifier, ..Default::default() },
            config_layer: layer,
            ..OperatorSpec::default()
        });
    }
    out
}

fn client_identifier(dhcp: &DhcpConfig) -> ClientIdentifierSpec {
    ClientIdentifierSpec {
        client_identifier: parse_or_default::<ClientIdentifier>(&dhcp.client_identifier),
        duid_raw_hex: dhcp
            .duid_raw
            .as_ref()
            .map(|m| m.0.iter().map(|b| format!("{b:02x}")).collect())
            .unwrap_or_default(),
    }
}

/// The DHCP operators the configuration asks for: `dhcp: true` on a device or VLAN (by its
/// `dhcpOptions`) and every `DHCPv4Config`/`DHCPv6Config`.
pub fn operator_specs(
    view: &NetworkView,
    devices: &[Device],
    links: &LinkResolver,
    layer: ConfigLayer,
) -> Vec<OperatorSpec> {
    let mut out = Vec::new();
    for (device, name) in active(devices, links) {
        if device.dhcp {
            out.extend(dhcp_from_options(&name, &device.dhcp_options, layer));
        }
        let original = device.interface.as_deref().unwrap_or_default();
        for vlan in device.vlans.iter().filter(|v| v.dhcp) {
            out.extend(dhcp_from_options(&vlan_link_name(original, vlan.vlan_id), &vlan.dhcp_options, layer));
        }
    }
    for dhcp in &view.dhcp4 {
        out.push(OperatorSpec {
            operator: Operator::Dhcp4,
            link_name: links.resolve(&dhcp.name),
            require_up: true,
            dhcp4: Dhcp4OperatorSpec {
                route_metric: dhcp.route_metric.unwrap_or(DEFAULT_ROUTE_METRIC),
                skip_hostname_request: dhcp.ignore_hostname,
                skip_routes: dhcp.ignore_routes,
                client_identifier: client_identifier(dhcp),
            },
            config_layer: layer,
            ..OperatorSpec::default()
        });
    }
    for dhcp in &view.dhcp6 {
        out.push(OperatorSpec {
            operator: Operator::Dhcp6,
            link_name: links.resolve(&dhcp.name),
            require_up: true,
            dhcp6: Dhcp6OperatorSpec {
                route_metric: dhcp.route_metric.unwrap_or(DEFAULT_ROUTE_METRIC),
                skip_hostname_request: dhcp.ignore_hostname,
                client_identifier: client_identifier(dhcp),
            },
            config_layer: layer,
            ..OperatorSpec::default()
        });
    }
    out
}

/// The default DHCPv4 operator Talos runs on a physical link nobody configured.
pub fn default_dhcp4(link: &str) -> OperatorSpec {
    OperatorSpec {
        operator: Operator::Dhcp4,
        link_name: link.to_string(),
        require_up: true,
        dhcp4: Dhcp4OperatorSpec {
            route_metric: DEFAULT_ROUTE_METRIC,
            client_identifier: ClientIdentifierSpec {
                client_identifier: ClientIdentifier::MAC,
                duid_raw_hex: String::new(),
            },
            ..Default::default()
        },
        config_layer: ConfigLayer::Default,
        ..OperatorSpec::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Hostname, resolvers, time servers

/// The configured hostname (a `HostnameConfig` name, else `machine.network.hostname`), split
/// into hostname and domain.
pub fn hostname_spec(view: &NetworkView, layer: ConfigLayer) -> Option<HostnameSpec> {
    let name = view.hostname.hostname.as_ref()?;
    HostnameSpec::from_fqdn(name.as_str(), layer).ok()
}

/// The configured resolvers, when the configuration names servers or writes search
/// domains (which then replace other sources' domains).
pub fn resolver_spec(view: &NetworkView, layer: ConfigLayer) -> Option<ResolverSpec> {
    let r = &view.resolver;
    if r.nameservers.is_empty() && r.search_domains.is_none() {
        return None;
    }
    Some(ResolverSpec {
        dns_servers: r.nameservers.clone(),
        config_layer: layer,
        search_domains: r.search_domains.clone().unwrap_or_default(),
        search_domains_overridden: r.search_domains.is_some(),
    })
}

/// The configured time servers, when any are named.
pub fn time_server_spec(view: &NetworkView, layer: ConfigLayer) -> Option<TimeServerSpec> {
    let time = view.time.as_ref()?;
    (!time.servers.is_empty()).then(|| TimeServerSpec {
        time_servers: time.servers.iter().map(|s| s.as_str().to_string()).collect(),
        use_nts: time.use_nts,
        config_layer: layer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::{BondMode, HardwareAddress, LacpRate, LinkFlags};

    const L: ConfigLayer = ConfigLayer::MachineConfiguration;

    fn view(text: &str) -> NetworkView {
        crate::config::load(text).unwrap().config.network().unwrap()
    }

    fn v1(network: &str) -> NetworkView {
        view(&format!("version: v1alpha1\nmachine:\n  type: worker\n  network:\n{network}"))
    }

    fn ether(mac: &str, bus: &str, driver: &str) -> LinkStatus {
        LinkStatus {
            link_type: LinkType::ETHER,
            hardware_addr: mac.parse::<HardwareAddress>().unwrap(),
            bus_path: bus.into(),
            driver: driver.into(),
            ..LinkStatus::default()
        }
    }

    fn ids<T>(specs: &[T], id: impl Fn(&T) -> String) -> Vec<String> {
        let mut out: Vec<String> = specs.iter().map(id).collect();
        out.sort();
        out
    }

    #[test]
    fn selectors_pick_links_as_talos() {
        let eth0 = ether("52:54:00:00:00:01", "0000:00:03.0", "virtio_net");
        let lo = LinkStatus { link_type: LinkType::LOOPBACK, flags: LinkFlags::LOOPBACK, ..LinkStatus::default() };
        let bond = LinkStatus { kind: "bond".into(), ..ether("52:54:00:00:00:01", "", "") };
        let sel = |f: fn(&mut DeviceSelector)| {
            let mut s = DeviceSelector::default();
            f(&mut s);
            s
        };
        let cases = [
            (sel(|s| s.hardware_addr = Some("52:54:00:00:00:01".into())), &eth0, true),
            (sel(|s| s.hardware_addr = Some("52:54:*".into())), &eth0, true),
            (sel(|s| s.hardware_addr = Some("52:54:*".into())), &bond, true),
            (sel(|s| s.bus_path = Some("0000:00:03.*".into())), &eth0, true),
            (sel(|s| s.bus_path = Some("0000:00:04.*".into())), &eth0, false),
            (
                sel(|s| {
                    s.driver = Some("virtio_net".into());
                    s.bus_path = Some("*:05.0".into())
                }),
                &eth0,
                false,
            ),
            (sel(|s| s.physical = Some(true)), &eth0, true),
            (sel(|s| s.physical = Some(true)), &lo, false),
            (
                sel(|s| {
                    s.hardware_addr = Some("52:54:*".into());
                    s.physical = Some(true)
                }),
                &bond,
                false,
            ),
            (DeviceSelector::default(), &eth0, false),
        ];
        for (i, (selector, link, want)) in cases.into_iter().enumerate() {
            assert_eq!(selector_matches(&selector, link), want, "case {i}: {selector:?}");
        }
    }

    #[test]
    fn selectors_resolve_to_links() {
        let v = v1("    interfaces:\n      - deviceSelector: {driver: virtio*}\n        addresses: [10.0.0.2/24]\n\
                    \x20     - deviceSelector: {driver: e1000}\n        dhcp: true\n\
                    \x20     - interface: bond0\n        bond:\n          mode: active-backup\n          deviceSelectors:\n            - hardwareAddr: '52:54:00:00:00:0*'\n");
        let links = vec![
            ("bond0".to_string(), LinkStatus { kind: "bond".into(), ..ether("52:54:00:00:00:01", "", "") }),
            ("eth0".to_string(), ether("52:54:00:00:00:01", "0000:00:03.0", "virtio_net")),
            ("eth1".to_string(), ether("52:54:00:00:00:02", "0000:00:04.0", "virtio_net")),
        ];
        let devices = resolve_devices(&v.devices, &links);
        let names: Vec<Option<&str>> = devices.iter().map(|d| d.interface.as_deref()).collect();
        // Two links picked, the unmatched selector dropped, the bond kept.
        assert_eq!(names, [Some("eth0"), Some("eth1"), Some("bond0")]);
        assert_eq!(devices[2].bond.as_ref().unwrap().interfaces, ["eth0", "eth1"]);
        let addresses = address_specs(&v, &devices, &LinkResolver::new(), L);
        assert_eq!(ids(&addresses, AddressSpec::id), ["eth0/10.0.0.2/24", "eth1/10.0.0.2/24"]);
    }

    #[test]
    fn addresses_from_devices_vlans_and_documents() {
        let v = view(
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [192.168.1.2/24, 'fd00::2/64']\n\
             \x20       vlans:\n          - vlanId: 100\n            addresses: [172.16.0.2/24]\n\
             \x20     - interface: eth9\n        ignore: true\n        addresses: [10.9.9.9/24]\n\
             ---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth1\naddresses:\n  - address: 10.0.1.2/24\n    routePriority: 20\n",
        );
        let specs = address_specs(&v, &v.devices, &LinkResolver::new().with_alias("eth1", "enp0s4"), L);
        assert_eq!(
            ids(&specs, AddressSpec::id),
            ["enp0s4/10.0.1.2/24", "eth0.100/172.16.0.2/24", "eth0/192.168.1.2/24", "eth0/fd00::2/64"]
        );
        let v6 = specs.iter().find(|s| s.address.addr().is_ipv6()).unwrap();
        assert_eq!(
            (v6.family, v6.scope, v6.flags, v6.config_layer),
            (Family::INET6, Scope::GLOBAL, AddressFlags::PERMANENT, L)
        );
        assert_eq!(specs.iter().find(|s| s.link_name == "enp0s4").unwrap().priority, 20);
        assert_eq!(loopback_addresses()[0].id(), "lo/127.0.0.1/8");
        assert_eq!(loopback_addresses()[0].scope, Scope::HOST);
    }

    #[test]
    fn routes_as_talos_builds_them() {
        let v = view(
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        routes:\n\
             \x20         - network: 0.0.0.0/0\n            gateway: 192.168.1.1\n\
             \x20         - network: 10.2.0.0/16\n            gateway: 192.168.1.254\n            metric: 50\n            mtu: 1400\n\
             \x20         - gateway: 'fe80::1'\n\
             \x20         - network: 224.0.0.0/4\n\
             ---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth1\nroutes:\n  - destination: 10.3.0.0/16\n    gateway: 10.0.1.1\n    table: '100'\n",
        );
        let routes = route_specs(&v, &v.devices, &LinkResolver::new(), L);
        assert_eq!(
            ids(&routes, RouteSpec::id),
            [
                "100/inet4/10.0.1.1/10.3.0.0/16/1024",
                "eth0/inet6/fe80::1//1024",
                "inet4//224.0.0.0/4/1024",
                "inet4/192.168.1.1//1024",
                "inet4/192.168.1.254/10.2.0.0/16/50",
            ]
        );
        let default = routes.iter().find(|r| r.gateway == Some("192.168.1.1".parse().unwrap())).unwrap();
        assert_eq!(default.destination, None, "0.0.0.0/0 is the default route");
        assert_eq!(
            (default.scope, default.protocol, default.route_type),
            (Scope::GLOBAL, RouteProtocol::STATIC, RouteType::UNICAST)
        );
        let multicast = routes.iter().find(|r| r.route_type == RouteType::MULTICAST).unwrap();
        assert_eq!(multicast.scope, Scope::LINK);
        let mtu = routes.iter().find(|r| r.priority == 50).unwrap();
        assert_eq!((mtu.mtu, mtu.out_link_name.as_str(), mtu.config_layer), (1400, "eth0", L));
        assert_eq!(routes.iter().find(|r| r.table == RoutingTable(100)).unwrap().out_link_name, "eth1");
    }

    #[test]
    fn links_from_devices() {
        let v = v1(
            "    interfaces:\n      - interface: eth0\n        mtu: 9000\n        vlans:\n          - vlanId: 10\n            mtu: 1400\n\
                    \x20     - interface: bond0\n        bond:\n          interfaces: [eth1, eth2]\n          mode: 802.3ad\n          lacpRate: fast\n          miimon: 100\n\
                    \x20     - interface: br0\n        bridge:\n          interfaces: [eth3]\n          stp: {enabled: true}\n\
                    \x20     - interface: eth4\n        bridgePort: {master: br0}\n\
                    \x20     - interface: dummy0\n        dummy: true\n\
                    \x20     - interface: eth9\n        ignore: true\n        mtu: 1000\n",
        );
        let links = link_specs(&v, &v.devices, &LinkResolver::new(), L);
        let by: BTreeMap<&str, &LinkSpec> = links.iter().map(|l| (l.name.as_str(), l)).collect();
        assert_eq!(
            by.keys().copied().collect::<Vec<_>>(),
            ["bond0", "br0", "dummy0", "eth0", "eth0.10", "eth1", "eth2", "eth3", "eth4"]
        );
        assert!(by.values().all(|l| l.up && l.config_layer == L));
        assert_eq!((by["eth0"].mtu, by["eth0"].logical), (9000, false));
        let vlan = by["eth0.10"];
        assert_eq!(
            (vlan.logical, vlan.kind.as_str(), vlan.parent_name.as_str(), vlan.mtu),
            (true, "vlan", "eth0", 1400)
        );
        assert_eq!(vlan.vlan, VlanSpec { vid: 10, protocol: VlanProtocol::IEEE_802_1Q });
        let bond = by["bond0"];
        assert_eq!(
            (bond.kind.as_str(), bond.link_type, bond.bond_master.mode),
            ("bond", LinkType::ETHER, BondMode::IEEE_802_3AD)
        );
        assert_eq!((bond.bond_master.lacp_rate, bond.bond_master.mii_mon), (LacpRate::FAST, 100));
        assert_eq!(bond.bond_master.ad_actor_sys_prio, 65535, "the driver's defaults are filled in");
        assert_eq!(by["eth2"].bond_slave, BondSlave { master_name: "bond0".into(), slave_index: 1 });
        assert!(by["br0"].bridge_master.stp.enabled);
        assert_eq!(by["eth3"].bridge_slave.master_name, "br0");
        assert_eq!(by["eth4"].bridge_slave.master_name, "br0");
        assert_eq!((by["dummy0"].kind.as_str(), by["dummy0"].logical), ("dummy", true));
        assert_eq!(
            configured_links(&v.devices, &LinkResolver::new()).into_iter().collect::<Vec<_>>(),
            ["bond0", "br0", "dummy0", "eth0", "eth1", "eth2", "eth3", "eth4", "eth9"]
        );
        assert_eq!(ignored_links(&v.devices, &LinkResolver::new()).into_iter().collect::<Vec<_>>(), ["eth9"]);
    }

    #[test]
    fn links_from_documents() {
        let v = view(
            "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nup: false\nmtu: 1500\nmulticast: true\n---\n\
             apiVersion: v1alpha1\nkind: DummyLinkConfig\nname: dummy1\nhardwareAddr: '02:00:00:00:00:01'\n---\n\
             apiVersion: v1alpha1\nkind: VLANConfig\nname: eth0.20\nvlanID: 20\nvlanMode: 802.1ad\nparent: eth0\n---\n\
             apiVersion: v1alpha1\nkind: BondConfig\nname: bond1\nlinks: [eth1, eth2]\nbondMode: active-backup\nprimary: eth1\n---\n\
             apiVersion: v1alpha1\nkind: BridgeConfig\nname: br1\nlinks: [eth3]\nstp: {enabled: true}\n---\n\
             apiVersion: v1alpha1\nkind: DHCPv4Config\nname: eth5\n",
        );
        let links = link_specs(&v, &v.devices, &LinkResolver::new(), L);
        let by: BTreeMap<&str, &LinkSpec> = links.iter().map(|l| (l.name.as_str(), l)).collect();
        assert_eq!(
            by.keys().copied().collect::<Vec<_>>(),
            ["bond1", "br1", "dummy1", "eth0", "eth0.20", "eth1", "eth2", "eth3", "eth5"]
        );
        assert_eq!((by["eth0"].up, by["eth0"].mtu, by["eth0"].multicast), (false, 1500, Some(true)));
        assert_eq!(by["dummy1"].hardware_address.to_string(), "02:00:00:00:00:01");
        assert_eq!((by["dummy1"].kind.as_str(), by["dummy1"].up), ("dummy", true));
        assert_eq!(by["eth0.20"].vlan, VlanSpec { vid: 20, protocol: VlanProtocol::IEEE_802_1AD });
        assert_eq!(by["eth0.20"].parent_name, "eth0");
        assert_eq!(
            (by["bond1"].bond_master.mode, by["bond1"].bond_master.primary.as_str()),
            (BondMode::ACTIVE_BACKUP, "eth1")
        );
        assert_eq!(by["eth2"].bond_slave, BondSlave { master_name: "bond1".into(), slave_index: 1 });
        assert!(by["eth2"].up);
        assert_eq!(by["eth3"].bridge_slave.master_name, "br1");
        assert!(by["eth5"].up && !by["eth5"].logical);
    }

    #[test]
    fn operators_from_configuration() {
        let v = view(
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n\
             \x20     - interface: eth0\n        dhcp: true\n\
             \x20     - interface: eth1\n        dhcp: true\n        dhcpOptions: {routeMetric: 200, ipv4: false, ipv6: true, duidv6: '00:01'}\n\
             \x20     - interface: eth2\n        addresses: [10.0.2.2/24]\n\
             \x20     - interface: eth3\n        dhcp: true\n        ignore: true\n\
             \x20     - interface: eth4\n        vlans:\n          - vlanId: 7\n            dhcp: true\n\
             ---\napiVersion: v1alpha1\nkind: DHCPv4Config\nname: eth5\nrouteMetric: 10\nignoreRoutes: true\nclientIdentifier: duid\nduidRaw: '00:01:ab'\n\
             ---\napiVersion: v1alpha1\nkind: DHCPv6Config\nname: eth5\nignoreHostname: true\n",
        );
        let ops = operator_specs(&v, &v.devices, &LinkResolver::new(), L);
        let id = |o: &OperatorSpec| crate::resources::network::operator_id(o);
        assert_eq!(ids(&ops, id), ["dhcp4/eth0", "dhcp4/eth4.7", "dhcp4/eth5", "dhcp6/eth1", "dhcp6/eth5"]);
        let find = |i: &str| ops.iter().find(|o| id(o) == i).unwrap();
        assert_eq!(find("dhcp4/eth0").dhcp4.route_metric, DEFAULT_ROUTE_METRIC);
        assert!(find("dhcp4/eth0").require_up);
        let d6 = find("dhcp6/eth1");
        assert_eq!(
            (d6.dhcp6.route_metric, d6.dhcp6.client_identifier.client_identifier),
            (200, ClientIdentifier::DUID)
        );
        assert_eq!(d6.dhcp6.client_identifier.duid_raw_hex, "00:01");
        let d4 = find("dhcp4/eth5");
        assert_eq!((d4.dhcp4.route_metric, d4.dhcp4.skip_routes), (10, true));
        assert_eq!(
            d4.dhcp4.client_identifier,
            ClientIdentifierSpec { client_identifier: ClientIdentifier::DUID, duid_raw_hex: "0001ab".into() }
        );
        assert!(find("dhcp6/eth5").dhcp6.skip_hostname_request);
        assert!(ops.iter().all(|o| o.config_layer == L));
        let default = default_dhcp4("eth0");
        assert_eq!(
            (default.config_layer, default.dhcp4.client_identifier.client_identifier),
            (ConfigLayer::Default, ClientIdentifier::MAC)
        );
    }

    #[test]
    fn hostname_resolvers_and_time_servers() {
        let v = v1("    hostname: node1.example.org\n    nameservers: [10.0.0.53]\n");
        let h = hostname_spec(&v, L).unwrap();
        assert_eq!((h.hostname.as_str(), h.domainname.as_str(), h.config_layer), ("node1", "example.org", L));
        let r = resolver_spec(&v, L).unwrap();
        assert_eq!(
            (r.dns_servers.clone(), r.search_domains_overridden),
            (vec!["10.0.0.53".parse::<IpAddr>().unwrap()], false)
        );
        assert!(time_server_spec(&v, L).is_none());

        let v = v1("    searchDomains: []\n");
        let r = resolver_spec(&v, L).unwrap();
        assert!(r.dns_servers.is_empty() && r.search_domains.is_empty() && r.search_domains_overridden);
        assert!(resolver_spec(&v1("    hostname: x\n"), L).is_none());
        assert!(hostname_spec(&v1("    nameservers: [1.1.1.1]\n"), L).is_none());

        let v =
            view("apiVersion: v1alpha1\nkind: TimeSyncConfig\nntp:\n  servers: [ntp.example.org]\n  useNTS: true\n");
        assert_eq!(
            time_server_spec(&v, L),
            Some(TimeServerSpec { time_servers: vec!["ntp.example.org".into()], use_nts: true, config_layer: L })
        );
        let v = view("version: v1alpha1\nmachine:\n  time:\n    servers: [10.0.0.123]\n");
        assert_eq!(time_server_spec(&v, L).unwrap().time_servers, ["10.0.0.123"]);
    }
}

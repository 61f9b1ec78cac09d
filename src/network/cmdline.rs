//! Network configuration from the kernel command line, at the `cmdline` layer: the kernel's
//! `ip=` (Documentation/admin-guide/nfs/nfsroot.rst, plus dracut's `ip=<device>:dhcp`),
//! Talos's `talos.hostname=` and `talos.network.interface.ignore=`, and dracut's `vlan=` and
//! `bond=`.
//!
//! [`parse`] reads the parameters into [`CmdlineNetworking`]; its methods give the candidate
//! specs each config controller writes (addresses, routes, links, hostname, resolvers, time
//! servers, DHCP operators). Pure: which links exist and what their aliases are comes in
//! through a [`LinkResolver`], never from the kernel. A malformed parameter is an error naming
//! it, and the caller decides whether to go on without the command line's networking (Talos
//! does).

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::kernel::cmdline::Cmdline;
use crate::resources::network::{
    AddressSpec, BondMasterSpec, BondSlave, ConfigLayer, DEFAULT_ROUTE_METRIC, Dhcp4OperatorSpec, Family, HostnameSpec,
    LINK_KIND_BOND, LINK_KIND_VLAN, LinkSpec, LinkType, NetworkValueError, Operator, OperatorSpec, ResolverSpec,
    RouteProtocol, RouteSpec, RouteType, RoutingTable, Scope, TimeServerSpec, VlanProtocol, VlanSpec, netmask_bits,
    vlan_link_name,
};
use crate::types::IpPrefix;

pub const PARAM_IP: &str = "ip";
pub const PARAM_HOSTNAME: &str = "talos.hostname";
pub const PARAM_INTERFACE_IGNORE: &str = "talos.network.interface.ignore";
pub const PARAM_VLAN: &str = "vlan";
pub const PARAM_BOND: &str = "bond";

const LAYER: ConfigLayer = ConfigLayer::Cmdline;

/// A command-line parameter that cannot be read; the message starts with the parameter as
/// given (`ip=…: gw-ip "x": not an IP address`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdlineNetworkError {
    #[error("{param}={value}: {reason}")]
    Invalid { param: &'static str, value: String, reason: String },
}

fn invalid(param: &'static str, value: &str, reason: impl Into<String>) -> CmdlineNetworkError {
    CmdlineNetworkError::Invalid { param, value: value.to_string(), reason: reason.into() }
}

/// Link names as the command line may give them: a name, or an alias (`enx…`, an altname)
/// that resolves to the kernel's name; and the link an `ip=` without a device applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkResolver {
    aliases: BTreeMap<String, String>,
    default_link: Option<String>,
}

impl LinkResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// `alias` names the link `name`.
    pub fn with_alias(mut self, alias: &str, name: &str) -> Self {
        self.aliases.insert(alias.to_string(), name.to_string());
        self
    }

    /// The link an `ip=` without a device configures: Talos takes the first non-loopback
    /// link by name.
    pub fn with_default_link(mut self, name: &str) -> Self {
        self.default_link = Some(name.to_string());
        self
    }

    pub fn resolve(&self, name: &str) -> String {
        self.aliases.get(name).cloned().unwrap_or_else(|| name.to_string())
    }
}

/// One link's settings from an `ip=`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CmdlineLinkConfig {
    pub link_name: String,
    pub address: Option<IpPrefix>,
    pub gateway: Option<IpAddr>,
    pub dhcp: bool,
}

/// Everything the command line says about networking.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CmdlineNetworking {
    /// One per `ip=` that configures a link, in order.
    pub link_configs: Vec<CmdlineLinkConfig>,
    pub hostname: Option<HostnameSpec>,
    pub dns_servers: Vec<IpAddr>,
    pub ntp_servers: Vec<IpAddr>,
    /// Links machined must leave alone (`talos.network.interface.ignore=`), resolved.
    pub ignore_interfaces: Vec<String>,
    /// Links to bring up or create, in the order the parameters gave them, one per name.
    pub links: Vec<LinkSpec>,
}

/// Reads the networking parameters of `cmdline`.
pub fn parse(cmdline: &Cmdline, links: &LinkResolver) -> Result<CmdlineNetworking, CmdlineNetworkError> {
    let mut out = CmdlineNetworking::default();
    let mut hostname: Option<(&'static str, String)> = None;

    if let Some(name) = cmdline.get_all(PARAM_HOSTNAME).first() {
        hostname = Some((PARAM_HOSTNAME, name.to_string()));
    }
    out.ignore_interfaces = cmdline.get_all(PARAM_INTERFACE_IGNORE).iter().map(|n| links.resolve(n)).collect();

    for value in cmdline.get_all(PARAM_IP) {
        let Some(ip) = parse_ip(value, links)? else { continue };
        if hostname.is_none()
            && let Some(name) = ip.hostname
        {
            hostname = Some((PARAM_IP, name));
        }
        out.dns_servers.extend(ip.dns);
        out.ntp_servers.extend(ip.ntp);
        push_link(&mut out.links, LinkSpec::up(&ip.link.link_name, LAYER));
        out.link_configs.push(ip.link);
    }

    for value in cmdline.get_all(PARAM_BOND) {
        for link in parse_bond(value, links)? {
            push_link(&mut out.links, link);
        }
    }

    for value in cmdline.get_all(PARAM_VLAN) {
        let vlan = parse_vlan(value, links)?;
        match out.links.iter_mut().find(|l| l.name == vlan.name) {
            // The `ip=` that configures the VLAN link named it first: it becomes the VLAN.
            Some(existing) => existing.merge_from(&vlan),
            None => out.links.push(vlan),
        }
    }

    if let Some((param, name)) = hostname {
        let spec = HostnameSpec::from_fqdn(&name, LAYER).map_err(|e| invalid(param, &name, reason_of(e)))?;
        out.hostname = Some(spec);
    }
    Ok(out)
}

/// Adds `link`, folding it into an earlier spec of the same name (a bond slave that an
/// `ip=` also brings up is one candidate, not two with one id).
fn push_link(links: &mut Vec<LinkSpec>, link: LinkSpec) {
    match links.iter_mut().find(|l| l.name == link.name) {
        Some(existing) => existing.merge_from(&link),
        None => links.push(link),
    }
}

fn reason_of(e: NetworkValueError) -> String {
    match e {
        NetworkValueError::Invalid { reason, .. } => reason,
        other => other.to_string(),
    }
}

struct IpParam {
    link: CmdlineLinkConfig,
    hostname: Option<String>,
    dns: Vec<IpAddr>,
    ntp: Vec<IpAddr>,
}

/// The `ip=` field names, as nfsroot.rst gives them.
const IP_FIELDS: [&str; 10] =
    ["client-ip", "server-ip", "gw-ip", "netmask", "hostname", "device", "autoconf", "dns0-ip", "dns1-ip", "ntp0-ip"];

/// Splits `ip=` on colons outside square brackets (IPv6 addresses) and drops the brackets.
fn split_ip_fields(value: &str) -> Result<Vec<String>, CmdlineNetworkError> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut in_brackets = false;
    for c in value.chars() {
        match c {
            '[' if !in_brackets && field.is_empty() => in_brackets = true,
            ']' if in_brackets => in_brackets = false,
            ':' if !in_brackets => fields.push(std::mem::take(&mut field)),
            '[' | ']' => return Err(invalid(PARAM_IP, value, "unbalanced brackets")),
            c => field.push(c),
        }
    }
    if in_brackets {
        return Err(invalid(PARAM_IP, value, "unbalanced brackets"));
    }
    fields.push(field);
    Ok(fields)
}

/// How an `ip=` autoconf value configures the link: `Some(true)` by DHCP, `Some(false)`
/// statically; `None` for a protocol talosbox has no client for.
fn autoconf_dhcp(value: &str) -> Option<bool> {
    match value {
        "" | "off" | "none" => Some(false),
        "dhcp" | "on" | "any" => Some(true),
        _ => None,
    }
}

/// One `ip=`; `None` when it configures no link (`ip=off`, `ip=none`, and `ip=dhcp` or
/// `ip=on` for every link, which the default DHCP operators already do).
fn parse_ip(value: &str, links: &LinkResolver) -> Result<Option<IpParam>, CmdlineNetworkError> {
    let fields = split_ip_fields(value)?;
    if fields.len() == 1 {
        return match fields[0].as_str() {
            "off" | "none" | "dhcp" | "on" | "any" => Ok(None),
            _ => parse_ip_fields(value, &fields, links).map(Some),
        };
    }
    // dracut: ip=<device>:dhcp
    if fields.len() == 2 && fields[1] == "dhcp" {
        let link = CmdlineLinkConfig { link_name: links.resolve(&fields[0]), dhcp: true, ..Default::default() };
        if link.link_name.is_empty() {
            return Err(invalid(PARAM_IP, value, "device: empty"));
        }
        return Ok(Some(IpParam { link, hostname: None, dns: Vec::new(), ntp: Vec::new() }));
    }
    parse_ip_fields(value, &fields, links).map(Some)
}

fn parse_ip_fields(value: &str, fields: &[String], links: &LinkResolver) -> Result<IpParam, CmdlineNetworkError> {
    // Trailing empty fields are common (`…:eth1:::::` has eleven); anything said past the
    // ntp0-ip field is not.
    if fields.iter().skip(IP_FIELDS.len()).any(|f| !f.is_empty()) {
        return Err(invalid(PARAM_IP, value, format!("{} fields, at most {} expected", fields.len(), IP_FIELDS.len())));
    }
    let field = |i: usize| fields.get(i).map(String::as_str).unwrap_or("");
    let addr = |i: usize| -> Result<Option<IpAddr>, CmdlineNetworkError> {
        let text = field(i);
        if text.is_empty() {
            return Ok(None);
        }
        text.parse()
            .map(Some)
            .map_err(|_| invalid(PARAM_IP, value, format!("{} {text:?}: not an IP address", IP_FIELDS[i])))
    };

    let client = addr(0)?;
    let gateway = addr(2)?;
    let mut address = client.map(IpPrefix::host);
    let netmask = field(3);
    if let Some(client) = client
        && !netmask.is_empty()
    {
        let bits = match netmask.parse::<u8>() {
            Ok(bits) => Some(bits),
            Err(_) => netmask.parse::<IpAddr>().ok().and_then(|m| netmask_bits(&m)),
        };
        let bad = |reason: &str| invalid(PARAM_IP, value, format!("netmask {netmask:?}: {reason}"));
        let bits = bits.ok_or_else(|| bad("not a prefix length or a contiguous mask"))?;
        address = Some(IpPrefix::new(client, bits).map_err(|e| bad(&e.reason()))?);
    }
    let hostname = Some(field(4).to_string()).filter(|h| !h.is_empty());
    let link_name = match field(5) {
        "" => links
            .default_link
            .clone()
            .ok_or_else(|| invalid(PARAM_IP, value, "no device given, and no link is known to apply it to"))?,
        device => links.resolve(device),
    };
    let dhcp = autoconf_dhcp(field(6)).ok_or_else(|| {
        invalid(PARAM_IP, value, format!("autoconf {:?}: only dhcp (on, any) or off (none) are supported", field(6)))
    })?;
    let dns = [addr(7)?, addr(8)?].into_iter().flatten().collect();
    let ntp = addr(9)?.into_iter().collect();
    Ok(IpParam { link: CmdlineLinkConfig { link_name, address, gateway, dhcp }, hostname, dns, ntp })
}

/// dracut's `vlan=<vlanname>:<phydevice>`, the VLAN named `<phydevice>.<id>` or
/// `vlan<id>` (`vlan0008`); the link is named as Talos names VLAN links.
fn parse_vlan(value: &str, links: &LinkResolver) -> Result<LinkSpec, CmdlineNetworkError> {
    let bad = |reason: &str| invalid(PARAM_VLAN, value, reason);
    let (name, device) = value.split_once(':').ok_or_else(|| bad("expected <vlanname>:<phydevice>"))?;
    if device.is_empty() {
        return Err(bad("expected <vlanname>:<phydevice>"));
    }
    let id = match name.split_once('.') {
        Some((_, id)) => id,
        None => name.strip_prefix("vlan").ok_or_else(|| bad("the VLAN name must be <device>.<id> or vlan<id>"))?,
    };
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(&format!("VLAN id {id:?} is not a number")));
    }
    let vid = id.parse::<u16>().ok().filter(|v| (1..=4095).contains(v));
    let vid = vid.ok_or_else(|| bad(&format!("VLAN id {id} is not in the range 1..4095")))?;
    Ok(LinkSpec {
        logical: true,
        kind: LINK_KIND_VLAN.to_string(),
        link_type: LinkType::ETHER,
        parent_name: links.resolve(device),
        vlan: VlanSpec { vid, protocol: VlanProtocol::IEEE_802_1Q },
        ..LinkSpec::up(&vlan_link_name(device, vid), LAYER)
    })
}

/// dracut's `bond=<bondname>[:<bondslaves>[:<options>[:<mtu>]]]`: the bond (slaves `eth0,eth1`
/// when none are given, mode balance-rr) and one spec per slave.
fn parse_bond(value: &str, links: &LinkResolver) -> Result<Vec<LinkSpec>, CmdlineNetworkError> {
    let bad = |reason: String| invalid(PARAM_BOND, value, reason);
    let fields: Vec<&str> = value.split(':').collect();
    if fields.len() > 4 {
        return Err(bad("expected <bondname>[:<bondslaves>[:<options>[:<mtu>]]]".into()));
    }
    let field = |i: usize| fields.get(i).copied().unwrap_or("");
    let name = field(0);
    if name.is_empty() {
        return Err(bad("the bond name is empty".into()));
    }
    let slaves: Vec<String> = match field(1) {
        "" => vec!["eth0".into(), "eth1".into()],
        list => list.split(',').map(|s| links.resolve(s)).collect(),
    };
    if slaves.iter().any(String::is_empty) {
        return Err(bad("an empty slave name".into()));
    }
    let mut bond = BondMasterSpec::default();
    for option in field(2).split(',').filter(|o| !o.is_empty()) {
        set_bond_option(&mut bond, option, links).map_err(bad)?;
    }
    bond.fill_defaults();
    let mtu = match field(3) {
        "" => 0,
        mtu => mtu.parse().map_err(|_| bad(format!("MTU {mtu:?} is not a number")))?,
    };
    let mut specs = vec![LinkSpec {
        logical: true,
        kind: LINK_KIND_BOND.to_string(),
        link_type: LinkType::ETHER,
        mtu,
        bond_master: bond,
        ..LinkSpec::up(name, LAYER)
    }];
    for (index, slave) in slaves.iter().enumerate() {
        specs.push(LinkSpec {
            bond_slave: BondSlave { master_name: name.to_string(), slave_index: index as u32 },
            ..LinkSpec::up(slave, LAYER)
        });
    }
    Ok(specs)
}

/// One `<option>=<value>` of a bond, by the bonding driver's option names.
fn set_bond_option(bond: &mut BondMasterSpec, option: &str, links: &LinkResolver) -> Result<(), String> {
    let (key, v) = option.split_once('=').ok_or_else(|| format!("bond option {option:?}: expected <name>=<value>"))?;
    let named = |e: NetworkValueError| format!("bond option {key}: {e}");
    fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
        v.parse().map_err(|_| format!("bond option {key}: {v:?} is not a number"))
    }
    match key {
        "mode" => bond.mode = v.parse().map_err(named)?,
        "xmit_hash_policy" => bond.hash_policy = v.parse().map_err(named)?,
        "lacp_rate" => bond.lacp_rate = v.parse().map_err(named)?,
        "arp_validate" => bond.arp_validate = v.parse().map_err(named)?,
        "arp_all_targets" => bond.arp_all_targets = v.parse().map_err(named)?,
        "primary" => bond.primary = links.resolve(v),
        "primary_reselect" => bond.primary_reselect = v.parse().map_err(named)?,
        "fail_over_mac" => bond.fail_over_mac = v.parse().map_err(named)?,
        "ad_select" => bond.ad_select = v.parse().map_err(named)?,
        "arp_ip_target" => {
            bond.arp_ip_targets = v
                .split(';')
                .map(|t| t.parse().map_err(|_| format!("bond option {key}: {t:?} is not an IP address")))
                .collect::<Result<_, _>>()?
        }
        "miimon" => bond.mii_mon = number(key, v)?,
        "updelay" => bond.up_delay = number(key, v)?,
        "downdelay" => bond.down_delay = number(key, v)?,
        "arp_interval" => bond.arp_interval = number(key, v)?,
        "resend_igmp" => bond.resend_igmp = number(key, v)?,
        "min_links" => bond.min_links = number(key, v)?,
        "lp_interval" => bond.lp_interval = number(key, v)?,
        "packets_per_slave" => bond.packets_per_slave = number(key, v)?,
        "num_grat_arp" | "num_unsol_na" => bond.num_peer_notif = number(key, v)?,
        "all_slaves_active" => bond.all_slaves_active = number(key, v)?,
        "use_carrier" => bond.use_carrier = number::<u8>(key, v)? == 1,
        _ => return Err(format!("unknown bond option: {key}")),
    }
    Ok(())
}

impl CmdlineNetworking {
    /// A global, permanent address per `ip=` that gives one.
    pub fn address_specs(&self) -> Vec<AddressSpec> {
        self.link_configs
            .iter()
            .filter_map(|c| c.address.map(|a| AddressSpec::static_address(&c.link_name, a, LAYER)))
            .collect()
    }

    /// A default route per `ip=` with a gateway (metric 1024 plus the `ip=`'s index, so two
    /// never clash); for an IPv4 gateway outside the address's subnet, a link route to it
    /// first makes it reachable.
    pub fn route_specs(&self) -> Vec<RouteSpec> {
        let mut routes = Vec::new();
        for (index, config) in self.link_configs.iter().enumerate() {
            let Some(gateway) = config.gateway else { continue };
            let mut default = RouteSpec {
                family: Family::of(&gateway),
                gateway: Some(gateway),
                out_link_name: config.link_name.clone(),
                table: RoutingTable::MAIN,
                priority: DEFAULT_ROUTE_METRIC + index as u32,
                scope: Scope::GLOBAL,
                route_type: RouteType::UNICAST,
                protocol: RouteProtocol::BOOT,
                config_layer: LAYER,
                ..RouteSpec::default()
            };
            default.normalize();
            let priority = default.priority;
            routes.push(default);
            if gateway.is_ipv4() && !config.address.is_some_and(|a| a.contains(&gateway)) {
                routes.push(RouteSpec {
                    family: Family::INET4,
                    destination: Some(IpPrefix::host(gateway)),
                    source: config.address.map(|a| a.addr()),
                    out_link_name: config.link_name.clone(),
                    table: RoutingTable::MAIN,
                    priority,
                    scope: Scope::LINK,
                    route_type: RouteType::UNICAST,
                    protocol: RouteProtocol::BOOT,
                    config_layer: LAYER,
                    ..RouteSpec::default()
                });
            }
        }
        routes
    }

    pub fn link_specs(&self) -> Vec<LinkSpec> {
        self.links.clone()
    }

    pub fn hostname_spec(&self) -> Option<HostnameSpec> {
        self.hostname.clone()
    }

    /// The `ip=` DNS servers, if any.
    pub fn resolver_spec(&self) -> Option<ResolverSpec> {
        (!self.dns_servers.is_empty()).then(|| ResolverSpec {
            dns_servers: self.dns_servers.clone(),
            config_layer: LAYER,
            ..ResolverSpec::default()
        })
    }

    /// The `ip=` NTP servers, if any.
    pub fn time_server_spec(&self) -> Option<TimeServerSpec> {
        (!self.ntp_servers.is_empty()).then(|| TimeServerSpec {
            time_servers: self.ntp_servers.iter().map(ToString::to_string).collect(),
            use_nts: false,
            config_layer: LAYER,
        })
    }

    /// A DHCPv4 operator per link an `ip=` configures by DHCP.
    pub fn operator_specs(&self) -> Vec<OperatorSpec> {
        self.link_configs
            .iter()
            .filter(|c| c.dhcp)
            .map(|c| OperatorSpec {
                operator: Operator::Dhcp4,
                link_name: c.link_name.clone(),
                require_up: true,
                dhcp4: Dhcp4OperatorSpec { route_metric: DEFAULT_ROUTE_METRIC, ..Default::default() },
                config_layer: LAYER,
                ..OperatorSpec::default()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::{AddressFlags, BondMode, BondXmitHashPolicy};

    fn resolver() -> LinkResolver {
        LinkResolver::new().with_alias("enxa", "eth31").with_alias("enxb", "eth32").with_default_link("eth0")
    }

    fn parse_str(cmdline: &str) -> Result<CmdlineNetworking, CmdlineNetworkError> {
        parse(&Cmdline::parse(cmdline), &resolver())
    }

    /// One line per fact, so a table row reads like the command line it came from.
    fn summary(n: &CmdlineNetworking) -> Vec<String> {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let list = |v: &[IpAddr]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let mut out = Vec::new();
        for c in &n.link_configs {
            out.push(format!(
                "config {} {} via {}{}",
                c.link_name,
                opt(c.address.map(|a| a.to_string())),
                opt(c.gateway.map(|g| g.to_string())),
                if c.dhcp { " dhcp" } else { "" }
            ));
        }
        if let Some(h) = &n.hostname {
            out.push(format!("hostname {}", h.fqdn()));
        }
        if !n.dns_servers.is_empty() {
            out.push(format!("dns {}", list(&n.dns_servers)));
        }
        if !n.ntp_servers.is_empty() {
            out.push(format!("ntp {}", list(&n.ntp_servers)));
        }
        if !n.ignore_interfaces.is_empty() {
            out.push(format!("ignore {}", n.ignore_interfaces.join(",")));
        }
        for l in &n.links {
            let mut line = format!("link {}{}", l.name, if l.up { " up" } else { "" });
            if l.logical {
                line.push_str(&format!(" {}", l.kind));
            }
            if !l.parent_name.is_empty() {
                line.push_str(&format!(" on {} id {}", l.parent_name, l.vlan.vid));
            }
            if !l.bond_slave.master_name.is_empty() {
                line.push_str(&format!(" in {}#{}", l.bond_slave.master_name, l.bond_slave.slave_index));
            }
            if l.kind == LINK_KIND_BOND {
                line.push_str(&format!(" {}", l.bond_master.mode));
            }
            if l.mtu != 0 {
                line.push_str(&format!(" mtu {}", l.mtu));
            }
            out.push(line);
        }
        out
    }

    #[test]
    fn cmdline_table() {
        type Case = (&'static str, &'static str, Result<&'static [&'static str], &'static str>);
        let cases: &[Case] = &[
            ("nothing", "", Ok(&[])),
            ("unrelated parameters", "console=ttyS0 quiet talos.platform=metal", Ok(&[])),
            (
                "static, kernel form with empty fields",
                "ip=172.20.0.2::172.20.0.1:255.255.255.0::eth1:::::",
                Ok(&["config eth1 172.20.0.2/24 via 172.20.0.1", "link eth1 up"]),
            ),
            (
                "no device: the default link",
                "ip=172.20.0.2::172.20.0.1",
                Ok(&["config eth0 172.20.0.2/32 via 172.20.0.1", "link eth0 up"]),
            ),
            (
                "device by a name no link has yet",
                "ip=172.20.0.2::172.20.0.1:255.255.255.0::enx001122aabbcc",
                Ok(&["config enx001122aabbcc 172.20.0.2/24 via 172.20.0.1", "link enx001122aabbcc up"]),
            ),
            ("device by alias", "ip=172.20.0.2:::24::enxa", Ok(&["config eth31 172.20.0.2/24 via -", "link eth31 up"])),
            (
                "every field",
                "ip=172.20.0.2:172.21.0.1:172.20.0.1:255.255.255.0:master1:eth1::10.0.0.1:10.0.0.2:10.0.0.1",
                Ok(&[
                    "config eth1 172.20.0.2/24 via 172.20.0.1",
                    "hostname master1",
                    "dns 10.0.0.1,10.0.0.2",
                    "ntp 10.0.0.1",
                    "link eth1 up",
                ]),
            ),
            (
                "autoconf off",
                "ip=10.105.155.21::10.105.155.30:255.255.255.240:pve1:eth0:off",
                Ok(&["config eth0 10.105.155.21/28 via 10.105.155.30", "hostname pve1", "link eth0 up"]),
            ),
            (
                "autoconf none, prefix length as netmask",
                "ip=10.0.0.5::10.0.0.1:16::eth2:none",
                Ok(&["config eth2 10.0.0.5/16 via 10.0.0.1", "link eth2 up"]),
            ),
            (
                "IPv6 in brackets",
                "ip=[2001:db8::a]:[2001:db8::b]:[fe80::1]::master1:eth1::[2001:4860:4860::6464]:[2001:4860:4860::64]:[2001:4860:4806::]",
                Ok(&[
                    "config eth1 2001:db8::a/128 via fe80::1",
                    "hostname master1",
                    "dns 2001:4860:4860::6464,2001:4860:4860::64",
                    "ntp 2001:4860:4806::",
                    "link eth1 up",
                ]),
            ),
            (
                "IPv6 netmask",
                "ip=[2a03:1:2::12]::[2a03:1:2::11]:[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff8]:master:eth0:off:[2001:4860:4860::8888]:[2606:4700::1111]:[2606:4700:f1::1]",
                Ok(&[
                    "config eth0 2a03:1:2::12/125 via 2a03:1:2::11",
                    "hostname master",
                    "dns 2001:4860:4860::8888,2606:4700::1111",
                    "ntp 2606:4700:f1::1",
                    "link eth0 up",
                ]),
            ),
            (
                "IPv6 prefix length",
                "ip=[2a03:1:2::12]::[2a03:1:2::11]:125:master:eth0:off",
                Ok(&["config eth0 2a03:1:2::12/125 via 2a03:1:2::11", "hostname master", "link eth0 up"]),
            ),
            ("ip=dhcp: every link, the default already", "ip=dhcp", Ok(&[])),
            ("ip=on", "ip=on", Ok(&[])),
            ("ip=off", "ip=off", Ok(&[])),
            ("ip=none", "ip=none", Ok(&[])),
            ("dracut device:dhcp", "ip=eth3:dhcp", Ok(&["config eth3 - via - dhcp", "link eth3 up"])),
            ("dracut device:dhcp by alias", "ip=enxb:dhcp", Ok(&["config eth32 - via - dhcp", "link eth32 up"])),
            ("kernel form autoconf dhcp", "ip=:::::eth4:dhcp::::", Ok(&["config eth4 - via - dhcp", "link eth4 up"])),
            (
                "hostname from talos.hostname beats ip=",
                "ip=::::master1:eth1 talos.hostname=master2",
                Ok(&["config eth1 - via -", "hostname master2", "link eth1 up"]),
            ),
            ("hostname alone", "talos.hostname=node1.example.org", Ok(&["hostname node1.example.org"])),
            (
                "first ip= with a hostname names the node",
                "ip=:::::eth1 ip=::::second:eth2 ip=::::third:eth3",
                Ok(&[
                    "config eth1 - via -",
                    "config eth2 - via -",
                    "config eth3 - via -",
                    "hostname second",
                    "link eth1 up",
                    "link eth2 up",
                    "link eth3 up",
                ]),
            ),
            (
                "ignored interfaces, resolved",
                "talos.network.interface.ignore=eth2 talos.network.interface.ignore=eth3 talos.network.interface.ignore=enxa",
                Ok(&["ignore eth2,eth3,eth31"]),
            ),
            (
                "several ip=",
                "ip=172.20.0.2::172.20.0.1:255.255.255.0::eth1::::: ip=eth3:dhcp ip=:::::eth4:dhcp::::",
                Ok(&[
                    "config eth1 172.20.0.2/24 via 172.20.0.1",
                    "config eth3 - via - dhcp",
                    "config eth4 - via - dhcp",
                    "link eth1 up",
                    "link eth3 up",
                    "link eth4 up",
                ]),
            ),
            (
                "bond alone: slaves eth0, eth1",
                "bond=bond1",
                Ok(&["link bond1 up bond balance-rr", "link eth0 up in bond1#0", "link eth1 up in bond1#1"]),
            ),
            (
                "bond with empty fields",
                "bond=bond1:::",
                Ok(&["link bond1 up bond balance-rr", "link eth0 up in bond1#0", "link eth1 up in bond1#1"]),
            ),
            (
                "bond with aliased slaves",
                "bond=bond1:enxa,enxb",
                Ok(&["link bond1 up bond balance-rr", "link eth31 up in bond1#0", "link eth32 up in bond1#1"]),
            ),
            (
                "bond with options and MTU",
                "bond=bond1:eth3,eth4:mode=802.3ad,xmit_hash_policy=layer2+3:1450",
                Ok(&["link bond1 up bond 802.3ad mtu 1450", "link eth3 up in bond1#0", "link eth4 up in bond1#1"]),
            ),
            (
                "bond slave also configured by ip=: one spec",
                "ip=eth0:dhcp bond=bond0:eth0,eth1",
                Ok(&[
                    "config eth0 - via - dhcp",
                    "link eth0 up in bond0#0",
                    "link bond0 up bond balance-rr",
                    "link eth1 up in bond0#1",
                ]),
            ),
            (
                "vlan with its ip=",
                "vlan=eth1.169:eth1 ip=172.20.0.2::172.20.0.1:255.255.255.0::eth1.169:::::",
                Ok(&["config eth1.169 172.20.0.2/24 via 172.20.0.1", "link eth1.169 up vlan on eth1 id 169"]),
            ),
            ("vlan alone", "vlan=eth1.5:eth1", Ok(&["link eth1.5 up vlan on eth1 id 5"])),
            ("vlan named vlan<id>", "vlan=vlan0008:eth1", Ok(&["link eth1.8 up vlan on eth1 id 8"])),
            ("vlan id 4095", "vlan=vlan4095:eth1", Ok(&["link eth1.4095 up vlan on eth1 id 4095"])),
            ("vlan on an alias", "vlan=vlan4095:enxa", Ok(&["link enxa.4095 up vlan on eth31 id 4095"])),
            (
                "two vlans",
                "vlan=eth1.5:eth1 vlan=eth1.6:eth1",
                Ok(&["link eth1.5 up vlan on eth1 id 5", "link eth1.6 up vlan on eth1 id 6"]),
            ),
            // Errors name the parameter.
            ("unparseable client ip", "ip=xyz:", Err("ip=xyz:: client-ip \"xyz\": not an IP address")),
            (
                "unparseable gateway",
                "ip=10.0.0.2::10.0.0:",
                Err("ip=10.0.0.2::10.0.0:: gw-ip \"10.0.0\": not an IP address"),
            ),
            (
                "non-contiguous netmask",
                "ip=10.0.0.2::10.0.0.1:255.0.255.0::eth0",
                Err(
                    "ip=10.0.0.2::10.0.0.1:255.0.255.0::eth0: netmask \"255.0.255.0\": not a prefix length or a contiguous mask",
                ),
            ),
            (
                "prefix too long",
                "ip=10.0.0.2:::33::eth0",
                Err("ip=10.0.0.2:::33::eth0: netmask \"33\": prefix length must be at most 32"),
            ),
            ("bad dns", "ip=:::::eth0::dns", Err("ip=:::::eth0::dns: dns0-ip \"dns\": not an IP address")),
            ("bad ntp", "ip=:::::eth0::::ntp", Err("ip=:::::eth0::::ntp: ntp0-ip \"ntp\": not an IP address")),
            (
                "autoconf bootp",
                "ip=:::::eth0:bootp",
                Err("ip=:::::eth0:bootp: autoconf \"bootp\": only dhcp (on, any) or off (none) are supported"),
            ),
            ("too many fields", "ip=::::::::::x", Err("ip=::::::::::x: 11 fields, at most 10 expected")),
            ("unbalanced brackets", "ip=[2001:db8::1:::::eth0", Err("ip=[2001:db8::1:::::eth0: unbalanced brackets")),
            (
                "unknown bond option",
                "bond=bond0:eth1,eth2:mod=balance-rr",
                Err("bond=bond0:eth1,eth2:mod=balance-rr: unknown bond option: mod"),
            ),
            (
                "bad bond mode",
                "bond=bond0:eth1:mode=fastest",
                Err("bond=bond0:eth1:mode=fastest: bond option mode: bond mode: unknown value \"fastest\""),
            ),
            (
                "bond option without value",
                "bond=bond0:eth1:miimon",
                Err("bond=bond0:eth1:miimon: bond option \"miimon\": expected <name>=<value>"),
            ),
            ("bond MTU", "bond=bond0:eth1::big", Err("bond=bond0:eth1::big: MTU \"big\" is not a number")),
            (
                "vlan id 4096",
                "vlan=eth1.4096:eth1",
                Err("vlan=eth1.4096:eth1: VLAN id 4096 is not in the range 1..4095"),
            ),
            ("vlan id 0", "vlan=eth1.0:eth1", Err("vlan=eth1.0:eth1: VLAN id 0 is not in the range 1..4095")),
            ("vlan without device", "vlan=eth1.5", Err("vlan=eth1.5: expected <vlanname>:<phydevice>")),
            ("vlan name", "vlan=foo:eth1", Err("vlan=foo:eth1: the VLAN name must be <device>.<id> or vlan<id>")),
            ("vlan id not a number", "vlan=eth1.x:eth1", Err("vlan=eth1.x:eth1: VLAN id \"x\" is not a number")),
            (
                "hostname too long",
                "talos.hostname=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                Err(
                    "talos.hostname=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: the hostname must be 1 to 63 characters",
                ),
            ),
        ];
        for (name, cmdline, want) in cases {
            match (parse_str(cmdline), want) {
                (Ok(got), Ok(want)) => assert_eq!(summary(&got), *want, "case {name:?}"),
                (Err(got), Err(want)) => assert_eq!(got.to_string(), *want, "case {name:?}"),
                (got, want) => panic!("case {name:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn no_device_and_no_link_known_is_an_error() {
        let err = parse(&Cmdline::parse("ip=10.0.0.2::10.0.0.1"), &LinkResolver::new()).unwrap_err();
        assert_eq!(err.to_string(), "ip=10.0.0.2::10.0.0.1: no device given, and no link is known to apply it to");
    }

    #[test]
    fn bond_master_as_talos_sets_it() {
        let n = parse_str("bond=bond1:eth3,eth4:mode=802.3ad,xmit_hash_policy=layer2+3,miimon=100,arp_ip_target=10.0.0.1;10.0.0.2:1450")
            .unwrap();
        let bond = &n.links[0];
        assert!(bond.logical && bond.up);
        assert_eq!((bond.kind.as_str(), bond.link_type, bond.mtu), ("bond", LinkType::ETHER, 1450));
        let mut want = BondMasterSpec {
            mode: BondMode::IEEE_802_3AD,
            hash_policy: BondXmitHashPolicy::LAYER23,
            mii_mon: 100,
            arp_ip_targets: vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()],
            ..BondMasterSpec::default()
        };
        // What the options leave unsaid takes Talos's defaults.
        want.fill_defaults();
        assert_eq!(bond.bond_master, want);
        assert_eq!((bond.bond_master.ad_actor_sys_prio, bond.bond_master.resend_igmp), (65535, 1));
        assert!(n.links.iter().all(|l| l.config_layer == ConfigLayer::Cmdline));
        let primary = parse_str("bond=bond0:enxa,enxb:mode=active-backup,primary=enxa").unwrap();
        assert_eq!(primary.links[0].bond_master.primary, "eth31");
        assert_eq!(primary.links[0].bond_master.missed_max, 2);
    }

    #[test]
    fn specs_for_the_config_controllers() {
        let n = parse_str(
            "ip=172.20.0.2::172.20.0.1:255.255.255.0:node1.example.org:eth1::10.0.0.1::10.0.0.3 \
             ip=eth2:dhcp ip=10.9.0.2::192.168.0.1:16::eth3 ip=[2001:db8::2]::[fe80::1]:64::eth4",
        )
        .unwrap();

        let addresses = n.address_specs();
        let ids: Vec<String> = addresses.iter().map(AddressSpec::id).collect();
        assert_eq!(ids, ["eth1/172.20.0.2/24", "eth3/10.9.0.2/16", "eth4/2001:db8::2/64"]);
        for a in &addresses {
            assert_eq!(
                (a.scope, a.flags, a.config_layer),
                (Scope::GLOBAL, AddressFlags::PERMANENT, ConfigLayer::Cmdline)
            );
        }
        assert_eq!(addresses[2].family, Family::INET6);

        // Default routes by index (eth2's dhcp ip= holds 1025); eth3's gateway is off-subnet.
        let routes: Vec<(String, Scope)> = n.route_specs().iter().map(|r| (r.id(), r.scope)).collect();
        assert_eq!(
            routes,
            [
                ("inet4/172.20.0.1//1024".to_string(), Scope::GLOBAL),
                ("inet4/192.168.0.1//1026".to_string(), Scope::GLOBAL),
                ("inet4//192.168.0.1/32/1026".to_string(), Scope::LINK),
                ("eth4/inet6/fe80::1//1027".to_string(), Scope::GLOBAL),
            ]
        );
        let routes = n.route_specs();
        assert_eq!(routes[0].protocol, RouteProtocol::BOOT);
        assert_eq!(routes[0].out_link_name, "eth1");
        assert_eq!(routes[2].source, Some("10.9.0.2".parse().unwrap()));

        let hostname = n.hostname_spec().unwrap();
        assert_eq!((hostname.hostname.as_str(), hostname.domainname.as_str()), ("node1", "example.org"));
        assert_eq!(n.resolver_spec().unwrap().dns_servers, ["10.0.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(n.time_server_spec().unwrap().time_servers, ["10.0.0.3"]);

        let operators = n.operator_specs();
        assert_eq!(operators.len(), 1);
        assert_eq!(crate::resources::network::operator_id(&operators[0]), "dhcp4/eth2");
        assert_eq!((operators[0].require_up, operators[0].dhcp4.route_metric), (true, 1024));

        let empty = parse_str("talos.hostname=x").unwrap();
        assert!(empty.resolver_spec().is_none() && empty.time_server_spec().is_none());
        assert!(
            empty.address_specs().is_empty() && empty.route_specs().is_empty() && empty.operator_specs().is_empty()
        );
    }
}

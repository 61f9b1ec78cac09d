//! The typed network view of a machine config: v1alpha1 `machine.network` and `machine.time`,
//! and the multi-document kinds `LinkConfig`, `DummyLinkConfig`, `VLANConfig`, `BondConfig`,
//! `BridgeConfig`, `DHCPv4Config`, `DHCPv6Config`, `HostnameConfig`, `ResolverConfig`,
//! `TimeSyncConfig` and `StaticHostConfig`, as checked values. The network config controllers
//! read [`NetworkView`] and never see a malformed address, MAC or bond mode: every value is
//! checked here, and an error names its document and field
//! (`v1alpha1: machine.network.interfaces[0].addresses[1]: "x" is not a CIDR`).
//!
//! Where a setting may be written in both places, the choice between them is Talos's
//! (`container.go`): a dedicated document wins over v1alpha1. Which link a device selector
//! picks is not decided here: that needs the node's links, and this module is pure.
//! `machine.network.kubespan` is kept but never read.

use std::net::IpAddr;

use super::ConfigError;
use super::document::{Config, Document};
use super::reader::R;
use super::typed::{Hostname, TimeServer};
use super::value::Path;
use crate::types::IpPrefix;
use crate::types::bond::{
    AdLacpActive, AdSelect, ArpAllTargets, ArpValidate, BondMode, BondSettings, BondXmitHashPolicy, FailOverMac,
    LacpRate, PrimaryReselect,
};

/// A CIDR as the configuration takes it (`192.168.1.2/24`, host bits kept): the length in
/// at most three digits, leading zeros taken. This is the configuration's own rule, kept at
/// its edge, and looser than [`IpPrefix`]'s `FromStr` (Go's `netip.ParsePrefix`, no leading
/// zero), so a config accepted before is accepted still.
fn parse_cidr(s: &str) -> Result<IpPrefix, String> {
    let bad = || format!("{s:?} is not a CIDR");
    let (addr, bits) = s.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    if bits.is_empty() || !bits.bytes().all(|b| b.is_ascii_digit()) || bits.len() > 3 {
        return Err(bad());
    }
    let bits: u8 = bits.parse().map_err(|_| bad())?;
    IpPrefix::new(addr, bits).map_err(|_| bad())
}

/// A CIDR, or (as Talos's `parseIPOrIPPrefix` for v1alpha1 interface addresses) a bare
/// address taken as a full-length prefix.
fn parse_cidr_or_host(s: &str) -> Result<IpPrefix, String> {
    if s.contains('/') {
        parse_cidr(s)
    } else {
        let addr: IpAddr = s.parse().map_err(|_| format!("{s:?} is not a CIDR"))?;
        Ok(IpPrefix::host(addr))
    }
}

/// A link-layer address, colon-separated hex (`52:54:00:12:34:56`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mac(pub Vec<u8>);

impl TryFrom<&str> for Mac {
    type Error = String;

    fn try_from(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a hardware address (hex bytes, colon-separated)");
        let bytes: Result<Vec<u8>, _> = s
            .split([':', '-'])
            .map(|part| if part.len() == 2 { u8::from_str_radix(part, 16).map_err(|_| ()) } else { Err(()) })
            .collect();
        match bytes {
            Ok(b) if !b.is_empty() => Ok(Mac(b)),
            _ => Err(bad()),
        }
    }
}

/// Picks links by what the kernel reports of them; each set field must match (`*` globs, as
/// Talos's `glob.Glob`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceSelector {
    pub bus_path: Option<String>,
    pub hardware_addr: Option<String>,
    pub permanent_addr: Option<String>,
    pub pci_id: Option<String>,
    pub driver: Option<String>,
    pub physical: Option<bool>,
}

/// A route of a link (v1alpha1 `routes[]` or a document's `routes[]`). No destination is
/// the default route.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    pub destination: Option<IpPrefix>,
    pub gateway: Option<IpAddr>,
    pub source: Option<IpAddr>,
    /// `None`: the default metric.
    pub metric: Option<u32>,
    pub mtu: u32,
    /// A routing table name (`main`, `local`, `default`, `unspec`) or number; `None`: main.
    pub table: Option<String>,
}

/// v1alpha1 `dhcpOptions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpOptions {
    /// 0: the default metric.
    pub route_metric: u32,
    pub ipv4: bool,
    pub ipv6: bool,
    /// Raw DUID for DHCPv6, hex as written.
    pub duid_v6: String,
}

impl Default for DhcpOptions {
    /// Talos: DHCPv4 on, DHCPv6 off, unless said otherwise.
    fn default() -> Self {
        DhcpOptions { route_metric: 0, ipv4: true, ipv6: false, duid_v6: String::new() }
    }
}

/// v1alpha1 `interfaces[].bond`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bond {
    pub interfaces: Vec<String>,
    pub device_selectors: Vec<DeviceSelector>,
    /// The primary as the configuration names it (`primary`), not yet resolved to a link.
    pub options: BondSettings,
}

/// v1alpha1 `interfaces[].bridge`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bridge {
    pub interfaces: Vec<String>,
    pub stp: bool,
    pub vlan_filtering: bool,
}

/// v1alpha1 `interfaces[].vlans[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vlan {
    pub vlan_id: u16,
    pub addresses: Vec<IpPrefix>,
    pub routes: Vec<Route>,
    pub dhcp: bool,
    pub mtu: u32,
    pub dhcp_options: DhcpOptions,
}

/// One v1alpha1 `machine.network.interfaces[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Device {
    /// Its position in `interfaces`, for messages and ids.
    pub index: usize,
    pub interface: Option<String>,
    pub selector: Option<DeviceSelector>,
    pub addresses: Vec<IpPrefix>,
    pub routes: Vec<Route>,
    pub bond: Option<Bond>,
    pub bridge: Option<Bridge>,
    /// `bridgePort.master`.
    pub bridge_port: Option<String>,
    pub vlans: Vec<Vlan>,
    pub mtu: u32,
    pub dhcp: bool,
    pub ignore: bool,
    pub dummy: bool,
    pub dhcp_options: DhcpOptions,
}

impl Device {
    /// The same device on a link a selector picked.
    pub fn on(&self, interface: &str) -> Device {
        Device { interface: Some(interface.to_string()), selector: None, ..self.clone() }
    }
}

/// An address of a link document (`addresses[]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkAddress {
    pub address: IpPrefix,
    pub route_priority: Option<u32>,
}

/// What kind of link a link document is, with what only that kind has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkKind {
    /// `LinkConfig`: an existing (physical) link.
    Physical,
    /// `DummyLinkConfig`.
    Dummy,
    /// `VLANConfig`: `vlanMode` is `802.1q` or `802.1ad` (empty: 802.1q).
    Vlan { vlan_id: u16, mode: String, parent: String },
    /// `BondConfig`.
    Bond { links: Vec<String>, options: Box<BondSettings> },
    /// `BridgeConfig`.
    Bridge { links: Vec<String>, stp: bool, vlan_filtering: bool },
}

/// A link document: what every link kind shares, and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkDoc {
    pub name: String,
    pub kind: LinkKind,
    pub up: Option<bool>,
    pub mtu: Option<u32>,
    pub hardware_addr: Option<Mac>,
    pub multicast: Option<bool>,
    pub addresses: Vec<LinkAddress>,
    pub routes: Vec<Route>,
}

/// `DHCPv4Config` or `DHCPv6Config` (which has no `ignoreRoutes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DhcpConfig {
    pub name: String,
    pub route_metric: Option<u32>,
    pub ignore_hostname: bool,
    pub ignore_routes: bool,
    /// `none`, `mac` or `duid`; empty: not said.
    pub client_identifier: String,
    pub duid_raw: Option<Mac>,
}

/// How a node names itself when no hostname is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoHostname {
    /// Not at all.
    Off,
    /// From the node's default address (`talos-10-5-0-2`): v1alpha1's legacy default.
    Addr,
    /// A name stable across reboots and addresses (`talos-xxx-yyy`).
    Stable,
}

/// The hostname settings in force: a `HostnameConfig` document, else v1alpha1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostnameSettings {
    /// Possibly a fully qualified name.
    pub hostname: Option<Hostname>,
    pub auto: AutoHostname,
}

/// The resolver settings in force: a `ResolverConfig` document, else v1alpha1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolverSettings {
    pub nameservers: Vec<IpAddr>,
    /// `Some` when written at all (perhaps empty): they then replace other sources' domains.
    pub search_domains: Option<Vec<String>>,
    pub disable_search_domain: bool,
}

/// The time-sync settings in force: a `TimeSyncConfig` document, else v1alpha1 `machine.time`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeSettings {
    pub enabled: bool,
    pub servers: Vec<TimeServer>,
    pub use_nts: bool,
}

/// An `/etc/hosts` entry (`extraHostEntries[]`, `StaticHostConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticHost {
    pub ip: IpAddr,
    pub hostnames: Vec<String>,
}

/// The network settings of a config, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkView {
    pub devices: Vec<Device>,
    pub links: Vec<LinkDoc>,
    pub dhcp4: Vec<DhcpConfig>,
    pub dhcp6: Vec<DhcpConfig>,
    pub hostname: HostnameSettings,
    pub resolver: ResolverSettings,
    pub time: Option<TimeSettings>,
    pub static_hosts: Vec<StaticHost>,
}

impl NetworkView {
    /// Talos's `RunDefaultDHCPOperators`: one link or DHCP document means the user took
    /// control of the links, and no link gets DHCP (or comes up) unasked.
    pub fn run_default_dhcp_operators(&self) -> bool {
        self.links.is_empty() && self.dhcp4.is_empty() && self.dhcp6.is_empty()
    }
}

impl R<'_> {
    fn selector(&self, path: &Path) -> Result<DeviceSelector, ConfigError> {
        let glob = |key: &str| self.str(&path.key(key)).map(str::to_string);
        Ok(DeviceSelector {
            bus_path: glob("busPath"),
            hardware_addr: glob("hardwareAddr"),
            permanent_addr: glob("permanentAddr"),
            pci_id: glob("pciID"),
            driver: glob("driver"),
            physical: self.opt_bool(&path.key("physical")),
        })
    }

    /// v1alpha1 `routes[]`: `network`, metric 0 meaning the default.
    fn v1_routes(&self, path: &Path) -> Result<Vec<Route>, ConfigError> {
        (0..self.list(path).len())
            .map(|i| {
                let p = path.index(i);
                Ok(Route {
                    destination: self.parse(&p.key("network"), parse_cidr)?,
                    gateway: self.parse(&p.key("gateway"), ip)?,
                    source: self.parse(&p.key("source"), ip)?,
                    metric: self.int::<u32>(&p.key("metric"))?.filter(|m| *m != 0),
                    mtu: self.int(&p.key("mtu"))?.unwrap_or(0),
                    table: None,
                })
            })
            .collect()
    }

    /// A document's `routes[]`: `destination`, and a routing table.
    fn doc_routes(&self, path: &Path) -> Result<Vec<Route>, ConfigError> {
        (0..self.list(path).len())
            .map(|i| {
                let p = path.index(i);
                Ok(Route {
                    destination: self.parse(&p.key("destination"), parse_cidr)?,
                    gateway: self.parse(&p.key("gateway"), ip)?,
                    source: self.parse(&p.key("source"), ip)?,
                    metric: self.int(&p.key("metric"))?,
                    mtu: self.int(&p.key("mtu"))?.unwrap_or(0),
                    table: self.parse(&p.key("table"), routing_table)?,
                })
            })
            .collect()
    }

    fn dhcp_options(&self, path: &Path) -> Result<DhcpOptions, ConfigError> {
        let defaults = DhcpOptions::default();
        Ok(DhcpOptions {
            route_metric: self.int(&path.key("routeMetric"))?.unwrap_or(0),
            ipv4: self.opt_bool(&path.key("ipv4")).unwrap_or(defaults.ipv4),
            ipv6: self.opt_bool(&path.key("ipv6")).unwrap_or(defaults.ipv6),
            duid_v6: self.string(&path.key("duidv6")),
        })
    }

    /// Bond settings; `mode_key`, `targets_key` and the LACP key differ between v1alpha1 and
    /// `BondConfig`, the rest share their names up to case. Enumerated settings take the
    /// bonding driver's names only (not its numbers); unset, the driver's default.
    fn bond_options(&self, path: &Path, v1: bool) -> Result<BondSettings, ConfigError> {
        let k = |v1_name: &str, doc_name: &str| path.key(if v1 { v1_name } else { doc_name });
        Ok(BondSettings {
            mode: self.named(&k("mode", "bondMode"), BondMode::NAMES)?.unwrap_or_default(),
            hash_policy: self.named(&path.key("xmitHashPolicy"), BondXmitHashPolicy::NAMES)?.unwrap_or_default(),
            lacp_rate: self.named(&path.key("lacpRate"), LacpRate::NAMES)?.unwrap_or_default(),
            arp_validate: self.named(&path.key("arpValidate"), ArpValidate::NAMES)?.unwrap_or_default(),
            arp_all_targets: self.named(&path.key("arpAllTargets"), ArpAllTargets::NAMES)?.unwrap_or_default(),
            primary: self.string(&path.key("primary")),
            primary_index: None,
            primary_reselect: self.named(&path.key("primaryReselect"), PrimaryReselect::NAMES)?.unwrap_or_default(),
            fail_over_mac: self.named(&path.key("failOverMac"), FailOverMac::NAMES)?.unwrap_or_default(),
            ad_select: self.named(&path.key("adSelect"), AdSelect::NAMES)?.unwrap_or_default(),
            ad_lacp_active: if v1 { None } else { self.named(&path.key("adLACPActive"), AdLacpActive::NAMES)? },
            arp_ip_targets: self.parse_list(&k("arpIPTarget", "arpIpTargets"), ip)?,
            ns_ip6_targets: if v1 { Vec::new() } else { self.parse_list(&path.key("nsIp6Targets"), ip)? },
            mii_mon: self.int(&path.key("miimon"))?.unwrap_or(0),
            up_delay: self.int(&path.key("updelay"))?.unwrap_or(0),
            down_delay: self.int(&path.key("downdelay"))?.unwrap_or(0),
            arp_interval: self.int(&path.key("arpInterval"))?.unwrap_or(0),
            resend_igmp: self.int(&k("resendIgmp", "resendIGMP"))?.unwrap_or(0),
            min_links: self.int(&path.key("minLinks"))?.unwrap_or(0),
            lp_interval: self.int(&path.key("lpInterval"))?.unwrap_or(0),
            packets_per_slave: self.int(&path.key("packetsPerSlave"))?.unwrap_or(0),
            num_peer_notif: self.int(&path.key("numPeerNotif"))?.unwrap_or(0),
            tlb_dynamic_lb: self.int(&k("tlbDynamicLb", "tlbLogicalLb"))?.unwrap_or(0),
            all_slaves_active: self.int(&path.key("allSlavesActive"))?.unwrap_or(0),
            use_carrier: self.bool(&path.key("useCarrier")),
            ad_actor_sys_prio: self.int(&path.key("adActorSysPrio"))?.unwrap_or(0),
            ad_user_port_key: self.int(&path.key("adUserPortKey"))?.unwrap_or(0),
            peer_notify_delay: self.int(&k("peerNotifyDelay", "peerNotifDelay"))?.unwrap_or(0),
            missed_max: if v1 { 0 } else { self.int(&path.key("missedMax"))?.unwrap_or(0) },
        })
    }

    fn device(&self, path: &Path, index: usize) -> Result<Device, ConfigError> {
        let interface = self.str(&path.key("interface")).map(str::to_string);
        let selector = if self.has(&path.key("deviceSelector")) {
            Some(self.selector(&path.key("deviceSelector"))?)
        } else {
            None
        };
        if interface.is_some() == selector.is_some() {
            return Err(self.invalid(path, "exactly one of interface and deviceSelector must be set"));
        }
        let mut addresses = self.parse_list(&path.key("addresses"), parse_cidr_or_host)?;
        // `cidr` is the deprecated single-address form.
        if let Some(cidr) = self.parse(&path.key("cidr"), parse_cidr_or_host)? {
            addresses.insert(0, cidr);
        }
        let bond = if self.has(&path.key("bond")) {
            let p = path.key("bond");
            let selectors = (0..self.list(&p.key("deviceSelectors")).len())
                .map(|i| self.selector(&p.key("deviceSelectors").index(i)))
                .collect::<Result<Vec<_>, _>>()?;
            Some(Bond {
                interfaces: self.strings(&p.key("interfaces")),
                device_selectors: selectors,
                options: self.bond_options(&p, true)?,
            })
        } else {
            None
        };
        let bridge = self.has(&path.key("bridge")).then(|| {
            let p = path.key("bridge");
            Bridge {
                interfaces: self.strings(&p.key("interfaces")),
                stp: self.bool(&p.key("stp").key("enabled")),
                vlan_filtering: self.bool(&p.key("vlan").key("vlanFiltering")),
            }
        });
        let vlans = (0..self.list(&path.key("vlans")).len())
            .map(|i| {
                let p = path.key("vlans").index(i);
                let vlan_id: u16 = self.int(&p.key("vlanId"))?.unwrap_or(0);
                if !(1..=4094).contains(&vlan_id) {
                    return Err(self.invalid(&p.key("vlanId"), "a VLAN id must be 1 to 4094"));
                }
                let mut addresses = self.parse_list(&p.key("addresses"), parse_cidr)?;
                if let Some(cidr) = self.parse(&p.key("cidr"), parse_cidr)? {
                    addresses.insert(0, cidr);
                }
                Ok(Vlan {
                    vlan_id,
                    addresses,
                    routes: self.v1_routes(&p.key("routes"))?,
                    dhcp: self.bool(&p.key("dhcp")),
                    mtu: self.int(&p.key("mtu"))?.unwrap_or(0),
                    dhcp_options: self.dhcp_options(&p.key("dhcpOptions"))?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Device {
            index,
            interface,
            selector,
            addresses,
            routes: self.v1_routes(&path.key("routes"))?,
            bond,
            bridge,
            bridge_port: self.str(&path.key("bridgePort").key("master")).map(str::to_string),
            vlans,
            mtu: self.int(&path.key("mtu"))?.unwrap_or(0),
            dhcp: self.bool(&path.key("dhcp")),
            ignore: self.bool(&path.key("ignore")),
            dummy: self.bool(&path.key("dummy")),
            dhcp_options: self.dhcp_options(&path.key("dhcpOptions"))?,
        })
    }

    fn link_doc(&self, doc: &Document) -> Result<LinkDoc, ConfigError> {
        let root = Path::root();
        let name = doc.name().unwrap_or_default().to_string();
        let kind = match doc.kind() {
            "LinkConfig" => LinkKind::Physical,
            "DummyLinkConfig" => LinkKind::Dummy,
            "VLANConfig" => {
                let vlan_id: u16 = self.int(&root.key("vlanID"))?.unwrap_or(0);
                if !(1..=4094).contains(&vlan_id) {
                    return Err(self.invalid(&root.key("vlanID"), "a VLAN id must be 1 to 4094"));
                }
                let parent = self.string(&root.key("parent"));
                if parent.is_empty() {
                    return Err(self.invalid(&root.key("parent"), "a VLAN needs its parent link"));
                }
                LinkKind::Vlan { vlan_id, mode: self.choice(&root.key("vlanMode"), &["802.1q", "802.1ad"])?, parent }
            }
            "BondConfig" => {
                let links = self.strings(&root.key("links"));
                if links.is_empty() {
                    return Err(self.invalid(&root.key("links"), "a bond needs at least one link"));
                }
                let options = self.bond_options(&root, false)?;
                if self.str(&root.key("bondMode")).is_none() {
                    return Err(self.invalid(&root.key("bondMode"), "a bond needs its mode"));
                }
                LinkKind::Bond { links, options: Box::new(options) }
            }
            "BridgeConfig" => LinkKind::Bridge {
                links: self.strings(&root.key("links")),
                stp: self.bool(&root.key("stp").key("enabled")),
                vlan_filtering: self.bool(&root.key("vlan").key("filtering")),
            },
            other => return Err(self.invalid(&root, format!("{other} is not a link document"))),
        };
        let addresses = (0..self.list(&root.key("addresses")).len())
            .map(|i| {
                let p = root.key("addresses").index(i);
                let address = self
                    .parse(&p.key("address"), parse_cidr)?
                    .ok_or_else(|| self.invalid(&p.key("address"), "an address is required"))?;
                Ok(LinkAddress { address, route_priority: self.int(&p.key("routePriority"))? })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(LinkDoc {
            name,
            kind,
            up: self.opt_bool(&root.key("up")),
            mtu: self.int(&root.key("mtu"))?,
            hardware_addr: self.parse(&root.key("hardwareAddr"), |s| Mac::try_from(s))?,
            multicast: self.opt_bool(&root.key("multicast")),
            addresses,
            routes: self.doc_routes(&root.key("routes"))?,
        })
    }

    fn dhcp(&self, doc: &Document) -> Result<DhcpConfig, ConfigError> {
        let root = Path::root();
        Ok(DhcpConfig {
            name: doc.name().unwrap_or_default().to_string(),
            route_metric: self.int(&root.key("routeMetric"))?,
            ignore_hostname: self.bool(&root.key("ignoreHostname")),
            ignore_routes: self.bool(&root.key("ignoreRoutes")),
            client_identifier: self.choice(&root.key("clientIdentifier"), &["none", "mac", "duid"])?,
            duid_raw: self.parse(&root.key("duidRaw"), |s| Mac::try_from(s))?,
        })
    }
}

fn ip(s: &str) -> Result<IpAddr, String> {
    s.parse().map_err(|_| format!("{s:?} is not an IP address"))
}

fn routing_table(s: &str) -> Result<String, String> {
    if ["unspec", "default", "main", "local"].contains(&s) || s.parse::<u32>().is_ok() {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not a routing table (main, local, default, unspec or a number)"))
    }
}

/// The link document kinds, in the order they are read.
pub const LINK_KINDS: &[&str] = &["LinkConfig", "DummyLinkConfig", "VLANConfig", "BondConfig", "BridgeConfig"];

impl Config {
    /// The typed network view; defaults (no links, DHCP-less, nothing configured) when the
    /// config says nothing about networking.
    pub fn network(&self) -> Result<NetworkView, ConfigError> {
        let v1 = self.v1alpha1().map(R::of);
        let net = Path::keys("machine.network");

        let mut devices = Vec::new();
        let mut resolver = ResolverSettings::default();
        let mut hostname = HostnameSettings { hostname: None, auto: AutoHostname::Addr };
        let mut time = None;
        let mut static_hosts = Vec::new();
        if let Some(r) = &v1 {
            let interfaces = net.key("interfaces");
            for i in 0..r.list(&interfaces).len() {
                devices.push(r.device(&interfaces.index(i), i)?);
            }
            resolver = ResolverSettings {
                nameservers: r.parse_list(&net.key("nameservers"), ip)?,
                search_domains: r.has(&net.key("searchDomains")).then(|| r.strings(&net.key("searchDomains"))),
                disable_search_domain: r.bool(&net.key("disableSearchDomain")),
            };
            hostname = HostnameSettings {
                hostname: r.parse(&net.key("hostname"), |s| Hostname::try_from(s))?,
                auto: if r.bool(&Path::keys("machine.features.stableHostname")) {
                    AutoHostname::Stable
                } else {
                    AutoHostname::Addr
                },
            };
            let t = Path::keys("machine.time");
            if r.has(&t) {
                time = Some(TimeSettings {
                    enabled: !r.bool(&t.key("disabled")),
                    servers: r.parse_list(&t.key("servers"), |s| TimeServer::try_from(s))?,
                    use_nts: false,
                });
            }
            let hosts = net.key("extraHostEntries");
            for i in 0..r.list(&hosts).len() {
                let p = hosts.index(i);
                let host_ip = r.parse(&p.key("ip"), ip)?.ok_or_else(|| r.invalid(&p.key("ip"), "an IP is required"))?;
                static_hosts.push(StaticHost { ip: host_ip, hostnames: r.strings(&p.key("aliases")) });
            }
        }

        let mut links = Vec::new();
        let mut dhcp4 = Vec::new();
        let mut dhcp6 = Vec::new();
        for doc in self.documents() {
            let r = R::of(doc);
            let root = Path::root();
            match doc.kind() {
                k if LINK_KINDS.contains(&k) => links.push(r.link_doc(doc)?),
                "DHCPv4Config" => dhcp4.push(r.dhcp(doc)?),
                "DHCPv6Config" => dhcp6.push(r.dhcp(doc)?),
                "HostnameConfig" => {
                    let auto = match r.str(&root.key("auto")) {
                        Some("stable") => Some(AutoHostname::Stable),
                        Some("off") => Some(AutoHostname::Off),
                        Some(other) => {
                            return Err(r.invalid(&root.key("auto"), format!("{other:?} is not stable or off")));
                        }
                        None => None,
                    };
                    let name = r.parse(&root.key("hostname"), |s| Hostname::try_from(s))?;
                    // Talos: a hostname and an automatic one exclude each other; with neither
                    // the document says nothing.
                    if name.is_some() && auto.is_some_and(|a| a != AutoHostname::Off) {
                        return Err(r.invalid(&root.key("auto"), "auto and hostname cannot be set together"));
                    }
                    if name.is_none() && auto.is_none() {
                        return Err(r.invalid(&root, "either auto or hostname must be set"));
                    }
                    hostname = HostnameSettings { auto: auto.unwrap_or(AutoHostname::Off), hostname: name };
                }
                "ResolverConfig" => {
                    let servers = root.key("nameservers");
                    let mut nameservers = Vec::new();
                    for i in 0..r.list(&servers).len() {
                        let p = servers.index(i).key("address");
                        nameservers
                            .push(r.parse(&p, ip)?.ok_or_else(|| r.invalid(&p, "a nameserver needs its address"))?);
                    }
                    let sd = root.key("searchDomains");
                    resolver = ResolverSettings {
                        nameservers,
                        search_domains: r.has(&sd.key("domains")).then(|| r.strings(&sd.key("domains"))),
                        disable_search_domain: r.bool(&sd.key("disableDefault")),
                    };
                }
                "TimeSyncConfig" => {
                    time = Some(TimeSettings {
                        enabled: r.opt_bool(&root.key("enabled")).unwrap_or(true),
                        servers: r.parse_list(&root.key("ntp").key("servers"), |s| TimeServer::try_from(s))?,
                        use_nts: r.bool(&root.key("ntp").key("useNTS")),
                    });
                }
                "StaticHostConfig" => {
                    let host_ip = ip(doc.name().unwrap_or_default()).map_err(|e| r.invalid(&root.key("name"), e))?;
                    static_hosts.push(StaticHost { ip: host_ip, hostnames: r.strings(&root.key("hostnames")) });
                }
                _ => {}
            }
        }
        Ok(NetworkView { devices, links, dhcp4, dhcp6, hostname, resolver, time, static_hosts })
    }
}

impl Config {
    /// Refuses any setting that is not networking: what an image's own network file may
    /// carry (network documents, and of v1alpha1 only `machine.network`).
    pub fn network_only(&self) -> Result<(), ConfigError> {
        let refuse = |doc: &Document, path: Path| ConfigError::Invalid {
            doc: doc.id().label(),
            path: path.to_string(),
            reason: "only network settings belong here".into(),
        };
        for doc in self.documents() {
            if doc.kind.is_v1alpha1() {
                for (key, value) in doc.map().iter() {
                    match key {
                        "version" => {}
                        "machine" => {
                            if let Some(other) = value.as_map().and_then(|m| m.keys().find(|k| *k != "network")) {
                                return Err(refuse(doc, Path::keys("machine").key(other)));
                            }
                        }
                        other => return Err(refuse(doc, Path::keys(other))),
                    }
                }
            } else if doc.kind.group != "network" {
                return Err(refuse(doc, Path::root()));
            }
        }
        Ok(())
    }
}

/// Talos's `glob.Glob`: `*` matches any run of characters, everything else itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load;

    fn view(text: &str) -> Result<NetworkView, ConfigError> {
        load(text).unwrap().config.network()
    }

    fn cidr(s: &str) -> IpPrefix {
        parse_cidr(s).unwrap()
    }

    #[test]
    fn values_accept_and_refuse() {
        assert_eq!(cidr("192.168.1.2/24").to_string(), "192.168.1.2/24");
        assert_eq!(parse_cidr_or_host("10.0.0.1").unwrap().to_string(), "10.0.0.1/32");
        assert_eq!(parse_cidr_or_host("fd00::1").unwrap().to_string(), "fd00::1/128");
        for bad in ["10.0.0.1", "10.0.0.1/33", "x/24", "10.0.0.1/", "::1/129", "10.0.0.1/-1"] {
            assert_eq!(parse_cidr(bad).unwrap_err(), format!("{bad:?} is not a CIDR"));
        }
        assert_eq!(Mac::try_from("52:54:00:AB:cd:01").unwrap().0, [0x52, 0x54, 0, 0xab, 0xcd, 1]);
        assert!(Mac::try_from("52:54:0").is_err());
        assert!(Mac::try_from("").is_err());
        let globs = [
            ("pci-0000:00:*", "pci-0000:00:03.0", true),
            ("*:03.0", "pci-0000:00:03.0", true),
            ("virtio*", "virtio_net", true),
            ("e1000", "e1000e", false),
            ("52:54:*:01", "52:54:00:12:34:01", true),
            ("*a*b*", "xaxxbx", true),
            ("*a*b*", "xbxxax", false),
            ("*", "", true),
        ];
        for (pattern, text, want) in globs {
            assert_eq!(glob_match(pattern, text), want, "{pattern} ~ {text}");
        }
    }

    #[test]
    fn v1alpha1_machine_network() {
        let text = r#"version: v1alpha1
machine:
  type: worker
  features:
    stableHostname: true
  network:
    hostname: node1.example.org
    nameservers: [10.0.0.53, "fd00::53"]
    searchDomains: [example.org]
    disableSearchDomain: true
    extraHostEntries:
      - ip: 10.0.0.9
        aliases: [gw, gw.lan]
    kubespan:
      enabled: true
    interfaces:
      - interface: eth0
        addresses: [192.168.1.2/24, 10.9.9.9]
        mtu: 1450
        routes:
          - network: 0.0.0.0/0
            gateway: 192.168.1.1
            metric: 100
          - network: 10.2.0.0/16
            gateway: 192.168.1.254
            source: 192.168.1.2
            mtu: 1400
        vlans:
          - vlanId: 100
            addresses: [172.16.0.2/24]
            dhcp: true
            dhcpOptions: {routeMetric: 200, ipv6: true}
      - deviceSelector:
          busPath: "0000:00:05.*"
          driver: virtio_net
          hardwareAddr: "52:54:*"
        dhcp: true
        dhcpOptions:
          ipv4: false
          ipv6: true
          duidv6: "00:01:00:01"
      - interface: bond0
        bond:
          interfaces: [eth1, eth2]
          mode: 802.3ad
          lacpRate: fast
          xmitHashPolicy: layer3+4
          miimon: 100
          arpIPTarget: [10.0.0.1]
      - interface: br0
        bridge:
          interfaces: [eth3]
          stp: {enabled: true}
      - interface: dummy0
        dummy: true
      - interface: eth9
        ignore: true
  time:
    disabled: false
    servers: [pool.ntp.org, 10.0.0.123]
"#;
        let v = view(text).unwrap();
        assert_eq!(v.hostname.hostname.as_ref().map(Hostname::as_str), Some("node1.example.org"));
        assert_eq!(v.hostname.auto, AutoHostname::Stable);
        assert_eq!(v.resolver.nameservers.len(), 2);
        assert_eq!(v.resolver.search_domains.as_deref(), Some(&["example.org".to_string()][..]));
        assert!(v.resolver.disable_search_domain);
        assert_eq!(
            v.static_hosts,
            [StaticHost { ip: "10.0.0.9".parse().unwrap(), hostnames: vec!["gw".into(), "gw.lan".into()] }]
        );
        assert_eq!(v.devices.len(), 6);
        let eth0 = &v.devices[0];
        assert_eq!(eth0.interface.as_deref(), Some("eth0"));
        assert_eq!(eth0.addresses, [cidr("192.168.1.2/24"), cidr("10.9.9.9/32")]);
        assert_eq!(eth0.mtu, 1450);
        assert!(!eth0.dhcp);
        assert_eq!(eth0.routes[0].destination, Some(cidr("0.0.0.0/0")));
        assert_eq!(eth0.routes[0].metric, Some(100));
        assert_eq!(eth0.routes[1].source, Some("192.168.1.2".parse().unwrap()));
        assert_eq!((eth0.routes[1].metric, eth0.routes[1].mtu), (None, 1400));
        let vlan = &eth0.vlans[0];
        assert_eq!((vlan.vlan_id, vlan.dhcp, vlan.dhcp_options.route_metric), (100, true, 200));
        assert!(vlan.dhcp_options.ipv4 && vlan.dhcp_options.ipv6);
        let sel = &v.devices[1];
        assert_eq!(sel.interface, None);
        let s = sel.selector.as_ref().unwrap();
        assert_eq!(s.bus_path.as_deref(), Some("0000:00:05.*"));
        assert_eq!(s.driver.as_deref(), Some("virtio_net"));
        assert!(!sel.dhcp_options.ipv4 && sel.dhcp_options.ipv6);
        assert_eq!(sel.dhcp_options.duid_v6, "00:01:00:01");
        let bond = v.devices[2].bond.as_ref().unwrap();
        assert_eq!(bond.interfaces, ["eth1", "eth2"]);
        assert_eq!((bond.options.mode, bond.options.lacp_rate), (BondMode::IEEE_802_3AD, LacpRate::FAST));
        assert_eq!((bond.options.hash_policy, bond.options.mii_mon), (BondXmitHashPolicy::LAYER34, 100));
        assert_eq!(bond.options.arp_ip_targets, ["10.0.0.1".parse::<IpAddr>().unwrap()]);
        let bridge = v.devices[3].bridge.as_ref().unwrap();
        assert_eq!((bridge.interfaces.as_slice(), bridge.stp), (&["eth3".to_string()][..], true));
        assert!(v.devices[4].dummy);
        assert!(v.devices[5].ignore);
        let time = v.time.clone().unwrap();
        assert!(time.enabled);
        assert_eq!(time.servers.iter().map(TimeServer::as_str).collect::<Vec<_>>(), ["pool.ntp.org", "10.0.0.123"]);
        assert!(v.links.is_empty() && v.run_default_dhcp_operators());
    }

    #[test]
    fn multi_document_kinds() {
        let text = r#"version: v1alpha1
machine:
  type: worker
  network:
    hostname: ignored-for-the-document
    nameservers: [9.9.9.9]
---
apiVersion: v1alpha1
kind: LinkConfig
name: enp0s2
up: true
mtu: 9000
multicast: false
addresses:
  - address: 192.168.2.2/24
    routePriority: 50
routes:
  - destination: 10.3.0.0/16
    gateway: 192.168.2.1
    table: "100"
---
apiVersion: v1alpha1
kind: DummyLinkConfig
name: dummy1
hardwareAddr: "02:00:00:00:00:01"
---
apiVersion: v1alpha1
kind: VLANConfig
name: enp0s2.10
vlanID: 10
vlanMode: 802.1ad
parent: enp0s2
---
apiVersion: v1alpha1
kind: BondConfig
name: bond1
links: [enp0s3, enp0s4]
bondMode: active-backup
primary: enp0s3
missedMax: 3
---
apiVersion: v1alpha1
kind: BridgeConfig
name: br1
links: [enp0s5]
vlan: {filtering: true}
---
apiVersion: v1alpha1
kind: DHCPv4Config
name: enp0s6
routeMetric: 300
ignoreHostname: true
clientIdentifier: duid
duidRaw: "00:01:02"
---
apiVersion: v1alpha1
kind: DHCPv6Config
name: enp0s6
---
apiVersion: v1alpha1
kind: HostnameConfig
auto: stable
---
apiVersion: v1alpha1
kind: ResolverConfig
nameservers:
  - address: 10.0.0.53
searchDomains:
  domains: []
---
apiVersion: v1alpha1
kind: TimeSyncConfig
ntp:
  servers: [time.example.org]
  useNTS: true
---
apiVersion: v1alpha1
kind: StaticHostConfig
name: 10.0.0.10
hostnames: [api.local]
"#;
        let v = view(text).unwrap();
        assert!(!v.run_default_dhcp_operators());
        let names: Vec<&str> = v.links.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["enp0s2", "dummy1", "enp0s2.10", "bond1", "br1"]);
        let l = &v.links[0];
        assert_eq!(
            (l.kind.clone(), l.up, l.mtu, l.multicast),
            (LinkKind::Physical, Some(true), Some(9000), Some(false))
        );
        assert_eq!(l.addresses, [LinkAddress { address: cidr("192.168.2.2/24"), route_priority: Some(50) }]);
        assert_eq!(l.routes[0].table.as_deref(), Some("100"));
        assert_eq!(l.routes[0].destination, Some(cidr("10.3.0.0/16")));
        assert_eq!(
            (v.links[1].kind.clone(), v.links[1].hardware_addr.clone()),
            (LinkKind::Dummy, Some(Mac(vec![2, 0, 0, 0, 0, 1])))
        );
        assert_eq!(v.links[2].kind, LinkKind::Vlan { vlan_id: 10, mode: "802.1ad".into(), parent: "enp0s2".into() });
        let LinkKind::Bond { links, options } = &v.links[3].kind else { panic!("not a bond") };
        assert_eq!(
            (links.len(), options.mode, options.primary.as_str(), options.missed_max),
            (2, BondMode::ACTIVE_BACKUP, "enp0s3", 3)
        );
        assert_eq!(
            v.links[4].kind,
            LinkKind::Bridge { links: vec!["enp0s5".into()], stp: false, vlan_filtering: true }
        );
        assert_eq!(
            v.dhcp4,
            [DhcpConfig {
                name: "enp0s6".into(),
                route_metric: Some(300),
                ignore_hostname: true,
                ignore_routes: false,
                client_identifier: "duid".into(),
                duid_raw: Some(Mac(vec![0, 1, 2])),
            }]
        );
        assert_eq!(v.dhcp6[0].name, "enp0s6");
        assert_eq!(v.hostname, HostnameSettings { hostname: None, auto: AutoHostname::Stable });
        assert_eq!(
            v.resolver,
            ResolverSettings {
                nameservers: vec!["10.0.0.53".parse().unwrap()],
                search_domains: Some(vec![]),
                disable_search_domain: false
            }
        );
        let time = v.time.unwrap();
        assert!(time.enabled && time.use_nts);
        assert_eq!(time.servers[0].as_str(), "time.example.org");
        assert_eq!(v.static_hosts[0].hostnames, ["api.local"]);
    }

    #[test]
    fn talos_generated_configs_read() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config/testdata");
        let mut files: Vec<std::path::PathBuf> = Vec::new();
        for version in std::fs::read_dir(root.join("talos")).unwrap() {
            let dir = version.unwrap().path();
            if dir.is_dir() {
                files.extend(std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()));
            }
        }
        files.push(root.join("patch/keyed-interfaces/expected.yaml"));
        assert!(files.len() > 10, "{files:?}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let loaded = load(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            loaded.config.network().unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }

    #[test]
    fn network_only_refuses_the_rest() {
        let ok = "version: v1alpha1\nmachine:\n  network:\n    hostname: n1\n---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n";
        assert!(load(ok).unwrap().config.network_only().is_ok());
        let cases = [
            (
                "version: v1alpha1\nmachine:\n  type: worker\n",
                "v1alpha1: machine.type: only network settings belong here",
            ),
            ("version: v1alpha1\ndebug: true\n", "v1alpha1: debug: only network settings belong here"),
            ("apiVersion: v1alpha1\nkind: SysctlConfig\n", "SysctlConfig: : only network settings belong here"),
        ];
        for (text, want) in cases {
            assert_eq!(load(text).unwrap().config.network_only().unwrap_err().to_string(), want);
        }
    }

    #[test]
    fn no_network_says_nothing() {
        let v = view("version: v1alpha1\nmachine:\n  type: worker\n").unwrap();
        assert!(v.devices.is_empty() && v.links.is_empty() && v.time.is_none());
        assert_eq!(v.hostname, HostnameSettings { hostname: None, auto: AutoHostname::Addr });
        assert_eq!(v.resolver, ResolverSettings::default());
        assert!(v.run_default_dhcp_operators());
    }

    #[test]
    fn bad_values_name_their_path() {
        let v1 = |body: &str| format!("version: v1alpha1\nmachine:\n  network:\n{body}");
        let doc = |body: &str| format!("apiVersion: v1alpha1\n{body}");
        let cases: Vec<(String, &str)> = vec![
            (
                v1("    interfaces:\n      - interface: eth0\n        addresses: [10.0.0.2/24, 10.0.0.300/24]\n"),
                "v1alpha1: machine.network.interfaces[0].addresses[1]: \"10.0.0.300/24\" is not a CIDR",
            ),
            (
                v1(
                    "    interfaces:\n      - interface: eth0\n        routes:\n          - network: 10.0.0.0/8\n            gateway: gw\n",
                ),
                "v1alpha1: machine.network.interfaces[0].routes[0].gateway: \"gw\" is not an IP address",
            ),
            (
                v1("    interfaces:\n      - addresses: [10.0.0.2/24]\n"),
                "v1alpha1: machine.network.interfaces[0]: exactly one of interface and deviceSelector must be set",
            ),
            (
                v1("    interfaces:\n      - interface: bond0\n        bond:\n          mode: fastest\n"),
                "v1alpha1: machine.network.interfaces[0].bond.mode: \"fastest\" is not one of balance-rr,",
            ),
            (
                v1("    interfaces:\n      - interface: eth0\n        vlans:\n          - vlanId: 5000\n"),
                "v1alpha1: machine.network.interfaces[0].vlans[0].vlanId: a VLAN id must be 1 to 4094",
            ),
            (
                v1(
                    "    interfaces:\n      - interface: eth0\n        vlans:\n          - vlanId: 5\n            addresses: [10.0.0.2]\n",
                ),
                "v1alpha1: machine.network.interfaces[0].vlans[0].addresses[0]: \"10.0.0.2\" is not a CIDR",
            ),
            (
                v1("    interfaces:\n      - interface: eth0\n        mtu: 99999999999\n"),
                "v1alpha1: machine.network.interfaces[0].mtu: 99999999999 is out of range",
            ),
            (
                v1("    extraHostEntries:\n      - ip: nope\n"),
                "v1alpha1: machine.network.extraHostEntries[0].ip: \"nope\" is not an IP address",
            ),
            (
                doc("kind: LinkConfig\nname: eth0\naddresses:\n  - address: 10.0.0.2\n"),
                "LinkConfig eth0: addresses[0].address: \"10.0.0.2\" is not a CIDR",
            ),
            (
                doc("kind: VLANConfig\nname: eth0.5\nvlanID: 5\n"),
                "VLANConfig eth0.5: parent: a VLAN needs its parent link",
            ),
            (
                doc("kind: BondConfig\nname: bond0\nbondMode: 802.3ad\n"),
                "BondConfig bond0: links: a bond needs at least one link",
            ),
            (
                doc("kind: BondConfig\nname: bond0\nlinks: [eth0]\n"),
                "BondConfig bond0: bondMode: a bond needs its mode",
            ),
            (
                v1("    interfaces:\n      - interface: bond0\n        bond:\n          mode: \"4\"\n"),
                "v1alpha1: machine.network.interfaces[0].bond.mode: \"4\" is not one of balance-rr, active-backup, \
                 balance-xor, broadcast, 802.3ad, balance-tlb, balance-alb",
            ),
            (
                doc("kind: DummyLinkConfig\nname: d0\nhardwareAddr: zz\n"),
                "DummyLinkConfig d0: hardwareAddr: \"zz\" is not a hardware address",
            ),
            (
                doc("kind: HostnameConfig\nauto: stable\nhostname: node1\n"),
                "HostnameConfig: auto: auto and hostname cannot be set together",
            ),
            (
                doc("kind: ResolverConfig\nnameservers:\n  - address: dns.google\n"),
                "ResolverConfig: nameservers[0].address: \"dns.google\" is not an IP address",
            ),
            (
                doc("kind: TimeSyncConfig\nntp:\n  servers: [\"bad server\"]\n"),
                "TimeSyncConfig: ntp.servers[0]: \"bad server\" is neither an IP address nor a DNS name",
            ),
            (
                doc("kind: StaticHostConfig\nname: host.local\nhostnames: [x]\n"),
                "StaticHostConfig host.local: name: \"host.local\" is not an IP address",
            ),
        ];
        for (text, want) in cases {
            let err = view(&text).unwrap_err().to_string();
            assert!(err.starts_with(want), "got {err}\nwant {want}");
        }
    }
}

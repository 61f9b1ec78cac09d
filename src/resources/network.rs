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

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::cosi::{PrintColumn, Registry, RegistryError, ResourceDefinition, ResourceSpec, Sensitivity};
use crate::types::IpPrefix;

/// Merged desired specs and observed statuses.
pub const NAMESPACE: &str = "network";
/// Layered candidates, one per config source, ids `<layer>/<id>`.
pub const CONFIG_NAMESPACE: &str = "network-config";

/// The metric of default routes (Talos's `DefaultRouteMetric`).
pub const DEFAULT_ROUTE_METRIC: u32 = 1024;

pub const LINK_KIND_VLAN: &str = "vlan";
pub const LINK_KIND_BOND: &str = "bond";
pub const LINK_KIND_BRIDGE: &str = "bridge";
pub const LINK_KIND_VRF: &str = "vrf";
pub const LINK_KIND_VETH: &str = "veth";
pub const LINK_KIND_WIREGUARD: &str = "wireguard";
pub const LINK_KIND_DUMMY: &str = "dummy";

/// A value in a network resource that is not one its type knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkValueError {
    #[error("{kind}: unknown value {value:?}")]
    Unknown { kind: &'static str, value: String },
    #[error("{kind} {value:?}: {reason}")]
    Invalid { kind: &'static str, value: String, reason: String },
}

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

/// `eth0/10.0.0.2/24`.
pub fn address_id(link_name: &str, address: &IpPrefix) -> String {
    format!("{link_name}/{address}")
}

pub fn link_id(link_name: &str) -> String {
    link_name.to_string()
}

/// Talos's route id: `[<table>/][<link>/ for inet6]<family>/<gateway>/<destination>/<priority>`,
/// the table only when it is not `main`, empty gateway and destination as empty strings.
pub fn route_id(
    table: RoutingTable,
    family: Family,
    destination: Option<&IpPrefix>,
    gateway: Option<&IpAddr>,
    priority: u32,
    out_link_name: &str,
) -> String {
    let mut prefix = String::new();
    if table != RoutingTable::MAIN {
        prefix.push_str(&format!("{table}/"));
    }
    if family == Family::INET6 {
        prefix.push_str(&format!("{out_link_name}/"));
    }
    let gw = gateway.map(ToString::to_string).unwrap_or_default();
    let dst = destination.map(ToString::to_string).unwrap_or_default();
    format!("{prefix}{family}/{gw}/{dst}/{priority}")
}

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

// ---------------------------------------------------------------------------------------------
// Kernel values: numbers with Talos's names

/// A numeric kernel value with names for the values Talos knows; shown and parsed by name,
/// any other value as its number.
macro_rules! named_number {
    ($(#[$meta:meta])* $name:ident($repr:ty), $kind:literal {
        $($konst:ident = $value:expr => $text:literal),* $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $repr);

        impl $name {
            $(pub const $konst: $name = $name($value);)*

            /// Talos's name for this value, if it has one.
            pub fn name(self) -> Option<&'static str> {
                $(if self.0 == $value { return Some($text); })*
                None
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => write!(f, "{}", self.0),
                }
            }
        }

        impl FromStr for $name {
            type Err = NetworkValueError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $(if s == $text { return Ok($name($value)); })*
                s.parse::<$repr>()
                    .map($name)
                    .map_err(|_| NetworkValueError::Unknown { kind: $kind, value: s.to_string() })
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_any(NamedVisitor::<$name>::new($kind))
            }
        }
    };
}

/// Accepts a name (or number as text) through `FromStr`, or a bare number.
struct NamedVisitor<T> {
    kind: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T> NamedVisitor<T> {
    fn new(kind: &'static str) -> Self {
        NamedVisitor { kind, _t: std::marker::PhantomData }
    }
}

impl<T: FromStr<Err = NetworkValueError>> Visitor<'_> for NamedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} name or number", self.kind)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

named_number! {
    /// Address family (`AF_INET` = 2, `AF_INET6` = 10).
    Family(u8), "family" { INET4 = 2 => "inet4", INET6 = 10 => "inet6" }
}

impl Family {
    pub fn of(ip: &IpAddr) -> Family {
        if ip.is_ipv4() { Family::INET4 } else { Family::INET6 }
    }
}

named_number! {
    /// Address and route scope (`RT_SCOPE_*`).
    Scope(u8), "scope" {
        GLOBAL = 0 => "global", SITE = 200 => "site", LINK = 253 => "link", HOST = 254 => "host",
        NOWHERE = 255 => "nowhere",
    }
}

named_number! {
    /// Route type (`RTN_*`).
    RouteType(u8), "route type" {
        UNSPEC = 0 => "unspec", UNICAST = 1 => "unicast", LOCAL = 2 => "local", BROADCAST = 3 => "broadcast",
        ANYCAST = 4 => "anycast", MULTICAST = 5 => "multicast", BLACKHOLE = 6 => "blackhole",
        UNREACHABLE = 7 => "unreachable", PROHIBIT = 8 => "prohibit", THROW = 9 => "throw", NAT = 10 => "nat",
        XRESOLVE = 11 => "xresolve",
    }
}

named_number! {
    /// Who installed a route (`RTPROT_*`).
    RouteProtocol(u8), "route protocol" {
        UNSPEC = 0 => "unspec", REDIRECT = 1 => "redirect", KERNEL = 2 => "kernel", BOOT = 3 => "boot",
        STATIC = 4 => "static", RA = 9 => "ra", MRT = 10 => "mrt", ZEBRA = 11 => "zebra", BIRD = 12 => "bird",
        DNROUTED = 13 => "dnrouted", XORP = 14 => "xorp", NTK = 15 => "ntk", DHCP = 16 => "dhcp",
        MRTD = 17 => "mrtd", KEEPALIVED = 18 => "keepalived", BABEL = 42 => "babel", OPENR = 99 => "openr",
        BGP = 186 => "bgp", ISIS = 187 => "isis", OSPF = 188 => "ospf", RIP = 189 => "rip",
        EIGRP = 192 => "eigrp",
    }
}

named_number! {
    /// Routing table; the unnamed ones show as their number.
    RoutingTable(u32), "routing table" {
        UNSPEC = 0 => "unspec", DEFAULT = 253 => "default", MAIN = 254 => "main", LOCAL = 255 => "local",
    }
}

named_number! {
    /// Link (ARP hardware) type (`ARPHRD_*`), the common ones named.
    LinkType(u16), "link type" {
        NETROM = 0 => "netrom", ETHER = 1 => "ether", EETHER = 2 => "eether", AX25 = 3 => "ax25",
        IEEE802 = 6 => "ieee802", INFINIBAND = 32 => "infiniband", SLIP = 256 => "slip", CAN = 280 => "can",
        PPP = 512 => "ppp", TUNNEL = 768 => "ipip", TUNNEL6 = 769 => "tunnel6", LOOPBACK = 772 => "loopback",
        SIT = 776 => "sit", IPGRE = 778 => "gre", IEEE80211 = 801 => "ieee802.11",
        IEEE80211_RADIOTAP = 803 => "ieee802.11_radiotap", IP6GRE = 823 => "ip6gre", NETLINK = 824 => "netlink",
        SIXLOWPAN = 825 => "6lowpan", NONE = 65534 => "nohdr", VOID = 65535 => "void",
    }
}

named_number! {
    /// VLAN protocol (the ethertype).
    VlanProtocol(u16), "vlan protocol" { IEEE_802_1Q = 0x8100 => "802.1q", IEEE_802_1AD = 0x88a8 => "802.1ad" }
}

named_number! {
    /// RFC 2863 operational state (`IF_OPER_*`).
    OperationalState(u8), "operational state" {
        UNKNOWN = 0 => "unknown", NOT_PRESENT = 1 => "notPresent", DOWN = 2 => "down",
        LOWER_LAYER_DOWN = 3 => "lowerLayerDown", TESTING = 4 => "testing", DORMANT = 5 => "dormant",
        UP = 6 => "up",
    }
}

named_number! {
    /// Physical port (ethtool `PORT_*`).
    Port(u8), "port" {
        TWISTED_PAIR = 0 => "TwistedPair", AUI = 1 => "AUI", BNC = 2 => "BNC", MII = 3 => "MII",
        FIBRE = 4 => "Fibre", DIRECT_ATTACH = 5 => "DirectAttach", NONE = 0xef => "None", OTHER = 0xff => "Other",
    }
}

named_number! {
    /// Duplex (ethtool `DUPLEX_*`).
    Duplex(u8), "duplex" { HALF = 0 => "Half", FULL = 1 => "Full", UNKNOWN = 0xff => "Unknown" }
}

named_number! {
    /// Bonding mode, as the bonding driver names it.
    BondMode(u8), "bond mode" {
        ROUND_ROBIN = 0 => "balance-rr", ACTIVE_BACKUP = 1 => "active-backup", XOR = 2 => "balance-xor",
        BROADCAST = 3 => "broadcast", IEEE_802_3AD = 4 => "802.3ad", TLB = 5 => "balance-tlb",
        ALB = 6 => "balance-alb",
    }
}

named_number! {
    BondXmitHashPolicy(u8), "xmit hash policy" {
        LAYER2 = 0 => "layer2", LAYER34 = 1 => "layer3+4", LAYER23 = 2 => "layer2+3", ENCAP23 = 3 => "encap2+3",
        ENCAP34 = 4 => "encap3+4",
    }
}

named_number! {
    LacpRate(u8), "lacp rate" { SLOW = 0 => "slow", FAST = 1 => "fast" }
}

named_number! {
    ArpValidate(u32), "arp validate" {
        NONE = 0 => "none", ACTIVE = 1 => "active", BACKUP = 2 => "backup", ALL = 3 => "all", FILTER = 4 => "filter",
        FILTER_ACTIVE = 5 => "filter-active", FILTER_BACKUP = 6 => "filter-backup",
    }
}

named_number! {
    ArpAllTargets(u32), "arp all targets" { ANY = 0 => "any", ALL = 1 => "all" }
}

named_number! {
    PrimaryReselect(u8), "primary reselect" { ALWAYS = 0 => "always", BETTER = 1 => "better", FAILURE = 2 => "failure" }
}

named_number! {
    FailOverMac(u8), "fail over mac" { NONE = 0 => "none", ACTIVE = 1 => "active", FOLLOW = 2 => "follow" }
}

named_number! {
    AdSelect(u8), "ad select" { STABLE = 0 => "stable", BANDWIDTH = 1 => "bandwidth", COUNT = 2 => "count" }
}

named_number! {
    AdLacpActive(u8), "ad lacp active" { OFF = 0 => "off", ON = 1 => "on" }
}

named_number! {
    /// How NodeAddress sorts its sets.
    AddressSortAlgorithm(u8), "address sort algorithm" { V1 = 0 => "v1", V2 = 1 => "v2" }
}

named_number! {
    /// What a DHCP client identifies itself with.
    ClientIdentifier(u8), "client identifier" { NONE = 0 => "none", MAC = 1 => "mac", DUID = 2 => "duid" }
}

/// A set of kernel flag bits, shown as Talos does: the names of the set bits, comma-separated.
/// Bits without a name follow as one hex number, so nothing is lost on a round trip.
macro_rules! flag_set {
    ($(#[$meta:meta])* $name:ident($repr:ty), $kind:literal { $($konst:ident = $value:expr => $text:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $repr);

        impl $name {
            $(pub const $konst: $name = $name($value);)*
            const NAMED: &'static [($repr, &'static str)] = &[$(($value, $text)),*];

            pub fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }
        }

        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut parts: Vec<String> = Vec::new();
                let mut rest = self.0;
                for (bit, text) in Self::NAMED {
                    if self.0 & bit == *bit {
                        parts.push(text.to_string());
                        rest &= !bit;
                    }
                }
                if rest != 0 {
                    parts.push(format!("{rest:#x}"));
                }
                f.write_str(&parts.join(","))
            }
        }

        impl FromStr for $name {
            type Err = NetworkValueError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let mut bits: $repr = 0;
                for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let named = Self::NAMED.iter().find(|(_, text)| *text == part).map(|(bit, _)| *bit);
                    let number = || match part.strip_prefix("0x") {
                        Some(hex) => <$repr>::from_str_radix(hex, 16).ok(),
                        None => part.parse::<$repr>().ok(),
                    };
                    bits |= named.or_else(number).ok_or_else(|| NetworkValueError::Unknown {
                        kind: $kind,
                        value: part.to_string(),
                    })?;
                }
                Ok($name(bits))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_any(NamedVisitor::<$name>::new($kind))
            }
        }
    };
}

flag_set! {
    /// Address flags (`IFA_F_*`).
    AddressFlags(u32), "address flag" {
        TEMPORARY = 0x1 => "temporary", NODAD = 0x2 => "nodad", OPTIMISTIC = 0x4 => "optimistic",
        DADFAILED = 0x8 => "dadfailed", HOMEADDRESS = 0x10 => "homeaddress", DEPRECATED = 0x20 => "deprecated",
        TENTATIVE = 0x40 => "tentative", PERMANENT = 0x80 => "permanent", MNGTMPADDR = 0x100 => "mngmtmpaddr",
        NOPREFIXROUTE = 0x200 => "noprefixroute", MCAUTOJOIN = 0x400 => "mcautojoin",
        STABLE_PRIVACY = 0x800 => "stableprivacy",
    }
}

impl AddressFlags {
    /// The flags machined may set and enforce; the rest (tentative, deprecated, dadfailed …)
    /// are the kernel's to manage (Talos's `AddressFlagsManaged`).
    pub const MANAGED: AddressFlags = AddressFlags(0x80 | 0x2 | 0x10 | 0x100 | 0x200 | 0x400);

    pub fn managed(self) -> AddressFlags {
        AddressFlags(self.0 & Self::MANAGED.0)
    }

    pub fn unmanaged(self) -> AddressFlags {
        AddressFlags(self.0 & !Self::MANAGED.0)
    }
}

flag_set! {
    /// Route flags (`RTM_F_*`).
    RouteFlags(u32), "route flag" {
        NOTIFY = 0x100 => "notify", CLONED = 0x200 => "cloned", EQUALIZE = 0x400 => "equalize",
        PREFIX = 0x800 => "prefix", LOOKUP_TABLE = 0x1000 => "lookup_table", FIB_MATCH = 0x2000 => "fib_match",
        OFFLOAD = 0x4000 => "offload", TRAP = 0x8000 => "trap",
    }
}

impl RouteFlags {
    /// The flags that count when comparing a desired route with the kernel's.
    pub const MASK: RouteFlags = RouteFlags(0x100 | 0x200 | 0x400 | 0x800);

    pub fn equal_masked(self, other: RouteFlags) -> bool {
        self.0 & Self::MASK.0 == other.0 & Self::MASK.0
    }
}

flag_set! {
    /// Link flags (`IFF_*`).
    LinkFlags(u32), "link flag" {
        UP = 0x1 => "UP", BROADCAST = 0x2 => "BROADCAST", DEBUG = 0x4 => "DEBUG", LOOPBACK = 0x8 => "LOOPBACK",
        POINTTOPOINT = 0x10 => "POINTTOPOINT", NOTRAILERS = 0x20 => "NOTRAILERS", RUNNING = 0x40 => "RUNNING",
        NOARP = 0x80 => "NOARP", PROMISC = 0x100 => "PROMISC", ALLMULTI = 0x200 => "ALLMULTI",
        MASTER = 0x400 => "MASTER", SLAVE = 0x800 => "SLAVE", MULTICAST = 0x1000 => "MULTICAST",
        PORTSEL = 0x2000 => "PORTSEL", AUTOMEDIA = 0x4000 => "AUTOMEDIA", DYNAMIC = 0x8000 => "DYNAMIC",
        LOWER_UP = 0x10000 => "LOWER_UP", DORMANT = 0x20000 => "DORMANT", ECHO = 0x40000 => "ECHO",
    }
}

// ---------------------------------------------------------------------------------------------
// Addresses, prefixes, hardware addresses

/// The prefix length of a netmask (`255.255.255.0` → 24); `None` when its ones are not
/// contiguous.
pub fn netmask_bits(netmask: &IpAddr) -> Option<u8> {
    let (value, width) = match netmask {
        IpAddr::V4(a) => (u128::from(u32::from(*a)) << 96, 32u32),
        IpAddr::V6(a) => (u128::from(*a), 128u32),
    };
    let ones = value.leading_ones();
    (value.checked_shl(ones).unwrap_or(0) == 0 && ones <= width).then_some(ones as u8)
}

/// A MAC (or other link-layer) address, shown as colon-separated hex (`52:54:00:12:34:56`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HardwareAddress(pub Vec<u8>);

impl HardwareAddress {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for HardwareAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|b| format!("{b:02x}")).collect();
        f.write_str(&parts.join(":"))
    }
}

impl FromStr for HardwareAddress {
    type Err = NetworkValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hex: String = s.chars().filter(|c| *c != ':').collect();
        let invalid = || NetworkValueError::Invalid {
            kind: "hardware address",
            value: s.to_string(),
            reason: "expected hex bytes, colon-separated".into(),
        };
        if !hex.len().is_multiple_of(2) || !hex.is_ascii() {
            return Err(invalid());
        }
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| invalid()))
            .collect::<Result<Vec<u8>, _>>()
            .map(HardwareAddress)
    }
}

impl Serialize for HardwareAddress {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HardwareAddress {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(de::Error::custom)
    }
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

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

// ---------------------------------------------------------------------------------------------
// Addresses

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

// ---------------------------------------------------------------------------------------------
// Routes

/// One next hop of a multipath route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteNextHop {
    #[serde(with = "empty_as_none")]
    pub gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub out_link_name: String,
    #[serde(skip_serializing_if = "is_default")]
    pub weight: u32,
}

/// A desired route. Merged id: [`route_id`]. No destination is the default route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteSpec {
    pub family: Family,
    #[serde(rename = "dst", with = "empty_as_none")]
    pub destination: Option<IpPrefix>,
    #[serde(rename = "src", with = "empty_as_none")]
    pub source: Option<IpAddr>,
    #[serde(with = "empty_as_none")]
    pub gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub out_link_name: String,
    pub table: RoutingTable,
    #[serde(skip_serializing_if = "is_default")]
    pub priority: u32,
    pub scope: Scope,
    #[serde(rename = "type")]
    pub route_type: RouteType,
    pub flags: RouteFlags,
    pub protocol: RouteProtocol,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
    #[serde(skip_serializing_if = "is_default")]
    pub mtu: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub next_hops: Vec<RouteNextHop>,
}

impl RouteSpec {
    pub fn id(&self) -> String {
        route_id(
            self.table,
            self.family,
            self.destination.as_ref(),
            self.gateway.as_ref(),
            self.priority,
            &self.out_link_name,
        )
    }

    /// Talos's normalization: an all-zero destination, gateway or source means "none" (and
    /// says the family), and the scope follows from what is left: link for a directly
    /// connected destination, host for loopback, global otherwise (and for multipath).
    pub fn normalize(&mut self) {
        let unspecified = |ip: &IpAddr| ip.is_unspecified();
        if let Some(dst) = self.destination
            && dst.bits() == 0
            && unspecified(&dst.addr())
        {
            self.family = Family::of(&dst.addr());
            self.destination = None;
        }
        if let Some(gw) = self.gateway.filter(unspecified) {
            self.family = Family::of(&gw);
            self.gateway = None;
        }
        if let Some(src) = self.source.filter(unspecified) {
            self.family = Family::of(&src);
            self.source = None;
        }
        self.scope = if !self.next_hops.is_empty() {
            Scope::GLOBAL
        } else if self.gateway.is_none() && self.destination.is_some() {
            Scope::LINK
        } else if self.destination.is_some_and(|d| d.addr().is_loopback()) {
            Scope::HOST
        } else {
            Scope::GLOBAL
        };
    }
}

impl ResourceSpec for RouteSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "RouteSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// A route as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteStatus {
    pub family: Family,
    #[serde(rename = "dst", with = "empty_as_none")]
    pub destination: Option<IpPrefix>,
    #[serde(rename = "src", with = "empty_as_none")]
    pub source: Option<IpAddr>,
    #[serde(with = "empty_as_none")]
    pub gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "is_default")]
    pub out_link_index: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub out_link_name: String,
    pub table: RoutingTable,
    pub priority: u32,
    pub scope: Scope,
    #[serde(rename = "type")]
    pub route_type: RouteType,
    pub flags: RouteFlags,
    pub protocol: RouteProtocol,
    #[serde(skip_serializing_if = "is_default")]
    pub mtu: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub next_hops: Vec<RouteNextHop>,
}

impl ResourceSpec for RouteStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "RouteStatuses.net.talos.dev",
        aliases: &["route", "routes"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Destination", json_path: "{.dst}" },
            PrintColumn { name: "Gateway", json_path: "{.gateway}" },
            PrintColumn { name: "Link", json_path: "{.outLinkName}" },
            PrintColumn { name: "Metric", json_path: "{.priority}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

// ---------------------------------------------------------------------------------------------
// Links

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct VlanSpec {
    #[serde(rename = "vlanID")]
    pub vid: u16,
    #[serde(rename = "vlanProtocol")]
    pub protocol: VlanProtocol,
}

/// A bond's settings, as the bonding driver names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct BondMasterSpec {
    pub mode: BondMode,
    #[serde(rename = "xmitHashPolicy")]
    pub hash_policy: BondXmitHashPolicy,
    pub lacp_rate: LacpRate,
    #[serde(rename = "arpValidate")]
    pub arp_validate: ArpValidate,
    #[serde(rename = "arpAllTargets")]
    pub arp_all_targets: ArpAllTargets,
    /// The primary slave's index as the kernel reports it; configuration sets `primary`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_index: Option<u32>,
    pub primary_reselect: PrimaryReselect,
    pub fail_over_mac: FailOverMac,
    #[serde(rename = "adSelect", skip_serializing_if = "is_default")]
    pub ad_select: AdSelect,
    #[serde(rename = "miimon", skip_serializing_if = "is_default")]
    pub mii_mon: u32,
    #[serde(rename = "updelay", skip_serializing_if = "is_default")]
    pub up_delay: u32,
    #[serde(rename = "downdelay", skip_serializing_if = "is_default")]
    pub down_delay: u32,
    #[serde(rename = "arpInterval", skip_serializing_if = "is_default")]
    pub arp_interval: u32,
    #[serde(rename = "resendIgmp", skip_serializing_if = "is_default")]
    pub resend_igmp: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub min_links: u32,
    #[serde(rename = "lpInterval", skip_serializing_if = "is_default")]
    pub lp_interval: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub packets_per_slave: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub num_peer_notif: u8,
    #[serde(rename = "tlbLogicalLb", skip_serializing_if = "is_default")]
    pub tlb_dynamic_lb: u8,
    #[serde(skip_serializing_if = "is_default")]
    pub all_slaves_active: u8,
    #[serde(skip_serializing_if = "is_default")]
    pub use_carrier: bool,
    #[serde(rename = "adActorSysPrio", skip_serializing_if = "is_default")]
    pub ad_actor_sys_prio: u16,
    #[serde(rename = "adUserPortKey", skip_serializing_if = "is_default")]
    pub ad_user_port_key: u16,
    #[serde(skip_serializing_if = "is_default")]
    pub peer_notify_delay: u32,
    #[serde(rename = "arpIpTargets", skip_serializing_if = "Vec::is_empty")]
    pub arp_ip_targets: Vec<IpAddr>,
    #[serde(rename = "nsIp6Targets", skip_serializing_if = "Vec::is_empty")]
    pub ns_ip6_targets: Vec<IpAddr>,
    #[serde(rename = "adLacpActive", skip_serializing_if = "Option::is_none")]
    pub ad_lacp_active: Option<AdLacpActive>,
    #[serde(skip_serializing_if = "is_default")]
    pub missed_max: u8,
    /// The name of the primary slave (active-backup, balance-tlb, balance-alb).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub primary: String,
}

impl BondMasterSpec {
    /// Talos's defaults for settings left zero, matching what the kernel reports back for
    /// a new bond (so the spec and the status compare equal).
    pub fn fill_defaults(&mut self) {
        // Linux 6.18 locks use_carrier on.
        self.use_carrier = true;
        for v in [&mut self.resend_igmp, &mut self.lp_interval, &mut self.packets_per_slave] {
            if *v == 0 {
                *v = 1;
            }
        }
        if self.num_peer_notif == 0 {
            self.num_peer_notif = 1;
        }
        let tlb_alb = self.mode == BondMode::ALB || self.mode == BondMode::TLB;
        if !tlb_alb {
            self.tlb_dynamic_lb = 1;
        }
        if self.mode == BondMode::IEEE_802_3AD && self.ad_actor_sys_prio == 0 {
            self.ad_actor_sys_prio = 65535;
        }
        if !tlb_alb && self.mode != BondMode::IEEE_802_3AD && self.missed_max == 0 {
            self.missed_max = 2;
        }
    }
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

// ---------------------------------------------------------------------------------------------
// Hostname

/// The desired hostname and domain name, merged id `hostname`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct HostnameSpec {
    pub hostname: String,
    pub domainname: String,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
}

impl HostnameSpec {
    pub const ID: &'static str = "hostname";

    pub fn fqdn(&self) -> String {
        fqdn(&self.hostname, &self.domainname)
    }

    /// Splits `node1.example.org` into hostname and domain, checked as Talos checks them:
    /// a hostname of 1 to 63 characters, a name of at most 253.
    pub fn from_fqdn(fqdn: &str, layer: ConfigLayer) -> Result<HostnameSpec, NetworkValueError> {
        let (hostname, domainname) = fqdn.split_once('.').unwrap_or((fqdn, ""));
        let spec =
            HostnameSpec { hostname: hostname.to_string(), domainname: domainname.to_string(), config_layer: layer };
        spec.validate()?;
        Ok(spec)
    }

    pub fn validate(&self) -> Result<(), NetworkValueError> {
        let invalid = |reason: &str| NetworkValueError::Invalid {
            kind: "hostname",
            value: self.fqdn(),
            reason: reason.to_string(),
        };
        if self.hostname.is_empty() || self.hostname.len() > 63 {
            return Err(invalid("the hostname must be 1 to 63 characters"));
        }
        if self.fqdn().len() > 253 {
            return Err(invalid("the fully qualified name must be at most 253 characters"));
        }
        Ok(())
    }
}

fn fqdn(hostname: &str, domainname: &str) -> String {
    if domainname.is_empty() { hostname.to_string() } else { format!("{hostname}.{domainname}") }
}

impl ResourceSpec for HostnameSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "HostnameSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The hostname in force, id `hostname`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct HostnameStatus {
    pub hostname: String,
    pub domainname: String,
}

impl HostnameStatus {
    pub const ID: &'static str = "hostname";

    pub fn fqdn(&self) -> String {
        fqdn(&self.hostname, &self.domainname)
    }

    /// The names certificates carry: the hostname, and the FQDN when there is a domain.
    pub fn dns_names(&self) -> Vec<String> {
        let mut names = vec![self.hostname.clone()];
        if !self.domainname.is_empty() {
            names.push(self.fqdn());
        }
        names
    }
}

impl ResourceSpec for HostnameStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "HostnameStatuses.net.talos.dev",
        aliases: &["hostname"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Hostname", json_path: "{.hostname}" },
            PrintColumn { name: "Domainname", json_path: "{.domainname}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

// ---------------------------------------------------------------------------------------------
// Resolvers

/// The desired DNS servers and search domains, merged id `resolvers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ResolverSpec {
    pub dns_servers: Vec<IpAddr>,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub search_domains: Vec<String>,
    /// The machine configuration set the search domains explicitly (perhaps to none): they
    /// replace the lower layers' instead of joining them.
    #[serde(skip_serializing_if = "is_default")]
    pub search_domains_overridden: bool,
}

impl ResolverSpec {
    pub const ID: &'static str = "resolvers";
}

impl ResourceSpec for ResolverSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "ResolverSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Layer", json_path: "{.layer}" },
            PrintColumn { name: "Resolvers", json_path: "{.dnsServers}" },
            PrintColumn { name: "Search Domains", json_path: "{.searchDomains}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The resolvers in force, id `resolvers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ResolverStatus {
    pub dns_servers: Vec<IpAddr>,
    pub search_domains: Vec<String>,
}

impl ResolverStatus {
    pub const ID: &'static str = "resolvers";
}

impl ResourceSpec for ResolverStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "ResolverStatuses.net.talos.dev",
        aliases: &["resolvers"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Resolvers", json_path: "{.dnsServers}" },
            PrintColumn { name: "Search Domains", json_path: "{.searchDomains}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

// ---------------------------------------------------------------------------------------------
// Time servers

/// The desired NTP servers, merged id `timeservers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct TimeServerSpec {
    #[serde(rename = "timeServers")]
    pub time_servers: Vec<String>,
    #[serde(rename = "useNTS", skip_serializing_if = "is_default")]
    pub use_nts: bool,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
}

impl TimeServerSpec {
    pub const ID: &'static str = "timeservers";
}

impl ResourceSpec for TimeServerSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "TimeServerSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Timeservers", json_path: "{.timeServers}" },
            PrintColumn { name: "UseNTS", json_path: "{.useNTS}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The time servers in force, id `timeservers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct TimeServerStatus {
    #[serde(rename = "timeServers")]
    pub time_servers: Vec<String>,
    #[serde(rename = "useNTS")]
    pub use_nts: bool,
}

impl TimeServerStatus {
    pub const ID: &'static str = "timeservers";
}

impl ResourceSpec for TimeServerStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "TimeServerStatuses.net.talos.dev",
        aliases: &["timeserver", "timeservers"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Timeservers", json_path: "{.timeServers}" },
            PrintColumn { name: "UseNTS", json_path: "{.useNTS}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

// ---------------------------------------------------------------------------------------------
// Operators

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

// ---------------------------------------------------------------------------------------------
// Node addresses, hardware address, device config, status

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

/// The node's first hardware address (id `first`): what identifies a machine before it has
/// a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct HardwareAddr {
    /// The link it belongs to.
    pub name: String,
    pub hardware_addr: HardwareAddress,
}

impl HardwareAddr {
    pub const FIRST_ID: &'static str = "first";
}

impl ResourceSpec for HardwareAddr {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "HardwareAddresses.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// One `machine.network.interfaces[]` entry of the v1alpha1 machine config, as its YAML tree
/// (the config module owns its schema), id `<index>/<interface or selector>`. Sensitive as
/// in Talos: WireGuard keys live here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct DeviceConfigSpec {
    pub device: serde_json::Value,
}

impl ResourceSpec for DeviceConfigSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "DeviceConfigSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };
}

/// Whether networking is ready, id `status` (Talos's network `Status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkStatus {
    /// The node has an address other than loopback.
    pub address_ready: bool,
    /// A default route (or another way out) exists.
    pub connectivity_ready: bool,
    /// The hostname is set.
    pub hostname_ready: bool,
    /// `/etc/resolv.conf`, `/etc/hosts` are rendered.
    pub etc_files_ready: bool,
}

impl NetworkStatus {
    pub const ID: &'static str = "status";
}

impl ResourceSpec for NetworkStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "NetworkStatuses.net.talos.dev",
        aliases: &["netstatus", "netstatuses"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Address", json_path: "{.addressReady}" },
            PrintColumn { name: "Connectivity", json_path: "{.connectivityReady}" },
            PrintColumn { name: "Hostname", json_path: "{.hostnameReady}" },
            PrintColumn { name: "Etc", json_path: "{.etcFilesReady}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

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

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn prefix(s: &str) -> IpPrefix {
        s.parse().unwrap()
    }

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
    fn named_values_show_and_parse() {
        let cases: &[(String, &str)] = &[
            (Family::INET4.to_string(), "inet4"),
            (Family::INET6.to_string(), "inet6"),
            (Family(0).to_string(), "0"),
            (Scope::LINK.to_string(), "link"),
            (RoutingTable::MAIN.to_string(), "main"),
            (RoutingTable(100).to_string(), "100"),
            (RouteProtocol::BOOT.to_string(), "boot"),
            (RouteType::UNICAST.to_string(), "unicast"),
            (LinkType::ETHER.to_string(), "ether"),
            (LinkType::LOOPBACK.to_string(), "loopback"),
            (LinkType::NONE.to_string(), "nohdr"),
            (VlanProtocol::IEEE_802_1Q.to_string(), "802.1q"),
            (BondMode::IEEE_802_3AD.to_string(), "802.3ad"),
            (BondXmitHashPolicy::LAYER23.to_string(), "layer2+3"),
            (OperationalState::UP.to_string(), "up"),
            (OperationalState::LOWER_LAYER_DOWN.to_string(), "lowerLayerDown"),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
        assert_eq!("inet6".parse(), Ok(Family::INET6));
        assert_eq!("10".parse(), Ok(Family::INET6));
        assert_eq!("balance-alb".parse(), Ok(BondMode::ALB));
        assert_eq!("180".parse(), Ok(RoutingTable(180)));
        let err = "inet5".parse::<Family>().unwrap_err();
        assert_eq!(err.to_string(), "family: unknown value \"inet5\"");
        // YAML numbers decode as well as names.
        let table: RoutingTable = serde_saphyr::from_str("254").unwrap();
        assert_eq!(table, RoutingTable::MAIN);
        let scope: Scope = serde_saphyr::from_str("host").unwrap();
        assert_eq!(scope, Scope::HOST);
    }

    #[test]
    fn flags_show_and_parse() {
        let cases: &[(AddressFlags, &str)] = &[
            (AddressFlags(0), ""),
            (AddressFlags::PERMANENT, "permanent"),
            (AddressFlags::PERMANENT | AddressFlags::NOPREFIXROUTE, "permanent,noprefixroute"),
            (AddressFlags(0x80 | 0x10000), "permanent,0x10000"),
        ];
        for (flags, text) in cases {
            assert_eq!(flags.to_string(), *text);
            assert_eq!(text.parse::<AddressFlags>().as_ref(), Ok(flags), "{text}");
        }
        assert_eq!((RouteFlags::OFFLOAD | RouteFlags::CLONED).to_string(), "cloned,offload");
        assert_eq!((LinkFlags::UP | LinkFlags::LOWER_UP).to_string(), "UP,LOWER_UP");
        assert!("permanent,bogus".parse::<AddressFlags>().is_err());
        let tentative = AddressFlags::PERMANENT | AddressFlags::TENTATIVE | AddressFlags::DEPRECATED;
        assert_eq!(tentative.managed(), AddressFlags::PERMANENT);
        assert_eq!(tentative.unmanaged(), AddressFlags::TENTATIVE | AddressFlags::DEPRECATED);
        assert!(RouteFlags::CLONED.equal_masked(RouteFlags::CLONED | RouteFlags::OFFLOAD));
    }

    #[test]
    fn prefixes() {
        let good = [("10.0.0.2/24", "10.0.0.0/24"), ("2001:db8::a/64", "2001:db8::/64"), ("0.0.0.0/0", "0.0.0.0/0")];
        for (text, network) in good {
            let p = prefix(text);
            assert_eq!(p.to_string(), text);
            assert_eq!(p.network().to_string(), network);
        }
        for bad in ["10.0.0.2", "10.0.0.2/33", "10.0.0.2/", "x/24", "10.0.0.2/024", "::1/129", "10.0.0.2/-1"] {
            assert!(bad.parse::<IpPrefix>().is_err(), "{bad} accepted");
        }
        assert!(prefix("10.0.0.2/24").contains(&ip("10.0.0.200")));
        assert!(!prefix("10.0.0.2/24").contains(&ip("10.0.1.1")));
        assert!(!prefix("0.0.0.0/0").contains(&ip("::1")));
        assert!(prefix("0.0.0.0/0").contains(&ip("1.2.3.4")));
        assert_eq!(IpPrefix::host(ip("fe80::1")).to_string(), "fe80::1/128");
        let masks = [
            ("255.255.255.0", Some(24)),
            ("255.255.255.240", Some(28)),
            ("0.0.0.0", Some(0)),
            ("255.255.255.255", Some(32)),
            ("255.0.255.0", None),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff8", Some(125)),
            ("ffff:ffff:ffff:ffff::", Some(64)),
        ];
        for (mask, want) in masks {
            assert_eq!(netmask_bits(&ip(mask)), want, "{mask}");
        }
    }

    #[test]
    fn hardware_addresses() {
        let mac: HardwareAddress = "52:54:00:12:34:5A".parse().unwrap();
        assert_eq!(mac.0, [0x52, 0x54, 0x00, 0x12, 0x34, 0x5a]);
        assert_eq!(mac.to_string(), "52:54:00:12:34:5a");
        assert_eq!("525400123456".parse::<HardwareAddress>().unwrap().to_string(), "52:54:00:12:34:56");
        assert!("52:54:0".parse::<HardwareAddress>().is_err());
        assert!("zz:54".parse::<HardwareAddress>().is_err());
    }

    #[test]
    fn route_ids_as_talos() {
        let gw = ip("10.0.0.1");
        let dst = prefix("10.2.0.0/16");
        let cases = [
            (route_id(RoutingTable::MAIN, Family::INET4, None, Some(&gw), 1024, "eth0"), "inet4/10.0.0.1//1024"),
            (route_id(RoutingTable::MAIN, Family::INET4, Some(&dst), None, 0, "eth0"), "inet4//10.2.0.0/16/0"),
            (route_id(RoutingTable(100), Family::INET4, None, Some(&gw), 10, "eth0"), "100/inet4/10.0.0.1//10"),
            (
                route_id(RoutingTable::LOCAL, Family::INET6, None, Some(&ip("fe80::1")), 1024, "eth1"),
                "local/eth1/inet6/fe80::1//1024",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
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

    /// What `talosctl get -o yaml` shows, and that it decodes back to the same spec.
    fn assert_yaml<T: ResourceSpec>(spec: &T, want: &str) {
        let yaml = crate::cosi::SpecObject::to_yaml(spec).unwrap();
        assert_eq!(yaml, want);
        let back: T = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(&back, spec);
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

    #[test]
    fn route_normalization() {
        // (destination, gateway, source, expected family, destination, gateway, scope)
        type Case =
            (Option<&'static str>, Option<&'static str>, Option<&'static str>, Family, Option<&'static str>, Scope);
        let cases: &[Case] = &[
            (Some("0.0.0.0/0"), Some("10.0.0.1"), Some("0.0.0.0"), Family::INET4, None, Scope::GLOBAL),
            (Some("::/0"), Some("fe80::1"), None, Family::INET6, None, Scope::GLOBAL),
            (Some("10.2.0.0/16"), None, None, Family::INET4, Some("10.2.0.0/16"), Scope::LINK),
            (Some("10.2.0.0/16"), Some("0.0.0.0"), None, Family::INET4, Some("10.2.0.0/16"), Scope::LINK),
            (Some("127.0.0.0/8"), Some("127.0.0.1"), None, Family::INET4, Some("127.0.0.0/8"), Scope::HOST),
        ];
        for (dst, gw, src, family, want_dst, scope) in cases {
            let mut r = RouteSpec {
                family: Family::INET4,
                destination: dst.map(prefix),
                gateway: gw.map(ip),
                source: src.map(ip),
                ..RouteSpec::default()
            };
            r.normalize();
            assert_eq!(
                (r.family, r.destination, r.scope),
                (*family, want_dst.map(prefix), *scope),
                "{dst:?} via {gw:?}"
            );
            assert!(r.source.is_none_or(|s| !s.is_unspecified()));
            assert!(r.gateway.is_none_or(|g| !g.is_unspecified()));
        }
    }

    #[test]
    fn bond_defaults_as_talos() {
        let mut rr = BondMasterSpec::default();
        rr.fill_defaults();
        let want = BondMasterSpec {
            resend_igmp: 1,
            lp_interval: 1,
            packets_per_slave: 1,
            num_peer_notif: 1,
            tlb_dynamic_lb: 1,
            use_carrier: true,
            missed_max: 2,
            ..BondMasterSpec::default()
        };
        assert_eq!(rr, want);
        let mut lacp = BondMasterSpec { mode: BondMode::IEEE_802_3AD, ..BondMasterSpec::default() };
        lacp.fill_defaults();
        assert_eq!((lacp.ad_actor_sys_prio, lacp.missed_max, lacp.tlb_dynamic_lb), (65535, 0, 1));
        let mut alb = BondMasterSpec { mode: BondMode::ALB, ..BondMasterSpec::default() };
        alb.fill_defaults();
        assert_eq!((alb.ad_actor_sys_prio, alb.missed_max, alb.tlb_dynamic_lb), (0, 0, 0));
    }

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

//! Kernel values: numbers with Talos's names (its `nethelpers`), flag sets, prefixes and
//! hardware addresses.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use super::NetworkValueError;
use crate::types::{NamedVisitor, named_number};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::test_util::{ip, prefix};
    use crate::resources::network::{BondMode, BondXmitHashPolicy};
    use crate::types::IpPrefix;

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
}

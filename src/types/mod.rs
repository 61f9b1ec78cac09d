//! Primitive values that several layers speak: an address family and an address with its
//! prefix length, numbers with names, a bond's settings. They live here, at the bottom, so the
//! kernel adapters, the resources and the configuration share one type instead of converting
//! between copies. This module holds plain values only and must never import anything from the
//! crate.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

pub mod bond;
mod named;

pub use bond::{
    AdLacpActive, AdSelect, ArpAllTargets, ArpValidate, BondMode, BondSettings, BondXmitHashPolicy, FailOverMac,
    LacpRate, PrimaryReselect,
};
pub use named::NetworkValueError;
pub(crate) use named::{NamedVisitor, named_number};

/// For `skip_serializing_if`: the value is its type's zero.
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// An address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Inet4,
    Inet6,
}

impl Family {
    pub fn of(addr: &IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::Inet4,
            IpAddr::V6(_) => Family::Inet6,
        }
    }

    /// The widest prefix length of the family.
    pub fn max_len(self) -> u8 {
        match self {
            Family::Inet4 => 32,
            Family::Inet6 => 128,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Inet4 => "inet4",
            Family::Inet6 => "inet6",
        })
    }
}

/// A prefix that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Text that is not `<address>/<length>` in Go's `netip.ParsePrefix` form.
    #[error("prefix {text:?}: {reason}")]
    Syntax { text: String, reason: &'static str },
    /// A length longer than the address's family has.
    #[error("prefix \"{addr}/{len}\": {}", self.reason())]
    TooLong { addr: IpAddr, len: u8 },
}

impl PrefixError {
    /// What is wrong, without the value: for a caller whose message names the value itself.
    pub fn reason(&self) -> String {
        match self {
            PrefixError::Syntax { reason, .. } => (*reason).to_string(),
            PrefixError::TooLong { addr, .. } => {
                format!("prefix length must be at most {}", Family::of(addr).max_len())
            }
        }
    }
}

/// An address with its prefix length (`10.0.0.2/24`, `2001:db8::a/64`): Go's `netip.Prefix`.
/// The address keeps its host bits (`10.0.0.5/24` is an address on a /24);
/// [`IpPrefix::network`] masks them. Written and read as text, in YAML as everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpPrefix {
    addr: IpAddr,
    bits: u8,
}

impl IpPrefix {
    pub fn new(addr: IpAddr, bits: u8) -> Result<IpPrefix, PrefixError> {
        if bits > Family::of(&addr).max_len() {
            return Err(PrefixError::TooLong { addr, len: bits });
        }
        Ok(IpPrefix { addr, bits })
    }

    /// The address alone, as a full-length prefix (`/32`, `/128`).
    pub fn host(addr: IpAddr) -> IpPrefix {
        IpPrefix { addr, bits: Family::of(&addr).max_len() }
    }

    /// The whole-family prefix `0.0.0.0/0` or `::/0` (a default route's destination).
    pub fn any(family: Family) -> IpPrefix {
        let addr = match family {
            Family::Inet4 => IpAddr::from([0u8; 4]),
            Family::Inet6 => IpAddr::from([0u8; 16]),
        };
        IpPrefix { addr, bits: 0 }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// Whether this is a `/0`.
    pub fn is_empty(&self) -> bool {
        self.bits == 0
    }

    pub fn family(&self) -> Family {
        Family::of(&self.addr)
    }

    /// The same prefix with the host bits cleared (`10.0.0.5/24` → `10.0.0.0/24`).
    pub fn network(&self) -> IpPrefix {
        IpPrefix { addr: mask(self.addr, self.bits), bits: self.bits }
    }

    pub fn contains(&self, ip: &IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && mask(*ip, self.bits) == mask(self.addr, self.bits)
    }
}

fn mask(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

/// Go's `netip.ParsePrefix`: the length in plain decimal, no sign and no leading zero.
impl FromStr for IpPrefix {
    type Err = PrefixError;

    fn from_str(text: &str) -> Result<IpPrefix, PrefixError> {
        let syntax = |reason| PrefixError::Syntax { text: text.to_string(), reason };
        let (addr, bits) = text.split_once('/').ok_or_else(|| syntax("missing /<prefix length>"))?;
        let addr: IpAddr = addr.parse().map_err(|_| syntax("not an IP address"))?;
        if bits.is_empty() || !bits.bytes().all(|b| b.is_ascii_digit()) || (bits.len() > 1 && bits.starts_with('0')) {
            return Err(syntax("bad prefix length"));
        }
        let bits: u8 = bits.parse().map_err(|_| syntax("bad prefix length"))?;
        IpPrefix::new(addr, bits).map_err(|_| syntax("prefix length too long"))
    }
}

impl Serialize for IpPrefix {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for IpPrefix {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_print() {
        let p: IpPrefix = "10.0.0.5/24".parse().unwrap();
        assert_eq!(p.to_string(), "10.0.0.5/24");
        assert_eq!(p.network().to_string(), "10.0.0.0/24");
        assert_eq!(p.family(), Family::Inet4);
        let p: IpPrefix = "fd00::1:2/64".parse().unwrap();
        assert_eq!(p.network().to_string(), "fd00::/64");
        assert_eq!("::1/128".parse::<IpPrefix>().unwrap().network().to_string(), "::1/128");
        assert_eq!("1.2.3.4/0".parse::<IpPrefix>().unwrap().network(), IpPrefix::any(Family::Inet4));
        assert_eq!(IpPrefix::any(Family::Inet6).to_string(), "::/0");
        for bad in ["10.0.0.1", "10.0.0.1/", "10.0.0.1/+8", "10.0.0.1/33", "::/129", "x/8", "10.0.0.1/0008"] {
            assert!(bad.parse::<IpPrefix>().is_err(), "{bad} parsed");
        }
        assert_eq!(
            "10.0.0.1/33".parse::<IpPrefix>(),
            Err(PrefixError::Syntax { text: "10.0.0.1/33".into(), reason: "prefix length too long" })
        );
    }

    #[test]
    fn messages_name_the_prefix() {
        let too_long = IpPrefix::new("10.0.0.1".parse().unwrap(), 33).unwrap_err();
        assert_eq!(too_long.to_string(), "prefix \"10.0.0.1/33\": prefix length must be at most 32");
        assert_eq!(too_long.reason(), "prefix length must be at most 32");
        let missing = "10.0.0.1".parse::<IpPrefix>().unwrap_err();
        assert_eq!(missing.to_string(), "prefix \"10.0.0.1\": missing /<prefix length>");
        assert_eq!("10.0.0.1/08".parse::<IpPrefix>().unwrap_err().reason(), "bad prefix length");
    }
}

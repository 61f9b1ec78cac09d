//! The plain values shared by links, addresses and routes.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

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

/// The scope of an address or route (`rtm_scope`, `ifa_scope`; the numbers are the kernel's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Scope {
    #[default]
    Global,
    Site,
    Link,
    Host,
    Nowhere,
    Other(u8),
}

impl From<u8> for Scope {
    fn from(n: u8) -> Scope {
        match n {
            0 => Scope::Global,
            200 => Scope::Site,
            253 => Scope::Link,
            254 => Scope::Host,
            255 => Scope::Nowhere,
            n => Scope::Other(n),
        }
    }
}

impl From<Scope> for u8 {
    fn from(s: Scope) -> u8 {
        match s {
            Scope::Global => 0,
            Scope::Site => 200,
            Scope::Link => 253,
            Scope::Host => 254,
            Scope::Nowhere => 255,
            Scope::Other(n) => n,
        }
    }
}

/// An IP address with a prefix length, host bits kept (`10.0.0.5/24` is an address on a /24).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("{text:?} is not an address/length prefix")]
    Syntax { text: String },
    #[error("prefix length {len} is longer than {family} allows")]
    TooLong { len: u8, family: Family },
}

/// The resources' prefix holds the same invariant (a length within its family's), so the
/// two convert both ways without a check that could fail (the other way is in
/// `resources::network`).
impl From<&crate::resources::network::IpPrefix> for IpPrefix {
    fn from(p: &crate::resources::network::IpPrefix) -> IpPrefix {
        IpPrefix { addr: p.addr(), len: p.bits() }
    }
}

impl IpPrefix {
    pub fn new(addr: IpAddr, len: u8) -> Result<IpPrefix, PrefixError> {
        let family = Family::of(&addr);
        if len > family.max_len() {
            return Err(PrefixError::TooLong { len, family });
        }
        Ok(IpPrefix { addr, len })
    }

    /// The whole-family prefix `0.0.0.0/0` or `::/0` (a default route's destination).
    pub fn any(family: Family) -> IpPrefix {
        let addr = match family {
            Family::Inet4 => IpAddr::from([0u8; 4]),
            Family::Inet6 => IpAddr::from([0u8; 16]),
        };
        IpPrefix { addr, len: 0 }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether this is a `/0`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn family(&self) -> Family {
        Family::of(&self.addr)
    }

    /// The same prefix with the host bits cleared (`10.0.0.5/24` → `10.0.0.0/24`).
    pub fn network(&self) -> IpPrefix {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                IpAddr::from((u32::from(a) & mask).to_be_bytes())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.len)).unwrap_or(0);
                IpAddr::from((u128::from(a) & mask).to_be_bytes())
            }
        };
        IpPrefix { addr, len: self.len }
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for IpPrefix {
    type Err = PrefixError;

    fn from_str(text: &str) -> Result<IpPrefix, PrefixError> {
        let syntax = || PrefixError::Syntax { text: text.to_string() };
        let (addr, len) = text.split_once('/').ok_or_else(syntax)?;
        let addr: IpAddr = addr.parse().map_err(|_| syntax())?;
        // Only plain decimal: `u8::from_str` would also take "+8".
        if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(syntax());
        }
        IpPrefix::new(addr, len.parse().map_err(|_| syntax())?)
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
        assert_eq!("10.0.0.1/33".parse::<IpPrefix>(), Err(PrefixError::TooLong { len: 33, family: Family::Inet4 }));
    }

    #[test]
    fn scopes_keep_the_kernel_numbers() {
        for (n, s) in
            [(0, Scope::Global), (200, Scope::Site), (253, Scope::Link), (254, Scope::Host), (255, Scope::Nowhere)]
        {
            assert_eq!(Scope::from(n), s);
            assert_eq!(u8::from(s), n);
        }
        assert_eq!(Scope::from(7), Scope::Other(7));
        assert_eq!(u8::from(Scope::Other(7)), 7);
    }
}

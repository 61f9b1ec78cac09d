//! The plain values shared by links, addresses and routes (the family and prefix are the
//! crate's own, in [`crate::types`]).

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

#[cfg(test)]
mod tests {
    use super::*;

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

//! Numbers with names: a kernel value (a family, a scope, a bond mode …) kept as its number,
//! with Talos's names for the values it knows, so whatever the kernel reports passes through
//! unchanged and shows by name where it has one.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};

/// A value in a network resource that is not one its type knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkValueError {
    #[error("{kind}: unknown value {value:?}")]
    Unknown { kind: &'static str, value: String },
    #[error("{kind} {value:?}: {reason}")]
    Invalid { kind: &'static str, value: String, reason: String },
}

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
            /// Every name, in the order declared.
            pub const NAMES: &'static [&'static str] = &[$($text),*];

            /// Talos's name for this value, if it has one.
            pub fn name(self) -> Option<&'static str> {
                $(if self.0 == $value { return Some($text); })*
                None
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => write!(f, "{}", self.0),
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::types::NetworkValueError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $(if s == $text { return Ok($name($value)); })*
                s.parse::<$repr>()
                    .map($name)
                    .map_err(|_| $crate::types::NetworkValueError::Unknown { kind: $kind, value: s.to_string() })
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_any($crate::types::NamedVisitor::<$name>::new($kind))
            }
        }
    };
}

pub(crate) use named_number;

/// Accepts a name (or number as text) through `FromStr`, or a bare number.
pub(crate) struct NamedVisitor<T> {
    kind: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T> NamedVisitor<T> {
    pub(crate) fn new(kind: &'static str) -> Self {
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

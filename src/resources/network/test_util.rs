//! Helpers for tests of the network resources and of what builds them.

use std::net::IpAddr;

use crate::cosi::ResourceSpec;
use crate::types::IpPrefix;

pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub(crate) fn prefix(s: &str) -> IpPrefix {
    s.parse().unwrap()
}

/// What `talosctl get -o yaml` shows, and that it decodes back to the same spec.
pub(crate) fn assert_yaml<T: ResourceSpec>(spec: &T, want: &str) {
    let yaml = crate::cosi::SpecObject::to_yaml(spec).unwrap();
    assert_eq!(yaml, want);
    let back: T = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(&back, spec);
}

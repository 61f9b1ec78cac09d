//! Talos API roles: the `os:`-prefixed strings a client certificate carries as its Subject
//! Organizations, and the sets the authorizer compares.
//!
//! Parsing never fails on a role it does not know: Talos clients of a newer version may carry
//! roles this one has not heard of, so unknown names are handed back for the caller to log and
//! never match any rule.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use super::PkiError;

/// One built-in role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Every API.
    Admin,
    /// Reader plus management that exposes no secrets (reboot, service restart).
    Operator,
    /// Read-only APIs that expose no secrets.
    Reader,
    /// Taking etcd snapshots.
    EtcdBackup,
    /// Verifying images.
    ImageVerifier,
    /// Writing and deleting META values.
    MetaWriter,
    /// Passing another identity's roles in metadata (apid-to-apid forwarding).
    Impersonator,
}

impl Role {
    pub const ALL: [Role; 7] = [
        Role::Admin,
        Role::Operator,
        Role::Reader,
        Role::EtcdBackup,
        Role::ImageVerifier,
        Role::MetaWriter,
        Role::Impersonator,
    ];

    /// The name as it appears in certificates and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "os:admin",
            Role::Operator => "os:operator",
            Role::Reader => "os:reader",
            Role::EtcdBackup => "os:etcd:backup",
            Role::ImageVerifier => "os:image:verifier",
            Role::MetaWriter => "os:meta:writer",
            Role::Impersonator => "os:impersonator",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = PkiError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL.into_iter().find(|r| r.as_str() == s).ok_or_else(|| PkiError::UnknownRole { role: s.to_owned() })
    }
}

// Sets list their roles by name, as Talos sorts them.
impl Ord for Role {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Role {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A set of roles, as held by one caller or allowed by one rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleSet(BTreeSet<Role>);

impl RoleSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses names as found in a certificate's Organizations or a `--roles` flag. Blank
    /// entries are skipped (older Talos client certificates carried one empty Organization);
    /// names this version does not know come back in the second value, in input order.
    pub fn parse<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> (RoleSet, Vec<String>) {
        let mut set = RoleSet::new();
        let mut unknown = Vec::new();
        for name in names {
            let name = name.as_ref().trim();
            if name.is_empty() {
                continue;
            }
            match name.parse::<Role>() {
                Ok(role) => {
                    set.0.insert(role);
                }
                Err(_) => unknown.push(name.to_owned()),
            }
        }
        (set, unknown)
    }

    pub fn insert(&mut self, role: Role) -> bool {
        self.0.insert(role)
    }

    pub fn contains(&self, role: Role) -> bool {
        self.0.contains(&role)
    }

    /// True when the sets share a role; false when either is empty.
    pub fn includes_any(&self, other: &RoleSet) -> bool {
        !self.0.is_disjoint(&other.0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = Role> + '_ {
        self.0.iter().copied()
    }

    /// The names, sorted.
    pub fn strings(&self) -> Vec<&'static str> {
        self.0.iter().map(|r| r.as_str()).collect()
    }
}

impl FromIterator<Role> for RoleSet {
    fn from_iter<I: IntoIterator<Item = Role>>(iter: I) -> Self {
        RoleSet(iter.into_iter().collect())
    }
}

impl<const N: usize> From<[Role; N]> for RoleSet {
    fn from(roles: [Role; N]) -> Self {
        roles.into_iter().collect()
    }
}

impl fmt::Display for RoleSet {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.strings().join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_round_trips_through_its_name() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
            assert!(role.as_str().starts_with("os:"));
        }
        assert!(matches!("os:root".parse::<Role>(), Err(PkiError::UnknownRole { role }) if role == "os:root"));
    }

    #[test]
    fn parse_reports_unknown_roles_apart_and_skips_blanks() {
        let (set, unknown) = RoleSet::parse(["os:reader", " os:etcd:backup ", "", "os:future", "admin"]);
        assert_eq!(set, RoleSet::from([Role::Reader, Role::EtcdBackup]));
        assert_eq!(unknown, ["os:future", "admin"]);
        let (set, unknown) = RoleSet::parse(Vec::<String>::new());
        assert!(set.is_empty() && unknown.is_empty());
    }

    #[test]
    fn includes_any_needs_a_shared_role() {
        let caller = RoleSet::from([Role::Reader]);
        assert!(caller.includes_any(&RoleSet::from([Role::Admin, Role::Operator, Role::Reader])));
        assert!(!caller.includes_any(&RoleSet::from([Role::Admin])));
        assert!(!RoleSet::new().includes_any(&RoleSet::from(Role::ALL)));
        assert!(!caller.includes_any(&RoleSet::new()));
    }

    #[test]
    fn strings_are_sorted_like_talos() {
        let set: RoleSet = Role::ALL.into_iter().collect();
        assert_eq!(
            set.strings(),
            [
                "os:admin",
                "os:etcd:backup",
                "os:image:verifier",
                "os:impersonator",
                "os:meta:writer",
                "os:operator",
                "os:reader"
            ]
        );
        assert_eq!(RoleSet::from([Role::Reader, Role::Admin]).to_string(), "os:admin,os:reader");
    }
}

//! Resource type definitions: the static description every spec type carries, and the names
//! it answers to.
//!
//! Naming follows COSI's rules (`pkg/resource/meta/spec`): a type is `<Plural>.<group>`, its
//! display name is the singular, and it answers to its full name, its plural and singular in
//! lower case, the plural qualified by leading parts of the group (`machinestatuses.runtime`),
//! the abbreviation of its capital letters (`ms`) and the aliases it declares. Pure: nothing
//! here holds state.

use std::fmt;

/// Who may read a resource type through the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sensitivity {
    /// Readable by every authenticated role.
    NonSensitive,
    /// Readable by admins only (keys, tokens, machine configuration).
    Sensitive,
}

impl Sensitivity {
    /// COSI's spelling: empty for non-sensitive, `sensitive` otherwise.
    pub fn as_str(self) -> &'static str {
        match self {
            Sensitivity::NonSensitive => "",
            Sensitivity::Sensitive => "sensitive",
        }
    }
}

/// A column `talosctl get` prints for a type: a header and a JSONPath into the spec
/// (`{.linkName}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrintColumn {
    pub name: &'static str,
    pub json_path: &'static str,
}

/// The static description of a resource type, in Talos's naming
/// (`AddressSpecs.net.talos.dev`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceDefinition {
    pub type_name: &'static str,
    /// Extra names, unique across every registered type.
    pub aliases: &'static [&'static str],
    pub default_namespace: &'static str,
    pub print_columns: &'static [PrintColumn],
    pub sensitivity: Sensitivity,
}

impl fmt::Display for ResourceDefinition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("type {type_name:?}: {reason}")]
    Invalid { type_name: String, reason: &'static str },
}

/// The names a type answers to, computed from its definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeNames {
    /// The singular, as displayed (`MachineStatus`).
    pub display_type: String,
    /// Declared aliases, the lower-case singular and the capital-letter abbreviations, in
    /// COSI's order (`aliases` of a ResourceDefinition).
    pub aliases: Vec<String>,
    /// Every name but the full type: the lower-case plural, the group-qualified plurals, then
    /// `aliases` (`allAliases` of a ResourceDefinition).
    pub all_aliases: Vec<String>,
    /// The subset of `all_aliases` that are derived abbreviations: matched last, and the
    /// ones that may collide between types.
    pub abbreviations: Vec<String>,
}

/// How strongly a name identifies a type, best first. Lookup stops at the first tier that
/// matches anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NameTier {
    /// The full type name, case-insensitively.
    Full,
    /// Plural, singular, group-qualified plural, or a declared alias.
    Name,
    /// A capital-letter abbreviation (`ms`), which types may share.
    Abbreviation,
}

impl TypeNames {
    /// Validates `definition`'s type name and derives its names.
    pub fn of(definition: &ResourceDefinition) -> Result<Self, NameError> {
        let type_name = definition.type_name;
        let invalid = |reason| NameError::Invalid { type_name: type_name.to_string(), reason };
        let (plural, group) = type_name.split_once('.').ok_or(invalid("missing the group suffix (Plural.group)"))?;
        if plural.is_empty() || group.is_empty() {
            return Err(invalid("name and group must not be empty"));
        }
        let mut chars = plural.chars();
        if !chars.next().is_some_and(|c| c.is_ascii_uppercase())
            || !chars.all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(invalid("name must be CamelCase letters and digits"));
        }
        let group_ok = group.split('.').all(|part| {
            let mut c = part.chars();
            c.next().is_some_and(|c| c.is_ascii_lowercase())
                && c.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
        if !group_ok {
            return Err(invalid("group must be dot-separated lower-case words"));
        }
        let display_type = singular(plural).ok_or(invalid("name must be plural"))?;

        let mut aliases: Vec<String> = definition.aliases.iter().map(|a| a.to_ascii_lowercase()).collect();
        aliases.push(display_type.to_ascii_lowercase());
        let capitals: String = plural.chars().filter(char::is_ascii_uppercase).collect();
        let mut abbreviations = Vec::new();
        if capitals.len() > 1 {
            abbreviations.push(capitals.to_ascii_lowercase());
            if !capitals.ends_with('S') {
                abbreviations.push(format!("{}s", capitals.to_ascii_lowercase()));
            }
        }
        aliases.extend(abbreviations.iter().cloned());

        let lower = plural.to_ascii_lowercase();
        let parts: Vec<&str> = group.split('.').collect();
        let mut all_aliases = vec![lower.clone()];
        for i in 1..parts.len() {
            all_aliases.push(format!("{lower}.{}", parts[..i].join(".")));
        }
        all_aliases.extend(aliases.iter().cloned());
        dedup(&mut aliases);
        dedup(&mut all_aliases);
        Ok(TypeNames { display_type, aliases, all_aliases, abbreviations })
    }

    /// How `name` refers to the type named `type_name`, if it does.
    pub fn tier(&self, type_name: &str, name: &str) -> Option<NameTier> {
        let name = name.to_ascii_lowercase();
        if type_name.eq_ignore_ascii_case(&name) {
            Some(NameTier::Full)
        } else if self.abbreviations.contains(&name) {
            Some(NameTier::Abbreviation)
        } else if self.all_aliases.contains(&name) {
            Some(NameTier::Name)
        } else {
            None
        }
    }
}

fn dedup(names: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
}

/// The singular of a CamelCase plural (`MachineStatuses` → `MachineStatus`,
/// `Identities` → `Identity`, `Links` → `Link`); `None` if it does not look plural.
pub fn singular(plural: &str) -> Option<String> {
    let strip = |n: usize| plural[..plural.len() - n].to_string();
    if plural.len() > 3 && plural.ends_with("ies") {
        return Some(format!("{}y", strip(3)));
    }
    for ending in ["sses", "uses", "xes", "ches", "shes", "zes"] {
        if plural.len() > ending.len() && plural.ends_with(ending) {
            return Some(strip(2));
        }
    }
    // Status, Bus, Analysis, Address: singular already.
    if ["us", "is", "ss"].iter().any(|e| plural.ends_with(e)) {
        return None;
    }
    if plural.len() > 1 && plural.ends_with('s') {
        return Some(strip(1));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(type_name: &'static str, aliases: &'static [&'static str]) -> ResourceDefinition {
        ResourceDefinition {
            type_name,
            aliases,
            default_namespace: "test",
            print_columns: &[],
            sensitivity: Sensitivity::NonSensitive,
        }
    }

    #[test]
    fn singulars() {
        let cases = [
            ("MachineStatuses", Some("MachineStatus")),
            ("AddressStatuses", Some("AddressStatus")),
            ("NodeAddresses", Some("NodeAddress")),
            ("Links", Some("Link")),
            ("Identities", Some("Identity")),
            ("Services", Some("Service")),
            ("Namespaces", Some("Namespace")),
            ("Processes", Some("Process")),
            ("Prefixes", Some("Prefix")),
            ("KernelCmdlines", Some("KernelCmdline")),
            ("Status", None),
            ("Address", None),
            ("S", None),
        ];
        for (plural, want) in cases {
            assert_eq!(singular(plural).as_deref(), want, "{plural}");
        }
    }

    #[test]
    fn names_follow_cosi() {
        let n = TypeNames::of(&def("MachineStatuses.runtime.talos.dev", &[])).unwrap();
        assert_eq!(n.display_type, "MachineStatus");
        assert_eq!(n.aliases, ["machinestatus", "ms"]);
        assert_eq!(
            n.all_aliases,
            ["machinestatuses", "machinestatuses.runtime", "machinestatuses.runtime.talos", "machinestatus", "ms"]
        );
        let n = TypeNames::of(&def("KernelCmdlines.runtime.talos.dev", &["cmdline"])).unwrap();
        assert_eq!(n.aliases, ["cmdline", "kernelcmdline", "kc", "kcs"]);
        let n = TypeNames::of(&def("Links.net.talos.dev", &[])).unwrap();
        assert_eq!(n.aliases, ["link"], "one capital letter gives no abbreviation");
        assert!(n.abbreviations.is_empty());
    }

    #[test]
    fn tiers() {
        let d = def("AddressStatuses.net.talos.dev", &["addrs"]);
        let n = TypeNames::of(&d).unwrap();
        let cases = [
            ("AddressStatuses.net.talos.dev", Some(NameTier::Full)),
            ("addressstatuses.NET.talos.dev", Some(NameTier::Full)),
            ("AddressStatuses", Some(NameTier::Name)),
            ("addressstatus", Some(NameTier::Name)),
            ("addressstatuses.net", Some(NameTier::Name)),
            ("addrs", Some(NameTier::Name)),
            ("as", Some(NameTier::Abbreviation)),
            ("addressstatuse", None),
            ("address", None),
            ("addressstatuses.talos", None),
            ("statuse", None),
        ];
        for (name, want) in cases {
            assert_eq!(n.tier(d.type_name, name), want, "{name}");
        }
    }

    #[test]
    fn invalid_type_names() {
        for bad in ["machinestatuses.runtime", "MachineStatuses", "MachineStatus.runtime", "Ms.Runtime", ".x", "Ab-c."]
        {
            assert!(TypeNames::of(&def(bad, &[])).is_err(), "{bad} accepted");
        }
    }
}

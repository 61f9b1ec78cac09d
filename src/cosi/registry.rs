//! The type registry: every resource type and namespace, registered once at startup, looked
//! up by any of its names, and published into the `meta` namespace as COSI's
//! `ResourceDefinitions.meta.cosi.dev` and `Namespaces.meta.cosi.dev` resources, so a client
//! resolves names from an ordinary list.
//!
//! Lookup takes the first tier that matches anything — the full type name, then plural,
//! singular, group-qualified names and declared aliases, then capital-letter abbreviations —
//! and answers "ambiguous" when that tier names more than one type (`as` is both AddressSpecs
//! and AddressStatuses). Declared aliases are unique: registering one that another type
//! already answers to is refused.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::definition::{NameError, NameTier, PrintColumn, ResourceDefinition, Sensitivity, TypeNames};
use super::resource::{Resource, ResourceSpec, ResourceType};
use super::state::{State, StateError};

/// The namespace the registry publishes into.
pub const META_NAMESPACE: &str = "meta";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("type {type_name} is registered twice")]
    Duplicate { type_name: String },
    #[error("type {type_name}: alias {alias:?} is already a name of {other}")]
    AliasTaken { type_name: String, alias: String, other: String },
    #[error("type {type_name}: default namespace {namespace:?} is not registered")]
    UnknownNamespace { type_name: String, namespace: String },
    #[error("namespace {namespace:?} is registered twice")]
    DuplicateNamespace { namespace: String },
    #[error("type {type_name}: print column {column:?}: {reason}")]
    BadColumn { type_name: String, column: String, reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("unknown resource type {name:?}")]
    Unknown { name: String },
    #[error("resource type {name:?} is ambiguous: it names {}; use one of those", candidates.join(", "))]
    Ambiguous { name: String, candidates: Vec<String> },
}

/// One registered type.
#[derive(Debug, Clone)]
pub struct RegisteredType {
    pub resource_type: ResourceType,
    pub names: TypeNames,
}

impl RegisteredType {
    pub fn definition(&self) -> &'static ResourceDefinition {
        self.resource_type.definition()
    }

    pub fn type_name(&self) -> &'static str {
        self.resource_type.type_name()
    }

    /// The `ResourceDefinitions.meta.cosi.dev` spec describing this type.
    pub fn spec(&self) -> ResourceDefinitionSpec {
        let d = self.definition();
        ResourceDefinitionSpec {
            type_name: d.type_name.to_string(),
            display_type: self.names.display_type.clone(),
            default_namespace: d.default_namespace.to_string(),
            aliases: self.names.aliases.clone(),
            all_aliases: self.names.all_aliases.clone(),
            print_columns: d
                .print_columns
                .iter()
                .map(|c| PrintColumnSpec { name: c.name.to_string(), json_path: c.json_path.to_string() })
                .collect(),
            sensitivity: d.sensitivity.as_str().to_string(),
        }
    }
}

/// Picks the type `name` refers to among `types` (each its full name and every other name it
/// answers to), by tier. The API side resolves with this over the published definitions,
/// so a name means the same on both sides.
pub fn resolve<'a>(
    types: impl IntoIterator<Item = (&'a str, &'a [String])>,
    name: &str,
) -> Result<&'a str, LookupError> {
    let mut best: Option<(NameTier, Vec<&'a str>)> = None;
    for (type_name, all_aliases) in types {
        let names = TypeNames::from_published(type_name, all_aliases);
        let Some(tier) = names.tier(type_name, name) else { continue };
        match &mut best {
            Some((t, found)) if *t == tier => found.push(type_name),
            Some((t, _)) if *t < tier => {}
            _ => best = Some((tier, vec![type_name])),
        }
    }
    match best {
        None => Err(LookupError::Unknown { name: name.to_string() }),
        Some((_, found)) if found.len() == 1 => Ok(found[0]),
        Some((_, mut found)) => {
            found.sort_unstable();
            Err(LookupError::Ambiguous {
                name: name.to_string(),
                candidates: found.iter().map(|s| s.to_string()).collect(),
            })
        }
    }
}

impl TypeNames {
    /// The names of a published definition: its `allAliases`, with the abbreviations derived
    /// from the type name told apart.
    fn from_published(type_name: &str, all_aliases: &[String]) -> TypeNames {
        let plural = type_name.split('.').next().unwrap_or(type_name);
        let capitals: String = plural.chars().filter(char::is_ascii_uppercase).collect::<String>().to_ascii_lowercase();
        let abbreviations = all_aliases
            .iter()
            .filter(|a| capitals.len() > 1 && (**a == capitals || **a == format!("{capitals}s")))
            .cloned()
            .collect();
        TypeNames { display_type: String::new(), aliases: Vec::new(), all_aliases: all_aliases.to_vec(), abbreviations }
    }
}

/// Every type and namespace of a node (or of a test).
#[derive(Debug, Clone)]
pub struct Registry {
    types: BTreeMap<&'static str, RegisteredType>,
    namespaces: BTreeMap<String, String>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// A registry holding the meta namespace and its two types.
    pub fn new() -> Self {
        let mut r = Registry { types: BTreeMap::new(), namespaces: BTreeMap::new() };
        // Fixed, valid definitions: these cannot fail.
        let _ =
            r.add_namespace(META_NAMESPACE, "Metadata namespace which contains resource and namespace definitions.");
        let _ = r.register::<ResourceDefinitionSpec>();
        let _ = r.register::<NamespaceSpec>();
        r
    }

    pub fn add_namespace(&mut self, name: &str, description: &str) -> Result<(), RegistryError> {
        if self.namespaces.insert(name.to_string(), description.to_string()).is_some() {
            return Err(RegistryError::DuplicateNamespace { namespace: name.to_string() });
        }
        Ok(())
    }

    pub fn register<T: ResourceSpec>(&mut self) -> Result<(), RegistryError> {
        self.register_type(ResourceType::of::<T>())
    }

    pub fn register_type(&mut self, resource_type: ResourceType) -> Result<(), RegistryError> {
        let d = resource_type.definition();
        let type_name = d.type_name;
        if self.types.contains_key(type_name) {
            return Err(RegistryError::Duplicate { type_name: type_name.to_string() });
        }
        if !self.namespaces.contains_key(d.default_namespace) {
            return Err(RegistryError::UnknownNamespace {
                type_name: type_name.to_string(),
                namespace: d.default_namespace.to_string(),
            });
        }
        for c in d.print_columns {
            super::jsonpath::JsonPath::parse(c.json_path).map_err(|e| RegistryError::BadColumn {
                type_name: type_name.to_string(),
                column: c.name.to_string(),
                reason: e.reason,
            })?;
        }
        let names = TypeNames::of(d)?;
        for other in self.types.values() {
            // A declared alias may shadow another type's capital-letter abbreviation: lookup
            // prefers it (Talos's `ns` is Namespaces, though NetworkStatuses abbreviates to it).
            let taken = |names: &TypeNames, type_name: &str, alias: &str| {
                names.tier(type_name, alias).is_some_and(|t| t != NameTier::Abbreviation)
            };
            for alias in d.aliases {
                if taken(&other.names, other.type_name(), alias) {
                    return Err(RegistryError::AliasTaken {
                        type_name: type_name.to_string(),
                        alias: alias.to_string(),
                        other: other.type_name().to_string(),
                    });
                }
            }
            for alias in other.definition().aliases {
                if taken(&names, type_name, alias) {
                    return Err(RegistryError::AliasTaken {
                        type_name: type_name.to_string(),
                        alias: alias.to_string(),
                        other: other.type_name().to_string(),
                    });
                }
            }
        }
        self.types.insert(type_name, RegisteredType { resource_type, names });
        Ok(())
    }

    /// The type registered under exactly this full name.
    pub fn get(&self, type_name: &str) -> Option<&RegisteredType> {
        self.types.get(type_name)
    }

    pub fn contains_namespace(&self, namespace: &str) -> bool {
        self.namespaces.contains_key(namespace)
    }

    /// The type `name` refers to, by any of its names.
    pub fn resolve(&self, name: &str) -> Result<&RegisteredType, LookupError> {
        let found = resolve(self.types.values().map(|t| (t.type_name(), t.names.all_aliases.as_slice())), name)?;
        self.types.get(found).ok_or_else(|| LookupError::Unknown { name: name.to_string() })
    }

    pub fn types(&self) -> impl Iterator<Item = &RegisteredType> {
        self.types.values()
    }

    pub fn namespaces(&self) -> impl Iterator<Item = (&str, &str)> {
        self.namespaces.iter().map(|(n, d)| (n.as_str(), d.as_str()))
    }

    /// Writes every definition and namespace into the `meta` namespace of `state`.
    pub fn publish(&self, state: &State) -> Result<(), StateError> {
        for t in self.types.values() {
            let id = t.type_name().to_ascii_lowercase();
            put(state, &id, t.spec())?;
        }
        for (name, description) in &self.namespaces {
            put(state, name, NamespaceSpec { description: description.clone() })?;
        }
        Ok(())
    }
}

fn put<T: ResourceSpec>(state: &State, id: &str, spec: T) -> Result<(), StateError> {
    match state.find::<T>(META_NAMESPACE, id)? {
        None => state.create(Resource::new(META_NAMESPACE, id, spec), "").map(drop),
        Some(current) if *current.spec() == spec => Ok(()),
        Some(current) => state.update(current.with_spec(spec), "").map(drop),
    }
}

/// A print column of a published definition.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, prost::Message)]
#[serde(rename_all = "camelCase")]
pub struct PrintColumnSpec {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub json_path: String,
}

/// COSI's `ResourceDefinitionSpec`: one registered type, id = its full name in lower case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceDefinitionSpec {
    #[serde(rename = "type")]
    pub type_name: String,
    pub display_type: String,
    pub default_namespace: String,
    pub aliases: Vec<String>,
    pub all_aliases: Vec<String>,
    pub print_columns: Vec<PrintColumnSpec>,
    /// Empty or `sensitive`; on the protobuf wire the enum NON_SENSITIVE = 0, SENSITIVE = 1.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sensitivity: String,
}

/// The protobuf face of [`ResourceDefinitionSpec`], with the sensitivity as its enum.
#[derive(Clone, PartialEq, prost::Message)]
struct ResourceDefinitionWire {
    #[prost(string, tag = "1")]
    resource_type: String,
    #[prost(string, tag = "2")]
    display_type: String,
    #[prost(string, tag = "3")]
    default_namespace: String,
    #[prost(string, repeated, tag = "4")]
    aliases: Vec<String>,
    #[prost(string, repeated, tag = "5")]
    all_aliases: Vec<String>,
    #[prost(message, repeated, tag = "6")]
    print_columns: Vec<PrintColumnSpec>,
    #[prost(int32, tag = "7")]
    sensitivity: i32,
}

impl ResourceSpec for ResourceDefinitionSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "ResourceDefinitions.meta.cosi.dev",
        aliases: &["api-resources"],
        default_namespace: META_NAMESPACE,
        print_columns: &[PrintColumn { name: "Aliases", json_path: "{.aliases[:]}" }],
        sensitivity: Sensitivity::NonSensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        let wire = ResourceDefinitionWire {
            resource_type: self.type_name.clone(),
            display_type: self.display_type.clone(),
            default_namespace: self.default_namespace.clone(),
            aliases: self.aliases.clone(),
            all_aliases: self.all_aliases.clone(),
            print_columns: self.print_columns.clone(),
            sensitivity: i32::from(self.sensitivity == Sensitivity::Sensitive.as_str()),
        };
        Some(prost::Message::encode_to_vec(&wire))
    }
}

/// COSI's `NamespaceSpec`, id = the namespace.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, prost::Message)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSpec {
    #[prost(string, tag = "1")]
    pub description: String,
}

impl ResourceSpec for NamespaceSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Namespaces.meta.cosi.dev",
        aliases: &["ns"],
        default_namespace: META_NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        Some(prost::Message::encode_to_vec(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! spec {
        ($name:ident, $type_name:literal, $aliases:expr, $sensitivity:ident) => {
            #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
            struct $name;
            impl ResourceSpec for $name {
                const DEFINITION: ResourceDefinition = ResourceDefinition {
                    type_name: $type_name,
                    aliases: $aliases,
                    default_namespace: "network",
                    print_columns: &[],
                    sensitivity: Sensitivity::$sensitivity,
                };
            }
        };
    }

    spec!(AddressSpec, "AddressSpecs.net.talos.dev", &[], NonSensitive);
    spec!(AddressStatus, "AddressStatuses.net.talos.dev", &["addrs"], NonSensitive);
    spec!(MachineStatus, "MachineStatuses.runtime.talos.dev", &[], NonSensitive);
    spec!(Route, "RouteStatuses.net.talos.dev", &["route"], NonSensitive);
    spec!(Clash, "ClashSpecs.net.talos.dev", &["addressspec"], NonSensitive);
    spec!(Clash2, "OtherSpecs.net.talos.dev", &["addrs"], NonSensitive);

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.add_namespace("network", "").unwrap();
        r.register::<AddressSpec>().unwrap();
        r.register::<AddressStatus>().unwrap();
        r.register::<MachineStatus>().unwrap();
        r.register::<Route>().unwrap();
        r
    }

    #[test]
    fn lookup_by_every_cosi_name() {
        let r = registry();
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("AddressStatuses.net.talos.dev", Ok("AddressStatuses.net.talos.dev")),
            ("addressstatuses", Ok("AddressStatuses.net.talos.dev")),
            ("AddressStatus", Ok("AddressStatuses.net.talos.dev")),
            ("addressstatuses.net", Ok("AddressStatuses.net.talos.dev")),
            ("addrs", Ok("AddressStatuses.net.talos.dev")),
            ("ms", Ok("MachineStatuses.runtime.talos.dev")),
            ("machinestatuses.runtime", Ok("MachineStatuses.runtime.talos.dev")),
            ("route", Ok("RouteStatuses.net.talos.dev")),
            ("rd", Ok("ResourceDefinitions.meta.cosi.dev")),
            ("api-resources", Ok("ResourceDefinitions.meta.cosi.dev")),
            ("ns", Ok("Namespaces.meta.cosi.dev")),
            ("as", Err("ambiguous")),
            ("rout", Err("unknown")),
            ("statuse", Err("unknown")),
            ("machinestatuses.talos", Err("unknown")),
        ];
        for (name, want) in cases {
            match (r.resolve(name), want) {
                (Ok(t), Ok(w)) => assert_eq!(t.type_name(), *w, "{name}"),
                (Err(LookupError::Ambiguous { candidates, .. }), Err("ambiguous")) => {
                    assert_eq!(candidates, &["AddressSpecs.net.talos.dev", "AddressStatuses.net.talos.dev"])
                }
                (Err(LookupError::Unknown { .. }), Err("unknown")) => {}
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
        let err = r.resolve("as").unwrap_err().to_string();
        assert_eq!(
            err,
            "resource type \"as\" is ambiguous: it names AddressSpecs.net.talos.dev, AddressStatuses.net.talos.dev; use one of those"
        );
    }

    #[test]
    fn declared_aliases_must_be_unique() {
        let mut r = registry();
        assert!(
            matches!(r.register::<Clash>(), Err(RegistryError::AliasTaken { alias, .. }) if alias == "addressspec")
        );
        assert!(matches!(r.register::<Clash2>(), Err(RegistryError::AliasTaken { alias, .. }) if alias == "addrs"));
        assert!(matches!(r.register::<AddressSpec>(), Err(RegistryError::Duplicate { .. })));
        let mut bare = Registry::new();
        assert!(matches!(bare.register::<AddressSpec>(), Err(RegistryError::UnknownNamespace { .. })));
    }

    #[test]
    fn published_definitions_resolve_the_same() {
        let r = registry();
        let state = State::in_memory();
        r.publish(&state).unwrap();
        let rds = state.list::<ResourceDefinitionSpec>(META_NAMESPACE);
        assert_eq!(rds.len(), r.types().count());
        let ids: Vec<&str> = rds.iter().map(|d| d.id()).collect();
        assert!(ids.contains(&"addressstatuses.net.talos.dev"), "{ids:?}");
        for name in ["addrs", "ms", "as", "rout", "ns"] {
            let published =
                resolve(rds.iter().map(|d| (d.spec().type_name.as_str(), d.spec().all_aliases.as_slice())), name);
            assert_eq!(published, r.resolve(name).map(|t| t.type_name()), "{name}");
        }
        let ns = state.list::<NamespaceSpec>(META_NAMESPACE);
        assert_eq!(ns.iter().map(|n| n.id()).collect::<Vec<_>>(), ["meta", "network"]);
        // Publishing again changes nothing.
        let version = rds[0].version();
        r.publish(&state).unwrap();
        assert_eq!(state.list::<ResourceDefinitionSpec>(META_NAMESPACE)[0].version(), version);
    }

    #[test]
    fn definition_spec_codecs() {
        let r = registry();
        let spec = r.get("ResourceDefinitions.meta.cosi.dev").unwrap().spec();
        let yaml = crate::cosi::SpecObject::to_yaml(&spec).unwrap();
        assert_eq!(
            yaml,
            "type: ResourceDefinitions.meta.cosi.dev\ndisplayType: ResourceDefinition\ndefaultNamespace: meta\n\
             aliases:\n- api-resources\n- resourcedefinition\n- rd\n- rds\nallAliases:\n- resourcedefinitions\n\
             - resourcedefinitions.meta\n- resourcedefinitions.meta.cosi\n- api-resources\n- resourcedefinition\n\
             - rd\n- rds\nprintColumns:\n- name: Aliases\n  jsonPath: \"{.aliases[:]}\"\n"
        );
        let proto = ResourceSpec::to_proto(&spec).unwrap();
        let wire = <ResourceDefinitionWire as prost::Message>::decode(proto.as_slice()).unwrap();
        assert_eq!(wire.resource_type, "ResourceDefinitions.meta.cosi.dev");
        assert_eq!(wire.print_columns[0].json_path, "{.aliases[:]}");
        assert_eq!(wire.sensitivity, 0);
    }
}

//! Resources: metadata plus a typed spec, and the definitions that name each type.
//!
//! A spec type says who it is through [`ResourceSpec`]; the state stores specs type-erased
//! ([`AnyResource`]) and hands them back typed ([`Resource`]). Nothing here does I/O.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

/// Whether a resource is alive or on its way out (waiting for finalizers to be released).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    Running,
    TearingDown,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Running => "running",
            Phase::TearingDown => "tearingDown",
        })
    }
}

/// Who may read a resource type through the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sensitivity {
    /// Readable by every authenticated role.
    NonSensitive,
    /// Readable by admins only (keys, tokens, certificates' private halves).
    Sensitive,
}

/// A column `talosctl get` prints for a type: a header and a dotted path into the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrintColumn {
    pub name: &'static str,
    pub path: &'static str,
}

/// The static description of a resource type, in Talos's naming
/// (`AddressSpecs.net.talos.dev`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceDefinition {
    pub type_name: &'static str,
    pub aliases: &'static [&'static str],
    pub default_namespace: &'static str,
    pub print_columns: &'static [PrintColumn],
    pub sensitivity: Sensitivity,
}

impl ResourceDefinition {
    /// Whether `name` refers to this type: its full name, its short name (before the first
    /// dot, singular or plural) or one of its aliases, case-insensitively.
    pub fn matches(&self, name: &str) -> bool {
        let full = self.type_name;
        let short = full.split('.').next().unwrap_or(full);
        // Plural forms in Talos are `Addresses`, `MachineStatuses`, `Links`.
        let singular_s = short.strip_suffix('s').unwrap_or(short);
        let singular_es = short.strip_suffix("es").unwrap_or(short);
        [full, short, singular_s, singular_es]
            .into_iter()
            .chain(self.aliases.iter().copied())
            .any(|candidate| candidate.eq_ignore_ascii_case(name))
    }
}

/// A typed spec the state can hold.
pub trait ResourceSpec: Any + Clone + fmt::Debug + PartialEq + Serialize + Send + Sync + 'static {
    const DEFINITION: ResourceDefinition;
}

/// Object-safe face of a spec, for type-erased storage.
pub trait SpecObject: Any + fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn into_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    fn eq_dyn(&self, other: &dyn SpecObject) -> bool;
    fn to_json(&self) -> serde_json::Value;
    fn definition(&self) -> &'static ResourceDefinition;
}

impl<T: ResourceSpec> SpecObject for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn eq_dyn(&self, other: &dyn SpecObject) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn to_json(&self) -> serde_json::Value {
        // Specs are plain data; a spec that cannot serialize is shown as null rather than
        // failing a listing.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    fn definition(&self) -> &'static ResourceDefinition {
        &T::DEFINITION
    }
}

/// Identity and bookkeeping of one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub namespace: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub id: String,
    /// Bumped on every write, starting at 1.
    pub version: u64,
    /// The controller that wrote it; empty for resources written from outside (API, tests).
    pub owner: String,
    pub phase: Phase,
    pub finalizers: BTreeSet<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    #[serde(with = "unix_time")]
    pub created: SystemTime,
    #[serde(with = "unix_time")]
    pub updated: SystemTime,
}

impl Metadata {
    pub fn new(namespace: impl Into<String>, type_name: impl Into<String>, id: impl Into<String>) -> Self {
        let now = SystemTime::now();
        Metadata {
            namespace: namespace.into(),
            type_name: type_name.into(),
            id: id.into(),
            version: 0,
            owner: String::new(),
            phase: Phase::Running,
            finalizers: BTreeSet::new(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            created: now,
            updated: now,
        }
    }

    /// `namespace/type/id`, for messages.
    pub fn reference(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.type_name, self.id)
    }
}

mod unix_time {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        s.serialize_f64(secs)
    }
}

/// A resource as the state stores it: metadata and a type-erased, shared spec.
#[derive(Debug, Clone)]
pub struct AnyResource {
    pub metadata: Metadata,
    pub spec: Arc<dyn SpecObject>,
}

impl AnyResource {
    pub fn new<T: ResourceSpec>(namespace: impl Into<String>, id: impl Into<String>, spec: T) -> Self {
        AnyResource { metadata: Metadata::new(namespace, T::DEFINITION.type_name, id), spec: Arc::new(spec) }
    }
}

/// A typed resource: shared metadata and a shared, read-only spec. Cloning is two reference
/// counts; reading one from the state copies nothing.
#[derive(Debug, Clone)]
pub struct Resource<T> {
    any: Arc<AnyResource>,
    spec: Arc<T>,
}

impl<T: ResourceSpec> Resource<T> {
    pub fn new(namespace: impl Into<String>, id: impl Into<String>, spec: T) -> Self {
        let spec = Arc::new(spec);
        let any = AnyResource { metadata: Metadata::new(namespace, T::DEFINITION.type_name, id), spec: spec.clone() };
        Resource { any: Arc::new(any), spec }
    }

    /// The typed view of a stored resource, if its spec is a `T`.
    pub fn from_any(any: &Arc<AnyResource>) -> Option<Self> {
        let spec = Arc::clone(&any.spec).into_any_arc().downcast::<T>().ok()?;
        Some(Resource { any: Arc::clone(any), spec })
    }

    pub fn metadata(&self) -> &Metadata {
        &self.any.metadata
    }

    pub fn spec(&self) -> &T {
        &self.spec
    }

    pub fn id(&self) -> &str {
        &self.any.metadata.id
    }

    pub fn version(&self) -> u64 {
        self.any.metadata.version
    }

    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.any).metadata.labels.insert(key.into(), value.into());
        self
    }

    pub fn with_annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.any).metadata.annotations.insert(key.into(), value.into());
        self
    }

    /// The same identity and version with a new spec, ready for an update.
    pub fn with_spec(&self, spec: T) -> Self {
        let spec = Arc::new(spec);
        let mut any = AnyResource::clone(&self.any);
        any.spec = spec.clone();
        Resource { any: Arc::new(any), spec }
    }

    pub fn as_any(&self) -> &Arc<AnyResource> {
        &self.any
    }

    pub fn into_any(self) -> AnyResource {
        Arc::unwrap_or_clone(self.any)
    }
}

impl<T: PartialEq> PartialEq for Resource<T> {
    fn eq(&self, other: &Self) -> bool {
        self.any.metadata == other.any.metadata && self.spec == other.spec
    }
}

/// Selects resources by their labels; every term must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelQuery {
    pub terms: Vec<LabelTerm>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelTerm {
    Exists(String),
    NotExists(String),
    Equal(String, String),
    NotEqual(String, String),
    In(String, Vec<String>),
}

impl LabelQuery {
    pub fn all() -> Self {
        LabelQuery::default()
    }

    pub fn with(mut self, term: LabelTerm) -> Self {
        self.terms.push(term);
        self
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|term| match term {
            LabelTerm::Exists(k) => labels.contains_key(k),
            LabelTerm::NotExists(k) => !labels.contains_key(k),
            LabelTerm::Equal(k, v) => labels.get(k) == Some(v),
            LabelTerm::NotEqual(k, v) => labels.get(k) != Some(v),
            LabelTerm::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize)]
    struct Probe {
        n: u32,
    }

    impl ResourceSpec for Probe {
        const DEFINITION: ResourceDefinition = ResourceDefinition {
            type_name: "ProbeSpecs.test.talos.dev",
            aliases: &["probe"],
            default_namespace: "test",
            print_columns: &[PrintColumn { name: "N", path: "n" }],
            sensitivity: Sensitivity::NonSensitive,
        };
    }

    #[test]
    fn definition_matches_names_and_aliases() {
        let d = Probe::DEFINITION;
        for name in ["ProbeSpecs.test.talos.dev", "probespecs", "ProbeSpec", "probe"] {
            assert!(d.matches(name), "{name} should match");
        }
        let statuses = ResourceDefinition { type_name: "MachineStatuses.runtime.talos.dev", ..d };
        for name in ["machinestatuses", "MachineStatus"] {
            assert!(statuses.matches(name), "{name} should match");
        }
        assert!(!d.matches("probes.other"));
    }

    #[test]
    fn typed_view_downcasts_only_to_its_own_type() {
        let any = Arc::new(AnyResource::new("test", "a", Probe { n: 3 }));
        assert_eq!(Resource::<Probe>::from_any(&any).map(|r| r.spec().n), Some(3));
        #[derive(Debug, Clone, PartialEq, Serialize)]
        struct Other;
        impl ResourceSpec for Other {
            const DEFINITION: ResourceDefinition = ResourceDefinition {
                type_name: "Others.test.talos.dev",
                aliases: &[],
                default_namespace: "test",
                print_columns: &[],
                sensitivity: Sensitivity::Sensitive,
            };
        }
        assert!(Resource::<Other>::from_any(&any).is_none());
        assert!(any.spec.eq_dyn(&Probe { n: 3 }));
        assert!(!any.spec.eq_dyn(&Probe { n: 4 }));
    }

    #[test]
    fn label_queries() {
        let labels: BTreeMap<String, String> =
            [("role".to_string(), "cp".to_string()), ("zone".to_string(), "a".to_string())].into();
        let cases: &[(LabelQuery, bool)] = &[
            (LabelQuery::all(), true),
            (LabelQuery::all().with(LabelTerm::Exists("role".into())), true),
            (LabelQuery::all().with(LabelTerm::NotExists("role".into())), false),
            (LabelQuery::all().with(LabelTerm::Equal("role".into(), "cp".into())), true),
            (LabelQuery::all().with(LabelTerm::NotEqual("role".into(), "cp".into())), false),
            (LabelQuery::all().with(LabelTerm::In("zone".into(), vec!["b".into(), "a".into()])), true),
            (
                LabelQuery::all()
                    .with(LabelTerm::Exists("role".into()))
                    .with(LabelTerm::Equal("zone".into(), "b".into())),
                false,
            ),
        ];
        for (i, (q, want)) in cases.iter().enumerate() {
            assert_eq!(q.matches(&labels), *want, "case {i}: {q:?}");
        }
    }
}

//! Resources: metadata plus a typed spec, and the codecs that carry a spec over the wire.
//!
//! A spec type says who it is through [`ResourceSpec`]; the state stores specs type-erased
//! ([`AnyResource`]) and hands them back typed ([`Resource`]). [`ResourceType`] is the
//! type-erased handle controllers declare and the registry keeps: the definition plus the
//! spec's decoder. Nothing here does I/O.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use super::definition::{PrintColumn, ResourceDefinition, Sensitivity};
use super::timestamp;

/// Whether a resource is alive or on its way out (waiting for finalizers to be released).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

impl std::str::FromStr for Phase {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "running" => Ok(Phase::Running),
            "tearingDown" => Ok(Phase::TearingDown),
            other => Err(format!("unknown phase {other:?} (running, tearingDown)")),
        }
    }
}

/// A spec failed to encode or decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{type_name}: {format} {action}: {message}")]
pub struct CodecError {
    pub type_name: String,
    pub format: &'static str,
    pub action: &'static str,
    pub message: String,
}

/// A typed spec the state can hold. Specs are plain data with a YAML face (what Talos sends
/// as `yaml_spec`); types with a protobuf message of their own also give `proto_spec`.
pub trait ResourceSpec:
    Any + Clone + fmt::Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static
{
    const DEFINITION: ResourceDefinition;

    /// The spec as its protobuf message (`proto_spec`), for types that have one.
    fn to_proto(&self) -> Option<Vec<u8>> {
        None
    }

    /// The spec's YAML when the spec is a YAML text of its own (the machine configuration:
    /// its documents, as Talos shows them), instead of the serialized fields.
    fn yaml_text(&self) -> Option<String> {
        None
    }

    /// Whether resource `id` of this type is readable by admins only although the type is
    /// not `Sensitive` (a META key whose tag may hold a secret). A `Sensitive` type is so
    /// whole, whatever this says.
    fn sensitive_id(_id: &str) -> bool {
        false
    }
}

/// Object-safe face of a spec, for type-erased storage and the API.
pub trait SpecObject: Any + fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn into_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    fn eq_dyn(&self, other: &dyn SpecObject) -> bool;
    fn definition(&self) -> &'static ResourceDefinition;
    fn to_yaml(&self) -> Result<String, CodecError>;
    fn to_json(&self) -> Result<serde_json::Value, CodecError>;
    fn to_proto(&self) -> Option<Vec<u8>>;
}

fn codec_error(type_name: &str, format: &'static str, action: &'static str, e: impl fmt::Display) -> CodecError {
    CodecError { type_name: type_name.to_string(), format, action, message: e.to_string() }
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

    fn definition(&self) -> &'static ResourceDefinition {
        &T::DEFINITION
    }

    fn to_yaml(&self) -> Result<String, CodecError> {
        if let Some(text) = self.yaml_text() {
            return Ok(text);
        }
        serde_saphyr::to_string(self).map_err(|e| codec_error(T::DEFINITION.type_name, "yaml", "encoding", e))
    }

    fn to_json(&self) -> Result<serde_json::Value, CodecError> {
        serde_json::to_value(self).map_err(|e| codec_error(T::DEFINITION.type_name, "json", "encoding", e))
    }

    fn to_proto(&self) -> Option<Vec<u8>> {
        ResourceSpec::to_proto(self)
    }
}

type Decoder = fn(&str) -> Result<Arc<dyn SpecObject>, CodecError>;

fn decode_yaml<T: ResourceSpec>(text: &str) -> Result<Arc<dyn SpecObject>, CodecError> {
    serde_saphyr::from_str::<T>(text)
        .map(|spec| Arc::new(spec) as Arc<dyn SpecObject>)
        .map_err(|e| codec_error(T::DEFINITION.type_name, "yaml", "decoding", e))
}

/// A resource type, erased: its definition and its spec's decoder. What inputs, outputs and
/// the registry carry instead of a bare type name.
#[derive(Clone, Copy)]
pub struct ResourceType {
    definition: &'static ResourceDefinition,
    decode_yaml: Decoder,
    sensitive_id: fn(&str) -> bool,
}

impl ResourceType {
    pub fn of<T: ResourceSpec>() -> Self {
        ResourceType { definition: &T::DEFINITION, decode_yaml: decode_yaml::<T>, sensitive_id: T::sensitive_id }
    }

    /// Whether resource `id` of this type is for admins only: the whole type is `Sensitive`,
    /// or the type says this one is ([`ResourceSpec::sensitive_id`]).
    pub fn is_sensitive(&self, id: &str) -> bool {
        self.definition.sensitivity == Sensitivity::Sensitive || (self.sensitive_id)(id)
    }

    /// The test of [`ResourceSpec::sensitive_id`] for this type, for a watch to hide by.
    pub fn sensitive_ids(&self) -> fn(&str) -> bool {
        self.sensitive_id
    }

    pub fn definition(&self) -> &'static ResourceDefinition {
        self.definition
    }

    pub fn type_name(&self) -> &'static str {
        self.definition.type_name
    }

    /// Decodes a spec of this type from YAML (what `yaml_spec` carries).
    pub fn decode_yaml(&self, text: &str) -> Result<Arc<dyn SpecObject>, CodecError> {
        (self.decode_yaml)(text)
    }
}

impl PartialEq for ResourceType {
    fn eq(&self, other: &Self) -> bool {
        self.type_name() == other.type_name()
    }
}

impl Eq for ResourceType {}

impl PartialOrd for ResourceType {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ResourceType {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.type_name().cmp(other.type_name())
    }
}

impl std::hash::Hash for ResourceType {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.type_name().hash(state)
    }
}

impl fmt::Debug for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())
    }
}

/// Identity and bookkeeping of one resource, with COSI's wire shape: `version` is a string on
/// the protobuf wire and a plain scalar in YAML, times are RFC 3339, and labels, annotations
/// and finalizers are left out when empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub namespace: String,
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
    pub created: SystemTime,
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

impl Serialize for Metadata {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("namespace", &self.namespace)?;
        m.serialize_entry("type", &self.type_name)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("version", &self.version)?;
        m.serialize_entry("owner", &self.owner)?;
        m.serialize_entry("phase", &self.phase)?;
        m.serialize_entry("created", &timestamp::format(self.created))?;
        m.serialize_entry("updated", &timestamp::format(self.updated))?;
        if !self.labels.is_empty() {
            m.serialize_entry("labels", &self.labels)?;
        }
        if !self.annotations.is_empty() {
            m.serialize_entry("annotations", &self.annotations)?;
        }
        if !self.finalizers.is_empty() {
            m.serialize_entry("finalizers", &self.finalizers)?;
        }
        m.end()
    }
}

/// A version as either a number or its decimal string.
#[derive(Deserialize)]
#[serde(untagged)]
enum WireVersion {
    Number(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMetadata {
    namespace: String,
    #[serde(rename = "type")]
    type_name: String,
    id: String,
    version: WireVersion,
    #[serde(default)]
    owner: String,
    phase: Phase,
    created: String,
    updated: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    finalizers: BTreeSet<String>,
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let w = WireMetadata::deserialize(d)?;
        let version = match w.version {
            WireVersion::Number(n) => n,
            WireVersion::Text(t) if t == "undefined" => 0,
            WireVersion::Text(t) => {
                t.parse().map_err(|_| D::Error::custom(format!("version {t:?} is not a number")))?
            }
        };
        Ok(Metadata {
            namespace: w.namespace,
            type_name: w.type_name,
            id: w.id,
            version,
            owner: w.owner,
            phase: w.phase,
            finalizers: w.finalizers,
            labels: w.labels,
            annotations: w.annotations,
            created: timestamp::parse(&w.created).map_err(D::Error::custom)?,
            updated: timestamp::parse(&w.updated).map_err(D::Error::custom)?,
        })
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

    pub fn phase(&self) -> Phase {
        self.any.metadata.phase
    }

    pub fn is_running(&self) -> bool {
        self.any.metadata.phase == Phase::Running
    }

    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.any).metadata.labels.insert(key.into(), value.into());
        self
    }

    pub fn with_labels(mut self, labels: BTreeMap<String, String>) -> Self {
        Arc::make_mut(&mut self.any).metadata.labels = labels;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        link_name: String,
        mtu: u32,
    }

    impl ResourceSpec for Probe {
        const DEFINITION: ResourceDefinition = ResourceDefinition {
            type_name: "ProbeSpecs.test.talos.dev",
            aliases: &["probe"],
            default_namespace: "test",
            print_columns: &[PrintColumn { name: "MTU", json_path: "{.mtu}" }],
            sensitivity: Sensitivity::NonSensitive,
        };
    }

    #[test]
    fn typed_view_downcasts_only_to_its_own_type() {
        let any = Arc::new(AnyResource::new("test", "a", Probe { link_name: "eth0".into(), mtu: 3 }));
        assert_eq!(Resource::<Probe>::from_any(&any).map(|r| r.spec().mtu), Some(3));
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
        assert!(any.spec.eq_dyn(&Probe { link_name: "eth0".into(), mtu: 3 }));
        assert!(!any.spec.eq_dyn(&Probe { link_name: "eth0".into(), mtu: 4 }));
    }

    #[test]
    fn spec_codecs_round_trip() {
        let spec = Probe { link_name: "eth0".into(), mtu: 3 };
        let yaml = SpecObject::to_yaml(&spec).unwrap();
        assert_eq!(yaml, "linkName: eth0\nmtu: 3\n");
        let back = ResourceType::of::<Probe>().decode_yaml(&yaml).unwrap();
        assert!(back.eq_dyn(&spec));
        let err = ResourceType::of::<Probe>().decode_yaml("linkName: [1").unwrap_err();
        assert_eq!((err.format, err.action), ("yaml", "decoding"));
        assert!(err.to_string().starts_with("ProbeSpecs.test.talos.dev: yaml decoding: "), "{err}");
        assert_eq!(SpecObject::to_json(&spec).unwrap(), serde_json::json!({"linkName": "eth0", "mtu": 3}));
        assert_eq!(SpecObject::to_proto(&spec), None);
    }

    #[test]
    fn metadata_has_the_cosi_yaml_shape_and_round_trips() {
        use std::time::{Duration, UNIX_EPOCH};
        let mut md = Metadata::new("network", "AddressStatuses.net.talos.dev", "eth0/10.0.2.15/24");
        md.version = 3;
        md.owner = "AddressStatusController".into();
        md.created = UNIX_EPOCH + Duration::from_secs(1_704_885_645);
        md.updated = md.created + Duration::from_millis(1500);
        let yaml = serde_saphyr::to_string(&md).unwrap();
        assert_eq!(
            yaml,
            "namespace: network\ntype: AddressStatuses.net.talos.dev\nid: eth0/10.0.2.15/24\nversion: 3\n\
             owner: AddressStatusController\nphase: running\ncreated: 2024-01-10T11:20:45Z\n\
             updated: 2024-01-10T11:20:46.5Z\n"
        );
        assert_eq!(serde_saphyr::from_str::<Metadata>(&yaml).unwrap(), md);

        md.phase = Phase::TearingDown;
        md.labels.insert("talos.dev/role".into(), "cp".into());
        md.annotations.insert("note".into(), "x".into());
        md.finalizers.insert("AddressSpecController".into());
        let yaml = serde_saphyr::to_string(&md).unwrap();
        assert!(yaml.contains("phase: tearingDown\n"), "{yaml}");
        assert!(yaml.ends_with("finalizers:\n- AddressSpecController\n"), "{yaml}");
        assert_eq!(serde_saphyr::from_str::<Metadata>(&yaml).unwrap(), md);
        // The protobuf wire carries the version as a string.
        let text = yaml.replace("version: 3", "version: '3'");
        assert_eq!(serde_saphyr::from_str::<Metadata>(&text).unwrap().version, 3);
        let bad = yaml.replace("owner:", "ownr:");
        assert!(serde_saphyr::from_str::<Metadata>(&bad).is_err(), "an unknown field is an error");
    }
}

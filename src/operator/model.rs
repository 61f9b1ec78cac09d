//! The TalosMachine resource: one node of a fleet, as the operator's stores hold it. Its shape
//! is the Kubernetes custom resource's (`talosbox.dev/v1alpha1`, kind `TalosMachine`), so one
//! YAML file serves `talosbox operator apply -f` and `kubectl apply -f` alike; the standalone
//! store keeps the same JSON.
//!
//! Pure: types, parsing with field-naming errors, and the few decisions that read only a
//! machine (its reconcile mode, whether the watcher may poll it). Nothing here does I/O.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The resource's API group, version and kind.
pub const GROUP: &str = "talosbox.dev";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "talosbox.dev/v1alpha1";
pub const KIND: &str = "TalosMachine";
pub const PLURAL: &str = "talosmachines";
/// The annotation choosing how the operator treats a machine (case-insensitive values).
pub const RECONCILE_MODE_ANNOTATION: &str = "talosbox.dev/reconcile-mode";
/// The finalizer the operator keeps on a machine until its deletion policy is carried out.
pub const FINALIZER: &str = "talosmachine.talosbox.dev/finalizer";
/// The key of a secrets bundle in a Secret when `secretsRef.key` is not given.
pub const DEFAULT_SECRETS_KEY: &str = "secrets.yaml";
pub const DEFAULT_TALOSCONFIG_KEY: &str = "talosconfig";
pub const DEFAULT_CONFIG_KEY: &str = "config.yaml";

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{what}: {detail}")]
    Parse { what: String, detail: String },
    #[error("{what}: {field}: {detail}")]
    Field { what: String, field: &'static str, detail: String },
}

/// Which machine: namespace and name (the standalone store uses the namespace `default`
/// unless told otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MachineKey {
    pub namespace: String,
    pub name: String,
}

impl MachineKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> MachineKey {
        MachineKey { namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for MachineKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The Kubernetes object metadata the operator reads and writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Opaque; a write conditional on it fails once anyone else wrote the object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Bumped by the store on every change of the spec, never by a status write.
    #[serde(default)]
    pub generation: i64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// Set when deletion was asked for; the object stays while finalizers remain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
}

/// A key inside a named Secret or ConfigMap of the machine's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl KeyRef {
    pub fn key_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.key.as_deref().unwrap_or(default)
    }
}

/// How the operator reaches the node's API with mutual TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineCredentials {
    /// A Secret holding the fleet's secrets bundle: the operator mints its own `os:admin`
    /// client certificate from its OS CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_ref: Option<KeyRef>,
    /// A Secret holding a talosconfig; its current context's CA and client certificate are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub talosconfig_ref: Option<KeyRef>,
}

/// Where the machine's desired configuration comes from: a base (inline, or a ConfigMap key)
/// and patches applied over it in order, as `talosctl apply-config --config-patch` applies them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<KeyRef>,
    /// Strategic-merge or JSON patches, YAML or JSON text each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<String>,
}

/// What deleting the machine does to the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeletionPolicy {
    /// Leave the node as it is.
    #[default]
    Preserve,
    /// Reset the node (unless the machine is Orphaned).
    Reset,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineSpec {
    /// The node's API address (`10.5.0.2`, `node1:50000`).
    pub endpoint: String,
    /// The Talos(box) version the node must report (`v0.1.0`).
    pub version: String,
    /// What the Upgrade RPC installs when the node's version diverged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default)]
    pub credentials: MachineCredentials,
    #[serde(default)]
    pub config: ConfigSource,
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// Where a machine is in its life. Only the watcher writes Drifted, and only over Available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MachineState {
    Pending,
    Installing,
    Available,
    Drifted,
    Upgrading,
    Orphaned,
}

impl MachineState {
    pub fn as_str(self) -> &'static str {
        match self {
            MachineState::Pending => "Pending",
            MachineState::Installing => "Installing",
            MachineState::Available => "Available",
            MachineState::Drifted => "Drifted",
            MachineState::Upgrading => "Upgrading",
            MachineState::Orphaned => "Orphaned",
        }
    }
}

impl fmt::Display for MachineState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub last_transition_time: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Empty for a machine the operator has not looked at yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<MachineState>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub observed_version: String,
    /// SHA-256 of the last configuration text applied (or found in force).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config_hash: String,
    /// The generation the status was last written for.
    #[serde(default)]
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub imported: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl MachineStatus {
    /// Sets condition `type_`, keeping its transition time when its status did not change.
    pub fn set_condition(&mut self, type_: &str, status: bool, reason: &str, message: &str, now: &str) {
        let status = if status { "True" } else { "False" }.to_string();
        match self.conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = now.to_string();
                }
                c.status = status;
                c.reason = reason.to_string();
                c.message = message.to_string();
            }
            None => self.conditions.push(Condition {
                type_: type_.to_string(),
                status,
                reason: reason.to_string(),
                message: message.to_string(),
                last_transition_time: now.to_string(),
            }),
        }
    }
}

/// One machine of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TalosMachine {
    #[serde(default = "api_version")]
    pub api_version: String,
    #[serde(default = "kind")]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: MachineSpec,
    #[serde(default)]
    pub status: MachineStatus,
}

fn api_version() -> String {
    API_VERSION.to_string()
}
fn kind() -> String {
    KIND.to_string()
}

/// How the operator treats a machine, from its annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileMode {
    /// Converge the node (the default).
    Reconcile,
    /// Compute and report what would be done; write nothing, to the node or the status.
    DryRun,
    /// Hands off: neither the reconciler nor the watcher writes anything.
    Disable,
    /// Adopt a node already configured: Available at once, the config taken as desired.
    Import,
}

impl ReconcileMode {
    /// The annotation's value, case-insensitively; anything unknown is refused by name.
    pub fn parse(value: &str) -> Result<ReconcileMode, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "reconcile" => Ok(ReconcileMode::Reconcile),
            "dryrun" => Ok(ReconcileMode::DryRun),
            "disable" => Ok(ReconcileMode::Disable),
            "import" => Ok(ReconcileMode::Import),
            other => Err(format!("unknown reconcile mode {other:?} (reconcile, dryrun, disable, import)")),
        }
    }

    /// Whether the operator may write the machine's status (or its node).
    pub fn writes(self) -> bool {
        matches!(self, ReconcileMode::Reconcile | ReconcileMode::Import)
    }
}

impl TalosMachine {
    pub fn key(&self) -> MachineKey {
        MachineKey::new(self.metadata.namespace.clone(), self.metadata.name.clone())
    }

    /// The machine's reconcile mode. An unreadable annotation fails closed: the machine is
    /// treated as `disable`, and the error says why.
    pub fn reconcile_mode(&self) -> (ReconcileMode, Option<String>) {
        match self.metadata.annotations.get(RECONCILE_MODE_ANNOTATION) {
            None => (ReconcileMode::Reconcile, None),
            Some(v) => match ReconcileMode::parse(v) {
                Ok(m) => (m, None),
                Err(e) => (ReconcileMode::Disable, Some(format!("annotation {RECONCILE_MODE_ANNOTATION}: {e}"))),
            },
        }
    }

    pub fn deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    pub fn state(&self) -> Option<MachineState> {
        self.status.state
    }

    /// Whether the watcher polls the machine: not being deleted, Available or Drifted, and an
    /// endpoint to poll.
    pub fn ready_to_watch(&self) -> bool {
        !self.deleting()
            && matches!(self.status.state, Some(MachineState::Available | MachineState::Drifted))
            && !self.spec.endpoint.trim().is_empty()
    }

    /// Parses a machine from YAML (or JSON) as a user writes it, naming what is wrong.
    pub fn from_yaml(text: &str, what: &str) -> Result<TalosMachine, ModelError> {
        let m: TalosMachine =
            serde_saphyr::from_str(text).map_err(|e| ModelError::Parse { what: what.into(), detail: e.to_string() })?;
        m.validate(what)?;
        Ok(m)
    }

    /// The checks a store makes before accepting a machine.
    pub fn validate(&self, what: &str) -> Result<(), ModelError> {
        let field = |field, detail: &str| ModelError::Field { what: what.into(), field, detail: detail.into() };
        if self.api_version != API_VERSION {
            return Err(field("apiVersion", &format!("{:?} is not {API_VERSION}", self.api_version)));
        }
        if self.kind != KIND {
            return Err(field("kind", &format!("{:?} is not {KIND}", self.kind)));
        }
        if !is_dns_label(&self.metadata.name) {
            return Err(field(
                "metadata.name",
                "must be a DNS name: lowercase letters, digits, '-' and '.', at most 253",
            ));
        }
        if !self.metadata.namespace.is_empty() && !is_dns_label(&self.metadata.namespace) {
            return Err(field("metadata.namespace", "must be a DNS name"));
        }
        if self.spec.endpoint.trim().is_empty() {
            return Err(field("spec.endpoint", "required"));
        }
        if let Err(e) = crate::client::conn::split_endpoint(&self.spec.endpoint, 50000) {
            return Err(field("spec.endpoint", &e.to_string()));
        }
        if self.spec.version.trim().is_empty() {
            return Err(field("spec.version", "required"));
        }
        let c = &self.spec.credentials;
        if c.secrets_ref.is_some() == c.talosconfig_ref.is_some() {
            return Err(field("spec.credentials", "exactly one of secretsRef and talosconfigRef is required"));
        }
        let s = &self.spec.config;
        if s.inline.is_some() == s.config_ref.is_some() {
            return Err(field("spec.config", "exactly one of inline and configRef is required"));
        }
        if let Some(v) = self.metadata.annotations.get(RECONCILE_MODE_ANNOTATION)
            && let Err(e) = ReconcileMode::parse(v)
        {
            return Err(ModelError::Field { what: what.into(), field: "metadata.annotations", detail: e });
        }
        Ok(())
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

/// A Kubernetes-style event about a machine (events.k8s.io/v1's fields that matter here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineEvent {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub action: String,
    pub note: String,
    /// RFC 3339.
    pub time: String,
}

/// The longest note an events.k8s.io Event may carry; a longer one is refused by the API
/// server and the event lost.
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// `text` cut to at most `max` bytes at a character boundary, with `suffix` appended when cut,
/// the whole staying within `max`.
pub fn truncate_note(text: &str, max: usize, suffix: &str) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(suffix.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &text[..end])
}

/// Now, as RFC 3339 UTC with seconds (Kubernetes's `metav1.Time`).
pub fn now_rfc3339() -> String {
    rfc3339(std::time::SystemTime::now())
}

pub fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MACHINE: &str = "apiVersion: talosbox.dev/v1alpha1
kind: TalosMachine
metadata:
  name: cp-1
  annotations:
    talosbox.dev/reconcile-mode: DryRun
spec:
  endpoint: 10.5.0.2
  version: v0.1.0
  credentials:
    secretsRef: {name: fleet}
  config:
    configRef: {name: controlplane}
    patches:
      - 'machine: {network: {hostname: cp-1}}'
";

    #[test]
    fn a_machine_parses_and_its_mode_is_case_insensitive() {
        let m = TalosMachine::from_yaml(MACHINE, "cp-1.yaml").unwrap();
        assert_eq!(m.reconcile_mode(), (ReconcileMode::DryRun, None));
        assert_eq!(m.spec.credentials.secrets_ref.as_ref().unwrap().key_or(DEFAULT_SECRETS_KEY), "secrets.yaml");
        assert_eq!(m.spec.deletion_policy, DeletionPolicy::Preserve);
        for (value, mode) in [
            ("reconcile", ReconcileMode::Reconcile),
            ("RECONCILE", ReconcileMode::Reconcile),
            ("dryrun", ReconcileMode::DryRun),
            ("Disable", ReconcileMode::Disable),
            ("iMpOrT", ReconcileMode::Import),
        ] {
            assert_eq!(ReconcileMode::parse(value), Ok(mode), "{value}");
        }
        assert!(ReconcileMode::parse("dry-run").unwrap_err().contains("dry-run"));
    }

    #[test]
    fn an_unreadable_mode_fails_closed_as_disable() {
        let mut m = TalosMachine::from_yaml(MACHINE, "x").unwrap();
        m.metadata.annotations.insert(RECONCILE_MODE_ANNOTATION.into(), "sometimes".into());
        let (mode, why) = m.reconcile_mode();
        assert_eq!(mode, ReconcileMode::Disable);
        assert!(why.unwrap().contains("sometimes"));
        assert!(!mode.writes());
    }

    #[test]
    fn bad_machines_are_refused_naming_the_field() {
        let cases = [
            (MACHINE.replace("  endpoint: 10.5.0.2\n", ""), "endpoint"),
            (MACHINE.replace("version: v0.1.0", "version: ''"), "spec.version"),
            (MACHINE.replace("secretsRef: {name: fleet}", "{}"), "spec.credentials"),
            (
                MACHINE.replace("configRef: {name: controlplane}", "configRef: {name: controlplane}\n    inline: x"),
                "spec.config",
            ),
            (MACHINE.replace("name: cp-1\n", "name: Cp_1\n"), "metadata.name"),
            (MACHINE.replace("kind: TalosMachine", "kind: Pod"), "kind"),
            (MACHINE.replace("DryRun", "often"), "often"),
            (MACHINE.replace("  version: v0.1.0\n", "  version: v0.1.0\n  verison: x\n"), "verison"),
            (MACHINE.replace("10.5.0.2", "host:port"), "spec.endpoint"),
        ];
        for (text, field) in cases {
            let e = TalosMachine::from_yaml(&text, "m.yaml").unwrap_err().to_string();
            assert!(e.contains(field) && e.starts_with("m.yaml"), "{field}: {e}");
        }
    }

    #[test]
    fn only_available_or_drifted_machines_with_an_endpoint_are_watched() {
        let mut m = TalosMachine::from_yaml(MACHINE, "x").unwrap();
        for (state, ready) in [
            (None, false),
            (Some(MachineState::Pending), false),
            (Some(MachineState::Installing), false),
            (Some(MachineState::Available), true),
            (Some(MachineState::Drifted), true),
            (Some(MachineState::Upgrading), false),
            (Some(MachineState::Orphaned), false),
        ] {
            m.status.state = state;
            assert_eq!(m.ready_to_watch(), ready, "{state:?}");
        }
        m.status.state = Some(MachineState::Available);
        m.metadata.deletion_timestamp = Some(now_rfc3339());
        assert!(!m.ready_to_watch(), "a deleting machine is not polled");
    }

    #[test]
    fn notes_are_cut_at_a_character_boundary_within_the_limit() {
        let suffix = "\n… (truncated)";
        let text = "é".repeat(600); // 1200 bytes, two per char
        let cut = truncate_note(&text, EVENT_NOTE_LIMIT, suffix);
        assert!(cut.len() <= EVENT_NOTE_LIMIT, "{}", cut.len());
        assert!(cut.ends_with(suffix));
        // The byte just before the suffix may fall inside an "é": it must not be split.
        for max in 990..1030 {
            let c = truncate_note(&text, max, suffix);
            assert!(c.len() <= max);
        }
        assert_eq!(truncate_note("short", 10, suffix), "short");
    }

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(rfc3339(std::time::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_798_761_599)),
            "2026-12-31T23:59:59Z"
        );
    }
}

//! Configuration resources (namespace `config`): the machine configuration in force and the
//! machine's type, under Talos's names. Plain data: parsing is `crate::config`'s job, done once
//! by the config controller; this module holds the result and never calls into `config`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{BlockView, Config, ConfigError, MachineView, NetworkView};
use crate::cosi::{Registry, RegistryError, ResourceDefinition, ResourceSpec, Sensitivity};

pub const NAMESPACE: &str = "config";

/// A configuration text parsed and read once, by `MachineConfigController`: the documents and
/// the typed views controllers act on. The machine view always read (a text whose machine
/// part does not read is no configuration); the network and volume views keep their error,
/// so that each of their readers reports it the same way and keeps the rest in force.
#[derive(Debug)]
pub struct ParsedConfig {
    pub config: Config,
    pub machine: MachineView,
    pub network: Result<NetworkView, ConfigError>,
    pub block: Result<BlockView, ConfigError>,
}

/// The machine configuration, as the YAML text of all its documents, with the text parsed.
/// Id `v1alpha1` is the one in force; `persistent` is what is stored (ahead of it after a
/// staged apply, behind it during a try). Sensitive: it holds the machine's keys and tokens.
/// Only the text is serialized (what `talosctl get machineconfig` shows).
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MachineConfig {
    pub yaml: String,
    /// `None` only for a text that does not load: a stored one shown as it is, or one
    /// decoded from its text. The one in force always has it.
    #[serde(skip)]
    parsed: Option<Arc<ParsedConfig>>,
}

impl MachineConfig {
    pub const ACTIVE_ID: &'static str = "v1alpha1";
    pub const PERSISTENT_ID: &'static str = "persistent";

    /// The text with what it parsed to.
    pub fn new(yaml: impl Into<String>, parsed: ParsedConfig) -> Self {
        MachineConfig { yaml: yaml.into(), parsed: Some(Arc::new(parsed)) }
    }

    /// A text that does not load, kept only to be shown.
    pub fn unparsed(yaml: impl Into<String>) -> Self {
        MachineConfig { yaml: yaml.into(), parsed: None }
    }

    /// The parsed configuration; `None` when the text does not load, which readers take as
    /// no configuration (as the config controller does).
    pub fn parsed(&self) -> Option<&Arc<ParsedConfig>> {
        self.parsed.as_ref()
    }

    /// The configuration in force on `state`; `None` when there is none (a caller outside
    /// the controllers that needs only a best-effort view of it).
    pub fn active(state: &crate::cosi::State) -> Option<Config> {
        let mc = state.find::<MachineConfig>(NAMESPACE, Self::ACTIVE_ID).ok().flatten()?;
        mc.spec().parsed().map(|p| p.config.clone())
    }
}

/// The parse follows from the text, so the text alone says whether two specs differ.
impl PartialEq for MachineConfig {
    fn eq(&self, other: &Self) -> bool {
        self.yaml == other.yaml
    }
}

impl Eq for MachineConfig {}

impl std::fmt::Debug for MachineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MachineConfig({} bytes)", self.yaml.len())
    }
}

impl ResourceSpec for MachineConfig {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "MachineConfigs.config.talos.dev",
        aliases: &["machineconfig"],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };

    fn yaml_text(&self) -> Option<String> {
        Some(self.yaml.clone())
    }
}

/// Talos's machine types, with their names and numbers (`machine.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MachineType {
    #[default]
    Unknown,
    Init,
    #[serde(rename = "controlplane")]
    ControlPlane,
    Worker,
}

impl MachineType {
    pub const ID: &'static str = "machine-type";

    /// Whether this machine holds the OS CA's key (and so signs, and forwards).
    pub fn is_control_plane(self) -> bool {
        matches!(self, MachineType::Init | MachineType::ControlPlane)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MachineType::Unknown => "unknown",
            MachineType::Init => "init",
            MachineType::ControlPlane => "controlplane",
            MachineType::Worker => "worker",
        }
    }
}

impl std::fmt::Display for MachineType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The resource holding the machine type (Talos: a bare string as the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MachineTypeSpec {
    pub machine_type: MachineType,
}

impl ResourceSpec for MachineTypeSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "MachineTypes.config.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

pub fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.add_namespace(NAMESPACE, "Talos node configuration.")?;
    registry.register::<MachineConfig>()?;
    registry.register::<MachineTypeSpec>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_render_as_talos_does() {
        let mc = MachineConfig::unparsed("version: v1alpha1\n");
        assert_eq!(serde_json::to_value(&mc).unwrap(), serde_json::json!("version: v1alpha1\n"));
        let t = MachineTypeSpec { machine_type: MachineType::ControlPlane };
        assert_eq!(serde_saphyr::to_string(&t).unwrap().trim(), "controlplane");
        assert!(format!("{mc:?}").starts_with("MachineConfig(18 bytes"));
    }

    #[test]
    fn the_configuration_is_sensitive() {
        assert_eq!(MachineConfig::DEFINITION.sensitivity, Sensitivity::Sensitive);
        let mut r = Registry::new();
        register(&mut r).unwrap();
        assert_eq!(r.resolve("mc").map(|t| t.type_name()), Ok("MachineConfigs.config.talos.dev"));
        assert_eq!(r.resolve("machineconfig").map(|t| t.type_name()), Ok("MachineConfigs.config.talos.dev"));
    }
}

//! Device configs: the v1alpha1 `interfaces[]` entries as their YAML trees.

use serde::{Deserialize, Serialize};

use super::NAMESPACE;
use crate::cosi::{ResourceDefinition, ResourceSpec, Sensitivity};

/// One `machine.network.interfaces[]` entry of the v1alpha1 machine config, as its YAML tree
/// (the config module owns its schema), id `<index>/<interface or selector>`. Sensitive as
/// in Talos: WireGuard keys live here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct DeviceConfigSpec {
    pub device: serde_json::Value,
}

impl ResourceSpec for DeviceConfigSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "DeviceConfigSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };
}

//! File resources of the `files` namespace, under Talos's names: `EtcFileSpec`, a file under
//! the node's `/etc` as some controller wants it (id = its path below `/etc`), and
//! `EtcFileStatus`, the spec version that is on disk. Plain data: nothing here writes a file.

use serde::{Deserialize, Serialize};

use crate::cosi::{PrintColumn, Registry, RegistryError, ResourceDefinition, ResourceSpec, Sensitivity};

/// Files the node renders under `/etc`.
pub const NAMESPACE: &str = "files";

/// The rendered bundle of trusted roots, relative to the `/etc` root
/// (`/etc/ssl/certs/ca-certificates.crt`): the id of its `EtcFileSpec`.
pub const TRUSTED_ROOTS_FILE: &str = "ssl/certs/ca-certificates.crt";

/// A file's wanted contents and mode, id = its path below `/etc` (`hosts`, `resolv.conf`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct EtcFileSpec {
    pub contents: String,
    pub mode: u32,
    #[serde(rename = "selinux_label", skip_serializing_if = "String::is_empty")]
    pub selinux_label: String,
}

impl ResourceSpec for EtcFileSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "EtcFileSpecs.files.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The version of the `EtcFileSpec` of the same id that is on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct EtcFileStatus {
    pub spec_version: String,
}

impl ResourceSpec for EtcFileStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "EtcFileStatuses.files.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[PrintColumn { name: "Spec Version", json_path: "{.specVersion}" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

pub fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.add_namespace(NAMESPACE, "Files and file-like resources.")?;
    registry.register::<EtcFileSpec>()?;
    registry.register::<EtcFileStatus>()?;
    Ok(())
}

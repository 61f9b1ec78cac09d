//! Runtime resources: what machined knows about itself — the kernel command line, the
//! version, the machine's stage and the state of each service.
//!
//! Type names, ids and field names follow Talos (`MachineStatuses.runtime.talos.dev` …) so
//! that `talosctl get` shows the same thing. Types Talos does not have are named
//! `*.talosbox.dev`. Plain data only.

use serde::Serialize;

use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};

/// The namespace of every runtime resource (Talos's `runtime` and `v1alpha1` namespaces are
/// both named `runtime`).
pub const NAMESPACE: &str = "runtime";

/// The kernel command line as the kernel gave it (`/proc/cmdline`), id `cmdline`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelCmdline {
    pub cmdline: String,
}

impl KernelCmdline {
    pub const ID: &'static str = "cmdline";
}

impl ResourceSpec for KernelCmdline {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "KernelCmdlines.runtime.talos.dev",
        aliases: &["cmdline"],
        default_namespace: NAMESPACE,
        print_columns: &[PrintColumn { name: "Cmdline", path: "cmdline" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The running talosbox version, id `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Version {
    pub version: String,
}

impl Version {
    pub const ID: &'static str = "version";
}

impl ResourceSpec for Version {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Versions.runtime.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[PrintColumn { name: "Version", path: "version" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The stage of the machine's life, Talos's `MachineStage` (same order, same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum MachineStage {
    #[serde(rename = "unknown")]
    Unknown,
    #[serde(rename = "booting")]
    Booting,
    #[serde(rename = "installing")]
    Installing,
    #[serde(rename = "maintenance")]
    Maintenance,
    #[serde(rename = "running")]
    Running,
    #[serde(rename = "rebooting")]
    Rebooting,
    #[serde(rename = "shutting down")]
    ShuttingDown,
    #[serde(rename = "resetting")]
    Resetting,
    #[serde(rename = "upgrading")]
    Upgrading,
}

impl std::fmt::Display for MachineStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MachineStage::Unknown => "unknown",
            MachineStage::Booting => "booting",
            MachineStage::Installing => "installing",
            MachineStage::Maintenance => "maintenance",
            MachineStage::Running => "running",
            MachineStage::Rebooting => "rebooting",
            MachineStage::ShuttingDown => "shutting down",
            MachineStage::Resetting => "resetting",
            MachineStage::Upgrading => "upgrading",
        })
    }
}

/// Something that keeps the machine from being ready at its stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnmetCondition {
    pub name: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatusStatus {
    pub ready: bool,
    pub unmet_conditions: Vec<UnmetCondition>,
}

/// The machine's stage and readiness, id `machine`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MachineStatus {
    pub stage: MachineStage,
    pub status: MachineStatusStatus,
}

impl MachineStatus {
    pub const ID: &'static str = "machine";
}

impl ResourceSpec for MachineStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "MachineStatuses.runtime.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Stage", path: "stage" },
            PrintColumn { name: "Ready", path: "status.ready" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// Where the machine configuration stands, id `machine-config`. Talos has no such resource
/// (its sequencer knows); here the config source is a controller's observation, so the
/// machine status can tell "not looked yet" (no resource) from "looked, none" (`present:
/// false`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MachineConfigStatus {
    pub present: bool,
    /// Where it was looked for or found (`/var/lib/talosbox/config.yaml`, `none: no STATE volume`).
    pub source: String,
}

impl MachineConfigStatus {
    pub const ID: &'static str = "machine-config";
}

impl ResourceSpec for MachineConfigStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "MachineConfigStatuses.runtime.talosbox.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Present", path: "present" },
            PrintColumn { name: "Source", path: "source" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// A request to go down, written by machined's power path (from outside the runtime) so
/// the machine status shows the stage before services stop. Id `shutdown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ShutdownAction {
    PowerOff,
    Reboot,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShutdownRequest {
    pub action: ShutdownAction,
}

impl ShutdownRequest {
    pub const ID: &'static str = "shutdown";
}

impl ResourceSpec for ShutdownRequest {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "ShutdownRequests.runtime.talosbox.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[PrintColumn { name: "Action", path: "action" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// A service's lifecycle state, with Talos's names (`Running`, `Waiting` …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ServiceState {
    Initialized,
    Preparing,
    Waiting,
    Starting,
    Running,
    Stopping,
    Finished,
    Failed,
    Skipped,
}

impl std::fmt::Display for ServiceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// One supervised service, id = the service name. `running`/`healthy`/`unknown` are
/// Talos's fields; the rest says what the supervisor sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    pub running: bool,
    pub healthy: bool,
    pub unknown: bool,
    pub state: ServiceState,
    pub pid: Option<u32>,
    pub restarts: u32,
    /// The last event's message (`exited with code 1`, `restarting in 2s`).
    pub message: String,
}

impl ResourceSpec for Service {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Services.v1alpha1.talos.dev",
        aliases: &["svc"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Running", path: "running" },
            PrintColumn { name: "Healthy", path: "healthy" },
            PrintColumn { name: "Health Unknown", path: "unknown" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_serialize_with_talos_names() {
        let cases = [
            (MachineStage::Booting, "booting"),
            (MachineStage::Maintenance, "maintenance"),
            (MachineStage::Running, "running"),
            (MachineStage::ShuttingDown, "shutting down"),
        ];
        for (stage, name) in cases {
            assert_eq!(serde_json::to_value(stage).unwrap(), serde_json::json!(name));
            assert_eq!(stage.to_string(), name);
        }
    }

    #[test]
    fn definitions_answer_to_talos_names() {
        assert!(MachineStatus::DEFINITION.matches("machinestatuses"));
        assert!(KernelCmdline::DEFINITION.matches("cmdline"));
        assert!(Service::DEFINITION.matches("svc"));
        assert!(Service::DEFINITION.matches("Services.v1alpha1.talos.dev"));
        assert!(Version::DEFINITION.matches("versions"));
    }
}

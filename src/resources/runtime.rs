//! Runtime resources: what machined knows about itself — the kernel command line, the
//! version, the machine's stage and the state of each service.
//!
//! Type names, ids and field names follow Talos (`MachineStatuses.runtime.talos.dev` …) so
//! that `talosctl get` shows the same thing. Types Talos does not have are named
//! `*.talosbox.dev`. Plain data only.

use serde::{Deserialize, Serialize};

use crate::cosi::{PrintColumn, Registry, RegistryError, ResourceDefinition, ResourceSpec, Sensitivity};

/// The namespace of every runtime resource (Talos's `runtime` and `v1alpha1` namespaces are
/// both named `runtime`).
pub const NAMESPACE: &str = "runtime";

/// The kernel command line as the kernel gave it (`/proc/cmdline`), id `cmdline`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        print_columns: &[PrintColumn { name: "Cmdline", json_path: "{.cmdline}" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The running talosbox version, id `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        print_columns: &[PrintColumn { name: "Version", json_path: "{.version}" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The stage of the machine's life, Talos's `MachineStage` (same order, same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmetCondition {
    pub name: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatusStatus {
    pub ready: bool,
    pub unmet_conditions: Vec<UnmetCondition>,
}

/// The machine's stage and readiness, id `machine`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
            PrintColumn { name: "Stage", json_path: "{.stage}" },
            PrintColumn { name: "Ready", json_path: "{.status.ready}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// Where the machine configuration stands, id `machine-config`. Talos has no such resource
/// (its sequencer knows); here the config source is a controller's observation, so the
/// machine status can tell "not looked yet" (no resource) from "looked, none" (`present:
/// false`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
            PrintColumn { name: "Present", json_path: "{.present}" },
            PrintColumn { name: "Source", json_path: "{.source}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// A request to go down, written by machined's power path (from outside the runtime) so
/// the machine status shows the stage before services stop. Id `shutdown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ShutdownAction {
    PowerOff,
    Reboot,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        print_columns: &[PrintColumn { name: "Action", json_path: "{.action}" }],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// A service's lifecycle state, with Talos's names (`Running`, `Waiting` …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// Talos's `ServiceSpec` message (running = 1, healthy = 2, unknown = 3): what Talos tooling
/// decodes from `proto_spec`.
#[derive(Clone, PartialEq, prost::Message)]
struct ServiceSpecWire {
    #[prost(bool, tag = "1")]
    running: bool,
    #[prost(bool, tag = "2")]
    healthy: bool,
    #[prost(bool, tag = "3")]
    unknown: bool,
}

impl ResourceSpec for Service {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "Services.v1alpha1.talos.dev",
        aliases: &["svc"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Running", json_path: "{.running}" },
            PrintColumn { name: "Healthy", json_path: "{.healthy}" },
            PrintColumn { name: "Health Unknown", json_path: "{.unknown}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        let wire = ServiceSpecWire { running: self.running, healthy: self.healthy, unknown: self.unknown };
        Some(prost::Message::encode_to_vec(&wire))
    }
}

/// How apid serves, id `apid` (Talos's `APIServiceConfig`): where it listens, and in
/// maintenance mode server-side TLS only, no forwarding, everyone a reader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ApiServiceConfig {
    pub listen_address: String,
    pub node_routing_disabled: bool,
    pub readonly_role_mode: bool,
    pub skip_verifying_client_cert: bool,
}

impl ApiServiceConfig {
    pub const ID: &'static str = "apid";
}

#[derive(Clone, PartialEq, prost::Message)]
struct ApiServiceConfigWire {
    #[prost(string, tag = "1")]
    listen_address: String,
    #[prost(bool, tag = "2")]
    node_routing_disabled: bool,
    #[prost(bool, tag = "3")]
    readonly_role_mode: bool,
    #[prost(bool, tag = "4")]
    skip_verifying_client_cert: bool,
}

impl ResourceSpec for ApiServiceConfig {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "APIServiceConfigs.runtime.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        Some(prost::Message::encode_to_vec(&ApiServiceConfigWire {
            listen_address: self.listen_address.clone(),
            node_routing_disabled: self.node_routing_disabled,
            readonly_role_mode: self.readonly_role_mode,
            skip_verifying_client_cert: self.skip_verifying_client_cert,
        }))
    }
}

/// One key of the META partition, Talos's `MetaKey`: id the tag as Talos writes it (`0x0a`),
/// the value as text (bytes that are not UTF-8 shown as U+FFFD).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaKey {
    pub value: String,
}

impl MetaKey {
    /// The id of the key with `tag` (Talos's `MetaKeyTagToID`).
    pub fn id(tag: u8) -> String {
        format!("0x{tag:02x}")
    }

    /// The tags that hold nothing secret, readable by every role: upgrade bookkeeping (6, 7,
    /// 8), the metal platform's network configuration (10), the UUID override (15) and the
    /// disk image's bootloader (17). Every other tag may hold a secret and is for admins
    /// only: STATE's encryption (9: kms endpoints, a static key's slot), the download URL
    /// code (11), the user-reserved tags (12-14, anything at all), the unique machine token
    /// (16), and any tag not known here.
    pub const PUBLIC_TAGS: &'static [u8] = &[
        crate::block::meta::tag::UPGRADE,
        crate::block::meta::tag::STAGED_UPGRADE_IMAGE_REF,
        crate::block::meta::tag::STAGED_UPGRADE_INSTALL_OPTIONS,
        crate::block::meta::tag::METAL_NETWORK_PLATFORM_CONFIG,
        crate::block::meta::tag::UUID_OVERRIDE,
        crate::block::meta::tag::DISK_IMAGE_BOOTLOADER,
    ];
}

/// Talos's `MetaKeySpec` message (value = 1).
#[derive(Clone, PartialEq, prost::Message)]
struct MetaKeyWire {
    #[prost(string, tag = "1")]
    value: String,
}

impl ResourceSpec for MetaKey {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "MetaKeys.runtime.talos.dev",
        aliases: &["meta"],
        default_namespace: NAMESPACE,
        print_columns: &[PrintColumn { name: "Value", json_path: "{.value}" }],
        sensitivity: Sensitivity::NonSensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        Some(prost::Message::encode_to_vec(&MetaKeyWire { value: self.value.clone() }))
    }

    /// A key is for admins only unless its id is one of [`MetaKey::PUBLIC_TAGS`] exactly as
    /// [`MetaKey::id`] spells it (fail closed: an id of any other form is sensitive).
    fn sensitive_id(id: &str) -> bool {
        !MetaKey::PUBLIC_TAGS.iter().any(|&tag| MetaKey::id(tag) == id)
    }
}

/// What the platform says about the machine, Talos's PlatformMetadata, id `platformmetadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlatformMetadata {
    pub platform: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub zone: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider_id: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spot: bool,
    #[serde(default, rename = "internalDNS", skip_serializing_if = "String::is_empty")]
    pub internal_dns: String,
    #[serde(default, rename = "externalDNS", skip_serializing_if = "String::is_empty")]
    pub external_dns: String,
}

impl PlatformMetadata {
    pub const ID: &'static str = "platformmetadata";
}

impl ResourceSpec for PlatformMetadata {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "PlatformMetadatas.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Platform", json_path: "{.platform}" },
            PrintColumn { name: "Hostname", json_path: "{.hostname}" },
            PrintColumn { name: "Instance ID", json_path: "{.instanceId}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// Registers the runtime namespace and every runtime type.
/// One A/B slot on BOOT, as [`BootStatus`] lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootSlot {
    pub slot: String,
    pub version: String,
}

/// How the node booted (beyond Talos), id `boot`: the slot GRUB booted (empty for a UKI or
/// direct boot), the version running, the slots on BOOT and which one is the default, and
/// what became of the last upgrade (`trial`: the new slot is on probation until the node is
/// running; `confirmed`; `rolled back`, with why).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BootStatus {
    pub slot: String,
    pub version: String,
    pub default_slot: String,
    pub slots: Vec<BootSlot>,
    pub upgrade: String,
}

impl BootStatus {
    pub const ID: &'static str = "boot";
}

impl ResourceSpec for BootStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "BootStatuses.runtime.talosbox.dev",
        aliases: &["bootstatus"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Slot", json_path: "{.slot}" },
            PrintColumn { name: "Version", json_path: "{.version}" },
            PrintColumn { name: "Default", json_path: "{.defaultSlot}" },
            PrintColumn { name: "Upgrade", json_path: "{.upgrade}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// Why a disk was or was not chosen to install to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallDiskMatch {
    pub disk: String,
    pub matched: bool,
    pub reason: String,
}

/// The install the configuration asks for (beyond Talos), id `install`: `waiting` (for a disk
/// to match, or for the source), `installing`, `installed` (the node reboots into the disk
/// once STATE holds the configuration), `failed` (with why; tried again when the
/// configuration changes), or `skipped` (booted from an installed disk already).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct InstallStatus {
    pub phase: String,
    pub disk: String,
    pub source: String,
    pub message: String,
    pub disk_matches: Vec<InstallDiskMatch>,
}

impl InstallStatus {
    pub const ID: &'static str = "install";
}

impl ResourceSpec for InstallStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "InstallStatuses.runtime.talosbox.dev",
        aliases: &["installstatus"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Phase", json_path: "{.phase}" },
            PrintColumn { name: "Disk", json_path: "{.disk}" },
            PrintColumn { name: "Message", json_path: "{.message}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

pub fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.add_namespace(NAMESPACE, "Talos runtime.")?;
    registry.register::<KernelCmdline>()?;
    registry.register::<Version>()?;
    registry.register::<MachineStatus>()?;
    registry.register::<MachineConfigStatus>()?;
    registry.register::<ShutdownRequest>()?;
    registry.register::<Service>()?;
    registry.register::<ApiServiceConfig>()?;
    registry.register::<PlatformMetadata>()?;
    registry.register::<MetaKey>()?;
    registry.register::<BootStatus>()?;
    registry.register::<InstallStatus>()?;
    Ok(())
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
        let mut registry = Registry::new();
        register(&mut registry).unwrap();
        let cases = [
            ("machinestatuses", MachineStatus::DEFINITION.type_name),
            ("ms", MachineStatus::DEFINITION.type_name),
            ("cmdline", KernelCmdline::DEFINITION.type_name),
            ("svc", Service::DEFINITION.type_name),
            ("services.v1alpha1", Service::DEFINITION.type_name),
            ("Services.v1alpha1.talos.dev", Service::DEFINITION.type_name),
            ("versions", Version::DEFINITION.type_name),
            ("version", Version::DEFINITION.type_name),
            ("meta", MetaKey::DEFINITION.type_name),
            ("metakeys", MetaKey::DEFINITION.type_name),
        ];
        for (name, want) in cases {
            assert_eq!(registry.resolve(name).map(|t| t.type_name()), Ok(want), "{name}");
        }
    }

    #[test]
    fn service_proto_spec_has_talos_fields() {
        let s = Service {
            running: true,
            healthy: false,
            unknown: true,
            state: ServiceState::Running,
            pid: Some(7),
            restarts: 0,
            message: String::new(),
        };
        // Field 1 (varint) = 1, field 3 (varint) = 1; false fields are not on the wire.
        assert_eq!(ResourceSpec::to_proto(&s), Some(vec![0x08, 0x01, 0x18, 0x01]));
    }

    #[test]
    fn meta_keys_are_named_as_talos_names_them() {
        assert_eq!(MetaKey::id(10), "0x0a");
        assert_eq!(MetaKey::id(0xff), "0xff");
        // Field 1, length-delimited, "ab".
        assert_eq!(ResourceSpec::to_proto(&MetaKey { value: "ab".into() }), Some(vec![0x0a, 0x02, b'a', b'b']));
        // Tags that may hold secrets are for admins only, unknown ones and odd spellings too.
        for (id, sensitive) in [
            ("0x06", false),
            ("0x0a", false),
            ("0x0f", false),
            ("0x11", false),
            ("0x09", true),
            ("0x0b", true),
            ("0x0c", true),
            ("0x0e", true),
            ("0x10", true),
            ("0x20", true),
            ("0x9", true),
            ("0x0A", true),
            ("", true),
        ] {
            assert_eq!(<MetaKey as ResourceSpec>::sensitive_id(id), sensitive, "{id}");
            assert_eq!(crate::cosi::ResourceType::of::<MetaKey>().is_sensitive(id), sensitive, "{id}");
        }
    }
}

#[cfg(test)]
mod sensitive_meta_keys {
    use std::sync::Arc;

    use super::{MetaKey, NAMESPACE};
    use crate::cosi::Resource;
    use crate::cosi::State;
    use crate::cosi::query::{ListOptions, WatchOptions};
    use crate::cosi::view::{Access, StateView};
    use crate::cosi::watch::Event;
    use crate::cosi::watch::Watch;

    const TYPE: &str = "MetaKeys.runtime.talos.dev";

    fn key(state: &State, id: &str, value: &str) {
        state.create(Resource::new(NAMESPACE, id, MetaKey { value: value.into() }), "").unwrap();
    }

    fn ids(watch: &mut Watch) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(Ok(e)) = watch.try_next() {
            match e {
                Event::Bootstrapped => out.push("bootstrapped".into()),
                e => out.extend(e.resource().map(|r| r.metadata.id.clone())),
            }
        }
        out
    }

    /// A reader never sees a META key whose tag may hold a secret: get and single watch are
    /// refused, lists and kind watches (snapshot and live) leave it out; an admin sees all.
    #[test]
    fn sensitive_ids_of_a_readable_type_are_for_admins_only() {
        let state = State::in_memory();
        let registry = Arc::new(crate::resources::registry().unwrap());
        key(&state, "0x09", "passphrase");
        key(&state, "0x0a", "network");
        let reader = StateView::new(state.clone(), registry.clone(), Access::for_roles(&["os:reader"]));
        let admin = StateView::new(state.clone(), registry, Access::for_roles(&["os:admin"]));

        let err = reader.get(NAMESPACE, TYPE, "0x09").unwrap_err();
        assert_eq!(err.to_string(), "MetaKeys.runtime.talos.dev 0x09 is sensitive: reading it needs the os:admin role");
        assert!(reader.watch(NAMESPACE, TYPE, "0x0c").is_err(), "not there yet, refused all the same");
        assert!(reader.get(NAMESPACE, TYPE, "0x0a").is_ok());
        assert!(admin.get(NAMESPACE, TYPE, "0x09").is_ok());
        let listed = |v: &StateView| -> Vec<String> {
            v.list(NAMESPACE, TYPE, &ListOptions::default()).unwrap().iter().map(|r| r.metadata.id.clone()).collect()
        };
        assert_eq!(listed(&reader), ["0x0a"]);
        assert_eq!(listed(&admin), ["0x09", "0x0a"]);

        let mut seen = reader.watch_kind(NAMESPACE, TYPE, &WatchOptions::default()).unwrap();
        let mut all = admin.watch_kind(NAMESPACE, TYPE, &WatchOptions::default()).unwrap();
        key(&state, "0x0c", "user secret");
        key(&state, "0x0f", "uuid");
        assert_eq!(ids(&mut seen), ["0x0a", "bootstrapped", "0x0f"]);
        assert_eq!(ids(&mut all), ["0x09", "0x0a", "bootstrapped", "0x0c", "0x0f"]);
    }
}

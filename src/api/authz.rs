//! Authorization: which roles may call which method, decided in one place.
//!
//! The table is Talos's (`machined.go`'s rules) for every method it names; a method with no
//! entry is `os:admin` only, so a new RPC someone forgets to list fails closed. Where Talos lets
//! `os:reader` in "for maintenance only, verified in the handler", the rule here carries the
//! maintenance exception itself, so no handler can forget the check. Roles arrive as asserted
//! by apid (`talos-role`); this module only decides.

use tonic::{Code, Status};

/// Role names (Talos's `pkg/machinery/role`).
pub mod role {
    pub const ADMIN: &str = "os:admin";
    pub const OPERATOR: &str = "os:operator";
    pub const READER: &str = "os:reader";
    pub const ETCD_BACKUP: &str = "os:etcd:backup";
    pub const IMAGE_VERIFIER: &str = "os:image:verifier";
    pub const META_WRITER: &str = "os:meta:writer";
    pub const IMPERSONATOR: &str = "os:impersonator";
}

use role::*;

/// Whether the node has a configuration yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeMode {
    /// No configuration: the maintenance API.
    Maintenance,
    Configured,
}

/// Who may call one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub roles: &'static [&'static str],
    /// Roles admitted only while the node is in maintenance mode.
    pub maintenance_roles: &'static [&'static str],
}

const ADMIN_ONLY: Rule = Rule { roles: &[ADMIN], maintenance_roles: &[] };
const OPERATORS: Rule = Rule { roles: &[ADMIN, OPERATOR], maintenance_roles: &[] };
const READERS: Rule = Rule { roles: &[ADMIN, OPERATOR, READER], maintenance_roles: &[] };
const ADMIN_OR_MAINTENANCE_READER: Rule = Rule { roles: &[ADMIN], maintenance_roles: &[READER] };

/// The rule of every listed method, by full gRPC path.
pub const RULES: &[(&str, Rule)] = &[
    ("/cluster.ClusterService/HealthCheck", READERS),
    ("/inspect.InspectService/ControllerRuntimeDependencies", READERS),
    ("/machine.ImageService/Import", ADMIN_ONLY),
    ("/machine.ImageService/List", READERS),
    ("/machine.ImageService/Pull", OPERATORS),
    ("/machine.ImageService/Remove", ADMIN_ONLY),
    (
        "/machine.ImageService/Verify",
        Rule { roles: &[ADMIN, OPERATOR, READER, IMAGE_VERIFIER], maintenance_roles: &[] },
    ),
    ("/machine.DebugService/ContainerRun", ADMIN_ONLY),
    ("/machine.LifecycleService/Install", ADMIN_ONLY),
    ("/machine.LifecycleService/Upgrade", ADMIN_ONLY),
    ("/machine.StorageService/Statfs", READERS),
    ("/machine.MachineService/ApplyConfiguration", ADMIN_OR_MAINTENANCE_READER),
    ("/machine.MachineService/Bootstrap", ADMIN_ONLY),
    ("/machine.MachineService/CPUInfo", READERS),
    ("/machine.MachineService/CPUFreqStats", READERS),
    ("/machine.MachineService/Containers", READERS),
    ("/machine.MachineService/Copy", ADMIN_ONLY),
    ("/machine.MachineService/DiskStats", READERS),
    ("/machine.MachineService/DiskUsage", READERS),
    ("/machine.MachineService/Dmesg", READERS),
    (
        "/machine.MachineService/EtcdAlarmList",
        Rule { roles: &[ADMIN, OPERATOR, READER, ETCD_BACKUP], maintenance_roles: &[] },
    ),
    ("/machine.MachineService/EtcdAlarmDisarm", OPERATORS),
    ("/machine.MachineService/EtcdDefragment", OPERATORS),
    ("/machine.MachineService/EtcdForfeitLeadership", ADMIN_ONLY),
    ("/machine.MachineService/EtcdLeaveCluster", ADMIN_ONLY),
    (
        "/machine.MachineService/EtcdMemberList",
        Rule { roles: &[ADMIN, OPERATOR, READER, ETCD_BACKUP], maintenance_roles: &[] },
    ),
    ("/machine.MachineService/EtcdRecover", ADMIN_ONLY),
    ("/machine.MachineService/EtcdRemoveMemberByID", ADMIN_ONLY),
    ("/machine.MachineService/EtcdSnapshot", Rule { roles: &[ADMIN, OPERATOR, ETCD_BACKUP], maintenance_roles: &[] }),
    (
        "/machine.MachineService/EtcdStatus",
        Rule { roles: &[ADMIN, OPERATOR, READER, ETCD_BACKUP], maintenance_roles: &[] },
    ),
    ("/machine.MachineService/EtcdDowngradeCancel", ADMIN_ONLY),
    ("/machine.MachineService/EtcdDowngradeEnable", ADMIN_ONLY),
    ("/machine.MachineService/EtcdDowngradeValidate", ADMIN_ONLY),
    ("/machine.MachineService/Events", READERS),
    ("/machine.MachineService/GenerateClientConfiguration", ADMIN_ONLY),
    ("/machine.MachineService/Hostname", READERS),
    ("/machine.MachineService/ImageList", READERS),
    ("/machine.MachineService/ImagePull", OPERATORS),
    ("/machine.MachineService/Kubeconfig", ADMIN_ONLY),
    ("/machine.MachineService/List", READERS),
    ("/machine.MachineService/LoadAvg", READERS),
    ("/machine.MachineService/Logs", READERS),
    ("/machine.MachineService/LogsContainers", READERS),
    ("/machine.MachineService/Memory", READERS),
    ("/machine.MachineService/MetaWrite", Rule { roles: &[ADMIN, META_WRITER], maintenance_roles: &[] }),
    ("/machine.MachineService/MetaDelete", Rule { roles: &[ADMIN, META_WRITER], maintenance_roles: &[] }),
    ("/machine.MachineService/Mounts", READERS),
    ("/machine.MachineService/NetworkDeviceStats", READERS),
    ("/machine.MachineService/Netstat", READERS),
    ("/machine.MachineService/PacketCapture", OPERATORS),
    ("/machine.MachineService/Processes", READERS),
    ("/machine.MachineService/Read", ADMIN_ONLY),
    ("/machine.MachineService/Reboot", OPERATORS),
    ("/machine.MachineService/Reset", ADMIN_ONLY),
    ("/machine.MachineService/Restart", OPERATORS),
    ("/machine.MachineService/Rollback", ADMIN_ONLY),
    ("/machine.MachineService/ServiceList", READERS),
    ("/machine.MachineService/ServiceRestart", OPERATORS),
    ("/machine.MachineService/ServiceStart", OPERATORS),
    ("/machine.MachineService/ServiceStop", OPERATORS),
    ("/machine.MachineService/Shutdown", OPERATORS),
    ("/machine.MachineService/Stats", READERS),
    ("/machine.MachineService/SystemStat", READERS),
    ("/machine.MachineService/Upgrade", ADMIN_ONLY),
    ("/machine.MachineService/Version", READERS),
    // Per-type checks (sensitive types) happen in the State service; writes are admin-only
    // here and refused by the service anyway: the state is read-only from outside.
    ("/cosi.resource.State/Create", ADMIN_ONLY),
    ("/cosi.resource.State/Destroy", ADMIN_ONLY),
    ("/cosi.resource.State/Teardown", ADMIN_ONLY),
    ("/cosi.resource.State/TeardownAndDestroy", ADMIN_ONLY),
    ("/cosi.resource.State/Get", READERS),
    ("/cosi.resource.State/List", READERS),
    ("/cosi.resource.State/Update", ADMIN_ONLY),
    ("/cosi.resource.State/Watch", READERS),
    ("/storage.StorageService/Disks", READERS),
    ("/storage.StorageService/BlockDeviceWipe", ADMIN_OR_MAINTENANCE_READER),
    ("/machine.LVMService/LogicalVolumeRemove", ADMIN_OR_MAINTENANCE_READER),
    ("/machine.LVMService/VolumeGroupRemove", ADMIN_OR_MAINTENANCE_READER),
    ("/machine.LVMService/PhysicalVolumeRemove", ADMIN_OR_MAINTENANCE_READER),
    ("/machine.MDService/Destroy", ADMIN_OR_MAINTENANCE_READER),
    // Beyond Talos: the passphrase for a volume no key opens, which leaves the node in
    // maintenance when the volume is STATE.
    ("/talosbox.volume.VolumeService/Unlock", ADMIN_OR_MAINTENANCE_READER),
    // Beyond Talos: an upgrade's artifacts, streamed through the door.
    ("/talosbox.lifecycle.ArtifactService/Upload", ADMIN_ONLY),
    ("/time.TimeService/Time", READERS),
    ("/time.TimeService/TimeCheck", READERS),
];

/// The rule for a method with no entry.
pub const FALLBACK: Rule = ADMIN_ONLY;

/// The rule that governs `method`.
pub fn rule(method: &str) -> Rule {
    RULES.iter().find(|(m, _)| *m == method).map_or(FALLBACK, |(_, r)| *r)
}

/// What a node in maintenance mode serves, as Talos's maintenance service does: applying a
/// configuration, its version, a reset, the wipe of unused block devices (so a disk can be
/// cleared before the configuration claims it), and reads of non-sensitive resources; beyond
/// Talos, the unlock of an encrypted STATE no configured key opens. Everything else waits for
/// a configuration.
pub const MAINTENANCE_METHODS: &[&str] = &[
    "/machine.MachineService/ApplyConfiguration",
    "/machine.MachineService/Version",
    "/machine.MachineService/Reset",
    "/machine.MachineService/Upgrade",
    "/storage.StorageService/BlockDeviceWipe",
    "/talosbox.volume.VolumeService/Unlock",
    "/cosi.resource.State/Get",
    "/cosi.resource.State/List",
    "/cosi.resource.State/Watch",
];

/// Whether a caller holding `roles` may call `method` on a node in `mode`; the refusal names
/// the method, the roles it needs and the roles the caller had. In maintenance mode a method
/// outside [`MAINTENANCE_METHODS`] is Unimplemented, whatever the roles.
pub fn authorize<S: AsRef<str>>(method: &str, roles: &[S], mode: NodeMode) -> Result<(), Status> {
    if mode == NodeMode::Maintenance && !MAINTENANCE_METHODS.contains(&method) {
        return Err(Status::new(Code::Unimplemented, format!("{method} is not available in maintenance mode")));
    }
    let r = rule(method);
    let holds = |allowed: &[&str]| roles.iter().any(|have| allowed.contains(&have.as_ref()));
    if holds(r.roles) || (mode == NodeMode::Maintenance && holds(r.maintenance_roles)) {
        return Ok(());
    }
    let had: Vec<&str> = roles.iter().map(|r| r.as_ref()).collect();
    let mut needed = r.roles.join(" or ");
    if !r.maintenance_roles.is_empty() {
        needed.push_str(&format!(" (or {} in maintenance mode)", r.maintenance_roles.join(" or ")));
    }
    Err(Status::new(
        Code::PermissionDenied,
        format!(
            "not authorized: {method} needs {needed}; caller has {}",
            if had.is_empty() { "no roles".to_string() } else { had.join(", ") }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_follows_talos() {
        let m = NodeMode::Configured;
        let ok = |method: &str, roles: &[&str]| authorize(method, roles, m).is_ok();
        assert!(ok("/machine.MachineService/Version", &[READER]));
        assert!(ok("/machine.MachineService/Reboot", &[OPERATOR]));
        assert!(!ok("/machine.MachineService/Reboot", &[READER]));
        assert!(!ok("/machine.MachineService/Read", &[OPERATOR]), "Read is admin-only");
        assert!(ok("/machine.MachineService/Read", &[ADMIN]));
        assert!(!ok("/machine.MachineService/ApplyConfiguration", &[READER]));
        assert!(ok("/machine.MachineService/EtcdSnapshot", &[ETCD_BACKUP]));
        assert!(ok("/cosi.resource.State/Watch", &[READER]));
        assert!(!ok("/cosi.resource.State/Update", &[OPERATOR]));
        assert!(!ok("/machine.MachineService/Version", &[IMPERSONATOR]), "an impersonator alone may call nothing");
        assert!(!ok("/machine.MachineService/Version", &[] as &[&str]));
        for meta in ["/machine.MachineService/MetaWrite", "/machine.MachineService/MetaDelete"] {
            assert!(ok(meta, &[META_WRITER]), "{meta}");
            assert!(ok(meta, &[ADMIN]), "{meta}");
            assert!(!ok(meta, &[OPERATOR, READER]), "{meta}");
        }
        assert!(!ok("/machine.MachineService/Reboot", &[META_WRITER]), "os:meta:writer writes META only");
    }

    /// Every RPC the node serves has a rule of its own, so none is admin-only by oversight.
    /// trustd's Certificate is the exception: trustd authenticates it by token, not by role.
    #[test]
    fn every_served_method_has_its_own_rule() {
        let methods = crate::proto::rpc_methods().unwrap();
        assert!(methods.len() > 20, "{} methods", methods.len());
        for m in methods.iter().filter(|m| !m.path.starts_with("/securityapi.")) {
            assert!(RULES.iter().any(|(r, _)| *r == m.path), "{} has no rule", m.path);
        }
    }

    #[test]
    fn maintenance_serves_only_its_own_methods() {
        let m = NodeMode::Maintenance;
        assert!(authorize("/machine.MachineService/ApplyConfiguration", &[READER], m).is_ok());
        assert!(authorize("/machine.MachineService/Version", &[READER], m).is_ok());
        let refused = authorize("/machine.MachineService/ServiceList", &[ADMIN], m).unwrap_err();
        assert_eq!(refused.code(), Code::Unimplemented);
        assert!(refused.message().contains("maintenance"), "{}", refused.message());
        assert!(authorize("/machine.MachineService/ServiceList", &[READER], NodeMode::Configured).is_ok());
    }

    /// Talos: admin, or os:reader in maintenance only ("verified in the handler" there, by
    /// the rule here).
    #[test]
    fn block_device_wipe_is_admin_or_a_maintenance_reader() {
        let wipe = "/storage.StorageService/BlockDeviceWipe";
        assert!(authorize(wipe, &[READER], NodeMode::Maintenance).is_ok());
        assert!(authorize(wipe, &[ADMIN], NodeMode::Configured).is_ok());
        for roles in [&[READER][..], &[OPERATOR], &[OPERATOR, READER]] {
            let e = authorize(wipe, roles, NodeMode::Configured).unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{roles:?}");
        }
        assert!(authorize("/storage.StorageService/Disks", &[READER], NodeMode::Configured).is_ok());
        assert_eq!(
            authorize("/storage.StorageService/Disks", &[ADMIN], NodeMode::Maintenance).unwrap_err().code(),
            Code::Unimplemented
        );
    }

    #[test]
    fn an_unlisted_method_is_admin_only() {
        for method in ["/machine.MachineService/NoSuchThing", "/other.Service/Call", ""] {
            assert_eq!(rule(method), FALLBACK);
            assert!(authorize(method, &[OPERATOR, READER], NodeMode::Configured).is_err());
            assert!(authorize(method, &[ADMIN], NodeMode::Configured).is_ok());
        }
    }

    #[test]
    fn maintenance_exceptions_hold_only_in_maintenance() {
        let apply = "/machine.MachineService/ApplyConfiguration";
        assert!(authorize(apply, &[READER], NodeMode::Maintenance).is_ok());
        let e = authorize(apply, &[READER], NodeMode::Configured).unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
        assert_eq!(
            e.message(),
            "not authorized: /machine.MachineService/ApplyConfiguration needs os:admin \
             (or os:reader in maintenance mode); caller has os:reader"
        );
    }

    #[test]
    fn methods_are_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for (m, _) in RULES {
            assert!(seen.insert(*m), "{m} listed twice");
        }
    }
}

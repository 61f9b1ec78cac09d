//! What a Reset wipes, decided from the request and the volumes and disks the node knows, as
//! Talos decides it: the system partitions named (each must be a located volume), else the
//! whole system disk unless only user disks are asked for; user disks named by their device
//! path, never the system disk or a read-only one. The plan is pure; machined carries it out
//! in its last steps, after every filesystem is unmounted and before reboot(2), so nothing is
//! wiped under a mount.
//!
//! A bad request is refused whole, before anything changes.

use std::path::PathBuf;

pub use crate::api::node::{ResetRequest, WipeMode};

/// What the node knows of its storage.
#[derive(Debug, Clone, Default)]
pub struct Storage {
    /// (volume id, location) of each volume.
    pub volumes: Vec<(String, String)>,
    /// (device path, read-only) of each disk.
    pub disks: Vec<(String, bool)>,
    /// The system disk's device path, when there is one.
    pub system_disk: Option<String>,
}

/// What to wipe.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResetPlan {
    /// The devices to wipe, in order.
    pub wipe: Vec<PathBuf>,
    /// The configuration goes (STATE or the whole system disk is wiped, or there is no disk
    /// to keep it on): the store forgets it at once, so a reboot that outruns the wipe still
    /// comes back without it.
    pub forget_config: bool,
    /// STATE is wiped and META kept: META's record of how STATE was encrypted goes too (as in
    /// Talos), or the next boot would try to open a STATE that is no longer there.
    pub forget_state_encryption: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResetError {
    #[error("reset: wipe mode USER_DISKS does not take system partitions to wipe")]
    PartitionsWithUserDisksMode,
    #[error("reset: no volume labelled {0:?} (system partitions: {1})")]
    NoVolume(String, String),
    #[error("reset: volume {0:?} has no block device of its own to wipe")]
    NotLocated(String),
    #[error("reset: user disk {0} was not found")]
    NoDisk(String),
    #[error("reset: user disk {0} is read-only")]
    ReadOnly(String),
    #[error("reset: user disk {0} is the system disk")]
    SystemDisk(String),
}

/// The plan for `req` over `storage`.
pub fn plan(req: &ResetRequest, storage: &Storage) -> Result<ResetPlan, ResetError> {
    let mut plan = ResetPlan::default();
    if req.mode == WipeMode::UserDisks && !req.system_partitions.is_empty() {
        return Err(ResetError::PartitionsWithUserDisksMode);
    }
    if req.mode != WipeMode::SystemDisk {
        for disk in &req.user_disks {
            let Some((_, readonly)) = storage.disks.iter().find(|(path, _)| path == disk) else {
                return Err(ResetError::NoDisk(disk.clone()));
            };
            if *readonly {
                return Err(ResetError::ReadOnly(disk.clone()));
            }
            if storage.system_disk.as_deref() == Some(disk.as_str()) {
                return Err(ResetError::SystemDisk(disk.clone()));
            }
            plan.wipe.push(PathBuf::from(disk));
        }
    }
    if !req.system_partitions.is_empty() {
        for (label, wipe) in &req.system_partitions {
            let Some((_, location)) = storage.volumes.iter().find(|(id, _)| id == label) else {
                let known: Vec<&str> = storage.volumes.iter().map(|(id, _)| id.as_str()).collect();
                let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                return Err(ResetError::NoVolume(label.clone(), known));
            };
            if location.is_empty() {
                return Err(ResetError::NotLocated(label.clone()));
            }
            if *wipe {
                plan.wipe.push(PathBuf::from(location));
                if label == crate::controllers::block::volume_config::STATE {
                    plan.forget_config = true;
                }
            }
        }
        let wiped = |id: &str| req.system_partitions.iter().any(|(label, wipe)| label == id && *wipe);
        plan.forget_state_encryption = wiped(crate::controllers::block::volume_config::STATE)
            && !wiped(crate::controllers::block::volume_config::META);
    } else if req.mode != WipeMode::UserDisks {
        if let Some(disk) = &storage.system_disk {
            plan.wipe.push(PathBuf::from(disk));
        }
        plan.forget_config = true;
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage() -> Storage {
        Storage {
            volumes: vec![
                ("META".into(), "/dev/vda4".into()),
                ("STATE".into(), "/dev/vda5".into()),
                ("EPHEMERAL".into(), "/dev/vda6".into()),
                ("u-data".into(), String::new()),
            ],
            disks: vec![("/dev/vda".into(), false), ("/dev/vdb".into(), false), ("/dev/sr0".into(), true)],
            system_disk: Some("/dev/vda".into()),
        }
    }

    fn req(mode: WipeMode, parts: &[(&str, bool)], disks: &[&str]) -> ResetRequest {
        ResetRequest {
            reboot: true,
            mode,
            system_partitions: parts.iter().map(|(l, w)| (l.to_string(), *w)).collect(),
            user_disks: disks.iter().map(|d| d.to_string()).collect(),
        }
    }

    fn wipes(p: &ResetPlan) -> Vec<&str> {
        p.wipe.iter().map(|w| w.to_str().unwrap()).collect()
    }

    #[test]
    fn plans_follow_talos() {
        use WipeMode::*;
        let s = storage();
        // (request, wiped, config forgotten)
        let cases: Vec<(ResetRequest, Vec<&str>, bool)> = vec![
            (req(All, &[], &[]), vec!["/dev/vda"], true),
            (req(SystemDisk, &[], &["/dev/vdb"]), vec!["/dev/vda"], true),
            (req(All, &[], &["/dev/vdb"]), vec!["/dev/vdb", "/dev/vda"], true),
            (req(UserDisks, &[], &["/dev/vdb"]), vec!["/dev/vdb"], false),
            (req(UserDisks, &[], &[]), vec![], false),
            (req(All, &[("EPHEMERAL", true)], &[]), vec!["/dev/vda6"], false),
            (req(All, &[("STATE", true), ("EPHEMERAL", true)], &[]), vec!["/dev/vda5", "/dev/vda6"], true),
            (req(All, &[("STATE", false), ("EPHEMERAL", true)], &[]), vec!["/dev/vda6"], false),
            (req(SystemDisk, &[("META", true)], &[]), vec!["/dev/vda4"], false),
        ];
        for (r, want, forget) in cases {
            let p = plan(&r, &s).unwrap();
            assert_eq!((wipes(&p), p.forget_config), (want, forget), "{r:?}");
        }
        // META's record of STATE's encryption goes with STATE, unless META goes too (or the
        // whole disk, META on it).
        let forget = |parts: &[(&str, bool)]| plan(&req(All, parts, &[]), &s).unwrap().forget_state_encryption;
        assert!(forget(&[("STATE", true)]));
        assert!(!forget(&[("STATE", true), ("META", true)]));
        assert!(!forget(&[("STATE", false), ("EPHEMERAL", true)]));
        assert!(!forget(&[]));
    }

    #[test]
    fn a_node_without_a_system_disk_forgets_its_config_and_wipes_nothing() {
        let p = plan(&req(WipeMode::All, &[], &[]), &Storage::default()).unwrap();
        assert_eq!(p, ResetPlan { wipe: vec![], forget_config: true, forget_state_encryption: false });
    }

    #[test]
    fn bad_requests_are_refused_naming_what_is_wrong() {
        use WipeMode::*;
        let s = storage();
        let cases = [
            (req(UserDisks, &[("STATE", true)], &[]), ResetError::PartitionsWithUserDisksMode),
            (
                req(All, &[("EPHEMRAL", true)], &[]),
                ResetError::NoVolume("EPHEMRAL".into(), "META, STATE, EPHEMERAL, u-data".into()),
            ),
            (req(All, &[("u-data", true)], &[]), ResetError::NotLocated("u-data".into())),
            (req(All, &[], &["/dev/vdz"]), ResetError::NoDisk("/dev/vdz".into())),
            (req(All, &[], &["/dev/sr0"]), ResetError::ReadOnly("/dev/sr0".into())),
            (req(UserDisks, &[], &["/dev/vda"]), ResetError::SystemDisk("/dev/vda".into())),
        ];
        for (r, want) in cases {
            assert_eq!(plan(&r, &s), Err(want), "{r:?}");
        }
        assert!(ResetError::NoVolume("X".into(), "none".into()).to_string().contains("\"X\""));
        assert_eq!(WipeMode::from_wire(3), None);
    }
}

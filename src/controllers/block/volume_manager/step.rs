//! The step each volume takes in a pass (Talos's `processVolumeConfig`), as pure functions:
//! the step its phase calls for, the order volumes are taken in, whether the earlier waves
//! are ready, whether a ready volume's device has gone, and the status carried from phase to
//! phase. No device, file or clock is touched here: the controller gathers the facts, asks,
//! and carries the answer out in the phase files.
//!
//! The order of the questions is what keeps data safe: a volume is always located before it
//! is provisioned, so a volume made on an earlier boot (or before a power cut) is adopted,
//! never made again; a filesystem is made only on a volume where the probe found nothing (or
//! an old swap area, which holds nothing worth keeping); and a volume that asks for encryption
//! is never made in the clear.

use std::time::Duration;

use crate::resources::block::{VolumeConfig, VolumePhase, VolumeStatus, VolumeType, WAVE_LEGACY_USER_DISKS};

/// How long a failed volume waits before its step is tried again (Talos's ticker).
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(30);

/// What the controller does for a volume in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// Nothing to do yet; the status says why.
    Wait(String),
    /// Find the volume among the discovered ones, else provision it.
    LocateAndProvision,
    /// Grow the located partition toward its target size.
    Grow,
    /// Open or create the encryption layer (a pass-through without encryption).
    Prepare,
    /// Make the filesystem if the volume has none.
    Format,
    /// Ready; nothing more to do.
    Done,
    /// Failed earlier: go back to the phase it failed in once the retry is due.
    Retry(VolumePhase),
    /// Ready, but its device is gone (a partition dropped by a wipe, a disk taken away) and
    /// nothing is mounted from it: locate it again, which provisions it anew where the node
    /// makes it. Talos leaves such a volume ready at a path that no longer exists.
    Relocate,
}

/// The facts a step decision needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PhaseInputs {
    pub phase: VolumePhase,
    pub pre_fail_phase: VolumePhase,
    /// The parent volume (if any) is ready.
    pub parent_ready: bool,
    /// Discovery has probed every device since the last change we asked for.
    pub discovery_settled: bool,
    /// Time since the volume failed.
    pub failed_for: Duration,
    /// The volume's device is no longer among the discovered ones and nothing is mounted from it.
    pub device_gone: bool,
}

/// Talos's `processVolumeConfig`: one step per phase.
pub(super) fn next_step(i: &PhaseInputs) -> Step {
    use VolumePhase::*;
    match i.phase {
        Waiting | Missing => {
            if !i.parent_ready {
                Step::Wait("waiting for the parent volume to be ready".to_string())
            } else if !i.discovery_settled {
                Step::Wait("waiting for disk discovery to finish".to_string())
            } else {
                Step::LocateAndProvision
            }
        }
        Located => Step::Grow,
        Provisioned => Step::Prepare,
        Prepared => Step::Format,
        Ready if i.device_gone && i.discovery_settled => Step::Relocate,
        Ready | Closed => Step::Done,
        Failed if i.failed_for >= RETRY_AFTER => Step::Retry(i.pre_fail_phase),
        Failed => Step::Wait("failed; will retry".to_string()),
    }
}

/// Whether every volume of a wave below `wave` is ready; and if not, the lowest such wave.
/// `volumes` are the others the node provisions (those it only locates hold no wave back).
pub(super) fn earlier_waves_ready(wave: i64, volumes: &[(i64, VolumePhase)]) -> Result<(), i64> {
    match volumes.iter().filter(|(w, p)| *w < wave && *p != VolumePhase::Ready).map(|(w, _)| *w).min() {
        None => Ok(()),
        Some(w) => Err(w),
    }
}

/// The order volumes are taken in (Talos's `CompareVolumeConfigs`): those the node only
/// locates first (they hold nothing back), then by wave; within a wave fixed-size volumes
/// before those that grow (STATE before EPHEMERAL, or EPHEMERAL would take the room STATE
/// needs), smaller maximum sizes first (no maximum last); then by id. The partitions of a
/// `machine.disks` entry (the legacy wave, ids `<device>-<n>`) are found again by their index
/// on the disk, so they are made in the order listed, whatever their sizes.
pub(super) fn order_key<'a>(id: &'a str, config: &VolumeConfig) -> (bool, i64, bool, u64, &'a str) {
    let p = &config.provisioning;
    if p.wave == WAVE_LEGACY_USER_DISKS {
        let index = id.rsplit_once('-').and_then(|(_, n)| n.parse().ok()).unwrap_or(u64::MAX);
        return (p.is_requested(), p.wave, false, index, id);
    }
    let max = if p.partition_spec.max_size == 0 { u64::MAX } else { p.partition_spec.max_size };
    (p.is_requested(), p.wave, p.partition_spec.grow, max, id)
}

/// Whether a ready volume's device has gone: it lives on a disk (a partition or a whole disk),
/// discovery no longer lists its path, the kernel has no node for it (`node_exists` is asked
/// only then: discovery lags a partition just made, devtmpfs does not), and no mount holds it
/// (a mounted device cannot vanish under the node without the mount failing first; that volume
/// is left for the mount to report).
pub(super) fn device_gone(
    status: &VolumeStatus,
    discovered: &[&str],
    mounted: bool,
    node_exists: impl FnOnce(&str) -> bool,
) -> bool {
    matches!(status.kind, VolumeType::Partition | VolumeType::Disk)
        && status.phase == VolumePhase::Ready
        && !status.location.is_empty()
        && !mounted
        && !discovered.contains(&status.location.as_str())
        && !node_exists(&status.location)
}

/// A status carried to a new phase, keeping what earlier phases learned.
pub(super) fn advance(status: &VolumeStatus, phase: VolumePhase) -> VolumeStatus {
    VolumeStatus { phase, pre_fail_phase: VolumePhase::Waiting, error_message: String::new(), ..status.clone() }
}

/// A status failed in `phase` with `error`: Failed, remembering where to resume.
pub(super) fn fail(status: &VolumeStatus, phase: VolumePhase, error: String) -> VolumeStatus {
    VolumeStatus { phase: VolumePhase::Failed, pre_fail_phase: phase, error_message: error, ..status.clone() }
}

/// The status a fresh volume starts from.
pub(super) fn initial(config: &VolumeConfig) -> VolumeStatus {
    VolumeStatus {
        phase: VolumePhase::Waiting,
        kind: config.kind,
        filesystem: config.provisioning.filesystem_spec.kind,
        mount_spec: config.mount.clone(),
        ..VolumeStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use VolumePhase::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn inputs(phase: VolumePhase) -> PhaseInputs {
        PhaseInputs {
            phase,
            pre_fail_phase: Waiting,
            parent_ready: true,
            discovery_settled: true,
            failed_for: Duration::ZERO,
            device_gone: false,
        }
    }

    #[test]
    fn one_step_per_phase() {
        let cases: Vec<(&str, PhaseInputs, Step)> = vec![
            ("waiting locates", inputs(Waiting), Step::LocateAndProvision),
            ("missing locates again", inputs(Missing), Step::LocateAndProvision),
            ("located grows", inputs(Located), Step::Grow),
            ("provisioned prepares", inputs(Provisioned), Step::Prepare),
            ("prepared formats", inputs(Prepared), Step::Format),
            ("ready rests", inputs(Ready), Step::Done),
            (
                "ready whose device went is located again",
                PhaseInputs { device_gone: true, ..inputs(Ready) },
                Step::Relocate,
            ),
            (
                "a gone device waits for discovery to settle",
                PhaseInputs { device_gone: true, discovery_settled: false, ..inputs(Ready) },
                Step::Done,
            ),
            ("closed rests", inputs(Closed), Step::Done),
            (
                "the parent holds it",
                PhaseInputs { parent_ready: false, ..inputs(Waiting) },
                Step::Wait("waiting for the parent volume to be ready".into()),
            ),
            (
                "discovery holds it",
                PhaseInputs { discovery_settled: false, ..inputs(Missing) },
                Step::Wait("waiting for disk discovery to finish".into()),
            ),
            (
                "discovery does not hold a located volume",
                PhaseInputs { discovery_settled: false, ..inputs(Located) },
                Step::Grow,
            ),
            (
                "failed waits for the ticker",
                PhaseInputs { pre_fail_phase: Prepared, failed_for: Duration::from_secs(29), ..inputs(Failed) },
                Step::Wait("failed; will retry".into()),
            ),
            (
                "failed resumes where it failed",
                PhaseInputs { pre_fail_phase: Prepared, failed_for: RETRY_AFTER, ..inputs(Failed) },
                Step::Retry(Prepared),
            ),
            (
                "failed in locate resumes locating",
                PhaseInputs { pre_fail_phase: Waiting, failed_for: Duration::from_secs(31), ..inputs(Failed) },
                Step::Retry(Waiting),
            ),
        ];
        for (name, i, want) in cases {
            assert_eq!(next_step(&i), want, "{name}");
        }
    }

    #[test]
    fn a_wave_starts_when_earlier_ones_are_ready() {
        let some = [(-1, Ready), (-1, Prepared), (0, Waiting), (1_000_000, Waiting)];
        let failed = [(-1, Ready), (0, Failed), (1_000_000, Waiting)];
        type Case<'a> = (&'a str, i64, &'a [(i64, VolumePhase)], Result<(), i64>);
        let cases: [Case; 6] = [
            ("the first wave waits for nothing", -1, &some, Ok(())),
            ("a wave waits for a volume below it", 0, &some, Err(-1)),
            ("the lowest wave not ready is named", 1_000_000, &some, Err(-1)),
            ("a volume of the same wave holds nothing back", 0, &failed, Ok(())),
            ("a failed volume holds later waves back", 1_000_000, &failed, Err(0)),
            ("no other volume", 5, &[], Ok(())),
        ];
        for (name, wave, volumes, want) in cases {
            assert_eq!(earlier_waves_ready(wave, volumes), want, "{name}");
        }
    }

    fn vc(wave: i64, grow: bool, max: u64) -> VolumeConfig {
        let mut c = VolumeConfig::default();
        c.provisioning.wave = wave;
        c.provisioning.disk_selector.expression = "system_disk".into();
        c.provisioning.partition_spec.grow = grow;
        c.provisioning.partition_spec.min_size = MIB;
        c.provisioning.partition_spec.max_size = max;
        c
    }

    #[test]
    fn volumes_are_taken_in_talos_order() {
        // META is only located; the rest by wave, fixed before growing, smaller maximum first.
        let meta = VolumeConfig::default();
        let mut vols = [
            ("u-data", vc(0, false, 0)),
            ("u-big", vc(0, true, 0)),
            ("u-small", vc(0, true, 200 * MIB)),
            ("s-swap", vc(0, false, GIB)),
            ("r-raw", vc(0, false, GIB)),
            ("EPHEMERAL", vc(-1, true, 0)),
            ("STATE", vc(-1, false, 100 * MIB)),
            ("e-old", VolumeConfig::default()),
            ("META", meta),
        ];
        vols.sort_by(|a, b| order_key(a.0, &a.1).cmp(&order_key(b.0, &b.1)));
        let ids: Vec<_> = vols.iter().map(|v| v.0).collect();
        assert_eq!(ids, ["META", "e-old", "STATE", "EPHEMERAL", "r-raw", "s-swap", "u-data", "u-small", "u-big"]);
    }

    #[test]
    fn user_disk_partitions_are_made_in_the_order_listed() {
        // Found again by index: a smaller second partition must not be made first.
        let mut vols = [
            ("/dev/vdc-10", vc(WAVE_LEGACY_USER_DISKS, true, 0)),
            ("/dev/vdc-2", vc(WAVE_LEGACY_USER_DISKS, false, 100 * MIB)),
            ("/dev/vdc-1", vc(WAVE_LEGACY_USER_DISKS, false, GIB)),
            ("u-data", vc(0, true, 0)),
        ];
        vols.sort_by(|a, b| order_key(a.0, &a.1).cmp(&order_key(b.0, &b.1)));
        let ids: Vec<_> = vols.iter().map(|v| v.0).collect();
        assert_eq!(ids, ["u-data", "/dev/vdc-1", "/dev/vdc-2", "/dev/vdc-10"]);
    }

    #[test]
    fn a_device_is_gone_only_from_a_ready_unmounted_disk_volume() {
        let ready = |kind, location: &str| VolumeStatus {
            kind,
            phase: Ready,
            location: location.to_string(),
            ..VolumeStatus::default()
        };
        let seen = ["/dev/vdb", "/dev/vdb1"];
        let cases = [
            ("a dropped partition", ready(VolumeType::Partition, "/dev/vdb2"), false, true),
            ("a partition still there", ready(VolumeType::Partition, "/dev/vdb1"), false, false),
            ("a disk taken away", ready(VolumeType::Disk, "/dev/vdc"), false, true),
            ("mounted: left to the mount", ready(VolumeType::Partition, "/dev/vdb2"), true, false),
            ("a directory has no device", ready(VolumeType::Directory, "/var/mnt/x"), false, false),
            ("a tmpfs has no device", ready(VolumeType::Tmpfs, "tmpfs"), false, false),
            (
                "not ready yet",
                VolumeStatus { phase: Located, ..ready(VolumeType::Partition, "/dev/vdb2") },
                false,
                false,
            ),
            ("no location", ready(VolumeType::Partition, ""), false, false),
        ];
        for (name, status, mounted, want) in cases {
            assert_eq!(device_gone(&status, &seen, mounted, |_| false), want, "{name}");
        }
        // Discovery has not seen a partition made a moment ago, but the kernel has its node.
        let just_made = ready(VolumeType::Partition, "/dev/vdb2");
        assert!(!device_gone(&just_made, &seen, false, |path| path == "/dev/vdb2"));
    }

    #[test]
    fn failing_remembers_the_phase_and_advancing_forgets_the_error() {
        let s = VolumeStatus { location: "/dev/vda5".into(), ..VolumeStatus::default() };
        let f = fail(&s, Prepared, "mkfs.xfs exited 1".into());
        assert_eq!((f.phase, f.pre_fail_phase, f.location.as_str()), (Failed, Prepared, "/dev/vda5"));
        let a = advance(&f, Ready);
        assert_eq!(
            (a.phase, a.pre_fail_phase, a.error_message.as_str(), a.location.as_str()),
            (Ready, Waiting, "", "/dev/vda5")
        );
    }
}

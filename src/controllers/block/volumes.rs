//! The volume manager's decisions, as pure functions: which step a volume takes next from the
//! phase it is in (Talos's `processVolumeConfig`), the order volumes are taken in, whether a
//! volume not found may be provisioned now (its wave), which existing volume a locator adopts,
//! which disk a selector picks and the size the volume gets there, whether a filesystem is to
//! be made, and what a volume the node does not format holds. No device, file or clock is
//! touched here: the controller gathers the facts, asks, and carries the answer out.
//!
//! The order of the questions is what keeps data safe: a volume is always located before it
//! is provisioned, so a volume made on an earlier boot (or before a power cut) is adopted,
//! never made again; a filesystem is made only on a volume where the probe found nothing (or
//! an old swap area, which holds nothing worth keeping); and a volume that asks for encryption
//! is never made in the clear.

use std::time::Duration;

use crate::resources::block::{
    DiscoveredVolume, Disk, DiskMatch, FilesystemType, PartitionSpec, VolumeConfig, VolumePhase, VolumeStatus,
    VolumeType, WAVE_LEGACY_USER_DISKS,
};

/// How long a failed volume waits before its step is tried again (Talos's ticker).
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// What the controller does for a volume in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
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
pub struct PhaseInputs {
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
pub fn next_step(i: &PhaseInputs) -> Step {
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

/// The next step in closing a volume (at shutdown, or when its document goes): Talos's
/// close path, run backwards through the phases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseStep {
    /// Say `closed`: the volume's mount request goes, and the mount controller unmounts it.
    MarkClosed,
    /// Wait for the mount (and its children) to be taken down.
    WaitUnmount,
    /// Close the volume's dm-crypt mapping, now that nothing is mounted from it.
    CloseMapping,
    /// Nothing more to do.
    Done,
}

/// What closing a volume in `phase` takes next, given whether it is still mounted and whether
/// its encrypted mapping is still open.
pub fn close_step(phase: VolumePhase, mounted: bool, mapping_open: bool) -> CloseStep {
    if phase != VolumePhase::Closed {
        CloseStep::MarkClosed
    } else if mounted {
        CloseStep::WaitUnmount
    } else if mapping_open {
        CloseStep::CloseMapping
    } else {
        CloseStep::Done
    }
}

/// Whether every volume of a wave below `wave` is ready; and if not, the lowest such wave.
/// `volumes` are the others the node provisions (those it only locates hold no wave back).
pub fn earlier_waves_ready(wave: i64, volumes: &[(i64, VolumePhase)]) -> Result<(), i64> {
    match volumes.iter().filter(|(w, p)| *w < wave && *p != VolumePhase::Ready).map(|(w, _)| *w).min() {
        None => Ok(()),
        Some(w) => Err(w),
    }
}

/// What happens to a volume its locator did not find (Talos's `provisionNewVolume`): one the
/// node does not make is missing; one it makes waits until every earlier wave is ready (so a
/// user volume never races EPHEMERAL for the same free space), then is provisioned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFound {
    Missing,
    Wait(String),
    Provision,
}

pub fn not_found(config: &VolumeConfig, earlier_waves: Result<(), i64>) -> NotFound {
    if !config.provisioning.is_requested() {
        return NotFound::Missing;
    }
    match earlier_waves {
        Ok(()) => NotFound::Provision,
        Err(wave) => NotFound::Wait(format!("waiting for the volumes of wave {wave} to be ready")),
    }
}

/// The order volumes are taken in (Talos's `CompareVolumeConfigs`): those the node only
/// locates first (they hold nothing back), then by wave; within a wave fixed-size volumes
/// before those that grow (STATE before EPHEMERAL, or EPHEMERAL would take the room STATE
/// needs), smaller maximum sizes first (no maximum last); then by id. The partitions of a
/// `machine.disks` entry (the legacy wave, ids `<device>-<n>`) are found again by their index
/// on the disk, so they are made in the order listed, whatever their sizes.
pub fn order_key<'a>(id: &'a str, config: &VolumeConfig) -> (bool, i64, bool, u64, &'a str) {
    let p = &config.provisioning;
    if p.wave == WAVE_LEGACY_USER_DISKS {
        let index = id.rsplit_once('-').and_then(|(_, n)| n.parse().ok()).unwrap_or(u64::MAX);
        return (p.is_requested(), p.wave, false, index, id);
    }
    let max = if p.partition_spec.max_size == 0 { u64::MAX } else { p.partition_spec.max_size };
    (p.is_requested(), p.wave, p.partition_spec.grow, max, id)
}

/// Whether a volume of this type is ready as soon as it is asked for: a directory (made when
/// mounted) or an external share — nothing on a disk to find or make.
pub fn is_ready_at_once(kind: VolumeType) -> bool {
    matches!(kind, VolumeType::Directory | VolumeType::External)
}

/// Whether a ready volume's device has gone: it lives on a disk (a partition or a whole disk),
/// discovery no longer lists its path, the kernel has no node for it (`node_exists` is asked
/// only then: discovery lags a partition just made, devtmpfs does not), and no mount holds it
/// (a mounted device cannot vanish under the node without the mount failing first; that volume
/// is left for the mount to report).
pub fn device_gone(
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

/// The one disk a whole-disk volume's locator picks: none yet, or an error when it picks
/// several (a whole-disk volume must not guess).
pub fn one_disk<'a>(matched: &[&'a str]) -> Result<Option<&'a str>, String> {
    match matched {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(format!("multiple disks matched locator for disk volume; matched disks: {}", many.join(", "))),
    }
}

/// What a volume the node does not format (an existing or raw one) holds, from the probe's
/// name (Talos's `Format` with no filesystem wanted): one to be mounted must hold a
/// filesystem, and not a LUKS container the config says nothing of.
pub fn found_filesystem(found: &str, mounted: bool, device: &str) -> Result<FilesystemType, String> {
    match found {
        "" if mounted => Err(format!("filesystem not found on {device}")),
        "luks" if mounted => Err("volume is encrypted, but no encryption config provided".to_string()),
        other => Ok(FilesystemType::from_probe_name(other)),
    }
}

/// The outcome of a locator over the discovered volumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<'a> {
    Found(&'a DiscoveredVolume),
    NotFound,
}

/// The first discovered volume (in kernel-name order) the locator matches. A locator that
/// fails to evaluate on a volume is an error for the whole volume: it says what it is.
pub fn locate<'a, E>(
    discovered: &'a [DiscoveredVolume],
    mut matches: impl FnMut(&DiscoveredVolume) -> Result<bool, E>,
) -> Result<Lookup<'a>, E> {
    let mut sorted: Vec<&DiscoveredVolume> = discovered.iter().collect();
    sorted.sort_by(|a, b| a.dev_path.cmp(&b.dev_path));
    for v in sorted {
        if matches(v)? {
            return Ok(Lookup::Found(v));
        }
    }
    Ok(Lookup::NotFound)
}

/// Free space on a disk, as the partition table tells it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FreeSpace {
    /// The largest contiguous aligned free region, bytes.
    pub largest: u64,
    /// All free space on the disk, bytes (what a relative size is a percentage of).
    pub total: u64,
}

/// A disk as the selector sees it, with what provisioning needs to know of it.
#[derive(Debug, Clone)]
pub struct DiskCandidate<'a> {
    pub id: &'a str,
    pub disk: &'a Disk,
    pub system_disk: bool,
    /// `None`: the disk has no partition table we can add to (it carries a filesystem, or a
    /// table we cannot read) — the reason says which.
    pub free: Result<FreeSpace, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("{free} bytes free, less than the minimum size {min}")]
    TooSmall { free: u64, min: u64 },
    #[error("the maximum size leaves nothing: {max} bytes to keep free of {free}")]
    Negative { max: u64, free: u64 },
}

/// The size a partition gets in a free region (Talos's `ResolveMaxSize` and its sizing): the
/// minimum, or with `grow` all of the region up to the maximum; never less than the minimum.
pub fn partition_size(spec: &PartitionSpec, free: FreeSpace) -> Result<u64, SizeError> {
    let max = if spec.relative_max_size != 0 {
        free.total.saturating_mul(spec.relative_max_size) / 100
    } else {
        spec.max_size
    };
    let max = if spec.negative_max_size {
        if max > free.total {
            return Err(SizeError::Negative { max, free: free.total });
        }
        free.total - max
    } else {
        max
    };
    let size = if spec.grow { if max == 0 { free.largest } else { max.min(free.largest) } } else { spec.min_size };
    if size < spec.min_size || size > free.largest || size == 0 {
        return Err(SizeError::TooSmall { free: free.largest, min: spec.min_size.max(1) });
    }
    Ok(size)
}

/// Where a volume is to be provisioned, or why nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The chosen disk and the size, if any disk fits.
    pub chosen: Option<(String, u64)>,
    /// Every disk considered, in order, with the decision.
    pub matches: Vec<DiskMatch>,
}

/// Picks the first disk (in id order) the selector matches, that is writable and has room.
/// Every disk gets a line saying why it was or was not picked.
pub fn select_disk<E: std::fmt::Display>(
    spec: &PartitionSpec,
    candidates: &[DiskCandidate<'_>],
    mut matches: impl FnMut(&DiskCandidate<'_>) -> Result<bool, E>,
) -> Selection {
    let mut sorted: Vec<&DiskCandidate<'_>> = candidates.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(b.id));
    let mut chosen = None;
    let mut lines = Vec::new();
    for c in sorted {
        let mut line = DiskMatch { disk: c.id.to_string(), ..DiskMatch::default() };
        match matches(c) {
            Err(e) => line.reason = format!("selector error: {e}"),
            Ok(false) => line.reason = "selector does not match".to_string(),
            Ok(true) if c.disk.readonly => line.reason = "selector matches, but the disk is read-only".to_string(),
            Ok(true) if c.disk.cdrom => line.reason = "selector matches, but the disk is a CD-ROM".to_string(),
            Ok(true) => match &c.free {
                Err(why) => line.reason = format!("selector matches, but {why}"),
                Ok(free) => match partition_size(spec, *free) {
                    Err(e) => line.reason = format!("selector matches, but {e}"),
                    Ok(size) if chosen.is_some() => {
                        line.size = size;
                        line.reason = "selector matches; an earlier disk was picked".to_string();
                    }
                    Ok(size) => {
                        line.matched = true;
                        line.size = size;
                        line.reason = "selector matches and the volume fits".to_string();
                        chosen = Some((c.id.to_string(), size));
                    }
                },
            },
        }
        lines.push(line);
    }
    Selection { chosen, matches: lines }
}

/// What to do about a volume's filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatDecision {
    /// The wanted filesystem is there (or none is wanted): ready as it is.
    Keep,
    /// Nothing is on the volume: make the filesystem.
    Make,
    /// The wanted filesystem's formatter stopped before it finished (a power cut during
    /// mkfs): nothing can be on it, so it is made again, over the half-made one.
    Remake,
    /// Something else is on it: refuse, keeping the data.
    Refuse(String),
}

/// Decides from what the probe found (`""`: nothing recognized) on the volume, and whether
/// the probe saw it unfinished. A swap area is made afresh every time, as Talos does: what it
/// held is gone with the boot that wrote it.
pub fn format_decision(wanted: FilesystemType, found: &str, unfinished: bool) -> FormatDecision {
    match (wanted, found) {
        (FilesystemType::None, _) => FormatDecision::Keep,
        (FilesystemType::Swap, "swap") => FormatDecision::Make,
        (w, f) if f == w.probe_name() && unfinished => FormatDecision::Remake,
        (w, f) if f == w.probe_name() => FormatDecision::Keep,
        (_, "") => FormatDecision::Make,
        (w, f) => FormatDecision::Refuse(format!(
            "the volume holds {f}, not {}; it is left as it is (wipe it to have it formatted)",
            w.fstype()
        )),
    }
}

/// A status carried to a new phase, keeping what earlier phases learned.
pub fn advance(status: &VolumeStatus, phase: VolumePhase) -> VolumeStatus {
    VolumeStatus { phase, pre_fail_phase: VolumePhase::Waiting, error_message: String::new(), ..status.clone() }
}

/// A status failed in `phase` with `error`: Failed, remembering where to resume.
pub fn fail(status: &VolumeStatus, phase: VolumePhase, error: String) -> VolumeStatus {
    VolumeStatus { phase: VolumePhase::Failed, pre_fail_phase: phase, error_message: error, ..status.clone() }
}

/// The status a fresh volume starts from.
pub fn initial(config: &VolumeConfig) -> VolumeStatus {
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

    #[test]
    fn closing_unmounts_then_closes_the_mapping() {
        let cases = [
            ("a ready volume is marked first", close_step(Ready, true, true), CloseStep::MarkClosed),
            ("so is a failed one", close_step(Failed, false, false), CloseStep::MarkClosed),
            ("a waiting one too", close_step(Waiting, false, false), CloseStep::MarkClosed),
            ("mounted: wait", close_step(Closed, true, true), CloseStep::WaitUnmount),
            ("unmounted and open: close it", close_step(Closed, false, true), CloseStep::CloseMapping),
            ("unmounted and plain: done", close_step(Closed, false, false), CloseStep::Done),
        ];
        for (what, got, want) in cases {
            assert_eq!(got, want, "{what}");
        }
    }

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
        let vols = [(-1, Ready), (-1, Prepared), (0, Waiting), (1_000_000, Waiting)];
        assert_eq!(earlier_waves_ready(-1, &vols), Ok(()));
        assert_eq!(earlier_waves_ready(0, &vols), Err(-1));
        assert_eq!(earlier_waves_ready(1_000_000, &vols), Err(-1));
        let vols = [(-1, Ready), (0, Failed), (1_000_000, Waiting)];
        assert_eq!(earlier_waves_ready(0, &vols), Ok(()));
        assert_eq!(earlier_waves_ready(1_000_000, &vols), Err(0));
        assert_eq!(earlier_waves_ready(5, &[]), Ok(()));
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
    fn a_volume_not_found_is_missing_or_waits_for_its_wave() {
        let provisioned = vc(0, false, 0);
        let located_only = VolumeConfig::default();
        let cases = [
            ("the node does not make it", &located_only, Err(-1), NotFound::Missing),
            ("the node does not make it, waves or not", &located_only, Ok(()), NotFound::Missing),
            (
                "an earlier wave holds it",
                &provisioned,
                Err(-1),
                NotFound::Wait("waiting for the volumes of wave -1 to be ready".into()),
            ),
            ("its turn", &provisioned, Ok(()), NotFound::Provision),
        ];
        for (name, config, waves, want) in cases {
            assert_eq!(not_found(config, waves), want, "{name}");
        }
    }

    #[test]
    fn only_disks_and_partitions_are_looked_for() {
        use VolumeType::*;
        let cases = [
            (Partition, false),
            (Disk, false),
            (Directory, true),
            (External, true),
            (Tmpfs, false),
            (Symlink, false),
            (Overlay, false),
        ];
        for (kind, want) in cases {
            assert_eq!(is_ready_at_once(kind), want, "{kind:?}");
        }
        assert_eq!(one_disk(&[]), Ok(None));
        assert_eq!(one_disk(&["vdb"]), Ok(Some("vdb")));
        assert_eq!(
            one_disk(&["vdb", "vdc"]),
            Err("multiple disks matched locator for disk volume; matched disks: vdb, vdc".into())
        );
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
    fn an_unformatted_volume_is_what_the_probe_found() {
        use FilesystemType as F;
        let cases: [(&str, bool, Result<F, String>); 7] = [
            ("xfs", true, Ok(F::Xfs)),
            ("extfs", true, Ok(F::Ext4)),
            ("vfat", true, Ok(F::Vfat)),
            ("", false, Ok(F::None)),
            ("luks", false, Ok(F::None)),
            ("", true, Err("filesystem not found on /dev/vdb1".into())),
            ("luks", true, Err("volume is encrypted, but no encryption config provided".into())),
        ];
        for (found, mounted, want) in cases {
            assert_eq!(found_filesystem(found, mounted, "/dev/vdb1"), want, "{found:?} mounted={mounted}");
        }
    }

    fn dv(dev: &str, label: &str, name: &str) -> DiscoveredVolume {
        DiscoveredVolume {
            dev_path: dev.into(),
            partition_label: label.into(),
            name: name.into(),
            ..DiscoveredVolume::default()
        }
    }

    #[test]
    fn locate_adopts_the_first_match_in_name_order() {
        let vols = [dv("/dev/vdb1", "STATE", "xfs"), dv("/dev/vda5", "STATE", ""), dv("/dev/vda6", "EPHEMERAL", "")];
        let by_label = |l: &'static str| move |v: &DiscoveredVolume| Ok::<_, String>(v.partition_label == l);
        assert_eq!(locate(&vols, by_label("STATE")), Ok(Lookup::Found(&vols[1])));
        assert_eq!(locate(&vols, by_label("EPHEMERAL")), Ok(Lookup::Found(&vols[2])));
        assert_eq!(locate(&vols, by_label("META")), Ok(Lookup::NotFound));
        assert_eq!(locate(&vols, |_| Err("no such field".to_string())), Err("no such field".to_string()));
    }

    fn spec(min: u64, max: u64, grow: bool) -> PartitionSpec {
        PartitionSpec { min_size: min, max_size: max, grow, ..PartitionSpec::default() }
    }

    #[test]
    fn sizes_follow_min_max_grow_relative_and_negative() {
        let free = |largest, total| FreeSpace { largest, total };
        let relative = |pct, grow| PartitionSpec { relative_max_size: pct, ..spec(MIB, 0, grow) };
        let negative = |max| PartitionSpec { negative_max_size: true, ..spec(MIB, max, true) };
        type Case = (&'static str, PartitionSpec, FreeSpace, Result<u64, SizeError>);
        let cases: Vec<Case> = vec![
            ("fixed STATE", spec(100 * MIB, 100 * MIB, false), free(5 * GIB, 5 * GIB), Ok(100 * MIB)),
            ("EPHEMERAL grows into all of it", spec(2 * GIB, 0, true), free(5 * GIB, 5 * GIB), Ok(5 * GIB)),
            ("grow stops at the maximum", spec(2 * GIB, 3 * GIB, true), free(5 * GIB, 5 * GIB), Ok(3 * GIB)),
            ("grow is held to the region", spec(MIB, 10 * GIB, true), free(2 * GIB, 4 * GIB), Ok(2 * GIB)),
            (
                "too little room",
                spec(2 * GIB, 0, true),
                free(GIB, GIB),
                Err(SizeError::TooSmall { free: GIB, min: 2 * GIB }),
            ),
            (
                "min without grow must fit",
                spec(100 * MIB, 0, false),
                free(50 * MIB, 50 * MIB),
                Err(SizeError::TooSmall { free: 50 * MIB, min: 100 * MIB }),
            ),
            ("a quarter of the free space", relative(25, true), free(4 * GIB, 4 * GIB), Ok(GIB)),
            ("relative without grow takes the minimum", relative(25, false), free(4 * GIB, 4 * GIB), Ok(MIB)),
            ("leave 1 GiB free", negative(GIB), free(4 * GIB, 4 * GIB), Ok(3 * GIB)),
            (
                "leave more than there is",
                negative(5 * GIB),
                free(4 * GIB, 4 * GIB),
                Err(SizeError::Negative { max: 5 * GIB, free: 4 * GIB }),
            ),
            ("nothing asked, nothing free", spec(0, 0, true), free(0, 0), Err(SizeError::TooSmall { free: 0, min: 1 })),
        ];
        for (name, s, f, want) in cases {
            assert_eq!(partition_size(&s, f), want, "{name}");
        }
    }

    fn disk(size: u64) -> Disk {
        Disk { size, ..Disk::default() }
    }

    #[test]
    fn disk_selection_explains_every_disk() {
        let big = disk(20 * GIB);
        let ro = Disk { readonly: true, ..disk(20 * GIB) };
        let cd = Disk { cdrom: true, ..disk(GIB) };
        let free = |b| Ok(FreeSpace { largest: b, total: b });
        let candidates = [
            DiskCandidate { id: "vdc", disk: &big, system_disk: false, free: free(10 * GIB) },
            DiskCandidate { id: "vda", disk: &big, system_disk: true, free: free(GIB) },
            DiskCandidate { id: "vdb", disk: &big, system_disk: true, free: free(10 * GIB) },
            DiskCandidate { id: "sr0", disk: &cd, system_disk: true, free: free(GIB) },
            DiskCandidate { id: "vdd", disk: &ro, system_disk: true, free: free(10 * GIB) },
            DiskCandidate {
                id: "vde",
                disk: &big,
                system_disk: true,
                free: Err("it holds an xfs filesystem, not a partition table".into()),
            },
        ];
        let s = select_disk(&spec(2 * GIB, 0, true), &candidates, |c| Ok::<_, String>(c.system_disk));
        assert_eq!(s.chosen, Some(("vdb".to_string(), 10 * GIB)));
        let lines: Vec<(&str, bool, &str)> =
            s.matches.iter().map(|m| (m.disk.as_str(), m.matched, m.reason.as_str())).collect();
        assert_eq!(
            lines,
            [
                ("sr0", false, "selector matches, but the disk is a CD-ROM"),
                ("vda", false, "selector matches, but 1073741824 bytes free, less than the minimum size 2147483648"),
                ("vdb", true, "selector matches and the volume fits"),
                ("vdc", false, "selector does not match"),
                ("vdd", false, "selector matches, but the disk is read-only"),
                ("vde", false, "selector matches, but it holds an xfs filesystem, not a partition table"),
            ]
        );
        let none = select_disk(&spec(MIB, 0, false), &candidates[..1], |_| Err::<bool, _>("no such key: dsk"));
        assert_eq!(none.chosen, None);
        assert_eq!(none.matches[0].reason, "selector error: no such key: dsk");
    }

    #[test]
    fn a_filesystem_is_made_only_on_an_empty_volume() {
        use FilesystemType as F;
        let cases = [
            (F::Xfs, "", FormatDecision::Make),
            (F::Xfs, "xfs", FormatDecision::Keep),
            (F::Ext4, "extfs", FormatDecision::Keep),
            (F::None, "", FormatDecision::Keep),
            (F::None, "xfs", FormatDecision::Keep),
            (F::Swap, "", FormatDecision::Make),
            (F::Swap, "swap", FormatDecision::Make),
            (
                F::Swap,
                "xfs",
                FormatDecision::Refuse(
                    "the volume holds xfs, not swap; it is left as it is (wipe it to have it formatted)".into(),
                ),
            ),
            (
                F::Xfs,
                "ext4",
                FormatDecision::Refuse(
                    "the volume holds ext4, not xfs; it is left as it is (wipe it to have it formatted)".into(),
                ),
            ),
            (
                F::Xfs,
                "luks",
                FormatDecision::Refuse(
                    "the volume holds luks, not xfs; it is left as it is (wipe it to have it formatted)".into(),
                ),
            ),
        ];
        for (wanted, found, want) in cases {
            assert_eq!(format_decision(wanted, found, false), want, "{wanted:?} over {found:?}");
        }
        // Unfinished: the wanted filesystem half-made is made again; anything else unfinished
        // is still refused, and nothing wanted still keeps what is there.
        let unfinished = [
            (F::Xfs, "xfs", FormatDecision::Remake),
            (F::Ext4, "extfs", FormatDecision::Remake),
            (F::None, "xfs", FormatDecision::Keep),
        ];
        for (wanted, found, want) in unfinished {
            assert_eq!(format_decision(wanted, found, true), want, "{wanted:?} over an unfinished {found:?}");
        }
        assert!(matches!(format_decision(F::Ext4, "xfs", true), FormatDecision::Refuse(_)));
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

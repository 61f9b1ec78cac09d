//! Locating volumes (Talos's `internal/volumes/locate.go`): a volume is looked for among the
//! discovered ones with its locator (a whole-disk volume among the disks) before anything is
//! made, so a volume made on an earlier boot is adopted, never made again. What is done when
//! nothing matches — provision, wait for discovery, or call the volume missing — is decided
//! by [`unfound`]; the provisioning itself is [`super::partition`]'s. Nothing here writes to
//! a disk.

use std::path::Path;
use std::time::{Duration, Instant};

use super::step::advance;
use super::{StepError, VolumeManagerController, World};
use crate::block::selector::Vars;
use crate::cosi::Context;
use crate::resources::block::{DiscoveredVolume, VolumeConfig, VolumePhase, VolumeStatus, VolumeType, pretty_size};

/// How long after the first look with no device discovered a volume is still not called
/// missing (the devices' controller may not have listed them yet).
const NOTHING_DISCOVERED_GRACE: Duration = Duration::from_secs(5);

/// What happens to a volume its locator did not find (Talos's `provisionNewVolume`): one the
/// node does not make is missing; one it makes waits until every earlier wave is ready (so a
/// user volume never races EPHEMERAL for the same free space), then is provisioned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NotFound {
    Missing,
    Wait(String),
    Provision,
}

fn not_found(config: &VolumeConfig, earlier_waves: Result<(), i64>) -> NotFound {
    if !config.provisioning.is_requested() {
        return NotFound::Missing;
    }
    match earlier_waves {
        Ok(()) => NotFound::Provision,
        Err(wave) => NotFound::Wait(format!("waiting for the volumes of wave {wave} to be ready")),
    }
}

/// Whether a volume of this type is ready as soon as it is asked for: a directory (made when
/// mounted) or an external share — nothing on a disk to find or make.
pub(super) fn is_ready_at_once(kind: VolumeType) -> bool {
    matches!(kind, VolumeType::Directory | VolumeType::External)
}

/// The one disk a whole-disk volume's locator picks: none yet, or an error when it picks
/// several (a whole-disk volume must not guess).
fn one_disk<'a>(matched: &[&'a str]) -> Result<Option<&'a str>, String> {
    match matched {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(format!("multiple disks matched locator for disk volume; matched disks: {}", many.join(", "))),
    }
}

/// The outcome of a locator over the discovered volumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Lookup<'a> {
    Found(&'a DiscoveredVolume),
    NotFound,
}

/// The first discovered volume (in kernel-name order) the locator matches. A locator that
/// fails to evaluate on a volume is an error for the whole volume: it says what it is.
fn locate<'a, E>(
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

/// The status of a volume adopted where discovery found it.
fn found_at(v: &DiscoveredVolume, status: &VolumeStatus) -> VolumeStatus {
    VolumeStatus {
        location: v.dev_path.clone(),
        parent_location: v.parent_dev_path.clone(),
        partition_index: v.partition_index,
        uuid: v.uuid.clone(),
        partition_uuid: v.partition_uuid.clone(),
        size: v.size,
        pretty_size: pretty_size(v.size),
        disk_matches: Vec::new(),
        ..advance(status, VolumePhase::Located)
    }
}

/// What becomes of a volume its locator did not find, given [`not_found`]'s answer:
/// `None` to provision it now, else the status it settles in or the error it waits with.
/// Missing is said only once discovery has had its look: a partition the kernel has that
/// discovery has not shown yet may be the one (`undiscovered`), and right after start there
/// may be no device discovered at all yet (`in_grace`). Both are asked only when needed.
fn unfound(
    decision: NotFound,
    undiscovered: impl FnOnce() -> Vec<String>,
    in_grace: impl FnOnce() -> bool,
    status: &VolumeStatus,
) -> Result<Option<VolumeStatus>, StepError> {
    match decision {
        NotFound::Provision => Ok(None),
        NotFound::Missing => {
            let undiscovered = undiscovered();
            if !undiscovered.is_empty() {
                return Err(StepError::again(format!("waiting for discovery of {}", undiscovered.join(", "))));
            }
            if in_grace() {
                return Err(StepError::again("no device is discovered yet"));
            }
            Ok(Some(VolumeStatus {
                error_message: "no volume matches the locator, and the volume is not provisioned by the node".into(),
                ..advance(status, VolumePhase::Missing)
            }))
        }
        NotFound::Wait(why) => Ok(Some(VolumeStatus { error_message: why, ..advance(status, VolumePhase::Waiting) })),
    }
}

impl VolumeManagerController {
    /// Talos's `LocateAndProvision`: a directory or external volume is ready at once; a disk
    /// volume is the disk its locator picks; a partition is adopted where its locator finds
    /// it, else provisioned when the node makes it and its wave has come.
    pub(super) async fn locate_and_provision(
        &mut self,
        ctx: &Context,
        id: &str,
        config: &VolumeConfig,
        status: &VolumeStatus,
        earlier_waves: Result<(), i64>,
        world: &mut World,
    ) -> Result<VolumeStatus, StepError> {
        if is_ready_at_once(config.kind) {
            let mut next = advance(status, VolumePhase::Ready);
            if config.kind == VolumeType::External {
                next.location = config.provisioning.disk_selector.external.clone();
                next.mount_location = next.location.clone();
                next.filesystem = config.provisioning.filesystem_spec.kind;
            }
            return Ok(next);
        }
        if config.locator.is_empty() {
            return Err(StepError::failed("volume locator is not set"));
        }
        if config.kind == VolumeType::Disk {
            return self.locate_disk(config, status, world);
        }
        if let Lookup::Found(v) = self.locate_existing(config, world).map_err(StepError::failed)? {
            return Ok(found_at(v, status));
        }
        let nothing_yet = world.disks.is_empty() && world.discovered.is_empty();
        let started = &mut self.started;
        let in_grace = || nothing_yet && started.get_or_insert_with(Instant::now).elapsed() < NOTHING_DISCOVERED_GRACE;
        if let Some(settled) = unfound(not_found(config, earlier_waves), || undiscovered(world), in_grace, status)? {
            return Ok(settled);
        }
        self.provision(ctx, id, config, status, world).await
    }

    /// What `config`'s locator finds among the discovered volumes (the locator sees the disk
    /// the volume is on, as in Talos).
    pub(super) fn locate_existing<'w>(
        &mut self,
        config: &VolumeConfig,
        world: &'w World,
    ) -> Result<Lookup<'w>, String> {
        let source = &config.locator.expression;
        let locator = self.expression(source, false).map_err(|e| format!("locator {source:?}: {e}"))?;
        let disks = &world.disks;
        locate(&world.discovered, |v| {
            let on = if v.parent_dev_path.is_empty() { &v.dev_path } else { &v.parent_dev_path };
            let vars = Vars::new().with_volume(&v.cel_view())?;
            let vars = match disks.iter().find(|(_, d)| &d.dev_path == on) {
                Some((_, d)) => vars.with_disk(d)?,
                None => vars,
            };
            locator.matches(&vars)
        })
        .map_err(|e| format!("locator {source:?}: {e}"))
    }

    /// A whole-disk volume: the one disk its locator picks, as discovered.
    fn locate_disk(
        &mut self,
        config: &VolumeConfig,
        status: &VolumeStatus,
        world: &World,
    ) -> Result<VolumeStatus, StepError> {
        let source = &config.locator.disk_match;
        let matcher =
            self.expression(source, true).map_err(|e| StepError::failed(format!("disk locator {source:?}: {e}")))?;
        let mut matched = Vec::new();
        for (name, disk) in &world.disks {
            let system_disk = world.system_disk.as_deref() == Some(name.as_str());
            let hit = Vars::new()
                .with_disk(disk)
                .and_then(|vars| matcher.matches(&vars.with_system_disk(system_disk)))
                .map_err(|e| StepError::failed(format!("disk locator {source:?} on {name}: {e}")))?;
            if hit {
                matched.push(name.as_str());
            }
        }
        let Some(name) = one_disk(&matched).map_err(StepError::failed)? else {
            return Ok(VolumeStatus {
                error_message: "no disk matches the locator".into(),
                ..advance(status, VolumePhase::Waiting)
            });
        };
        let Some((_, disk)) = world.disks.iter().find(|(n, _)| n == name) else {
            return Err(StepError::failed(format!("disk {name} is gone")));
        };
        let Some(v) = world.discovered.iter().find(|v| v.dev_path == disk.dev_path) else {
            return Ok(VolumeStatus {
                error_message: format!("waiting for {} to be probed", disk.dev_path),
                ..advance(status, VolumePhase::Waiting)
            });
        };
        Ok(VolumeStatus {
            location: v.dev_path.clone(),
            parent_location: String::new(),
            partition_index: 0,
            uuid: v.uuid.clone(),
            size: v.size,
            pretty_size: pretty_size(v.size),
            disk_matches: Vec::new(),
            ..advance(status, VolumePhase::Located)
        })
    }

    /// The places volumes not located yet would be found at this pass — a partition a
    /// locator matches, a whole disk a disk volume's locator selects — as located statuses,
    /// so no wipe takes a volume's data before the volume had its chance to be found.
    pub(super) fn claims(
        &mut self,
        world: &World,
        statuses: &std::collections::BTreeMap<String, VolumeStatus>,
        configs: &[(String, VolumeConfig)],
    ) -> Vec<(String, VolumeStatus)> {
        let mut claims = Vec::new();
        for (id, config) in configs {
            if statuses.get(id).is_some_and(|s| !s.location.is_empty()) || is_ready_at_once(config.kind) {
                continue;
            }
            let at = |location: &str, parent: &str| VolumeStatus {
                location: location.to_string(),
                parent_location: parent.to_string(),
                phase: VolumePhase::Located,
                ..VolumeStatus::default()
            };
            if config.kind == VolumeType::Disk {
                let Ok(matcher) = self.expression(&config.locator.disk_match, true) else { continue };
                for (name, disk) in &world.disks {
                    let system_disk = world.system_disk.as_deref() == Some(name.as_str());
                    let hit =
                        Vars::new().with_disk(disk).and_then(|v| matcher.matches(&v.with_system_disk(system_disk)));
                    if hit.unwrap_or(false) {
                        claims.push((id.clone(), at(&disk.dev_path, "")));
                    }
                }
            } else if !config.locator.is_empty()
                && let Ok(Lookup::Found(v)) = self.locate_existing(config, world)
            {
                claims.push((id.clone(), at(&v.dev_path, &v.parent_dev_path)));
            }
        }
        claims
    }
}

/// The partitions the kernel has, of the disks known or discovered or that a discovered
/// partition is on (discovery may show a device before its disk's resource is there), that
/// discovery has not shown yet.
fn undiscovered(world: &World) -> Vec<String> {
    let mut disks: Vec<&str> = world.disks.iter().map(|(_, d)| d.dev_path.as_str()).collect();
    disks.extend(
        world
            .discovered
            .iter()
            .map(|v| if v.parent_dev_path.is_empty() { v.dev_path.as_str() } else { v.parent_dev_path.as_str() }),
    );
    disks.sort_unstable();
    disks.dedup();
    disks
        .into_iter()
        .flat_map(kernel_partitions)
        .filter(|p| !world.discovered.iter().any(|v| &v.dev_path == p))
        .collect()
}

/// The partitions the kernel has of the disk at `dev_path` (`/dev/vdb` → `/dev/vdb1`, ...),
/// from sysfs.
pub(super) fn kernel_partitions(dev_path: &str) -> Vec<String> {
    let disk = Path::new(dev_path);
    let (Some(name), Some(dir)) = (disk.file_name(), disk.parent()) else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(Path::new("/sys/class/block").join(name)) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.path().join("partition").is_file())
        .map(|e| dir.join(e.file_name()).display().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_found_is_located_where_discovery_saw_it() {
        let v = DiscoveredVolume {
            dev_path: "/dev/vda5".into(),
            parent_dev_path: "/dev/vda".into(),
            partition_index: 5,
            uuid: "fs-uuid".into(),
            partition_uuid: "part-uuid".into(),
            size: 100 << 20,
            ..DiscoveredVolume::default()
        };
        let waiting =
            VolumeStatus { error_message: "waiting for disk discovery to finish".into(), ..Default::default() };
        let s = found_at(&v, &waiting);
        assert_eq!(
            (s.phase, s.location.as_str(), s.parent_location.as_str(), s.partition_index, s.size),
            (VolumePhase::Located, "/dev/vda5", "/dev/vda", 5, 100 << 20)
        );
        assert_eq!(
            (s.uuid.as_str(), s.partition_uuid.as_str(), s.error_message.as_str()),
            ("fs-uuid", "part-uuid", "")
        );
        assert_eq!(s.pretty_size, pretty_size(100 << 20));
    }

    #[test]
    fn a_volume_not_found_is_provisioned_waits_or_is_missing() {
        type Want = Result<Option<(VolumePhase, &'static str)>, StepError>;
        let missing = "no volume matches the locator, and the volume is not provisioned by the node";
        let cases: [(&str, NotFound, Vec<String>, bool, Want); 5] = [
            ("its turn to be made", NotFound::Provision, vec!["/dev/vdb1".into()], true, Ok(None)),
            (
                "an earlier wave first",
                NotFound::Wait("wave -1".into()),
                vec![],
                false,
                Ok(Some((VolumePhase::Waiting, "wave -1"))),
            ),
            (
                "a partition discovery has not shown",
                NotFound::Missing,
                vec!["/dev/vdb1".into(), "/dev/vdb2".into()],
                false,
                Err(StepError::again("waiting for discovery of /dev/vdb1, /dev/vdb2")),
            ),
            (
                "nothing discovered yet",
                NotFound::Missing,
                vec![],
                true,
                Err(StepError::again("no device is discovered yet")),
            ),
            ("missing", NotFound::Missing, vec![], false, Ok(Some((VolumePhase::Missing, missing)))),
        ];
        for (name, decision, undiscovered, in_grace, want) in cases {
            let got = unfound(decision, || undiscovered, || in_grace, &VolumeStatus::default())
                .map(|s| s.map(|s| (s.phase, s.error_message)));
            let want = want.map(|s| s.map(|(p, m)| (p, m.to_string())));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_volume_not_found_is_missing_or_waits_for_its_wave() {
        let mut provisioned = VolumeConfig::default();
        provisioned.provisioning.disk_selector.expression = "system_disk".into();
        provisioned.provisioning.partition_spec.min_size = 1 << 20;
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
    }

    #[test]
    fn a_disk_volume_takes_one_disk_or_none() {
        type Case = (&'static str, &'static [&'static str], Result<Option<&'static str>, String>);
        let cases: [Case; 3] = [
            ("no disk yet", &[], Ok(None)),
            ("the one disk", &["vdb"], Ok(Some("vdb"))),
            (
                "several: no guessing",
                &["vdb", "vdc"],
                Err("multiple disks matched locator for disk volume; matched disks: vdb, vdc".into()),
            ),
        ];
        for (name, matched, want) in cases {
            assert_eq!(one_disk(matched), want, "{name}");
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
        let cases = [
            ("the first in name order of two", Some("STATE"), Ok(Lookup::Found(&vols[1]))),
            ("the only one", Some("EPHEMERAL"), Ok(Lookup::Found(&vols[2]))),
            ("none", Some("META"), Ok(Lookup::NotFound)),
            ("a locator that fails says why", None, Err("no such field".to_string())),
        ];
        for (name, label, want) in cases {
            let got = locate(&vols, |v| match label {
                Some(l) => Ok(v.partition_label == l),
                None => Err("no such field".to_string()),
            });
            assert_eq!(got, want, "{name}");
        }
    }
}

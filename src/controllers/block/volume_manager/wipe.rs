//! Running the `DiskWipeConfig` wipes (see [`super::super::disk_wipe`], where each disk's
//! decision is taken): first in a pass, so nothing is provisioned on a disk in the pass that
//! wipes it. A wipe runs only once the wipes done can be read from META and every disk is
//! probed, and is recorded there after it ran, so it never runs twice and is never recorded
//! without having happened.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::super::disk_wipe::{DISK_WIPE_TAG, Decision, decide, identity, parse_records, with_record};
use super::super::volume_config::META;
use super::locate::kernel_partitions;
use super::{VolumeManagerController, World, lock_disk};
use crate::cosi::{Context, ReconcileError};
use crate::resources::block::{
    DiskWipeConfig, DiskWipeOutcome, DiskWipeStatus, NAMESPACE, VolumeConfig, VolumePhase, VolumeStatus,
};

/// Why no wipe may run yet, if so: every disk must be probed (one not probed may hold a
/// volume no locator has had the chance to find), and the record must have somewhere to go
/// (META found, and a writer of it here), or the wipe would run again next boot.
fn not_yet(discovery_settled: bool, meta_found: bool, meta_writer: bool) -> Option<&'static str> {
    if !discovery_settled {
        Some("waiting for every disk to be probed")
    } else if !meta_found {
        Some("waiting for META, where the wipe is recorded")
    } else if !meta_writer {
        Some("no META writer here")
    } else {
        None
    }
}

/// A wipe recorded before is said `wiped`, not `wiped before`, when it ran in this boot.
fn as_said(mut outcome: DiskWipeOutcome, name: &str, wiped_now: &BTreeSet<(String, String)>) -> DiskWipeOutcome {
    if outcome.outcome == "wiped before" && wiped_now.contains(&(name.to_string(), outcome.identity.clone())) {
        outcome.outcome = "wiped".into();
    }
    outcome
}

impl VolumeManagerController {
    /// Runs the `DiskWipeConfig` wipes not done yet and writes each one's status; `false`
    /// when one should be tried again later.
    pub(super) async fn run_wipes(
        &mut self,
        ctx: &mut Context,
        world: &mut World,
        statuses: &BTreeMap<String, VolumeStatus>,
        configs: &[(String, VolumeConfig)],
    ) -> Result<bool, ReconcileError> {
        let wipes = ctx.list::<DiskWipeConfig>(NAMESPACE)?;
        if wipes.is_empty() {
            return Ok(true);
        }
        let mut volumes: Vec<(String, VolumeStatus)> = statuses.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        volumes.extend(self.claims(world, statuses, configs));
        let meta_path = statuses
            .get(META)
            .filter(|m| m.phase == VolumePhase::Ready && !m.location.is_empty())
            .map(|m| PathBuf::from(&m.location));
        let records = match not_yet(world.discovery_settled, meta_path.is_some(), self.meta.is_some()) {
            Some(why) => Err(why.to_string()),
            None => {
                let path = meta_path.clone().unwrap_or_default();
                ctx.blocking("reading the wipes done from META", move || {
                    crate::block::meta::load(&path)
                        .map(|m| m.get(DISK_WIPE_TAG).map(parse_records).unwrap_or_default())
                        .map_err(|e| e.to_string())
                })
                .await?
            }
        };
        let mut settled = true;
        for wipe in wipes {
            let name = wipe.metadata().id.clone();
            let outcomes = self.run_wipe(ctx, world, &name, &wipe.spec().disk_selector, &volumes, &records, &meta_path);
            let (outcomes, done) = outcomes.await?;
            settled &= done;
            ctx.apply(NAMESPACE, &name, DiskWipeStatus { disks: outcomes })?;
        }
        Ok(settled)
    }

    /// Runs wipe `name` over the disks `source` selects: each disk's outcome, and whether
    /// none has to be tried again.
    #[allow(clippy::too_many_arguments)]
    async fn run_wipe(
        &mut self,
        ctx: &mut Context,
        world: &mut World,
        name: &str,
        source: &str,
        volumes: &[(String, VolumeStatus)],
        records: &Result<BTreeSet<(String, String)>, String>,
        meta_path: &Option<PathBuf>,
    ) -> Result<(Vec<DiskWipeOutcome>, bool), ReconcileError> {
        let mut settled = true;
        let mut outcomes = Vec::new();
        let matcher = match self.expression(source, true) {
            Ok(m) => m,
            Err(e) => {
                outcomes
                    .push(DiskWipeOutcome { outcome: format!("disk selector {source:?}: {e}"), ..Default::default() });
                return Ok((outcomes, settled));
            }
        };
        for (disk_id, disk) in world.disks.clone() {
            let system_disk = world.system_disk.as_deref() == Some(disk_id.as_str());
            let hit = crate::block::selector::Vars::new()
                .with_disk(&disk)
                .and_then(|vars| matcher.matches(&vars.with_system_disk(system_disk)));
            match hit {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    outcomes.push(DiskWipeOutcome {
                        dev_path: disk.dev_path.clone(),
                        outcome: format!("disk selector {source:?}: {e}"),
                        ..Default::default()
                    });
                    continue;
                }
            }
            let records = match records {
                Ok(r) => r,
                Err(why) => {
                    settled = false;
                    outcomes.push(DiskWipeOutcome {
                        dev_path: disk.dev_path.clone(),
                        identity: identity(&disk).unwrap_or_default(),
                        outcome: format!("not wiped yet: {why}"),
                    });
                    continue;
                }
            };
            let identity = match decide(name, &disk, system_disk, volumes, records) {
                Decision::Done(outcome) => {
                    outcomes.push(as_said(outcome, name, &self.wiped_now));
                    continue;
                }
                Decision::Wipe { identity } => identity,
            };
            let dev_path = disk.dev_path.clone();
            let wiped = ctx.blocking("wiping a disk", move || wipe_disk(&dev_path)).await?;
            let recorded = match (wiped, meta_path, &self.meta) {
                (Ok(()), Some(path), Some(meta)) => {
                    let (n, i) = (name.to_string(), identity.clone());
                    meta.update(path.clone(), move |m| m.set(DISK_WIPE_TAG, with_record(m.get(DISK_WIPE_TAG), &n, &i)))
                        .await
                        .map_err(|e| format!("wiped, but recording it in META failed: {e}"))
                }
                (Ok(()), _, _) => Err("wiped, but META is gone".to_string()),
                (Err(e), _, _) => Err(e),
            };
            let outcome = match recorded {
                Ok(()) => {
                    crate::kernel::console::line(&format!(
                        "wipe {name}: {} ({identity}) wiped, and recorded in META",
                        disk.dev_path
                    ));
                    self.refresh += 1;
                    world.discovery_settled = false;
                    self.wiped_now.insert((name.to_string(), identity.clone()));
                    "wiped".to_string()
                }
                Err(e) => {
                    crate::kernel::console::line(&format!("wipe {name}: {}: {e}", disk.dev_path));
                    settled = false;
                    format!("not wiped: {e}")
                }
            };
            outcomes.push(DiskWipeOutcome { dev_path: disk.dev_path.clone(), identity, outcome });
        }
        Ok((outcomes, settled))
    }
}

/// Wipes the disk at `dev_path` (the fast method: its first and last MiB, where the partition
/// tables and every signature are), drops the kernel's partitions of it, and announces the
/// change, so discovery probes it again.
fn wipe_disk(dev_path: &str) -> Result<(), String> {
    let path = Path::new(dev_path);
    let partitions = kernel_partitions(dev_path);
    let device = lock_disk(path)?;
    crate::block::wipe::fast_wipe(path).map_err(|e| e.to_string())?;
    for part in partitions {
        let Some(name) = Path::new(&part).file_name() else { continue };
        let number = std::fs::read_to_string(Path::new("/sys/class/block").join(name).join("partition"))
            .ok()
            .and_then(|n| n.trim().parse::<u32>().ok());
        if let Some(n) = number {
            device.delete_partition(n).map_err(|e| format!("dropping partition {n} of {dev_path}: {e}"))?;
        }
    }
    if let Some(name) = path.file_name() {
        let _ = std::fs::write(Path::new("/sys/class/block").join(name).join("uevent"), "change");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_wipe_runs_before_every_disk_is_probed_and_meta_can_record_it() {
        let cases = [
            ("everything there", true, true, true, None),
            ("a disk not probed", false, true, true, Some("waiting for every disk to be probed")),
            ("not probed, no META either", false, false, false, Some("waiting for every disk to be probed")),
            ("META not found", true, false, true, Some("waiting for META, where the wipe is recorded")),
            ("META not found, no writer", true, false, false, Some("waiting for META, where the wipe is recorded")),
            ("no writer", true, true, false, Some("no META writer here")),
        ];
        for (name, settled, found, writer, want) in cases {
            assert_eq!(not_yet(settled, found, writer), want, "{name}");
        }
    }

    #[test]
    fn a_wipe_done_in_this_boot_says_wiped() {
        let now = BTreeSet::from([("w".to_string(), "wwid:a".to_string())]);
        let said = |outcome: &str, wipe: &str, identity: &str| {
            let o = DiskWipeOutcome { identity: identity.into(), outcome: outcome.into(), ..Default::default() };
            as_said(o, wipe, &now).outcome
        };
        let cases = [
            ("wiped in this boot", said("wiped before", "w", "wwid:a"), "wiped"),
            ("wiped in an earlier boot", said("wiped before", "w", "wwid:b"), "wiped before"),
            ("another wipe of the same disk", said("wiped before", "v", "wwid:a"), "wiped before"),
            ("refused stays refused", said("not wiped: the system disk", "w", "wwid:a"), "not wiped: the system disk"),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "{name}");
        }
    }
}

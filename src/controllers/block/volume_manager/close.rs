//! Closing volumes (Talos's `internal/volumes/close.go`): a volume whose document goes, or
//! every volume once machined tears the lifecycle down, is marked closed, waited for until
//! the mount controller has unmounted it, and then its dm-crypt mapping is closed. The step
//! each takes is [`close_step`]'s; the rest of this file carries it out, and never unmounts
//! anything itself.

use std::collections::BTreeMap;

use super::step::advance;
use super::{CLOSE_RETRY, VolumeManagerController, World};
use crate::block::luks2;
use crate::cosi::{Context, Controller, ReconcileError, Resource};
use crate::resources::block::{EncryptionProvider, NAMESPACE, VolumeLifecycle, VolumePhase, VolumeStatus};

/// The most close steps one volume takes in a pass: mark, close the mapping, done.
const MAX_CLOSE_STEPS: usize = 3;

/// The next step in closing a volume (at shutdown, or when its document goes): Talos's
/// close path, run backwards through the phases.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CloseStep {
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
fn close_step(phase: VolumePhase, mounted: bool, mapping_open: bool) -> CloseStep {
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

/// Whether every volume but META (which is never opened) is closed, given each one's answer.
fn all_closed(answers: impl IntoIterator<Item = (String, bool)>) -> bool {
    answers.into_iter().filter(|(id, _)| id != super::super::volume_config::META).all(|(_, closed)| closed)
}

impl VolumeManagerController {
    /// The node is going down: every volume but META is closed, then the lifecycle let go.
    pub(super) async fn close_all(
        &mut self,
        ctx: &mut Context,
        lifecycle: &Resource<VolumeLifecycle>,
        statuses: &BTreeMap<String, VolumeStatus>,
        world: &World,
    ) -> Result<(), ReconcileError> {
        let mut answers = Vec::new();
        for (id, status) in statuses {
            if id != super::super::volume_config::META {
                answers.push((id.clone(), self.close(ctx, id, status, world.mounted.contains(id)).await?));
            }
        }
        if all_closed(answers) {
            if lifecycle.metadata().finalizers.contains(&self.name()) {
                crate::kernel::console::line("volumes: every volume is closed");
            }
            ctx.release(lifecycle)?;
        } else {
            ctx.requeue_after(CLOSE_RETRY);
        }
        Ok(())
    }

    /// Takes volume `id` one step further in being closed (see [`close_step`]): true
    /// once it is closed.
    pub(super) async fn close(
        &mut self,
        ctx: &mut Context,
        id: &str,
        status: &VolumeStatus,
        mounted: bool,
    ) -> Result<bool, ReconcileError> {
        let mapping = luks2::mapping_name(id);
        let mut status = status.clone();
        for _ in 0..MAX_CLOSE_STEPS {
            let mapping_open = status.encryption_provider == EncryptionProvider::Luks2 && {
                let name = mapping.clone();
                ctx.blocking("looking up a dm-crypt mapping", move || crate::kernel::dm::find(&name))
                    .await?
                    .is_ok_and(|m| m.is_some())
            };
            match close_step(status.phase, mounted, mapping_open) {
                CloseStep::MarkClosed => {
                    crate::kernel::console::line(&format!("volume {id}: closing"));
                    status = advance(&status, VolumePhase::Closed);
                    let labels = ctx
                        .get::<VolumeStatus>(NAMESPACE, id)?
                        .map(|r| r.metadata().labels.clone())
                        .unwrap_or_default();
                    ctx.apply_labeled(NAMESPACE, id, status.clone(), labels)?;
                }
                CloseStep::WaitUnmount => return Ok(false),
                CloseStep::CloseMapping => {
                    let name = mapping.clone();
                    match ctx.blocking("closing a dm-crypt mapping", move || crate::kernel::dm::remove(&name)).await? {
                        Ok(_) => crate::kernel::console::line(&format!("volume {id}: closed {mapping}")),
                        Err(e) => {
                            crate::kernel::console::line(&format!("volume {id}: closing {mapping}: {e}; trying again"));
                            return Ok(false);
                        }
                    }
                }
                CloseStep::Done => return Ok(true),
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use VolumePhase::*;

    #[test]
    fn the_node_goes_down_once_every_volume_but_meta_is_closed() {
        let answers = |list: &[(&str, bool)]| list.iter().map(|(i, c)| (i.to_string(), *c)).collect::<Vec<_>>();
        let cases = [
            ("nothing open", answers(&[]), true),
            ("all closed", answers(&[("STATE", true), ("EPHEMERAL", true)]), true),
            ("one still mounted", answers(&[("STATE", true), ("EPHEMERAL", false)]), false),
            ("META is never waited for", answers(&[("META", false), ("STATE", true)]), true),
        ];
        for (name, given, want) in cases {
            assert_eq!(all_closed(given), want, "{name}");
        }
    }

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
}

//! `MountStatusController` (Talos's `block.MountStatusController`): one `VolumeMountStatus`
//! per requester of each mount the mount controller made, id that of the requester's
//! `VolumeMountRequest`, saying where the volume is mounted and how. Each `MountStatus` is held
//! with this controller's finalizer while its `VolumeMountStatus`es stand, so a requester
//! that holds its own with a finalizer keeps the mount's status until it has let go. Pure: it
//! writes `VolumeMountStatus`es only, and never touches a mount.

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::block::{MountStatus, NAMESPACE, VolumeMountStatus};

/// The `VolumeMountStatus`es a mount gives, by id: one per requester.
pub fn per_requester(status: &MountStatus) -> Vec<(String, VolumeMountStatus)> {
    let request = &status.spec;
    request
        .requester_ids
        .iter()
        .zip(&request.requesters)
        .map(|(id, requester)| {
            let spec = VolumeMountStatus {
                volume_id: status.volume_id.clone(),
                requester: requester.clone(),
                target: status.target.clone(),
                read_only: status.read_only,
                detached: request.detached,
                disable_access_time: request.disable_access_time,
                secure: request.secure,
                no_exec: request.no_exec,
            };
            (id.clone(), spec)
        })
        .collect()
}

#[derive(Default)]
pub struct MountStatusController;

#[async_trait::async_trait]
impl Controller for MountStatusController {
    fn name(&self) -> String {
        "MountStatusController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::strong::<MountStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<VolumeMountStatus>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        ctx.start_tracking_outputs();
        for mount in ctx.list::<MountStatus>(NAMESPACE)? {
            let wanted = per_requester(mount.spec());
            if mount.is_running() {
                ctx.hold(&mount)?;
                for (id, spec) in wanted {
                    ctx.apply(NAMESPACE, &id, spec)?;
                }
                continue;
            }
            // The mount is going: its requesters' statuses go first, then the mount is let go.
            let mut gone = true;
            for (id, _) in wanted {
                gone &= ctx.remove::<VolumeMountStatus>(NAMESPACE, &id)?;
            }
            if gone {
                ctx.release(&mount)?;
            }
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::block::MountRequest;

    #[test]
    fn one_status_per_requester_with_the_mounts_target() {
        let status = MountStatus {
            spec: MountRequest {
                volume_id: "EPHEMERAL".into(),
                requesters: vec!["VolumeConfigController".into(), "kubelet".into()],
                requester_ids: vec!["EPHEMERAL".into(), "kubelet-var".into()],
                secure: true,
                ..MountRequest::default()
            },
            target: "/var".into(),
            volume_id: "EPHEMERAL".into(),
            ..MountStatus::default()
        };
        let got = per_requester(&status);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].0, "kubelet-var");
        assert_eq!(got[1].1.requester, "kubelet");
        assert_eq!(got[1].1.target, "/var");
        assert!(got[1].1.secure && !got[1].1.read_only);
        assert!(per_requester(&MountStatus::default()).is_empty());
    }
}

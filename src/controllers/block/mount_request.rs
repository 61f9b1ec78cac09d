//! `MountRequestController` (Talos's `block.MountRequestController`): one `MountRequest` per
//! ready volume that someone asked to have mounted, merging every `VolumeMountRequest` for it
//! — read-only and detached only if every requester says so; no access times, nosuid/nodev
//! and noexec if any requester asks — and naming the parent mount it goes under (the
//! volume's `mountSpec.parentId`). A volume that is not ready, or on its way out, has none,
//! and the mount controller takes its mount down. Pure: it writes `MountRequest`s only.

use std::collections::BTreeMap;

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::block::{MountRequest, NAMESPACE, VolumeMountRequest, VolumePhase, VolumeStatus};

/// The mount requests wanted, by volume id, from the `(id, request)`s and the statuses of the
/// ready volumes (`ready`: volume id → its status, only those ready and not on their way out).
pub fn merge(
    requests: &[(String, VolumeMountRequest)],
    ready: &BTreeMap<String, VolumeStatus>,
) -> BTreeMap<String, MountRequest> {
    let mut wanted: BTreeMap<String, MountRequest> = BTreeMap::new();
    for (id, r) in requests {
        let Some(status) = ready.get(&r.volume_id) else { continue };
        let m = wanted.entry(r.volume_id.clone()).or_insert_with(|| MountRequest {
            volume_id: r.volume_id.clone(),
            read_only: r.read_only,
            detached: r.detached,
            disable_access_time: r.disable_access_time,
            secure: r.secure,
            no_exec: r.no_exec,
            ..MountRequest::default()
        });
        m.requesters.push(r.requester.clone());
        m.requester_ids.push(id.clone());
        m.read_only &= r.read_only;
        m.detached &= r.detached;
        m.disable_access_time |= r.disable_access_time;
        m.secure |= r.secure;
        m.no_exec |= r.no_exec;
        m.parent_mount_id = status.mount_spec.parent_id.clone();
    }
    wanted
}

#[derive(Default)]
pub struct MountRequestController;

#[async_trait::async_trait]
impl Controller for MountRequestController {
    fn name(&self) -> String {
        "MountRequestController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<VolumeMountRequest>(NAMESPACE), Input::weak::<VolumeStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<MountRequest>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let ready: BTreeMap<String, VolumeStatus> = ctx
            .list::<VolumeStatus>(NAMESPACE)?
            .into_iter()
            .filter(|r| r.is_running() && r.spec().phase == VolumePhase::Ready)
            .map(|r| (r.metadata().id.clone(), r.spec().clone()))
            .collect();
        let requests: Vec<(String, VolumeMountRequest)> = ctx
            .list::<VolumeMountRequest>(NAMESPACE)?
            .into_iter()
            .filter(|r| r.is_running())
            .map(|r| (r.metadata().id.clone(), r.spec().clone()))
            .collect();
        ctx.start_tracking_outputs();
        for (id, request) in merge(&requests, &ready) {
            ctx.apply(NAMESPACE, &id, request)?;
        }
        // Those no longer wanted are torn down, and go once the mount controller has unmounted.
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::block::MountSpec;

    fn vmr(volume: &str, requester: &str, f: impl Fn(&mut VolumeMountRequest)) -> VolumeMountRequest {
        let mut r = VolumeMountRequest { volume_id: volume.into(), requester: requester.into(), ..Default::default() };
        f(&mut r);
        r
    }

    #[test]
    fn requests_merge_as_talos_merges_them() {
        let ready = BTreeMap::from([
            (
                "u-data".to_string(),
                VolumeStatus {
                    mount_spec: MountSpec { parent_id: "/var/mnt".into(), ..Default::default() },
                    ..Default::default()
                },
            ),
            ("EPHEMERAL".to_string(), VolumeStatus::default()),
        ]);
        let requests = vec![
            (
                "u-data".to_string(),
                vmr("u-data", "VolumeConfigController", |r| {
                    r.read_only = true;
                    r.secure = true;
                }),
            ),
            (
                "backup".to_string(),
                vmr("u-data", "backup", |r| {
                    r.read_only = false;
                    r.no_exec = true;
                    r.detached = true;
                }),
            ),
            (
                "EPHEMERAL".to_string(),
                vmr("EPHEMERAL", "sequencer", |r| {
                    r.read_only = true;
                    r.disable_access_time = true;
                }),
            ),
            ("u-late".to_string(), vmr("u-late", "VolumeConfigController", |_| {})),
        ];
        let got = merge(&requests, &ready);
        assert_eq!(got.keys().collect::<Vec<_>>(), ["EPHEMERAL", "u-data"], "a volume not ready has none");
        let data = &got["u-data"];
        assert_eq!(
            (data.read_only, data.detached, data.secure, data.no_exec, data.disable_access_time),
            (false, false, true, true, false),
            "read-only and detached if all say so; secure and noexec if any"
        );
        assert_eq!(data.requesters, ["VolumeConfigController", "backup"]);
        assert_eq!(data.requester_ids, ["u-data", "backup"]);
        assert_eq!(data.parent_mount_id, "/var/mnt");
        let eph = &got["EPHEMERAL"];
        assert_eq!((eph.read_only, eph.disable_access_time, eph.parent_mount_id.as_str()), (true, true, ""));
    }
}

//! `SystemDiskController`: the disk the OS lives on is the one holding the META volume (as in
//! Talos): once META is located, its parent disk becomes the `SystemDisk`, which the
//! `system_disk` of CEL disk selectors means. No META: no system disk, and volumes that want
//! one wait.

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::block::{NAMESPACE, SystemDisk, VolumePhase, VolumeStatus};

pub const META_VOLUME: &str = "META";

#[derive(Default)]
pub struct SystemDiskController;

#[async_trait::async_trait]
impl Controller for SystemDiskController {
    fn name(&self) -> String {
        "SystemDiskController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<VolumeStatus>(NAMESPACE).with_id(META_VOLUME)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<SystemDisk>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        ctx.start_tracking_outputs();
        if let Some(meta) = ctx.get::<VolumeStatus>(NAMESPACE, META_VOLUME)?
            && meta.spec().phase == VolumePhase::Ready
            && let Some(disk_id) = meta.spec().parent_location.strip_prefix("/dev/")
        {
            let spec = SystemDisk { disk_id: disk_id.to_string(), dev_path: meta.spec().parent_location.clone() };
            ctx.apply(NAMESPACE, SystemDisk::ID, spec)?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

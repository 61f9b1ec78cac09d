//! `DisksController`: the `Disk` of every block device that is a disk, from what sysfs says
//! of it (size, sector and I/O sizes, read-only, model, serial, WWID, modalias, transport,
//! rotational, CD-ROM, bus path, and the by-id/by-path names udev would give it). Reads sysfs
//! only; woken by the `BlockDevice`s.

use std::path::PathBuf;

use crate::block::sysblock;
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::block::{BlockDevice, Disk, NAMESPACE};

pub struct DisksController {
    sys_block: PathBuf,
    dev: PathBuf,
}

impl DisksController {
    pub fn new() -> Self {
        Self::at(PathBuf::from("/sys/block"), PathBuf::from("/dev"))
    }

    pub fn at(sys_block: PathBuf, dev: PathBuf) -> Self {
        DisksController { sys_block, dev }
    }
}

impl Default for DisksController {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait::async_trait]
impl Controller for DisksController {
    fn name(&self) -> String {
        "DisksController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<BlockDevice>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<Disk>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let names: Vec<String> = ctx
            .list::<BlockDevice>(NAMESPACE)?
            .into_iter()
            .filter(|d| d.spec().kind == "disk")
            .map(|d| d.metadata().id.clone())
            .collect();
        let (sys_block, dev) = (self.sys_block.clone(), self.dev.clone());
        let disks = ctx
            .blocking("reading disks from sysfs", move || {
                names
                    .into_iter()
                    .filter_map(|n| Some((n.clone(), sysblock::disk(&sys_block, &dev, &n)?)))
                    .collect::<Vec<_>>()
            })
            .await?;
        ctx.start_tracking_outputs();
        for (name, disk) in disks {
            ctx.apply(NAMESPACE, &name, disk)?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

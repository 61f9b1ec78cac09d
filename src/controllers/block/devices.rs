//! `DevicesController`: every block device the kernel has, disk or partition, as a
//! `BlockDevice` (id the kernel name), woken by the kernel's block uevents. A device the kernel
//! announces a change of gets its `generation` moved on, which tells the discovery to probe it
//! again. It only reads sysfs; it never opens a device.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::block::sysblock;
use crate::cosi::{Context, Controller, EventSource, Input, Output, ReconcileError, SourceError, Waker};
use crate::kernel::uevent::UeventSocket;
use crate::resources::block::{BlockDevice, NAMESPACE};

/// Kernel names the uevents said changed, since the last reconcile.
type Changed = Arc<Mutex<BTreeSet<String>>>;

pub struct DevicesController {
    sys_class_block: PathBuf,
    changed: Changed,
    generations: BTreeMap<String, (BlockDevice, u64)>,
    listen: bool,
    only: Option<Vec<String>>,
}

impl DevicesController {
    /// Reads `/sys/class/block` and listens to the kernel's uevents.
    pub fn new() -> Self {
        Self::at(PathBuf::from("/sys/class/block"), true)
    }

    /// Reads `sys_class_block`; with `listen`, also the kernel's uevents (tests of a fake
    /// tree wake the controller themselves).
    pub fn at(sys_class_block: PathBuf, listen: bool) -> Self {
        DevicesController {
            sys_class_block,
            changed: Changed::default(),
            generations: BTreeMap::new(),
            listen,
            only: None,
        }
    }

    /// Sees only the disks `names` and their partitions: a test's loop devices, among a
    /// host's disks the volume controllers must never touch.
    pub fn only<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.only = Some(names.into_iter().map(Into::into).collect());
        self
    }
}

impl Default for DevicesController {
    fn default() -> Self {
        Self::new()
    }
}

struct BlockUevents {
    changed: Changed,
}

#[async_trait::async_trait]
impl EventSource for BlockUevents {
    fn name(&self) -> String {
        "block uevents".to_string()
    }

    async fn run(&mut self, waker: &Waker, cancel: &CancellationToken) -> Result<(), SourceError> {
        let mut socket = UeventSocket::open()?;
        // Whatever happened before the socket opened is covered by the full reconcile that
        // follows a (re)start.
        waker.wake();
        loop {
            let event = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                e = socket.next() => e?,
            };
            if event.subsystem() != Some("block") {
                continue;
            }
            if let (Some(name), Ok(mut changed)) = (event.devname(), self.changed.lock()) {
                changed.insert(name.to_string());
            }
            waker.wake();
        }
    }
}

#[async_trait::async_trait]
impl Controller for DevicesController {
    fn name(&self) -> String {
        "DevicesController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<BlockDevice>()]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        if !self.listen {
            return Vec::new();
        }
        vec![Box::new(BlockUevents { changed: self.changed.clone() })]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let dir = self.sys_class_block.clone();
        let listed = ctx.blocking("listing block devices", move || sysblock::list(&dir)).await?;
        let changed = self.changed.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default();
        let mut next = BTreeMap::new();
        ctx.start_tracking_outputs();
        let only = self.only.clone();
        let seen = |l: &sysblock::Listed| {
            only.as_ref().is_none_or(|disks| disks.iter().any(|d| &l.name == d || &l.device.parent == d))
        };
        for l in listed.into_iter().filter(seen) {
            let generation = match self.generations.get(&l.name) {
                Some((seen, g)) if *seen == l.device && !changed.contains(&l.name) => *g,
                Some((_, g)) => g + 1,
                None => 0,
            };
            let device = BlockDevice { generation, ..l.device.clone() };
            ctx.apply(NAMESPACE, &l.name, device)?;
            next.insert(l.name, (l.device, generation));
        }
        ctx.cleanup_outputs()?;
        self.generations = next;
        Ok(())
    }
}

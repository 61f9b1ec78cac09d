//! `MetaLoadController`: the keys of the META partition as `MetaKey` resources (Talos's
//! `MetaKeys.runtime.talos.dev`, id `0x0a` for tag 10), read from the partition once its
//! volume is ready and again after every write the node's META store makes.
//!
//! Only reads: the partition is written by the store alone (the API's MetaWrite and
//! MetaDelete). While the META volume is not ready (not yet, or closing at shutdown) the keys
//! last read stay, as META outlives every other volume; a partition that cannot be read is an
//! error and the keys already shown stay until it can.

use std::path::PathBuf;

use tokio::sync::watch;

use crate::block::meta::{self, Origin};
use crate::controllers::block::system_disk::META_VOLUME;
use crate::cosi::{Changes, Context, Controller, EventSource, Input, Output, ReconcileError};
use crate::resources::block::{self as blk, VolumePhase, VolumeStatus};
use crate::resources::runtime::{MetaKey, NAMESPACE};

pub struct MetaLoadController {
    writes: watch::Receiver<u64>,
    /// What was last said on the console, so a reload says nothing new unless something is.
    reported: Option<(PathBuf, Origin)>,
}

impl MetaLoadController {
    /// `writes`: the META store's write counter ([`meta::MetaStore::subscribe`]).
    pub fn new(writes: watch::Receiver<u64>) -> Self {
        MetaLoadController { writes, reported: None }
    }
}

#[async_trait::async_trait]
impl Controller for MetaLoadController {
    fn name(&self) -> String {
        "MetaLoadController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<VolumeStatus>(blk::NAMESPACE).with_id(META_VOLUME)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<MetaKey>()]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(Changes::new("META writes", self.writes.clone()))]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let Some(volume) = ctx.get::<VolumeStatus>(blk::NAMESPACE, META_VOLUME)? else {
            return Ok(());
        };
        let spec = volume.spec();
        let device = if spec.mount_location.is_empty() { &spec.location } else { &spec.mount_location };
        if spec.phase != VolumePhase::Ready || device.is_empty() {
            return Ok(());
        }
        let device = PathBuf::from(device);
        let path = device.clone();
        let loaded = ctx.blocking("reading META", move || meta::load(&path)).await??;

        let report = (device, loaded.origin().clone());
        if self.reported.as_ref() != Some(&report) {
            let (device, origin) = &report;
            let from = match origin {
                Origin::Blank => "blank".to_string(),
                Origin::First => "copy 1".to_string(),
                Origin::Second { first } => format!("copy 2, copy 1 being damaged ({first})"),
            };
            let keys = loaded.iter().count();
            crate::kernel::console::line(&format!("META: {keys} key(s) on {} ({from})", device.display()));
            self.reported = Some(report);
        }

        ctx.start_tracking_outputs();
        for (tag, value) in loaded.iter() {
            ctx.apply(NAMESPACE, &MetaKey::id(tag), MetaKey { value: String::from_utf8_lossy(value).into_owned() })?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::meta::{MetaStore, tag};
    use crate::cosi::Harness;

    fn meta_volume(phase: VolumePhase, device: &std::path::Path) -> VolumeStatus {
        VolumeStatus { phase, location: device.display().to_string(), ..VolumeStatus::default() }
    }

    #[tokio::test]
    async fn keys_follow_the_partition_once_its_volume_is_ready() {
        let part = tempfile::NamedTempFile::new().unwrap();
        part.as_file().set_len(meta::PARTITION_SIZE).unwrap();
        let store = MetaStore::new();
        let path = part.path().to_path_buf();
        store.update(path.clone(), |m| m.set(tag::UPGRADE, "v1.9.0")).await.unwrap();
        store.update(path.clone(), |m| m.set(tag::METAL_NETWORK_PLATFORM_CONFIG, vec![b'a', 0xff])).await.unwrap();

        let h = Harness::start(vec![Box::new(MetaLoadController::new(store.subscribe()))]).unwrap();
        h.seed(blk::NAMESPACE, META_VOLUME, meta_volume(VolumePhase::Ready, part.path())).unwrap();
        h.assert_spec(NAMESPACE, "0x06", &MetaKey { value: "v1.9.0".into() }).await;
        h.assert_spec(NAMESPACE, "0x0a", &MetaKey { value: "a\u{fffd}".into() }).await;

        // A write through the store shows without any change to the volume.
        store.update(path.clone(), |m| m.set(tag::USER_RESERVED1, "mine")).await.unwrap();
        h.assert_spec(NAMESPACE, "0x0c", &MetaKey { value: "mine".into() }).await;
        store.update(path.clone(), |m| Ok(m.delete(tag::UPGRADE))).await.unwrap();
        h.assert_absent::<MetaKey>(NAMESPACE, "0x06").await;

        let keys = h.assert_list::<MetaKey, _>(NAMESPACE, "two keys", |l| l.len() == 2).await;
        assert_eq!(keys.iter().map(|k| k.id().to_string()).collect::<Vec<_>>(), ["0x0a", "0x0c"]);
        h.stop().await;
    }
}

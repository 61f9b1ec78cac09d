//! `StateEncryptionMetaController`: keeps STATE's encryption in META (tag 9, Talos's
//! `StateEncryptionConfig`) as the configuration in force says it, so that at the next boot
//! STATE can be opened before the configuration on it can be read.
//!
//! It writes only when the configuration encrypts STATE and META holds something else (not
//! yet, or another key set). It never removes the key: a configuration that stops saying how
//! STATE is encrypted does not decrypt it, and the node would not open it again without the
//! key; the key goes when STATE does (a reset that wipes STATE). Writes go through the node's
//! one META writer; the keys shown follow from `MetaLoadController` reading them back.

use std::sync::Arc;

use crate::block::meta::MetaStore;
use crate::config::block::SystemVolume;
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::block::{self as blk, VolumePhase, VolumeStatus};
use crate::resources::config::{self as cfg, MachineConfig, ParsedConfig};
use crate::resources::runtime::{self as rt, MetaKey};

use super::system_disk::META_VOLUME;
use super::volume_config::STATE_ENCRYPTION_TAG;

pub struct StateEncryptionMetaController {
    meta: Arc<MetaStore>,
}

impl StateEncryptionMetaController {
    pub fn new(meta: Arc<MetaStore>) -> Self {
        StateEncryptionMetaController { meta }
    }
}

/// What META should hold for STATE under `config` (the one in force): `None` when it does not
/// encrypt STATE, or its volumes do not read (the volume configuration controller says why).
pub fn wanted(config: &ParsedConfig) -> Option<String> {
    let view = config.block.as_ref().ok()?;
    view.volume(SystemVolume::State)?.encryption.as_ref().map(|e| e.to_meta_json())
}

#[async_trait::async_trait]
impl Controller for StateEncryptionMetaController {
    fn name(&self) -> String {
        "StateEncryptionMetaController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID),
            Input::weak::<MetaKey>(rt::NAMESPACE).with_id(MetaKey::id(STATE_ENCRYPTION_TAG)),
            Input::weak::<VolumeStatus>(blk::NAMESPACE).with_id(META_VOLUME),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        Vec::new()
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let Some(mc) = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)?.filter(|m| m.is_running())
        else {
            return Ok(());
        };
        let Some(want) = mc.spec().parsed().and_then(|p| wanted(p)) else { return Ok(()) };
        let have =
            ctx.get::<MetaKey>(rt::NAMESPACE, &MetaKey::id(STATE_ENCRYPTION_TAG))?.map(|k| k.spec().value.clone());
        if have.as_deref() == Some(want.as_str()) {
            return Ok(());
        }
        let Some(volume) = ctx.get::<VolumeStatus>(blk::NAMESPACE, META_VOLUME)? else { return Ok(()) };
        let spec = volume.spec();
        let device = if spec.mount_location.is_empty() { &spec.location } else { &spec.mount_location };
        if spec.phase != VolumePhase::Ready || device.is_empty() {
            return Ok(());
        }
        let device = std::path::PathBuf::from(device);
        let value = want.into_bytes();
        self.meta.update(device.clone(), move |m| m.set(STATE_ENCRYPTION_TAG, value)).await?;
        crate::kernel::console::line(&format!(
            "META: STATE's encryption kept in tag {STATE_ENCRYPTION_TAG} on {}",
            device.display()
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::meta;
    use crate::controllers::config::machine_config::parse;
    use crate::cosi::Harness;

    const ENCRYPTED: &str = "version: v1alpha1\nmachine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: STATE\nencryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      nodeID: {}\n";

    #[tokio::test]
    async fn writes_state_encryption_to_meta_once_and_never_removes_it() {
        let part = tempfile::NamedTempFile::new().unwrap();
        part.as_file().set_len(meta::PARTITION_SIZE).unwrap();
        let store = MetaStore::new();
        let h = Harness::start(vec![Box::new(StateEncryptionMetaController::new(Arc::clone(&store)))]).unwrap();
        let mut writes = store.subscribe();
        let status = VolumeStatus {
            phase: VolumePhase::Ready,
            location: part.path().display().to_string(),
            ..VolumeStatus::default()
        };
        h.seed(blk::NAMESPACE, META_VOLUME, status).unwrap();
        h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, parse(ENCRYPTED).unwrap()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), writes.changed()).await.unwrap().unwrap();
        let m = meta::load(part.path()).unwrap();
        let kept = String::from_utf8(m.get(STATE_ENCRYPTION_TAG).unwrap().to_vec()).unwrap();
        assert_eq!(kept, r#"{"keys":[{"nodeID":{},"slot":0}],"provider":"luks2"}"#);
        assert_eq!(Some(kept.clone()), wanted(parse(ENCRYPTED).unwrap().parsed().unwrap()));

        // Once META shows it, nothing more is written, whatever the configuration says of
        // STATE: the same encryption, or none (the key is never removed).
        h.seed(rt::NAMESPACE, &MetaKey::id(STATE_ENCRYPTION_TAG), MetaKey { value: kept.clone() }).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let settled = *writes.borrow_and_update();
        let plain = "version: v1alpha1\nmachine:\n  type: worker\n";
        for yaml in [plain, ENCRYPTED] {
            h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, parse(yaml).unwrap()).unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            assert_eq!(*writes.borrow_and_update(), settled, "nothing written for {yaml:?}");
        }
        assert_eq!(meta::load(part.path()).unwrap().get(STATE_ENCRYPTION_TAG), Some(kept.as_bytes()));
    }
}

//! `MachineConfigController`: the configuration store's texts as `MachineConfig` resources
//! (`v1alpha1` in force, `persistent` stored), the machine's type, and whether there is a
//! configuration at all (`MachineConfigStatus`, which moves the machine out of maintenance).
//!
//! Woken by the store's watch channel. A configuration text is parsed once, by [`parse`] as
//! it enters the store ([`super::ConfigText`]): the resources carry that parse and its typed
//! views, and every other reader takes them from there. A text that no longer loads (a file edited by hand, a newer schema)
//! is reported in the status and treated as no configuration, never half-used.

use tokio::sync::watch;

use super::StoredConfig;
use crate::config::ConfigError;
use crate::cosi::{Changes, Context, Controller, EventSource, Input, Output, ReconcileError};
use crate::resources::config::{self as cfg, MachineConfig, MachineType, MachineTypeSpec, ParsedConfig};
use crate::resources::runtime::{self as rt, MachineConfigStatus};

pub struct MachineConfigController {
    rx: watch::Receiver<StoredConfig>,
    /// Where the store keeps it, for the status.
    source: String,
}

impl MachineConfigController {
    pub fn new(rx: watch::Receiver<StoredConfig>, source: impl Into<String>) -> Self {
        MachineConfigController { rx, source: source.into() }
    }
}

/// Parses `text` into the resource every controller reads: the documents, the machine view
/// (which must read), and the network and volume views with their errors kept for their
/// readers to report.
pub fn parse(text: &str) -> Result<MachineConfig, ConfigError> {
    let config = crate::config::load(text)?.config;
    let machine = config.machine()?;
    let network = config.network();
    let block = config.block();
    Ok(MachineConfig::new(text, ParsedConfig { config, machine, network, block }))
}

fn machine_type(mc: &MachineConfig) -> MachineType {
    match mc.parsed().and_then(|p| p.machine.machine_type) {
        Some(crate::config::MachineType::Init) => MachineType::Init,
        Some(crate::config::MachineType::ControlPlane) => MachineType::ControlPlane,
        Some(crate::config::MachineType::Worker) => MachineType::Worker,
        None => MachineType::Unknown,
    }
}

#[async_trait::async_trait]
impl Controller for MachineConfigController {
    fn name(&self) -> String {
        "MachineConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![
            Output::exclusive::<MachineConfig>(),
            Output::exclusive::<MachineTypeSpec>(),
            Output::exclusive::<MachineConfigStatus>(),
        ]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(Changes::new("configuration store", self.rx.clone()))]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let stored = self.rx.borrow().clone();
        ctx.start_tracking_outputs();
        // Until the store's volume is mounted there is no status: the machine stays booting
        // rather than showing maintenance for the moment before its configuration is read.
        if stored.pending {
            ctx.cleanup_outputs()?;
            return Ok(());
        }
        let mut status = MachineConfigStatus { present: false, source: format!("none yet ({})", self.source) };
        if let Some(text) = &stored.active {
            match text.machine_config() {
                Ok(mc) => {
                    let machine_type = machine_type(mc);
                    ctx.apply(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, mc.clone())?;
                    ctx.apply(cfg::NAMESPACE, MachineType::ID, MachineTypeSpec { machine_type })?;
                    status = MachineConfigStatus { present: true, source: self.source.clone() };
                }
                Err(e) => {
                    status.source = format!("{}: does not load: {e}", self.source);
                }
            }
        }
        if let Some(text) = &stored.persisted {
            // Usually the same text (and parse) as the one in force; shown as stored whether
            // or not it loads.
            let mc = text.machine_config().cloned().unwrap_or_else(|_| MachineConfig::unparsed(text.to_string()));
            ctx.apply(cfg::NAMESPACE, MachineConfig::PERSISTENT_ID, mc)?;
        }
        ctx.apply(rt::NAMESPACE, MachineConfigStatus::ID, status)?;
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::controllers::config::ConfigText;
    use crate::cosi::Harness;

    /// The resources carry the store's parse of the text, not one of their own.
    #[tokio::test]
    async fn the_resources_carry_the_stores_parse() {
        let text = ConfigText::new("version: v1alpha1\nmachine:\n  type: worker\n");
        let stored = StoredConfig { active: Some(text.clone()), persisted: Some(text.clone()), ..Default::default() };
        let (tx, rx) = watch::channel(stored);
        let h = Harness::start(vec![Box::new(MachineConfigController::new(rx, "memory"))]).unwrap();
        let store_parse = text.parsed().unwrap();
        for id in [MachineConfig::ACTIVE_ID, MachineConfig::PERSISTENT_ID] {
            let r = h.assert_eventually::<MachineConfig, _>(cfg::NAMESPACE, id, id, |r| r.is_some()).await.unwrap();
            assert!(Arc::ptr_eq(r.spec().parsed().unwrap(), store_parse), "{id}");
        }
        let ty = h.assert_eventually::<MachineTypeSpec, _>(cfg::NAMESPACE, MachineType::ID, "type", |r| r.is_some());
        assert_eq!(ty.await.unwrap().spec().machine_type, MachineType::Worker);
        drop(tx);
        h.stop().await;
    }
}

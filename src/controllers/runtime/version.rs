//! `VersionController`: publishes the running talosbox version as the `Version` resource.

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::runtime::{NAMESPACE, Version};

#[derive(Default)]
pub struct VersionController;

#[async_trait::async_trait]
impl Controller for VersionController {
    fn name(&self) -> String {
        "VersionController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<Version>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        ctx.apply(NAMESPACE, Version::ID, Version { version: format!("v{}", crate::version::os_version()) })?;
        Ok(())
    }
}

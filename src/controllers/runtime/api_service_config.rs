//! `ApiServiceConfigController`: how apid serves (`APIServiceConfig`). Without a configuration
//! it is the maintenance API: server-side TLS only, everyone a reader, no forwarding. With one,
//! client certificates are required, and forwarding to other nodes is on for control planes
//! (workers hold no client certificate to forward with).

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::config::{self as cfg, MachineType, MachineTypeSpec};
use crate::resources::runtime::{ApiServiceConfig, MachineConfigStatus, NAMESPACE};

pub struct ApiServiceConfigController {
    listen: String,
}

impl ApiServiceConfigController {
    /// apid listens on `listen` (`:50000` on a node, the node's own address in container mode).
    pub fn new(listen: impl Into<String>) -> Self {
        ApiServiceConfigController { listen: listen.into() }
    }
}

#[async_trait::async_trait]
impl Controller for ApiServiceConfigController {
    fn name(&self) -> String {
        "ApiServiceConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<MachineConfigStatus>(NAMESPACE), Input::weak::<MachineTypeSpec>(cfg::NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<ApiServiceConfig>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let configured = ctx
            .get::<MachineConfigStatus>(NAMESPACE, MachineConfigStatus::ID)?
            .is_some_and(|s| s.is_running() && s.spec().present);
        let control_plane = ctx
            .get::<MachineTypeSpec>(cfg::NAMESPACE, MachineType::ID)?
            .is_some_and(|t| t.spec().machine_type.is_control_plane());
        let spec = ApiServiceConfig {
            listen_address: self.listen.clone(),
            node_routing_disabled: !configured || !control_plane,
            readonly_role_mode: !configured,
            skip_verifying_client_cert: !configured,
        };
        ctx.apply(NAMESPACE, ApiServiceConfig::ID, spec)?;
        Ok(())
    }
}

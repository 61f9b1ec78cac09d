//! `TimeServerConfigController`: Talos's default time server (`time.cloudflare.com`, over
//! NTS) at the `default` layer, and the machine configuration's (`TimeSyncConfig`, else
//! v1alpha1 `machine.time.servers`) at `configuration`, as TimeServerSpec candidates.
//!
//! Pure: only `network-config`; the time sync client is another controller's.

use super::config_inputs::{machine_config_input, network_view, put};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::config::{DEFAULT_TIME_SERVER, time_server_spec};
use crate::resources::network::{ConfigLayer, TimeServerSpec};

#[derive(Default)]
pub struct TimeServerConfigController;

impl TimeServerConfigController {
    pub fn new() -> Self {
        TimeServerConfigController
    }
}

/// The default candidate.
pub fn default_time_servers() -> TimeServerSpec {
    TimeServerSpec {
        time_servers: vec![DEFAULT_TIME_SERVER.to_string()],
        use_nts: true,
        config_layer: ConfigLayer::Default,
    }
}

#[async_trait::async_trait]
impl Controller for TimeServerConfigController {
    fn name(&self) -> String {
        "TimeServerConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![machine_config_input()]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared::<TimeServerSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let view = network_view(ctx)?;
        ctx.start_tracking_outputs();
        put(ctx, ConfigLayer::Default, TimeServerSpec::ID, default_time_servers())?;
        if let Some(spec) = view.and_then(|v| time_server_spec(&v, ConfigLayer::MachineConfiguration)) {
            put(ctx, ConfigLayer::MachineConfiguration, TimeServerSpec::ID, spec)?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::config_inputs::testing::*;
    use super::*;
    use crate::cosi::Harness;
    use crate::resources::network::CONFIG_NAMESPACE;

    #[tokio::test]
    async fn default_and_configured_time_servers() {
        let h = Harness::start(vec![Box::new(TimeServerConfigController::new())]).unwrap();
        h.assert_spec(CONFIG_NAMESPACE, "default/timeservers", &default_time_servers()).await;
        seed_config(&h, "version: v1alpha1\nmachine:\n  time:\n    servers: [pool.ntp.org]\n");
        let want = TimeServerSpec {
            time_servers: vec!["pool.ntp.org".into()],
            use_nts: false,
            config_layer: ConfigLayer::MachineConfiguration,
        };
        h.assert_spec(CONFIG_NAMESPACE, "configuration/timeservers", &want).await;
        // The document wins over v1alpha1.
        seed_config(
            &h,
            "version: v1alpha1\nmachine:\n  time:\n    servers: [pool.ntp.org]\n---\napiVersion: v1alpha1\nkind: TimeSyncConfig\nntp:\n  servers: [nts.example.org]\n  useNTS: true\n",
        );
        let want = TimeServerSpec { time_servers: vec!["nts.example.org".into()], use_nts: true, ..want };
        h.assert_spec(CONFIG_NAMESPACE, "configuration/timeservers", &want).await;
        remove_config(&h);
        h.assert_absent::<TimeServerSpec>(CONFIG_NAMESPACE, "configuration/timeservers").await;
        h.assert_spec(CONFIG_NAMESPACE, "default/timeservers", &default_time_servers()).await;
        h.stop().await;
    }
}

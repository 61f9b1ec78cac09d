//! `TimeServerSpecController`: the merged `TimeServerSpec` in force, copied into its
//! `TimeServerStatus`, as Talos does: the time servers are applied by the time sync client
//! reading the status, not by the kernel. Each spec is held until its status is gone. It
//! never decides which servers win: the merge did.

use crate::controllers::generic_transform::TransformController;
use crate::resources::network::{NAMESPACE, TimeServerSpec, TimeServerStatus};

pub type TimeServerSpecController = TransformController<TimeServerSpec, TimeServerStatus>;

/// The status a merged spec publishes.
pub(crate) fn time_server_status(spec: &TimeServerSpec) -> TimeServerStatus {
    TimeServerStatus { time_servers: spec.time_servers.clone(), use_nts: spec.use_nts }
}

/// The controller, `network` to `network`.
pub fn time_server_spec_controller() -> TimeServerSpecController {
    TransformController::new("TimeServerSpecController", NAMESPACE, NAMESPACE, |_, spec| {
        Ok(Some(time_server_status(spec.spec())))
    })
    .with_input_finalizers()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosi::{Controller, Harness};
    use crate::resources::network::ConfigLayer;

    #[tokio::test]
    async fn the_merged_spec_is_published_and_withdrawn() {
        let h = Harness::start(vec![Box::new(time_server_spec_controller()) as Box<dyn Controller>]).unwrap();
        let spec = TimeServerSpec {
            time_servers: vec!["time.cloudflare.com".into(), "10.0.0.1".into()],
            use_nts: true,
            config_layer: ConfigLayer::MachineConfiguration,
        };
        h.seed(NAMESPACE, TimeServerSpec::ID, spec.clone()).unwrap();
        let want = TimeServerStatus { time_servers: spec.time_servers.clone(), use_nts: true };
        h.assert_spec(NAMESPACE, TimeServerStatus::ID, &want).await;
        h.unseed::<TimeServerSpec>(NAMESPACE, TimeServerSpec::ID).unwrap();
        h.assert_absent::<TimeServerStatus>(NAMESPACE, TimeServerStatus::ID).await;
        h.assert_eventually::<TimeServerSpec, _>(NAMESPACE, TimeServerSpec::ID, "released", |r| {
            r.is_some_and(|r| r.metadata().finalizers.is_empty())
        })
        .await;
        h.stop().await;
    }
}

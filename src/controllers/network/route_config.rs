//! `RouteConfigController`: the machine configuration's routes (v1alpha1 interfaces and their
//! VLANs, the link documents) as `configuration`-layer RouteSpec candidates, as Talos's
//! `RouteConfigController` (the command line's gateways are `CmdlineConfigController`'s).
//!
//! Candidates the configuration no longer gives are removed. Pure: only `network-config`.

use super::config_inputs::{Resolved, link_statuses, machine_config_input, network_view, put};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::config::route_specs;
use crate::resources::network::{ConfigLayer, LinkStatus, NAMESPACE, RouteSpec};

#[derive(Default)]
pub struct RouteConfigController;

impl RouteConfigController {
    pub fn new() -> Self {
        RouteConfigController
    }
}

#[async_trait::async_trait]
impl Controller for RouteConfigController {
    fn name(&self) -> String {
        "RouteConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![machine_config_input(), Input::weak::<LinkStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared::<RouteSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let view = network_view(ctx)?;
        let links = link_statuses(ctx)?;
        ctx.start_tracking_outputs();
        if let Some(view) = view {
            let r = Resolved::new(view, &links);
            let layer = ConfigLayer::MachineConfiguration;
            for spec in route_specs(&r.view, &r.devices, &r.links, layer) {
                put(ctx, layer, &spec.id(), spec)?;
            }
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
    use crate::resources::network::{CONFIG_NAMESPACE, RouteProtocol};

    #[tokio::test]
    async fn routes_follow_the_configuration() {
        let h = Harness::start(vec![Box::new(RouteConfigController::new())]).unwrap();
        seed_config(
            &h,
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        routes:\n\
             \x20         - network: 0.0.0.0/0\n            gateway: 192.168.1.1\n\
             ---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth1\nroutes:\n  - destination: 10.3.0.0/16\n    gateway: 10.0.1.1\n    metric: 10\n",
        );
        let list = h.assert_list::<RouteSpec, _>(CONFIG_NAMESPACE, "two routes", |l| l.len() == 2).await;
        let mut ids: Vec<&str> = list.iter().map(|r| r.id()).collect();
        ids.sort();
        assert_eq!(ids, ["configuration/inet4/10.0.1.1/10.3.0.0/16/10", "configuration/inet4/192.168.1.1//1024"]);
        let default = list.iter().find(|r| r.spec().destination.is_none()).unwrap().spec();
        assert_eq!((default.out_link_name.as_str(), default.protocol), ("eth0", RouteProtocol::STATIC));

        seed_config(&h, "version: v1alpha1\nmachine:\n  type: worker\n");
        h.assert_list::<RouteSpec, _>(CONFIG_NAMESPACE, "no routes", |l| l.is_empty()).await;
        h.stop().await;
    }
}

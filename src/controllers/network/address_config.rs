//! `AddressConfigController`: the machine configuration's static addresses (v1alpha1
//! interfaces and their VLANs, the link documents) as `configuration`-layer AddressSpec
//! candidates, and loopback's `127.0.0.1/8` at the `default` layer, as Talos's
//! `AddressConfigController` (the command line's addresses are `CmdlineConfigController`'s).
//!
//! Candidates the configuration no longer gives are removed. Pure: it never touches the
//! kernel, only `network-config`.

use super::config_inputs::{Resolved, link_statuses, machine_config_input, network_view, put};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::config::{address_specs, loopback_addresses};
use crate::resources::network::{AddressSpec, ConfigLayer, LinkStatus, NAMESPACE};

#[derive(Default)]
pub struct AddressConfigController;

impl AddressConfigController {
    pub fn new() -> Self {
        AddressConfigController
    }
}

#[async_trait::async_trait]
impl Controller for AddressConfigController {
    fn name(&self) -> String {
        "AddressConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![machine_config_input(), Input::weak::<LinkStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared::<AddressSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let view = network_view(ctx)?;
        let links = link_statuses(ctx)?;
        ctx.start_tracking_outputs();
        for spec in loopback_addresses() {
            put(ctx, spec.config_layer, &spec.id(), spec)?;
        }
        if let Some(view) = view {
            let r = Resolved::new(view, &links);
            let layer = ConfigLayer::MachineConfiguration;
            for spec in address_specs(&r.view, &r.devices, &r.links, layer) {
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
    use crate::resources::network::{AddressFlags, CONFIG_NAMESPACE, Scope};

    fn ids(list: &[crate::cosi::Resource<AddressSpec>]) -> Vec<String> {
        let mut ids: Vec<String> = list.iter().map(|r| r.id().to_string()).collect();
        ids.sort();
        ids
    }

    #[tokio::test]
    async fn loopback_by_default_and_the_configuration_on_top() {
        let h = Harness::start(vec![Box::new(AddressConfigController::new())]).unwrap();
        let lo = h
            .assert_eventually::<AddressSpec, _>(CONFIG_NAMESPACE, "default/lo/127.0.0.1/8", "loopback", |r| {
                r.is_some()
            })
            .await
            .unwrap();
        assert_eq!(
            (lo.spec().scope, lo.spec().flags, lo.spec().config_layer),
            (Scope::HOST, AddressFlags::PERMANENT, ConfigLayer::Default)
        );

        seed_config(
            &h,
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [192.168.1.2/24]\n\
             \x20       vlans:\n          - vlanId: 5\n            addresses: ['fd00:5::2/64']\n\
             \x20     - deviceSelector: {hardwareAddr: '52:54:00:00:00:0b'}\n        addresses: [10.0.0.11/24]\n\
             ---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth2\naddresses:\n  - address: 10.2.0.2/16\n",
        );
        let want = [
            "configuration/eth0.5/fd00:5::2/64",
            "configuration/eth0/192.168.1.2/24",
            "configuration/eth2/10.2.0.2/16",
            "default/lo/127.0.0.1/8",
        ];
        let list = h.assert_list::<AddressSpec, _>(CONFIG_NAMESPACE, "config addresses", |l| l.len() == 4).await;
        assert_eq!(ids(&list), want);
        let eth0 = list.iter().find(|r| r.id() == "configuration/eth0/192.168.1.2/24").unwrap();
        assert_eq!(
            eth0.spec(),
            &AddressSpec::static_address("eth0", "192.168.1.2/24".parse().unwrap(), ConfigLayer::MachineConfiguration)
        );

        // The selector's link appears: its address follows.
        seed_ether(&h, "enp0s11", "52:54:00:00:00:0b");
        h.assert_eventually::<AddressSpec, _>(
            CONFIG_NAMESPACE,
            "configuration/enp0s11/10.0.0.11/24",
            "selected",
            |r| r.is_some(),
        )
        .await;

        // Config gone: only loopback stays.
        remove_config(&h);
        let list = h.assert_list::<AddressSpec, _>(CONFIG_NAMESPACE, "only loopback", |l| l.len() == 1).await;
        assert_eq!(list[0].id(), "default/lo/127.0.0.1/8");
        h.stop().await;
    }

    #[tokio::test]
    async fn networking_that_does_not_read_contributes_nothing() {
        let h = Harness::start(vec![Box::new(AddressConfigController::new())]).unwrap();
        seed_config(
            &h,
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [192.168.1.2/24]\n",
        );
        h.assert_list::<AddressSpec, _>(CONFIG_NAMESPACE, "two", |l| l.len() == 2).await;
        seed_config(
            &h,
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [192.168.1.300/24]\n",
        );
        h.assert_list::<AddressSpec, _>(CONFIG_NAMESPACE, "loopback only", |l| l.len() == 1).await;
        h.stop().await;
    }
}

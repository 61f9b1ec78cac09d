//! The merge controllers: one [`GenericMergeController`] per merged network type, candidates
//! from `network-config` to one winner per id in `network`. How each type merges is its
//! `Mergeable` impl in `crate::resources::network`; nothing here decides anything.

use crate::controllers::generic_merge::GenericMergeController;
use crate::cosi::Controller;
use crate::resources::network::{
    AddressSpec, CONFIG_NAMESPACE, HostnameSpec, LinkSpec, NAMESPACE, OperatorSpec, ResolverSpec, RouteSpec,
    TimeServerSpec,
};

pub type AddressMergeController = GenericMergeController<AddressSpec>;
pub type RouteMergeController = GenericMergeController<RouteSpec>;
pub type LinkMergeController = GenericMergeController<LinkSpec>;
pub type HostnameMergeController = GenericMergeController<HostnameSpec>;
pub type ResolverMergeController = GenericMergeController<ResolverSpec>;
pub type TimeServerMergeController = GenericMergeController<TimeServerSpec>;
/// Operators per [`operator_id`](crate::resources::network::operator_id), the higher layer
/// winning. A winner whose layer alone changes is still the same operator: the spec
/// controller compares without the layer and does not restart it.
pub type OperatorMergeController = GenericMergeController<OperatorSpec>;

/// Every network merge controller, `network-config` into `network`.
pub fn merge_controllers() -> Vec<Box<dyn Controller>> {
    vec![
        Box::new(AddressMergeController::new(CONFIG_NAMESPACE, NAMESPACE)),
        Box::new(RouteMergeController::new(CONFIG_NAMESPACE, NAMESPACE)),
        Box::new(LinkMergeController::new(CONFIG_NAMESPACE, NAMESPACE)),
        Box::new(HostnameMergeController::new(CONFIG_NAMESPACE, NAMESPACE)),
        Box::new(ResolverMergeController::new(CONFIG_NAMESPACE, NAMESPACE)),
        Box::new(TimeServerMergeController::new(CONFIG_NAMESPACE, NAMESPACE)),
        Box::new(OperatorMergeController::new(CONFIG_NAMESPACE, NAMESPACE)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosi::Harness;
    use crate::resources::network::{ConfigLayer, layered_id};
    use crate::types::IpPrefix;

    #[test]
    fn names_follow_talos() {
        let names: Vec<String> = merge_controllers().iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "AddressMergeController",
                "RouteMergeController",
                "LinkMergeController",
                "HostnameMergeController",
                "ResolverMergeController",
                "TimeServerMergeController",
                "OperatorMergeController"
            ]
        );
    }

    #[tokio::test]
    async fn configuration_beats_cmdline_and_removal_falls_back() {
        let h = Harness::start(merge_controllers()).unwrap();
        let prefix: IpPrefix = "10.5.0.2/24".parse().unwrap();
        let cmdline = AddressSpec::static_address("eth0", prefix, ConfigLayer::Cmdline);
        let configured = AddressSpec {
            priority: 7,
            ..AddressSpec::static_address("eth0", prefix, ConfigLayer::MachineConfiguration)
        };
        let id = cmdline.id();
        h.seed(CONFIG_NAMESPACE, &layered_id(ConfigLayer::Cmdline, &id), cmdline.clone()).unwrap();
        h.assert_spec(NAMESPACE, &id, &cmdline).await;
        h.seed(CONFIG_NAMESPACE, &layered_id(ConfigLayer::MachineConfiguration, &id), configured.clone()).unwrap();
        h.assert_spec(NAMESPACE, &id, &configured).await;
        h.unseed::<AddressSpec>(CONFIG_NAMESPACE, &layered_id(ConfigLayer::MachineConfiguration, &id)).unwrap();
        h.assert_spec(NAMESPACE, &id, &cmdline).await;

        let low = HostnameSpec { hostname: "low".into(), config_layer: ConfigLayer::Default, ..Default::default() };
        let high = HostnameSpec { hostname: "high".into(), config_layer: ConfigLayer::Cmdline, ..Default::default() };
        h.seed(CONFIG_NAMESPACE, "default/hostname", low).unwrap();
        h.seed(CONFIG_NAMESPACE, "cmdline/hostname", high.clone()).unwrap();
        h.assert_spec(NAMESPACE, HostnameSpec::ID, &high).await;
        h.stop().await;
    }

    #[tokio::test]
    async fn operators_merge_per_link_higher_layer_winning() {
        use crate::resources::network::{Dhcp4OperatorSpec, Operator, operator_id};
        let h = Harness::start(merge_controllers()).unwrap();
        let dhcp = |layer, metric| OperatorSpec {
            operator: Operator::Dhcp4,
            link_name: "eth0".into(),
            require_up: true,
            dhcp4: Dhcp4OperatorSpec { route_metric: metric, ..Default::default() },
            config_layer: layer,
            ..Default::default()
        };
        let default = dhcp(ConfigLayer::Default, 1024);
        let configured = dhcp(ConfigLayer::MachineConfiguration, 512);
        let id = operator_id(&default);
        assert_eq!(id, "dhcp4/eth0");
        h.seed(CONFIG_NAMESPACE, &layered_id(ConfigLayer::Default, &id), default.clone()).unwrap();
        h.assert_spec(NAMESPACE, &id, &default).await;
        h.seed(CONFIG_NAMESPACE, &layered_id(ConfigLayer::MachineConfiguration, &id), configured.clone()).unwrap();
        h.assert_spec(NAMESPACE, &id, &configured).await;
        let v6 = OperatorSpec { operator: Operator::Dhcp6, ..default.clone() };
        h.seed(CONFIG_NAMESPACE, "default/dhcp6/eth0", v6.clone()).unwrap();
        h.assert_spec(NAMESPACE, "dhcp6/eth0", &v6).await;
        h.unseed::<OperatorSpec>(CONFIG_NAMESPACE, &layered_id(ConfigLayer::MachineConfiguration, &id)).unwrap();
        h.assert_spec(NAMESPACE, &id, &default).await;
        h.stop().await;
    }
}

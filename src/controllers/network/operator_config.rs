//! `OperatorConfigController`: which DHCP operators should run, as OperatorSpec candidates.
//! The ones the machine configuration asks for (`dhcp: true` on an interface or VLAN, by its
//! `dhcpOptions`; `DHCPv4Config`, `DHCPv6Config`) at the `configuration` layer; and, while
//! default DHCP is in force, a DHCPv4 operator at the `default` layer on every physical link
//! that no command line, platform or configuration LinkSpec candidate configures and nothing
//! ignores — which is why a fresh node "just gets an IP" (Talos's `OperatorConfigController`).
//! A link whose configuration has static addresses and no `dhcp` therefore runs no DHCP.
//!
//! Pure: only `network-config`; running the operators is `OperatorSpecController`'s.

use std::collections::BTreeSet;

use super::config_inputs::{
    Resolved, cmdline_input, cmdline_networking, link_statuses, machine_config_input, network_view, put,
};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::cmdline::LinkResolver;
use crate::network::config::{default_dhcp4, ignored_links, operator_specs};
use crate::resources::network::{
    CONFIG_NAMESPACE, ConfigLayer, LinkSpec, LinkStatus, NAMESPACE, OperatorSpec, operator_id,
};

#[derive(Default)]
pub struct OperatorConfigController;

impl OperatorConfigController {
    pub fn new() -> Self {
        OperatorConfigController
    }
}

/// The links some source configures explicitly: a LinkSpec candidate from the command line,
/// the platform or the machine configuration (defaults and operators' own do not count).
pub fn explicitly_configured(candidates: &[LinkSpec], links: &LinkResolver) -> BTreeSet<String> {
    candidates
        .iter()
        .filter(|l| {
            matches!(l.config_layer, ConfigLayer::Cmdline | ConfigLayer::Platform | ConfigLayer::MachineConfiguration)
        })
        .map(|l| links.resolve(&l.name))
        .collect()
}

/// A default DHCPv4 operator for each physical link neither configured nor ignored.
pub fn default_operators(
    links: &[(String, LinkStatus)],
    configured: &BTreeSet<String>,
    ignored: &BTreeSet<String>,
) -> Vec<OperatorSpec> {
    links
        .iter()
        .filter(|(name, status)| status.physical() && !configured.contains(name) && !ignored.contains(name))
        .map(|(name, _)| default_dhcp4(name))
        .collect()
}

#[async_trait::async_trait]
impl Controller for OperatorConfigController {
    fn name(&self) -> String {
        "OperatorConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            machine_config_input(),
            cmdline_input(),
            Input::weak::<LinkStatus>(NAMESPACE),
            Input::weak::<LinkSpec>(CONFIG_NAMESPACE),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared::<OperatorSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let view = network_view(ctx)?;
        let links = link_statuses(ctx)?;
        let cmdline = cmdline_networking(ctx, &links)?;
        let candidates: Vec<LinkSpec> =
            ctx.list::<LinkSpec>(CONFIG_NAMESPACE)?.into_iter().map(|r| r.spec().clone()).collect();
        ctx.start_tracking_outputs();

        let resolved = view.map(|v| Resolved::new(v, &links));
        let resolver = super::link_resolver(&links);
        let mut ignored: BTreeSet<String> =
            cmdline.map(|c| c.ignore_interfaces.into_iter().collect()).unwrap_or_default();
        if let Some(r) = &resolved {
            let layer = ConfigLayer::MachineConfiguration;
            for spec in operator_specs(&r.view, &r.devices, &r.links, layer) {
                put(ctx, layer, &operator_id(&spec), spec)?;
            }
            ignored.extend(ignored_links(&r.devices, &r.links));
        }
        if resolved.as_ref().is_none_or(|r| r.view.run_default_dhcp_operators()) {
            let configured = explicitly_configured(&candidates, &resolver);
            for spec in default_operators(&links, &configured, &ignored) {
                put(ctx, ConfigLayer::Default, &operator_id(&spec), spec)?;
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
    use crate::resources::network::{LinkType, Operator};

    fn ids(list: &[crate::cosi::Resource<OperatorSpec>]) -> Vec<String> {
        let mut ids: Vec<String> = list.iter().map(|r| r.id().to_string()).collect();
        ids.sort();
        ids
    }

    #[test]
    fn defaults_skip_configured_ignored_and_logical_links() {
        let ether = LinkStatus { link_type: LinkType::ETHER, ..LinkStatus::default() };
        let links = vec![
            ("bond0".to_string(), LinkStatus { kind: "bond".into(), ..ether.clone() }),
            ("eth0".to_string(), ether.clone()),
            ("eth1".to_string(), ether.clone()),
            ("eth2".to_string(), ether.clone()),
            ("lo".to_string(), LinkStatus { link_type: LinkType::LOOPBACK, ..LinkStatus::default() }),
        ];
        let candidates = [
            LinkSpec::up("eth1", ConfigLayer::MachineConfiguration),
            LinkSpec::up("eth0", ConfigLayer::Default),
            LinkSpec::up("eth0", ConfigLayer::Operator),
            LinkSpec::up("enp0s9", ConfigLayer::Platform),
        ];
        let resolver = LinkResolver::new().with_alias("enp0s9", "eth2");
        let configured = explicitly_configured(&candidates, &resolver);
        assert_eq!(configured.iter().collect::<Vec<_>>(), ["eth1", "eth2"]);
        let ops = default_operators(&links, &configured, &BTreeSet::new());
        assert_eq!(ops.iter().map(operator_id).collect::<Vec<_>>(), ["dhcp4/eth0"]);
        assert!(default_operators(&links, &configured, &["eth0".to_string()].into()).is_empty());
    }

    #[tokio::test]
    async fn default_dhcp_until_configured() {
        let h = Harness::start(vec![Box::new(OperatorConfigController::new())]).unwrap();
        seed_loopback(&h);
        seed_ether(&h, "eth0", "52:54:00:00:00:01");
        seed_ether(&h, "eth1", "52:54:00:00:00:02");
        let list = h.assert_list::<OperatorSpec, _>(CONFIG_NAMESPACE, "defaults", |l| l.len() == 2).await;
        assert_eq!(ids(&list), ["default/dhcp4/eth0", "default/dhcp4/eth1"]);
        assert_eq!(list[0].spec(), &default_dhcp4(&list[0].spec().link_name));

        // dhcp with IPv6 on eth1, eth0 ignored. eth1's default stays here: what ends it is
        // eth1's configuration LinkSpec, which LinkConfigController writes (not running here).
        seed_config(
            &h,
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        ignore: true\n\
             \x20     - interface: eth1\n        dhcp: true\n        dhcpOptions: {ipv6: true, routeMetric: 100}\n",
        );
        let list = h
            .assert_list::<OperatorSpec, _>(CONFIG_NAMESPACE, "configured", |l| {
                ids(l) == ["configuration/dhcp4/eth1", "configuration/dhcp6/eth1", "default/dhcp4/eth1"]
            })
            .await;
        let d6 = list.iter().find(|r| r.id() == "configuration/dhcp6/eth1").unwrap().spec();
        assert_eq!((d6.operator, d6.dhcp6.route_metric), (Operator::Dhcp6, 100));

        // A DHCPv4Config document takes the links over: no defaults.
        seed_config(&h, "apiVersion: v1alpha1\nkind: DHCPv4Config\nname: eth0\nrouteMetric: 5\n");
        h.assert_list::<OperatorSpec, _>(CONFIG_NAMESPACE, "document", |l| ids(l) == ["configuration/dhcp4/eth0"])
            .await;

        remove_config(&h);
        h.assert_list::<OperatorSpec, _>(CONFIG_NAMESPACE, "defaults back", |l| {
            ids(l) == ["default/dhcp4/eth0", "default/dhcp4/eth1"]
        })
        .await;
        h.stop().await;
    }
}

//! `LinkConfigController`: the links the machine configuration sets up or creates, as
//! `configuration`-layer LinkSpec candidates (v1alpha1 interfaces with MTU, bond, bridge,
//! dummy and VLANs, their bond and bridge ports; the link documents and their ports; the
//! links a DHCP document names), and at the `default` layer loopback up and, while default
//! DHCP is in force, every physical link nothing else configures, as Talos's
//! `LinkConfigController` (the command line's links are `CmdlineConfigController`'s).
//!
//! Links the configuration `ignore`s are left alone. Pure: only `network-config`.

use std::collections::BTreeSet;

use super::config_inputs::{
    Resolved, cmdline_input, cmdline_networking, link_statuses, machine_config_input, network_view, put,
};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::config::{configured_links, link_specs};
use crate::resources::network::{ConfigLayer, LinkSpec, LinkStatus, NAMESPACE, link_id};

#[derive(Default)]
pub struct LinkConfigController;

impl LinkConfigController {
    pub fn new() -> Self {
        LinkConfigController
    }
}

/// Every name a link goes by: its own, its alias and its altnames.
fn names(name: &str, status: &LinkStatus) -> Vec<String> {
    let mut out = vec![name.to_string()];
    if !status.alias.is_empty() {
        out.push(status.alias.clone());
    }
    out.extend(status.alt_names.iter().cloned());
    out
}

/// The physical links brought up at the default layer: those none of `configured` names.
pub fn default_up_links(links: &[(String, LinkStatus)], configured: &BTreeSet<String>) -> Vec<LinkSpec> {
    links
        .iter()
        .filter(|(name, status)| status.physical() && !names(name, status).iter().any(|n| configured.contains(n)))
        .map(|(name, _)| LinkSpec::up(name, ConfigLayer::Default))
        .collect()
}

#[async_trait::async_trait]
impl Controller for LinkConfigController {
    fn name(&self) -> String {
        "LinkConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![machine_config_input(), cmdline_input(), Input::weak::<LinkStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared::<LinkSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let view = network_view(ctx)?;
        let links = link_statuses(ctx)?;
        let cmdline = cmdline_networking(ctx, &links)?;
        ctx.start_tracking_outputs();
        put(ctx, ConfigLayer::Default, "lo", LinkSpec::up("lo", ConfigLayer::Default))?;

        let resolved = view.map(|v| Resolved::new(v, &links));
        let mut configured = BTreeSet::new();
        if let Some(r) = &resolved {
            let layer = ConfigLayer::MachineConfiguration;
            for spec in link_specs(&r.view, &r.devices, &r.links, layer) {
                put(ctx, layer, &link_id(&spec.name), spec)?;
            }
            configured = configured_links(&r.devices, &r.links);
        }
        // Link documents take the links over: then nothing comes up unasked (Talos's
        // `RunDefaultDHCPOperators`).
        if resolved.as_ref().is_none_or(|r| r.view.run_default_dhcp_operators()) {
            if let Some(cmdline) = &cmdline {
                configured.extend(cmdline.ignore_interfaces.iter().cloned());
                configured.extend(cmdline.links.iter().map(|l| l.name.clone()));
                configured.extend(cmdline.link_configs.iter().map(|c| c.link_name.clone()));
            }
            for spec in default_up_links(&links, &configured) {
                put(ctx, ConfigLayer::Default, &link_id(&spec.name), spec)?;
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
    use crate::resources::network::{BondSlave, CONFIG_NAMESPACE, LINK_KIND_BOND};
    use crate::resources::runtime::{self, KernelCmdline};

    fn ids(list: &[crate::cosi::Resource<LinkSpec>]) -> Vec<String> {
        let mut ids: Vec<String> = list.iter().map(|r| r.id().to_string()).collect();
        ids.sort();
        ids
    }

    #[tokio::test]
    async fn defaults_then_the_configuration() {
        let h = Harness::start(vec![Box::new(LinkConfigController::new())]).unwrap();
        seed_loopback(&h);
        seed_ether(&h, "eth0", "52:54:00:00:00:01");
        seed_ether(&h, "eth1", "52:54:00:00:00:02");
        seed_ether(&h, "eth2", "52:54:00:00:00:03");
        let list = h.assert_list::<LinkSpec, _>(CONFIG_NAMESPACE, "defaults", |l| l.len() == 4).await;
        assert_eq!(ids(&list), ["default/eth0", "default/eth1", "default/eth2", "default/lo"]);

        // A bond of eth1 and eth2, eth0 ignored: no link is brought up by default any more.
        seed_config(
            &h,
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        ignore: true\n\
             \x20     - interface: bond0\n        addresses: [10.0.0.2/24]\n        bond:\n          interfaces: [eth1, eth2]\n          mode: active-backup\n",
        );
        let list = h
            .assert_list::<LinkSpec, _>(CONFIG_NAMESPACE, "bond", |l| {
                ids(l).len() == 4 && ids(l)[0] == "configuration/bond0"
            })
            .await;
        assert_eq!(ids(&list), ["configuration/bond0", "configuration/eth1", "configuration/eth2", "default/lo"]);
        let bond = list.iter().find(|r| r.id() == "configuration/bond0").unwrap().spec();
        assert_eq!((bond.kind.as_str(), bond.logical, bond.up), (LINK_KIND_BOND, true, true));
        let eth2 = list.iter().find(|r| r.id() == "configuration/eth2").unwrap().spec();
        assert_eq!(eth2.bond_slave, BondSlave { master_name: "bond0".into(), slave_index: 1 });

        // A link document takes the links over: eth0 and eth2 no longer come up by default.
        seed_config(&h, "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth1\nmtu: 9000\n");
        let list = h
            .assert_list::<LinkSpec, _>(CONFIG_NAMESPACE, "document", |l| {
                ids(l) == ["configuration/eth1", "default/lo"]
            })
            .await;
        assert_eq!(list.iter().find(|r| r.id() == "configuration/eth1").unwrap().spec().mtu, 9000);

        // No configuration: the defaults again, except what the command line configures.
        h.seed(
            runtime::NAMESPACE,
            KernelCmdline::ID,
            KernelCmdline { cmdline: "ip=eth1:dhcp talos.network.interface.ignore=eth2".into() },
        )
        .unwrap();
        remove_config(&h);
        h.assert_list::<LinkSpec, _>(CONFIG_NAMESPACE, "defaults", |l| ids(l) == ["default/eth0", "default/lo"]).await;
        h.stop().await;
    }
}

//! `CmdlineConfigController`: the kernel command line's networking (`ip=`, `talos.hostname=`,
//! `vlan=`, `bond=`) as `cmdline`-layer candidates in `network-config`, one per object.
//!
//! The parsing is `crate::network::cmdline`; this controller only feeds it the command line
//! and the links it may name, and writes what it returns. Candidates the command line no
//! longer gives are removed. A parameter that cannot be read fails the `KernelCmdline` key
//! with a message naming it, and the command line then contributes nothing, as in Talos.

use super::config_inputs::candidate_outputs;
use crate::cosi::{Context, Controller, Input, Output, Pointer, ReconcileError, ResourceSpec};
use crate::kernel::cmdline::Cmdline;
use crate::network::cmdline::{CmdlineNetworking, LinkResolver, parse};
use crate::resources::network::{
    CONFIG_NAMESPACE, ConfigLayer, HostnameSpec, LinkFlags, LinkStatus, LinkType, NAMESPACE, ResolverSpec,
    TimeServerSpec, layered_id, operator_id,
};
use crate::resources::runtime::{self, KernelCmdline};

const LAYER: ConfigLayer = ConfigLayer::Cmdline;

#[derive(Default)]
pub struct CmdlineConfigController;

impl CmdlineConfigController {
    pub fn new() -> Self {
        CmdlineConfigController
    }
}

/// The names the command line may use for the node's links: each link's alias and
/// altnames, and the first non-loopback link by name for an `ip=` without a device.
pub fn link_resolver(links: &[(String, LinkStatus)]) -> LinkResolver {
    let mut resolver = LinkResolver::new();
    for (name, status) in links {
        if !status.alias.is_empty() {
            resolver = resolver.with_alias(&status.alias, name);
        }
        for alt in &status.alt_names {
            resolver = resolver.with_alias(alt, name);
        }
    }
    let mut names: Vec<&(String, LinkStatus)> = links
        .iter()
        .filter(|(_, s)| s.link_type != LinkType::LOOPBACK && !s.flags.contains(LinkFlags::LOOPBACK))
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some((name, _)) = names.first() {
        resolver = resolver.with_default_link(name);
    }
    resolver
}

impl CmdlineConfigController {
    fn write(ctx: &mut Context, networking: &CmdlineNetworking) -> Result<(), ReconcileError> {
        fn put<T: ResourceSpec>(ctx: &mut Context, id: &str, spec: T) -> Result<(), ReconcileError> {
            ctx.apply(CONFIG_NAMESPACE, &layered_id(LAYER, id), spec)?;
            Ok(())
        }
        for spec in networking.address_specs() {
            put(ctx, &spec.id(), spec)?;
        }
        for spec in networking.route_specs() {
            put(ctx, &spec.id(), spec)?;
        }
        for spec in networking.link_specs() {
            put(ctx, &spec.name.clone(), spec)?;
        }
        if let Some(spec) = networking.hostname_spec() {
            put(ctx, HostnameSpec::ID, spec)?;
        }
        if let Some(spec) = networking.resolver_spec() {
            put(ctx, ResolverSpec::ID, spec)?;
        }
        if let Some(spec) = networking.time_server_spec() {
            put(ctx, TimeServerSpec::ID, spec)?;
        }
        for spec in networking.operator_specs() {
            put(ctx, &operator_id(&spec), spec)?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Controller for CmdlineConfigController {
    fn name(&self) -> String {
        "CmdlineConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<KernelCmdline>(runtime::NAMESPACE).with_id(KernelCmdline::ID),
            Input::weak::<LinkStatus>(NAMESPACE),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        candidate_outputs()
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let cmdline = ctx.get::<KernelCmdline>(runtime::NAMESPACE, KernelCmdline::ID)?;
        let links: Vec<(String, LinkStatus)> =
            ctx.list::<LinkStatus>(NAMESPACE)?.into_iter().map(|r| (r.id().to_string(), r.spec().clone())).collect();
        ctx.start_tracking_outputs();
        if let Some(cmdline) = cmdline {
            match parse(&Cmdline::parse(&cmdline.spec().cmdline), &link_resolver(&links)) {
                Ok(networking) => Self::write(ctx, &networking)?,
                Err(e) => ctx.fail_key(
                    Pointer::of::<KernelCmdline>(runtime::NAMESPACE, KernelCmdline::ID),
                    format!("kernel command line networking ignored: {e}"),
                ),
            }
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosi::Harness;
    use crate::resources::network::Operator;
    use crate::resources::network::{AddressSpec, LinkSpec, OperatorSpec, RouteSpec};
    use crate::types::IpPrefix;

    fn seed_cmdline(h: &Harness, text: &str) {
        h.seed(runtime::NAMESPACE, KernelCmdline::ID, KernelCmdline { cmdline: text.into() }).unwrap();
    }

    fn link(name: &str, link_type: LinkType, alt: &[&str]) -> (String, LinkStatus) {
        let status =
            LinkStatus { link_type, alt_names: alt.iter().map(|a| a.to_string()).collect(), ..LinkStatus::default() };
        (name.to_string(), status)
    }

    #[test]
    fn resolver_takes_altnames_and_the_first_non_loopback_link() {
        let links = [
            link("lo", LinkType::LOOPBACK, &[]),
            link("eth1", LinkType::ETHER, &["enp0s4"]),
            link("eth0", LinkType::ETHER, &[]),
        ];
        let resolver = link_resolver(&links);
        assert_eq!(resolver.resolve("enp0s4"), "eth1");
        assert_eq!(resolver.resolve("eth9"), "eth9");
        assert_eq!(resolver, LinkResolver::new().with_alias("enp0s4", "eth1").with_default_link("eth0"));
        assert_eq!(link_resolver(&[link("lo", LinkType::LOOPBACK, &[])]), LinkResolver::new());
    }

    #[tokio::test]
    async fn cmdline_candidates_follow_the_command_line() {
        let h = Harness::start(vec![Box::new(CmdlineConfigController::new())]).unwrap();
        seed_cmdline(&h, "console=ttyS0 ip=10.5.0.2::10.5.0.1:255.255.255.0:node1:eth0:off:10.5.0.53 ip=eth1:dhcp");
        let prefix: IpPrefix = "10.5.0.2/24".parse().unwrap();
        let address = AddressSpec::static_address("eth0", prefix, LAYER);
        h.assert_spec(CONFIG_NAMESPACE, &layered_id(LAYER, &address.id()), &address).await;
        h.assert_spec(CONFIG_NAMESPACE, "cmdline/eth0", &LinkSpec::up("eth0", LAYER)).await;
        let hostname = HostnameSpec { hostname: "node1".into(), domainname: String::new(), config_layer: LAYER };
        h.assert_spec(CONFIG_NAMESPACE, "cmdline/hostname", &hostname).await;
        let resolvers = h
            .assert_eventually::<ResolverSpec, _>(CONFIG_NAMESPACE, "cmdline/resolvers", "dns", |r| r.is_some())
            .await
            .unwrap();
        assert_eq!(resolvers.spec().dns_servers, ["10.5.0.53".parse::<std::net::IpAddr>().unwrap()]);
        let operator = h
            .assert_eventually::<OperatorSpec, _>(CONFIG_NAMESPACE, "cmdline/dhcp4/eth1", "dhcp", |r| r.is_some())
            .await
            .unwrap();
        assert_eq!((operator.spec().operator, operator.spec().link_name.as_str()), (Operator::Dhcp4, "eth1"));
        let routes = h.assert_list::<RouteSpec, _>(CONFIG_NAMESPACE, "default route", |l| l.len() == 1).await;
        assert_eq!(routes[0].id(), "cmdline/inet4/10.5.0.1//1024");
        assert_eq!(routes[0].spec().gateway, Some("10.5.0.1".parse().unwrap()));

        // A command line that no longer says it takes its candidates away.
        seed_cmdline(&h, "console=ttyS0 ip=10.5.0.3:::24::eth0:off");
        h.assert_absent::<AddressSpec>(CONFIG_NAMESPACE, &layered_id(LAYER, &address.id())).await;
        h.assert_absent::<HostnameSpec>(CONFIG_NAMESPACE, "cmdline/hostname").await;
        h.assert_absent::<OperatorSpec>(CONFIG_NAMESPACE, "cmdline/dhcp4/eth1").await;
        h.assert_list::<RouteSpec, _>(CONFIG_NAMESPACE, "no routes", |l| l.is_empty()).await;
        h.assert_eventually::<AddressSpec, _>(CONFIG_NAMESPACE, "cmdline/eth0/10.5.0.3/24", "new address", |r| {
            r.is_some()
        })
        .await;
        h.stop().await;
    }

    #[tokio::test]
    async fn a_bad_parameter_is_a_failure_not_a_crash() {
        let h = Harness::start(vec![Box::new(CmdlineConfigController::new())]).unwrap();
        seed_cmdline(&h, "ip=10.5.0.2:::24::eth0:off");
        h.assert_eventually::<AddressSpec, _>(CONFIG_NAMESPACE, "cmdline/eth0/10.5.0.2/24", "address", |r| r.is_some())
            .await;
        // Unreadable: the command line contributes nothing, and the controller lives on.
        seed_cmdline(&h, "ip=10.5.0.2::bogus:24::eth0:off");
        h.assert_absent::<AddressSpec>(CONFIG_NAMESPACE, "cmdline/eth0/10.5.0.2/24").await;
        seed_cmdline(&h, "ip=10.5.0.4:::24::eth0:off");
        h.assert_eventually::<AddressSpec, _>(CONFIG_NAMESPACE, "cmdline/eth0/10.5.0.4/24", "address", |r| r.is_some())
            .await;
        h.stop().await;
    }

    #[tokio::test]
    async fn ip_without_a_device_goes_to_the_first_link() {
        let h = Harness::start(vec![Box::new(CmdlineConfigController::new())]).unwrap();
        seed_cmdline(&h, "ip=10.5.0.2:::24:::off");
        h.seed(NAMESPACE, "lo", LinkStatus { link_type: LinkType::LOOPBACK, ..Default::default() }).unwrap();
        h.seed(NAMESPACE, "enp1s0", LinkStatus { link_type: LinkType::ETHER, ..Default::default() }).unwrap();
        h.assert_eventually::<AddressSpec, _>(CONFIG_NAMESPACE, "cmdline/enp1s0/10.5.0.2/24", "address", |r| {
            r.is_some()
        })
        .await;
        h.stop().await;
    }
}

//! The merge controllers: one [`GenericMergeController`] per merged network type, candidates
//! from `network-config` to one winner per id in `network`. How each type merges is its
//! `Mergeable` impl below, as Talos keeps its merge rules beside its merge controllers: the
//! higher layer wins; links fold field by field; resolvers and time servers append within a
//! layer.

use crate::controllers::generic_merge::{GenericMergeController, Mergeable};
use crate::cosi::Controller;
use std::net::IpAddr;

use crate::resources::network::{
    AddressSpec, CONFIG_NAMESPACE, ConfigLayer, HostnameSpec, LinkSpec, NAMESPACE, OperatorSpec, ResolverSpec,
    RouteSpec, TimeServerSpec, link_id, operator_id,
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

impl Mergeable for AddressSpec {
    type Layer = ConfigLayer;

    fn layer(&self) -> ConfigLayer {
        self.config_layer
    }

    fn merge_id(&self) -> String {
        self.id()
    }

    /// Talos drops the kernel-managed flags: machined can neither set nor enforce them.
    fn admit(candidate: &Self) -> Self {
        AddressSpec { flags: candidate.flags.managed(), ..candidate.clone() }
    }
}

impl Mergeable for RouteSpec {
    type Layer = ConfigLayer;

    fn layer(&self) -> ConfigLayer {
        self.config_layer
    }

    fn merge_id(&self) -> String {
        self.id()
    }
}

impl Mergeable for LinkSpec {
    type Layer = ConfigLayer;

    fn layer(&self) -> ConfigLayer {
        self.config_layer
    }

    fn merge_id(&self) -> String {
        link_id(&self.name)
    }

    fn merge_into(merged: &mut Self, candidate: &Self) {
        merged.merge_from(candidate);
    }
}

impl Mergeable for HostnameSpec {
    type Layer = ConfigLayer;

    fn layer(&self) -> ConfigLayer {
        self.config_layer
    }

    fn merge_id(&self) -> String {
        HostnameSpec::ID.to_string()
    }

    /// A higher layer replaces; within a layer the first hostname set stays (Talos).
    fn merge_into(merged: &mut Self, candidate: &Self) {
        if merged.hostname.is_empty() || candidate.config_layer > merged.config_layer {
            *merged = candidate.clone();
        }
    }
}

impl Mergeable for ResolverSpec {
    type Layer = ConfigLayer;

    fn layer(&self) -> ConfigLayer {
        self.config_layer
    }

    fn merge_id(&self) -> String {
        ResolverSpec::ID.to_string()
    }

    /// Talos's rules: within a layer the lists join; the machine configuration replaces the
    /// servers when it names any and the search domains when it overrides them; any other
    /// higher layer merges per address family. Search domains otherwise join.
    fn merge_into(merged: &mut Self, candidate: &Self) {
        if candidate.config_layer == merged.config_layer {
            merged.dns_servers.extend(candidate.dns_servers.iter().copied());
            merge_search_domains(&mut merged.search_domains, &candidate.search_domains);
        } else if candidate.config_layer == ConfigLayer::MachineConfiguration {
            if !candidate.dns_servers.is_empty() {
                merged.dns_servers = candidate.dns_servers.clone();
            }
            if candidate.search_domains_overridden {
                merged.search_domains = candidate.search_domains.clone();
            } else {
                merge_search_domains(&mut merged.search_domains, &candidate.search_domains);
            }
        } else {
            merge_dns_servers(&mut merged.dns_servers, &candidate.dns_servers);
            merge_search_domains(&mut merged.search_domains, &candidate.search_domains);
        }
        merged.search_domains_overridden |= candidate.search_domains_overridden;
        merged.config_layer = candidate.config_layer;
    }
}

impl Mergeable for TimeServerSpec {
    type Layer = ConfigLayer;

    fn layer(&self) -> ConfigLayer {
        self.config_layer
    }

    fn merge_id(&self) -> String {
        TimeServerSpec::ID.to_string()
    }

    /// Within a layer the lists join (NTS only if all ask for it); a higher layer replaces.
    fn merge_into(merged: &mut Self, candidate: &Self) {
        if candidate.config_layer == merged.config_layer {
            merged.time_servers.extend(candidate.time_servers.iter().cloned());
            merged.use_nts = merged.use_nts && candidate.use_nts;
        } else {
            *merged = candidate.clone();
        }
    }
}

impl Mergeable for OperatorSpec {
    type Layer = ConfigLayer;

    fn layer(&self) -> ConfigLayer {
        self.config_layer
    }

    fn merge_id(&self) -> String {
        operator_id(self)
    }
}

/// New domains of `src` go in front (in `src` order), the ones `dst` has keep their place.
fn merge_search_domains(dst: &mut Vec<String>, src: &[String]) {
    let mut at = 0;
    for domain in src {
        if !dst.contains(domain) {
            dst.insert(at, domain.clone());
            at += 1;
        }
    }
}

/// A higher layer's servers replace the lower's, except that a family the higher layer
/// says nothing about keeps the lower layer's servers (DHCPv4 DNS survives a DHCPv6 lease
/// with no IPv4 servers, and the other way around).
fn merge_dns_servers(dst: &mut Vec<IpAddr>, src: &[IpAddr]) {
    let has = |list: &[IpAddr], v4: bool| list.iter().any(|ip| ip.is_ipv4() == v4);
    let keep = if has(dst, true) && !has(src, true) {
        Some(true)
    } else if has(dst, false) && !has(src, false) {
        Some(false)
    } else {
        None
    };
    let mut merged = src.to_vec();
    if let Some(v4) = keep {
        merged.extend(dst.iter().filter(|ip| ip.is_ipv4() == v4));
    }
    *dst = merged;
}

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
    use std::collections::BTreeMap;

    use crate::controllers::generic_merge::merge;
    use crate::cosi::Harness;
    use crate::resources::network::test_util::{ip, prefix};
    use crate::resources::network::*;
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

    fn merged<T: Mergeable>(candidates: &[T]) -> BTreeMap<String, T> {
        let ids: Vec<String> = candidates.iter().enumerate().map(|(i, c)| format!("{:?}/{i}", c.layer())).collect();
        merge(ids.iter().map(String::as_str).zip(candidates))
    }

    #[test]
    fn address_merge() {
        let a =
            |layer, flags| AddressSpec { flags, ..AddressSpec::static_address("eth0", prefix("10.0.0.2/24"), layer) };
        let other = AddressSpec::static_address("eth1", prefix("10.0.0.2/24"), ConfigLayer::Default);
        let got = merged(&[
            a(ConfigLayer::MachineConfiguration, AddressFlags::PERMANENT | AddressFlags::TENTATIVE),
            a(ConfigLayer::Operator, AddressFlags(0)),
            other.clone(),
        ]);
        assert_eq!(got.keys().collect::<Vec<_>>(), ["eth0/10.0.0.2/24", "eth1/10.0.0.2/24"]);
        let winner = &got["eth0/10.0.0.2/24"];
        assert_eq!(winner.config_layer, ConfigLayer::MachineConfiguration);
        assert_eq!(winner.flags, AddressFlags::PERMANENT, "kernel-managed flags dropped");
        assert_eq!(got["eth1/10.0.0.2/24"], other);
        // A lone candidate loses its kernel-managed flags too.
        let lone = merged(&[a(ConfigLayer::Cmdline, AddressFlags::PERMANENT | AddressFlags::DEPRECATED)]);
        assert_eq!(lone["eth0/10.0.0.2/24"].flags, AddressFlags::PERMANENT);
    }

    #[test]
    fn route_and_operator_merge_per_id() {
        let route = |layer, metric| RouteSpec {
            family: Family::INET4,
            gateway: Some(ip("10.0.0.1")),
            out_link_name: "eth0".into(),
            table: RoutingTable::MAIN,
            priority: metric,
            config_layer: layer,
            ..RouteSpec::default()
        };
        let got = merged(&[
            route(ConfigLayer::Operator, 1024),
            route(ConfigLayer::Cmdline, 1024),
            route(ConfigLayer::Cmdline, 1025),
        ]);
        assert_eq!(got.len(), 2);
        assert_eq!(got["inet4/10.0.0.1//1024"].config_layer, ConfigLayer::Operator);
        assert_eq!(got["inet4/10.0.0.1//1025"].config_layer, ConfigLayer::Cmdline);

        let op = |layer, metric| OperatorSpec {
            operator: Operator::Dhcp4,
            link_name: "eth0".into(),
            dhcp4: Dhcp4OperatorSpec { route_metric: metric, ..Default::default() },
            config_layer: layer,
            ..Default::default()
        };
        let got = merged(&[op(ConfigLayer::MachineConfiguration, 10), op(ConfigLayer::Default, 1024)]);
        assert_eq!(got["dhcp4/eth0"].dhcp4.route_metric, 10);
        assert!(op(ConfigLayer::Default, 5).same_operator(&op(ConfigLayer::Cmdline, 5)));
        assert!(!op(ConfigLayer::Default, 5).same_operator(&op(ConfigLayer::Default, 6)));
        let vip = OperatorSpec {
            operator: Operator::Vip,
            link_name: "eth0".into(),
            vip: VipOperatorSpec { ip: Some(ip("10.0.0.10")), gratuitous_arp: true },
            ..Default::default()
        };
        assert_eq!(operator_id(&vip), "vip/eth0/10.0.0.10");
    }

    #[test]
    fn link_merge_folds_fields() {
        let bond = LinkSpec {
            logical: true,
            kind: LINK_KIND_BOND.into(),
            link_type: LinkType::ETHER,
            bond_master: BondMasterSpec { mode: BondMode::ACTIVE_BACKUP, ..Default::default() },
            ..LinkSpec::up("bond0", ConfigLayer::Cmdline)
        };
        let mtu_only = LinkSpec { mtu: 9000, ..LinkSpec::up("bond0", ConfigLayer::MachineConfiguration) };
        let default_down = LinkSpec { name: "bond0".into(), mtu: 1500, ..LinkSpec::default() };
        let got = merged(&[mtu_only, bond.clone(), default_down]);
        let want = LinkSpec { mtu: 9000, config_layer: ConfigLayer::MachineConfiguration, ..bond };
        assert_eq!(got["bond0"], want);
    }

    #[test]
    fn hostname_merge() {
        let h =
            |name: &str, layer| HostnameSpec { hostname: name.into(), domainname: String::new(), config_layer: layer };
        let cases: &[(&[HostnameSpec], &str)] = &[
            (&[h("talos-abc", ConfigLayer::Default), h("cmdline", ConfigLayer::Cmdline)], "cmdline"),
            (&[h("config", ConfigLayer::MachineConfiguration), h("dhcp", ConfigLayer::Operator)], "config"),
            (&[h("first", ConfigLayer::Operator), h("second", ConfigLayer::Operator)], "first"),
        ];
        for (candidates, want) in cases {
            assert_eq!(merged(candidates)["hostname"].hostname, *want);
        }
        assert_eq!(
            HostnameSpec::from_fqdn("node1.example.org", ConfigLayer::Cmdline).unwrap().domainname,
            "example.org"
        );
        assert!(HostnameSpec::from_fqdn("", ConfigLayer::Cmdline).is_err());
        assert!(HostnameSpec::from_fqdn(&"a".repeat(64), ConfigLayer::Cmdline).is_err());
        let status = HostnameStatus { hostname: "node1".into(), domainname: "example.org".into() };
        assert_eq!(status.dns_names(), ["node1", "node1.example.org"]);
    }

    #[test]
    fn resolver_merge() {
        let r = |servers: &[&str], domains: &[&str], layer| ResolverSpec {
            dns_servers: servers.iter().map(|s| ip(s)).collect(),
            config_layer: layer,
            search_domains: domains.iter().map(|s| s.to_string()).collect(),
            search_domains_overridden: false,
        };
        type Case = (&'static str, Vec<ResolverSpec>, &'static [&'static str], &'static [&'static str]);
        let cases: Vec<Case> = vec![
            (
                "defaults replaced by cmdline",
                vec![
                    r(&["1.1.1.1", "8.8.8.8"], &[], ConfigLayer::Default),
                    r(&["10.0.0.1"], &[], ConfigLayer::Cmdline),
                ],
                &["10.0.0.1"],
                &[],
            ),
            (
                "same layer joins",
                vec![
                    r(&["10.0.0.1"], &["a.org"], ConfigLayer::Operator),
                    r(&["10.0.0.2"], &["b.org"], ConfigLayer::Operator),
                ],
                &["10.0.0.1", "10.0.0.2"],
                &["b.org", "a.org"],
            ),
            (
                "a family the higher layer lacks is kept",
                vec![r(&["10.0.0.1"], &[], ConfigLayer::Platform), r(&["2001:db8::1"], &[], ConfigLayer::Operator)],
                &["2001:db8::1", "10.0.0.1"],
                &[],
            ),
            (
                "configuration replaces the servers, joins domains",
                vec![
                    r(&["10.0.0.1", "2001:db8::1"], &["dhcp.org"], ConfigLayer::Operator),
                    r(&["9.9.9.9"], &["cfg.org"], ConfigLayer::MachineConfiguration),
                ],
                &["9.9.9.9"],
                &["cfg.org", "dhcp.org"],
            ),
            (
                "configuration without servers keeps the lower ones",
                vec![
                    r(&["10.0.0.1"], &[], ConfigLayer::Operator),
                    r(&[], &["cfg.org"], ConfigLayer::MachineConfiguration),
                ],
                &["10.0.0.1"],
                &["cfg.org"],
            ),
        ];
        for (name, candidates, servers, domains) in cases {
            let got = merged(&candidates).remove("resolvers").unwrap();
            let servers: Vec<IpAddr> = servers.iter().map(|s| ip(s)).collect();
            assert_eq!(got.dns_servers, servers, "{name}");
            assert_eq!(got.search_domains, *domains, "{name}");
        }
        let overriding =
            ResolverSpec { search_domains_overridden: true, ..r(&[], &[], ConfigLayer::MachineConfiguration) };
        let got = merged(&[r(&["10.0.0.1"], &["dhcp.org"], ConfigLayer::Operator), overriding]);
        assert!(got["resolvers"].search_domains.is_empty(), "an empty override clears the search domains");
    }

    #[test]
    fn time_server_merge() {
        let t = |servers: &[&str], nts, layer| TimeServerSpec {
            time_servers: servers.iter().map(|s| s.to_string()).collect(),
            use_nts: nts,
            config_layer: layer,
        };
        let got = merged(&[
            t(&["pool.ntp.org"], false, ConfigLayer::Default),
            t(&["10.0.0.1"], false, ConfigLayer::Operator),
        ]);
        assert_eq!(got["timeservers"].time_servers, ["10.0.0.1"]);
        let got = merged(&[t(&["a"], true, ConfigLayer::Operator), t(&["b"], false, ConfigLayer::Operator)]);
        assert_eq!(
            (got["timeservers"].time_servers.clone(), got["timeservers"].use_nts),
            (vec!["a".into(), "b".into()], false)
        );
    }
}

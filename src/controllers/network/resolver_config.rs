//! `ResolverConfigController`: Talos's default resolvers (1.1.1.1, 8.8.8.8) at the `default`
//! layer, with the node's domain as search domain once the hostname has one (unless the
//! configuration disables it), and the machine configuration's nameservers and search
//! domains (`ResolverConfig`, else v1alpha1) at `configuration`, as ResolverSpec candidates.
//!
//! Pure: only `network-config`; resolv.conf and the DNS forwarder are other controllers'.

use std::net::IpAddr;

use super::config_inputs::{machine_config_input, network_view, put};
use crate::config::NetworkView;
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::config::{DEFAULT_RESOLVERS, resolver_spec};
use crate::resources::network::{ConfigLayer, HostnameStatus, NAMESPACE, ResolverSpec};

#[derive(Default)]
pub struct ResolverConfigController;

impl ResolverConfigController {
    pub fn new() -> Self {
        ResolverConfigController
    }
}

/// The default candidate (Talos's `getDefault`): the domain is searched only under a
/// configuration that does not disable it.
pub fn default_resolvers(view: Option<&NetworkView>, domain: &str) -> ResolverSpec {
    let dns_servers = DEFAULT_RESOLVERS.iter().filter_map(|s| s.parse::<IpAddr>().ok()).collect();
    let search = view.is_some_and(|v| !v.resolver.disable_search_domain) && !domain.is_empty();
    ResolverSpec {
        dns_servers,
        config_layer: ConfigLayer::Default,
        search_domains: if search { vec![domain.to_string()] } else { Vec::new() },
        search_domains_overridden: false,
    }
}

#[async_trait::async_trait]
impl Controller for ResolverConfigController {
    fn name(&self) -> String {
        "ResolverConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![machine_config_input(), Input::weak::<HostnameStatus>(NAMESPACE).with_id(HostnameStatus::ID)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared::<ResolverSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let view = network_view(ctx)?;
        let domain = ctx
            .get::<HostnameStatus>(NAMESPACE, HostnameStatus::ID)?
            .map(|h| h.spec().domainname.clone())
            .unwrap_or_default();
        ctx.start_tracking_outputs();
        put(ctx, ConfigLayer::Default, ResolverSpec::ID, default_resolvers(view.as_ref(), &domain))?;
        if let Some(spec) = view.and_then(|v| resolver_spec(&v, ConfigLayer::MachineConfiguration)) {
            put(ctx, ConfigLayer::MachineConfiguration, ResolverSpec::ID, spec)?;
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

    fn view(text: &str) -> NetworkView {
        crate::config::load(text).unwrap().config.network().unwrap()
    }

    #[test]
    fn the_default_searches_the_domain_under_a_configuration() {
        let none = default_resolvers(None, "example.org");
        assert_eq!(none.dns_servers, ["1.1.1.1".parse::<IpAddr>().unwrap(), "8.8.8.8".parse().unwrap()]);
        assert!(none.search_domains.is_empty());
        let v = view("version: v1alpha1\nmachine:\n  type: worker\n");
        assert_eq!(default_resolvers(Some(&v), "example.org").search_domains, ["example.org"]);
        assert!(default_resolvers(Some(&v), "").search_domains.is_empty());
        let off = view("version: v1alpha1\nmachine:\n  network:\n    disableSearchDomain: true\n");
        assert!(default_resolvers(Some(&off), "example.org").search_domains.is_empty());
    }

    #[tokio::test]
    async fn default_and_configured_resolvers() {
        let h = Harness::start(vec![Box::new(ResolverConfigController::new())]).unwrap();
        h.assert_spec(CONFIG_NAMESPACE, "default/resolvers", &default_resolvers(None, "")).await;
        seed_config(
            &h,
            "version: v1alpha1\nmachine:\n  network:\n    nameservers: [10.0.0.53]\n    searchDomains: [lan]\n",
        );
        h.seed(
            NAMESPACE,
            HostnameStatus::ID,
            HostnameStatus { hostname: "n1".into(), domainname: "example.org".into() },
        )
        .unwrap();
        let want = ResolverSpec {
            dns_servers: vec!["10.0.0.53".parse().unwrap()],
            config_layer: ConfigLayer::MachineConfiguration,
            search_domains: vec!["lan".into()],
            search_domains_overridden: true,
        };
        h.assert_spec(CONFIG_NAMESPACE, "configuration/resolvers", &want).await;
        let default = h
            .assert_eventually::<ResolverSpec, _>(CONFIG_NAMESPACE, "default/resolvers", "domain", |r| {
                r.is_some_and(|r| !r.spec().search_domains.is_empty())
            })
            .await
            .unwrap();
        assert_eq!(default.spec().search_domains, ["example.org"]);
        remove_config(&h);
        h.assert_absent::<ResolverSpec>(CONFIG_NAMESPACE, "configuration/resolvers").await;
        h.assert_spec(CONFIG_NAMESPACE, "default/resolvers", &default_resolvers(None, "")).await;
        h.stop().await;
    }
}

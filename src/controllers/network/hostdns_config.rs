//! `HostDnsConfigController` (Talos's `HostDNSConfigController`): whether the host DNS
//! forwarder runs and where it listens, as the `HostDNSConfig` (id `config`). As in Talos it is
//! on while there is no machine config yet (so early boot resolves through it), and then as
//! the config says: the `ResolverConfig` document's `hostDNS` when it has one, else v1alpha1's
//! `machine.features.hostDNS`. The Kubernetes-facing service addresses are not written: no
//! Kubernetes runs here. Pure: it reads the config resource and writes one resource.

use std::net::{Ipv4Addr, SocketAddr};

use crate::config::{Config, Path, Value};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::config::{self as cfg, MachineConfig};
use crate::resources::network::{HostDnsConfig, NAMESPACE};

/// Where the forwarder listens on a node, as in Talos.
pub const HOST_DNS_LISTEN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 53)), 53);

pub struct HostDnsConfigController;

/// The settings for `config` (`None`: no machine config yet).
pub(crate) fn host_dns_config(config: Option<&Config>) -> HostDnsConfig {
    let mut out =
        HostDnsConfig { enabled: config.is_none(), listen_addresses: vec![HOST_DNS_LISTEN], ..Default::default() };
    let Some(config) = config else { return out };
    let from_resolver = config.by_kind("ResolverConfig").find_map(|d| d.value().at(&Path::keys("hostDNS")));
    let from_features = config.v1alpha1().and_then(|d| d.value().at(&Path::keys("machine.features.hostDNS")));
    if let Some(section) = from_resolver.or(from_features) {
        let flag = |key: &str| section.at(&Path::keys(key)).and_then(Value::as_bool).unwrap_or(false);
        out.enabled = flag("enabled");
        out.resolve_member_names = flag("resolveMemberNames");
    } else {
        out.enabled = false;
    }
    out
}

#[async_trait::async_trait]
impl Controller for HostDnsConfigController {
    fn name(&self) -> String {
        "HostDnsConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<HostDnsConfig>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let mc = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)?.filter(|r| r.is_running());
        let parsed = mc.as_ref().and_then(|mc| mc.spec().parsed());
        ctx.apply(NAMESPACE, HostDnsConfig::ID, host_dns_config(parsed.map(|p| &p.config)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        crate::config::load(text).unwrap().config
    }

    #[test]
    fn host_dns_table() {
        assert!(host_dns_config(None).enabled, "on before any config");
        assert_eq!(host_dns_config(None).listen_addresses, [HOST_DNS_LISTEN]);
        let base = "version: v1alpha1\nmachine:\n  type: worker\n";
        assert!(!host_dns_config(Some(&config(base))).enabled, "a config without hostDNS: off");
        let on = format!("{base}  features:\n    hostDNS:\n      enabled: true\n      resolveMemberNames: true\n");
        let view = host_dns_config(Some(&config(&on)));
        assert!(view.enabled && view.resolve_member_names, "v1alpha1 features");
        let resolver = format!("{on}---\napiVersion: v1alpha1\nkind: ResolverConfig\nhostDNS:\n  enabled: false\n");
        assert!(!host_dns_config(Some(&config(&resolver))).enabled, "ResolverConfig's hostDNS wins");
    }
}

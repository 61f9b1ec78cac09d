//! `HostnameConfigController`: the machine configuration's hostname (`HostnameConfig`, else
//! v1alpha1 `machine.network.hostname`) at the `configuration` layer, and an automatic one at
//! `default`, as Talos's `HostnameConfigController` (the command line's `talos.hostname` is
//! `CmdlineConfigController`'s). With no configuration at all there is no hostname
//! candidate here, as in Talos.
//!
//! The automatic name follows the configuration's `auto`: `addr` (v1alpha1's legacy default)
//! names the node after its one default address, `talos-10-5-0-2`; `stable` hashes a stable
//! identity into `talos-xxx-yyy` the way Talos does. Talos hashes the node identity; talosbox
//! has none yet, so it hashes the first physical link's permanent MAC, which is stable across
//! reboots and reinstalls of the same machine. Pure: only `network-config`.

use std::net::IpAddr;

use sha2::Digest;

use super::config_inputs::{link_statuses, machine_config_input, network_view, put};
use crate::config::network::AutoHostname;
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::config::hostname_spec;
use crate::resources::network::{ConfigLayer, HostnameSpec, LinkStatus, NAMESPACE, NodeAddress};

#[derive(Default)]
pub struct HostnameConfigController;

impl HostnameConfigController {
    pub fn new() -> Self {
        HostnameConfigController
    }
}

/// Talos's `auto: addr` name: `talos-` and the address, dots as dashes, colons dropped.
pub fn addr_hostname(addr: &IpAddr) -> String {
    format!("talos-{}", addr.to_string().replace(':', "").replace('.', "-"))
}

/// Talos's `auto: stable` name: the first 8 bytes of the SHA-256 of `identity` as a
/// base-36 number, characters 1–3 and 4–6 of it.
pub fn stable_hostname(identity: &str) -> String {
    let hash = sha2::Sha256::digest(identity.as_bytes());
    let mut n = u64::from_be_bytes([hash[0], hash[1], hash[2], hash[3], hash[4], hash[5], hash[6], hash[7]]);
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut b36 = Vec::new();
    while n > 0 {
        b36.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    while b36.len() < 7 {
        b36.push(b'0');
    }
    b36.reverse();
    let b36 = String::from_utf8_lossy(&b36).into_owned();
    format!("talos-{}-{}", &b36[1..4], &b36[4..7])
}

/// The identity `stable` hashes: the first physical link by name, its permanent MAC (its
/// current one if the driver reports none).
pub fn stable_identity(links: &[(String, LinkStatus)]) -> Option<String> {
    let mut physical: Vec<&(String, LinkStatus)> = links.iter().filter(|(_, s)| s.physical()).collect();
    physical.sort_by(|a, b| a.0.cmp(&b.0));
    let (_, status) = physical.first()?;
    let mac = if status.permanent_addr.is_empty() { &status.hardware_addr } else { &status.permanent_addr };
    (!mac.is_empty()).then(|| mac.to_string())
}

/// The automatic candidate, when the configuration asks for one and its input is there.
pub fn auto_hostname(
    auto: AutoHostname,
    default: Option<&NodeAddress>,
    links: &[(String, LinkStatus)],
) -> Option<HostnameSpec> {
    let hostname = match auto {
        AutoHostname::Off => return None,
        // Only a node with exactly one default address can be named after it.
        AutoHostname::Addr => match default.map(|d| d.addresses.as_slice()) {
            Some([one]) => addr_hostname(&one.addr()),
            _ => return None,
        },
        AutoHostname::Stable => stable_hostname(&stable_identity(links)?),
    };
    Some(HostnameSpec { hostname, domainname: String::new(), config_layer: ConfigLayer::Default })
}

#[async_trait::async_trait]
impl Controller for HostnameConfigController {
    fn name(&self) -> String {
        "HostnameConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            machine_config_input(),
            Input::weak::<NodeAddress>(NAMESPACE).with_id(NodeAddress::DEFAULT_ID),
            Input::weak::<LinkStatus>(NAMESPACE),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared::<HostnameSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let view = network_view(ctx)?;
        let default = ctx.get::<NodeAddress>(NAMESPACE, NodeAddress::DEFAULT_ID)?;
        let links = link_statuses(ctx)?;
        ctx.start_tracking_outputs();
        if let Some(view) = view {
            if let Some(spec) = hostname_spec(&view, ConfigLayer::MachineConfiguration) {
                put(ctx, ConfigLayer::MachineConfiguration, HostnameSpec::ID, spec)?;
            }
            if let Some(spec) = auto_hostname(view.hostname.auto, default.as_ref().map(|d| d.spec()), &links) {
                put(ctx, ConfigLayer::Default, HostnameSpec::ID, spec)?;
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
    use crate::resources::network::{CONFIG_NAMESPACE, LinkType};
    use crate::types::IpPrefix;

    fn node_address(addrs: &[&str]) -> NodeAddress {
        NodeAddress { addresses: addrs.iter().map(|a| a.parse::<IpPrefix>().unwrap()).collect(), ..Default::default() }
    }

    #[test]
    fn automatic_names() {
        assert_eq!(addr_hostname(&"10.5.0.2".parse().unwrap()), "talos-10-5-0-2");
        assert_eq!(addr_hostname(&"fd00::a:2".parse().unwrap()), "talos-fd00a2");
        let a = stable_hostname("52:54:00:12:34:56");
        assert_eq!(a, stable_hostname("52:54:00:12:34:56"), "stable");
        assert_ne!(a, stable_hostname("52:54:00:12:34:57"));
        assert!(a.len() == "talos-xxx-yyy".len() && a.starts_with("talos-") && a.as_bytes()[9] == b'-', "{a}");
        let links = vec![
            ("lo".to_string(), LinkStatus { link_type: LinkType::LOOPBACK, ..Default::default() }),
            (
                "eth1".to_string(),
                LinkStatus {
                    link_type: LinkType::ETHER,
                    hardware_addr: "52:54:00:00:00:02".parse().unwrap(),
                    ..Default::default()
                },
            ),
            (
                "eth0".to_string(),
                LinkStatus {
                    link_type: LinkType::ETHER,
                    hardware_addr: "52:54:00:00:00:01".parse().unwrap(),
                    ..Default::default()
                },
            ),
        ];
        assert_eq!(stable_identity(&links).as_deref(), Some("52:54:00:00:00:01"));
        assert_eq!(stable_identity(&links[..1]), None);

        let one = node_address(&["10.5.0.2/24"]);
        let two = node_address(&["10.5.0.2/24", "10.6.0.2/24"]);
        let cases = [
            (AutoHostname::Off, Some(&one), None),
            (AutoHostname::Addr, Some(&one), Some("talos-10-5-0-2".to_string())),
            (AutoHostname::Addr, Some(&two), None),
            (AutoHostname::Addr, None, None),
            (AutoHostname::Stable, None, Some(stable_hostname("52:54:00:00:00:01"))),
        ];
        for (auto, default, want) in cases {
            assert_eq!(auto_hostname(auto, default, &links).map(|h| h.hostname), want, "{auto:?}");
        }
    }

    #[tokio::test]
    async fn configured_and_automatic_hostnames() {
        let h = Harness::start(vec![Box::new(HostnameConfigController::new())]).unwrap();
        h.seed(NAMESPACE, NodeAddress::DEFAULT_ID, node_address(&["10.5.0.2/24"])).unwrap();
        seed_config(&h, "version: v1alpha1\nmachine:\n  network:\n    hostname: node1.example.org\n");
        let want = HostnameSpec {
            hostname: "node1".into(),
            domainname: "example.org".into(),
            config_layer: ConfigLayer::MachineConfiguration,
        };
        h.assert_spec(CONFIG_NAMESPACE, "configuration/hostname", &want).await;
        let auto = HostnameSpec {
            hostname: "talos-10-5-0-2".into(),
            domainname: String::new(),
            config_layer: ConfigLayer::Default,
        };
        h.assert_spec(CONFIG_NAMESPACE, "default/hostname", &auto).await;

        // HostnameConfig auto: stable, from the first physical link.
        seed_ether(&h, "eth0", "52:54:00:00:00:01");
        seed_config(&h, "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n");
        h.assert_absent::<HostnameSpec>(CONFIG_NAMESPACE, "configuration/hostname").await;
        let stable = HostnameSpec { hostname: stable_hostname("52:54:00:00:00:01"), ..auto };
        h.assert_spec(CONFIG_NAMESPACE, "default/hostname", &stable).await;

        remove_config(&h);
        h.assert_absent::<HostnameSpec>(CONFIG_NAMESPACE, "default/hostname").await;
        h.stop().await;
    }
}

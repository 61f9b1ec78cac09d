//! `ImageNetworkConfigController`: network settings the image itself carries, as
//! `platform`-layer candidates — beyond Talos, which has asked since 2021 (its #3684) for a
//! way to boot a node with no DHCP server onto a static address. The file
//! ([`IMAGE_NETWORK_CONFIG_PATH`] in an image) holds the same network documents as a machine
//! configuration (`LinkConfig`, `DHCPv4Config`, `ResolverConfig`, … or a v1alpha1 document
//! with only `machine.network`) and nothing else.
//!
//! Platform sits below operators and the machine configuration: a DHCP lease or an applied
//! configuration still wins, and a link the file configures gets no default DHCP. The file
//! is read once, on the first reconcile (it is part of the read-only image); no file means
//! nothing to contribute. A file that does not read is logged and contributes nothing rather
//! than half of itself. Writes only `network-config`.

use std::path::PathBuf;

use super::config_inputs::{Resolved, candidate_outputs, link_statuses, put};
use crate::config::{ConfigError, NetworkView};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::config::{
    address_specs, hostname_spec, link_specs, operator_specs, resolver_spec, route_specs, time_server_spec,
};
use crate::resources::network::{
    ConfigLayer, HostnameSpec, LinkStatus, NAMESPACE, ResolverSpec, TimeServerSpec, link_id, operator_id,
};

/// Where an image keeps its network file.
pub use crate::boot::IMAGE_NETWORK_CONFIG_PATH;

const LAYER: ConfigLayer = ConfigLayer::Platform;

#[derive(Debug, thiserror::Error)]
pub enum ImageNetworkError {
    #[error("reading the image's network settings {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("the image's network settings {path}: {source}")]
    Config { path: String, source: Box<ConfigError> },
}

/// Reads the file's text into a network view, refusing anything but network settings.
pub fn parse_image_network(path: &str, text: &str) -> Result<NetworkView, ImageNetworkError> {
    let config = |source| ImageNetworkError::Config { path: path.to_string(), source: Box::new(source) };
    let loaded = crate::config::load(text).map_err(config)?;
    loaded.config.network_only().map_err(config)?;
    loaded.config.network().map_err(config)
}

pub struct ImageNetworkConfigController {
    path: PathBuf,
    /// `None` until read; `Some(None)`: nothing to contribute.
    view: Option<Option<NetworkView>>,
}

impl ImageNetworkConfigController {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ImageNetworkConfigController { path: path.into(), view: None }
    }

    fn load(&self) -> Result<Option<NetworkView>, ImageNetworkError> {
        let path = self.path.display().to_string();
        match std::fs::read_to_string(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ImageNetworkError::Read { path, source }),
            Ok(text) => parse_image_network(&path, &text).map(Some),
        }
    }
}

#[async_trait::async_trait]
impl Controller for ImageNetworkConfigController {
    fn name(&self) -> String {
        "ImageNetworkConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<LinkStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        candidate_outputs()
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        if self.view.is_none() {
            let loaded = self.load().unwrap_or_else(|e| {
                tracing::error!("{e}; the image contributes no network settings");
                None
            });
            self.view = Some(loaded);
        }
        let Some(Some(view)) = &self.view else { return Ok(()) };
        let links = link_statuses(ctx)?;
        let r = Resolved::new(view.clone(), &links);
        ctx.start_tracking_outputs();
        for spec in address_specs(&r.view, &r.devices, &r.links, LAYER) {
            put(ctx, LAYER, &spec.id(), spec)?;
        }
        for spec in route_specs(&r.view, &r.devices, &r.links, LAYER) {
            put(ctx, LAYER, &spec.id(), spec)?;
        }
        for spec in link_specs(&r.view, &r.devices, &r.links, LAYER) {
            put(ctx, LAYER, &link_id(&spec.name), spec)?;
        }
        for spec in operator_specs(&r.view, &r.devices, &r.links, LAYER) {
            put(ctx, LAYER, &operator_id(&spec), spec)?;
        }
        if let Some(spec) = hostname_spec(&r.view, LAYER) {
            put(ctx, LAYER, HostnameSpec::ID, spec)?;
        }
        if let Some(spec) = resolver_spec(&r.view, LAYER) {
            put(ctx, LAYER, ResolverSpec::ID, spec)?;
        }
        if let Some(spec) = time_server_spec(&r.view, LAYER) {
            put(ctx, LAYER, TimeServerSpec::ID, spec)?;
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
    use crate::resources::network::{AddressSpec, LinkSpec, OperatorSpec, RouteSpec};

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("platform-network.yaml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn ids<T: crate::cosi::ResourceSpec>(list: &[crate::cosi::Resource<T>]) -> Vec<String> {
        let mut ids: Vec<String> = list.iter().map(|r| r.id().to_string()).collect();
        ids.sort();
        ids
    }

    #[test]
    fn the_file_holds_network_settings_only() {
        assert!(parse_image_network("f", "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n").is_ok());
        let err = parse_image_network("f", "version: v1alpha1\nmachine:\n  token: abc.def\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the image's network settings f: v1alpha1: machine.token: only network settings belong here"
        );
        let err =
            parse_image_network("f", "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtu: big\n").unwrap_err();
        assert!(err.to_string().starts_with("the image's network settings f: LinkConfig eth0: mtu: expected"), "{err}");
    }

    #[tokio::test]
    async fn the_images_settings_at_the_platform_layer() {
        let (_dir, path) = file(
            "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\naddresses:\n  - address: 10.5.0.2/24\n\
             routes:\n  - gateway: 10.5.0.1\n---\napiVersion: v1alpha1\nkind: ResolverConfig\nnameservers:\n  - address: 10.5.0.1\n\
             ---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: node1\n---\napiVersion: v1alpha1\nkind: DHCPv6Config\nname: eth1\n",
        );
        let h = Harness::start(vec![Box::new(ImageNetworkConfigController::new(path))]).unwrap();
        seed_ether(&h, "eth0", "52:54:00:00:00:01");
        let address = AddressSpec::static_address("eth0", "10.5.0.2/24".parse().unwrap(), LAYER);
        h.assert_spec(CONFIG_NAMESPACE, "platform/eth0/10.5.0.2/24", &address).await;
        let routes = h.assert_list::<RouteSpec, _>(CONFIG_NAMESPACE, "route", |l| l.len() == 1).await;
        assert_eq!(ids(&routes), ["platform/inet4/10.5.0.1//1024"]);
        let links = h.assert_list::<LinkSpec, _>(CONFIG_NAMESPACE, "links", |l| l.len() == 2).await;
        assert_eq!(ids(&links), ["platform/eth0", "platform/eth1"]);
        let ops = h.assert_list::<OperatorSpec, _>(CONFIG_NAMESPACE, "dhcp6", |l| l.len() == 1).await;
        assert_eq!(ids(&ops), ["platform/dhcp6/eth1"]);
        let hostname = HostnameSpec { hostname: "node1".into(), domainname: String::new(), config_layer: LAYER };
        h.assert_spec(CONFIG_NAMESPACE, "platform/hostname", &hostname).await;
        let resolvers = h
            .assert_eventually::<ResolverSpec, _>(CONFIG_NAMESPACE, "platform/resolvers", "resolvers", |r| r.is_some())
            .await
            .unwrap();
        assert_eq!(resolvers.spec().dns_servers, ["10.5.0.1".parse::<std::net::IpAddr>().unwrap()]);
        h.stop().await;
    }

    #[tokio::test]
    async fn no_file_or_a_bad_one_contributes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (_bad_dir, bad) = file("version: v1alpha1\nmachine:\n  type: worker\n");
        let h =
            Harness::start(vec![Box::new(ImageNetworkConfigController::new(dir.path().join("absent.yaml")))]).unwrap();
        seed_ether(&h, "eth0", "52:54:00:00:00:01");
        h.assert_list::<LinkSpec, _>(CONFIG_NAMESPACE, "nothing", |l| l.is_empty()).await;
        h.stop().await;
        let mut c = ImageNetworkConfigController::new(bad);
        assert!(c.load().is_err());
        c.path = dir.path().to_path_buf();
        assert!(matches!(c.load(), Err(ImageNetworkError::Read { .. })), "a directory does not read");
    }
}

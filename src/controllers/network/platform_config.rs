//! `PlatformConfigController`: what the platform says, as Talos's controller of that name —
//! the PlatformMetadata (`talosctl get platformmetadata`) on every platform, and on nocloud
//! the seed's `network-config` as `platform`-layer candidates and its hostname (`meta-data`,
//! or `ds=…;h=`) as the platform-layer HostnameSpec.
//!
//! The seed is located and read once ([`crate::platform::nocloud`]); while it cannot be (no
//! cidata disk yet — its driver loads after machined starts —, a seed URL before the network
//! is up) the controller tries again whenever it runs, at most once a second, and at the
//! latest 1 s doubling to 10 s after the last try; each distinct failure is reported once. `network-config` is parsed
//! again whenever the links change, since it names links by MAC. A `network-config` that does
//! not read is reported and contributes nothing rather than half of itself; the hostname and
//! metadata still apply. Writes `network-config` and the runtime PlatformMetadata.

use std::time::{Duration, Instant};

use super::config_inputs::{candidate_outputs, cmdline_input, link_statuses, put};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::kernel::cmdline::Cmdline;
use crate::network::nocloud::parse_network_config;
use crate::platform::Platform;
use crate::platform::nocloud::{self, DataSource, MetaData, Paths, Seed};
use crate::resources::network::{ConfigLayer, HostnameSpec, LinkStatus, NAMESPACE, ResolverSpec, link_id, operator_id};
use crate::resources::runtime::{self, KernelCmdline, PlatformMetadata};

const LAYER: ConfigLayer = ConfigLayer::Platform;
const MIN_TRY_GAP: Duration = Duration::from_secs(1);
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(10);

/// The seed's documents, once read.
#[derive(Debug, Clone)]
struct Read {
    seed: Seed,
    meta: MetaData,
    network: Option<String>,
}

pub struct PlatformConfigController {
    paths: Paths,
    read: Option<Read>,
    retry: Duration,
    last_try: Option<Instant>,
    reported: String,
}

impl PlatformConfigController {
    pub fn new(paths: Paths) -> Self {
        PlatformConfigController { paths, read: None, retry: FIRST_RETRY, last_try: None, reported: String::new() }
    }

    fn report(&mut self, line: String) {
        if line != self.reported {
            crate::kernel::console::line(&format!("platform: {line}"));
            self.reported = line;
        }
    }

    async fn read_seed(&self, ctx: &Context, cmdline: Cmdline) -> Result<Read, String> {
        let paths = self.paths.clone();
        let seed = ctx
            .blocking("locating the nocloud seed", move || nocloud::locate(&cmdline, &paths))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let meta = match seed.read(nocloud::META_DATA).await.map_err(|e| e.to_string())? {
            None => MetaData::default(),
            Some(text) => MetaData::parse(&text)
                .map_err(|reason| nocloud::SeedError::MetaData { seed: seed.describe(), reason }.to_string())?,
        };
        let network = seed.read(nocloud::NETWORK_CONFIG).await.map_err(|e| e.to_string())?;
        Ok(Read { seed, meta, network })
    }

    fn metadata(platform: Platform, read: Option<&Read>) -> PlatformMetadata {
        let mut md = PlatformMetadata { platform: platform.name().to_string(), ..PlatformMetadata::default() };
        if let Some(r) = read {
            let m = &r.meta;
            let text = |v: &Option<String>| v.clone().unwrap_or_default();
            md.hostname = m.hostname(&r.seed.ds).unwrap_or_default();
            md.instance_id = r.seed.ds.instance_id.clone().or_else(|| m.instance_id.clone()).unwrap_or_default();
            md.instance_type = text(&m.instance_type);
            md.provider_id = text(&m.provider_id);
            md.region = text(&m.region);
            md.zone = text(&m.zone);
            md.internal_dns = text(&m.local_hostname);
            md.external_dns = text(&m.public_hostname);
        }
        md
    }
}

fn hostname_of(meta: &MetaData, ds: &DataSource) -> Option<HostnameSpec> {
    HostnameSpec::from_fqdn(&meta.hostname(ds)?, LAYER).ok()
}

#[async_trait::async_trait]
impl Controller for PlatformConfigController {
    fn name(&self) -> String {
        "PlatformConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![cmdline_input(), Input::weak::<LinkStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        let mut outputs = candidate_outputs();
        outputs.push(Output::exclusive::<PlatformMetadata>());
        outputs
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let Some(cmdline) = ctx.get::<KernelCmdline>(runtime::NAMESPACE, KernelCmdline::ID)? else { return Ok(()) };
        let cmdline = Cmdline::parse(&cmdline.spec().cmdline);
        let platform = Platform::from_cmdline(&cmdline);
        if platform == Platform::Nocloud && self.read.is_none() {
            let since = self.last_try.map(|t| t.elapsed());
            if since.is_some_and(|s| s < MIN_TRY_GAP) {
                ctx.requeue_after(MIN_TRY_GAP - since.unwrap_or_default());
            } else {
                self.last_try = Some(Instant::now());
                match self.read_seed(ctx, cmdline).await {
                    Ok(read) => {
                        crate::kernel::console::line(&format!("platform: nocloud seed {}", read.seed.describe()));
                        self.read = Some(read);
                    }
                    Err(e) => {
                        self.report(format!("{e}; trying again"));
                        ctx.requeue_after(self.retry);
                        self.retry = (self.retry * 2).min(MAX_RETRY);
                    }
                }
            }
        }
        let read = if platform == Platform::Nocloud { self.read.clone() } else { None };

        ctx.start_tracking_outputs();
        ctx.apply(runtime::NAMESPACE, PlatformMetadata::ID, Self::metadata(platform, read.as_ref()))?;
        if let Some(read) = &read {
            if let Some(spec) = hostname_of(&read.meta, &read.seed.ds) {
                put(ctx, LAYER, HostnameSpec::ID, spec)?;
            }
            if let Some(text) = &read.network {
                let links = link_statuses(ctx)?;
                match parse_network_config(text, &links) {
                    Err(e) => {
                        self.report(format!("{}: {e}; its network settings are not applied", read.seed.describe()))
                    }
                    Ok(net) => {
                        for spec in net.addresses {
                            put(ctx, LAYER, &spec.id(), spec)?;
                        }
                        for spec in net.routes {
                            put(ctx, LAYER, &spec.id(), spec)?;
                        }
                        for spec in net.links {
                            put(ctx, LAYER, &link_id(&spec.name), spec)?;
                        }
                        for spec in net.operators {
                            put(ctx, LAYER, &operator_id(&spec), spec)?;
                        }
                        if let Some(spec) = net.resolvers.into_iter().next() {
                            put(ctx, LAYER, ResolverSpec::ID, spec)?;
                        }
                    }
                }
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
    use crate::resources::network::CONFIG_NAMESPACE;
    use crate::resources::network::{AddressSpec, RouteSpec};
    use std::path::Path;

    const NETWORK: &str = "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    mac_address: \"52:54:00:00:00:01\"\n    subnets:\n      - type: static\n        address: 10.0.2.20\n        netmask: 255.255.255.0\n        gateway: 10.0.2.2\n  - type: nameserver\n    address: [10.0.2.3]\n";

    fn no_devices(dir: &Path) -> Paths {
        let p = Paths { sys_class_block: dir.join("block"), dev: dir.join("dev"), dmi: dir.join("dmi") };
        for d in [&p.sys_class_block, &p.dev, &p.dmi] {
            std::fs::create_dir_all(d).unwrap();
        }
        p
    }

    /// Writes a vfat seed (mkfs.fat, mcopy) at `dev/vdb` with the files given.
    fn seed_disk(p: &Paths, files: &[(&str, &str)]) {
        std::fs::create_dir_all(p.sys_class_block.join("vdb")).unwrap();
        std::fs::write(p.sys_class_block.join("vdb/size"), "2880\n").unwrap();
        let files: Vec<(&str, &[u8])> = files.iter().map(|(n, t)| (*n, t.as_bytes())).collect();
        crate::block::testing::vfat(&p.dev.join("vdb"), None, 1440, "CIDATA", &files);
    }

    #[tokio::test]
    async fn metal_says_only_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let h = Harness::start(vec![Box::new(PlatformConfigController::new(no_devices(dir.path())))]).unwrap();
        seed_cmdline(&h, "console=ttyS0 talos.platform=metal");
        let md = PlatformMetadata { platform: "metal".into(), ..PlatformMetadata::default() };
        h.assert_spec(runtime::NAMESPACE, PlatformMetadata::ID, &md).await;
        h.stop().await;
    }

    #[tokio::test]
    async fn a_cidata_disk_that_appears_late_gives_the_network_hostname_and_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let paths = no_devices(dir.path());
        let h = Harness::start(vec![Box::new(PlatformConfigController::new(paths.clone()))]).unwrap();
        seed_ether(&h, "eth0", "52:54:00:00:00:01");
        seed_cmdline(&h, "talos.platform=nocloud");
        // No seed yet: the metadata names the platform and nothing else.
        let md = PlatformMetadata { platform: "nocloud".into(), ..PlatformMetadata::default() };
        h.assert_spec(runtime::NAMESPACE, PlatformMetadata::ID, &md).await;

        seed_disk(
            &paths,
            &[
                ("meta-data", "instance-id: iid-7\nlocal-hostname: node-7.example.org\nregion: lab\n"),
                ("network-config", NETWORK),
            ],
        );
        let address = AddressSpec::static_address("eth0", "10.0.2.20/24".parse().unwrap(), LAYER);
        h.assert_spec(CONFIG_NAMESPACE, "platform/eth0/10.0.2.20/24", &address).await;
        let hostname =
            HostnameSpec { hostname: "node-7".into(), domainname: "example.org".into(), config_layer: LAYER };
        h.assert_spec(CONFIG_NAMESPACE, "platform/hostname", &hostname).await;
        let routes = h.assert_list::<RouteSpec, _>(CONFIG_NAMESPACE, "the gateway route", |l| l.len() == 1).await;
        assert_eq!(routes[0].spec().gateway, Some("10.0.2.2".parse().unwrap()));
        let md = PlatformMetadata {
            platform: "nocloud".into(),
            hostname: "node-7.example.org".into(),
            instance_id: "iid-7".into(),
            region: "lab".into(),
            internal_dns: "node-7.example.org".into(),
            ..PlatformMetadata::default()
        };
        h.assert_spec(runtime::NAMESPACE, PlatformMetadata::ID, &md).await;
        h.stop().await;
    }

    #[tokio::test]
    async fn a_network_config_that_does_not_read_contributes_nothing_but_the_hostname_stays() {
        let dir = tempfile::tempdir().unwrap();
        let paths = no_devices(dir.path());
        seed_disk(&paths, &[("meta-data", "local-hostname: n1\n"), ("network-config", "version: 3\n")]);
        let h = Harness::start(vec![Box::new(PlatformConfigController::new(paths))]).unwrap();
        seed_cmdline(&h, "talos.platform=nocloud");
        let hostname = HostnameSpec { hostname: "n1".into(), domainname: String::new(), config_layer: LAYER };
        h.assert_spec(CONFIG_NAMESPACE, "platform/hostname", &hostname).await;
        // Written in the same reconcile as the hostname, had the network-config read.
        h.assert_list::<AddressSpec, _>(CONFIG_NAMESPACE, "no addresses", |l| l.is_empty()).await;
        h.stop().await;
    }
}

//! Controllers: one per file, each reconciling resources through the runtime context, and
//! [`register_all`], the one place that decides which run where.
//!
//! On a node every controller runs. In `--mode container` (several nodes as processes on one
//! host) nothing that touches the host — its links, hostname, `/etc` files, port 53, disks —
//! may run: those controllers are [`Scope::NodeOnly`] and run only on a node, or in a network
//! namespace a test hands them.

pub mod block;
pub mod config;
pub mod files;
pub mod generic_merge;
pub mod generic_transform;
mod kernel_sources;
pub mod network;
pub mod runtime;
pub mod secrets;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::cosi::{Controller, Runtime, RuntimeError};
use crate::services::Supervisor;

/// Which controllers a machined runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControllerSet {
    /// PID 1 on a node: all of them.
    Node,
    /// A process on a shared host: none that touch the host.
    Container,
}

/// Where a controller may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Anywhere,
    /// Touches the host: links, hostname, `/etc`, port 53, disks.
    NodeOnly,
    /// Stands in, in container mode, for what only a node does.
    ContainerOnly,
}

/// What the controllers are built from.
pub struct Environment {
    pub set: ControllerSet,
    pub supervisor: Arc<Supervisor>,
    /// The kernel command line to read; `None`: there is none (container mode without one).
    pub cmdline: Option<PathBuf>,
    /// The configuration store's feed, and where it keeps the configuration (for messages).
    pub config: watch::Receiver<config::StoredConfig>,
    pub config_source: String,
    /// How the node names itself in certificates.
    pub node: secrets::NodeIdentity,
    /// Where apid listens (`:50000` on a node; the node's address in container mode).
    pub api_listen: String,
    /// The node's one writer of META (its write counter wakes the readers).
    pub meta: Arc<crate::block::meta::MetaStore>,
    /// Passphrases `talosctl unlock` hands to the volume manager.
    pub unlocks: Arc<block::unlock::Unlocks>,
    /// The KMS and the TPM the volume manager seals `kms` and `tpm` keys with.
    pub kms: Arc<dyn crate::block::encryption::Kms>,
    pub tpm: Arc<dyn crate::block::encryption::Tpm>,
}

/// Every controller, with where it may run.
pub fn all(env: &Environment) -> Vec<(Scope, Box<dyn Controller>)> {
    use runtime::*;
    let mut all: Vec<(Scope, Box<dyn Controller>)> = vec![
        (Scope::Anywhere, Box::new(KernelCmdlineController::new(env.cmdline.clone())) as Box<dyn Controller>),
        (Scope::Anywhere, Box::new(VersionController)),
        (
            Scope::Anywhere,
            Box::new(config::MachineConfigController::new(env.config.clone(), env.config_source.clone())),
        ),
        (Scope::Anywhere, Box::new(MachineStatusController)),
        (Scope::Anywhere, Box::new(ServiceController::new(Arc::clone(&env.supervisor)))),
        (Scope::Anywhere, Box::new(ApiServiceConfigController::new(env.api_listen.clone()))),
        (Scope::Anywhere, Box::new(secrets::RootController)),
        (Scope::Anywhere, Box::new(secrets::CertSansController::new(env.node.clone()))),
        (Scope::Anywhere, Box::new(secrets::ApiCertController::new())),
        (Scope::Anywhere, Box::new(secrets::TrustdCertController)),
    ];
    // Networking: the node's own links, addresses and routes, so never in container mode.
    // The config and merge controllers are pure, but their specs exist only to be applied
    // to the node's kernel.
    use network::*;
    all.push((Scope::NodeOnly, Box::new(CmdlineConfigController::new())));
    all.push((Scope::NodeOnly, Box::new(AddressConfigController::new())));
    all.push((Scope::NodeOnly, Box::new(RouteConfigController::new())));
    all.push((Scope::NodeOnly, Box::new(LinkConfigController::new())));
    all.push((Scope::NodeOnly, Box::new(HostnameConfigController::new())));
    all.push((Scope::NodeOnly, Box::new(ResolverConfigController::new())));
    all.push((Scope::NodeOnly, Box::new(TimeServerConfigController::new())));
    all.push((Scope::NodeOnly, Box::new(OperatorConfigController::new())));
    all.push((Scope::NodeOnly, Box::new(ImageNetworkConfigController::new(IMAGE_NETWORK_CONFIG_PATH))));
    all.push((Scope::NodeOnly, Box::new(PlatformConfigController::new(crate::platform::nocloud::Paths::node()))));
    all.extend(merge_controllers().into_iter().map(|c| (Scope::NodeOnly, c)));
    all.push((Scope::NodeOnly, Box::new(AddressSpecController::new(NetworkTarget::Node))));
    all.push((Scope::NodeOnly, Box::new(AddressStatusController::new(NetworkTarget::Node))));
    all.push((Scope::NodeOnly, Box::new(LinkStatusController::new(NetworkTarget::Node))));
    all.push((Scope::NodeOnly, Box::new(LinkSpecController::new(NetworkTarget::Node))));
    all.push((Scope::NodeOnly, Box::new(RouteSpecController::new(NetworkTarget::Node))));
    all.push((Scope::NodeOnly, Box::new(RouteStatusController::new(NetworkTarget::Node))));
    all.push((Scope::NodeOnly, Box::new(HostnameSpecController::new(crate::kernel::uts::UtsTarget::Node))));
    all.push((Scope::NodeOnly, Box::new(HostnameStatusController::new(crate::kernel::uts::UtsTarget::Node))));
    // OperatorMergeController is among the merge controllers above.
    all.push((Scope::NodeOnly, Box::new(OperatorSpecController::new(NetworkTarget::Node))));
    all.push((Scope::NodeOnly, Box::new(resolver_spec_controller())));
    all.push((Scope::NodeOnly, Box::new(time_server_spec_controller())));
    all.push((Scope::NodeOnly, Box::new(NodeAddressController)));
    all.push((Scope::NodeOnly, Box::new(DeviceConfigController)));
    all.push((Scope::NodeOnly, Box::new(EtcFileController)));
    all.push((Scope::NodeOnly, Box::new(files::TrustedRootsController::new(files::IMAGE_TRUSTED_ROOTS))));
    all.push((Scope::NodeOnly, Box::new(files::EtcFileSpecController::new(files::SYSTEM_ETC))));
    all.push((Scope::NodeOnly, Box::new(NetworkStatusController)));
    all.push((Scope::NodeOnly, Box::new(HostDnsConfigController)));
    all.push((Scope::NodeOnly, Box::new(DnsResolveCacheController::new(NetworkTarget::Node, HOST_DNS_LISTEN))));
    // Disks and volumes: the node's own, never a shared host's.
    all.push((Scope::NodeOnly, Box::new(block::DevicesController::new())));
    all.push((Scope::NodeOnly, Box::new(block::DisksController::new())));
    all.push((Scope::NodeOnly, Box::new(block::DiscoveryController::new())));
    all.push((Scope::NodeOnly, Box::new(block::SystemDiskController)));
    all.push((Scope::NodeOnly, Box::new(block::VolumeConfigController)));
    all.push((
        Scope::NodeOnly,
        Box::new(
            block::VolumeManagerController::new(env.supervisor.reaper(), Arc::clone(&env.kms), Arc::clone(&env.tpm))
                .with_unlocks(Arc::clone(&env.unlocks))
                .with_meta(Arc::clone(&env.meta)),
        ),
    ));
    all.push((Scope::NodeOnly, Box::new(block::MountRequestController)));
    all.push((Scope::NodeOnly, Box::new(block::MountController::new())));
    all.push((Scope::NodeOnly, Box::new(block::MountStatusController)));
    all.push((Scope::NodeOnly, Box::new(secrets::EncryptionSaltController::new())));
    all.push((Scope::NodeOnly, Box::new(MetaLoadController::new(env.meta.subscribe()))));
    all.push((Scope::NodeOnly, Box::new(block::StateEncryptionMetaController::new(Arc::clone(&env.meta)))));
    // The node's clock: never a shared host's.
    let clock = Arc::new(crate::kernel::clock::SystemClock);
    all.push((Scope::NodeOnly, Box::new(TimeSyncController::new(NetworkTarget::Node, clock))));
    // A node run as a process keeps the host's time: sync is disabled, as for Talos in Docker.
    all.push((Scope::ContainerOnly, Box::new(HostClockController)));
    all
}

/// The controllers of `env.set`.
pub fn for_set(env: &Environment) -> Vec<Box<dyn Controller>> {
    all(env)
        .into_iter()
        .filter(|(scope, _)| match env.set {
            ControllerSet::Node => *scope != Scope::ContainerOnly,
            ControllerSet::Container => *scope != Scope::NodeOnly,
        })
        .map(|(_, c)| c)
        .collect()
}

/// Registers the controllers of `env.set` with `runtime`.
pub fn register_all(runtime: &mut Runtime, env: &Environment) -> Result<(), RuntimeError> {
    for controller in for_set(env) {
        runtime.register_boxed(controller)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::{ReapMode, Reaper};

    fn env(set: ControllerSet) -> Environment {
        let supervisor = Supervisor::new(Reaper::new(ReapMode::Own), "/bin/true".into(), Default::default(), |_| {});
        Environment {
            set,
            supervisor,
            cmdline: None,
            config: watch::channel(config::StoredConfig::default()).1,
            config_source: "nowhere".into(),
            node: secrets::NodeIdentity { hostname: "test".into(), addresses: Vec::new() },
            api_listen: "127.0.0.1:50000".into(),
            meta: crate::block::meta::MetaStore::new(),
            unlocks: Default::default(),
            kms: Arc::new(NoKms),
            tpm: Arc::new(crate::block::tpm_key::NodeTpm),
        }
    }

    /// No KMS: these tests only list the controllers.
    struct NoKms;

    impl crate::block::encryption::Kms for NoKms {
        fn seal(&self, _: &str, _: &str, _: &[u8]) -> Result<Vec<u8>, String> {
            Err("no KMS here".into())
        }
        fn unseal(&self, _: &str, _: &str, _: &[u8]) -> Result<Vec<u8>, String> {
            Err("no KMS here".into())
        }
    }

    #[test]
    fn container_mode_runs_nothing_that_touches_the_host() {
        let names = |cs: Vec<Box<dyn Controller>>| cs.iter().map(|c| c.name()).collect::<Vec<_>>();
        let node = names(for_set(&env(ControllerSet::Node)));
        let container = names(for_set(&env(ControllerSet::Container)));
        let everything: Vec<(Scope, String)> =
            all(&env(ControllerSet::Node)).into_iter().map(|(s, c)| (s, c.name())).collect();
        let scoped = |keep: &dyn Fn(Scope) -> bool| -> Vec<String> {
            everything.iter().filter(|(s, _)| keep(*s)).map(|(_, n)| n.clone()).collect()
        };
        assert_eq!(node, scoped(&|s| s != Scope::ContainerOnly), "a node runs everything but the stand-ins");
        assert_eq!(container, scoped(&|s| s != Scope::NodeOnly), "container mode runs nothing node-only");
        assert!(container.iter().any(|n| n == "HostClockController"));
        for name in ["KernelCmdlineController", "MachineStatusController", "ServiceController"] {
            assert!(node.iter().any(|n| n == name), "{name} missing");
        }
    }

    #[test]
    fn every_controller_registers_against_the_node_registry() {
        let registry = std::sync::Arc::new(crate::resources::registry().unwrap());
        for set in [ControllerSet::Node, ControllerSet::Container] {
            let mut runtime = Runtime::new(crate::cosi::State::in_memory(), registry.clone());
            register_all(&mut runtime, &env(set)).unwrap();
        }
    }
}

//! The networking controllers: config sources writing layered candidates into
//! `network-config`, the merge into `network`, the Spec controllers that push the merged
//! specs to the kernel and the Status controllers that mirror the kernel back; and the
//! operators (DHCPv4, DHCPv6), run by OperatorSpecController, whose leases re-enter
//! `network-config` at the operator layer.
//!
//! Only the Spec and Status controllers reach the kernel, and only through rtnetlink in the
//! network namespace their [`NetworkTarget`] names: the node's own on a node, a fresh one in
//! a test. None of them may run in `--mode container`, where the namespace is the host's.

mod address_config;
mod address_spec;
mod address_status;
mod cmdline_config;
mod config_inputs;
mod device_config;
mod dns_resolve_cache;
mod etc_file;
mod hostdns_config;
mod hostname_config;
mod hostname_spec;
mod hostname_status;
mod image_network_config;
mod link_config;
mod link_spec;
mod link_status;
mod merge;
mod network_status;
mod node_address;
mod operator_config;
mod operator_spec;
mod platform_config;
mod resolver_config;
mod resolver_spec;
mod route_config;
mod route_spec;
mod route_status;
mod spec_apply;
mod status_observe;
pub mod time_sync;
mod timeserver_config;
mod timeserver_spec;

pub use address_config::AddressConfigController;
pub use address_spec::AddressSpecController;
pub use address_status::AddressStatusController;
pub use cmdline_config::{CmdlineConfigController, link_resolver};
pub use device_config::DeviceConfigController;
pub use dns_resolve_cache::{DnsResolveCacheController, DnsResolveCacheError};
pub use etc_file::{EtcFileController, HOST_DNS_ADDRESS};
pub use hostdns_config::{HOST_DNS_LISTEN, HostDnsConfigController};
pub use hostname_config::HostnameConfigController;
pub use hostname_spec::{HostnameSpecController, HostnameSpecError};
pub use hostname_status::HostnameStatusController;
pub use image_network_config::{
    IMAGE_NETWORK_CONFIG_PATH, ImageNetworkConfigController, ImageNetworkError, parse_image_network,
};
pub use link_config::LinkConfigController;
pub use link_spec::{LinkSpecController, LinkSpecError};
pub use link_status::LinkStatusController;
pub use merge::{
    AddressMergeController, HostnameMergeController, LinkMergeController, OperatorMergeController,
    ResolverMergeController, RouteMergeController, TimeServerMergeController, merge_controllers,
};
pub use network_status::NetworkStatusController;
pub use node_address::NodeAddressController;
pub use operator_config::OperatorConfigController;
pub use operator_spec::{OperatorFactory, OperatorSpecController};
pub use platform_config::PlatformConfigController;
pub use resolver_config::ResolverConfigController;
pub use resolver_spec::{ResolverSpecController, resolver_spec_controller};
pub use route_config::RouteConfigController;
pub use route_spec::{RTNH_F_ONLINK, RouteSpecController};
pub use route_status::RouteStatusController;
pub use time_sync::{HostClockController, PollBounds, TimeSyncController, TimeSyncError};
pub use timeserver_config::TimeServerConfigController;
pub use timeserver_spec::{TimeServerSpecController, time_server_spec_controller};

use crate::kernel::netlink::{Groups, Netlink, NetlinkError, NetlinkEvents};
use crate::kernel::netns::NetNs;

/// The network namespace a kernel-facing controller works in.
#[derive(Debug, Clone)]
pub enum NetworkTarget {
    /// The calling thread's namespace: the node's own, for machined as PID 1.
    Node,
    /// A namespace handed in (tests, a namespace of its own).
    Namespace(NetNs),
}

impl NetworkTarget {
    /// A routing socket in the namespace. Needs a tokio runtime, so controllers call it from
    /// their reconcile, never from their constructor.
    pub fn connect(&self) -> Result<Netlink, NetlinkError> {
        match self {
            NetworkTarget::Node => Netlink::connect(),
            NetworkTarget::Namespace(ns) => Netlink::connect_in(ns),
        }
    }

    /// The namespace handed in, if any (`None`: the caller's own).
    pub fn namespace(&self) -> Option<&NetNs> {
        match self {
            NetworkTarget::Node => None,
            NetworkTarget::Namespace(ns) => Some(ns),
        }
    }

    /// The multicast events of `groups` in the namespace.
    pub fn events(&self, groups: Groups) -> NetlinkEvents {
        match self {
            NetworkTarget::Node => NetlinkEvents::new(groups),
            NetworkTarget::Namespace(ns) => NetlinkEvents::in_namespace(ns, groups),
        }
    }
}

/// A lazily opened routing socket: opened on first use, dropped after a failure so the next
/// reconcile opens a fresh one.
pub(crate) struct Connection {
    target: NetworkTarget,
    netlink: Option<Netlink>,
}

impl Connection {
    pub(crate) fn new(target: NetworkTarget) -> Self {
        Connection { target, netlink: None }
    }

    pub(crate) fn get(&mut self) -> Result<&Netlink, NetlinkError> {
        let netlink = match self.netlink.take() {
            Some(netlink) => netlink,
            None => self.target.connect()?,
        };
        Ok(self.netlink.insert(netlink))
    }

    /// Forgets the socket after an error that may have come from it.
    pub(crate) fn reset(&mut self) {
        self.netlink = None;
    }

    pub(crate) fn target(&self) -> &NetworkTarget {
        &self.target
    }
}

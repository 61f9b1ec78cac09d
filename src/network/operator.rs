//! The operator interface: a dynamic config source that runs for one link, speaks a live
//! protocol (a DHCPv4 or DHCPv6 lease) and offers, at any moment, the specs that protocol
//! says the node should have, as Talos's `operator.Operator`.
//!
//! An operator never writes resources and never touches the kernel's configuration itself:
//! it keeps its current offer ([`OperatorSpecs`]) and rings its [`Notifier`] when the offer
//! changed. `OperatorSpecController` pulls the offer and writes it into `network-config` at
//! the operator layer, where it merges like any other candidate.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::resources::network::{AddressSpec, HostnameSpec, LinkSpec, ResolverSpec, RouteSpec, TimeServerSpec};

/// What an operator currently offers. Every spec carries the operator layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorSpecs {
    pub addresses: Vec<AddressSpec>,
    pub routes: Vec<RouteSpec>,
    pub links: Vec<LinkSpec>,
    pub hostnames: Vec<HostnameSpec>,
    pub resolvers: Vec<ResolverSpec>,
    pub time_servers: Vec<TimeServerSpec>,
}

impl OperatorSpecs {
    pub fn is_empty(&self) -> bool {
        *self == OperatorSpecs::default()
    }
}

/// Tells the controller running an operator that its offer changed. Ringing many times
/// before the controller looks is the same as ringing once.
#[derive(Clone)]
pub struct Notifier(Arc<dyn Fn() + Send + Sync>);

impl Notifier {
    pub fn new(notify: impl Fn() + Send + Sync + 'static) -> Self {
        Notifier(Arc::new(notify))
    }

    pub fn notify(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notifier")
    }
}

/// What an operator currently offers, shared between its run and the spec controller that
/// reads it: replaced whole, read as one snapshot.
#[derive(Debug, Default)]
pub struct Offer(std::sync::Mutex<OperatorSpecs>);

impl Offer {
    /// Replaces the offer and says so.
    pub fn set(&self, specs: OperatorSpecs, notify: &Notifier) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = specs;
        notify.notify();
    }

    pub fn get(&self) -> OperatorSpecs {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Runs `session` until one ends cleanly (the operator was stopped) or `stop` fires. A session
/// that fails withdraws the offer (`withdraw`), is logged and is started again after a back-off
/// of 1 s doubling to 30 s: a protocol client never gives up on its link.
pub async fn run_sessions<E, Fut>(stop: &CancellationToken, mut session: impl FnMut() -> Fut, withdraw: impl Fn())
where
    E: std::fmt::Display,
    Fut: std::future::Future<Output = Result<(), E>>,
{
    let backoff =
        crate::cosi::Backoff { initial: std::time::Duration::from_secs(1), max: std::time::Duration::from_secs(30) };
    let mut delay = None;
    loop {
        let Err(e) = session().await else { return };
        let wait = backoff.next(delay);
        delay = Some(wait);
        tracing::warn!(retry_in = ?wait, "{e}");
        withdraw();
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// A running config source for one link.
#[async_trait::async_trait]
pub trait Operator: Send + Sync + 'static {
    /// Runs until `stop` is cancelled, then undoes what it holds outside the node (a DHCP
    /// release) and returns. Returning early means "restart me"; a panic is caught by the
    /// caller and the operator restarted with back-off.
    async fn run(&self, stop: CancellationToken, notify: Notifier);

    /// What every id of this operator's specs starts with: `dhcp4/eth0`.
    fn prefix(&self) -> String;

    /// The current offer, taken as one snapshot so its parts agree with each other.
    fn specs(&self) -> OperatorSpecs;

    // The seed's per-kind getters, each a view of one snapshot.
    fn address_specs(&self) -> Vec<AddressSpec> {
        self.specs().addresses
    }
    fn route_specs(&self) -> Vec<RouteSpec> {
        self.specs().routes
    }
    fn link_specs(&self) -> Vec<LinkSpec> {
        self.specs().links
    }
    fn hostname_specs(&self) -> Vec<HostnameSpec> {
        self.specs().hostnames
    }
    fn resolver_specs(&self) -> Vec<ResolverSpec> {
        self.specs().resolvers
    }
    fn time_server_specs(&self) -> Vec<TimeServerSpec> {
        self.specs().time_servers
    }
}

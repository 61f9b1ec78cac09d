//! What the kernel-facing Spec controllers (links, addresses, routes) share around their own
//! decisions: the controller itself (one generic [`SpecApplyController`], an instance per spec
//! type), holding every running spec with a finalizer, running the steps they decided with
//! many netlink requests in flight on the one socket, and settling each spec by how its step
//! went. It decides nothing about what the kernel should hold: each spec type says that in
//! its [`KernelSpec::sync`].

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::cosi::{
    Context, ContextError, Controller, EventSource, Input, Output, Phase, Pointer, ReconcileError, Resource,
    ResourceSpec,
};
use crate::kernel::netlink::{Groups, Netlink, NetlinkError};
use crate::resources::network::NAMESPACE;

use super::{Connection, NetworkTarget};

/// How many netlink requests a reconcile keeps in flight at once (the socket's receive
/// buffer holds many more acks than this).
pub(crate) const IN_FLIGHT: usize = 64;

/// A spec type that a [`SpecApplyController`] puts on the kernel.
#[async_trait::async_trait]
pub trait KernelSpec: ResourceSpec + Sized {
    /// Brings the kernel to `specs` (running and tearing down alike), settling each spec by
    /// how its step went. An error is the socket's: the controller drops it and fails the
    /// reconcile, and the next one opens a fresh socket.
    async fn sync(netlink: &Netlink, ctx: &mut Context, specs: &[Resource<Self>]) -> Result<(), NetlinkError>;
}

/// The Spec controller of `T`: lists the specs of `network`, holds the running ones, and has
/// `T` sync them to the kernel; woken by the specs and by the multicast groups it was made with.
pub struct SpecApplyController<T> {
    name: &'static str,
    groups: Groups,
    connection: Connection,
    spec: PhantomData<fn() -> T>,
}

impl<T: KernelSpec> SpecApplyController<T> {
    /// The controller `name`, applying specs in the namespace `target` names.
    pub(crate) fn with(target: NetworkTarget, name: &'static str, groups: Groups) -> Self {
        SpecApplyController { name, groups, connection: Connection::new(target), spec: PhantomData }
    }
}

#[async_trait::async_trait]
impl<T: KernelSpec> Controller for SpecApplyController<T> {
    fn name(&self) -> String {
        self.name.to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::strong::<T>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        Vec::new()
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(self.connection.target().events(self.groups))]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let specs = ctx.list::<T>(NAMESPACE)?;
        hold_running(ctx, &specs)?;
        let synced = match self.connection.get() {
            Ok(netlink) => T::sync(netlink, ctx, &specs).await,
            Err(e) => Err(e),
        };
        if let Err(e) = synced {
            self.connection.reset();
            return Err(e.into());
        }
        Ok(())
    }
}

/// Holds each running spec, so it stays until its controller has taken it off the kernel.
pub(crate) fn hold_running<T: ResourceSpec>(ctx: &Context, specs: &[Resource<T>]) -> Result<(), ContextError> {
    for spec in specs.iter().filter(|s| s.is_running()) {
        ctx.hold(spec)?;
    }
    Ok(())
}

/// Whether `spec` is going: its step takes it off the kernel, and success releases it.
pub(crate) fn tearing_down<T: ResourceSpec>(spec: &Resource<T>) -> bool {
    spec.metadata().phase == Phase::TearingDown
}

/// Settles one spec after its step: a spec that is going is released once its step succeeded;
/// a failed step fails that spec's key (retried), never the others'.
pub(crate) fn settle<T: ResourceSpec, E: std::fmt::Display>(
    ctx: &mut Context,
    spec: &Resource<T>,
    tearing_down: bool,
    outcome: Result<(), E>,
) {
    let key = Pointer::of::<T>(NAMESPACE, spec.id());
    match outcome {
        Ok(()) if tearing_down => {
            if let Err(e) = ctx.release(spec) {
                ctx.fail_key(key, e);
            }
        }
        Ok(()) => {}
        Err(e) => ctx.fail_key(key, e),
    }
}

/// Decides every spec's step with `decide` (given the spec, whether it is going, and the
/// kernel's links by name), runs the steps with `run` concurrently, and settles each spec.
pub(crate) async fn apply_each<'n, T, S, D, R, Fut>(
    netlink: &'n Netlink,
    ctx: &mut Context,
    specs: &[Resource<T>],
    decide: D,
    run: R,
) -> Result<(), NetlinkError>
where
    T: ResourceSpec,
    D: Fn(&T, bool, &HashMap<String, u32>) -> S,
    R: Fn(&'n Netlink, S) -> Fut,
    Fut: Future<Output = Result<(), NetlinkError>>,
{
    let links = netlink.link_indexes().await?;
    let steps = specs
        .iter()
        .map(|spec| {
            let going = tearing_down(spec);
            (spec, going, decide(spec.spec(), going, &links))
        })
        .collect();
    for (spec, going, outcome) in run_all(steps, |step| run(netlink, step)).await {
        settle(ctx, spec, going, outcome);
    }
    Ok(())
}

/// Runs `run` over the steps with up to [`IN_FLIGHT`] of them at once; each comes back with its
/// spec, whether it was going, and how it went. A thousand addresses are a thousand acks to
/// wait for, not a thousand round trips one after another.
async fn run_all<T, S, F, Fut>(
    steps: Vec<(&Resource<T>, bool, S)>,
    run: F,
) -> Vec<(&Resource<T>, bool, Result<(), NetlinkError>)>
where
    F: Fn(S) -> Fut,
    Fut: Future<Output = Result<(), NetlinkError>>,
{
    let mut steps = steps.into_iter();
    let mut pending = FuturesUnordered::new();
    let mut done = Vec::new();
    loop {
        while pending.len() < IN_FLIGHT {
            let Some((spec, tearing_down, step)) = steps.next() else { break };
            let step = run(step);
            pending.push(async move { (spec, tearing_down, step.await) });
        }
        match pending.next().await {
            Some(outcome) => done.push(outcome),
            None => return done,
        }
    }
}

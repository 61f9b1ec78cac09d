//! What the kernel-facing Spec controllers (links, addresses, routes) share around their own
//! decisions: holding every running spec with a finalizer, running the steps they decided with
//! many netlink requests in flight on the one socket, and settling each spec by how its step
//! went. Not a controller; it decides nothing about what the kernel should hold.

use std::future::Future;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::cosi::{Context, ContextError, Phase, Pointer, Resource, ResourceSpec};
use crate::kernel::netlink::NetlinkError;
use crate::resources::network::NAMESPACE;

/// How many netlink requests a reconcile keeps in flight at once (the socket's receive
/// buffer holds many more acks than this).
pub(crate) const IN_FLIGHT: usize = 64;

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

/// Runs `run` over the steps with up to [`IN_FLIGHT`] of them at once; each comes back with its
/// spec, whether it was going, and how it went. A thousand addresses are a thousand acks to
/// wait for, not a thousand round trips one after another.
pub(crate) async fn run_all<T, S, F, Fut>(
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

//! The kernel-observing Status controllers (addresses, routes) as one generic
//! [`StatusController`], an instance per status type: woken by the multicast groups it was
//! made with, it has the type list what the kernel holds and writes exactly that, removing
//! the statuses of what is gone. It never changes the kernel and has no inputs.

use std::marker::PhantomData;

use crate::cosi::{Context, Controller, EventSource, Input, Output, ReconcileError, ResourceSpec};
use crate::kernel::netlink::{Groups, Netlink, NetlinkError};
use crate::resources::network::NAMESPACE;

use super::{Connection, NetworkTarget};

/// A status type that a [`StatusController`] observes in the kernel.
#[async_trait::async_trait]
pub trait KernelStatus: ResourceSpec + Sized {
    /// What the kernel holds, as statuses with their ids, in the order they are written.
    async fn observe(netlink: &Netlink) -> Result<Vec<(String, Self)>, NetlinkError>;
}

/// The Status controller of `T`.
pub struct StatusController<T> {
    name: &'static str,
    groups: Groups,
    connection: Connection,
    status: PhantomData<fn() -> T>,
}

impl<T: KernelStatus> StatusController<T> {
    /// The controller `name`, observing the namespace `target` names.
    pub(crate) fn with(target: NetworkTarget, name: &'static str, groups: Groups) -> Self {
        StatusController { name, groups, connection: Connection::new(target), status: PhantomData }
    }

    async fn observe(&mut self) -> Result<Vec<(String, T)>, NetlinkError> {
        T::observe(self.connection.get()?).await
    }
}

#[async_trait::async_trait]
impl<T: KernelStatus> Controller for StatusController<T> {
    fn name(&self) -> String {
        self.name.to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<T>()]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(self.connection.target().events(self.groups))]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let observed = match self.observe().await {
            Ok(observed) => observed,
            Err(e) => {
                self.connection.reset();
                return Err(e.into());
            }
        };
        ctx.start_tracking_outputs();
        for (id, status) in observed {
            ctx.apply(NAMESPACE, &id, status)?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

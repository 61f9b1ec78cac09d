//! `AddressStatusController`: every address the kernel holds, as an `AddressStatus` in
//! `network` with Talos's id `<link>/<address>`. A pure observer: no inputs, woken by the
//! link and address multicast groups, it lists the kernel and writes what it sees, removing
//! the statuses of addresses that are gone. It never changes the kernel.

use std::collections::HashMap;

use crate::cosi::{Context, Controller, EventSource, Input, Output, ReconcileError};
use crate::kernel::netlink::{self, Groups, NetlinkError};
use crate::resources::network::{AddressFlags, AddressStatus, Family, NAMESPACE, Scope, address_id};

use super::{Connection, NetworkTarget};

pub struct AddressStatusController {
    connection: Connection,
}

impl AddressStatusController {
    /// Observes the namespace `target` names.
    pub fn new(target: NetworkTarget) -> Self {
        AddressStatusController { connection: Connection::new(target) }
    }
}

/// The status of one kernel address on the link named `link_name`.
pub(crate) fn address_status(address: &netlink::Address, link_name: &str) -> AddressStatus {
    let prefix = address.prefix;
    AddressStatus {
        address: prefix,
        local: None,
        broadcast: None,
        anycast: None,
        multicast: None,
        link_index: address.link_index,
        link_name: link_name.to_string(),
        family: Family::of(&prefix.addr()),
        scope: Scope(address.scope.into()),
        flags: AddressFlags(address.flags),
        priority: address.priority,
    }
}

impl AddressStatusController {
    async fn observe(&mut self) -> Result<Vec<(String, AddressStatus)>, NetlinkError> {
        let netlink = self.connection.get()?;
        let names: HashMap<u32, String> = netlink.links().await?.into_iter().map(|l| (l.index, l.name)).collect();
        let addresses = netlink.addresses(None).await?;
        Ok(addresses
            .iter()
            .map(|a| {
                let link_name = names.get(&a.link_index).map(String::as_str).unwrap_or_default();
                let status = address_status(a, link_name);
                (address_id(link_name, &status.address), status)
            })
            .collect())
    }
}

#[async_trait::async_trait]
impl Controller for AddressStatusController {
    fn name(&self) -> String {
        "AddressStatusController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<AddressStatus>()]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(self.connection.target().events(Groups::LINKS | Groups::ADDRESSES))]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_address_becomes_its_status() {
        let kernel = netlink::Address {
            scope: netlink::Scope::Host,
            flags: 0x80,
            priority: 5,
            ..netlink::Address::new(1, "127.0.0.1/8".parse().unwrap())
        };
        let status = address_status(&kernel, "lo");
        assert_eq!(status.address.to_string(), "127.0.0.1/8");
        assert_eq!((status.link_index, status.link_name.as_str()), (1, "lo"));
        assert_eq!(
            (status.family, status.scope, status.flags, status.priority),
            (Family::INET4, Scope::HOST, AddressFlags::PERMANENT, 5)
        );
        assert_eq!(address_id(&status.link_name, &status.address), "lo/127.0.0.1/8");
    }
}

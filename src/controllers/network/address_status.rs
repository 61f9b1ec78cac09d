//! `AddressStatusController`: every address the kernel holds, as an `AddressStatus` in
//! `network` with Talos's id `<link>/<address>`. A pure observer: no inputs, woken by the
//! link and address multicast groups, it lists the kernel and writes what it sees, removing
//! the statuses of addresses that are gone. It never changes the kernel.

use std::collections::HashMap;

use crate::kernel::netlink::{self, Groups, Netlink, NetlinkError};
use crate::resources::network::{AddressFlags, AddressStatus, Family, Scope, address_id};

use super::NetworkTarget;
use super::status_observe::{KernelStatus, StatusController};

pub type AddressStatusController = StatusController<AddressStatus>;

impl AddressStatusController {
    /// Observes the namespace `target` names.
    pub fn new(target: NetworkTarget) -> Self {
        StatusController::with(target, "AddressStatusController", Groups::LINKS | Groups::ADDRESSES)
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

#[async_trait::async_trait]
impl KernelStatus for AddressStatus {
    async fn observe(netlink: &Netlink) -> Result<Vec<(String, Self)>, NetlinkError> {
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

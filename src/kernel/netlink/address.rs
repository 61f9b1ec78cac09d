//! Addresses: list per family, add (present is fine), delete (absent is fine).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use rtnetlink::AddressMessageBuilder;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use rustix::io::Errno;

use super::{Netlink, NetlinkError, Scope, is_errno, kernel_error};
use crate::types::{Family, IpPrefix};

/// `IFA_F_*` address flags (the kernel's numbers).
pub mod flags {
    pub const SECONDARY: u32 = 0x01;
    pub const NODAD: u32 = 0x02;
    pub const OPTIMISTIC: u32 = 0x04;
    pub const DADFAILED: u32 = 0x08;
    pub const HOMEADDRESS: u32 = 0x10;
    pub const DEPRECATED: u32 = 0x20;
    pub const TENTATIVE: u32 = 0x40;
    pub const PERMANENT: u32 = 0x80;
    pub const MANAGETEMPADDR: u32 = 0x100;
    pub const NOPREFIXROUTE: u32 = 0x200;
    pub const MCAUTOJOIN: u32 = 0x400;
    pub const STABLE_PRIVACY: u32 = 0x800;
}

/// An address on a link. Listed, it is what the kernel holds; handed to
/// [`Netlink::add_address`], `label` is ignored and `flags` are those to ask for (the kernel
/// adds its own, such as `PERMANENT` and `TENTATIVE`, to what it lists).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    pub link_index: u32,
    /// The local address with its prefix length (`IFA_LOCAL`, else `IFA_ADDRESS`).
    pub prefix: IpPrefix,
    pub scope: Scope,
    /// `IFA_F_*` ([`flags`]): `IFA_FLAGS` where the kernel sends it, else the header's.
    pub flags: u32,
    /// `IFA_RT_PRIORITY`: the metric of the prefix route the kernel adds; 0 for its default.
    pub priority: u32,
    pub label: String,
}

impl Address {
    /// `prefix` on link `link_index`, global scope, no flags, the kernel's default metric.
    pub fn new(link_index: u32, prefix: IpPrefix) -> Address {
        Address { link_index, prefix, scope: Scope::Global, flags: 0, priority: 0, label: String::new() }
    }

    pub fn family(&self) -> Family {
        self.prefix.family()
    }
}

fn family_of(f: AddressFamily) -> Option<Family> {
    match f {
        AddressFamily::Inet => Some(Family::Inet4),
        AddressFamily::Inet6 => Some(Family::Inet6),
        _ => None,
    }
}

pub(crate) fn address_from_message(msg: &AddressMessage) -> Option<Address> {
    family_of(msg.header.family)?;
    let (mut local, mut address, mut flags, mut priority, mut label) = (None, None, None, 0, String::new());
    for attr in &msg.attributes {
        match attr {
            AddressAttribute::Local(a) => local = Some(*a),
            AddressAttribute::Address(a) => address = Some(*a),
            AddressAttribute::Flags(f) => flags = Some(f.bits()),
            AddressAttribute::RoutePriority(p) => priority = *p,
            AddressAttribute::Label(l) => label = l.clone(),
            _ => {}
        }
    }
    let prefix = IpPrefix::new(local.or(address)?, msg.header.prefix_len).ok()?;
    Some(Address {
        link_index: msg.header.index,
        prefix,
        scope: u8::from(msg.header.scope).into(),
        flags: flags.unwrap_or(u32::from(msg.header.flags.bits())),
        priority,
        label,
    })
}

fn base_message(link_index: u32, prefix: &IpPrefix) -> AddressMessage {
    match prefix.addr() {
        IpAddr::V4(a) => AddressMessageBuilder::<Ipv4Addr>::new().index(link_index).address(a, prefix.bits()).build(),
        IpAddr::V6(a) => AddressMessageBuilder::<Ipv6Addr>::new().index(link_index).address(a, prefix.bits()).build(),
    }
}

impl Netlink {
    /// The addresses of one family, or of both for `None`.
    pub async fn addresses(&self, family: Option<Family>) -> Result<Vec<Address>, NetlinkError> {
        let mut request = self.handle().address().get();
        request.message_mut().header.family = match family {
            None => AddressFamily::Unspec,
            Some(Family::Inet4) => AddressFamily::Inet,
            Some(Family::Inet6) => AddressFamily::Inet6,
        };
        let messages: Vec<AddressMessage> = request
            .execute()
            .try_collect()
            .await
            .map_err(|e| NetlinkError::List { what: "addresses", source: kernel_error(e) })?;
        Ok(messages
            .iter()
            .filter_map(address_from_message)
            .filter(|a| family.is_none_or(|f| a.family() == f))
            .collect())
    }

    /// Adds `address`; the same address already on the link is success (Talos ignores EEXIST
    /// too; a change of scope, flags or priority is the caller's delete-then-add).
    pub async fn add_address(&self, address: &Address) -> Result<(), NetlinkError> {
        let mut request = self.handle().address().add(address.link_index, address.prefix.addr(), address.prefix.bits());
        let msg = request.message_mut();
        msg.header.scope = u8::from(address.scope).into();
        if address.flags != 0 {
            msg.attributes.push(AddressAttribute::Flags(AddressFlags::from_bits_retain(address.flags)));
        }
        if address.priority != 0 {
            msg.attributes.push(AddressAttribute::RoutePriority(address.priority));
        }
        match request.execute().await {
            Ok(()) => Ok(()),
            Err(e) => {
                let source = kernel_error(e);
                if is_errno(&source, &[Errno::EXIST]) { Ok(()) } else { Err(address_error("adding", address, source)) }
            }
        }
    }

    /// Sets the metric of an IPv4 `address` already on its link in place (RTM_NEWADDR with
    /// NLM_F_REPLACE: the kernel moves the prefix route to the new metric, adding the new
    /// one before deleting the old). Nothing else of the address changes, and it is never
    /// off the link, so routes through it stay. IPv6 cannot set a metric back to 0 this way.
    pub async fn set_address_priority(&self, address: &Address) -> Result<(), NetlinkError> {
        let mut request =
            self.handle().address().add(address.link_index, address.prefix.addr(), address.prefix.bits()).replace();
        let msg = request.message_mut();
        msg.header.scope = u8::from(address.scope).into();
        if address.priority != 0 {
            msg.attributes.push(AddressAttribute::RoutePriority(address.priority));
        }
        request.execute().await.map_err(|e| address_error("setting the metric of", address, kernel_error(e)))
    }

    /// Deletes `address` (matched by link, address and prefix length); absent is success, and
    /// so is a link that is gone.
    pub async fn delete_address(&self, address: &Address) -> Result<(), NetlinkError> {
        let msg = base_message(address.link_index, &address.prefix);
        match self.handle().address().del(msg).execute().await {
            Ok(()) => Ok(()),
            Err(e) => {
                let source = kernel_error(e);
                if is_errno(&source, &[Errno::ADDRNOTAVAIL, Errno::NOENT, Errno::NODEV]) {
                    Ok(())
                } else {
                    Err(address_error("deleting", address, source))
                }
            }
        }
    }
}

fn address_error(action: &'static str, address: &Address, source: std::io::Error) -> NetlinkError {
    NetlinkError::Address { action, address: address.prefix, link_index: address.link_index, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtnetlink::packet_route::address::AddressScope;

    #[test]
    fn an_address_message_becomes_an_address() {
        let mut msg = base_message(4, &"10.1.2.3/24".parse().unwrap());
        msg.header.scope = AddressScope::Link;
        msg.attributes.push(AddressAttribute::Flags(AddressFlags::Permanent | AddressFlags::Noprefixroute));
        msg.attributes.push(AddressAttribute::RoutePriority(1024));
        msg.attributes.push(AddressAttribute::Label("eth0".into()));
        let a = address_from_message(&msg).unwrap();
        assert_eq!(a.link_index, 4);
        assert_eq!(a.prefix.to_string(), "10.1.2.3/24");
        assert_eq!(a.scope, Scope::Link);
        assert_eq!(a.flags, flags::PERMANENT | flags::NOPREFIXROUTE);
        assert_eq!(a.priority, 1024);
        assert_eq!(a.label, "eth0");
    }

    #[test]
    fn a_point_to_point_address_is_its_local_side() {
        let mut msg = AddressMessage::default();
        msg.header.family = AddressFamily::Inet;
        msg.header.prefix_len = 32;
        msg.attributes = vec![
            AddressAttribute::Address("10.0.0.2".parse().unwrap()),
            AddressAttribute::Local("10.0.0.1".parse().unwrap()),
        ];
        assert_eq!(address_from_message(&msg).unwrap().prefix.to_string(), "10.0.0.1/32");
        msg.header.family = AddressFamily::Packet;
        assert_eq!(address_from_message(&msg), None);
    }
}

//! `AddressSpecController`: puts the merged `AddressSpec`s of `network` on the kernel's links,
//! and takes them off again when a spec goes away.
//!
//! Idempotent, as Talos's: an address already there with the wanted scope, managed flags
//! and priority is left alone; an IPv4 address whose priority alone drifted has it set in
//! place, so that the address is never off the link and the routes through it stay (a
//! static address taking over the same leased one changes only that); any other drift is
//! deleted and added again, as Talos does for every drift; an address whose
//! link does not exist yet waits, and is applied when the link appears. Woken by the link
//! and address multicast groups, so an address deleted behind its back is added again. It
//! holds each spec with a finalizer until the address is off the kernel. Nothing else: which
//! addresses are wanted is decided upstream.

use std::collections::HashMap;

use crate::cosi::{Context, Resource};
use crate::kernel::netlink::{self, Groups, Netlink, NetlinkError};
use crate::resources::network::{AddressFlags, AddressSpec};

use super::NetworkTarget;
use super::spec_apply::{KernelSpec, SpecApplyController, apply_each};

pub type AddressSpecController = SpecApplyController<AddressSpec>;

impl AddressSpecController {
    /// Applies addresses in the namespace `target` names.
    pub fn new(target: NetworkTarget) -> Self {
        SpecApplyController::with(target, "AddressSpecController", Groups::LINKS | Groups::ADDRESSES)
    }
}

#[async_trait::async_trait]
impl KernelSpec for AddressSpec {
    async fn sync(netlink: &Netlink, ctx: &mut Context, specs: &[Resource<Self>]) -> Result<(), NetlinkError> {
        let kernel = index_addresses(netlink.addresses(None).await?);
        apply_each(netlink, ctx, specs, |spec, going, links| step(spec, going, links, &kernel), run_step).await
    }
}

/// The kernel's form of a spec's address.
pub(crate) fn kernel_prefix(prefix: &crate::types::IpPrefix) -> crate::types::IpPrefix {
    *prefix
}

/// What the kernel must hold for `spec` on link `link_index`.
fn wanted(spec: &AddressSpec, link_index: u32) -> netlink::Address {
    netlink::Address {
        link_index,
        prefix: kernel_prefix(&spec.address),
        scope: spec.scope.0.into(),
        flags: spec.flags.managed().0,
        priority: spec.priority,
        label: String::new(),
    }
}

/// Whether the kernel's `existing` address is what `want` asks for, counting only the flags
/// machined manages: the kernel sets and clears the others itself (secondary, tentative …),
/// and enforcing them would delete and add the address in a loop.
fn matches(existing: &netlink::Address, want: &netlink::Address) -> bool {
    existing.scope == want.scope
        && AddressFlags(existing.flags).managed() == AddressFlags(want.flags).managed()
        && existing.priority == want.priority
}

/// What to do about one spec, given the kernel's state: a pure decision.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing: in place, or its link is not there (yet).
    Nothing,
    Add(netlink::Address),
    /// Only the priority of an IPv4 address drifted: set it in place.
    SetPriority(netlink::Address),
    /// Drifted: delete the kernel's, add the wanted.
    Replace {
        existing: netlink::Address,
        want: netlink::Address,
    },
    Delete(netlink::Address),
}

/// The kernel's addresses by link and prefix, listed once per reconcile, so each spec's
/// lookup is O(1) rather than a scan (a thousand addresses would make a reconcile O(N²)).
pub(crate) type KernelAddresses = HashMap<(u32, crate::types::IpPrefix), netlink::Address>;

pub(crate) fn index_addresses(kernel: Vec<netlink::Address>) -> KernelAddresses {
    let mut by_key = KernelAddresses::with_capacity(kernel.len());
    for a in kernel {
        by_key.entry((a.link_index, a.prefix)).or_insert(a);
    }
    by_key
}

pub(crate) fn step(
    spec: &AddressSpec,
    tearing_down: bool,
    links: &HashMap<String, u32>,
    kernel: &KernelAddresses,
) -> Step {
    let Some(&index) = links.get(&spec.link_name) else { return Step::Nothing };
    let want = wanted(spec, index);
    let existing = kernel.get(&(index, want.prefix));
    match (tearing_down, existing) {
        (true, Some(existing)) => Step::Delete(existing.clone()),
        (true, None) => Step::Nothing,
        (false, Some(existing)) if matches(existing, &want) => Step::Nothing,
        (false, Some(existing))
            if want.family() == crate::types::Family::Inet4
                && matches(existing, &netlink::Address { priority: existing.priority, ..want.clone() }) =>
        {
            Step::SetPriority(want)
        }
        (false, Some(existing)) => Step::Replace { existing: existing.clone(), want },
        (false, None) => Step::Add(want),
    }
}

async fn run_step(netlink: &Netlink, step: Step) -> Result<(), NetlinkError> {
    match step {
        Step::Nothing => Ok(()),
        Step::Add(want) => netlink.add_address(&want).await,
        Step::SetPriority(want) => netlink.set_address_priority(&want).await,
        Step::Replace { existing, want } => {
            netlink.delete_address(&existing).await?;
            netlink.add_address(&want).await
        }
        Step::Delete(existing) => netlink.delete_address(&existing).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::{ConfigLayer, Scope};

    fn spec(link: &str, prefix: &str) -> AddressSpec {
        AddressSpec::static_address(link, prefix.parse().unwrap(), ConfigLayer::Cmdline)
    }

    /// The decision over a listing, as `sync` makes it.
    fn step(spec: &AddressSpec, tearing_down: bool, links: &HashMap<String, u32>, kernel: &[netlink::Address]) -> Step {
        super::step(spec, tearing_down, links, &index_addresses(kernel.to_vec()))
    }

    fn kernel(index: u32, prefix: &str, flags: u32) -> netlink::Address {
        netlink::Address { flags, ..netlink::Address::new(index, prefix.parse().unwrap()) }
    }

    #[test]
    fn steps_table() {
        let links: HashMap<String, u32> = [("eth0".to_string(), 2)].into();
        let permanent = AddressFlags::PERMANENT.0;
        let tentative = 0x40;
        let eth0 = spec("eth0", "10.0.0.2/24");
        let want = wanted(&eth0, 2);
        assert_eq!(step(&eth0, false, &links, &[]), Step::Add(want.clone()), "missing: added");
        assert_eq!(step(&spec("eth9", "10.0.0.2/24"), false, &links, &[]), Step::Nothing, "no link yet: waits");
        let there = kernel(2, "10.0.0.2/24", permanent | tentative);
        assert_eq!(
            step(&eth0, false, &links, std::slice::from_ref(&there)),
            Step::Nothing,
            "kernel-managed flags do not count"
        );
        let elsewhere = kernel(3, "10.0.0.2/24", permanent);
        assert_eq!(step(&eth0, false, &links, &[elsewhere]), Step::Add(want.clone()), "on another link: added");
        let other_len = kernel(2, "10.0.0.2/16", permanent);
        assert_eq!(
            step(&eth0, false, &links, &[other_len]),
            Step::Add(want.clone()),
            "another length is another address"
        );
        let drifted = netlink::Address { scope: Scope::LINK.0.into(), ..there.clone() };
        assert_eq!(
            step(&eth0, false, &links, std::slice::from_ref(&drifted)),
            Step::Replace { existing: drifted, want: want.clone() },
            "scope drift: replaced"
        );
        let metric = AddressSpec { priority: 50, ..eth0.clone() };
        assert_eq!(
            step(&metric, false, &links, std::slice::from_ref(&there)),
            Step::SetPriority(wanted(&metric, 2)),
            "IPv4 priority drift: set in place"
        );
        let both = netlink::Address { priority: 50, scope: Scope::LINK.0.into(), ..there.clone() };
        assert!(
            matches!(step(&eth0, false, &links, std::slice::from_ref(&both)), Step::Replace { .. }),
            "priority and scope drift: replaced"
        );
        let v6 = spec("eth0", "fd00::2/64");
        let v6_there = netlink::Address { priority: 50, ..kernel(2, "fd00::2/64", permanent) };
        assert!(
            matches!(step(&v6, false, &links, std::slice::from_ref(&v6_there)), Step::Replace { .. }),
            "IPv6 priority drift: replaced (the kernel cannot set it back to 0 in place)"
        );
        assert_eq!(
            step(&eth0, true, &links, std::slice::from_ref(&there)),
            Step::Delete(there),
            "tearing down: deleted"
        );
        assert_eq!(step(&eth0, true, &links, &[]), Step::Nothing, "tearing down and gone: nothing");
        assert_eq!(step(&spec("eth9", "10.0.0.2/24"), true, &links, &[]), Step::Nothing, "link gone: nothing");
    }
}

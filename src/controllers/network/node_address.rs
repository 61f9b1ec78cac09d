//! `NodeAddressController`: the one place that answers "what is this node's IP?". From the
//! observed `AddressStatus`es (never the config) it keeps the addresses that can identify the
//! node, sorts them as Talos does, and writes the sets `default`, `current`, `routed` and
//! `accumulative`, and each set again through every `NodeAddressFilter` (`current-<filter>` …).
//!
//! The rules are Talos's: link-scope and host-scope addresses, loopback, multicast,
//! link-local and the host DNS IPv6 address never count; an address counts as current while
//! its link is up (operationally up or unknown, and with carrier if it is physical), and
//! addresses of the platform's `external` link always do; `routed` leaves out `external` and
//! SideroLink addresses; `accumulative` never forgets an address; `default` is the first
//! kernel-observed address (the first link by name, then the sort order) and stays put while it
//! is still current and the sort algorithm is unchanged. Pure except for reading and writing
//! the state: it never touches the kernel.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use crate::config::{Path, Value};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::config::{self as cfg, MachineConfig};
use crate::resources::network::{
    AddressSortAlgorithm, AddressStatus, LinkStatus, NAMESPACE, NodeAddress, NodeAddressFilter, OperationalState,
    Scope, filtered_node_address_id,
};
use crate::types::IpPrefix;

/// The link Talos puts a platform's external (cloud NAT) addresses on.
pub(crate) const EXTERNAL_LINK: &str = "external";

/// Talos's host DNS address for IPv6 pods, never a node address.
const HOST_DNS_IPV6: Ipv6Addr = Ipv6Addr::new(0xfd54, 0x616c, 0x6f73, 0, 0x204f, 0x5320, 0x444e, 0x531);

/// Talos's ULA purpose byte of SideroLink addresses (`fdxx:xxxx:xxxx:xx03::/64`).
const ULA_SIDEROLINK: u8 = 0x03;

/// The controller that writes kernel-observed addresses; only its addresses may be `default`.
const KERNEL_OBSERVER: &str = "AddressStatusController";

pub struct NodeAddressController;

/// Talos's v1 order: by address, then prefix length.
fn compare_legacy(a: &IpPrefix, b: &IpPrefix) -> Ordering {
    a.addr().cmp(&b.addr()).then(a.bits().cmp(&b.bits()))
}

/// Talos's v2 order: IPv4 first, then the more specific of two nested prefixes, then by
/// address; the longer prefix first for one address.
fn compare_v2(a: &IpPrefix, b: &IpPrefix) -> Ordering {
    let family = |p: &IpPrefix| if p.addr().is_ipv4() { 4 } else { 6 };
    let by_family = family(a).cmp(&family(b));
    if by_family != Ordering::Equal {
        return by_family;
    }
    if a.addr() == b.addr() {
        return b.bits().cmp(&a.bits());
    }
    match (a.contains(&b.addr()), b.contains(&a.addr())) {
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.addr().cmp(&b.addr()),
    }
}

pub(crate) fn compare(algorithm: AddressSortAlgorithm, a: &IpPrefix, b: &IpPrefix) -> Ordering {
    if algorithm == AddressSortAlgorithm::V2 { compare_v2(a, b) } else { compare_legacy(a, b) }
}

fn is_link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

fn is_siderolink(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.octets()[0] == 0xfd && v6.octets()[7] == ULA_SIDEROLINK)
}

/// Whether an observed address can be a node address at all.
pub(crate) fn counts(status: &AddressStatus) -> bool {
    let ip = status.address.addr();
    status.scope.0 < Scope::LINK.0
        && !ip.is_loopback()
        && !ip.is_multicast()
        && !is_link_local(&ip)
        && ip != IpAddr::V6(HOST_DNS_IPV6)
}

/// The indexes of the links whose addresses are current: up (or of unknown state, as
/// loopback-like and tunnel links report) and, for a physical link, with carrier.
pub(crate) fn links_up(links: &[LinkStatus]) -> HashSet<u32> {
    links
        .iter()
        .filter(|l| matches!(l.operational_state, OperationalState::UP | OperationalState::UNKNOWN))
        .filter(|l| !l.physical() || l.link_state)
        .map(|l| l.index)
        .collect()
}

/// One observed address and whether the kernel observer wrote it (platform external
/// addresses are written by another controller).
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub status: AddressStatus,
    pub from_kernel: bool,
}

/// The unfiltered sets of one round, before they meet what was written before.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sets {
    pub default: Option<IpPrefix>,
    pub current: Vec<IpPrefix>,
    pub routed: Vec<IpPrefix>,
    /// This round's addresses, to be joined into the accumulative set.
    pub seen: Vec<IpPrefix>,
}

fn sort_dedup(list: &mut Vec<IpPrefix>, algorithm: AddressSortAlgorithm) {
    list.sort_by(|a, b| compare(algorithm, a, b));
    list.dedup();
}

pub(crate) fn sets(observed: &[Observed], up: &HashSet<u32>, algorithm: AddressSortAlgorithm) -> Sets {
    let mut kept: Vec<&Observed> = observed.iter().filter(|o| counts(&o.status)).collect();
    kept.sort_by(|a, b| {
        a.status
            .link_name
            .cmp(&b.status.link_name)
            .then_with(|| compare(algorithm, &a.status.address, &b.status.address))
    });
    let mut sets = Sets::default();
    for o in kept {
        let ip = o.status.address;
        if o.from_kernel && sets.default.is_none() {
            sets.default = Some(ip);
        }
        let link_up = up.contains(&o.status.link_index);
        let external = o.status.link_name == EXTERNAL_LINK;
        if link_up || external {
            sets.current.push(ip);
        }
        if link_up && !external && !is_siderolink(&ip.addr()) {
            sets.routed.push(ip);
        }
        sets.seen.push(ip);
    }
    sort_dedup(&mut sets.current, algorithm);
    sort_dedup(&mut sets.routed, algorithm);
    sets
}

/// The `default` set: the recorded one stays while it is still current and sorted the same
/// way, so that a new address does not move the node's identity.
pub(crate) fn default_address(
    previous: Option<&NodeAddress>,
    candidate: IpPrefix,
    current: &[IpPrefix],
    algorithm: AddressSortAlgorithm,
) -> NodeAddress {
    if let Some(prev) = previous
        && prev.sort_algorithm == algorithm
        && prev.addresses.first().is_some_and(|first| current.contains(first))
    {
        return prev.clone();
    }
    NodeAddress { addresses: vec![candidate], sort_algorithm: algorithm }
}

/// The accumulative set: `seen` joined into what was recorded, in sort order, nothing lost.
pub(crate) fn accumulate(
    previous: Option<&NodeAddress>,
    seen: &[IpPrefix],
    algorithm: AddressSortAlgorithm,
) -> NodeAddress {
    let mut addresses = previous.map(|p| p.addresses.clone()).unwrap_or_default();
    for ip in seen {
        if let Err(at) = addresses.binary_search_by(|probe| compare(algorithm, probe, ip)) {
            addresses.insert(at, *ip);
        }
    }
    NodeAddress { addresses, sort_algorithm: algorithm }
}

fn filtered(list: &[IpPrefix], filter: &NodeAddressFilter) -> Vec<IpPrefix> {
    list.iter().filter(|p| filter.keeps(&p.addr())).copied().collect()
}

/// Every output of one round, given what each id held before: a pure function.
pub(crate) fn outputs(
    sets: &Sets,
    filters: &[(String, NodeAddressFilter)],
    algorithm: AddressSortAlgorithm,
    previous: impl Fn(&str) -> Option<NodeAddress>,
) -> Vec<(String, NodeAddress)> {
    let set = |addresses: Vec<IpPrefix>| NodeAddress { addresses, sort_algorithm: algorithm };
    let mut out = Vec::new();
    if let Some(candidate) = sets.default {
        let id = NodeAddress::DEFAULT_ID;
        out.push((id.to_string(), default_address(previous(id).as_ref(), candidate, &sets.current, algorithm)));
    }
    out.push((NodeAddress::CURRENT_ID.to_string(), set(sets.current.clone())));
    out.push((NodeAddress::ROUTED_ID.to_string(), set(sets.routed.clone())));
    let id = NodeAddress::ACCUMULATIVE_ID;
    out.push((id.to_string(), accumulate(previous(id).as_ref(), &sets.seen, algorithm)));
    for (filter_id, filter) in filters {
        let current = filtered_node_address_id(NodeAddress::CURRENT_ID, filter_id);
        out.push((current, set(filtered(&sets.current, filter))));
        let routed = filtered_node_address_id(NodeAddress::ROUTED_ID, filter_id);
        out.push((routed, set(filtered(&sets.routed, filter))));
        let id = filtered_node_address_id(NodeAddress::ACCUMULATIVE_ID, filter_id);
        let seen = filtered(&sets.seen, filter);
        let acc = accumulate(previous(&id).as_ref(), &seen, algorithm);
        out.push((id, acc));
    }
    out
}

/// `machine.features.nodeAddressSortAlgorithm` of the config in force; v1 without one.
fn sort_algorithm(ctx: &Context) -> Result<AddressSortAlgorithm, ReconcileError> {
    let Some(mc) = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)? else {
        return Ok(AddressSortAlgorithm::V1);
    };
    let Some(parsed) = mc.spec().parsed() else { return Ok(AddressSortAlgorithm::V1) };
    let path = Path::keys("machine.features.nodeAddressSortAlgorithm");
    let text = parsed.config.v1alpha1().and_then(|doc| doc.value().at(&path)).and_then(Value::as_str);
    match text {
        None | Some("") => Ok(AddressSortAlgorithm::V1),
        Some(text) => Ok(AddressSortAlgorithm::from_str(text)?),
    }
}

#[async_trait::async_trait]
impl Controller for NodeAddressController {
    fn name(&self) -> String {
        "NodeAddressController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<AddressStatus>(NAMESPACE),
            Input::weak::<LinkStatus>(NAMESPACE),
            Input::weak::<NodeAddressFilter>(NAMESPACE),
            Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<NodeAddress>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let algorithm = sort_algorithm(ctx)?;
        let links: Vec<LinkStatus> = ctx.list::<LinkStatus>(NAMESPACE)?.iter().map(|l| l.spec().clone()).collect();
        let observed: Vec<Observed> = ctx
            .list::<AddressStatus>(NAMESPACE)?
            .iter()
            .map(|a| Observed { status: a.spec().clone(), from_kernel: a.metadata().owner == KERNEL_OBSERVER })
            .collect();
        let filters: Vec<(String, NodeAddressFilter)> =
            ctx.list::<NodeAddressFilter>(NAMESPACE)?.iter().map(|f| (f.id().to_string(), f.spec().clone())).collect();
        let sets = sets(&observed, &links_up(&links), algorithm);
        let previous = |id: &str| {
            ctx.get::<NodeAddress>(NAMESPACE, id).ok().flatten().filter(|r| r.is_running()).map(|r| r.spec().clone())
        };
        let out = outputs(&sets, &filters, algorithm, previous);
        ctx.start_tracking_outputs();
        for (id, spec) in out {
            ctx.apply(NAMESPACE, &id, spec)?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosi::Harness;
    use crate::cosi::Resource;
    use crate::resources::network::{AddressFlags, LinkType, address_id};

    fn p(s: &str) -> IpPrefix {
        s.parse().unwrap()
    }

    fn ps(list: &[&str]) -> Vec<IpPrefix> {
        list.iter().map(|s| p(s)).collect()
    }

    fn status(link: &str, index: u32, prefix: &str, scope: Scope) -> AddressStatus {
        let address = p(prefix);
        AddressStatus {
            address,
            local: None,
            broadcast: None,
            anycast: None,
            multicast: None,
            link_index: index,
            link_name: link.into(),
            family: crate::resources::network::Family::of(&address.addr()),
            scope,
            flags: AddressFlags::PERMANENT,
            priority: 0,
        }
    }

    fn kernel(link: &str, index: u32, prefix: &str) -> Observed {
        Observed { status: status(link, index, prefix, Scope::GLOBAL), from_kernel: true }
    }

    fn link(index: u32, state: OperationalState, physical: bool, carrier: bool) -> LinkStatus {
        LinkStatus {
            index,
            link_type: if physical { LinkType::ETHER } else { LinkType(65534) },
            operational_state: state,
            link_state: carrier,
            ..LinkStatus::default()
        }
    }

    #[test]
    fn which_addresses_count() {
        let cases = [
            ("10.0.0.2/24", Scope::GLOBAL, true),
            ("10.0.0.2/24", Scope::SITE, true),
            ("10.0.0.2/24", Scope::LINK, false),
            ("127.0.0.1/8", Scope::HOST, false),
            ("127.0.0.2/8", Scope::GLOBAL, false),
            ("::1/128", Scope::GLOBAL, false),
            ("169.254.1.1/16", Scope::GLOBAL, false),
            ("fe80::1/64", Scope::GLOBAL, false),
            ("224.0.0.1/32", Scope::GLOBAL, false),
            ("fd54:616c:6f73::204f:5320:444e:531/128", Scope::GLOBAL, false),
            ("2001:db8::1/64", Scope::GLOBAL, true),
            ("fd00:1:2:3::1/64", Scope::GLOBAL, true),
        ];
        for (prefix, scope, want) in cases {
            assert_eq!(counts(&status("eth0", 2, prefix, scope)), want, "{prefix} scope {scope:?}");
        }
    }

    #[test]
    fn which_links_are_up() {
        let links = [
            link(2, OperationalState::UP, true, true),
            link(3, OperationalState::UP, true, false),
            link(4, OperationalState::UNKNOWN, false, false),
            link(5, OperationalState::DOWN, true, true),
            link(6, OperationalState::LOWER_LAYER_DOWN, false, false),
        ];
        let mut up: Vec<u32> = links_up(&links).into_iter().collect();
        up.sort();
        assert_eq!(up, [2, 4], "up with carrier; unknown and logical without carrier; never down");
    }

    #[test]
    fn sort_orders_as_talos() {
        let sorted = |algorithm, list: &[&str]| {
            let mut v = ps(list);
            v.sort_by(|a, b| compare(algorithm, a, b));
            v.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        let input = ["2001:db8::1/64", "10.0.0.5/8", "10.0.0.2/24", "10.0.0.2/32", "192.168.1.1/24", "10.3.0.1/16"];
        assert_eq!(
            sorted(AddressSortAlgorithm::V1, &input),
            ["10.0.0.2/24", "10.0.0.2/32", "10.0.0.5/8", "10.3.0.1/16", "192.168.1.1/24", "2001:db8::1/64"],
            "v1: by address, then length"
        );
        assert_eq!(
            sorted(AddressSortAlgorithm::V2, &["10.0.0.5/8", "10.0.0.2/24", "10.0.0.2/32", "192.168.1.1/24"]),
            ["10.0.0.2/32", "10.0.0.2/24", "10.0.0.5/8", "192.168.1.1/24"],
            "v2: one address longest first; the more specific of nested prefixes first"
        );
        assert_eq!(
            sorted(AddressSortAlgorithm::V2, &["2001:db8::1/64", "10.0.0.1/24"]),
            ["10.0.0.1/24", "2001:db8::1/64"],
            "v2: IPv4 first"
        );
    }

    #[test]
    fn sets_table() {
        let up: HashSet<u32> = [2, 3].into();
        let observed = vec![
            kernel("eth1", 3, "192.168.5.2/24"),
            kernel("eth0", 2, "10.0.0.9/24"),
            kernel("eth0", 2, "10.0.0.2/24"),
            kernel("eth0", 2, "fe80::1/64"),
            kernel("lo", 1, "127.0.0.1/8"),
            kernel("eth2", 4, "10.9.0.1/24"),
            kernel("sidero", 5, "fdae:41e4:649b:9303::1/64"),
            Observed { status: status(EXTERNAL_LINK, 0, "1.2.3.4/32", Scope::GLOBAL), from_kernel: false },
        ];
        let mut siderolink_up = up.clone();
        siderolink_up.insert(5);
        let s = sets(&observed, &siderolink_up, AddressSortAlgorithm::V1);
        assert_eq!(s.default, Some(p("10.0.0.2/24")), "the lowest address of the first link by name");
        assert_eq!(
            s.current,
            ps(&["1.2.3.4/32", "10.0.0.2/24", "10.0.0.9/24", "192.168.5.2/24", "fdae:41e4:649b:9303::1/64"]),
            "external counts as up; eth2 is down"
        );
        assert_eq!(s.routed, ps(&["10.0.0.2/24", "10.0.0.9/24", "192.168.5.2/24"]), "no external, no SideroLink");
        assert_eq!(s.seen.len(), 6, "down links are seen too");

        let external_only =
            vec![Observed { status: status(EXTERNAL_LINK, 0, "1.2.3.4/32", Scope::GLOBAL), from_kernel: false }];
        assert_eq!(sets(&external_only, &up, AddressSortAlgorithm::V1).default, None, "default only from the kernel");
        let same_twice = vec![kernel("eth0", 2, "10.0.0.2/24"), kernel("eth1", 3, "10.0.0.2/24")];
        assert_eq!(sets(&same_twice, &up, AddressSortAlgorithm::V1).current, ps(&["10.0.0.2/24"]), "deduplicated");
    }

    #[test]
    fn default_stays_while_current() {
        let v1 = AddressSortAlgorithm::V1;
        let prev = NodeAddress { addresses: ps(&["10.0.0.9/24"]), sort_algorithm: v1 };
        let current = ps(&["10.0.0.2/24", "10.0.0.9/24"]);
        assert_eq!(default_address(Some(&prev), p("10.0.0.2/24"), &current, v1), prev, "kept while current");
        assert_eq!(
            default_address(Some(&prev), p("10.0.0.2/24"), &ps(&["10.0.0.2/24"]), v1).addresses,
            ps(&["10.0.0.2/24"]),
            "replaced once gone"
        );
        assert_eq!(
            default_address(Some(&prev), p("10.0.0.2/24"), &current, AddressSortAlgorithm::V2).addresses,
            ps(&["10.0.0.2/24"]),
            "replaced on an algorithm change"
        );
        assert_eq!(default_address(None, p("10.0.0.2/24"), &current, v1).addresses, ps(&["10.0.0.2/24"]));
    }

    #[test]
    fn accumulative_never_forgets() {
        let v1 = AddressSortAlgorithm::V1;
        let first = accumulate(None, &ps(&["10.0.0.9/24", "10.0.0.2/24"]), v1);
        assert_eq!(first.addresses, ps(&["10.0.0.2/24", "10.0.0.9/24"]));
        let second = accumulate(Some(&first), &ps(&["10.0.0.5/24", "10.0.0.2/24"]), v1);
        assert_eq!(second.addresses, ps(&["10.0.0.2/24", "10.0.0.5/24", "10.0.0.9/24"]), "inserted in order, once");
    }

    #[test]
    fn filtered_sets() {
        let sets = Sets {
            default: Some(p("10.0.0.2/24")),
            current: ps(&["10.0.0.2/24", "192.168.5.2/24"]),
            routed: ps(&["10.0.0.2/24", "192.168.5.2/24"]),
            seen: ps(&["10.0.0.2/24", "192.168.5.2/24"]),
        };
        let filters = vec![(
            "k8s".to_string(),
            NodeAddressFilter { include_subnets: vec![p("10.0.0.0/8")], exclude_subnets: vec![p("10.0.0.0/31")] },
        )];
        let out = outputs(&sets, &filters, AddressSortAlgorithm::V1, |_| None);
        let ids: Vec<&str> = out.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(
            ids,
            ["default", "current", "routed", "accumulative", "current-k8s", "routed-k8s", "accumulative-k8s"]
        );
        let get = |id: &str| out.iter().find(|(i, _)| i == id).unwrap().1.addresses.clone();
        assert_eq!(get("current-k8s"), ps(&["10.0.0.2/24"]));
        assert_eq!(get("accumulative-k8s"), ps(&["10.0.0.2/24"]));
        let excluding =
            vec![("x".to_string(), NodeAddressFilter { exclude_subnets: vec![p("10.0.0.0/8")], ..Default::default() })];
        let out = outputs(&sets, &excluding, AddressSortAlgorithm::V1, |_| None);
        assert_eq!(out.iter().find(|(i, _)| i == "routed-x").unwrap().1.addresses, ps(&["192.168.5.2/24"]));
    }

    #[tokio::test]
    async fn the_controller_writes_the_sets_and_keeps_the_default() {
        let h = Harness::start(vec![Box::new(NodeAddressController) as Box<dyn Controller>]).unwrap();
        let up = |index| LinkStatus { index, operational_state: OperationalState::UP, ..LinkStatus::default() };
        h.seed(NAMESPACE, "eth0", up(2)).unwrap();
        let set = |list: &[&str]| NodeAddress { addresses: ps(list), sort_algorithm: AddressSortAlgorithm::V1 };

        // Written as the kernel observer writes them: only those may become the default.
        let observe = |prefix: &str| {
            let a = status("eth0", 2, prefix, Scope::GLOBAL);
            let id = address_id("eth0", &a.address);
            h.state().create(Resource::new(NAMESPACE, &id, a), KERNEL_OBSERVER).unwrap();
            id
        };
        let nine = observe("10.0.0.9/24");
        h.assert_spec(NAMESPACE, NodeAddress::DEFAULT_ID, &set(&["10.0.0.9/24"])).await;
        h.assert_spec(NAMESPACE, NodeAddress::CURRENT_ID, &set(&["10.0.0.9/24"])).await;
        let two = observe("10.0.0.2/24");
        h.assert_spec(NAMESPACE, NodeAddress::CURRENT_ID, &set(&["10.0.0.2/24", "10.0.0.9/24"])).await;
        h.assert_spec(NAMESPACE, NodeAddress::DEFAULT_ID, &set(&["10.0.0.9/24"])).await;

        // An address from elsewhere (a platform's external one) is current, never default.
        let ext = status(EXTERNAL_LINK, 0, "1.2.3.4/32", Scope::GLOBAL);
        h.seed(NAMESPACE, "external/1.2.3.4/32", ext).unwrap();
        h.assert_spec(NAMESPACE, NodeAddress::CURRENT_ID, &set(&["1.2.3.4/32", "10.0.0.2/24", "10.0.0.9/24"])).await;
        h.assert_spec(NAMESPACE, NodeAddress::ROUTED_ID, &set(&["10.0.0.2/24", "10.0.0.9/24"])).await;

        h.seed(NAMESPACE, "f", NodeAddressFilter { exclude_subnets: vec![p("10.0.0.0/8")], ..Default::default() })
            .unwrap();
        h.assert_spec(NAMESPACE, "current-f", &set(&["1.2.3.4/32"])).await;

        // The default moves only once its address is gone; accumulative forgets nothing.
        h.state().teardown::<AddressStatus>(NAMESPACE, &nine, KERNEL_OBSERVER).unwrap();
        h.state().destroy::<AddressStatus>(NAMESPACE, &nine, KERNEL_OBSERVER).unwrap();
        h.assert_spec(NAMESPACE, NodeAddress::DEFAULT_ID, &set(&["10.0.0.2/24"])).await;
        h.assert_spec(NAMESPACE, NodeAddress::ACCUMULATIVE_ID, &set(&["1.2.3.4/32", "10.0.0.2/24", "10.0.0.9/24"]))
            .await;
        h.state().teardown::<AddressStatus>(NAMESPACE, &two, KERNEL_OBSERVER).unwrap();
        h.state().destroy::<AddressStatus>(NAMESPACE, &two, KERNEL_OBSERVER).unwrap();
        h.assert_absent::<NodeAddress>(NAMESPACE, NodeAddress::DEFAULT_ID).await;
        h.unseed::<NodeAddressFilter>(NAMESPACE, "f").unwrap();
        h.assert_absent::<NodeAddress>(NAMESPACE, "current-f").await;
        h.stop().await;
    }
}

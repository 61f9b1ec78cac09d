//! `LinkSpecController`: makes the kernel's links what the merged `LinkSpec`s of `network`
//! say: up or down, MTU, hardware address, multicast, which bond or bridge a link is a port
//! of, and for logical links (dummy, veth, vlan, bond, bridge) their existence and settings.
//!
//! Idempotent, as Talos's: it compares each spec with the link the kernel has and changes
//! only what differs. Specs are applied in dependency order — a vlan after its parent, a
//! port after its bond or bridge — and a link whose parent or master is not there yet waits;
//! the link multicast group wakes it when one appears, and puts back whatever someone else
//! changes. A logical link whose kind or vlan identity differs from its spec is deleted and
//! made again. Each spec is held with a finalizer, so a logical link machined made is deleted
//! when its spec goes; a physical link is never deleted, only configured. Which links are
//! wanted is decided upstream.

use std::collections::HashMap;

use crate::cosi::{Context, Resource};
use crate::kernel::netlink::{
    BondSettings, BridgeSettings, Groups, Link, LinkData, LinkKind, Netlink, NetlinkError, VlanInfo, VlanProtocol,
};
use crate::resources::network::{
    AdLacpActive, BondMasterSpec, LINK_KIND_BOND, LINK_KIND_BRIDGE, LINK_KIND_DUMMY, LINK_KIND_VETH, LINK_KIND_VLAN,
    LinkFlags, LinkSpec,
};

use super::NetworkTarget;
use super::spec_apply::{KernelSpec, SpecApplyController, settle, tearing_down};

#[derive(Debug, thiserror::Error)]
pub enum LinkSpecError {
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error("link {name}: {reason}")]
    Invalid { name: String, reason: String },
}

pub type LinkSpecController = SpecApplyController<LinkSpec>;

impl LinkSpecController {
    /// Configures links in the namespace `target` names.
    pub fn new(target: NetworkTarget) -> Self {
        SpecApplyController::with(target, "LinkSpecController", Groups::LINKS)
    }
}

/// One change to the kernel for one spec: a pure decision's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Create(LinkKind),
    Delete,
    Up(bool),
    Mtu(u32),
    HardwareAddr(Vec<u8>),
    Multicast(bool),
    /// Takes the bond or bridge down, frees its `ports` and changes its settings: the
    /// bonding driver refuses some changes on a live bond with ports (Talos does the same for
    /// both). The ports' own specs enslave them again, and this spec brings it back up.
    Reconfigure {
        ports: Vec<String>,
        data: LinkData,
    },
    /// Takes the link down and makes it a port of `master`, or of none.
    Master(Option<String>),
    /// The spec cannot be applied as it stands.
    Invalid(String),
}

fn find<'a>(links: &'a [Link], name: &str) -> Option<&'a Link> {
    if name.is_empty() { None } else { links.iter().find(|l| l.name == name) }
}

/// The bond settings the kernel should hold for `spec`, the primary resolved to its index
/// in the kernel's `links` (none if it is not there: the kernel keeps the primary it has,
/// where sending an unknown index would clear it).
pub(crate) fn bond_settings(spec: &BondMasterSpec, links: &[Link]) -> BondSettings {
    let mut settings = spec.clone();
    // Idempotent; a spec from a source that did not fill them would otherwise differ from
    // what the kernel reports forever, and the bond be reconfigured on every pass.
    settings.fill_defaults();
    settings.primary_index = find(links, &spec.primary).map(|l| l.index);
    settings
}

/// The bridge settings to send for `spec` to a bridge that has `have` (none: one to make).
/// Vlan filtering goes only when it must change, and "off" only where the kernel reports
/// it on: a kernel built without vlan filtering refuses the attribute, even as "off" (and
/// still reports it off), so a bridge there could be neither made nor changed.
fn bridge_settings(spec: &LinkSpec, have: Option<&BridgeSettings>) -> BridgeSettings {
    let filtering = spec.bridge_master.vlan.filtering_enabled;
    let has = have.and_then(|h| h.vlan_filtering).unwrap_or(false);
    BridgeSettings { stp: spec.bridge_master.stp.enabled, vlan_filtering: (filtering != has).then_some(filtering) }
}

fn bridge_differs(have: &BridgeSettings, spec: &LinkSpec) -> bool {
    have.stp != spec.bridge_master.stp.enabled
        || have.vlan_filtering.unwrap_or(false) != spec.bridge_master.vlan.filtering_enabled
}

fn vlan_info(spec: &LinkSpec) -> VlanInfo {
    VlanInfo { id: spec.vlan.vid, protocol: VlanProtocol::from_ethertype(spec.vlan.protocol.0) }
}

/// Whether the kernel's bond settings differ from `want` in anything machined sends for the
/// bond's mode. Settings the driver ignores in a mode do not count, or a spec that names
/// one would reconfigure the bond on every pass. The primary counts only once its link is a
/// port of the bond: the kernel reports a primary only then, and re-applying while it is
/// away would tear the bond down in the middle of a failover (Talos).
fn bond_differs(existing: &BondSettings, want: &BondSettings, primary_enslaved: bool) -> bool {
    let mut have = existing.clone();
    let mut want = want.clone();
    if primary_enslaved && have.primary_index != want.primary_index {
        return true;
    }
    have.primary_index = want.primary_index;
    // The kernel's default is on.
    have.ad_lacp_active.get_or_insert(AdLacpActive::ON);
    want.ad_lacp_active.get_or_insert(AdLacpActive::ON);
    crate::kernel::netlink::bond_attributes(&have) != crate::kernel::netlink::bond_attributes(&want)
}

/// The link to create for a logical `spec`; `Ok(None)` while its parent is missing.
fn wanted_kind(spec: &LinkSpec, links: &[Link]) -> Result<Option<LinkKind>, String> {
    Ok(Some(match spec.kind.as_str() {
        LINK_KIND_DUMMY => LinkKind::Dummy,
        LINK_KIND_BRIDGE => LinkKind::Bridge(bridge_settings(spec, None)),
        LINK_KIND_BOND => LinkKind::Bond(bond_settings(&spec.bond_master, links)),
        LINK_KIND_VETH if spec.veth.peer_name.is_empty() => return Err("a veth needs a peer name".into()),
        LINK_KIND_VETH => LinkKind::Veth { peer: spec.veth.peer_name.clone() },
        LINK_KIND_VLAN => {
            if spec.parent_name.is_empty() {
                return Err("a vlan needs a parent link".into());
            }
            if find(links, &spec.parent_name).is_none() {
                return Ok(None);
            }
            let vlan = vlan_info(spec);
            LinkKind::Vlan { parent: spec.parent_name.clone(), id: vlan.id, protocol: vlan.protocol }
        }
        "" => return Err("a logical link needs a kind".into()),
        other => return Err(format!("links of kind {other:?} are not supported")),
    }))
}

/// Whether the logical link `existing` must be deleted and made again to match `spec`: its
/// kind or type differ, a veth's peer is not the one asked for, or a vlan's id, protocol or
/// parent differ (none of which the kernel changes on a live link).
fn needs_replacing(spec: &LinkSpec, existing: &Link, links: &[Link]) -> bool {
    if existing.kind != spec.kind {
        return true;
    }
    // Zero is no type at all for a logical link: a spec that does not say is not a drift,
    // or the link would be deleted and made again forever.
    if spec.link_type.0 != 0 && existing.link_type != spec.link_type.0 {
        return true;
    }
    match spec.kind.as_str() {
        LINK_KIND_VETH => match find(links, &spec.veth.peer_name) {
            Some(peer) => {
                peer.kind != LINK_KIND_VETH
                    || existing.parent != Some(peer.index)
                    || peer.parent != Some(existing.index)
            }
            None => true,
        },
        LINK_KIND_VLAN => {
            let parent_moved = find(links, &spec.parent_name).is_some_and(|p| existing.parent != Some(p.index));
            existing.data != LinkData::Vlan(vlan_info(spec)) || parent_moved
        }
        _ => false,
    }
}

/// The settings change a live bond or bridge needs, if any.
fn settings_drift(spec: &LinkSpec, existing: &Link, links: &[Link]) -> Option<LinkData> {
    match (spec.kind.as_str(), &existing.data) {
        (LINK_KIND_BRIDGE, LinkData::Bridge(have)) => {
            bridge_differs(have, spec).then(|| LinkData::Bridge(bridge_settings(spec, Some(have))))
        }
        (LINK_KIND_BOND, LinkData::Bond(have)) => {
            let want = bond_settings(&spec.bond_master, links);
            let primary_enslaved = find(links, &spec.bond_master.primary)
                .is_some_and(|p| want.primary_index.is_some() && p.master == Some(existing.index));
            bond_differs(have, &want, primary_enslaved).then_some(LinkData::Bond(want))
        }
        _ => None,
    }
}

/// What to do about one spec, given the kernel's `links`: a pure decision. A `Create`, or
/// a `Delete` of a link to be made again, ends the list: the caller lists the kernel again
/// and asks again, to configure what it made.
pub(crate) fn steps(spec: &LinkSpec, tearing_down: bool, links: &[Link]) -> Vec<Step> {
    let existing = find(links, &spec.name);
    if tearing_down {
        return match existing {
            Some(_) if spec.logical => vec![Step::Delete],
            _ => Vec::new(),
        };
    }
    let Some(existing) = existing else {
        if !spec.logical {
            // A physical link that is not there (yet): nothing to do until it appears.
            return Vec::new();
        }
        return match wanted_kind(spec, links) {
            Ok(Some(kind)) => vec![Step::Create(kind)],
            Ok(None) => Vec::new(),
            Err(reason) => vec![Step::Invalid(reason)],
        };
    };
    if spec.logical && needs_replacing(spec, existing, links) {
        return vec![Step::Delete];
    }

    let mut out = Vec::new();
    let mut up = existing.up;
    if spec.logical
        && let Some(data) = settings_drift(spec, existing, links)
    {
        let ports = links.iter().filter(|l| l.master == Some(existing.index)).map(|l| l.name.clone()).collect();
        out.push(Step::Reconfigure { ports, data });
        up = false;
    }
    // A bridge port's master wins over a bond's, as in Talos; a master not there yet is none.
    let master =
        [&spec.bridge_slave.master_name, &spec.bond_slave.master_name].into_iter().find_map(|name| find(links, name));
    if existing.master != master.map(|m| m.index) {
        out.push(Step::Master(master.map(|m| m.name.clone())));
        up = false;
    }
    if spec.mtu != 0 && existing.mtu != spec.mtu {
        out.push(Step::Mtu(spec.mtu));
    }
    if !spec.hardware_address.is_empty() && existing.hardware_addr != spec.hardware_address.0 {
        out.push(Step::HardwareAddr(spec.hardware_address.0.clone()));
    }
    if let Some(multicast) = spec.multicast
        && LinkFlags(existing.flags).contains(LinkFlags::MULTICAST) != multicast
    {
        out.push(Step::Multicast(multicast));
    }
    if up != spec.up {
        out.push(Step::Up(spec.up));
    }
    out
}

/// The links a spec needs before it: a vlan's parent, a port's bond or bridge.
fn dependencies(spec: &LinkSpec) -> impl Iterator<Item = &str> {
    [spec.parent_name.as_str(), spec.bond_slave.master_name.as_str(), spec.bridge_slave.master_name.as_str()]
        .into_iter()
        .filter(|n| !n.is_empty() && *n != spec.name)
}

/// The order to apply `specs` in: each after the specs of the links it needs (a cycle is
/// cut where it is found), then as Talos sorts them — by name, with a bond's ports after it
/// in their slave-index order.
pub(crate) fn apply_order(specs: &[&LinkSpec]) -> Vec<usize> {
    let by_name: HashMap<&str, usize> = specs.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
    fn depth(
        i: usize,
        specs: &[&LinkSpec],
        by_name: &HashMap<&str, usize>,
        memo: &mut Vec<Option<usize>>,
        visiting: &mut Vec<bool>,
    ) -> usize {
        if let Some(d) = memo[i] {
            return d;
        }
        if visiting[i] {
            return 0;
        }
        visiting[i] = true;
        let d = dependencies(specs[i])
            .filter_map(|name| by_name.get(name).copied())
            .map(|j| depth(j, specs, by_name, memo, visiting) + 1)
            .max()
            .unwrap_or(0);
        visiting[i] = false;
        memo[i] = Some(d);
        d
    }
    let mut memo = vec![None; specs.len()];
    let mut visiting = vec![false; specs.len()];
    let depths: Vec<usize> = (0..specs.len()).map(|i| depth(i, specs, &by_name, &mut memo, &mut visiting)).collect();
    let key = |i: usize| {
        let s = specs[i];
        let talos = if s.bond_slave.master_name.is_empty() {
            (s.name.as_str(), 0, "")
        } else {
            (s.bond_slave.master_name.as_str(), s.bond_slave.slave_index, s.name.as_str())
        };
        (depths[i], talos)
    };
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by(|&a, &b| key(a).cmp(&key(b)));
    order
}

async fn run_step(netlink: &Netlink, name: &str, step: Step) -> Result<(), LinkSpecError> {
    match step {
        Step::Create(kind) => netlink.create_link(name, &kind).await?,
        Step::Delete => netlink.delete_link(name).await?,
        Step::Up(up) => netlink.set_link_up(name, up).await?,
        Step::Mtu(mtu) => netlink.set_link_mtu(name, mtu).await?,
        Step::HardwareAddr(addr) => netlink.set_link_hardware_addr(name, &addr).await?,
        Step::Multicast(on) => netlink.set_link_multicast(name, on).await?,
        Step::Reconfigure { ports, data } => {
            netlink.set_link_up(name, false).await?;
            for port in &ports {
                netlink.set_link_master(port, None).await?;
            }
            netlink.set_link_data(name, &data).await?;
        }
        Step::Master(master) => {
            netlink.set_link_up(name, false).await?;
            netlink.set_link_master(name, master.as_deref()).await?;
        }
        Step::Invalid(reason) => return Err(LinkSpecError::Invalid { name: name.to_string(), reason }),
    }
    Ok(())
}

/// Applies one spec, refreshing `links` after every change so the specs after it see it.
async fn apply(
    netlink: &Netlink,
    spec: &LinkSpec,
    tearing_down: bool,
    links: &mut Vec<Link>,
) -> Result<(), LinkSpecError> {
    // Create (or replace, then create), then configure: three looks at most.
    for _ in 0..3 {
        let steps = steps(spec, tearing_down, links);
        let Some(last) = steps.last() else { return Ok(()) };
        let again = !tearing_down && matches!(last, Step::Create(_) | Step::Delete);
        for step in steps {
            run_step(netlink, &spec.name, step).await?;
        }
        *links = netlink.links().await?;
        if !again {
            break;
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl KernelSpec for LinkSpec {
    async fn sync(netlink: &Netlink, ctx: &mut Context, specs: &[Resource<Self>]) -> Result<(), NetlinkError> {
        let mut links = netlink.links().await?;
        // Links whose specs went first (as Talos), then the wanted ones in dependency order.
        let (going, staying): (Vec<&Resource<LinkSpec>>, Vec<&Resource<LinkSpec>>) =
            specs.iter().partition(|s| tearing_down(s));
        let staying_specs: Vec<&LinkSpec> = staying.iter().map(|s| s.spec()).collect();
        let ordered = going.iter().copied().chain(apply_order(&staying_specs).into_iter().map(|i| staying[i]));
        // One at a time: each change is listed back before the next spec is judged.
        for spec in ordered {
            let going = tearing_down(spec);
            let outcome = apply(netlink, spec.spec(), going, &mut links).await;
            settle(ctx, spec, going, outcome);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::netlink::OperState;
    use crate::resources::network::{
        BondMode, BondSlave, BridgeMasterSpec, BridgeSlave, ConfigLayer, HardwareAddress, LacpRate, LinkType, StpSpec,
        VethSpec, VlanSpec,
    };

    const UP: u32 = 0x1;
    const MULTICAST: u32 = 0x1000;

    fn link(index: u32, name: &str, kind: &str) -> Link {
        Link {
            index,
            name: name.into(),
            kind: kind.into(),
            mtu: 1500,
            up: true,
            running: true,
            lower_up: true,
            flags: UP | MULTICAST,
            link_type: 1,
            hardware_addr: vec![2, 0, 0, 0, 0, index as u8],
            broadcast_addr: vec![0xff; 6],
            master: None,
            parent: None,
            operstate: OperState::Up,
            data: LinkData::None,
        }
    }

    fn down(mut l: Link) -> Link {
        l.up = false;
        l.flags &= !UP;
        l
    }

    fn logical(name: &str, kind: &str) -> LinkSpec {
        LinkSpec {
            logical: true,
            kind: kind.into(),
            link_type: LinkType::ETHER,
            ..LinkSpec::up(name, ConfigLayer::MachineConfiguration)
        }
    }

    fn vlan(name: &str, parent: &str, id: u16) -> LinkSpec {
        LinkSpec {
            parent_name: parent.into(),
            vlan: VlanSpec { vid: id, protocol: crate::resources::network::VlanProtocol::IEEE_802_1Q },
            ..logical(name, LINK_KIND_VLAN)
        }
    }

    fn veth(name: &str, peer: &str) -> LinkSpec {
        LinkSpec { veth: VethSpec { peer_name: peer.into() }, ..logical(name, LINK_KIND_VETH) }
    }

    fn bond(name: &str, mode: BondMode) -> LinkSpec {
        LinkSpec {
            bond_master: BondMasterSpec { mode, mii_mon: 100, ..BondMasterSpec::default() },
            ..logical(name, LINK_KIND_BOND)
        }
    }

    fn port_of_bond(name: &str, master: &str, index: u32) -> LinkSpec {
        LinkSpec {
            bond_slave: BondSlave { master_name: master.into(), slave_index: index },
            ..LinkSpec::up(name, ConfigLayer::MachineConfiguration)
        }
    }

    fn port_of_bridge(name: &str, master: &str) -> LinkSpec {
        LinkSpec {
            bridge_slave: BridgeSlave { master_name: master.into() },
            ..LinkSpec::up(name, ConfigLayer::MachineConfiguration)
        }
    }

    #[test]
    fn physical_links_are_configured_never_made_or_deleted() {
        let eth0 = LinkSpec { mtu: 9000, ..LinkSpec::up("eth0", ConfigLayer::Cmdline) };
        assert_eq!(steps(&eth0, false, &[]), vec![], "absent: waits for it");
        assert_eq!(steps(&eth0, false, &[down(link(2, "eth0", ""))]), vec![Step::Mtu(9000), Step::Up(true)]);
        let in_place = Link { mtu: 9000, ..link(2, "eth0", "") };
        assert_eq!(steps(&eth0, false, std::slice::from_ref(&in_place)), vec![], "in place: nothing");
        assert_eq!(steps(&eth0, true, &[in_place]), vec![], "its spec gone: left as it is");
        let down_spec = LinkSpec { up: false, ..eth0.clone() };
        assert_eq!(steps(&down_spec, false, &[Link { mtu: 9000, ..link(2, "eth0", "") }]), vec![Step::Up(false)]);
        let mtu_unsaid = LinkSpec::up("eth0", ConfigLayer::Cmdline);
        assert_eq!(steps(&mtu_unsaid, false, &[Link { mtu: 1400, ..link(2, "eth0", "") }]), vec![], "MTU 0: left");
        let mac = LinkSpec { hardware_address: HardwareAddress(vec![2, 9, 9, 9, 9, 9]), ..mtu_unsaid.clone() };
        assert_eq!(steps(&mac, false, &[link(2, "eth0", "")]), vec![Step::HardwareAddr(vec![2, 9, 9, 9, 9, 9])]);
        let no_multicast = LinkSpec { multicast: Some(false), ..mtu_unsaid };
        assert_eq!(steps(&no_multicast, false, &[link(2, "eth0", "")]), vec![Step::Multicast(false)]);
    }

    #[test]
    fn logical_links_are_made_replaced_and_deleted() {
        let d = logical("dummy0", LINK_KIND_DUMMY);
        assert_eq!(steps(&d, false, &[]), vec![Step::Create(LinkKind::Dummy)]);
        assert_eq!(steps(&d, false, &[link(5, "dummy0", "dummy")]), vec![]);
        assert_eq!(steps(&d, false, &[link(5, "dummy0", "bridge")]), vec![Step::Delete], "another kind: replaced");
        assert_eq!(steps(&d, true, &[link(5, "dummy0", "dummy")]), vec![Step::Delete], "spec gone: deleted");
        assert_eq!(steps(&d, true, &[]), vec![], "spec and link gone: nothing");
        let untyped = LinkSpec { link_type: LinkType(0), ..d.clone() };
        assert_eq!(steps(&untyped, false, &[link(5, "dummy0", "dummy")]), vec![], "no type said: no drift");
        let loopback_typed = Link { link_type: 772, ..link(5, "dummy0", "dummy") };
        assert_eq!(steps(&d, false, &[loopback_typed]), vec![Step::Delete], "another type: replaced");

        let br = LinkSpec {
            bridge_master: BridgeMasterSpec { stp: StpSpec { enabled: true }, ..Default::default() },
            ..logical("br0", LINK_KIND_BRIDGE)
        };
        let stp = BridgeSettings { stp: true, vlan_filtering: None };
        assert_eq!(steps(&br, false, &[]), vec![Step::Create(LinkKind::Bridge(stp))]);

        assert_eq!(steps(&logical("x", ""), false, &[]), vec![Step::Invalid("a logical link needs a kind".into())]);
        assert!(matches!(&steps(&logical("wg0", "wireguard"), false, &[])[..], [Step::Invalid(_)]));
        assert!(matches!(&steps(&logical("v", LINK_KIND_VETH), false, &[])[..], [Step::Invalid(_)]));
    }

    #[test]
    fn veths_are_checked_against_their_peer() {
        let a = veth("a", "b");
        assert_eq!(steps(&a, false, &[]), vec![Step::Create(LinkKind::Veth { peer: "b".into() })]);
        let pair = [Link { parent: Some(3), ..link(2, "a", "veth") }, Link { parent: Some(2), ..link(3, "b", "veth") }];
        assert_eq!(steps(&a, false, &pair), vec![]);
        let other_peer = [pair[0].clone(), Link { parent: Some(2), ..link(3, "c", "veth") }];
        assert_eq!(steps(&a, false, &other_peer), vec![Step::Delete], "its peer is another: replaced");
    }

    #[test]
    fn vlans_wait_for_their_parent_and_are_replaced_when_their_identity_changes() {
        let v = vlan("eth0.10", "eth0", 10);
        assert_eq!(steps(&v, false, &[]), vec![], "no parent yet: waits");
        let eth0 = link(2, "eth0", "");
        assert_eq!(
            steps(&v, false, std::slice::from_ref(&eth0)),
            vec![Step::Create(LinkKind::Vlan { parent: "eth0".into(), id: 10, protocol: VlanProtocol::Ieee8021Q })]
        );
        let live = Link {
            parent: Some(2),
            data: LinkData::Vlan(VlanInfo { id: 10, protocol: VlanProtocol::Ieee8021Q }),
            ..link(7, "eth0.10", "vlan")
        };
        assert_eq!(steps(&v, false, &[eth0.clone(), live.clone()]), vec![]);
        let other_id =
            Link { data: LinkData::Vlan(VlanInfo { id: 11, protocol: VlanProtocol::Ieee8021Q }), ..live.clone() };
        assert_eq!(steps(&v, false, &[eth0.clone(), other_id]), vec![Step::Delete], "another id: replaced");
        let qinq =
            Link { data: LinkData::Vlan(VlanInfo { id: 10, protocol: VlanProtocol::Ieee8021Ad }), ..live.clone() };
        assert_eq!(steps(&v, false, &[eth0.clone(), qinq]), vec![Step::Delete], "another protocol: replaced");
        let moved = Link { parent: Some(4), ..live };
        assert_eq!(steps(&v, false, &[eth0, moved]), vec![Step::Delete], "another parent: replaced");
        assert!(matches!(&steps(&vlan("v", "", 1), false, &[])[..], [Step::Invalid(_)]));
    }

    #[test]
    fn ports_join_their_master_down_and_come_back_up() {
        let port = port_of_bridge("a", "br0");
        let br = link(4, "br0", "bridge");
        assert_eq!(steps(&port, false, &[link(2, "a", "veth")]), vec![], "no master yet: none");
        assert_eq!(
            steps(&port, false, &[link(2, "a", "veth"), br.clone()]),
            vec![Step::Master(Some("br0".into())), Step::Up(true)]
        );
        let enslaved = Link { master: Some(4), ..link(2, "a", "veth") };
        assert_eq!(steps(&port, false, &[enslaved.clone(), br.clone()]), vec![]);
        let free = LinkSpec::up("a", ConfigLayer::MachineConfiguration);
        assert_eq!(
            steps(&free, false, &[enslaved, br.clone()]),
            vec![Step::Master(None), Step::Up(true)],
            "no master said: freed"
        );
        let bond_port = port_of_bond("eth1", "bond0", 0);
        let bond0 = link(6, "bond0", "bond");
        assert_eq!(
            steps(&bond_port, false, &[down(link(3, "eth1", "")), bond0]),
            vec![Step::Master(Some("bond0".into())), Step::Up(true)]
        );
    }

    #[test]
    fn bridge_and_bond_settings_converge_with_their_ports_freed() {
        let br = LinkSpec {
            bridge_master: BridgeMasterSpec {
                vlan: crate::resources::network::BridgeVlanSpec { filtering_enabled: true },
                ..Default::default()
            },
            ..logical("br0", LINK_KIND_BRIDGE)
        };
        let reported_off = BridgeSettings { stp: false, vlan_filtering: Some(false) };
        let live = Link { data: LinkData::Bridge(reported_off), ..link(4, "br0", "bridge") };
        let port = Link { master: Some(4), ..link(2, "a", "veth") };
        let want = LinkData::Bridge(BridgeSettings { stp: false, vlan_filtering: Some(true) });
        assert_eq!(
            steps(&br, false, &[live.clone(), port.clone()]),
            vec![Step::Reconfigure { ports: vec!["a".into()], data: want.clone() }, Step::Up(true)]
        );
        let converged = Link { data: want, ..live };
        assert_eq!(steps(&br, false, &[converged, port.clone()]), vec![]);
        // A kernel without vlan filtering still reports it off: an STP change says only that.
        let stp = LinkSpec {
            bridge_master: BridgeMasterSpec { stp: StpSpec { enabled: true }, ..Default::default() },
            ..br.clone()
        };
        let live_off = Link { data: LinkData::Bridge(reported_off), ..link(4, "br0", "bridge") };
        assert_eq!(
            steps(&stp, false, &[live_off, port.clone()])[0],
            Step::Reconfigure {
                ports: vec!["a".into()],
                data: LinkData::Bridge(BridgeSettings { stp: true, vlan_filtering: None })
            }
        );
        // Turned off again: said to a kernel that reports it; never to one that does not.
        let off = LinkSpec { bridge_master: BridgeMasterSpec::default(), ..br.clone() };
        let on = BridgeSettings { stp: false, vlan_filtering: Some(true) };
        let live_on = Link { data: LinkData::Bridge(on), ..link(4, "br0", "bridge") };
        assert!(matches!(
            &steps(&off, false, &[live_on, port.clone()])[..],
            [Step::Reconfigure { data: LinkData::Bridge(BridgeSettings { vlan_filtering: Some(false), .. }), .. }, _]
        ));
        let without = Link { data: LinkData::Bridge(BridgeSettings::default()), ..link(4, "br0", "bridge") };
        assert_eq!(steps(&off, false, &[without, port]), vec![], "a kernel without vlan filtering: nothing to say");

        let b = bond("bond0", BondMode::ACTIVE_BACKUP);
        let settings = bond_settings(&b.bond_master, &[]);
        assert_eq!((settings.mode, settings.mii_mon, settings.use_carrier), (BondMode::ACTIVE_BACKUP, 100, true));
        assert_eq!(steps(&b, false, &[]), vec![Step::Create(LinkKind::Bond(settings.clone()))]);
        let live = Link { data: LinkData::Bond(settings.clone()), ..link(6, "bond0", "bond") };
        assert_eq!(steps(&b, false, std::slice::from_ref(&live)), vec![]);
        // What the driver ignores in a mode, and a default the kernel fills in, are no drift.
        let reported = BondSettings {
            lacp_rate: LacpRate::FAST,
            packets_per_slave: 7,
            ad_lacp_active: Some(AdLacpActive::ON),
            ..settings.clone()
        };
        let live = Link { data: LinkData::Bond(reported), ..live };
        assert_eq!(steps(&b, false, std::slice::from_ref(&live)), vec![]);
        let faster = BondSettings { mii_mon: 50, ..settings.clone() };
        let live = Link { data: LinkData::Bond(faster), ..live };
        assert_eq!(
            steps(&b, false, &[live]),
            vec![Step::Reconfigure { ports: vec![], data: LinkData::Bond(settings) }, Step::Up(true)]
        );
    }

    #[test]
    fn a_bond_primary_counts_only_once_enslaved() {
        let mut b = bond("bond0", BondMode::ACTIVE_BACKUP);
        b.bond_master.primary = "eth1".into();
        assert_eq!(bond_settings(&b.bond_master, &[]).primary_index, None, "primary not there: left to the kernel");
        let eth1 = link(3, "eth1", "");
        let want = bond_settings(&b.bond_master, std::slice::from_ref(&eth1));
        assert_eq!(want.primary_index, Some(3));
        let no_primary = Link {
            data: LinkData::Bond(BondSettings { primary_index: None, ..want.clone() }),
            ..link(6, "bond0", "bond")
        };
        assert_eq!(steps(&b, false, &[no_primary.clone(), eth1.clone()]), vec![], "primary not a port yet: no drift");
        let port = Link { master: Some(6), ..eth1 };
        assert!(
            matches!(&steps(&b, false, &[no_primary, port])[..], [Step::Reconfigure { .. }, Step::Up(true)]),
            "primary a port but not primary: reconfigured"
        );
    }

    #[test]
    fn dependency_order() {
        let specs = [
            port_of_bond("eth2", "bond0", 1),
            vlan("bond0.5", "bond0", 5),
            port_of_bridge("veth0", "br0"),
            port_of_bond("eth1", "bond0", 0),
            vlan("br0.7.8", "br0.7", 8),
            bond("bond0", BondMode::IEEE_802_3AD),
            logical("br0", LINK_KIND_BRIDGE),
            vlan("br0.7", "br0", 7),
            LinkSpec::up("eth0", ConfigLayer::Default),
            vlan("eth0.100", "eth0", 100),
        ];
        let refs: Vec<&LinkSpec> = specs.iter().collect();
        let names: Vec<&str> = apply_order(&refs).into_iter().map(|i| specs[i].name.as_str()).collect();
        assert_eq!(
            names,
            ["bond0", "br0", "eth0", "eth1", "eth2", "bond0.5", "br0.7", "eth0.100", "veth0", "br0.7.8"],
            "masters and parents first, a bond's ports in slave-index order"
        );
        let position = |n: &str| names.iter().position(|x| *x == n).unwrap();
        assert!(position("bond0") < position("eth1") && position("eth1") < position("eth2"));
        assert!(position("br0") < position("br0.7") && position("br0.7") < position("br0.7.8"));
        assert!(position("eth0") < position("eth0.100"));

        // A cycle is cut, not followed forever.
        let a = LinkSpec { bridge_slave: BridgeSlave { master_name: "b".into() }, ..logical("a", LINK_KIND_BRIDGE) };
        let b = LinkSpec { bridge_slave: BridgeSlave { master_name: "a".into() }, ..logical("b", LINK_KIND_BRIDGE) };
        assert_eq!(apply_order(&[&a, &b]).len(), 2);
    }
}

//! `LinkStatusController`: every link the kernel has, as a `LinkStatus` in `network` with
//! the link's name as id. A pure observer: no inputs, woken by the link multicast group, it
//! lists the kernel's links and writes what it sees, removing the statuses of links that are
//! gone. It never changes the kernel.
//!
//! Only what rtnetlink tells is filled in; the ethtool and sysfs fields (driver, bus path,
//! speed …) stay empty, and the link state is the carrier flag (`IFF_LOWER_UP`).

use crate::cosi::{Context, Controller, EventSource, Input, Output, ReconcileError};
use crate::kernel::netlink::{self, Groups, LinkData, NetlinkError, OperState};
use crate::resources::network::{
    BridgeMasterSpec, BridgeVlanSpec, HardwareAddress, LINK_KIND_VETH, LinkFlags, LinkStatus, LinkType, NAMESPACE,
    OperationalState, StpSpec, VethSpec, VlanProtocol, VlanSpec,
};

use super::{Connection, NetworkTarget};

pub struct LinkStatusController {
    connection: Connection,
}

impl LinkStatusController {
    /// Observes the namespace `target` names.
    pub fn new(target: NetworkTarget) -> Self {
        LinkStatusController { connection: Connection::new(target) }
    }
}

fn operational_state(state: OperState) -> OperationalState {
    OperationalState(match state {
        OperState::Unknown => 0,
        OperState::NotPresent => 1,
        OperState::Down => 2,
        OperState::LowerLayerDown => 3,
        OperState::Testing => 4,
        OperState::Dormant => 5,
        OperState::Up => 6,
        OperState::Other(n) => n,
    })
}

/// The status of `link`, among all of the namespace's `links` (a veth's peer is named only
/// when both ends point at each other here).
pub(crate) fn link_status(link: &netlink::Link, links: &[netlink::Link]) -> LinkStatus {
    let mut status = LinkStatus {
        index: link.index,
        link_type: LinkType(link.link_type),
        link_index: link.parent.unwrap_or(0),
        flags: LinkFlags(link.flags),
        hardware_addr: HardwareAddress(link.hardware_addr.clone()),
        broadcast_addr: HardwareAddress(link.broadcast_addr.clone()),
        mtu: link.mtu,
        master_index: link.master.unwrap_or(0),
        operational_state: operational_state(link.operstate),
        kind: link.kind.clone(),
        link_state: link.lower_up,
        ..LinkStatus::default()
    };
    if link.kind == LINK_KIND_VETH {
        let peer = links
            .iter()
            .find(|p| Some(p.index) == link.parent && p.kind == LINK_KIND_VETH && p.parent == Some(link.index));
        status.veth = VethSpec { peer_name: peer.map(|p| p.name.clone()).unwrap_or_default() };
    }
    match &link.data {
        LinkData::Vlan(v) => status.vlan = VlanSpec { vid: v.id, protocol: VlanProtocol(v.protocol.ethertype()) },
        LinkData::Bridge(b) => {
            status.bridge_master = BridgeMasterSpec {
                stp: StpSpec { enabled: b.stp },
                vlan: BridgeVlanSpec { filtering_enabled: b.vlan_filtering.unwrap_or(false) },
            }
        }
        // The kernel reports the primary as its index; it knows no names.
        LinkData::Bond(b) => status.bond_master = b.clone(),
        LinkData::None => {}
    }
    status
}

impl LinkStatusController {
    async fn observe(&mut self) -> Result<Vec<netlink::Link>, NetlinkError> {
        self.connection.get()?.links().await
    }
}

#[async_trait::async_trait]
impl Controller for LinkStatusController {
    fn name(&self) -> String {
        "LinkStatusController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<LinkStatus>()]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(self.connection.target().events(Groups::LINKS))]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let links = match self.observe().await {
            Ok(links) => links,
            Err(e) => {
                self.connection.reset();
                return Err(e.into());
            }
        };
        ctx.start_tracking_outputs();
        for link in &links {
            ctx.apply(NAMESPACE, &link.name, link_status(link, &links))?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::{BondMasterSpec, BondMode, LacpRate};

    fn link(index: u32, name: &str, kind: &str, parent: Option<u32>) -> netlink::Link {
        netlink::Link {
            index,
            name: name.into(),
            kind: kind.into(),
            mtu: 1500,
            up: true,
            running: true,
            lower_up: true,
            flags: 0x1 | 0x40 | 0x10000,
            link_type: 1,
            hardware_addr: vec![2, 0, 0, 0, 0, 1],
            broadcast_addr: vec![0xff; 6],
            master: None,
            parent,
            operstate: OperState::Up,
            data: netlink::LinkData::None,
        }
    }

    #[test]
    fn kernel_links_become_statuses() {
        let links = [link(2, "a", "veth", Some(3)), link(3, "b", "veth", Some(2)), link(4, "br0", "bridge", None)];
        let a = link_status(&links[0], &links);
        assert_eq!((a.index, a.link_index, a.kind.as_str(), a.veth.peer_name.as_str()), (2, 3, "veth", "b"));
        assert_eq!(a.hardware_addr.to_string(), "02:00:00:00:00:01");
        assert!(a.flags.contains(LinkFlags::UP) && a.link_state);
        assert_eq!((a.operational_state, a.link_type, a.mtu), (OperationalState::UP, LinkType::ETHER, 1500));
        assert!(!a.physical(), "a veth is logical");
        let br = link_status(&links[2], &links);
        assert_eq!(br.veth, VethSpec::default());
        // What the kernel says of vlans, bridges and bonds.
        let vlan = netlink::Link {
            data: LinkData::Vlan(netlink::VlanInfo { id: 10, protocol: netlink::VlanProtocol::Ieee8021Ad }),
            ..link(5, "eth0.10", "vlan", Some(2))
        };
        let v = link_status(&vlan, &links).vlan;
        assert_eq!((v.vid, v.protocol), (10, VlanProtocol::IEEE_802_1AD));
        let stp = netlink::BridgeSettings { stp: true, vlan_filtering: None };
        let bridge = netlink::Link { data: LinkData::Bridge(stp), ..link(4, "br0", "bridge", None) };
        let b = link_status(&bridge, &links).bridge_master;
        assert!(b.stp.enabled && !b.vlan.filtering_enabled);
        // A bond's settings come back as the spec that made them (the primary by index).
        let mut spec = BondMasterSpec {
            mode: BondMode::IEEE_802_3AD,
            mii_mon: 100,
            lacp_rate: LacpRate::FAST,
            ..BondMasterSpec::default()
        };
        spec.fill_defaults();
        let settings = super::super::link_spec::bond_settings(&spec, &links);
        let bond = netlink::Link { data: LinkData::Bond(settings), ..link(6, "bond0", "bond", None) };
        assert_eq!(link_status(&bond, &links).bond_master, spec);
        // A peer in another namespace is not named.
        let lonely = link_status(&links[0], &links[..1]);
        assert_eq!(lonely.veth.peer_name, "");
    }
}

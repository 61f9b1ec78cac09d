//! Links: list (with a vlan's, bond's or bridge's settings), up/down, MTU, hardware address,
//! multicast, create (veth, bridge, dummy, vlan, bond) with their settings, change a live bond's
//! or bridge's settings, delete, master. The attribute lists sent for each are built by pure
//! functions ([`bond_attributes`], [`create_message`], [`settings_message`]) tested without a kernel.
//!
//! Links are named by name, as Talos's LinkSpec is: the kernel looks a link up by
//! `IFLA_IFNAME` when the message carries no index, so setting needs no listing first.

use std::net::IpAddr;

use futures::TryStreamExt;
use rtnetlink::packet_core::{NLM_F_ACK, NLM_F_REQUEST};
use rtnetlink::packet_route::link::{self as nl, InfoData, InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use rtnetlink::{LinkDummy, LinkMessageBuilder, LinkUnspec, LinkVeth, LinkVlan};
use rustix::io::Errno;

use super::{Netlink, NetlinkError, is_errno, kernel_error};
use crate::types::bond::{
    AdLacpActive, AdSelect, ArpAllTargets, ArpValidate, BondMode, BondSettings, BondXmitHashPolicy, FailOverMac,
    LacpRate, PrimaryReselect,
};

/// A link as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND`: `veth`, `bridge`, `bond`, `vlan`, `dummy`, …; empty for a physical
    /// link or the loopback.
    pub kind: String,
    pub mtu: u32,
    /// IFF_UP: administratively up.
    pub up: bool,
    /// IFF_RUNNING: operationally up as the kernel's flags say.
    pub running: bool,
    /// IFF_LOWER_UP: carrier.
    pub lower_up: bool,
    /// All of `ifi_flags`.
    pub flags: u32,
    /// ARPHRD_* of the link (1 for Ethernet, 772 for loopback).
    pub link_type: u16,
    pub hardware_addr: Vec<u8>,
    pub broadcast_addr: Vec<u8>,
    /// The bridge or bond this link is a port of.
    pub master: Option<u32>,
    /// `IFLA_LINK`: a vlan's parent, a veth's peer.
    pub parent: Option<u32>,
    pub operstate: OperState,
    /// The settings of a vlan, bond or bridge.
    pub data: LinkData,
}

impl Link {
    /// The hardware address as `aa:bb:cc:dd:ee:ff`.
    pub fn hardware_addr_string(&self) -> String {
        hex_colons(&self.hardware_addr)
    }
}

pub(crate) fn hex_colons(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// RFC 2863 operational state (`IFLA_OPERSTATE`), with Talos's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OperState {
    #[default]
    Unknown,
    NotPresent,
    Down,
    LowerLayerDown,
    Testing,
    Dormant,
    Up,
    Other(u8),
}

impl From<nl::State> for OperState {
    fn from(s: nl::State) -> OperState {
        match s {
            nl::State::Unknown => OperState::Unknown,
            nl::State::NotPresent => OperState::NotPresent,
            nl::State::Down => OperState::Down,
            nl::State::LowerLayerDown => OperState::LowerLayerDown,
            nl::State::Testing => OperState::Testing,
            nl::State::Dormant => OperState::Dormant,
            nl::State::Up => OperState::Up,
            other => OperState::Other(u8::from(other)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VlanProtocol {
    #[default]
    Ieee8021Q,
    Ieee8021Ad,
}

impl VlanProtocol {
    /// The protocol of an ethertype (0x88a8 is 802.1ad; anything else is taken as 802.1q).
    pub fn from_ethertype(ethertype: u16) -> VlanProtocol {
        if ethertype == 0x88a8 { VlanProtocol::Ieee8021Ad } else { VlanProtocol::Ieee8021Q }
    }

    pub fn ethertype(self) -> u16 {
        match self {
            VlanProtocol::Ieee8021Q => 0x8100,
            VlanProtocol::Ieee8021Ad => 0x88a8,
        }
    }
}

impl From<VlanProtocol> for nl::VlanProtocol {
    fn from(p: VlanProtocol) -> nl::VlanProtocol {
        match p {
            VlanProtocol::Ieee8021Q => nl::VlanProtocol::Ieee8021Q,
            VlanProtocol::Ieee8021Ad => nl::VlanProtocol::Ieee8021Ad,
        }
    }
}

/// A vlan's identity as the kernel holds it; it cannot change on a live link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanInfo {
    pub id: u16,
    pub protocol: VlanProtocol,
}

/// The bridge settings machined manages (Talos's `BridgeMasterSpec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BridgeSettings {
    /// `IFLA_BR_STP_STATE` 1 (kernel STP) rather than 0.
    pub stp: bool,
    /// `IFLA_BR_VLAN_FILTERING`; `None` is not sent (listed: the kernel has no vlan
    /// filtering, and refuses the attribute even to turn it off).
    pub vlan_filtering: Option<bool>,
}

/// What the kernel reports of a logical link's own settings (`IFLA_INFO_DATA`), for the
/// kinds machined configures.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum LinkData {
    #[default]
    None,
    Vlan(VlanInfo),
    Bond(BondSettings),
    Bridge(BridgeSettings),
}

/// A link to create, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkKind {
    /// A veth pair: the link and its `peer`, both in this namespace.
    Veth {
        peer: String,
    },
    Bridge(BridgeSettings),
    Dummy,
    /// A vlan `id` on the link named `parent`.
    Vlan {
        parent: String,
        id: u16,
        protocol: VlanProtocol,
    },
    Bond(BondSettings),
}

impl LinkKind {
    /// The `IFLA_INFO_KIND` the kernel reports for links of this kind.
    pub fn kernel_kind(&self) -> &'static str {
        match self {
            LinkKind::Veth { .. } => "veth",
            LinkKind::Bridge(_) => "bridge",
            LinkKind::Dummy => "dummy",
            LinkKind::Vlan { .. } => "vlan",
            LinkKind::Bond(_) => "bond",
        }
    }
}

fn has_arp_monitor(mode: BondMode) -> bool {
    !matches!(mode, BondMode::IEEE_802_3AD | BondMode::TLB | BondMode::ALB)
}

/// The `IFLA_BOND_*` attributes for `bond`, with Talos's rules for which options go to the
/// kernel in which mode (the driver refuses some outside their modes, such as the LACP rate
/// outside 802.3ad, and ignores others). The primary goes by its index, `primary_index`;
/// the ARP targets of the wrong family are left out.
pub fn bond_attributes(bond: &BondSettings) -> Vec<nl::InfoBond> {
    use nl::InfoBond as B;
    let mode = bond.mode;
    let mut a = vec![B::Mode(mode.0.into()), B::XmitHashPolicy(bond.hash_policy.0.into())];
    if mode == BondMode::IEEE_802_3AD {
        a.push(B::AdLacpRate(bond.lacp_rate.0.into()));
        if let Some(active) = bond.ad_lacp_active {
            a.push(B::AdLacpActive(active.0 != 0));
        }
    }
    if has_arp_monitor(mode) {
        a.push(B::ArpValidate(bond.arp_validate.0.into()));
    }
    a.push(B::ArpAllTargets(bond.arp_all_targets.0.into()));
    if matches!(mode, BondMode::ACTIVE_BACKUP | BondMode::TLB | BondMode::ALB)
        && let Some(primary) = bond.primary_index
    {
        a.push(B::Primary(primary));
    }
    a.push(B::PrimaryReselect(bond.primary_reselect.0.into()));
    a.push(B::FailOverMac(bond.fail_over_mac.0.into()));
    a.push(B::AdSelect(bond.ad_select.0.into()));
    a.push(B::MiiMon(bond.mii_mon));
    if bond.mii_mon != 0 {
        a.push(B::UpDelay(bond.up_delay));
        a.push(B::DownDelay(bond.down_delay));
    }
    if has_arp_monitor(mode) {
        let v4 = bond.arp_ip_targets.iter().filter_map(|ip| match ip {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        });
        let v6 = bond.ns_ip6_targets.iter().filter_map(|ip| match ip {
            IpAddr::V6(a) => Some(*a),
            IpAddr::V4(_) => None,
        });
        a.push(B::ArpInterval(bond.arp_interval));
        a.push(B::ArpIpTarget(v4.collect()));
        a.push(B::NsIp6Target(v6.collect()));
    }
    a.push(B::ResendIgmp(bond.resend_igmp));
    a.push(B::MinLinks(bond.min_links));
    a.push(B::LpInterval(bond.lp_interval));
    if mode == BondMode::ROUND_ROBIN {
        a.push(B::PacketsPerPort(bond.packets_per_slave));
    }
    a.push(B::NumPeerNotif(bond.num_peer_notif));
    if matches!(mode, BondMode::TLB | BondMode::ALB) {
        a.push(B::TlbDynamicLb(bond.tlb_dynamic_lb != 0));
    }
    a.push(B::AllPortsActive(bond.all_slaves_active.into()));
    a.push(B::UseCarrier(bond.use_carrier));
    if mode == BondMode::IEEE_802_3AD {
        a.push(B::AdActorSysPrio(bond.ad_actor_sys_prio));
        a.push(B::AdUserPortKey(bond.ad_user_port_key));
    }
    if bond.mii_mon != 0 {
        a.push(B::PeerNotifDelay(bond.peer_notify_delay));
    }
    if bond.missed_max != 0 {
        a.push(B::MissedMax(bond.missed_max));
    }
    a
}

/// A bond's settings from what the kernel reports: the primary as its index (the kernel
/// knows no names), a value without a name as its number.
pub fn bond_from_attributes(attributes: &[nl::InfoBond]) -> BondSettings {
    use nl::InfoBond as B;
    let mut bond = BondSettings::default();
    for attr in attributes {
        match attr {
            B::Mode(m) => bond.mode = BondMode(u8::from(*m)),
            B::XmitHashPolicy(p) => bond.hash_policy = BondXmitHashPolicy(u8::from(*p)),
            B::AdLacpRate(r) => bond.lacp_rate = LacpRate(u8::from(*r)),
            B::AdLacpActive(on) => bond.ad_lacp_active = Some(AdLacpActive(u8::from(*on))),
            B::ArpValidate(v) => bond.arp_validate = ArpValidate(u32::from(*v)),
            B::ArpAllTargets(t) => bond.arp_all_targets = ArpAllTargets(u32::from(*t)),
            B::Primary(i) => bond.primary_index = Some(*i),
            B::PrimaryReselect(r) => bond.primary_reselect = PrimaryReselect(u8::from(*r)),
            B::FailOverMac(f) => bond.fail_over_mac = FailOverMac(u8::from(*f)),
            B::AdSelect(s) => bond.ad_select = AdSelect(u8::from(*s)),
            B::MiiMon(v) => bond.mii_mon = *v,
            B::UpDelay(v) => bond.up_delay = *v,
            B::DownDelay(v) => bond.down_delay = *v,
            B::ArpInterval(v) => bond.arp_interval = *v,
            B::ArpIpTarget(t) => bond.arp_ip_targets = t.iter().copied().map(IpAddr::V4).collect(),
            B::NsIp6Target(t) => bond.ns_ip6_targets = t.iter().copied().map(IpAddr::V6).collect(),
            B::ResendIgmp(v) => bond.resend_igmp = *v,
            B::MinLinks(v) => bond.min_links = *v,
            B::LpInterval(v) => bond.lp_interval = *v,
            B::PacketsPerPort(v) => bond.packets_per_slave = *v,
            B::NumPeerNotif(v) => bond.num_peer_notif = *v,
            B::TlbDynamicLb(on) => bond.tlb_dynamic_lb = u8::from(*on),
            B::AllPortsActive(a) => bond.all_slaves_active = (*a).into(),
            B::UseCarrier(on) => bond.use_carrier = *on,
            B::AdActorSysPrio(v) => bond.ad_actor_sys_prio = *v,
            B::AdUserPortKey(v) => bond.ad_user_port_key = *v,
            B::PeerNotifDelay(v) => bond.peer_notify_delay = *v,
            B::MissedMax(v) => bond.missed_max = *v,
            _ => {}
        }
    }
    bond
}

/// The `IFLA_BR_*` attributes machined sets on a bridge.
pub fn bridge_attributes(bridge: &BridgeSettings) -> Vec<nl::InfoBridge> {
    let stp = if bridge.stp { nl::BridgeStpState::KernelStp } else { nl::BridgeStpState::Disabled };
    let mut attributes = vec![nl::InfoBridge::StpState(stp)];
    if let Some(on) = bridge.vlan_filtering {
        attributes.push(nl::InfoBridge::VlanFiltering(on));
    }
    attributes
}

fn bridge_from_attributes(attributes: &[nl::InfoBridge]) -> BridgeSettings {
    let mut bridge = BridgeSettings::default();
    for attr in attributes {
        match attr {
            nl::InfoBridge::StpState(s) => bridge.stp = u32::from(*s) == 1,
            nl::InfoBridge::VlanFiltering(on) => bridge.vlan_filtering = Some(*on),
            _ => {}
        }
    }
    bridge
}

fn vlan_from_attributes(attributes: &[nl::InfoVlan]) -> VlanInfo {
    let mut vlan = VlanInfo::default();
    for attr in attributes {
        match attr {
            nl::InfoVlan::Id(id) => vlan.id = *id,
            nl::InfoVlan::Protocol(p) => vlan.protocol = VlanProtocol::from_ethertype(u16::from(*p)),
            _ => {}
        }
    }
    vlan
}

fn data_from_info(data: &InfoData) -> LinkData {
    match data {
        InfoData::Vlan(v) => LinkData::Vlan(vlan_from_attributes(v)),
        InfoData::Bond(b) => LinkData::Bond(bond_from_attributes(b)),
        InfoData::Bridge(b) => LinkData::Bridge(bridge_from_attributes(b)),
        _ => LinkData::None,
    }
}

/// The RTM_NEWLINK message that creates `name` of `kind`; `parent` is the index of a
/// vlan's parent link.
pub fn create_message(name: &str, kind: &LinkKind, parent: Option<u32>) -> LinkMessage {
    match kind {
        LinkKind::Veth { peer } => LinkVeth::new(name, peer).build(),
        LinkKind::Bridge(settings) => settings_message(name, &LinkData::Bridge(*settings)),
        LinkKind::Dummy => LinkDummy::new(name).build(),
        LinkKind::Vlan { id, protocol, .. } => {
            LinkVlan::new(name, parent.unwrap_or(0), *id).protocol((*protocol).into()).build()
        }
        LinkKind::Bond(settings) => settings_message(name, &LinkData::Bond(settings.clone())),
    }
}

/// A message naming link `name` with its kind and `data` as link info: sent with
/// NLM_F_CREATE it makes a bond or bridge, without it it changes a live one's settings.
pub fn settings_message(name: &str, data: &LinkData) -> LinkMessage {
    let (kind, data) = match data {
        LinkData::Bond(b) => (InfoKind::Bond, InfoData::Bond(bond_attributes(b))),
        LinkData::Bridge(b) => (InfoKind::Bridge, InfoData::Bridge(bridge_attributes(b))),
        LinkData::Vlan(v) => {
            (InfoKind::Vlan, InfoData::Vlan(vec![nl::InfoVlan::Id(v.id), nl::InfoVlan::Protocol(v.protocol.into())]))
        }
        LinkData::None => return LinkUnspec::new_with_name(name).build(),
    };
    LinkMessageBuilder::<LinkUnspec>::new_with_info_kind(kind).name(name.to_string()).set_info_data(data).build()
}

pub(crate) fn link_from_message(msg: &LinkMessage) -> Link {
    let flags = msg.header.flags;
    let mut link = Link {
        index: msg.header.index,
        name: String::new(),
        kind: String::new(),
        mtu: 0,
        up: flags.contains(LinkFlags::Up),
        running: flags.contains(LinkFlags::Running),
        lower_up: flags.contains(LinkFlags::LowerUp),
        flags: flags.bits(),
        link_type: u16::from(msg.header.link_layer_type),
        hardware_addr: Vec::new(),
        broadcast_addr: Vec::new(),
        master: None,
        parent: None,
        operstate: OperState::Unknown,
        data: LinkData::None,
    };
    for attr in &msg.attributes {
        match attr {
            LinkAttribute::IfName(name) => link.name = name.clone(),
            LinkAttribute::Mtu(mtu) => link.mtu = *mtu,
            LinkAttribute::Address(a) => link.hardware_addr = a.clone(),
            LinkAttribute::Broadcast(a) => link.broadcast_addr = a.clone(),
            LinkAttribute::Controller(i) if *i != 0 => link.master = Some(*i),
            LinkAttribute::Link(i) if *i != 0 => link.parent = Some(*i),
            LinkAttribute::OperState(s) => link.operstate = (*s).into(),
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    match info {
                        LinkInfo::Kind(kind) => link.kind = kind_name(kind),
                        LinkInfo::Data(data) => link.data = data_from_info(data),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    link
}

fn kind_name(kind: &InfoKind) -> String {
    match kind {
        InfoKind::Other(name) => name.clone(),
        kind => kind.to_string(),
    }
}

impl Netlink {
    /// Each link's index by name: how the spec controllers address a link named in a spec.
    pub async fn link_indexes(&self) -> Result<std::collections::HashMap<String, u32>, NetlinkError> {
        Ok(self.links().await?.into_iter().map(|l| (l.name, l.index)).collect())
    }

    /// Every link in the namespace.
    pub async fn links(&self) -> Result<Vec<Link>, NetlinkError> {
        let messages: Vec<LinkMessage> = self
            .handle()
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(|e| NetlinkError::List { what: "links", source: kernel_error(e) })?;
        Ok(messages.iter().map(link_from_message).collect())
    }

    /// The link named `name`, if there is one.
    pub async fn link(&self, name: &str) -> Result<Option<Link>, NetlinkError> {
        let mut messages = self.handle().link().get().match_name(name.to_string()).execute();
        match messages.try_next().await {
            Ok(msg) => Ok(msg.as_ref().map(link_from_message)),
            Err(e) => {
                let source = kernel_error(e);
                if is_errno(&source, &[Errno::NODEV]) {
                    Ok(None)
                } else {
                    Err(NetlinkError::Link { action: "looking up", name: name.to_string(), source })
                }
            }
        }
    }

    async fn require_link(&self, name: &str) -> Result<Link, NetlinkError> {
        self.link(name).await?.ok_or_else(|| NetlinkError::NoSuchLink { name: name.to_string() })
    }

    async fn set(&self, action: &'static str, name: &str, msg: LinkMessage) -> Result<(), NetlinkError> {
        self.handle().link().set(msg).execute().await.map_err(|e| {
            let source = kernel_error(e);
            if is_errno(&source, &[Errno::NODEV]) {
                NetlinkError::NoSuchLink { name: name.to_string() }
            } else {
                NetlinkError::Link { action, name: name.to_string(), source }
            }
        })
    }

    /// Brings the link administratively up or down (already so is fine).
    pub async fn set_link_up(&self, name: &str, up: bool) -> Result<(), NetlinkError> {
        let msg = LinkUnspec::new_with_name(name);
        let (action, msg) = if up { ("bringing up", msg.up()) } else { ("bringing down", msg.down()) };
        self.set(action, name, msg.build()).await
    }

    pub async fn set_link_mtu(&self, name: &str, mtu: u32) -> Result<(), NetlinkError> {
        self.set("setting the MTU of", name, LinkUnspec::new_with_name(name).mtu(mtu).build()).await
    }

    /// Makes the link a port of `master` (a bridge or bond), or of none.
    pub async fn set_link_master(&self, name: &str, master: Option<&str>) -> Result<(), NetlinkError> {
        let msg = LinkUnspec::new_with_name(name);
        match master {
            Some(master) => {
                let index = self.require_link(master).await?.index;
                self.set("setting the master of", name, msg.controller(index).build()).await
            }
            None => self.set("clearing the master of", name, msg.nocontroller().build()).await,
        }
    }

    /// Sets the hardware (MAC) address.
    pub async fn set_link_hardware_addr(&self, name: &str, addr: &[u8]) -> Result<(), NetlinkError> {
        self.set(
            "setting the hardware address of",
            name,
            LinkUnspec::new_with_name(name).address(addr.to_vec()).build(),
        )
        .await
    }

    /// Sets or clears IFF_MULTICAST.
    pub async fn set_link_multicast(&self, name: &str, on: bool) -> Result<(), NetlinkError> {
        self.set("setting the multicast flag of", name, LinkUnspec::new_with_name(name).multicast(on).build()).await
    }

    /// Changes the settings of the live bond or bridge `name` (RTM_NEWLINK without
    /// NLM_F_CREATE: the kernel's changelink). Some bond settings are refused while the bond
    /// is up or has ports; the caller takes it down and frees them first.
    pub async fn set_link_data(&self, name: &str, data: &LinkData) -> Result<(), NetlinkError> {
        let msg = settings_message(name, data);
        self.handle().link().add(msg).set_flags(NLM_F_REQUEST | NLM_F_ACK).execute().await.map_err(|e| {
            let source = kernel_error(e);
            if is_errno(&source, &[Errno::NODEV]) {
                NetlinkError::NoSuchLink { name: name.to_string() }
            } else {
                NetlinkError::Link { action: "changing the settings of", name: name.to_string(), source }
            }
        })
    }

    /// Creates link `name` of `kind`. A link of that name and kind there already is success;
    /// one of another kind is [`NetlinkError::KindMismatch`].
    pub async fn create_link(&self, name: &str, kind: &LinkKind) -> Result<(), NetlinkError> {
        let parent = match kind {
            LinkKind::Vlan { parent, .. } => Some(self.require_link(parent).await?.index),
            _ => None,
        };
        let msg = create_message(name, kind, parent);
        let want = kind.kernel_kind();
        match self.handle().link().add(msg).execute().await {
            Ok(()) => Ok(()),
            Err(e) => {
                let source = kernel_error(e);
                if !is_errno(&source, &[Errno::EXIST]) {
                    let action = match kind {
                        LinkKind::Veth { .. } => "creating veth",
                        LinkKind::Bridge(_) => "creating bridge",
                        LinkKind::Dummy => "creating dummy",
                        LinkKind::Vlan { .. } => "creating vlan",
                        LinkKind::Bond(_) => "creating bond",
                    };
                    return Err(NetlinkError::Link { action, name: name.to_string(), source });
                }
                match self.link(name).await? {
                    Some(found) if found.kind == want => Ok(()),
                    // EEXIST with no such link: a veth whose peer name is taken.
                    found => Err(NetlinkError::KindMismatch {
                        name: name.to_string(),
                        want: want.to_string(),
                        found: found.map(|l| l.kind).unwrap_or_else(|| "none (a peer name is taken)".to_string()),
                    }),
                }
            }
        }
    }

    /// Deletes link `name` (absent is fine). Deleting one end of a veth pair deletes both.
    pub async fn delete_link(&self, name: &str) -> Result<(), NetlinkError> {
        let msg = LinkUnspec::new_with_name(name).build();
        match self.handle().link().del_with_message(msg).execute().await {
            Ok(()) => Ok(()),
            Err(e) => {
                let source = kernel_error(e);
                if is_errno(&source, &[Errno::NODEV]) {
                    Ok(())
                } else {
                    Err(NetlinkError::Link { action: "deleting", name: name.to_string(), source })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtnetlink::packet_route::link::{LinkHeader, LinkLayerType, State};

    #[test]
    fn a_link_message_becomes_a_link() {
        let header = LinkHeader {
            index: 7,
            flags: LinkFlags::Up | LinkFlags::Running | LinkFlags::LowerUp | LinkFlags::Broadcast,
            link_layer_type: LinkLayerType::Ether,
            ..LinkHeader::default()
        };
        let mut msg = LinkMessage::default();
        msg.header = header;
        msg.attributes = vec![
            LinkAttribute::IfName("veth0".into()),
            LinkAttribute::Mtu(1400),
            LinkAttribute::Address(vec![0x02, 0, 0, 0, 0, 0x0a]),
            LinkAttribute::Controller(3),
            LinkAttribute::Link(8),
            LinkAttribute::OperState(State::Up),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
        ];
        let link = link_from_message(&msg);
        assert_eq!(link.index, 7);
        assert_eq!(link.name, "veth0");
        assert_eq!(link.kind, "veth");
        assert_eq!(link.mtu, 1400);
        assert!(link.up && link.running && link.lower_up);
        assert_eq!(link.link_type, 1);
        assert_eq!(link.hardware_addr_string(), "02:00:00:00:00:0a");
        assert_eq!(link.master, Some(3));
        assert_eq!(link.parent, Some(8));
        assert_eq!(link.operstate, OperState::Up);

        msg.attributes = vec![LinkAttribute::IfName("lo".into()), LinkAttribute::Controller(0)];
        msg.header.flags = LinkFlags::Loopback;
        let lo = link_from_message(&msg);
        assert_eq!((lo.kind.as_str(), lo.up, lo.master), ("", false, None));
    }

    /// Through the wire bytes and back, as the kernel would get and answer it.
    fn on_the_wire(msg: &LinkMessage) -> LinkMessage {
        use rtnetlink::packet_core::{Emitable, Parseable};
        let mut buf = vec![0; msg.buffer_len()];
        msg.emit(&mut buf);
        LinkMessage::parse(&buf).unwrap()
    }

    fn info(msg: &LinkMessage) -> Vec<LinkInfo> {
        msg.attributes
            .iter()
            .find_map(|a| if let LinkAttribute::LinkInfo(i) = a { Some(i.clone()) } else { None })
            .unwrap_or_default()
    }

    fn bond_kinds(bond: &BondSettings) -> Vec<u16> {
        use rtnetlink::packet_core::Nla;
        bond_attributes(bond).iter().map(|a| a.kind()).collect()
    }

    #[test]
    fn bond_options_go_only_where_their_mode_takes_them() {
        // IFLA_BOND_* numbers.
        const MODE: u16 = 1;
        const MIIMON: u16 = 3;
        const UPDELAY: u16 = 4;
        const ARP_INTERVAL: u16 = 7;
        const ARP_VALIDATE: u16 = 9;
        const PRIMARY: u16 = 11;
        const PACKETS_PER_SLAVE: u16 = 20;
        const AD_LACP_RATE: u16 = 21;
        const AD_ACTOR_SYS_PRIO: u16 = 24;
        const TLB_DYNAMIC_LB: u16 = 27;
        const AD_LACP_ACTIVE: u16 = 29;
        const MISSED_MAX: u16 = 30;
        let lacp = BondSettings {
            mode: BondMode::IEEE_802_3AD,
            ad_lacp_active: Some(AdLacpActive::OFF),
            primary_index: Some(3),
            ..Default::default()
        };
        let k = bond_kinds(&lacp);
        assert_eq!(k[0], MODE);
        for present in [AD_LACP_RATE, AD_ACTOR_SYS_PRIO, AD_LACP_ACTIVE, MIIMON] {
            assert!(k.contains(&present), "802.3ad sends {present}");
        }
        for absent in [ARP_VALIDATE, ARP_INTERVAL, PRIMARY, PACKETS_PER_SLAVE, TLB_DYNAMIC_LB, UPDELAY, MISSED_MAX] {
            assert!(!k.contains(&absent), "802.3ad does not send {absent}");
        }
        let backup = BondSettings {
            mode: BondMode::ACTIVE_BACKUP,
            primary_index: Some(3),
            mii_mon: 100,
            missed_max: 2,
            ..Default::default()
        };
        let k = bond_kinds(&backup);
        for present in [PRIMARY, ARP_VALIDATE, ARP_INTERVAL, UPDELAY, MISSED_MAX] {
            assert!(k.contains(&present), "active-backup sends {present}");
        }
        assert!(!k.contains(&AD_LACP_RATE) && !k.contains(&PACKETS_PER_SLAVE));
        assert!(
            !bond_kinds(&BondSettings { primary_index: None, ..backup }).contains(&PRIMARY),
            "no primary: kernel's kept"
        );
        assert!(
            bond_kinds(&BondSettings { mode: BondMode::ROUND_ROBIN, ..Default::default() })
                .contains(&PACKETS_PER_SLAVE)
        );
        let tlb = bond_kinds(&BondSettings { mode: BondMode::TLB, ..Default::default() });
        assert!(tlb.contains(&TLB_DYNAMIC_LB) && !tlb.contains(&ARP_VALIDATE));
    }

    #[test]
    fn a_bond_survives_the_wire() {
        let bond = BondSettings {
            mode: BondMode::ACTIVE_BACKUP,
            hash_policy: BondXmitHashPolicy::LAYER34,
            arp_validate: ArpValidate::ALL,
            arp_all_targets: ArpAllTargets::ALL,
            primary_index: Some(4),
            primary_reselect: PrimaryReselect::FAILURE,
            fail_over_mac: FailOverMac::ACTIVE,
            ad_select: AdSelect::STABLE,
            mii_mon: 100,
            up_delay: 200,
            down_delay: 300,
            arp_interval: 0,
            arp_ip_targets: vec!["10.0.0.1".parse().unwrap()],
            ns_ip6_targets: vec!["fd00::1".parse().unwrap()],
            resend_igmp: 1,
            min_links: 1,
            lp_interval: 1,
            num_peer_notif: 1,
            all_slaves_active: 1,
            use_carrier: true,
            peer_notify_delay: 100,
            missed_max: 2,
            ..Default::default()
        };
        let msg = on_the_wire(&create_message("bond0", &LinkKind::Bond(bond.clone()), None));
        assert_eq!(info(&msg)[0], LinkInfo::Kind(InfoKind::Bond));
        let link = link_from_message(&msg);
        assert_eq!((link.name.as_str(), link.kind.as_str()), ("bond0", "bond"));
        assert_eq!(link.data, LinkData::Bond(bond));
    }

    #[test]
    fn bond_values_the_kernel_has_no_name_for_pass_through() {
        use nl::InfoBond as B;
        let bond = bond_from_attributes(&[
            B::Mode(nl::BondMode::Other(42)),
            B::ArpValidate(nl::BondArpValidate::Other(99)),
            B::XmitHashPolicy(nl::BondXmitHashPolicy::Other(7)),
        ]);
        assert_eq!(
            (bond.mode, bond.arp_validate, bond.hash_policy),
            (BondMode(42), ArpValidate(99), BondXmitHashPolicy(7))
        );
        assert_eq!((bond.mode.to_string(), bond.arp_validate.to_string()), ("42".to_string(), "99".to_string()));
        let sent = bond_attributes(&bond);
        assert_eq!(sent[0], B::Mode(nl::BondMode::Other(42)), "and go back as they came");
    }

    #[test]
    fn vlan_and_bridge_messages_carry_their_settings() {
        let kind = LinkKind::Vlan { parent: "eth0".into(), id: 100, protocol: VlanProtocol::Ieee8021Ad };
        let msg = on_the_wire(&create_message("eth0.100", &kind, Some(2)));
        assert!(msg.attributes.contains(&LinkAttribute::Link(2)), "the parent's index: {msg:?}");
        let link = link_from_message(&msg);
        assert_eq!(link.kind, "vlan");
        assert_eq!(link.data, LinkData::Vlan(VlanInfo { id: 100, protocol: VlanProtocol::Ieee8021Ad }));
        assert_eq!(VlanProtocol::from_ethertype(0x8100).ethertype(), 0x8100);

        let stp = BridgeSettings { stp: true, vlan_filtering: Some(true) };
        let msg = on_the_wire(&create_message("br0", &LinkKind::Bridge(stp), None));
        assert_eq!(link_from_message(&msg).data, LinkData::Bridge(stp));
        let off = BridgeSettings { stp: false, vlan_filtering: Some(false) };
        let change = on_the_wire(&settings_message("br0", &LinkData::Bridge(off)));
        assert_eq!(
            info(&change),
            vec![
                LinkInfo::Kind(InfoKind::Bridge),
                LinkInfo::Data(InfoData::Bridge(vec![
                    nl::InfoBridge::StpState(nl::BridgeStpState::Disabled),
                    nl::InfoBridge::VlanFiltering(false)
                ]))
            ]
        );
        assert!(info(&settings_message("x", &LinkData::None)).is_empty(), "nothing to set: no link info");
        let unsaid = on_the_wire(&create_message("br1", &LinkKind::Bridge(BridgeSettings::default()), None));
        assert_eq!(
            info(&unsaid)[1],
            LinkInfo::Data(InfoData::Bridge(vec![nl::InfoBridge::StpState(nl::BridgeStpState::Disabled)])),
            "vlan filtering not said: not sent"
        );
        assert_eq!(info(&create_message("d0", &LinkKind::Dummy, None)), vec![LinkInfo::Kind(InfoKind::Dummy)]);
    }
}

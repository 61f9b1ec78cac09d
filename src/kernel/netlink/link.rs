//! Links: list, up/down, MTU, create (veth, bridge, dummy, vlan, bond), delete, master.
//!
//! Links are named by name, as Talos's LinkSpec is: the kernel looks a link up by
//! `IFLA_IFNAME` when the message carries no index, so setting needs no listing first.

use futures::TryStreamExt;
use rtnetlink::packet_route::link::{self as nl, InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use rtnetlink::{LinkBond, LinkBridge, LinkDummy, LinkUnspec, LinkVeth, LinkVlan};
use rustix::io::Errno;

use super::{Netlink, NetlinkError, is_errno, kernel_error};

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

/// Bonding modes, with the kernel's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BondMode {
    BalanceRr,
    ActiveBackup,
    BalanceXor,
    Broadcast,
    Ieee8023ad,
    BalanceTlb,
    BalanceAlb,
}

impl From<BondMode> for nl::BondMode {
    fn from(m: BondMode) -> nl::BondMode {
        match m {
            BondMode::BalanceRr => nl::BondMode::BalanceRr,
            BondMode::ActiveBackup => nl::BondMode::ActiveBackup,
            BondMode::BalanceXor => nl::BondMode::BalanceXor,
            BondMode::Broadcast => nl::BondMode::Broadcast,
            BondMode::Ieee8023ad => nl::BondMode::Ieee8023Ad,
            BondMode::BalanceTlb => nl::BondMode::BalanceTlb,
            BondMode::BalanceAlb => nl::BondMode::BalanceAlb,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VlanProtocol {
    #[default]
    Ieee8021Q,
    Ieee8021Ad,
}

/// A link to create, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkKind {
    /// A veth pair: the link and its `peer`, both in this namespace.
    Veth {
        peer: String,
    },
    Bridge,
    Dummy,
    /// A vlan `id` on the link named `parent`.
    Vlan {
        parent: String,
        id: u16,
        protocol: VlanProtocol,
    },
    Bond {
        mode: BondMode,
    },
}

impl LinkKind {
    /// The `IFLA_INFO_KIND` the kernel reports for links of this kind.
    pub fn kernel_kind(&self) -> &'static str {
        match self {
            LinkKind::Veth { .. } => "veth",
            LinkKind::Bridge => "bridge",
            LinkKind::Dummy => "dummy",
            LinkKind::Vlan { .. } => "vlan",
            LinkKind::Bond { .. } => "bond",
        }
    }
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
                    if let LinkInfo::Kind(kind) = info {
                        link.kind = kind_name(kind);
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

    /// Creates link `name` of `kind`. A link of that name and kind there already is success;
    /// one of another kind is [`NetlinkError::KindMismatch`].
    pub async fn create_link(&self, name: &str, kind: &LinkKind) -> Result<(), NetlinkError> {
        let msg = match kind {
            LinkKind::Veth { peer } => LinkVeth::new(name, peer).build(),
            LinkKind::Bridge => LinkBridge::new(name).build(),
            LinkKind::Dummy => LinkDummy::new(name).build(),
            LinkKind::Vlan { parent, id, protocol } => {
                let parent = self.require_link(parent).await?.index;
                let protocol = match protocol {
                    VlanProtocol::Ieee8021Q => nl::VlanProtocol::Ieee8021Q,
                    VlanProtocol::Ieee8021Ad => nl::VlanProtocol::Ieee8021Ad,
                };
                LinkVlan::new(name, parent, *id).protocol(protocol).build()
            }
            LinkKind::Bond { mode } => LinkBond::new(name).mode((*mode).into()).build(),
        };
        let want = kind.kernel_kind();
        match self.handle().link().add(msg).execute().await {
            Ok(()) => Ok(()),
            Err(e) => {
                let source = kernel_error(e);
                if !is_errno(&source, &[Errno::EXIST]) {
                    let action = match kind {
                        LinkKind::Veth { .. } => "creating veth",
                        LinkKind::Bridge => "creating bridge",
                        LinkKind::Dummy => "creating dummy",
                        LinkKind::Vlan { .. } => "creating vlan",
                        LinkKind::Bond { .. } => "creating bond",
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
}

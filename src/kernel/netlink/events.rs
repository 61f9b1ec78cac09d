//! The rtnetlink event source: a socket subscribed to the link, address and route multicast
//! groups that wakes a Status or Spec controller when the kernel's tables change, whoever
//! changed them (the controllers' side makes it a runtime event source; nothing here knows
//! the runtime).
//!
//! Kernel events come in bursts (a link going down drops its routes, one address brings a
//! prefix route and a local route): a wake-up covers every message that arrives until the
//! socket has been quiet for the settle time, so a burst is one reconcile. A controller woken
//! this way lists what it observes; the messages themselves are only counted. When the kernel
//! dropped messages for a full socket buffer (ENOBUFS) the wake-up asks for a full reconcile.

use std::io;
use std::ops::BitOr;
use std::time::Duration;

use rtnetlink::sys::{Socket, protocols::NETLINK_ROUTE};
use tokio::io::unix::AsyncFd;

use super::NetlinkError;
use crate::kernel::netns::NetNs;

/// Which multicast groups to listen to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Groups(u8);

impl Groups {
    pub const LINKS: Groups = Groups(1);
    pub const IPV4_ADDRESSES: Groups = Groups(2);
    pub const IPV6_ADDRESSES: Groups = Groups(4);
    pub const IPV4_ROUTES: Groups = Groups(8);
    pub const IPV6_ROUTES: Groups = Groups(16);
    pub const ADDRESSES: Groups = Groups(2 | 4);
    pub const ROUTES: Groups = Groups(8 | 16);
    pub const ALL: Groups = Groups(31);

    /// (flag, `RTNLGRP_*` number, name for logs).
    const TABLE: [(u8, u32, &'static str); 5] = [
        (1, 1, "links"),
        (2, 5, "ipv4 addresses"),
        (4, 9, "ipv6 addresses"),
        (8, 7, "ipv4 routes"),
        (16, 11, "ipv6 routes"),
    ];

    pub fn contains(self, other: Groups) -> bool {
        self.0 & other.0 == other.0
    }

    fn rtnl_groups(self) -> impl Iterator<Item = u32> {
        Self::TABLE.into_iter().filter(move |(bit, _, _)| self.0 & bit != 0).map(|(_, group, _)| group)
    }

    /// The groups' names, for logs.
    pub fn names(self) -> String {
        let names: Vec<&str> =
            Self::TABLE.into_iter().filter(|(bit, _, _)| self.0 & bit != 0).map(|(_, _, name)| name).collect();
        names.join(", ")
    }
}

impl BitOr for Groups {
    type Output = Groups;
    fn bitor(self, other: Groups) -> Groups {
        Groups(self.0 | other.0)
    }
}

/// What one wake-up covered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Batch {
    /// Netlink messages of any type.
    pub messages: usize,
    /// RTM_NEWLINK / RTM_DELLINK.
    pub links: usize,
    /// RTM_NEWADDR / RTM_DELADDR.
    pub addresses: usize,
    /// RTM_NEWROUTE / RTM_DELROUTE.
    pub routes: usize,
    /// The kernel dropped messages (ENOBUFS): anything may have changed.
    pub overflowed: bool,
}

const NLMSG_HDRLEN: usize = 16;

impl Batch {
    /// Counts the messages of one datagram (a sequence of `nlmsghdr`-led messages).
    fn count(&mut self, mut datagram: &[u8]) {
        while datagram.len() >= NLMSG_HDRLEN {
            let len = u32::from_ne_bytes([datagram[0], datagram[1], datagram[2], datagram[3]]) as usize;
            let kind = u16::from_ne_bytes([datagram[4], datagram[5]]);
            if len < NLMSG_HDRLEN || len > datagram.len() {
                return;
            }
            self.messages += 1;
            match kind {
                16 | 17 => self.links += 1,
                20 | 21 => self.addresses += 1,
                24 | 25 => self.routes += 1,
                _ => {}
            }
            let aligned = (len + 3) & !3;
            datagram = &datagram[aligned.min(datagram.len())..];
        }
    }
}

/// The event source. The socket is opened when the source is made, before the controller's
/// first reconcile lists the kernel, so nothing that happens after that listing is missed.
pub struct NetlinkEvents {
    groups: Groups,
    ns: Option<NetNs>,
    settle: Duration,
    max_batch: Duration,
    opened: Option<Socket>,
}

/// How long the socket must stay quiet before a burst is taken as over.
const DEFAULT_SETTLE: Duration = Duration::from_millis(10);
/// The longest one wake-up waits for a burst to end.
const DEFAULT_MAX_BATCH: Duration = Duration::from_millis(200);
const RECEIVE_BUFFER: usize = 4 << 20;

impl NetlinkEvents {
    /// Events of `groups` in the calling thread's network namespace.
    pub fn new(groups: Groups) -> NetlinkEvents {
        Self::make(groups, None)
    }

    /// Events of `groups` in `ns`.
    pub fn in_namespace(ns: &NetNs, groups: Groups) -> NetlinkEvents {
        Self::make(groups, Some(ns.clone()))
    }

    fn make(groups: Groups, ns: Option<NetNs>) -> NetlinkEvents {
        let mut events =
            NetlinkEvents { groups, ns, settle: DEFAULT_SETTLE, max_batch: DEFAULT_MAX_BATCH, opened: None };
        // Failing here is not final: subscribing tries again, and reports the error.
        events.opened = events.open().ok();
        events
    }

    /// The groups it listens to.
    pub fn groups(&self) -> Groups {
        self.groups
    }

    /// Sets the quiet time that ends a burst (10 ms unless set).
    pub fn settle(mut self, settle: Duration) -> NetlinkEvents {
        self.settle = settle;
        self
    }

    fn open(&self) -> io::Result<Socket> {
        let groups = self.groups;
        let open = move || -> io::Result<Socket> {
            let mut socket = Socket::new(NETLINK_ROUTE)?;
            socket.bind_auto()?;
            for group in groups.rtnl_groups() {
                socket.add_membership(group)?;
            }
            // A bigger buffer makes ENOBUFS rarer on a busy node; the kernel caps it at rmem_max.
            socket.set_rx_buf_sz(RECEIVE_BUFFER)?;
            socket.set_non_blocking(true)?;
            Ok(socket)
        };
        match &self.ns {
            Some(ns) => ns.run(open)?,
            None => open(),
        }
    }

    /// The socket as an async stream of batches. Must be called inside a tokio runtime.
    pub fn subscribe(&mut self) -> Result<Subscription, NetlinkError> {
        let connect = |source| NetlinkError::Connect { source };
        tokio::runtime::Handle::try_current().map_err(|e| connect(io::Error::other(e)))?;
        let socket = match self.opened.take() {
            Some(socket) => socket,
            None => self.open().map_err(connect)?,
        };
        // SAFETY: the netlink Socket owns its descriptor, closes it only when dropped (with the
        // AsyncFd), and always reports the same one.
        let socket = unsafe { AsyncFd::register(socket) }.map_err(|e| connect(io::Error::other(e.to_string())))?;
        Ok(Subscription { socket, settle: self.settle, max_batch: self.max_batch, buf: Vec::with_capacity(1 << 16) })
    }
}

/// A subscribed socket.
pub struct Subscription {
    socket: AsyncFd<Socket>,
    settle: Duration,
    max_batch: Duration,
    buf: Vec<u8>,
}

impl Subscription {
    /// Waits for the next burst of events and returns what it held.
    pub async fn next_batch(&mut self) -> io::Result<Batch> {
        let mut batch = Batch::default();
        self.drain(&mut batch).await?;
        let deadline = tokio::time::Instant::now() + self.max_batch;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            match tokio::time::timeout(self.settle.min(left), self.drain(&mut batch)).await {
                Ok(read) => read?,
                Err(_quiet) => break,
            }
        }
        Ok(batch)
    }

    /// Waits until the socket is readable, then reads every datagram queued on it.
    async fn drain(&mut self, batch: &mut Batch) -> io::Result<()> {
        let Subscription { socket, buf, .. } = self;
        let mut ready = socket.readable().await?;
        loop {
            buf.clear();
            match ready.try_io(|s| s.get_ref().recv(buf, 0)) {
                Ok(Ok(_)) => batch.count(buf),
                Ok(Err(e)) if e.raw_os_error() == Some(rustix::io::Errno::NOBUFS.raw_os_error()) => {
                    batch.overflowed = true;
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u16, payload: usize) -> Vec<u8> {
        let len = NLMSG_HDRLEN + payload;
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.resize(len, 0xee);
        m.resize((len + 3) & !3, 0);
        m
    }

    #[test]
    fn batches_count_messages_by_table() {
        let mut datagram = message(16, 5);
        datagram.extend(message(21, 8));
        datagram.extend(message(24, 3));
        datagram.extend(message(3, 4)); // NLMSG_DONE
        let mut batch = Batch::default();
        batch.count(&datagram);
        assert_eq!(batch, Batch { messages: 4, links: 1, addresses: 1, routes: 1, overflowed: false });
        // A truncated or garbled tail stops the count rather than reading past the end.
        let mut short = message(20, 0);
        short.extend_from_slice(&[100, 0, 0, 0, 20, 0]);
        let mut batch = Batch::default();
        batch.count(&short);
        assert_eq!((batch.messages, batch.addresses), (1, 1));
    }

    #[test]
    fn groups_map_to_the_kernels_numbers() {
        assert_eq!(Groups::ALL.rtnl_groups().collect::<Vec<_>>(), vec![1, 5, 9, 7, 11]);
        assert_eq!((Groups::LINKS | Groups::IPV6_ROUTES).rtnl_groups().collect::<Vec<_>>(), vec![1, 11]);
        assert!(Groups::ADDRESSES.contains(Groups::IPV4_ADDRESSES));
        assert!(!Groups::ADDRESSES.contains(Groups::LINKS));
        assert_eq!(Groups::LINKS.names(), "links");
    }
}

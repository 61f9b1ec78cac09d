//! rtnetlink: the one way the network Spec and Status controllers reach the kernel's links,
//! addresses and routes, and the multicast events that tell them the kernel changed.
//!
//! A [`Netlink`] is a routing socket bound to one network namespace (the caller's, or one
//! handed in with [`Netlink::connect_in`]). Its operations are idempotent, as the Spec
//! controllers need: adding what is there, or deleting what is gone, succeeds. Values cross this
//! boundary as plain types ([`Link`], [`Address`], [`Route`]), never as netlink messages, so the
//! layers above neither see nor depend on the wire crates. [`NetlinkEvents`] is the runtime's
//! event source over the link, address and route multicast groups.
//!
//! Nothing here decides what the kernel should hold, and nothing here shells out to `ip`.

mod address;
mod events;
mod link;
mod route;
mod types;

/// A bond's settings are the crate's one bond type.
pub use crate::types::BondSettings;
pub use events::{Batch, Groups, NetlinkEvents, Subscription};
pub use link::{
    BridgeSettings, Link, LinkData, LinkKind, OperState, VlanInfo, VlanProtocol, bond_attributes, bond_from_attributes,
    bridge_attributes, create_message, settings_message,
};
pub use route::{NextHop, Route, TABLE_DEFAULT, TABLE_LOCAL, TABLE_MAIN, protocol};
pub use types::Scope;

use crate::types::IpPrefix;

pub use address::{Address, flags as address_flags};

use std::io;
use std::os::fd::{FromRawFd, IntoRawFd};

use rtnetlink::sys::{TokioSocket, protocols::NETLINK_ROUTE};

use super::netns::NetNs;

/// A failed rtnetlink operation, naming what it was done to.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("opening an rtnetlink socket: {source}")]
    Connect { source: io::Error },
    #[error("listing {what}: {source}")]
    List { what: &'static str, source: io::Error },
    #[error("{action} link {name}: {source}")]
    Link { action: &'static str, name: String, source: io::Error },
    #[error("link {name} does not exist")]
    NoSuchLink { name: String },
    #[error("creating link {name} ({want}): a link of that name exists already, of kind {found:?}")]
    KindMismatch { name: String, want: String, found: String },
    #[error("{action} address {address} on link {link_index}: {source}")]
    Address { action: &'static str, address: IpPrefix, link_index: u32, source: io::Error },
    #[error("{action} route {route}: {source}")]
    Route { action: &'static str, route: String, source: io::Error },
}

/// A routing socket in one network namespace.
pub struct Netlink {
    handle: rtnetlink::Handle,
    connection: tokio::task::JoinHandle<()>,
}

impl Drop for Netlink {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl Netlink {
    /// A socket in the calling thread's network namespace (the node's own, on a node). Must be
    /// called inside a tokio runtime with I/O enabled.
    pub fn connect() -> Result<Netlink, NetlinkError> {
        in_runtime()?;
        let (connection, handle, _) = rtnetlink::new_connection().map_err(|source| NetlinkError::Connect { source })?;
        Ok(Netlink { handle, connection: tokio::spawn(connection) })
    }

    /// A socket in `ns`, usable from any thread of the calling tokio runtime.
    pub fn connect_in(ns: &NetNs) -> Result<Netlink, NetlinkError> {
        in_runtime()?;
        let socket = ns
            .run(|| rtnetlink::sys::Socket::new(NETLINK_ROUTE))
            .and_then(|s| s)
            .map_err(|source| NetlinkError::Connect { source })?;
        socket.set_non_blocking(true).map_err(|source| NetlinkError::Connect { source })?;
        // SAFETY: the descriptor is the netlink socket just created, owned by nothing else;
        // TokioSocket takes it over (and closes it). Its registration with the runtime's
        // reactor cannot fail for lack of a runtime: `in_runtime` checked there is one.
        let socket = unsafe { TokioSocket::from_raw_fd(socket.into_raw_fd()) };
        let (connection, handle, _) = rtnetlink::from_socket(socket);
        Ok(Netlink { handle, connection: tokio::spawn(connection) })
    }

    pub(crate) fn handle(&self) -> &rtnetlink::Handle {
        &self.handle
    }
}

fn in_runtime() -> Result<(), NetlinkError> {
    tokio::runtime::Handle::try_current().map(|_| ()).map_err(|e| NetlinkError::Connect { source: io::Error::other(e) })
}

/// The kernel's answer as an `io::Error`: its errno where it gave one.
pub(crate) fn kernel_error(e: rtnetlink::Error) -> io::Error {
    match e {
        rtnetlink::Error::NetlinkError(msg) => match msg.code {
            Some(code) => io::Error::from_raw_os_error(-code.get()),
            None => io::Error::other("acknowledged without an error code"),
        },
        other => io::Error::other(other.to_string()),
    }
}

/// Whether `e` carries one of `errnos`.
pub(crate) fn is_errno(e: &io::Error, errnos: &[rustix::io::Errno]) -> bool {
    e.raw_os_error().is_some_and(|code| errnos.iter().any(|n| n.raw_os_error() == code))
}

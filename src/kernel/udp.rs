//! UDP sockets bound to one link, in a chosen network namespace: what the DHCP clients talk
//! through before the link has an address of its own.
//!
//! A DHCP client listens on the wildcard address at its well-known port, bound to its link
//! (`SO_BINDTODEVICE`), so each link's client hears only its own link and several clients
//! share the port (`SO_REUSEADDR`). An unaddressed link can still send to the limited
//! broadcast address from such a socket: the kernel picks 0.0.0.0 as the source, which is
//! what DHCPDISCOVER wants. Nothing here speaks DHCP.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;

use rustix::net::{AddressFamily, SocketFlags, SocketType, ipproto, sockopt};

use super::netns::NetNs;

/// A non-blocking UDP socket on `addr`, bound to the link `link`, created in `ns` (or the
/// caller's namespace). `broadcast` allows sending to broadcast addresses. Must be called
/// inside a tokio runtime.
pub fn bound_to_link(
    ns: Option<&NetNs>,
    addr: SocketAddr,
    link: &str,
    broadcast: bool,
) -> io::Result<tokio::net::UdpSocket> {
    let family = if addr.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let create = move || {
        rustix::net::socket_with(
            family,
            SocketType::DGRAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            Some(ipproto::UDP),
        )
    };
    // The namespace a socket belongs to is the one of the thread that creates it.
    let fd = match ns {
        Some(ns) => ns.run(create)??,
        None => create()?,
    };
    sockopt::set_socket_reuseaddr(&fd, true)?;
    if addr.is_ipv6() {
        sockopt::set_ipv6_v6only(&fd, true)?;
    }
    if broadcast {
        sockopt::set_socket_broadcast(&fd, true)?;
    }
    let socket = tokio::net::UdpSocket::from_std(std::net::UdpSocket::from(fd))?;
    // Bound to the link before the port, so two links' clients never collide on it.
    socket.bind_device(Some(link.as_bytes()))?;
    rustix::net::bind(socket.as_fd(), &addr)?;
    Ok(socket)
}

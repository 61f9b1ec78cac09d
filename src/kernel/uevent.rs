//! Kernel object events (`NETLINK_KOBJECT_UEVENT`): the kernel's own announcements that a
//! device appeared, changed or went away — what udev listens to. The node has no udev, so the
//! block controllers listen here themselves. Parsing is pure and tested; the socket is thin.
//! It must never write to the socket or act on an event: it only reports them.

use std::collections::BTreeMap;
use std::io;

use tokio::io::unix::AsyncFd;

use rtnetlink::sys::{Socket, SocketAddr, protocols::NETLINK_KOBJECT_UEVENT};

/// The multicast group the kernel sends its events to (udevd's is 2).
const KERNEL_GROUP: u32 = 1;
const RECEIVE_BUFFER: usize = 1 << 20;

/// One event: `ACTION@DEVPATH` followed by `KEY=VALUE` pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uevent {
    pub action: String,
    pub devpath: String,
    pub vars: BTreeMap<String, String>,
}

impl Uevent {
    /// Parses one datagram; `None` for what is not a kernel event (libudev's monitor
    /// messages start with `libudev`).
    pub fn parse(data: &[u8]) -> Option<Uevent> {
        let mut fields = data.split(|b| *b == 0).filter(|f| !f.is_empty());
        let head = std::str::from_utf8(fields.next()?).ok()?;
        let (action, devpath) = head.split_once('@')?;
        let mut vars = BTreeMap::new();
        for f in fields {
            if let Some((k, v)) = std::str::from_utf8(f).ok().and_then(|s| s.split_once('=')) {
                vars.insert(k.to_string(), v.to_string());
            }
        }
        Some(Uevent { action: action.to_string(), devpath: devpath.to_string(), vars })
    }

    pub fn subsystem(&self) -> Option<&str> {
        self.vars.get("SUBSYSTEM").map(String::as_str)
    }

    /// The kernel name of the device (`vda`, `vda3`).
    pub fn devname(&self) -> Option<&str> {
        self.vars.get("DEVNAME").map(String::as_str).or_else(|| self.devpath.rsplit('/').next())
    }
}

/// A socket subscribed to the kernel's events.
pub struct UeventSocket {
    socket: AsyncFd<Socket>,
    buf: Vec<u8>,
}

impl UeventSocket {
    /// Opens and subscribes; must be called inside a tokio runtime.
    pub fn open() -> io::Result<UeventSocket> {
        let mut socket = Socket::new(NETLINK_KOBJECT_UEVENT)?;
        socket.bind(&SocketAddr::new(0, KERNEL_GROUP))?;
        // Events come in bursts when a disk with many partitions appears.
        socket.set_rx_buf_sz(RECEIVE_BUFFER)?;
        socket.set_non_blocking(true)?;
        // SAFETY: the netlink Socket owns its descriptor, closes it only when dropped (with the
        // AsyncFd), and always reports the same one.
        let socket = unsafe { AsyncFd::register(socket) }.map_err(|e| io::Error::other(e.to_string()))?;
        Ok(UeventSocket { socket, buf: vec![0; 1 << 16] })
    }

    /// The next kernel event.
    pub async fn next(&mut self) -> io::Result<Uevent> {
        loop {
            let mut guard = self.socket.readable().await?;
            let buf = &mut self.buf;
            match guard.try_io(|s| s.get_ref().recv(&mut &mut buf[..], 0)) {
                Ok(Ok(n)) => {
                    if let Some(e) = Uevent::parse(&self.buf[..n.min(self.buf.len())]) {
                        return Ok(e);
                    }
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_events_parse() {
        let msg = b"add@/devices/pci0000:00/0000:00:05.0/virtio2/block/vda/vda5\0ACTION=add\0\
DEVPATH=/devices/pci0000:00/0000:00:05.0/virtio2/block/vda/vda5\0SUBSYSTEM=block\0MAJOR=254\0MINOR=5\0\
DEVNAME=vda5\0DEVTYPE=partition\0PARTN=5\0PARTNAME=STATE\0SEQNUM=1042\0";
        let e = Uevent::parse(msg).unwrap();
        assert_eq!(e.action, "add");
        assert_eq!(e.subsystem(), Some("block"));
        assert_eq!(e.devname(), Some("vda5"));
        assert_eq!(e.vars["PARTNAME"], "STATE");
        assert_eq!(e.vars.len(), 10);
    }

    #[test]
    fn what_is_not_a_kernel_event_is_dropped() {
        assert_eq!(Uevent::parse(b"libudev\0\xfe\xed\xca\xfe"), None);
        assert_eq!(Uevent::parse(b""), None);
        let bare = Uevent::parse(b"change@/devices/virtual/block/loop0").unwrap();
        assert_eq!(bare.devname(), Some("loop0"));
        assert_eq!(bare.subsystem(), None);
    }
}

//! UTS names: the kernel's hostname (`nodename`) and NIS domain name, read with `uname`, set
//! with `sethostname`/`setdomainname`, and watched through the change notification of
//! `/proc/sys/kernel/{hostname,domainname}`; and UTS namespaces, so tests never touch the
//! host's names.
//!
//! As with network namespaces ([`super::netns`]), work inside another UTS namespace runs on
//! a short-lived thread that entered it: the calling thread (a tokio worker) never changes
//! namespace. Nothing here decides what the names should be.

use std::fs::File;
use std::io;

use rustix::thread::LinkNameSpaceType;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::netns::{Kind, Namespace};

/// The kernel's default for a name never set.
const UNSET: &str = "(none)";

/// The names as the kernel holds them; one never set is empty (the kernel says `(none)`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UtsNames {
    pub hostname: String,
    pub domainname: String,
}

fn unset_is_empty(name: &std::ffi::CStr) -> String {
    let name = name.to_string_lossy();
    if name == UNSET { String::new() } else { name.into_owned() }
}

/// The calling thread's names.
pub fn names() -> UtsNames {
    let uname = rustix::system::uname();
    UtsNames { hostname: unset_is_empty(uname.nodename()), domainname: unset_is_empty(uname.domainname()) }
}

/// Sets the calling thread's names (needs CAP_SYS_ADMIN in its UTS namespace).
pub fn set_names(names: &UtsNames) -> io::Result<()> {
    rustix::system::sethostname(names.hostname.as_bytes())?;
    rustix::system::setdomainname(names.domainname.as_bytes())?;
    Ok(())
}

/// UTS namespaces.
pub struct Uts;

impl Kind for Uts {
    const TYPE: LinkNameSpaceType = LinkNameSpaceType::HostNameAndNISDomainName;
    const OWN: &'static str = "/proc/thread-self/ns/uts";
}

/// A UTS namespace, held open by a file descriptor. Clones share the descriptor.
pub type UtsNs = Namespace<Uts>;

/// Whose names a hostname controller reads and sets.
#[derive(Debug, Clone)]
pub enum UtsTarget {
    /// The calling thread's: the node's own, for machined as PID 1.
    Node,
    /// A namespace handed in (tests).
    Namespace(UtsNs),
}

impl UtsTarget {
    pub fn names(&self) -> io::Result<UtsNames> {
        match self {
            UtsTarget::Node => Ok(names()),
            UtsTarget::Namespace(ns) => ns.run(names),
        }
    }

    pub fn set_names(&self, wanted: &UtsNames) -> io::Result<()> {
        match self {
            UtsTarget::Node => set_names(wanted),
            UtsTarget::Namespace(ns) => ns.run(|| set_names(wanted))?,
        }
    }
}

/// The kernel's signal that a hostname or domain name was set: POLLPRI on the open sysctl
/// files. The signal is not per namespace, so a change in another UTS namespace shows too
/// (the reader finds nothing new). Opened, it reports every change from then on.
pub struct UtsWatch {
    hostname: AsyncFd<File>,
    domainname: AsyncFd<File>,
}

impl UtsWatch {
    /// Must be called inside a tokio runtime.
    pub fn open() -> io::Result<UtsWatch> {
        let open = |path: &str| -> io::Result<AsyncFd<File>> {
            let file = File::open(path).map_err(|e| io::Error::new(e.kind(), format!("opening {path}: {e}")))?;
            // SAFETY: the File owns its descriptor, closes it only when dropped (with the
            // AsyncFd), and always reports the same one.
            unsafe { AsyncFd::register_with_interest(file, Interest::PRIORITY) }
                .map_err(|e| io::Error::other(format!("watching {path}: {e}")))
        };
        Ok(UtsWatch { hostname: open("/proc/sys/kernel/hostname")?, domainname: open("/proc/sys/kernel/domainname")? })
    }

    /// Waits until a name is set.
    pub async fn changed(&mut self) -> io::Result<()> {
        tokio::select! {
            ready = self.hostname.ready(Interest::PRIORITY) => ready?.clear_ready(),
            ready = self.domainname.ready(Interest::PRIORITY) => ready?.clear_ready(),
        }
        Ok(())
    }
}

/// The event source over [`UtsWatch`] that wakes a hostname controller (the controllers'
/// side makes it one; nothing here knows the runtime).
pub struct UtsEvents;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_unset_name_is_empty() {
        assert_eq!(unset_is_empty(c"(none)"), "");
        assert_eq!(unset_is_empty(c"node1"), "node1");
    }
}

//! Network namespaces: a handle to one, a fresh empty one, and running work inside one.
//!
//! A socket stays in the network namespace it was created in, whichever thread later uses it.
//! So code bound to another namespace (a `--mode container` node, every kernel test) creates
//! its sockets through [`NetNs::run`], on a short-lived thread that entered the namespace, and
//! then uses them from anywhere. The calling thread never changes namespace: a tokio worker
//! that did would take every task it runs along with it.
//!
//! A namespace made by [`NetNs::new`] has no name in `/run/netns`: it lives exactly as long as
//! a handle to it or a socket or process inside it, so a test that panics leaves nothing
//! behind. Nothing here mounts, names or deletes namespaces.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use rustix::thread::{LinkNameSpaceType, UnshareFlags};

/// A network namespace, held open by a file descriptor. Clones share the descriptor.
#[derive(Clone, Debug)]
pub struct NetNs {
    fd: Arc<OwnedFd>,
}

impl NetNs {
    /// A fresh network namespace with only a loopback link (down), as `unshare --net` makes.
    pub fn new() -> io::Result<NetNs> {
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: CLONE_NEWNET changes only this thread's network namespace; it does
                // not unshare the file table (CLONE_FILES), which is what makes unshare unsafe.
                unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }?;
                NetNs::open("/proc/thread-self/ns/net")
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
        })
    }

    /// The calling thread's network namespace.
    pub fn current() -> io::Result<NetNs> {
        NetNs::open("/proc/thread-self/ns/net")
    }

    /// The namespace at `path`: `/proc/<pid>/ns/net` or a bind mount such as `/run/netns/<name>`.
    pub fn open(path: impl AsRef<Path>) -> io::Result<NetNs> {
        let file = File::open(path)?;
        Ok(NetNs { fd: Arc::new(OwnedFd::from(file)) })
    }

    /// Runs `work` on a thread inside this namespace and returns its result. Sockets it
    /// creates, and processes it spawns, belong to this namespace. A panic in `work` is
    /// carried on to the caller.
    pub fn run<T, F>(&self, work: F) -> io::Result<T>
    where
        T: Send,
        F: FnOnce() -> T + Send,
    {
        std::thread::scope(|s| {
            let thread = s.spawn(|| {
                rustix::thread::move_into_link_name_space(self.fd.as_fd(), Some(LinkNameSpaceType::Network))?;
                Ok(work())
            });
            match thread.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs the future that `make` returns on a current-thread tokio runtime of its own, on a
    /// thread inside this namespace: for work that opens sockets as it goes.
    pub fn block_on<F, M>(&self, make: M) -> io::Result<F::Output>
    where
        M: FnOnce() -> F + Send,
        F: Future,
        F::Output: Send,
    {
        self.run(|| {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            Ok(runtime.block_on(make()))
        })?
    }

    /// Whether `self` and `other` are the same namespace (same nsfs inode).
    pub fn same_as(&self, other: &NetNs) -> io::Result<bool> {
        let a = rustix::fs::fstat(self.fd.as_fd())?;
        let b = rustix::fs::fstat(other.fd.as_fd())?;
        Ok((a.st_dev, a.st_ino) == (b.st_dev, b.st_ino))
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

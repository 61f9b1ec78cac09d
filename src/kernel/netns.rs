//! Network namespaces (and, through the same [`Namespace`] handle, the UTS namespaces of
//! [`super::uts`]): a handle to one, a fresh empty one, and running work inside one.
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
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use rustix::thread::{LinkNameSpaceType, UnshareFlags};

/// A kind of namespace a [`Namespace`] handle can be: the type that enters one (its value is
/// also the `CLONE_NEW*` flag that makes a fresh one), and the calling thread's own in `/proc`.
pub trait Kind {
    const TYPE: LinkNameSpaceType;
    const OWN: &'static str;
}

/// Network namespaces.
pub struct Net;

impl Kind for Net {
    const TYPE: LinkNameSpaceType = LinkNameSpaceType::Network;
    const OWN: &'static str = "/proc/thread-self/ns/net";
}

/// A network namespace, held open by a file descriptor. Clones share the descriptor.
pub type NetNs = Namespace<Net>;

/// A namespace of kind `K`, held open by a file descriptor. Clones share the descriptor.
pub struct Namespace<K> {
    fd: Arc<OwnedFd>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Namespace<K> {
    fn clone(&self) -> Self {
        Namespace { fd: Arc::clone(&self.fd), kind: PhantomData }
    }
}

impl<K> std::fmt::Debug for Namespace<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace").field("fd", &self.fd).finish()
    }
}

impl<K: Kind> Namespace<K> {
    /// A fresh namespace, as `unshare` makes: a network one with only a loopback link
    /// (down), a UTS one with a copy of the caller's names.
    pub fn new() -> io::Result<Self> {
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: CLONE_NEWNET and CLONE_NEWUTS change only this thread's namespace of
                // that kind; they do not unshare the file table (CLONE_FILES), which is what
                // makes unshare unsafe.
                unsafe { rustix::thread::unshare_unsafe(UnshareFlags::from_bits_retain(K::TYPE as u32)) }?;
                Self::open(K::OWN)
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
        })
    }

    /// The calling thread's namespace.
    pub fn current() -> io::Result<Self> {
        Self::open(K::OWN)
    }

    /// The namespace at `path`: `/proc/<pid>/ns/<kind>` or a bind mount such as `/run/netns/<name>`.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let file = File::open(path)?;
        Ok(Namespace { fd: Arc::new(OwnedFd::from(file)), kind: PhantomData })
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
                rustix::thread::move_into_link_name_space(self.fd.as_fd(), Some(K::TYPE))?;
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
    pub fn same_as(&self, other: &Self) -> io::Result<bool> {
        let a = rustix::fs::fstat(self.fd.as_fd())?;
        let b = rustix::fs::fstat(other.fd.as_fd())?;
        Ok((a.st_dev, a.st_ino) == (b.st_dev, b.st_ino))
    }
}

impl<K> AsFd for Namespace<K> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

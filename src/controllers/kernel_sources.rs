//! The kernel's change signals as the runtime's event sources: rtnetlink multicast events
//! ([`NetlinkEvents`]) and UTS name changes ([`UtsEvents`]). The kernel side opens and reads
//! them and knows nothing of the runtime; this module only turns what they report into
//! wake-ups. It must never decide anything about what a controller does when woken.

use tokio_util::sync::CancellationToken;

use crate::cosi::{EventSource, SourceError, Waker};
use crate::kernel::netlink::NetlinkEvents;
use crate::kernel::uts::{UtsEvents, UtsWatch};

#[async_trait::async_trait]
impl EventSource for NetlinkEvents {
    fn name(&self) -> String {
        format!("netlink {}", self.groups().names())
    }

    async fn run(&mut self, waker: &Waker, cancel: &CancellationToken) -> Result<(), SourceError> {
        let mut subscription = self.subscribe()?;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                batch = subscription.next_batch() => {
                    // Dropped messages (ENOBUFS): anything may have changed.
                    if batch?.overflowed {
                        waker.wake_full();
                    } else {
                        waker.wake();
                    }
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl EventSource for UtsEvents {
    fn name(&self) -> String {
        "uts names".to_string()
    }

    async fn run(&mut self, waker: &Waker, cancel: &CancellationToken) -> Result<(), SourceError> {
        // A change before this is covered by the controller's first reconcile (or the full
        // one that follows a restart).
        let mut watch = UtsWatch::open()?;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                changed = watch.changed() => {
                    changed?;
                    waker.wake();
                }
            }
        }
    }
}

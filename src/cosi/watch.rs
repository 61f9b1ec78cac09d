//! Watches: the bounded event history a backend keeps per kind (and per watched id), and the
//! stream a watcher reads from it.
//!
//! An [`EventRing`] keeps the last `capacity` events with their sequence numbers; a watcher
//! holds a position in it and copies out everything pending at once, so publishing never
//! waits for a reader and a reader takes the lock once per batch, not per event. A watcher
//! that falls more than `capacity` events behind gets [`WatchError::Overrun`], and that ends
//! its watch: every later read repeats the error, so a client re-lists instead of going on
//! with a gap.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::query::ListOptions;
use super::resource::AnyResource;

/// What happened to a resource. `Bootstrapped` marks the end of a watch's initial snapshot.
#[derive(Debug, Clone)]
pub enum Event {
    Created(Arc<AnyResource>),
    Updated { old: Arc<AnyResource>, new: Arc<AnyResource> },
    Destroyed(Arc<AnyResource>),
    Bootstrapped,
}

impl Event {
    /// The resource as it is after the event (as it was, for `Destroyed`).
    pub fn resource(&self) -> Option<&Arc<AnyResource>> {
        match self {
            Event::Created(r) | Event::Destroyed(r) => Some(r),
            Event::Updated { new, .. } => Some(new),
            Event::Bootstrapped => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// The watcher fell behind the bounded history; `missed` events are gone. The watch is
    /// over: re-list (or watch again with a bootstrap) to catch up.
    #[error("watch fell behind: {missed} events were dropped from the bounded history; re-list to catch up")]
    Overrun { missed: u64 },
    #[error("watch closed: the state is gone")]
    Closed,
}

struct Ring {
    events: VecDeque<Event>,
    /// Sequence number of `events[0]`.
    first: u64,
    capacity: usize,
    closed: bool,
}

impl Ring {
    fn next_seq(&self) -> u64 {
        self.first + self.events.len() as u64
    }
}

/// The bounded, ordered event history of one kind (or one watched id).
pub struct EventRing {
    ring: Mutex<Ring>,
    notify: Notify,
}

impl EventRing {
    pub fn new(capacity: usize) -> Arc<Self> {
        let capacity = capacity.max(1);
        Arc::new(EventRing {
            ring: Mutex::new(Ring { events: VecDeque::new(), first: 0, capacity, closed: false }),
            notify: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        // Every change under this lock is a single push or pop: a panic elsewhere cannot
        // leave it half-done, so a poisoned lock is safe to keep using.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends an event, dropping the oldest past capacity, and wakes the readers.
    pub fn push(&self, event: Event) {
        {
            let mut ring = self.lock();
            if ring.events.len() == ring.capacity {
                ring.events.pop_front();
                ring.first += 1;
            }
            ring.events.push_back(event);
        }
        self.notify.notify_waiters();
    }

    /// Ends every watch on this ring once it has read what is left.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// A reader positioned after the newest event.
    pub fn live(self: &Arc<Self>) -> Cursor {
        let pos = self.lock().next_seq();
        Cursor { ring: Arc::clone(self), pos, batch: VecDeque::new() }
    }

    /// A reader positioned `n` events back, as far as the history goes less a small gap: a
    /// reader starting at the very oldest event would be pushed out by the next write.
    pub fn tail(self: &Arc<Self>, n: usize) -> Cursor {
        let ring = self.lock();
        let gap = (ring.capacity / 256).max(1).min(ring.capacity - 1);
        let n = n.min(ring.capacity - gap) as u64;
        let pos = ring.next_seq().saturating_sub(n).max(ring.first);
        drop(ring);
        Cursor { ring: Arc::clone(self), pos, batch: VecDeque::new() }
    }

    /// Watchers still reading this ring (besides the backend's own reference).
    pub fn readers(self: &Arc<Self>) -> usize {
        Arc::strong_count(self) - 1
    }
}

/// A position in an [`EventRing`].
pub struct Cursor {
    ring: Arc<EventRing>,
    pos: u64,
    batch: VecDeque<Event>,
}

impl Cursor {
    /// Copies whatever is pending into the batch; `Ok(false)` when nothing is.
    fn fill(&mut self) -> Result<bool, WatchError> {
        let ring = self.ring.lock();
        if self.pos < ring.first {
            return Err(WatchError::Overrun { missed: ring.first - self.pos });
        }
        let next = ring.next_seq();
        if self.pos < next {
            let start = (self.pos - ring.first) as usize;
            self.batch.extend(ring.events.range(start..).cloned());
            self.pos = next;
            return Ok(true);
        }
        if ring.closed { Err(WatchError::Closed) } else { Ok(false) }
    }

    async fn next(&mut self) -> Result<Event, WatchError> {
        loop {
            if let Some(event) = self.batch.pop_front() {
                return Ok(event);
            }
            let ring = Arc::clone(&self.ring);
            let notified = ring.notify.notified();
            tokio::pin!(notified);
            // Registered before looking, so a push between the look and the wait is not missed.
            notified.as_mut().enable();
            if !self.fill()? {
                notified.await;
            }
        }
    }

    fn try_next(&mut self) -> Option<Result<Event, WatchError>> {
        if self.batch.is_empty() {
            match self.fill() {
                Ok(false) => return None,
                Ok(true) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        self.batch.pop_front().map(Ok)
    }
}

/// A stream of events for one kind (namespace + type), optionally narrowed by a query.
pub struct Watch {
    initial: VecDeque<Event>,
    cursor: Cursor,
    filter: Option<ListOptions>,
    /// Ids never passed on, whatever happens to them (resources the caller may not read).
    hidden: Option<fn(&str) -> bool>,
    ended: Option<WatchError>,
}

impl Watch {
    /// Built by backends: `initial` is emitted first (a snapshot as `Created` events and
    /// `Bootstrapped`, or nothing), then what `cursor` reads, narrowed by `filter`. The
    /// snapshot must already be filtered.
    pub fn new(initial: Vec<Event>, cursor: Cursor, filter: ListOptions) -> Self {
        let filter = (!(filter.labels.is_all() && filter.ids.is_all())).then_some(filter);
        Watch { initial: initial.into(), cursor, filter, hidden: None, ended: None }
    }

    /// This watch without any event of a resource whose id `hidden` says (the snapshot's
    /// included): ids never change, so such a resource is simply never seen.
    pub fn hiding(mut self, hidden: fn(&str) -> bool) -> Self {
        self.initial.retain(|e| e.resource().is_none_or(|r| !hidden(&r.metadata.id)));
        self.hidden = Some(hidden);
        self
    }

    /// A snapshot (`Created` per resource, then `Bootstrapped`).
    pub fn bootstrap(snapshot: Vec<Arc<AnyResource>>) -> Vec<Event> {
        let mut events: Vec<Event> = snapshot.into_iter().map(Event::Created).collect();
        events.push(Event::Bootstrapped);
        events
    }

    /// Passes an event through the filter: one whose resource starts or stops matching with
    /// an update becomes a `Created` or a `Destroyed`.
    fn narrow(&self, event: Event) -> Option<Event> {
        if let (Some(hidden), Some(r)) = (self.hidden, event.resource())
            && hidden(&r.metadata.id)
        {
            return None;
        }
        let Some(filter) = &self.filter else { return Some(event) };
        let matches = |r: &AnyResource| filter.matches(&r.metadata.id, &r.metadata.labels);
        match event {
            Event::Created(ref r) | Event::Destroyed(ref r) => matches(r).then_some(event),
            Event::Updated { old, new } => match (matches(&old), matches(&new)) {
                (true, true) => Some(Event::Updated { old, new }),
                (true, false) => Some(Event::Destroyed(new)),
                (false, true) => Some(Event::Created(new)),
                (false, false) => None,
            },
            Event::Bootstrapped => Some(event),
        }
    }

    fn end(&mut self, e: WatchError) -> WatchError {
        self.ended = Some(e.clone());
        e
    }

    pub async fn next(&mut self) -> Result<Event, WatchError> {
        if let Some(e) = &self.ended {
            return Err(e.clone());
        }
        if let Some(event) = self.initial.pop_front() {
            return Ok(event);
        }
        loop {
            match self.cursor.next().await {
                Ok(event) => {
                    if let Some(event) = self.narrow(event) {
                        return Ok(event);
                    }
                }
                Err(e) => return Err(self.end(e)),
            }
        }
    }

    /// The next event if one is ready, without waiting.
    pub fn try_next(&mut self) -> Option<Result<Event, WatchError>> {
        if let Some(e) = &self.ended {
            return Some(Err(e.clone()));
        }
        if let Some(event) = self.initial.pop_front() {
            return Some(Ok(event));
        }
        loop {
            match self.cursor.try_next()? {
                Ok(event) => {
                    if let Some(event) = self.narrow(event) {
                        return Some(Ok(event));
                    }
                }
                Err(e) => return Some(Err(self.end(e))),
            }
        }
    }
}

//! The machine's event log, what the Events RPC streams: a bounded ring of typed payloads
//! (protobuf `Any`: type URL and bytes), each with an id that sorts by time, and a watch
//! channel that wakes followers.
//!
//! Ids are xids (12 bytes: seconds, machine, process, counter; base32hex, 20 characters), as
//! Talos's are, so a client's `tail_id` from a Talos node or ours means the same. The ring never
//! grows past its capacity; a follower that falls behind continues from the oldest event held.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: String,
    /// `type.googleapis.com/machine.ServiceStateEvent` …
    pub type_url: String,
    pub payload: Vec<u8>,
    pub actor_id: String,
    pub at: SystemTime,
}

/// Which events a reader wants first (Talos's EventsRequest).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tail {
    /// The last N events (negative: all held).
    pub events: i32,
    /// Events after this id.
    pub after_id: Option<String>,
    /// Events of the last N seconds.
    pub seconds: i32,
}

pub struct EventLog {
    ring: Mutex<Ring>,
    pushed: watch::Sender<u64>,
    ids: XidGenerator,
}

struct Ring {
    events: VecDeque<Event>,
    capacity: usize,
    /// Sequence number of `events[0]`.
    first: u64,
}

impl EventLog {
    pub fn new(capacity: usize) -> Self {
        EventLog {
            ring: Mutex::new(Ring { events: VecDeque::new(), capacity: capacity.max(1), first: 0 }),
            pushed: watch::channel(0).0,
            ids: XidGenerator::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh id, for an actor (a reboot, an apply) whose events will carry it.
    pub fn new_id(&self) -> String {
        self.ids.next(SystemTime::now())
    }

    /// Records an event; returns its id.
    pub fn publish(&self, type_url: &str, payload: Vec<u8>, actor_id: &str) -> String {
        let at = SystemTime::now();
        let id = self.ids.next(at);
        let mut ring = self.lock();
        ring.events.push_back(Event {
            id: id.clone(),
            type_url: type_url.to_string(),
            payload,
            actor_id: actor_id.to_string(),
            at,
        });
        if ring.events.len() > ring.capacity {
            ring.events.pop_front();
            ring.first += 1;
        }
        let next = ring.first + ring.events.len() as u64;
        drop(ring);
        self.pushed.send_replace(next);
        id
    }

    /// The events `tail` asks for, and the sequence number to follow from.
    pub fn start(&self, tail: &Tail) -> (Vec<Event>, u64) {
        let ring = self.lock();
        let next = ring.first + ring.events.len() as u64;
        let events: Vec<Event> = if let Some(id) = &tail.after_id {
            // Ids sort by time, so everything greater came after.
            ring.events.iter().filter(|e| e.id.as_str() > id.as_str()).cloned().collect()
        } else if tail.seconds > 0 {
            let since = SystemTime::now() - std::time::Duration::from_secs(tail.seconds as u64);
            ring.events.iter().filter(|e| e.at >= since).cloned().collect()
        } else if tail.events < 0 {
            ring.events.iter().cloned().collect()
        } else {
            let skip = ring.events.len().saturating_sub(tail.events as usize);
            ring.events.iter().skip(skip).cloned().collect()
        };
        (events, next)
    }

    /// Events from sequence number `from` on, and the next number.
    pub fn since(&self, from: u64) -> (Vec<Event>, u64) {
        let ring = self.lock();
        let skip = from.saturating_sub(ring.first) as usize;
        (ring.events.iter().skip(skip).cloned().collect(), ring.first + ring.events.len() as u64)
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.pushed.subscribe()
    }
}

/// xid ids: 4 bytes of seconds, 3 of machine, 2 of process, 3 of counter.
struct XidGenerator {
    machine: [u8; 3],
    pid: u16,
    counter: AtomicU32,
}

impl XidGenerator {
    fn new() -> Self {
        let seed = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let digest = <sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes());
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        XidGenerator {
            machine: [digest[0], digest[1], digest[2]],
            pid: std::process::id() as u16,
            counter: AtomicU32::new(nanos & 0x00ff_ffff),
        }
    }

    fn next(&self, at: SystemTime) -> String {
        let secs = at.duration_since(UNIX_EPOCH).map(|d| d.as_secs() as u32).unwrap_or(0);
        let n = self.counter.fetch_add(1, Ordering::SeqCst) & 0x00ff_ffff;
        let mut raw = [0u8; 12];
        raw[..4].copy_from_slice(&secs.to_be_bytes());
        raw[4..7].copy_from_slice(&self.machine);
        raw[7..9].copy_from_slice(&self.pid.to_be_bytes());
        raw[9..].copy_from_slice(&n.to_be_bytes()[1..]);
        encode_xid(&raw)
    }
}

/// base32hex, lower case, no padding: 12 bytes → 20 characters.
fn encode_xid(raw: &[u8; 12]) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let mut out = String::with_capacity(20);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for &b in raw {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((acc >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (5 - bits)) & 31) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xids_are_twenty_characters_and_sort_by_time() {
        // base32hex of all-zero and all-one bytes; the last character carries 4 padding bits.
        assert_eq!(encode_xid(&[0; 12]), "00000000000000000000");
        assert_eq!(encode_xid(&[0xff; 12]), "vvvvvvvvvvvvvvvvvvvg");
        let g = XidGenerator::new();
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let a = g.next(t);
        let b = g.next(t);
        let c = g.next(t + std::time::Duration::from_secs(1));
        assert_eq!(a.len(), 20);
        assert!(a < b && b < c, "{a} {b} {c}");
    }

    #[test]
    fn tails_by_count_id_and_follow() {
        let log = EventLog::new(3);
        let ids: Vec<String> = (0..5).map(|i| log.publish("t", vec![i], "")).collect();
        let (all, next) = log.start(&Tail { events: -1, ..Default::default() });
        assert_eq!(all.iter().map(|e| e.payload[0]).collect::<Vec<_>>(), vec![2, 3, 4], "bounded ring");
        assert_eq!(next, 5);
        let (last, _) = log.start(&Tail { events: 1, ..Default::default() });
        assert_eq!(last[0].payload, vec![4]);
        let (none, _) = log.start(&Tail::default());
        assert!(none.is_empty(), "tail 0 starts at the end");
        let (after, _) = log.start(&Tail { after_id: Some(ids[2].clone()), ..Default::default() });
        assert_eq!(after.iter().map(|e| e.payload[0]).collect::<Vec<_>>(), vec![3, 4]);
        log.publish("t", vec![5], "actor");
        let (new, next) = log.since(next);
        assert_eq!((new.len(), new[0].actor_id.as_str(), next), (1, "actor", 6));
    }
}

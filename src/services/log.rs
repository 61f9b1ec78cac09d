//! A bounded in-memory log per service: the last lines it wrote, at most a fixed number of
//! bytes. Old lines fall off the front; a line longer than the whole ring is cut. Never
//! grows without bound, never blocks the writer. Followers (`talosctl logs -f`) read by line
//! number: every line gets the next number, and a follower asks for what came after the last
//! one it saw, waking on a watch channel.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

#[derive(Debug)]
struct Ring {
    lines: VecDeque<String>,
    bytes: usize,
    capacity: usize,
    dropped: u64,
}

impl Ring {
    /// The number the next pushed line will get.
    fn next_seq(&self) -> u64 {
        self.dropped + self.lines.len() as u64
    }
}

/// Cheap to clone; clones share the same ring.
#[derive(Debug, Clone)]
pub struct LogRing {
    inner: Arc<Mutex<Ring>>,
    pushed: Arc<watch::Sender<u64>>,
}

impl LogRing {
    /// A ring holding at most `capacity` bytes of line text.
    pub fn new(capacity: usize) -> Self {
        LogRing {
            inner: Arc::new(Mutex::new(Ring { lines: VecDeque::new(), bytes: 0, capacity, dropped: 0 })),
            pushed: Arc::new(watch::channel(0).0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one line (without its newline).
    pub fn push(&self, line: &[u8]) {
        let mut ring = self.lock();
        let capacity = ring.capacity;
        let mut text = String::from_utf8_lossy(line).into_owned();
        if text.len() > capacity {
            let mut cut = capacity;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        ring.bytes += text.len();
        ring.lines.push_back(text);
        while ring.bytes > capacity {
            match ring.lines.pop_front() {
                Some(old) => {
                    ring.bytes -= old.len();
                    ring.dropped += 1;
                }
                None => break,
            }
        }
        let next = ring.next_seq();
        drop(ring);
        self.pushed.send_replace(next);
    }

    /// The last `n` lines held (all if `None`), and the number of the line that comes next.
    pub fn tail(&self, n: Option<usize>) -> (Vec<String>, u64) {
        let ring = self.lock();
        let skip = n.map_or(0, |n| ring.lines.len().saturating_sub(n));
        (ring.lines.iter().skip(skip).cloned().collect(), ring.next_seq())
    }

    /// The lines numbered `from` and later that are still held, and the next number. Lines
    /// that fell off before they were read are skipped.
    pub fn since(&self, from: u64) -> (Vec<String>, u64) {
        let ring = self.lock();
        let skip = from.saturating_sub(ring.dropped) as usize;
        (ring.lines.iter().skip(skip).cloned().collect(), ring.next_seq())
    }

    /// A receiver that changes after every push (its value: the next line number).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.pushed.subscribe()
    }

    /// The lines held now, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.lock().lines.iter().cloned().collect()
    }

    /// Bytes of line text held now (never more than the capacity).
    pub fn len_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// How many lines fell off the front so far.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_lines_within_capacity() {
        let ring = LogRing::new(10);
        for line in ["aaaa", "bbbb", "cccc"] {
            ring.push(line.as_bytes());
        }
        assert_eq!(ring.lines(), vec!["bbbb", "cccc"]);
        assert_eq!(ring.len_bytes(), 8);
        assert_eq!(ring.dropped(), 1);
    }

    #[test]
    fn cuts_a_line_longer_than_the_ring() {
        let ring = LogRing::new(4);
        ring.push("é-long-line".as_bytes());
        assert_eq!(ring.lines(), vec!["é-l"]);
        assert!(ring.len_bytes() <= 4);
    }

    #[test]
    fn invalid_utf8_is_kept_lossily() {
        let ring = LogRing::new(64);
        ring.push(b"ok \xff end");
        assert_eq!(ring.lines(), vec!["ok \u{fffd} end"]);
    }

    #[tokio::test]
    async fn followers_read_what_came_after() {
        let ring = LogRing::new(1024);
        ring.push(b"one");
        ring.push(b"two");
        let (lines, next) = ring.tail(Some(1));
        assert_eq!((lines, next), (vec!["two".to_string()], 2));
        let mut rx = ring.subscribe();
        rx.borrow_and_update();
        let writer = ring.clone();
        tokio::spawn(async move { writer.push(b"three") });
        rx.changed().await.unwrap();
        assert_eq!(ring.since(next), (vec!["three".to_string()], 3));
        // Lines that fell off are skipped, not repeated.
        let small = LogRing::new(8);
        for l in ["aaaa", "bbbb", "cccc"] {
            small.push(l.as_bytes());
        }
        assert_eq!(small.since(0), (vec!["bbbb".to_string(), "cccc".to_string()], 3));
    }
}

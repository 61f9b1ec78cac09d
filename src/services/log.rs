//! A bounded in-memory log per service: the last lines it wrote, at most a fixed number of
//! bytes. Old lines fall off the front; a line longer than the whole ring is cut. Never
//! grows without bound, never blocks the writer.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

#[derive(Debug)]
struct Ring {
    lines: VecDeque<String>,
    bytes: usize,
    capacity: usize,
    dropped: u64,
}

/// Cheap to clone; clones share the same ring.
#[derive(Debug, Clone)]
pub struct LogRing {
    inner: Arc<Mutex<Ring>>,
}

impl LogRing {
    /// A ring holding at most `capacity` bytes of line text.
    pub fn new(capacity: usize) -> Self {
        LogRing { inner: Arc::new(Mutex::new(Ring { lines: VecDeque::new(), bytes: 0, capacity, dropped: 0 })) }
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
}

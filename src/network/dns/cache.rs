//! The forwarder's answer cache: upstream answers by (name, type, class), each kept for the
//! smallest TTL of its records (capped as Talos's cache caps them: an hour for an answer, ten
//! seconds for a negative one) and handed out with its TTLs aged by the time it has been
//! held. Failures, truncated answers and answers without records are never kept. Pure: the
//! clock comes in as an argument.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::message::{self, Message, Question, RCODE_NOERROR, RCODE_NXDOMAIN};

/// The longest an answer is kept.
pub const MAX_TTL: u32 = 3600;
/// The longest a negative answer (no such name, or no records of the type) is kept.
pub const MAX_NEGATIVE_TTL: u32 = 10;
/// Entries kept at most; past it, expired ones are dropped and new answers are not kept.
pub const CAPACITY: usize = 10_000;

#[derive(Debug)]
struct Entry {
    bytes: Vec<u8>,
    ttls: Vec<(usize, u32)>,
    stored: Instant,
    ttl: u32,
}

#[derive(Debug, Default)]
pub struct Cache {
    entries: HashMap<Question, Entry>,
}

/// How long `response` may be kept; `None`: not at all.
pub fn keep_for(response: &Message) -> Option<u32> {
    if response.truncated() || !matches!(response.rcode(), RCODE_NOERROR | RCODE_NXDOMAIN) {
        return None;
    }
    let ttl = response.min_ttl()?;
    let negative = response.rcode() == RCODE_NXDOMAIN || response.answers == 0;
    let ttl = ttl.min(if negative { MAX_NEGATIVE_TTL } else { MAX_TTL });
    (ttl > 0).then_some(ttl)
}

impl Cache {
    pub fn new() -> Self {
        Cache::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The kept answer to `question` with its TTLs aged to `now`, under message ID `id`.
    pub fn get(&mut self, question: &Question, id: u16, now: Instant) -> Option<Vec<u8>> {
        let entry = self.entries.get(question)?;
        let elapsed = now.saturating_duration_since(entry.stored);
        if elapsed >= Duration::from_secs(u64::from(entry.ttl)) {
            self.entries.remove(question);
            return None;
        }
        let mut bytes = entry.bytes.clone();
        message::set_id(&mut bytes, id);
        message::age_ttls(&mut bytes, &entry.ttls, u32::try_from(elapsed.as_secs()).unwrap_or(u32::MAX));
        Some(bytes)
    }

    /// Keeps `bytes`, the upstream's answer parsed as `response`, if it may be kept.
    pub fn put(&mut self, bytes: &[u8], response: &Message, now: Instant) {
        let Some(ttl) = keep_for(response) else { return };
        if self.entries.len() >= CAPACITY {
            self.entries.retain(|_, e| now.saturating_duration_since(e.stored) < Duration::from_secs(u64::from(e.ttl)));
            if self.entries.len() >= CAPACITY {
                return;
            }
        }
        let entry = Entry { bytes: bytes.to_vec(), ttls: response.ttls.clone(), stored: now, ttl };
        self.entries.insert(response.question.clone(), entry);
    }

    /// Forgets everything (the upstreams changed).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::dns::message::{build_query, parse};

    /// An answer for `name` with one A record of `ttl` (or none), and `rcode`.
    fn answer(name: &str, ttl: Option<u32>, rcode: u8, tc: bool) -> Vec<u8> {
        let mut m = build_query(1, name, 1);
        let flags: u16 = 0x8180 | u16::from(rcode) | if tc { 0x0200 } else { 0 };
        m[2..4].copy_from_slice(&flags.to_be_bytes());
        if let Some(ttl) = ttl {
            m[6..8].copy_from_slice(&1u16.to_be_bytes());
            m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
            m.extend_from_slice(&ttl.to_be_bytes());
            m.extend_from_slice(&[0, 4, 10, 1, 2, 3]);
        }
        m
    }

    #[test]
    fn what_is_kept_and_for_how_long() {
        let cases = [
            (Some(300), RCODE_NOERROR, false, Some(300)),
            (Some(86_400), RCODE_NOERROR, false, Some(MAX_TTL)),
            (Some(0), RCODE_NOERROR, false, None),
            (None, RCODE_NOERROR, false, None),
            (Some(300), 2, false, None),
            (Some(300), 5, false, None),
            (Some(300), RCODE_NOERROR, true, None),
            (Some(300), RCODE_NXDOMAIN, false, Some(MAX_NEGATIVE_TTL)),
        ];
        for (ttl, rcode, tc, want) in cases {
            let bytes = answer("a.test", ttl, rcode, tc);
            assert_eq!(keep_for(&parse(&bytes).unwrap()), want, "ttl {ttl:?} rcode {rcode} tc {tc}");
        }
    }

    #[test]
    fn answers_age_and_expire() {
        let mut cache = Cache::new();
        let t0 = Instant::now();
        let bytes = answer("A.test", Some(60), RCODE_NOERROR, false);
        cache.put(&bytes, &parse(&bytes).unwrap(), t0);
        let q = parse(&build_query(9, "a.TEST", 1)).unwrap().question;
        let hit = cache.get(&q, 0x0909, t0 + Duration::from_secs(20)).expect("kept");
        let hit = parse(&hit).unwrap();
        assert_eq!((hit.id, hit.min_ttl()), (0x0909, Some(40)), "the asker's ID; the TTL aged");
        let other_type = Question { qtype: 28, ..q.clone() };
        assert!(cache.get(&other_type, 1, t0).is_none(), "keyed by type too");
        assert!(cache.get(&q, 1, t0 + Duration::from_secs(60)).is_none(), "expired at its TTL");
        assert!(cache.is_empty(), "and dropped");
        cache.put(&bytes, &parse(&bytes).unwrap(), t0);
        cache.clear();
        assert!(cache.get(&q, 1, t0).is_none());
    }
}

//! Exponential back-off: the one policy for restarting a failing controller, retrying a
//! failing key, restarting an event source and restarting a service.

use std::time::Duration;

/// Waits `initial` first, doubling after each failure up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(10) }
    }
}

impl Backoff {
    /// The wait after one that lasted `current` (`None`: the first failure).
    pub fn next(&self, current: Option<Duration>) -> Duration {
        match current {
            None => self.initial.min(self.max),
            Some(d) => d.saturating_mul(2).clamp(self.initial.min(self.max), self.max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_max() {
        let b = Backoff { initial: Duration::from_millis(100), max: Duration::from_millis(350) };
        let mut d = None;
        let mut seen = Vec::new();
        for _ in 0..5 {
            let next = b.next(d);
            seen.push(next.as_millis());
            d = Some(next);
        }
        assert_eq!(seen, [100, 200, 350, 350, 350]);
    }
}

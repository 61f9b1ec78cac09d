//! The wall clock as the time sync client sees it: read it, and adjust it by an offset.
//! Behind a trait so that tests hand in a clock of their own and never move the host's.
//!
//! The system clock steps with `clock_settime(CLOCK_REALTIME)`. Slewing needs `adjtimex`,
//! which rustix does not offer: until it is reached, a small offset is stepped too (it is
//! under the slew limit, so the jump is a fraction of a second).

use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What to do to the clock for an offset (the time sync client decides which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    /// Move the clock gradually by this many nanoseconds.
    Slew(i128),
    /// Set the clock forward (or back) by this many nanoseconds at once.
    Step(i128),
}

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> SystemTime;
    /// Moves the clock by the adjustment's offset.
    fn adjust(&self, adjustment: Adjustment) -> io::Result<()>;
}

/// `now` moved by `offset_nanos`.
pub fn shifted(now: SystemTime, offset_nanos: i128) -> SystemTime {
    let by = Duration::from_nanos(u64::try_from(offset_nanos.unsigned_abs()).unwrap_or(u64::MAX));
    if offset_nanos >= 0 { now + by } else { now.checked_sub(by).filter(|t| *t >= UNIX_EPOCH).unwrap_or(UNIX_EPOCH) }
}

/// The node's real-time clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn adjust(&self, adjustment: Adjustment) -> io::Result<()> {
        let (Adjustment::Slew(offset) | Adjustment::Step(offset)) = adjustment;
        let target = shifted(SystemTime::now(), offset).duration_since(UNIX_EPOCH).unwrap_or_default();
        let spec = rustix::time::Timespec {
            tv_sec: i64::try_from(target.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: target.subsec_nanos().into(),
        };
        rustix::time::clock_settime(rustix::time::ClockId::Realtime, spec).map_err(io::Error::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifting() {
        let t = UNIX_EPOCH + Duration::from_secs(100);
        assert_eq!(shifted(t, 1_500_000_000), UNIX_EPOCH + Duration::from_millis(101_500));
        assert_eq!(shifted(t, -1_000_000_000), UNIX_EPOCH + Duration::from_secs(99));
        assert_eq!(shifted(t, -1_000_000_000_000), UNIX_EPOCH, "never before the epoch");
    }
}

//! SNTP (RFC 4330): the client's request, the checks a server's reply must pass, the clock
//! offset and round-trip delay from the four timestamps, and the decisions Talos's NTP
//! syncer makes with them (slew or step, epoch change, next poll interval). Pure: timestamps
//! come in as arguments, nothing here opens a socket or touches the clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The NTP port.
pub const PORT: u16 = 123;
pub const PACKET_LEN: usize = 48;
/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const UNIX_OFFSET: u64 = 2_208_988_800;

/// Talos's poll bounds and retry interval.
pub const MIN_POLL: Duration = Duration::from_secs(32);
pub const MAX_POLL: Duration = Duration::from_secs(2048);
pub const RETRY_POLL: Duration = Duration::from_secs(1);
/// Offsets up to this are slewed; larger ones stepped (Talos's `AdjustTimeLimit`).
pub const ADJUST_TIME_LIMIT: Duration = Duration::from_millis(400);
/// A step larger than this starts a new time epoch (Talos's `EpochLimit`).
pub const EPOCH_LIMIT: Duration = Duration::from_secs(15 * 60);
/// The accuracy the poll interval aims at (Talos's `ExpectedAccuracy`).
pub const EXPECTED_ACCURACY: Duration = Duration::from_millis(200);

const MODE_CLIENT: u8 = 3;
const MODE_SERVER: u8 = 4;
const VERSION: u8 = 4;
const LEAP_ALARM: u8 = 3;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SntpError {
    #[error("SNTP reply of {len} bytes; at least 48 expected")]
    Short { len: usize },
    #[error("SNTP reply in mode {mode}, not from a server")]
    NotServer { mode: u8 },
    #[error("SNTP reply of version {version}")]
    Version { version: u8 },
    #[error("SNTP kiss-o'-death {code:?}")]
    KissOfDeath { code: String },
    #[error("SNTP server is not synchronized (stratum {stratum}, leap {leap})")]
    Unsynchronized { stratum: u8, leap: u8 },
    #[error("SNTP reply does not answer our request")]
    NotOurs,
}

/// An NTP timestamp: seconds since 1900 in the high 32 bits, the fraction in the low.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn from_system(t: SystemTime) -> Timestamp {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = (since.as_secs() + UNIX_OFFSET) & 0xffff_ffff;
        let frac = (u64::from(since.subsec_nanos()) << 32) / 1_000_000_000;
        Timestamp((secs << 32) | frac)
    }

    pub fn to_system(self) -> SystemTime {
        let secs = (self.0 >> 32).wrapping_sub(UNIX_OFFSET) & 0xffff_ffff;
        let nanos = ((self.0 & 0xffff_ffff) * 1_000_000_000) >> 32;
        UNIX_EPOCH + Duration::new(secs, nanos as u32)
    }

    /// Nanoseconds since the NTP epoch.
    fn nanos(self) -> i128 {
        let secs = i128::from(self.0 >> 32);
        let frac = i128::from(self.0 & 0xffff_ffff);
        secs * 1_000_000_000 + ((frac * 1_000_000_000) >> 32)
    }
}

/// A client request whose transmit timestamp is `t1` (the server echoes it back as the
/// originate timestamp, which is how a reply is matched to its request).
pub fn request(t1: Timestamp) -> [u8; PACKET_LEN] {
    let mut p = [0u8; PACKET_LEN];
    p[0] = (VERSION << 3) | MODE_CLIENT;
    p[40..48].copy_from_slice(&t1.0.to_be_bytes());
    p
}

/// What a valid server reply says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub leap: u8,
    pub stratum: u8,
    /// T2: when the server received the request.
    pub receive: Timestamp,
    /// T3: when the server sent the reply.
    pub transmit: Timestamp,
}

fn ts(p: &[u8], at: usize) -> Timestamp {
    let mut b = [0u8; 8];
    b.copy_from_slice(&p[at..at + 8]);
    Timestamp(u64::from_be_bytes(b))
}

/// Checks a reply to the request sent at `t1` (RFC 4330 section 5).
pub fn parse_reply(p: &[u8], t1: Timestamp) -> Result<Reply, SntpError> {
    if p.len() < PACKET_LEN {
        return Err(SntpError::Short { len: p.len() });
    }
    let (leap, version, mode, stratum) = (p[0] >> 6, (p[0] >> 3) & 7, p[0] & 7, p[1]);
    if mode != MODE_SERVER {
        return Err(SntpError::NotServer { mode });
    }
    if !(3..=4).contains(&version) {
        return Err(SntpError::Version { version });
    }
    if stratum == 0 {
        return Err(SntpError::KissOfDeath { code: String::from_utf8_lossy(&p[12..16]).into_owned() });
    }
    if leap == LEAP_ALARM || stratum > 15 {
        return Err(SntpError::Unsynchronized { stratum, leap });
    }
    let (originate, receive, transmit) = (ts(p, 24), ts(p, 32), ts(p, 40));
    if originate != t1 || transmit.0 == 0 {
        return Err(SntpError::NotOurs);
    }
    Ok(Reply { leap, stratum, receive, transmit })
}

/// A measurement: how far the local clock is behind the server (positive: local is slow),
/// and the round trip, both in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measurement {
    pub offset_nanos: i128,
    pub delay_nanos: i128,
}

/// offset = ((T2 − T1) + (T3 − T4)) / 2, delay = (T4 − T1) − (T3 − T2).
pub fn measure(t1: Timestamp, reply: &Reply, t4: Timestamp) -> Measurement {
    let (t1, t2, t3, t4) = (t1.nanos(), reply.receive.nanos(), reply.transmit.nanos(), t4.nanos());
    Measurement { offset_nanos: ((t2 - t1) + (t3 - t4)) / 2, delay_nanos: (t4 - t1) - (t3 - t2) }
}

/// What to do to the clock for an offset.
pub use crate::kernel::clock::Adjustment;

pub fn adjustment(offset_nanos: i128) -> Adjustment {
    if offset_nanos.unsigned_abs() > ADJUST_TIME_LIMIT.as_nanos() {
        Adjustment::Step(offset_nanos)
    } else {
        Adjustment::Slew(offset_nanos)
    }
}

/// Whether an applied offset starts a new time epoch (certificates are re-checked).
pub fn epoch_change(offset_nanos: i128) -> bool {
    offset_nanos.unsigned_abs() > EPOCH_LIMIT.as_nanos()
}

/// The outcome of one poll, for the next interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// A usable measurement with this offset.
    Offset(i128),
    /// A server said to go away (kiss-o'-death).
    KissOfDeath,
    /// No answer (network, timeout, invalid reply).
    Failed,
}

/// Talos's poll interval rule: retry soon after a failure, back off on kiss-o'-death, start
/// at the minimum, double while well within the expected accuracy, halve when near it, back
/// to the minimum when outside it; always within the bounds once a server answered.
pub fn next_poll(current: Duration, outcome: Poll, min: Duration, max: Duration, retry: Duration) -> Duration {
    let next = match outcome {
        Poll::Failed => return retry,
        Poll::KissOfDeath if current < min => min,
        Poll::KissOfDeath if current < max => current * 2,
        Poll::KissOfDeath => current,
        Poll::Offset(_) if current.is_zero() => min,
        Poll::Offset(o) if o.unsigned_abs() > EXPECTED_ACCURACY.as_nanos() => min,
        Poll::Offset(o) if o.unsigned_abs() < EXPECTED_ACCURACY.as_nanos() / 4 && current < max => current * 2,
        Poll::Offset(o) if o.unsigned_abs() > EXPECTED_ACCURACY.as_nanos() * 3 / 4 && current > min => current / 2,
        Poll::Offset(_) => current,
    };
    next.clamp(min, max)
}

/// A server's reply to `request` as a stand-in server would make it: stratum 2, receive and
/// transmit at `now`. For tests and the test peer.
pub fn serve(request: &[u8], now: Timestamp) -> Option<[u8; PACKET_LEN]> {
    if request.len() < PACKET_LEN || request[0] & 7 != MODE_CLIENT {
        return None;
    }
    let mut p = [0u8; PACKET_LEN];
    p[0] = (VERSION << 3) | MODE_SERVER;
    p[1] = 2;
    p[2] = request[2];
    p[3] = 0xec;
    p[12..16].copy_from_slice(b"TEST");
    p[24..32].copy_from_slice(&request[40..48]);
    p[32..40].copy_from_slice(&now.0.to_be_bytes());
    p[40..48].copy_from_slice(&now.0.to_be_bytes());
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i128 = 1_000_000_000;

    #[test]
    fn timestamps_round_trip() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 250_000_000);
        let ntp = Timestamp::from_system(t);
        assert_eq!(ntp.0 >> 32, 1_700_000_000 + UNIX_OFFSET);
        assert_eq!(ntp.0 & 0xffff_ffff, 1 << 30, "a quarter second");
        let back = ntp.to_system().duration_since(t).unwrap_or_else(|e| e.duration());
        assert!(back < Duration::from_nanos(2), "round trip within a nanosecond: {back:?}");
    }

    #[test]
    fn offset_and_delay_as_rfc_4330() {
        // The local clock is 10 s behind; 20 ms each way; the server takes 1 ms.
        let at = |s: f64| Timestamp::from_system(UNIX_EPOCH + Duration::from_secs_f64(1_700_000_000.0 + s));
        let t1 = at(0.0);
        let reply = Reply { leap: 0, stratum: 2, receive: at(10.020), transmit: at(10.021) };
        let m = measure(t1, &reply, at(0.041));
        assert!((m.offset_nanos - 10 * SEC).abs() < 1_000, "offset {}", m.offset_nanos);
        assert!((m.delay_nanos - 40_000_000).abs() < 1_000, "delay {}", m.delay_nanos);
    }

    #[test]
    fn replies_are_checked() {
        let t1 = Timestamp(0x1234_5678_9abc_def0);
        let good = serve(&request(t1), Timestamp(0x2000_0000_0000_0000)).unwrap();
        let reply = parse_reply(&good, t1).unwrap();
        assert_eq!((reply.stratum, reply.transmit), (2, Timestamp(0x2000_0000_0000_0000)));
        assert_eq!(parse_reply(&good[..40], t1), Err(SntpError::Short { len: 40 }));
        assert_eq!(parse_reply(&good, Timestamp(1)), Err(SntpError::NotOurs), "another request's reply");
        let mut kod = good;
        kod[1] = 0;
        kod[12..16].copy_from_slice(b"RATE");
        assert_eq!(parse_reply(&kod, t1), Err(SntpError::KissOfDeath { code: "RATE".into() }));
        let mut alarm = good;
        alarm[0] |= 0xc0;
        assert!(matches!(parse_reply(&alarm, t1), Err(SntpError::Unsynchronized { .. })));
        let mut client = good;
        client[0] = (4 << 3) | 3;
        assert_eq!(parse_reply(&client, t1), Err(SntpError::NotServer { mode: 3 }));
        assert!(serve(&good, t1).is_none(), "the stand-in answers clients only");
    }

    #[test]
    fn adjustments_and_epochs() {
        assert_eq!(adjustment(100_000_000), Adjustment::Slew(100_000_000));
        assert_eq!(adjustment(-400_000_000), Adjustment::Slew(-400_000_000), "the limit itself slews");
        assert_eq!(adjustment(-400_000_001), Adjustment::Step(-400_000_001));
        assert!(!epoch_change(900 * SEC));
        assert!(epoch_change(-901 * SEC));
    }

    #[test]
    fn poll_table() {
        let s = Duration::from_secs;
        let next = |cur, outcome| next_poll(cur, outcome, MIN_POLL, MAX_POLL, RETRY_POLL);
        let ms = |m: i128| Poll::Offset(m * 1_000_000);
        let cases = [
            (s(0), Poll::Failed, s(1)),
            (s(64), Poll::Failed, s(1)),
            (s(0), ms(5), s(32)),
            (s(32), ms(10), s(64)),
            (s(2048), ms(10), s(2048)),
            (s(128), ms(100), s(128)),
            (s(128), ms(160), s(64)),
            (s(32), ms(160), s(32)),
            (s(1024), ms(300), s(32)),
            (s(0), Poll::KissOfDeath, s(32)),
            (s(32), Poll::KissOfDeath, s(64)),
            (s(2048), Poll::KissOfDeath, s(2048)),
        ];
        for (cur, outcome, want) in cases {
            assert_eq!(next(cur, outcome), want, "from {cur:?} after {outcome:?}");
        }
    }
}

//! RFC 3339 timestamps in UTC, as COSI metadata carries them (`2024-01-10T11:20:45Z`), without
//! a calendar library. Sub-second digits are written only when there are any, so a time
//! round-trips exactly and whole seconds look as Talos prints them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `t` as RFC 3339 in UTC. Times before 1970 are written as the epoch.
pub fn format(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let nanos = since.subsec_nanos();
    if nanos == 0 {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    } else {
        let frac = format!("{nanos:09}");
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{}Z", frac.trim_end_matches('0'))
    }
}

/// Parses RFC 3339 (`Z` or a `±hh:mm` offset, optional fraction).
pub fn parse(text: &str) -> Result<SystemTime, String> {
    let bad = || format!("{text:?} is not an RFC 3339 timestamp");
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        text.get(r).filter(|s| s.bytes().all(|c| c.is_ascii_digit())).and_then(|s| s.parse().ok()).ok_or_else(bad)
    };
    let (year, month, day) = (num(0..4)?, num(5..7)? as u32, num(8..10)? as u32);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[16] != b':'
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(bad());
        }
        let padded = format!("{:0<9}", &frac[..digits]);
        nanos = padded.parse().map_err(|_| bad())?;
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(rest.as_bytes()[0], b'+' | b'-') && rest.as_bytes()[3] == b':' => {
            let hh: i64 = rest[1..3].parse().map_err(|_| bad())?;
            let mm: i64 = rest[4..6].parse().map_err(|_| bad())?;
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (hh * 3600 + mm * 60)
        }
        _ => return Err(bad()),
    };
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let secs = u64::try_from(secs).map_err(|_| format!("{text:?} is before 1970"))?;
    Ok(UNIX_EPOCH + Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        let cases = [
            (0, 0, "1970-01-01T00:00:00Z"),
            (951_782_400, 0, "2000-02-29T00:00:00Z"),
            (1_704_885_645, 0, "2024-01-10T11:20:45Z"),
            (1_704_885_645, 500_000_000, "2024-01-10T11:20:45.5Z"),
            (4_102_444_799, 123, "2099-12-31T23:59:59.000000123Z"),
        ];
        for (secs, nanos, text) in cases {
            let t = UNIX_EPOCH + Duration::new(secs, nanos);
            assert_eq!(format(t), text);
            assert_eq!(parse(text), Ok(t), "{text}");
        }
    }

    #[test]
    fn offsets_and_errors() {
        assert_eq!(parse("2024-01-10T12:20:45+01:00"), parse("2024-01-10T11:20:45Z"));
        assert_eq!(parse("2024-01-10T10:50:45-00:30"), parse("2024-01-10T11:20:45Z"));
        for bad in ["", "2024-01-10", "2024-13-10T00:00:00Z", "2024-01-10T11:20:45", "2024-01-10T11:20:45.Z", "x"] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}

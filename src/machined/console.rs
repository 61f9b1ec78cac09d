//! Console lines: `[talosbox] …` on standard output, which is the serial console when
//! machined is PID 1. Writing never fails loudly: a broken console must not take PID 1 down
//! (`println!` would panic).

use std::io::Write;

/// Writes `[talosbox] <message>` and a newline, ignoring errors.
pub fn line(message: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "[talosbox] {message}");
    let _ = out.flush();
}

/// Seconds since boot from `/proc/uptime`, with two decimals (`"3.41"`); `"?"` if unreadable.
pub fn uptime() -> String {
    std::fs::read_to_string("/proc/uptime").ok().and_then(|t| parse_uptime(&t)).unwrap_or_else(|| "?".to_string())
}

/// The first field of `/proc/uptime`, with two decimals.
pub fn parse_uptime(text: &str) -> Option<String> {
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some(format!("{secs:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_has_two_decimals() {
        assert_eq!(parse_uptime("12.345 40.00\n").as_deref(), Some("12.35"));
        assert_eq!(parse_uptime("7 1").as_deref(), Some("7.00"));
        assert_eq!(parse_uptime("").as_deref(), None);
        assert_eq!(parse_uptime("x y").as_deref(), None);
    }
}

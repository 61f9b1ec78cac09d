//! How a plain (unquoted) YAML scalar is read, with the resolution rules of the Go YAML library
//! Talos decodes with, so `mtu: 0x10`, `mode: 0644` or `x: 1_000` mean here what they mean on a
//! Talos node, and the float text Talos would write. Pure string functions; no allocation beyond
//! the result, no panics.

/// What a plain scalar's text denotes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Plain {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A date or date-time: kept as a string, but quoted on output like Talos does.
    Timestamp,
    Str,
}

pub(crate) fn resolve_plain(text: &str) -> Plain {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Plain::Null,
        "true" | "True" | "TRUE" => return Plain::Bool(true),
        "false" | "False" | "FALSE" => return Plain::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Plain::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Plain::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Plain::Float(f64::NAN),
        _ => {}
    }
    let Some(&first) = text.as_bytes().first() else {
        return Plain::Null;
    };
    if !(first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.') {
        return Plain::Str;
    }
    if is_timestamp(text) {
        return Plain::Timestamp;
    }
    let plain: String = text.chars().filter(|&c| c != '_').collect();
    if let Some(i) = parse_go_int(&plain) {
        return Plain::Int(i);
    }
    if is_yaml_float(&plain)
        && let Ok(f) = plain.parse::<f64>()
    {
        return Plain::Float(f);
    }
    Plain::Str
}

/// Go's `strconv.ParseInt(s, 0, 64)`: optional sign, then `0x`/`0o`/`0b` or a leading `0`
/// (octal), else decimal. Integers beyond i64 are not ints here (they become floats).
fn parse_go_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if neg {
        if magnitude == 1 << 63 { Some(i64::MIN) } else { i64::try_from(magnitude).ok().map(|m| -m) }
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'-' | b'+')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// `YYYY-M-D`, optionally followed by a time: the shapes the Go library reads as timestamps.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let run = |from: usize, min: usize, max: usize| -> Option<usize> {
        let n = b[from.min(b.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
        (n >= min && n <= max).then_some(from + n)
    };
    let Some(i) = run(0, 4, 4) else { return false };
    if b.get(i) != Some(&b'-') {
        return false;
    }
    let Some(i) = run(i + 1, 1, 2) else { return false };
    if b.get(i) != Some(&b'-') {
        return false;
    }
    let Some(i) = run(i + 1, 1, 2) else { return false };
    if i == b.len() {
        return true;
    }
    if !matches!(b[i], b'T' | b't' | b' ') {
        return false;
    }
    let Some(i) = run(i + 1, 1, 2) else { return false };
    if b.get(i) != Some(&b':') {
        return false;
    }
    let Some(i) = run(i + 1, 1, 2) else { return false };
    if b.get(i) != Some(&b':') {
        return false;
    }
    let Some(mut i) = run(i + 1, 1, 2) else { return false };
    if b.get(i) == Some(&b'.') {
        match run(i + 1, 1, 9) {
            Some(j) => i = j,
            None => return false,
        }
    }
    match &s[i..] {
        "" | "Z" => true,
        zone => {
            let z = zone.as_bytes();
            z.len() == 6
                && matches!(z[0], b'+' | b'-')
                && z[1].is_ascii_digit()
                && z[2].is_ascii_digit()
                && z[3] == b':'
                && z[4].is_ascii_digit()
                && z[5].is_ascii_digit()
        }
    }
}

/// The YAML 1.1 booleans the Go library still accepts in a boolean field (`yes`, `off`, ...).
pub(crate) fn yaml11_bool(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// Strings that are plain strings in YAML 1.2 but that older readers take for something else;
/// Talos writes them quoted.
pub(crate) fn needs_compat_quotes(s: &str) -> bool {
    yaml11_bool(s).is_some() || s == "<<" || is_base60_float(s)
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`
fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'-' | b'+')) {
        i += 1;
    }
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() && i - start < 2 {
            i += 1;
        }
        let group = &b[start..i];
        let ok = match group {
            [d] => d.is_ascii_digit(),
            [a, _] => (b'0'..=b'5').contains(a),
            _ => false,
        };
        if !ok {
            return false;
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
    }
    i == b.len()
}

/// A float as Go's `strconv.FormatFloat(f, 'g', -1, 64)` writes it, in YAML spelling for the
/// special values, and with `.0` added to integral values so they read back as floats.
pub(crate) fn format_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf".into() } else { "-.inf".into() };
    }
    // Rust's `{:e}` gives the shortest round-trip digits; Go's 'g' picks the layout from them.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let neg = if f.is_sign_negative() && f != 0.0 { "-" } else { "" };
    let out = if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let frac = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{neg}{first}{frac}e{sign}{:02}", exp.unsigned_abs())
    } else if exp < 0 {
        let zeros = "0".repeat(exp.unsigned_abs() as usize - 1);
        format!("{neg}0.{zeros}{digits}")
    } else {
        let int_len = exp as usize + 1;
        if digits.len() > int_len {
            format!("{neg}{}.{}", &digits[..int_len], &digits[int_len..])
        } else {
            let pad = "0".repeat(int_len - digits.len());
            format!("{neg}{digits}{pad}")
        }
    };
    if out.contains(['.', 'e']) { out } else { format!("{out}.0") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scalars_resolve_like_talos() {
        let cases: &[(&str, Plain)] = &[
            ("", Plain::Null),
            ("~", Plain::Null),
            ("null", Plain::Null),
            ("true", Plain::Bool(true)),
            ("False", Plain::Bool(false)),
            ("yes", Plain::Str),
            ("1500", Plain::Int(1500)),
            ("-7", Plain::Int(-7)),
            ("+7", Plain::Int(7)),
            ("0x1F", Plain::Int(31)),
            ("0o17", Plain::Int(15)),
            ("0b101", Plain::Int(5)),
            ("0644", Plain::Int(420)),
            ("1_000", Plain::Int(1000)),
            ("0", Plain::Int(0)),
            ("1.5", Plain::Float(1.5)),
            ("1e3", Plain::Float(1000.0)),
            (".5", Plain::Float(0.5)),
            ("08", Plain::Float(8.0)),
            ("2001-12-14", Plain::Timestamp),
            ("2001-12-14T21:59:43.10-05:00", Plain::Timestamp),
            ("10.5.0.2", Plain::Str),
            ("10.244.0.0/16", Plain::Str),
            ("1.2.3", Plain::Str),
            ("-", Plain::Str),
            ("v1alpha1", Plain::Str),
            ("168h0m0s", Plain::Str),
        ];
        for (text, want) in cases {
            assert_eq!(resolve_plain(text), *want, "{text:?}");
        }
        assert!(matches!(resolve_plain(".inf"), Plain::Float(f) if f.is_infinite()));
    }

    #[test]
    fn compat_quoting_covers_yaml11_values() {
        for s in ["yes", "No", "on", "OFF", "y", "<<", "1:20", "190:20:30.15"] {
            assert!(needs_compat_quotes(s), "{s}");
        }
        for s in ["yesno", "1:60", "a:1", "10:00x"] {
            assert!(!needs_compat_quotes(s), "{s}");
        }
    }

    #[test]
    fn floats_format_like_go() {
        let cases: &[(f64, &str)] = &[
            (1.5, "1.5"),
            (1.0, "1.0"),
            (100000.0, "100000.0"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.25, "-2.25"),
            (0.0, "0.0"),
            (f64::NAN, ".nan"),
            (f64::NEG_INFINITY, "-.inf"),
        ];
        for (f, want) in cases {
            assert_eq!(format_float(*f), *want, "{f}");
        }
    }
}

//! Config values to YAML text, laid out the way Talos writes configs (4-space indentation, lists
//! indented under their key, literal blocks for multi-line text, the same quoting), so a config
//! Talos generated renders back byte for byte and diffs against Talos output line up. Writing
//! only: it never fails and never reads.

use super::scalar::{Plain, format_float, needs_compat_quotes, resolve_plain};
use super::value::{Map, Value};

const INDENT: usize = 4;

/// One document in block style, ending with a newline.
pub(crate) fn document(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Map(m) if !m.is_empty() => write_map(&mut out, m, 0, false),
        Value::List(items) if !items.is_empty() => write_seq(&mut out, items, 0, false),
        other => {
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
    out
}

/// A value on one line, in flow style: `{a: 1, b: [x, y]}`.
pub(crate) fn flow(value: &Value) -> String {
    match value {
        Value::Map(m) => {
            let items: Vec<String> =
                m.iter().map(|(k, v)| format!("{}: {}", string(k, Context::FlowKey), flow(v))).collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::List(items) => {
            let items: Vec<String> = items.iter().map(flow).collect();
            format!("[{}]", items.join(", "))
        }
        Value::String(s) => string(s, Context::Flow),
        other => inline(other),
    }
}

/// The next indentation stop after `indent`.
fn next_stop(indent: usize) -> usize {
    INDENT * ((indent + INDENT) / INDENT)
}

fn pad(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn write_map(out: &mut String, map: &Map, indent: usize, inline_first: bool) {
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 || !inline_first {
            pad(out, indent);
        }
        out.push_str(&string(k, Context::Key));
        out.push(':');
        write_after_indicator(out, v, indent, false);
    }
}

fn write_seq(out: &mut String, items: &[Value], indent: usize, inline_first: bool) {
    for (i, v) in items.iter().enumerate() {
        if i > 0 || !inline_first {
            pad(out, indent);
        }
        out.push('-');
        write_after_indicator(out, v, indent, true);
    }
}

/// Writes a value after `key:` (at column `indent`) or after `-` (a list item at `indent`).
fn write_after_indicator(out: &mut String, v: &Value, indent: usize, in_seq: bool) {
    // Inside a list item, content lines up after "- "; elsewhere it moves to the next stop.
    let child = if in_seq { indent + 2 } else { next_stop(indent) };
    match v {
        Value::Map(m) if !m.is_empty() => {
            if in_seq {
                out.push(' ');
                write_map(out, m, child, true);
            } else {
                out.push('\n');
                write_map(out, m, child, false);
            }
        }
        Value::List(items) if !items.is_empty() => {
            if in_seq {
                out.push(' ');
                write_seq(out, items, child, true);
            } else {
                out.push('\n');
                write_seq(out, items, child, false);
            }
        }
        Value::String(s) if s.contains('\n') && literal_allowed(s) => {
            out.push(' ');
            write_literal(out, s, child, child - indent);
        }
        Value::String(s) => {
            out.push(' ');
            out.push_str(&string(s, Context::Block));
            out.push('\n');
        }
        other => {
            out.push(' ');
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

/// Non-string scalars and empty collections.
fn inline(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format_float(*f),
        Value::String(s) => string(s, Context::Flow),
        Value::Map(m) if m.is_empty() => "{}".into(),
        Value::List(items) if items.is_empty() => "[]".into(),
        other => flow(other),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Context {
    Block,
    Key,
    Flow,
    FlowKey,
}

/// A string scalar, plain when that reads back as the same string, quoted otherwise.
fn string(s: &str, cx: Context) -> String {
    let a = analyze(s);
    if s.contains('\n') || a.multiline {
        return double_quoted(s);
    }
    if needs_compat_quotes(s) {
        return if a.single_ok { single_quoted(s) } else { double_quoted(s) };
    }
    if resolve_plain(s) != Plain::Str {
        return double_quoted(s);
    }
    let plain_ok = match cx {
        Context::Block | Context::Key => a.block_plain_ok,
        Context::Flow | Context::FlowKey => a.flow_plain_ok,
    };
    if plain_ok {
        s.to_string()
    } else if a.single_ok {
        single_quoted(s)
    } else {
        double_quoted(s)
    }
}

struct Analysis {
    multiline: bool,
    flow_plain_ok: bool,
    block_plain_ok: bool,
    single_ok: bool,
    block_ok: bool,
}

fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_printable(c: char) -> bool {
    matches!(c, '\n' | '\u{20}'..='\u{7e}' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..='\u{10ffff}')
        && c != '\u{feff}'
}

/// Which styles can carry `s` unchanged, by the rules of the YAML emitter Talos uses.
fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            multiline: false,
            flow_plain_ok: false,
            block_plain_ok: true,
            single_ok: true,
            block_ok: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let (mut flow_ind, mut block_ind) = (false, false);
    if s.starts_with("---") || s.starts_with("...") {
        flow_ind = true;
        block_ind = true;
    }
    let (mut breaks, mut special, mut tabs) = (false, false, false);
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) = (false, false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut prev_space, mut prev_break) = (false, false);
    let mut preceded_by_ws = true;
    for (i, &c) in chars.iter().enumerate() {
        let last = i + 1 == chars.len();
        let followed_by_ws = chars.get(i + 1).is_none_or(|&n| n == ' ' || n == '\t');
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"' | '%' | '@' | '`' => {
                    flow_ind = true;
                    block_ind = true;
                }
                '?' | ':' => {
                    flow_ind = true;
                    block_ind |= followed_by_ws;
                }
                '-' if followed_by_ws => {
                    flow_ind = true;
                    block_ind = true;
                }
                _ => {}
            }
        } else {
            match c {
                ',' | '?' | '[' | ']' | '{' | '}' => flow_ind = true,
                ':' => {
                    flow_ind = true;
                    block_ind |= followed_by_ws;
                }
                '#' if preceded_by_ws => {
                    flow_ind = true;
                    block_ind = true;
                }
                _ => {}
            }
        }
        if c == '\t' {
            tabs = true;
        } else if !is_printable(c) {
            special = true;
        }
        if c == ' ' {
            leading_space |= i == 0;
            trailing_space |= last;
            break_space |= prev_break;
            prev_space = true;
            prev_break = false;
        } else if is_break(c) {
            breaks = true;
            leading_break |= i == 0;
            trailing_break |= last;
            space_break |= prev_space;
            prev_space = false;
            prev_break = true;
        } else {
            prev_space = false;
            prev_break = false;
        }
        preceded_by_ws = c == ' ' || c == '\t' || is_break(c);
    }
    let mut a =
        Analysis { multiline: breaks, flow_plain_ok: true, block_plain_ok: true, single_ok: true, block_ok: true };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.flow_plain_ok = false;
        a.block_plain_ok = false;
    }
    if trailing_space {
        a.block_ok = false;
    }
    if break_space {
        a.flow_plain_ok = false;
        a.block_plain_ok = false;
        a.single_ok = false;
    }
    if space_break || tabs || special {
        a.flow_plain_ok = false;
        a.block_plain_ok = false;
        a.single_ok = false;
    }
    if space_break || special {
        a.block_ok = false;
    }
    if breaks {
        a.flow_plain_ok = false;
        a.block_plain_ok = false;
    }
    if flow_ind {
        a.flow_plain_ok = false;
    }
    if block_ind {
        a.block_plain_ok = false;
    }
    a
}

fn literal_allowed(s: &str) -> bool {
    s.chars().count() >= 2 && s.chars().any(|c| !c.is_whitespace()) && analyze(s).block_ok
}

/// A literal block whose lines sit at `indent`, `relative` columns in from its parent (the key
/// or the list dash), which is what an indentation indicator must say.
fn write_literal(out: &mut String, s: &str, indent: usize, relative: usize) {
    out.push('|');
    if s.starts_with(' ') || s.starts_with(is_break) {
        out.push_str(&relative.to_string());
    }
    let body = if !s.ends_with('\n') {
        out.push('-');
        format!("{s}\n")
    } else {
        if s == "\n" || s.ends_with("\n\n") {
            out.push('+');
        }
        s.to_string()
    };
    out.push('\n');
    for line in body.split_inclusive('\n') {
        if line != "\n" {
            pad(out, indent);
        }
        out.push_str(line);
    }
}

fn single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        let escape = !is_printable(c) || c == '\u{feff}' || is_break(c) || c == '"' || c == '\\';
        if !escape {
            out.push(c);
            continue;
        }
        match c {
            '\0' => out.push_str("\\0"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{b}' => out.push_str("\\v"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{1b}' => out.push_str("\\e"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{85}' => out.push_str("\\N"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if (c as u32) <= 0xff => out.push_str(&format!("\\x{:02X}", c as u32)),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push_str(&format!("\\U{:08X}", c as u32)),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_quoted_only_when_needed() {
        let cases: &[(&str, &str)] = &[
            ("foo", "foo"),
            ("", "\"\""),
            ("1500", "\"1500\""),
            ("true", "\"true\""),
            ("null", "\"null\""),
            ("2001-12-14", "\"2001-12-14\""),
            ("yes", "'yes'"),
            ("*.example.com", "'*.example.com'"),
            ("- x", "'- x'"),
            ("a: b", "'a: b'"),
            ("a #b", "'a #b'"),
            ("a#b", "a#b"),
            (" lead", "' lead'"),
            ("it's", "it's"),
            ("'q'", "'''q'''"),
            ("tab\there", "\"tab\\there\""),
            ("disk.dev_path == \"/dev/vda\"", "disk.dev_path == \"/dev/vda\""),
            ("https://base:6443", "https://base:6443"),
            ("10.0.0.1/24", "10.0.0.1/24"),
            ("[x]", "'[x]'"),
            ("a,b", "a,b"),
        ];
        for (s, want) in cases {
            assert_eq!(string(s, Context::Block), *want, "{s:?}");
        }
        assert_eq!(string("a,b", Context::Flow), "'a,b'");
    }

    #[test]
    fn layout_follows_talos() {
        let text = "a:\n    b: 1\n    c:\n        - x\n        - k: v\n          l:\n            - 1\n          m:\n            p: o\n    d: []\n    e: {}\n";
        let mut list_item = Map::new();
        list_item.insert("k", Value::String("v".into()));
        list_item.insert("l", Value::List(vec![Value::Int(1)]));
        let mut m = Map::new();
        m.insert("p", Value::String("o".into()));
        list_item.insert("m", Value::Map(m));
        let mut a = Map::new();
        a.insert("b", Value::Int(1));
        a.insert("c", Value::List(vec![Value::String("x".into()), Value::Map(list_item)]));
        a.insert("d", Value::List(vec![]));
        a.insert("e", Value::Map(Map::new()));
        let mut root = Map::new();
        root.insert("a", Value::Map(a));
        assert_eq!(document(&Value::Map(root)), text);
    }

    #[test]
    fn multi_line_strings_use_literal_blocks() {
        let mut m = Map::new();
        m.insert("clip", Value::String("x\ny\n".into()));
        m.insert("strip", Value::String("x\n\ny".into()));
        m.insert("keep", Value::String("x\n\n".into()));
        m.insert("trailing", Value::String("x \ny".into()));
        m.insert("list", Value::List(vec![Value::String("a\nb\n".into()), Value::String(" lead\n".into())]));
        m.insert("lead", Value::String("\ntail\n".into()));
        let want = "clip: |\n    x\n    y\nstrip: |-\n    x\n\n    y\nkeep: |+\n    x\n\n\
                    trailing: \"x \\ny\"\nlist:\n    - |\n      a\n      b\n    - |2\n       lead\nlead: |4\n\n    tail\n";
        assert_eq!(document(&Value::Map(m)), want);
    }

    #[test]
    fn flow_is_one_line() {
        let mut m = Map::new();
        m.insert("a", Value::List(vec![Value::Int(1), Value::String("x, y".into())]));
        m.insert("b", Value::Null);
        assert_eq!(flow(&Value::Map(m)), "{a: [1, 'x, y'], b: null}");
    }
}

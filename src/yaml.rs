//! YAML text in the block layout Talos's Go encoder writes: four-space indentation, a sequence
//! indented under its key, a mapping inside a sequence item starting on the dash's line, and
//! multi-line strings as literal blocks. The files talosbox writes in Talos's formats (secrets
//! bundles, talosconfig, generated machine configs) then read like Talos's and diff cleanly
//! against them; serde-saphyr's emitter lays nested sequences and literals in sequences out
//! differently. Parsing stays with serde-saphyr: [`Node`] deserializes from it with key order
//! kept, for callers that need a document's shape.
//!
//! It never reorders keys, and never writes anchors, tags, comments or flow collections other
//! than the empty `{}` and `[]`.

use std::fmt::Write as _;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// One YAML value. Mappings keep their keys in the order they were built or read.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
}

impl Node {
    /// A mapping from `(key, value)` pairs, in that order.
    pub fn map<K: Into<String>>(entries: impl IntoIterator<Item = (K, Node)>) -> Node {
        Node::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// A sequence of values.
    pub fn seq<T: Into<Node>>(items: impl IntoIterator<Item = T>) -> Node {
        Node::Seq(items.into_iter().map(Into::into).collect())
    }

    /// The value under `key` when this is a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string when this is a string scalar.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Every key path in document order: `machine.ca.crt`, a sequence item as `[0]`
    /// (`podSubnets[0]`). Two documents of the same shape have the same list.
    pub fn key_paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        collect_paths(self, "", &mut out);
        out
    }
}

fn collect_paths(node: &Node, prefix: &str, out: &mut Vec<String>) {
    match node {
        Node::Map(entries) => {
            for (k, v) in entries {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                out.push(path.clone());
                collect_paths(v, &path, out);
            }
        }
        Node::Seq(items) => {
            for (i, v) in items.iter().enumerate() {
                let path = format!("{prefix}[{i}]");
                out.push(path.clone());
                collect_paths(v, &path, out);
            }
        }
        _ => {}
    }
}

impl From<&str> for Node {
    fn from(s: &str) -> Self {
        Node::Str(s.to_owned())
    }
}

impl From<String> for Node {
    fn from(s: String) -> Self {
        Node::Str(s)
    }
}

impl From<&String> for Node {
    fn from(s: &String) -> Self {
        Node::Str(s.clone())
    }
}

impl From<bool> for Node {
    fn from(b: bool) -> Self {
        Node::Bool(b)
    }
}

impl From<i64> for Node {
    fn from(i: i64) -> Self {
        Node::Int(i)
    }
}

/// One document, ending in a newline.
pub fn to_string(doc: &Node) -> String {
    let mut out = String::new();
    emit_top(doc, &mut out);
    out
}

/// Several documents separated by `---` lines, as Talos writes a multi-document config.
pub fn to_string_multi(docs: &[Node]) -> String {
    let mut out = String::new();
    for (i, doc) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        emit_top(doc, &mut out);
    }
    out
}

fn emit_top(doc: &Node, out: &mut String) {
    match doc {
        Node::Map(entries) if !entries.is_empty() => emit_map(entries, 0, false, out),
        Node::Seq(items) if !items.is_empty() => emit_seq(items, 0, out),
        Node::Str(s) if s.contains('\n') && literal_ok(s) => emit_literal(s, 0, out),
        other => {
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

/// The Go encoder aligns every nested block to the next multiple of its indentation step,
/// except the first level inside a sequence item, which only skips the `- `.
fn child_indent(indent: usize) -> usize {
    4 * ((indent + 4) / 4)
}

/// Scalars and empty collections, written on the line they belong to.
fn inline(node: &Node) -> String {
    match node {
        Node::Null => "null".into(),
        Node::Bool(b) => b.to_string(),
        Node::Int(i) => i.to_string(),
        Node::Float(f) => format_float(*f),
        Node::Str(s) => scalar(s),
        Node::Map(_) => "{}".into(),
        Node::Seq(_) => "[]".into(),
    }
}

fn is_block(node: &Node) -> bool {
    match node {
        Node::Map(e) => !e.is_empty(),
        Node::Seq(i) => !i.is_empty(),
        Node::Str(s) => s.contains('\n') && literal_ok(s),
        _ => false,
    }
}

/// `first_inline`: the first key goes on the current line, right after a sequence dash.
fn emit_map(entries: &[(String, Node)], indent: usize, first_inline: bool, out: &mut String) {
    for (i, (key, value)) in entries.iter().enumerate() {
        if !(first_inline && i == 0) {
            pad(indent, out);
        }
        out.push_str(&scalar(key));
        out.push(':');
        match value {
            Node::Map(e) if !e.is_empty() => {
                out.push('\n');
                emit_map(e, child_indent(indent), false, out);
            }
            Node::Seq(items) if !items.is_empty() => {
                out.push('\n');
                emit_seq(items, child_indent(indent), out);
            }
            Node::Str(s) if is_block(value) => {
                out.push(' ');
                emit_literal(s, child_indent(indent), out);
            }
            other => {
                out.push(' ');
                out.push_str(&inline(other));
                out.push('\n');
            }
        }
    }
}

fn emit_seq(items: &[Node], indent: usize, out: &mut String) {
    for item in items {
        pad(indent, out);
        out.push_str("- ");
        match item {
            Node::Map(e) if !e.is_empty() => emit_map(e, indent + 2, true, out),
            Node::Seq(inner) if !inner.is_empty() => {
                // A sequence directly inside a sequence: its first dash shares the line.
                let mut nested = String::new();
                emit_seq(inner, indent + 2, &mut nested);
                out.push_str(nested.trim_start_matches(' '));
            }
            Node::Str(s) if is_block(item) => emit_literal(s, indent + 2, out),
            other => {
                out.push_str(&inline(other));
                out.push('\n');
            }
        }
    }
}

/// A literal block (`|`) whose header is already preceded by its key or dash.
fn emit_literal(s: &str, indent: usize, out: &mut String) {
    let body = s.trim_end_matches('\n');
    let trailing = s.len() - body.len();
    out.push_str(match trailing {
        0 => "|-",
        1 => "|",
        _ => "|+",
    });
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            pad(indent, out);
            out.push_str(line);
        }
        out.push('\n');
    }
    for _ in 1..trailing {
        out.push('\n');
    }
}

/// A literal block cannot start with a space (that would need an indentation indicator) nor
/// carry control characters; such strings are written double-quoted instead.
fn literal_ok(s: &str) -> bool {
    !s.starts_with(' ') && !s.chars().any(|c| c.is_control() && c != '\n')
}

fn pad(n: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn format_float(f: f64) -> String {
    if f.is_nan() {
        ".nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { ".inf".into() } else { "-.inf".into() }
    } else if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{f:.1}")
    } else {
        f.to_string()
    }
}

/// A string scalar: plain when it reads back as the same string, double-quoted otherwise.
fn scalar(s: &str) -> String {
    if plain_ok(s) { s.to_owned() } else { double_quoted(s) }
}

fn plain_ok(s: &str) -> bool {
    let Some(first) = s.chars().next() else { return false };
    if s.starts_with(' ') || s.ends_with(' ') || s.ends_with(':') {
        return false;
    }
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) {
        return false;
    }
    if s.contains(": ") || s.contains(" #") || s.chars().any(|c| c.is_control()) {
        return false;
    }
    !resolves_to_non_string(s)
}

/// Strings a YAML 1.1 or 1.2 reader would take for a boolean, null, number or timestamp.
fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &["true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"];
    let lower = s.to_ascii_lowercase();
    if WORDS.contains(&lower.as_str()) {
        return true;
    }
    let digits = lower.strip_prefix(['+', '-']).unwrap_or(&lower);
    if [".inf", ".nan"].contains(&digits) {
        return true;
    }
    if digits.starts_with("0x") || digits.starts_with("0o") {
        return true;
    }
    let numeric = digits.replace('_', "");
    if !numeric.is_empty() && numeric.parse::<f64>().is_ok() && numeric.chars().all(|c| !c.is_alphabetic() || c == 'e')
    {
        return true;
    }
    // 2001-12-14 and friends.
    let b = s.as_bytes();
    b.len() >= 8 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[5].is_ascii_digit()
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(i64::try_from(v).map(Node::Int).unwrap_or_else(|_| Node::Str(v.to_string())))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Node>()? {
            entries.push((k, v));
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Node {
        serde_saphyr::from_str(text).unwrap()
    }

    #[test]
    fn nested_sequences_and_literals_are_laid_out_like_talos() {
        // Cut from Talos's generated controlplane.yaml (KubeEtcdEncryptionConfig,
        // KubeAPIServerCAConfig) and worker.yaml (acceptedCAs).
        let want = "\
config:
    resources:
        - providers:
            - secretbox:
                keys:
                    - name: key2
                      secret: 45yd2Ke+sytiICojDf8aibTfgt99nzJmO53cjDqrCto=
          resources:
            - secrets
issuingCA:
    cert: |
        -----BEGIN CERTIFICATE-----
        MIIB
        -----END CERTIFICATE-----
acceptedCAs:
    - |
      -----BEGIN CERTIFICATE-----
      MIIB
      -----END CERTIFICATE-----
labels:
    node-role.kubernetes.io/control-plane: \"\"
nodeIP: {}
certSANs: []
persist: true
port: 7445
";
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let doc = Node::map([
            (
                "config",
                Node::map([(
                    "resources",
                    Node::seq([Node::map([
                        (
                            "providers",
                            Node::seq([Node::map([(
                                "secretbox",
                                Node::map([(
                                    "keys",
                                    Node::seq([Node::map([
                                        ("name", "key2".into()),
                                        ("secret", "45yd2Ke+sytiICojDf8aibTfgt99nzJmO53cjDqrCto=".into()),
                                    ])]),
                                )]),
                            )])]),
                        ),
                        ("resources", Node::seq(["secrets"])),
                    ])]),
                )]),
            ),
            ("issuingCA", Node::map([("cert", pem.into())])),
            ("acceptedCAs", Node::seq([pem])),
            ("labels", Node::map([("node-role.kubernetes.io/control-plane", "".into())])),
            ("nodeIP", Node::Map(vec![])),
            ("certSANs", Node::Seq(vec![])),
            ("persist", true.into()),
            ("port", 7445.into()),
        ]);
        assert_eq!(to_string(&doc), want);
        assert_eq!(parse(want), doc, "the text reads back as the same tree");
    }

    #[test]
    fn strings_that_would_read_back_as_something_else_are_quoted() {
        for (s, want) in [
            ("", "\"\""),
            ("true", "\"true\""),
            ("Yes", "\"Yes\""),
            ("null", "\"null\""),
            ("123", "\"123\""),
            ("1.5", "\"1.5\""),
            ("0x1f", "\"0x1f\""),
            ("2024-01-02", "\"2024-01-02\""),
            ("a: b", "\"a: b\""),
            ("#x", "\"#x\""),
            ("- x", "\"- x\""),
            (" lead", "\" lead\""),
            ("tab\there", "\"tab\\there\""),
            ("10.5.0.2", "10.5.0.2"),
            ("https://base:6443", "https://base:6443"),
            ("168h0m0s", "168h0m0s"),
            ("disk.dev_path == \"/dev/vda\"", "disk.dev_path == \"/dev/vda\""),
            ("inn7ol.u4ehnti8qyls9ymo", "inn7ol.u4ehnti8qyls9ymo"),
        ] {
            assert_eq!(scalar(s), want, "{s:?}");
            let doc = Node::map([("k", s.into())]);
            assert_eq!(parse(&to_string(&doc)), doc, "{s:?} reads back");
        }
    }

    #[test]
    fn literal_chomping_follows_trailing_newlines() {
        let doc = Node::map([("a", "x\ny".into()), ("b", "x\ny\n".into()), ("c", "x\n\ny\n\n".into())]);
        let text = to_string(&doc);
        assert_eq!(text, "a: |-\n    x\n    y\nb: |\n    x\n    y\nc: |+\n    x\n\n    y\n\n");
        assert_eq!(parse(&text), doc);
    }

    #[test]
    fn documents_are_separated_and_key_paths_listed_in_order() {
        let a = Node::map([("version", "v1alpha1".into()), ("machine", Node::map([("certSANs", Node::seq(["x"]))]))]);
        let b = Node::map([("kind", "HostnameConfig".into())]);
        let text = to_string_multi(&[a.clone(), b.clone()]);
        assert_eq!(text, "version: v1alpha1\nmachine:\n    certSANs:\n        - x\n---\nkind: HostnameConfig\n");
        let docs: Vec<Node> = serde_saphyr::from_multiple(&text).unwrap();
        assert_eq!(docs, vec![a.clone(), b]);
        assert_eq!(a.key_paths(), ["version", "machine", "machine.certSANs", "machine.certSANs[0]"]);
    }
}

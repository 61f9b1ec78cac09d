//! YAML text to raw document trees that remember where each node was written, built from the
//! event parser that ships with serde-saphyr. It knows YAML (documents, anchors and aliases,
//! merge keys, core tags, scalar styles) and nothing about config kinds. Whatever the input, it
//! must not panic and must not let aliases blow a small text up into a huge or deep tree.

use std::collections::{HashMap, HashSet};

use serde_saphyr::granit_parser::{Event, Options, Parser, ScalarStyle, Span, Tag};

use super::ConfigError;

/// Nodes a parse may build, aliases included: far above any real config, far below trouble.
const MAX_NODES: usize = 1_000_000;
/// Nesting the later passes (which recurse) may meet.
pub(crate) const MAX_DEPTH: usize = 256;

/// A 1-based source position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Mark {
    pub line: usize,
    pub column: usize,
}

impl Mark {
    fn of(span: &Span) -> Mark {
        Mark { line: span.start.line(), column: span.start.col() + 1 }
    }
}

/// How a scalar was written: plain text is resolved (to null, bool, number), the rest is text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    Plain,
    Quoted,
    Block,
}

#[derive(Debug, Clone)]
pub(crate) struct Scalar {
    pub text: String,
    pub style: Style,
    /// The core-schema tag (`str`, `int`, ...) when one was written.
    pub tag: Option<String>,
    pub mark: Mark,
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub key: String,
    pub key_mark: Mark,
    pub value: Node,
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Scalar(Scalar),
    List { items: Vec<Node>, mark: Mark },
    Map { entries: Vec<Entry>, mark: Mark },
}

impl Node {
    pub fn mark(&self) -> Mark {
        match self {
            Node::Scalar(s) => s.mark,
            Node::List { mark, .. } | Node::Map { mark, .. } => *mark,
        }
    }

    /// Node count and height, for the alias budget.
    fn size(&self) -> (usize, usize) {
        match self {
            Node::Scalar(_) => (1, 1),
            Node::List { items, .. } => items.iter().fold((1, 1), |(n, h), c| {
                let (cn, ch) = c.size();
                (n + cn, h.max(ch + 1))
            }),
            Node::Map { entries, .. } => entries.iter().fold((1, 1), |(n, h), e| {
                let (cn, ch) = e.value.size();
                (n + cn, h.max(ch + 1))
            }),
        }
    }

    /// True for a null scalar: plain `null`, `~`, nothing at all, or `!!null`.
    pub fn is_null(&self) -> bool {
        match self {
            Node::Scalar(s) => match s.tag.as_deref() {
                Some("null") => true,
                Some(_) => false,
                None => s.style == Style::Plain && matches!(s.text.as_str(), "" | "~" | "null" | "Null" | "NULL"),
            },
            _ => false,
        }
    }
}

/// One document of a YAML stream; `root` is `None` for an empty document.
#[derive(Debug, Clone)]
pub(crate) struct RawDoc {
    /// 1-based position in the stream.
    pub index: usize,
    pub root: Option<Node>,
}

enum Slot {
    Entry(Entry),
    /// `<<: *base` or `<<: [*a, *b]`: the mappings whose keys fill in what is not written.
    Merge(Vec<Node>),
}

enum Frame {
    List {
        items: Vec<Node>,
        mark: Mark,
        anchor: usize,
    },
    Map {
        slots: Vec<Slot>,
        keys: HashMap<String, usize>,
        pending: Option<(String, Mark, bool)>,
        mark: Mark,
        anchor: usize,
    },
}

struct Builder {
    doc: usize,
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Node, usize, usize)>,
    nodes: usize,
}

impl Builder {
    fn malformed(&self, line: usize, reason: impl Into<String>) -> ConfigError {
        ConfigError::Malformed { doc: self.doc, line, reason: reason.into() }
    }

    fn count(&mut self, n: usize, line: usize) -> Result<(), ConfigError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            return Err(self.malformed(line, format!("more than {MAX_NODES} YAML nodes")));
        }
        Ok(())
    }

    /// A finished node goes into its parent, or becomes the document root (returned).
    fn finish(&mut self, node: Node, anchor: usize) -> Result<Option<Node>, ConfigError> {
        if anchor != 0 {
            let (n, h) = node.size();
            self.anchors.insert(anchor, (node.clone(), n, h));
        }
        let line = node.mark().line;
        match self.stack.last_mut() {
            None => Ok(Some(node)),
            Some(Frame::List { items, .. }) => {
                items.push(node);
                Ok(None)
            }
            Some(Frame::Map { slots, keys, pending, .. }) => match pending.take() {
                None => {
                    let Node::Scalar(key) = node else {
                        return Err(self.malformed(line, "mapping keys must be scalars"));
                    };
                    let merge = key.style == Style::Plain && key.tag.is_none() && key.text == "<<";
                    if !merge {
                        if let Some(first) = keys.get(&key.text) {
                            let reason = format!("mapping key {:?} repeated (first at line {first})", key.text);
                            return Err(self.malformed(line, reason));
                        }
                        keys.insert(key.text.clone(), key.mark.line);
                    }
                    *pending = Some((key.text, key.mark, merge));
                    Ok(None)
                }
                Some((key, key_mark, false)) => {
                    slots.push(Slot::Entry(Entry { key, key_mark, value: node }));
                    Ok(None)
                }
                Some((_, _, true)) => {
                    let sources = match node {
                        Node::Map { .. } => vec![node],
                        Node::List { items, .. } if items.iter().all(|n| matches!(n, Node::Map { .. })) => items,
                        _ => {
                            let reason = "a merge key (<<) needs a mapping or a list of mappings";
                            return Err(self.malformed(line, reason));
                        }
                    };
                    slots.push(Slot::Merge(sources));
                    Ok(None)
                }
            },
        }
    }

    fn close_map(slots: Vec<Slot>, keys: &HashMap<String, usize>, mark: Mark) -> Node {
        let mut entries = Vec::new();
        let mut merged: HashSet<String> = HashSet::new();
        for slot in slots {
            match slot {
                Slot::Entry(e) => entries.push(e),
                Slot::Merge(sources) => {
                    for source in sources {
                        let Node::Map { entries: from, .. } = source else { continue };
                        for e in from {
                            if !keys.contains_key(&e.key) && merged.insert(e.key.clone()) {
                                entries.push(e);
                            }
                        }
                    }
                }
            }
        }
        Node::Map { entries, mark }
    }
}

fn core_tag(doc: usize, line: usize, tag: Option<&Tag>) -> Result<Option<String>, ConfigError> {
    let Some(tag) = tag else { return Ok(None) };
    match tag.core_suffix() {
        Some(s @ ("str" | "int" | "float" | "bool" | "null" | "map" | "seq" | "binary" | "timestamp")) => {
            Ok(Some(s.to_string()))
        }
        _ => Err(ConfigError::Malformed { doc, line, reason: format!("unsupported YAML tag {}", tag.original()) }),
    }
}

/// Parses a YAML stream into its documents.
pub(crate) fn parse_stream(text: &str) -> Result<Vec<RawDoc>, ConfigError> {
    let mut options = Options::default();
    options.emit_comments = false;
    let parser = Parser::new_from_str_with_options(text, options);

    let mut docs = Vec::new();
    let mut b = Builder { doc: 0, stack: Vec::new(), anchors: HashMap::new(), nodes: 0 };
    let mut current: Option<RawDoc> = None;

    for next in parser {
        let (event, span) = next.map_err(|e| ConfigError::Syntax {
            doc: b.doc.max(1),
            line: e.marker().line(),
            column: e.marker().col() + 1,
            reason: e.info(),
        })?;
        let mark = Mark::of(&span);
        let done = match event {
            Event::DocumentStart(..) => {
                b.doc += 1;
                b.anchors.clear();
                current = Some(RawDoc { index: b.doc, root: None });
                None
            }
            Event::DocumentEnd => {
                if let Some(doc) = current.take() {
                    docs.push(doc);
                }
                None
            }
            Event::Alias(id) => {
                let Some((node, count, height)) = b.anchors.get(&id) else {
                    return Err(b.malformed(mark.line, "alias to an unknown anchor"));
                };
                let (node, count, height) = (node.clone(), *count, *height);
                if b.stack.len() + height > MAX_DEPTH {
                    return Err(b.malformed(mark.line, format!("nested deeper than {MAX_DEPTH}")));
                }
                b.count(count, mark.line)?;
                b.finish(node, 0)?
            }
            Event::Scalar(value, style, anchor, tag) => {
                b.count(1, mark.line)?;
                let tag = core_tag(b.doc, mark.line, tag.as_deref())?;
                let style = match style {
                    ScalarStyle::Plain => Style::Plain,
                    ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => Style::Quoted,
                    ScalarStyle::Literal | ScalarStyle::Folded => Style::Block,
                };
                let scalar = Scalar { text: value.into_owned(), style, tag, mark };
                b.finish(Node::Scalar(scalar), anchor)?
            }
            Event::SequenceStart(_, anchor, tag) => {
                b.count(1, mark.line)?;
                if !matches!(core_tag(b.doc, mark.line, tag.as_deref())?.as_deref(), None | Some("seq")) {
                    return Err(b.malformed(mark.line, "a list tagged as something else"));
                }
                if b.stack.len() >= MAX_DEPTH {
                    return Err(b.malformed(mark.line, format!("nested deeper than {MAX_DEPTH}")));
                }
                b.stack.push(Frame::List { items: Vec::new(), mark, anchor });
                None
            }
            Event::MappingStart(_, anchor, tag) => {
                b.count(1, mark.line)?;
                if !matches!(core_tag(b.doc, mark.line, tag.as_deref())?.as_deref(), None | Some("map")) {
                    return Err(b.malformed(mark.line, "a mapping tagged as something else"));
                }
                if b.stack.len() >= MAX_DEPTH {
                    return Err(b.malformed(mark.line, format!("nested deeper than {MAX_DEPTH}")));
                }
                b.stack.push(Frame::Map { slots: Vec::new(), keys: HashMap::new(), pending: None, mark, anchor });
                None
            }
            Event::SequenceEnd => match b.stack.pop() {
                Some(Frame::List { items, mark, anchor }) => b.finish(Node::List { items, mark }, anchor)?,
                _ => return Err(b.malformed(mark.line, "unbalanced list")),
            },
            Event::MappingEnd => match b.stack.pop() {
                Some(Frame::Map { slots, keys, mark, anchor, .. }) => {
                    b.finish(Builder::close_map(slots, &keys, mark), anchor)?
                }
                _ => return Err(b.malformed(mark.line, "unbalanced mapping")),
            },
            // Stream markers, comments and whatever presentation events the parser adds later
            // carry no data.
            _ => None,
        };
        if let Some(root) = done {
            match current.as_mut() {
                Some(doc) => doc.root = Some(root),
                None => return Err(b.malformed(mark.line, "a node outside any document")),
            }
        }
    }
    if let Some(doc) = current.take() {
        docs.push(doc);
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_keys(node: &Node) -> Vec<&str> {
        match node {
            Node::Map { entries, .. } => entries.iter().map(|e| e.key.as_str()).collect(),
            _ => vec![],
        }
    }

    #[test]
    fn documents_keep_order_and_positions() {
        let docs = parse_stream("b: 1\na: 2\n---\nc: [x, 'y']\n---\n").unwrap();
        assert_eq!(docs.len(), 3);
        let first = docs[0].root.as_ref().unwrap();
        assert_eq!(map_keys(first), ["b", "a"]);
        let second = docs[1].root.as_ref().unwrap();
        assert_eq!(second.mark().line, 4);
        let Node::Map { entries, .. } = second else { panic!() };
        let Node::List { items, .. } = &entries[0].value else { panic!() };
        let styles: Vec<_> = items
            .iter()
            .map(|n| match n {
                Node::Scalar(s) => s.style,
                _ => panic!(),
            })
            .collect();
        assert_eq!(styles, [Style::Plain, Style::Quoted]);
        assert!(docs[2].root.as_ref().is_none_or(Node::is_null));
    }

    #[test]
    fn aliases_and_merge_keys_expand() {
        let docs = parse_stream("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n").unwrap();
        let Node::Map { entries, .. } = docs[0].root.as_ref().unwrap() else { panic!() };
        // merged keys sit where the merge key was; written keys win
        assert_eq!(map_keys(&entries[1].value), ["x", "y"]);
        let Node::Map { entries: used, .. } = &entries[1].value else { panic!() };
        let Node::Scalar(y) = &used[1].value else { panic!() };
        assert_eq!(y.text, "3");
    }

    #[test]
    fn refusals_name_the_line() {
        let err = parse_stream("a: 1\na: 2\n").unwrap_err();
        assert_eq!(err.to_string(), "document 1 (line 2): mapping key \"a\" repeated (first at line 1)");
        let err = parse_stream("a: 1\n---\nb: [1\n").unwrap_err();
        assert!(matches!(err, ConfigError::Syntax { doc: 2, line: 3, .. }), "{err}");
        let err = parse_stream("a: !foo x\n").unwrap_err();
        assert!(err.to_string().contains("unsupported YAML tag"), "{err}");
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let err = parse_stream(&text).unwrap_err();
        assert!(err.to_string().contains("YAML nodes"), "{err}");

        let mut deep = String::from("a0: &a0 [x]\n");
        for i in 1..400 {
            deep.push_str(&format!("a{i}: &a{i} [*a{}]\n", i - 1));
        }
        let err = parse_stream(&deep).unwrap_err();
        assert!(err.to_string().contains("nested deeper"), "{err}");
    }
}

//! YAML text to raw document trees that remember where each node was written, built from the
//! event parser that ships with serde-saphyr. It knows YAML (documents, anchors and aliases,
//! merge keys, core tags, scalar styles) and nothing about config kinds. Whatever the input, it
//! must not panic and must not let aliases blow a small text up into a huge or deep tree.

use std::collections::{HashMap, HashSet};

use serde_saphyr::granit_parser::{Event, Options, Parser, ScalarStyle, Span, Tag};

use super::ConfigError;

/// What one parse of a YAML stream may build, in the manner of serde-saphyr's own `Budget`:
/// every limit is checked before what it counts is built (an alias is priced before it is
/// copied), and a refusal names the limit it hit. Aliases are the one way a small text becomes
/// a big tree, so they have a budget of their own, far below the budget of the whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Nodes built (scalars, keys included, lists, mappings), each copy an alias makes
    /// included. A generated Talos control plane config is about 400; the largest real ones
    /// (many network devices, files, patches and manifests, each manifest one scalar) a few
    /// thousand. 100,000 is some 20 times that, and bounds a parse's tree near 15 MiB where a
    /// million let a few hundred bytes of aliases take 150 MiB.
    pub max_nodes: usize,
    /// Alias (`*ref`) events, merge keys' included.
    pub max_aliases: usize,
    /// Nodes copied for anchors (the copy kept for later aliases) and their aliases. A real
    /// config shares a few small blocks a few times; a billion-laughs bomb needs millions.
    pub max_alias_nodes: usize,
    /// Bytes of scalar text (keys and values) copied for anchors and aliases: one anchored
    /// long string aliased many times costs few nodes and much memory.
    pub max_alias_bytes: usize,
    /// Nesting the later passes (which recurse) may meet.
    pub max_depth: usize,
    /// Documents in the stream.
    pub max_documents: usize,
}

/// The budget every parse has.
pub(crate) const BUDGET: Budget = Budget {
    max_nodes: 100_000,
    max_aliases: 1_000,
    max_alias_nodes: 10_000,
    max_alias_bytes: 1 << 20,
    max_depth: MAX_DEPTH,
    max_documents: 1_024,
};

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

    /// What a copy of this node costs: nodes (keys included), bytes of scalar text (keys
    /// included) and height. Walks the tree without allocating.
    fn size(&self) -> Size {
        match self {
            Node::Scalar(s) => Size { nodes: 1, bytes: s.text.len(), height: 1 },
            Node::List { items, .. } => items.iter().fold(Size::ONE, |acc, c| acc.hold(c.size(), None)),
            Node::Map { entries, .. } => {
                entries.iter().fold(Size::ONE, |acc, e| acc.hold(e.value.size(), Some(e.key.len())))
            }
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

/// The cost of a copy of a node: see [`Node::size`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Size {
    nodes: usize,
    bytes: usize,
    height: usize,
}

impl Size {
    /// An empty container.
    const ONE: Size = Size { nodes: 1, bytes: 0, height: 1 };

    /// This container holding `child`, under a key of that many bytes in a mapping.
    fn hold(self, child: Size, key: Option<usize>) -> Size {
        Size {
            nodes: self.nodes.saturating_add(child.nodes).saturating_add(usize::from(key.is_some())),
            bytes: self.bytes.saturating_add(child.bytes).saturating_add(key.unwrap_or(0)),
            height: self.height.max(child.height.saturating_add(1)),
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
    anchors: HashMap<usize, (Node, Size)>,
    budget: Budget,
    /// Spent so far, over the whole stream.
    nodes: usize,
    aliases: usize,
    alias_nodes: usize,
    alias_bytes: usize,
}

impl Builder {
    fn malformed(&self, line: usize, reason: impl Into<String>) -> ConfigError {
        ConfigError::Malformed { doc: self.doc, line, reason: reason.into() }
    }

    fn count(&mut self, n: usize, line: usize) -> Result<(), ConfigError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > self.budget.max_nodes {
            let max = self.budget.max_nodes;
            return Err(self.malformed(line, format!("more than {max} YAML nodes (limit max_nodes)")));
        }
        Ok(())
    }

    /// Prices a copy made for an anchor or an alias, before it is made.
    fn copy(&mut self, size: Size, line: usize) -> Result<(), ConfigError> {
        self.alias_nodes = self.alias_nodes.saturating_add(size.nodes);
        if self.alias_nodes > self.budget.max_alias_nodes {
            let max = self.budget.max_alias_nodes;
            return Err(
                self.malformed(line, format!("YAML alias expansion exceeds {max} nodes (limit max_alias_nodes)"))
            );
        }
        self.alias_bytes = self.alias_bytes.saturating_add(size.bytes);
        if self.alias_bytes > self.budget.max_alias_bytes {
            let max = self.budget.max_alias_bytes;
            let reason = format!("YAML alias expansion exceeds {max} bytes of text (limit max_alias_bytes)");
            return Err(self.malformed(line, reason));
        }
        Ok(())
    }

    /// An alias to `id`: priced (aliases, copies, nodes, depth), then copied.
    fn alias(&mut self, id: usize, line: usize) -> Result<Node, ConfigError> {
        let Some(&(_, size)) = self.anchors.get(&id) else {
            return Err(self.malformed(line, "alias to an unknown anchor"));
        };
        self.aliases += 1;
        if self.aliases > self.budget.max_aliases {
            let max = self.budget.max_aliases;
            return Err(self.malformed(line, format!("more than {max} YAML aliases (limit max_aliases)")));
        }
        if self.stack.len().saturating_add(size.height) > self.budget.max_depth {
            return Err(self.deep(line));
        }
        self.copy(size, line)?;
        self.count(size.nodes, line)?;
        match self.anchors.get(&id) {
            Some((node, _)) => Ok(node.clone()),
            None => Err(self.malformed(line, "alias to an unknown anchor")),
        }
    }

    fn deep(&self, line: usize) -> ConfigError {
        self.malformed(line, format!("nested deeper than {} (limit max_depth)", self.budget.max_depth))
    }

    /// A finished node goes into its parent, or becomes the document root (returned).
    fn finish(&mut self, node: Node, anchor: usize) -> Result<Option<Node>, ConfigError> {
        let line = node.mark().line;
        if anchor != 0 {
            // The copy kept for aliases is priced before it is made; nested anchors would
            // otherwise copy a subtree once per level.
            let size = node.size();
            self.copy(size, line)?;
            self.anchors.insert(anchor, (node.clone(), size));
        }
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
    let mut b = Builder {
        doc: 0,
        stack: Vec::new(),
        anchors: HashMap::new(),
        budget: BUDGET,
        nodes: 0,
        aliases: 0,
        alias_nodes: 0,
        alias_bytes: 0,
    };
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
                if b.doc > b.budget.max_documents {
                    let max = b.budget.max_documents;
                    return Err(b.malformed(mark.line, format!("more than {max} YAML documents (limit max_documents)")));
                }
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
                let node = b.alias(id, mark.line)?;
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
                if b.stack.len() >= b.budget.max_depth {
                    return Err(b.deep(mark.line));
                }
                b.stack.push(Frame::List { items: Vec::new(), mark, anchor });
                None
            }
            Event::MappingStart(_, anchor, tag) => {
                b.count(1, mark.line)?;
                if !matches!(core_tag(b.doc, mark.line, tag.as_deref())?.as_deref(), None | Some("map")) {
                    return Err(b.malformed(mark.line, "a mapping tagged as something else"));
                }
                if b.stack.len() >= b.budget.max_depth {
                    return Err(b.deep(mark.line));
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

    /// The classic billion laughs: nine levels of nine aliases, 10^9 nodes once expanded.
    fn billion_laughs() -> String {
        let mut text =
            String::from("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for w in names.windows(2) {
            let (prev, name) = (w[0], w[1]);
            let refs = vec![format!("*{prev}"); 9].join(",");
            text.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        text
    }

    #[test]
    fn billion_laughs_is_refused_before_it_is_expanded() {
        let text = billion_laughs();
        assert!(text.len() < 400, "{} bytes", text.len());
        let started = std::time::Instant::now();
        let err = parse_stream(&text).unwrap_err();
        let took = started.elapsed();
        println!("billion laughs ({} bytes): refused in {took:?}: {err}", text.len());
        assert_eq!(
            err.to_string(),
            "document 1 (line 4): YAML alias expansion exceeds 10000 nodes (limit max_alias_nodes)"
        );
        // Priced before copied: at most the budget's worth of copies is ever made.
        assert!(took < std::time::Duration::from_millis(500), "{took:?}");
    }

    #[test]
    fn every_limit_is_named_when_hit() {
        // One long string aliased a few times: few nodes, many bytes.
        let long = "x".repeat(300 << 10);
        let text = format!("s: &s \"{long}\"\nl: [*s, *s, *s, *s]\n");
        let err = parse_stream(&text).unwrap_err().to_string();
        assert!(err.ends_with("YAML alias expansion exceeds 1048576 bytes of text (limit max_alias_bytes)"), "{err}");

        // Anchors nested level upon level copy their subtree at each: priced as copies.
        let mut nested = String::new();
        for i in 0..200 {
            nested.push_str(&format!("&n{i} ["));
        }
        nested.push_str(&vec!["x"; 100].join(","));
        nested.push_str(&"]".repeat(200));
        let err = parse_stream(&format!("n: {nested}\n")).unwrap_err().to_string();
        assert!(err.ends_with("(limit max_alias_nodes)"), "{err}");

        // Aliases counted one by one, however small.
        let refs = vec!["*x"; BUDGET.max_aliases + 1].join(", ");
        let err = parse_stream(&format!("x: &x 1\nl: [{refs}]\n")).unwrap_err().to_string();
        assert!(err.ends_with("more than 1000 YAML aliases (limit max_aliases)"), "{err}");

        // Nodes: a plain text can hold more of them than any config has.
        let items = vec!["1"; BUDGET.max_nodes].join(",");
        let err = parse_stream(&format!("l: [{items}]\n")).unwrap_err().to_string();
        assert!(err.ends_with("more than 100000 YAML nodes (limit max_nodes)"), "{err}");

        let err = parse_stream(&"---\na: 1\n".repeat(BUDGET.max_documents + 1)).unwrap_err().to_string();
        assert!(err.ends_with("more than 1024 YAML documents (limit max_documents)"), "{err}");

        // Written nesting the event parser stops itself (its recursion limit); an alias counts
        // the height of what it copies, where it is copied.
        let deep =
            format!("a: &a {}x{}\nb: {}*a{}\n", "[".repeat(200), "]".repeat(200), "[".repeat(100), "]".repeat(100));
        let err = parse_stream(&deep).unwrap_err().to_string();
        assert!(err.ends_with("nested deeper than 256 (limit max_depth)"), "{err}");
    }

    #[test]
    fn a_config_sharing_a_few_blocks_parses() {
        let text = "\
version: v1alpha1
machine:
  type: worker
  network:
    interfaces:
      - interface: eth0
        mtu: &mtu 9000
        routes: &routes
          - network: 10.0.0.0/8
            gateway: 10.0.0.1
          - network: 192.168.0.0/16
            gateway: 10.0.0.1
      - interface: eth1
        mtu: *mtu
        routes: *routes
  kubelet:
    extraArgs: &args
      rotate-server-certificates: \"true\"
      max-pods: \"250\"
  nodeLabels:
    <<: *args
    zone: a
";
        let docs = parse_stream(text).unwrap();
        let Node::Map { entries, .. } = docs[0].root.as_ref().unwrap() else { panic!() };
        let Node::Map { entries: machine, .. } = &entries[1].value else { panic!() };
        let Node::Map { entries: network, .. } = &machine[1].value else { panic!() };
        let Node::List { items, .. } = &network[0].value else { panic!() };
        let Node::Map { entries: eth1, .. } = &items[1] else { panic!() };
        let Node::List { items: routes, .. } = &eth1[2].value else { panic!() };
        assert_eq!(routes.len(), 2);
        assert_eq!(map_keys(&machine[3].value), ["rotate-server-certificates", "max-pods", "zone"]);
        if let Err(e) = crate::config::load(text) {
            panic!("{e}");
        }
    }

    #[test]
    fn talos_generated_configs_parse_far_inside_the_budget() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config/testdata/talos");
        let mut seen = 0;
        let mut largest = (0, String::new());
        for version in std::fs::read_dir(&dir).unwrap() {
            let version = version.unwrap().path();
            if !version.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(version).unwrap() {
                let path = file.unwrap().path();
                if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let docs = parse_stream(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let nodes: usize = docs.iter().filter_map(|d| d.root.as_ref()).map(|r| r.size().nodes).sum();
                if nodes > largest.0 {
                    largest = (nodes, path.display().to_string());
                }
                seen += 1;
            }
        }
        println!("{seen} Talos configs; the largest has {} nodes ({})", largest.0, largest.1);
        assert!(seen >= 8, "{seen} configs under {}", dir.display());
        assert!(largest.0 * 100 < BUDGET.max_nodes, "{largest:?}");
    }
}

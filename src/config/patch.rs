//! Config patches as Talos and talosctl take them: strategic-merge patches (config documents
//! merged into the matching documents, with `$patch: delete` to remove a field, a list item or a
//! whole document) and RFC 6902 JSON patches (a list of operations, in YAML or JSON). The result
//! of patching is loaded again from scratch, so it is checked exactly like any other config.

use super::ConfigError;
use super::check::{Checker, Marks};
use super::document::{Config, Document};
use super::json6902;
pub use super::json6902::{JsonOp, Op};
use super::load::{check_document, identify, load};
use super::merge::merge_document;
use super::parse::{Node, RawDoc, parse_stream};
use super::scalar::format_float;
use super::schema::{self, Kind, Ty};
use super::value::{Path, Seg, Value};

/// A parsed patch.
#[derive(Debug, Clone)]
pub enum Patch {
    StrategicMerge(StrategicPatch),
    Json6902(Vec<JsonOp>),
}

/// A strategic-merge patch: its deletions and documents, in the order they apply.
#[derive(Debug, Clone)]
pub struct StrategicPatch {
    steps: Vec<Step>,
}

#[derive(Debug, Clone)]
enum Step {
    /// Remove `path` (or, with `select`, the list item at `path` whose `key` is `value`).
    Delete {
        kind: &'static Kind,
        name: Option<String>,
        path: Path,
        select: Option<(String, String)>,
    },
    Merge(Document),
}

impl Patch {
    /// Reads a patch, telling the two kinds apart as Talos does: config documents make a
    /// strategic-merge patch, a list of operations a JSON patch.
    pub fn parse(text: &str) -> Result<Patch, ConfigError> {
        let strategic = match parse_strategic(text) {
            Ok(p) => return Ok(Patch::StrategicMerge(p)),
            Err(e) => e,
        };
        // A list is a broken JSON patch, anything else a broken strategic one.
        match parse_json(text)? {
            Some(ops) => Ok(Patch::Json6902(ops)),
            None => Err(strategic),
        }
    }
}

fn parse_strategic(text: &str) -> Result<StrategicPatch, ConfigError> {
    let mut steps = Vec::new();
    for mut raw in parse_stream(text)? {
        let Some((kind, name)) = identify(&raw)?.map(|f| (f.kind, f.name)) else { continue };
        let label = match &name {
            Some(n) => format!("{} {n}", kind.kind),
            None => kind.kind.to_string(),
        };
        let mut deletes = Vec::new();
        let emptied = match raw.root.as_mut() {
            Some(root) => extract_deletes(root, &mut Vec::new(), false, &label, &mut deletes)?,
            None => false,
        };
        for (path, select) in deletes {
            steps.push(Step::Delete { kind, name: name.clone(), path: Path::from(path), select });
        }
        if emptied || only_identity(&raw) {
            continue;
        }
        if let Some(found) = identify(&raw)? {
            steps.push(Step::Merge(check_document(&found)?));
        }
    }
    if steps.is_empty() {
        return Err(ConfigError::NoDocuments);
    }
    Ok(StrategicPatch { steps })
}

/// A patch document left with nothing but what names it has nothing to merge.
fn only_identity(raw: &RawDoc) -> bool {
    match &raw.root {
        Some(Node::Map { entries, .. }) => {
            entries.iter().all(|e| matches!(e.key.as_str(), "version" | "apiVersion" | "kind" | "name"))
        }
        _ => true,
    }
}

fn is_delete_marker(node: &Node) -> bool {
    match node {
        Node::Map { entries, .. } => {
            entries.iter().any(|e| e.key == "$patch" && matches!(&e.value, Node::Scalar(s) if s.text == "delete"))
        }
        _ => false,
    }
}

type Found = (Vec<Seg>, Option<(String, String)>);

/// Takes the `$patch: delete` markers out of a patch document, collecting what they delete.
/// Returns true when `node` itself is to go: it was a marker, or removing markers emptied it.
fn extract_deletes(
    node: &mut Node,
    path: &mut Vec<Seg>,
    in_list: bool,
    doc: &str,
    out: &mut Vec<Found>,
) -> Result<bool, ConfigError> {
    let error = |path: &[Seg], reason: &str| ConfigError::PatchDelete {
        doc: doc.to_string(),
        path: Path::from(path.to_vec()).to_string(),
        reason: reason.into(),
    };
    if is_delete_marker(node) {
        let Node::Map { entries, .. } = node else { return Ok(false) };
        if in_list {
            // A list item to delete is picked by its first other key: value pair.
            let pick = entries
                .iter()
                .find(|e| e.key != "$patch")
                .ok_or_else(|| error(path, "a list item to delete needs a key: value pair that picks it"))?;
            let Node::Scalar(value) = &pick.value else {
                return Err(error(path, "a list item to delete is picked by a key with a scalar value"));
            };
            out.push((path.clone(), Some((pick.key.clone(), value.text.clone()))));
        } else {
            if path.iter().any(|s| matches!(s, Seg::Index(_))) {
                return Err(error(path, "cannot delete a key inside a list item"));
            }
            out.push((path.clone(), None));
        }
        return Ok(true);
    }
    match node {
        Node::Map { entries, .. } => {
            let before = entries.len();
            let mut i = 0;
            while i < entries.len() {
                path.push(Seg::Key(entries[i].key.clone()));
                let gone = extract_deletes(&mut entries[i].value, path, false, doc, out)?;
                path.pop();
                if gone {
                    entries.remove(i);
                } else {
                    i += 1;
                }
            }
            Ok(before > 0 && entries.is_empty())
        }
        Node::List { items, .. } => {
            let before = items.len();
            let mut i = 0;
            while i < items.len() {
                path.push(Seg::Index(i));
                let gone = extract_deletes(&mut items[i], path, true, doc, out)?;
                path.pop();
                if gone {
                    items.remove(i);
                } else {
                    i += 1;
                }
            }
            Ok(before > 0 && items.is_empty())
        }
        Node::Scalar(_) => Ok(false),
    }
}

/// Reads a JSON patch: `None` when the text is not a list at all (so it was meant as a
/// strategic patch), an error when it is a list, or plainly meant to be one, but broken.
fn parse_json(text: &str) -> Result<Option<Vec<JsonOp>>, ConfigError> {
    let docs = match parse_stream(text) {
        Ok(docs) => docs,
        Err(e) if text.trim_start().starts_with('[') => return Err(e),
        Err(_) => return Ok(None),
    };
    let roots: Vec<&Node> = docs.iter().filter_map(|d| d.root.as_ref()).filter(|n| !n.is_null()).collect();
    match roots.as_slice() {
        [] => Ok(Some(Vec::new())),
        [root @ Node::List { .. }] => {
            let mut marks = Marks::new();
            let value = Checker { doc: "JSON patch", marks: &mut marks }.check(root, &Ty::Any, &Path::root())?;
            json6902::parse_ops(value.as_list().unwrap_or_default()).map(Some)
        }
        _ => Ok(None),
    }
}

/// Applies patches in order and checks the result like any loaded config.
pub fn apply(config: &Config, patches: &[Patch]) -> Result<Config, ConfigError> {
    let mut docs = config.docs.clone();
    for patch in patches {
        match patch {
            Patch::StrategicMerge(p) => strategic(&mut docs, p)?,
            Patch::Json6902(ops) => {
                // Talos applies JSON patches to a single-document config; in a multi-document
                // one, talosbox applies them to the v1alpha1 document.
                let target = match docs.len() {
                    1 => 0,
                    _ => docs.iter().position(|d| d.kind.is_v1alpha1()).ok_or_else(|| ConfigError::Missing {
                        doc: "v1alpha1".into(),
                        reason: "JSON patches apply to the v1alpha1 document, and this config has none".into(),
                    })?,
                };
                json6902::apply(&mut docs[target].value, ops)?;
            }
        }
    }
    let text = docs.iter().map(Document::to_yaml).collect::<Vec<_>>().join("---\n");
    load(&text).map(|l| l.config).map_err(forget_lines)
}

/// Line numbers of the re-rendered text would point nowhere the user has seen.
fn forget_lines(e: ConfigError) -> ConfigError {
    match e {
        ConfigError::UnknownField { doc, path, .. } => ConfigError::UnknownField { doc, path, line: None },
        ConfigError::WrongType { doc, path, expected, got, .. } => {
            ConfigError::WrongType { doc, path, expected, got, line: None }
        }
        ConfigError::NotAllowed { doc, path, value, allowed, .. } => {
            ConfigError::NotAllowed { doc, path, value, allowed, line: None }
        }
        other => other,
    }
}

fn strategic(docs: &mut Vec<Document>, patch: &StrategicPatch) -> Result<(), ConfigError> {
    for step in &patch.steps {
        match step {
            Step::Delete { kind, name, path, select } => {
                // Deleting from a document the config does not have deletes nothing, as in Talos.
                let Some(at) = docs.iter().position(|d| std::ptr::eq(d.kind, *kind) && d.name == *name) else {
                    continue;
                };
                let label = docs[at].id().label();
                if path.is_root() {
                    if kind.is_v1alpha1() {
                        return Err(ConfigError::PatchDelete {
                            doc: label,
                            path: String::new(),
                            reason: "the v1alpha1 document itself cannot be deleted".into(),
                        });
                    }
                    docs.remove(at);
                    continue;
                }
                delete(&mut docs[at].value, kind, path, select.as_ref())
                    .map_err(|reason| ConfigError::PatchDelete { doc: label, path: path.to_string(), reason })?;
            }
            Step::Merge(doc) => match docs.iter_mut().find(|d| d.id() == doc.id()) {
                Some(left) => merge_document(left.kind, &mut left.value, &doc.value)?,
                None => docs.push(doc.clone()),
            },
        }
    }
    Ok(())
}

/// The text Talos compares a list item's key field against.
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(format_float(*f)),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        Value::List(_) | Value::Map(_) => None,
    }
}

fn delete(root: &mut Value, kind: &'static Kind, path: &Path, select: Option<&(String, String)>) -> Result<(), String> {
    let nothing = || "nothing there to delete".to_string();
    let Some((parent, last)) = path.parent() else { return Err(nothing()) };
    match select {
        Some((key, value)) => {
            let Some(Value::List(items)) = root.at_mut(&parent) else { return Err(nothing()) };
            let at = items
                .iter()
                .position(|item| item.get(key).and_then(scalar_text).is_some_and(|t| t == *value))
                .ok_or_else(|| format!("no item with {key}: {value}"))?;
            items.remove(at);
            Ok(())
        }
        None => {
            let Seg::Key(key) = last else { return Err(nothing()) };
            let Some(Value::Map(m)) = root.at_mut(&parent) else { return Err(nothing()) };
            if m.remove(key).is_some() {
                return Ok(());
            }
            // An absent field of a fixed structure is already empty, as Talos sees it; an
            // absent map key is not there to delete.
            match schema::type_at(&kind.root, &parent) {
                Some(Ty::Obj(_)) => Ok(()),
                _ => Err(nothing()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::golden;

    fn patched(base: &str, patches: &[&str]) -> Result<Config, ConfigError> {
        let config = load(base)?.config;
        let patches = patches.iter().map(|p| Patch::parse(p)).collect::<Result<Vec<_>, _>>()?;
        apply(&config, &patches)
    }

    /// testdata/patch/<case>/: base.yaml, then patch*.yaml applied in name order, must give
    /// expected.yaml.
    #[test]
    fn golden_patches() {
        let cases = golden::files("patch");
        assert!(cases.len() >= 8, "{cases:?}");
        for case in cases {
            let base = golden::read(&format!("patch/{case}/base.yaml"));
            let patches: Vec<String> = golden::files(&format!("patch/{case}"))
                .into_iter()
                .filter(|f| f.starts_with("patch"))
                .map(|f| golden::read(&format!("patch/{case}/{f}")))
                .collect();
            let refs: Vec<&str> = patches.iter().map(String::as_str).collect();
            let out = patched(&base, &refs).unwrap_or_else(|e| panic!("{case}: {e}"));
            golden::check(&format!("patch/{case}/expected.yaml"), &out.to_yaml());
        }
    }

    #[test]
    fn the_kind_of_patch_is_told_apart() {
        assert!(matches!(Patch::parse("machine:\n  network: {}\n"), Ok(Patch::StrategicMerge(_))));
        assert!(matches!(Patch::parse("- op: remove\n  path: /machine\n"), Ok(Patch::Json6902(ops)) if ops.len() == 1));
        assert!(matches!(Patch::parse("[{\"op\": \"remove\", \"path\": \"/x\"}]"), Ok(Patch::Json6902(_))));
        assert!(matches!(Patch::parse(""), Ok(Patch::Json6902(ops)) if ops.is_empty()));
        let only_delete = "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n$patch: delete\n";
        assert!(matches!(Patch::parse(only_delete), Ok(Patch::StrategicMerge(_))));
    }

    #[test]
    fn refused() {
        let base = "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    interfaces:\n      - interface: eth0\n---\n\
                    apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n";
        let cases: &[(&str, &str)] = &[
            ("machine:\n  netwrk: {}\n", "v1alpha1: machine.netwrk: unknown field (line 2)"),
            ("[{\"op\": \"jump\", \"path\": \"/x\"}]", "patch: JSON patch operation 0: unknown op \"jump\""),
            ("- op: add\n  path: /machine/x\n", "patch: JSON patch operation 0: missing value"),
            ("- op: remove\n  path: /cluster\n", "JSON patch operation 0 (remove /cluster): no \"cluster\" here"),
            (
                "- op: add\n  path: /machine/network/interfaces/0/mtu\n  value: big\n",
                "v1alpha1: machine.network.interfaces[0].mtu: expected integer, got string \"big\"",
            ),
            (
                "machine:\n  install:\n    disk:\n      $patch: delete\n",
                "patch: v1alpha1: machine.install.disk: nothing there to delete",
            ),
            (
                "machine:\n  network:\n    interfaces:\n      - interface: eth7\n        $patch: delete\n",
                "patch: v1alpha1: machine.network.interfaces[0]: no item with interface: eth7",
            ),
            (
                "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcpOptions:\n          $patch: delete\n",
                "patch: v1alpha1: machine.network.interfaces[0].dhcpOptions: cannot delete a key inside a list item",
            ),
            (
                "version: v1alpha1\n$patch: delete\n",
                "patch: v1alpha1: : the v1alpha1 document itself cannot be deleted",
            ),
            ("- a\n- b\n", "patch: JSON patch operation 0: not a mapping"),
            ("just text\n", "document 1 (line 1): a config document must be a mapping"),
        ];
        for (patch, want) in cases {
            let err = patched(base, &[patch]).unwrap_err();
            assert_eq!(err.to_string(), *want, "{patch}");
        }
    }

    #[test]
    fn json_patches_need_a_target() {
        let base = "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth1\n";
        let err = patched(base, &["- op: add\n  path: /mtu\n  value: 1\n"]).unwrap_err();
        assert_eq!(err.to_string(), "v1alpha1: JSON patches apply to the v1alpha1 document, and this config has none");
        // a single document of any kind is patched, as in Talos
        let one = patched(
            "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n",
            &["- op: add\n  path: /mtu\n  value: 9000\n"],
        );
        assert_eq!(one.unwrap().to_yaml(), "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtu: 9000\n");
    }
}

//! What changes between two configs, for dry runs and drift reports: a structured list per
//! document and field (with whether the change applies live or needs a reboot), and the unified
//! text diff Talos returns from a dry-run apply. Secrets never appear in either: a changed
//! secret shows as changed, never as its value (unlike Talos, whose diff prints them).

use serde::Serialize;

use super::document::{Config, DocId, Document};
use super::emit;
use super::policy::{Effect, REDACTED, is_sensitive, redacted, subtree_effect};
use super::schema::{Kind, Ty, step};
use super::textdiff;
use super::value::{Map, Path, Seg, Value};

/// What a secret that differs from the old config's is shown as in the new one's text.
const REDACTED_CHANGED: &str = "(redacted, changed)";
/// Longest rendering of a value in a [`Change`].
const SHORT: usize = 160;

/// How a field changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeOp {
    Added,
    Removed,
    Changed,
}

/// One changed field (or whole document, at the empty path).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub path: Path,
    pub op: ChangeOp,
    /// The old value as short YAML; `(redacted)` for a secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
    /// The value is a secret: only the fact that it changed is shown.
    pub sensitive: bool,
    pub effect: Effect,
}

/// The changes of one document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DocumentDiff {
    pub document: DocId,
    pub changes: Vec<Change>,
}

/// The differences between two configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diff {
    pub documents: Vec<DocumentDiff>,
    #[serde(skip)]
    text: String,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.documents.is_empty()
    }

    /// Whether any change needs a reboot to take effect.
    pub fn requires_reboot(&self) -> bool {
        self.changes().any(|c| c.effect == Effect::Reboot)
    }

    pub fn changes(&self) -> impl Iterator<Item = &Change> {
        self.documents.iter().flat_map(|d| d.changes.iter())
    }

    /// The unified diff of the two configs' YAML in Talos's layout, secrets replaced by
    /// placeholders that differ exactly when the secret changed; empty when nothing did.
    pub fn talos_text(&self) -> &str {
        &self.text
    }
}

/// Compares two configs.
pub fn diff(old: &Config, new: &Config) -> Diff {
    let mut documents = Vec::new();
    for o in old.documents() {
        let id = o.id();
        let changes = match new.documents().iter().find(|n| n.id() == id) {
            Some(n) => {
                let mut changes = Vec::new();
                Differ { kind: o.kind, changes: &mut changes }.value(&Path::root(), &o.value, &n.value);
                changes
            }
            None => vec![whole(o, ChangeOp::Removed)],
        };
        if !changes.is_empty() {
            documents.push(DocumentDiff { document: id, changes });
        }
    }
    for n in new.documents() {
        if !old.documents().iter().any(|o| o.id() == n.id()) {
            documents.push(DocumentDiff { document: n.id(), changes: vec![whole(n, ChangeOp::Added)] });
        }
    }
    Diff { documents, text: talos_text(old, new) }
}

/// Talos's `mode_details` for an apply: the summary, and for a dry run the config diff.
pub fn mode_details(summary: &str, diff: &Diff, dry_run: bool) -> String {
    if !dry_run {
        return summary.to_string();
    }
    let text = match diff.talos_text() {
        "" => "No changes.",
        text => text,
    };
    format!("Dry run summary:\n{summary} (skipped in dry-run).\nConfig diff:\n\n{text}")
}

fn whole(doc: &Document, op: ChangeOp) -> Change {
    let shown = Some(short(&redacted(doc.kind, &Path::root(), &doc.value)));
    let (old, new) = match op {
        ChangeOp::Removed => (Some(&doc.value), None),
        _ => (None, Some(&doc.value)),
    };
    Change {
        path: Path::root(),
        op,
        old: if old.is_some() { shown.clone() } else { None },
        new: if new.is_some() { shown } else { None },
        sensitive: false,
        effect: subtree_effect(doc.kind, &Path::root(), old, new),
    }
}

struct Differ<'a> {
    kind: &'static Kind,
    changes: &'a mut Vec<Change>,
}

impl Differ<'_> {
    fn record(&mut self, path: &Path, old: Option<&Value>, new: Option<&Value>) {
        let op = match (old, new) {
            (None, Some(_)) => ChangeOp::Added,
            (Some(_), None) => ChangeOp::Removed,
            _ => ChangeOp::Changed,
        };
        let sensitive = is_sensitive(self.kind, path);
        let show = |v: Option<&Value>| {
            v.map(|v| if sensitive { REDACTED.to_string() } else { short(&redacted(self.kind, path, v)) })
        };
        self.changes.push(Change {
            path: path.clone(),
            op,
            old: show(old),
            new: show(new),
            sensitive,
            effect: subtree_effect(self.kind, path, old, new),
        });
    }

    fn value(&mut self, path: &Path, old: &Value, new: &Value) {
        if old == new {
            return;
        }
        if is_sensitive(self.kind, path) {
            return self.record(path, Some(old), Some(new));
        }
        match (old, new) {
            (Value::Map(o), Value::Map(n)) => {
                for (k, ov) in o.iter() {
                    match n.get(k) {
                        Some(nv) => self.value(&path.key(k), ov, nv),
                        None => self.record(&path.key(k), Some(ov), None),
                    }
                }
                for (k, nv) in n.iter().filter(|(k, _)| !o.contains_key(k)) {
                    self.record(&path.key(k), None, Some(nv));
                }
            }
            (Value::List(o), Value::List(n)) if o.len() == n.len() => {
                for (i, (ov, nv)) in o.iter().zip(n).enumerate() {
                    self.value(&path.index(i), ov, nv);
                }
            }
            // Items added at the end, or taken off it, are named one by one.
            (Value::List(o), Value::List(n)) if n.starts_with(o) => {
                for (i, nv) in n.iter().enumerate().skip(o.len()) {
                    self.record(&path.index(i), None, Some(nv));
                }
            }
            (Value::List(o), Value::List(n)) if o.starts_with(n) => {
                for (i, ov) in o.iter().enumerate().skip(n.len()) {
                    self.record(&path.index(i), Some(ov), None);
                }
            }
            _ => self.record(path, Some(old), Some(new)),
        }
    }
}

/// A value as one line of flow YAML, cut short.
fn short(v: &Value) -> String {
    let text = emit::flow(v);
    match text.char_indices().nth(SHORT) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

/// The new document's value with its secrets replaced: `(redacted)` where the secret is the
/// same as in `old`, `(redacted, changed)` where it is not.
fn redacted_against(kind: &'static Kind, path: &Path, v: &Value, old: Option<&Value>) -> Value {
    if is_sensitive(kind, path) {
        let same = old.is_none_or(|o| o == v);
        return Value::String(if same { REDACTED } else { REDACTED_CHANGED }.into());
    }
    match v {
        Value::Map(m) => Value::Map(
            m.iter()
                .map(|(k, v)| {
                    let o = old.and_then(|o| o.get(k));
                    (k.to_string(), redacted_against(kind, &path.key(k), v, o))
                })
                .collect(),
        ),
        Value::List(items) => Value::List(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let o = old.and_then(Value::as_list).and_then(|l| l.get(i));
                    redacted_against(kind, &path.index(i), v, o)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Orders mappings as Talos writes them: a document's identity first, then fields in the
/// schema's order, free-form keys sorted.
fn canonical(ty: &'static Ty, v: &Value, root: bool) -> Value {
    match v {
        Value::Map(m) => {
            let mut out = Map::new();
            if root {
                for k in ["apiVersion", "kind"] {
                    if let Some(v) = m.get(k) {
                        out.insert(k, v.clone());
                    }
                }
            }
            let mut rest: Vec<(&str, &Value)> = m.iter().filter(|(k, _)| !out.contains_key(k)).collect();
            match ty {
                Ty::Obj(o) => {
                    rest.sort_by_key(|(k, _)| o.fields.iter().position(|f| f.name == *k).unwrap_or(usize::MAX))
                }
                _ => rest.sort_by(|a, b| a.0.cmp(b.0)),
            }
            for (k, v) in rest {
                let t = step(ty, &Seg::Key(k.to_string())).unwrap_or(&Ty::Any);
                out.insert(k, canonical(t, v, false));
            }
            Value::Map(out)
        }
        Value::List(items) => Value::List(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| canonical(step(ty, &Seg::Index(i)).unwrap_or(&Ty::Any), v, false))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn talos_text(old: &Config, new: &Config) -> String {
    let render = |docs: Vec<Value>| docs.iter().map(emit::document).collect::<Vec<_>>().join("---\n");
    let old_docs = old
        .documents()
        .iter()
        .map(|d| canonical(&d.kind.root, &redacted(d.kind, &Path::root(), &d.value), true))
        .collect();
    let new_docs = new
        .documents()
        .iter()
        .map(|d| {
            let before = old.documents().iter().find(|o| o.id() == d.id()).map(|o| &o.value);
            canonical(&d.kind.root, &redacted_against(d.kind, &Path::root(), &d.value, before), true)
        })
        .collect();
    textdiff::unified(&render(old_docs), &render(new_docs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::golden;
    use crate::config::load;

    fn config(text: &str) -> Config {
        load(text).unwrap().config
    }

    /// testdata/diff/<case>/: old.yaml and new.yaml give diff.json and talos.txt.
    #[test]
    fn golden_diffs() {
        let cases = golden::files("diff");
        assert!(cases.len() >= 4, "{cases:?}");
        for case in cases {
            let old = config(&golden::read(&format!("diff/{case}/old.yaml")));
            let new = config(&golden::read(&format!("diff/{case}/new.yaml")));
            let d = diff(&old, &new);
            let json = serde_json::to_string_pretty(&d).unwrap() + "\n";
            golden::check(&format!("diff/{case}/diff.json"), &json);
            golden::check(&format!("diff/{case}/talos.txt"), d.talos_text());
        }
    }

    #[test]
    fn secrets_never_show() {
        let old_text = golden::read("diff/secrets/old.yaml");
        let new_text = golden::read("diff/secrets/new.yaml");
        let d = diff(&config(&old_text), &config(&new_text));
        let json = serde_json::to_string(&d).unwrap();
        let text = mode_details("Applied configuration without a reboot", &d, true);
        let secrets = [
            "abcdef.0123456789abcdef",
            "zyxwvu.9876543210zyxwvu",
            "S0VZLU9MRA",
            "S0VZLU5FVw",
            "hunter2",
            "hunter3",
            "c2VjcmV0LXNhbWU",
            "d2ctcHJpdmF0ZS1zYW1l",
            "cHNrLW9sZA",
            "cHNrLW5ldw",
        ];
        for secret in secrets {
            assert!(old_text.contains(secret) || new_text.contains(secret), "{secret} is not in the test data");
            assert!(!json.contains(secret), "{secret} leaked into the structured diff");
            assert!(!text.contains(secret), "{secret} leaked into the text diff");
        }
        // the changed token still shows as a changed line
        assert!(text.contains("-    token: (redacted)\n+    token: (redacted, changed)\n"), "{text}");
        let token = d.changes().find(|c| c.path.to_string() == "machine.token").unwrap();
        assert_eq!((token.sensitive, token.op, token.old.as_deref()), (true, ChangeOp::Changed, Some(REDACTED)));
    }

    #[test]
    fn identical_configs_have_no_diff() {
        let text = include_str!("testdata/talos/v1.15/overrides-controlplane.yaml");
        let d = diff(&config(text), &config(text));
        assert!(d.is_empty());
        assert!(!d.requires_reboot());
        assert_eq!(d.talos_text(), "");
        assert_eq!(
            mode_details("Applied configuration without a reboot", &d, true),
            "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\nNo changes."
        );
        assert_eq!(
            mode_details("Staged configuration to be applied after the next reboot", &d, false),
            "Staged configuration to be applied after the next reboot"
        );
    }

    #[test]
    fn key_order_is_not_a_change() {
        let a = config(
            "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: a\n    nameservers: [1.1.1.1]\n",
        );
        let b = config(
            "machine:\n  network:\n    nameservers: [1.1.1.1]\n    hostname: a\n  type: worker\nversion: v1alpha1\n",
        );
        let d = diff(&a, &b);
        assert!(d.is_empty());
        assert_eq!(d.talos_text(), "");
    }

    #[test]
    fn effects_decide_reboots() {
        let a = config("version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: a\n");
        let live = config("version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: b\n");
        assert!(!diff(&a, &live).requires_reboot());
        let reboot = config(
            "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: a\n  install:\n    disk: /dev/sda\n",
        );
        let d = diff(&a, &reboot);
        assert!(d.requires_reboot());
        assert_eq!(d.changes().next().map(|c| c.path.to_string()), Some("machine.install".into()));
    }
}

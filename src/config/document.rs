//! A loaded config: its documents in order, each with its kind, name, values and the source
//! positions they were read from. Values here have passed the schema; nothing in this file
//! checks or changes them.

use std::fmt;

use super::check::Marks;
use super::emit;
use super::policy;
use super::schema::Kind;
use super::value::{Map, Path, Value};

/// Which document: its kind and, for kinds that have one, its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocId {
    pub kind: String,
    pub name: Option<String>,
}

impl DocId {
    /// The document's name in messages: `v1alpha1`, `LinkConfig eth0`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{} {name}", self.kind),
            None => self.kind.clone(),
        }
    }
}

/// `v1alpha1`, `LinkConfig/eth0`.
impl fmt::Display for DocId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{}/{name}", self.kind),
            None => f.write_str(&self.kind),
        }
    }
}

impl serde::Serialize for DocId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One document of a config. Its `Debug` form hides secrets.
#[derive(Clone)]
pub struct Document {
    pub(crate) kind: &'static Kind,
    pub(crate) name: Option<String>,
    pub(crate) value: Value,
    pub(crate) marks: Marks,
    /// Where the document starts in its text (0 when it was built, not read).
    pub(crate) line: usize,
}

impl fmt::Debug for Document {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = policy::redacted(self.kind, &Path::root(), &self.value);
        write!(f, "Document({}, {})", self.id(), emit::flow(&shown))
    }
}

impl PartialEq for Document {
    /// Two documents are equal when they hold the same values, wherever they were written.
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.kind, other.kind) && self.name == other.name && self.value == other.value
    }
}

impl Document {
    /// `v1alpha1` for the legacy document, else its `kind`.
    pub fn kind(&self) -> &'static str {
        self.kind.kind
    }

    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    pub fn id(&self) -> DocId {
        DocId { kind: self.kind.kind.to_string(), name: self.name.clone() }
    }

    /// The document's fields, `apiVersion` and `kind` included.
    pub fn value(&self) -> &Value {
        &self.value
    }

    pub fn map(&self) -> &Map {
        match &self.value {
            Value::Map(m) => m,
            // The loader only makes documents from mappings.
            _ => const { &Map::new() },
        }
    }

    /// The line a field was written on, when the document came from text.
    pub fn line_of(&self, path: &Path) -> Option<usize> {
        self.marks.get(path).map(|m| m.line)
    }

    pub fn to_yaml(&self) -> String {
        emit::document(&self.value)
    }
}

/// A machine configuration: one or more documents, in the order they were written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    pub(crate) docs: Vec<Document>,
}

impl Config {
    pub fn documents(&self) -> &[Document] {
        &self.docs
    }

    /// The legacy `v1alpha1` document, if there is one.
    pub fn v1alpha1(&self) -> Option<&Document> {
        self.docs.iter().find(|d| d.kind.is_v1alpha1())
    }

    /// The document of `kind` (and `name`, for named kinds).
    pub fn find(&self, kind: &str, name: Option<&str>) -> Option<&Document> {
        self.docs.iter().find(|d| d.kind() == kind && d.name() == name)
    }

    /// Every document of `kind`.
    pub fn by_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Document> + 'a {
        self.docs.iter().filter(move |d| d.kind() == kind)
    }

    /// The whole config as YAML: the documents in order, separated by `---`.
    pub fn to_yaml(&self) -> String {
        self.docs.iter().map(Document::to_yaml).collect::<Vec<_>>().join("---\n")
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load;
    use crate::config::value::Path;

    #[test]
    fn documents_are_found_by_kind_and_name() {
        let text = "version: v1alpha1\nmachine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n\
                    ---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth1\nmtu: 9000\n---\napiVersion: v1alpha1\nkind: SysctlConfig\n";
        let config = load(text).unwrap().config;
        assert_eq!(config.documents().len(), 4);
        assert!(config.v1alpha1().is_some());
        let eth1 = config.find("LinkConfig", Some("eth1")).unwrap();
        assert_eq!(eth1.id().to_string(), "LinkConfig/eth1");
        assert_eq!(eth1.id().label(), "LinkConfig eth1");
        assert_eq!(eth1.line_of(&Path::keys("mtu")), Some(12));
        assert_eq!(config.by_kind("LinkConfig").count(), 2);
        assert!(config.find("SysctlConfig", None).is_some());
        assert!(config.find("LinkConfig", None).is_none());
        assert_eq!(config.v1alpha1().unwrap().to_yaml(), "version: v1alpha1\nmachine:\n    type: worker\n");
        let secret = load("machine:\n  token: abcdef.0123456789abcdef\n").unwrap().config;
        assert_eq!(format!("{secret:?}"), "Config { docs: [Document(v1alpha1, {machine: {token: (redacted)}})] }");
    }
}

//! The config value model: YAML data with mapping order kept, so that a config renders back the
//! way it was written and diffs line up with the text, plus the paths that name a place in it.
//! It holds data only: reading and writing text is `parse.rs`' and `emit.rs`' business.

use std::fmt;

/// One YAML value of a config document.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
    List(Vec<Value>),
    Map(Map),
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(map) => Some(map),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value under a mapping key, if this is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_map().and_then(|m| m.get(key))
    }

    /// The value at `path` below this one.
    pub fn at(&self, path: &Path) -> Option<&Value> {
        let mut here = self;
        for seg in path.segments() {
            here = match (seg, here) {
                (Seg::Key(k), Value::Map(m)) => m.get(k)?,
                (Seg::Index(i), Value::List(items)) => items.get(*i)?,
                _ => return None,
            };
        }
        Some(here)
    }

    pub(crate) fn at_mut(&mut self, path: &Path) -> Option<&mut Value> {
        let mut here = self;
        for seg in path.segments() {
            here = match (seg, here) {
                (Seg::Key(k), Value::Map(m)) => m.get_mut(k)?,
                (Seg::Index(i), Value::List(items)) => items.get_mut(*i)?,
                _ => return None,
            };
        }
        Some(here)
    }

    /// The YAML type name used in error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "number",
            Value::String(_) => "string",
            Value::List(_) => "list",
            Value::Map(_) => "map",
        }
    }
}

/// A YAML mapping with string keys, in the order they were written.
///
/// Lookups are linear: config mappings are small, and keeping one vector keeps the order exact.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Map {
    entries: Vec<(String, Value)>,
}

impl Map {
    pub const fn new() -> Self {
        Map { entries: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`; an existing key keeps its place, a new one goes last.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> Option<Value> {
        let key = key.into();
        match self.get_mut(&key) {
            Some(slot) => Some(std::mem::replace(slot, value)),
            None => {
                self.entries.push((key, value));
                None
            }
        }
    }

    /// Removes `key`, keeping the order of the others.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let at = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(at).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Appends without looking for the key: for builders that already know it is new.
    pub(crate) fn push_unique(&mut self, key: String, value: Value) {
        self.entries.push((key, value));
    }
}

impl FromIterator<(String, Value)> for Map {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        let mut map = Map::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

/// One step of a [`Path`]: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Where a value sits in a document, shown as `machine.network.interfaces[0].mtu`.
///
/// Keys that are not plain identifiers are shown quoted (`nodeLabels["kubernetes.io/os"]`) so
/// that the text names one place only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Path(Vec<Seg>);

impl Path {
    pub fn root() -> Self {
        Self::default()
    }

    /// A path of mapping keys, from dotted text (`machine.network.hostname`).
    pub fn keys(dotted: &str) -> Self {
        Path(dotted.split('.').filter(|s| !s.is_empty()).map(|s| Seg::Key(s.to_string())).collect())
    }

    pub fn segments(&self) -> &[Seg] {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn key(&self, key: &str) -> Path {
        let mut p = self.clone();
        p.0.push(Seg::Key(key.to_string()));
        p
    }

    pub fn index(&self, index: usize) -> Path {
        let mut p = self.clone();
        p.0.push(Seg::Index(index));
        p
    }

    pub fn parent(&self) -> Option<(Path, &Seg)> {
        let (last, rest) = self.0.split_last()?;
        Some((Path(rest.to_vec()), last))
    }

    pub fn starts_with(&self, prefix: &Path) -> bool {
        self.0.starts_with(&prefix.0)
    }
}

impl From<Vec<Seg>> for Path {
    fn from(segs: Vec<Seg>) -> Self {
        Path(segs)
    }
}

fn is_plain_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$')
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if is_plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Key(k) => write!(f, "[{k:?}]")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl serde::Serialize for Path {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_keeps_order_and_replaces_in_place() {
        let mut m = Map::new();
        m.insert("b", Value::Int(1));
        m.insert("a", Value::Int(2));
        m.insert("b", Value::Int(3));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(m.get("b"), Some(&Value::Int(3)));
        assert_eq!(m.remove("b"), Some(Value::Int(3)));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn paths_display_unambiguously() {
        let p = Path::keys("machine.network").key("interfaces").index(0).key("mtu");
        assert_eq!(p.to_string(), "machine.network.interfaces[0].mtu");
        let p = Path::keys("machine.nodeLabels").key("kubernetes.io/os");
        assert_eq!(p.to_string(), "machine.nodeLabels[\"kubernetes.io/os\"]");
        assert_eq!(Path::root().to_string(), "");
    }

    #[test]
    fn at_follows_keys_and_indices() {
        let mut inner = Map::new();
        inner.insert("x", Value::List(vec![Value::Int(7)]));
        let mut top = Map::new();
        top.insert("a", Value::Map(inner));
        let v = Value::Map(top);
        assert_eq!(v.at(&Path::keys("a.x").index(0)), Some(&Value::Int(7)));
        assert_eq!(v.at(&Path::keys("a.y")), None);
    }
}

//! Turns a raw YAML node into a config value of the type its field declares, the way Talos's
//! decoder reads it: a plain `1500` in a string field is the text "1500", `yes` in a boolean
//! field is true, a quoted "1500" in an integer field is an error. Refuses what Talos refuses (an
//! unknown field, a list where a map belongs) with the document, the path and the line.

use std::collections::HashMap;

use super::ConfigError;
use super::parse::{Entry, Mark, Node, Scalar, Style};
use super::scalar::{Plain, resolve_plain, yaml11_bool};
use super::schema::{Ty, describe};
use super::value::{Map, Path, Value};

/// Where each path of a document was written.
pub(crate) type Marks = HashMap<Path, Mark>;

pub(crate) struct Checker<'a> {
    /// The document's name in messages: `v1alpha1`, `LinkConfig eth0`.
    pub doc: &'a str,
    pub marks: &'a mut Marks,
}

impl Checker<'_> {
    /// Checks the entries of a document's root mapping against the kind's fields, skipping the
    /// keys the loader has already read (`apiVersion`, `kind`), which are kept as written.
    pub fn document(&mut self, entries: &[Entry], root: &'static Ty, skip: &[&str]) -> Result<Map, ConfigError> {
        let mut map = Map::new();
        for e in entries {
            let path = Path::root().key(&e.key);
            self.marks.insert(path.clone(), e.key_mark);
            let value = if skip.contains(&e.key.as_str()) {
                self.check(&e.value, &Ty::Str, &path)?
            } else {
                let Ty::Obj(obj) = root else {
                    return Err(self.unknown(&path, e.key_mark));
                };
                match obj.field(&e.key) {
                    Some(field) => self.check(&e.value, &field.ty, &path)?,
                    None => return Err(self.unknown(&path, e.key_mark)),
                }
            };
            map.push_unique(e.key.clone(), value);
        }
        Ok(map)
    }

    pub fn check(&mut self, node: &Node, ty: &'static Ty, path: &Path) -> Result<Value, ConfigError> {
        self.marks.entry(path.clone()).or_insert_with(|| node.mark());
        if node.is_null() {
            return Ok(Value::Null);
        }
        match (ty, node) {
            (Ty::Any, _) => self.any(node, path),
            (Ty::Str, Node::Scalar(s)) => Ok(Value::String(s.text.clone())),
            (Ty::Enum(allowed), Node::Scalar(s)) => {
                if allowed.contains(&s.text.as_str()) {
                    Ok(Value::String(s.text.clone()))
                } else {
                    Err(ConfigError::NotAllowed {
                        doc: self.doc.to_string(),
                        path: path.to_string(),
                        value: s.text.clone(),
                        allowed: allowed.join(", "),
                        line: Some(s.mark.line),
                    })
                }
            }
            (Ty::Int, Node::Scalar(s)) => match self.scalar(s, path)? {
                Value::Int(i) => Ok(Value::Int(i)),
                Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(Value::Int(f as i64)),
                other => Err(self.wrong(ty, &got(&other), path, s.mark)),
            },
            (Ty::Bool, Node::Scalar(s)) => {
                if s.style == Style::Plain
                    && s.tag.is_none()
                    && let Some(b) = yaml11_bool(&s.text)
                {
                    return Ok(Value::Bool(b));
                }
                match self.scalar(s, path)? {
                    Value::Bool(b) => Ok(Value::Bool(b)),
                    other => Err(self.wrong(ty, &got(&other), path, s.mark)),
                }
            }
            (Ty::List(item), Node::List { items, .. }) => items
                .iter()
                .enumerate()
                .map(|(i, n)| self.check(n, item, &path.index(i)))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::List),
            (Ty::Map(item), Node::Map { entries, .. }) => {
                let mut map = Map::new();
                for e in entries {
                    let p = path.key(&e.key);
                    self.marks.insert(p.clone(), e.key_mark);
                    let v = self.check(&e.value, item, &p)?;
                    map.push_unique(e.key.clone(), v);
                }
                Ok(Value::Map(map))
            }
            (Ty::Obj(obj), Node::Map { entries, .. }) => {
                let mut map = Map::new();
                for e in entries {
                    let p = path.key(&e.key);
                    self.marks.insert(p.clone(), e.key_mark);
                    let Some(field) = obj.field(&e.key) else {
                        return Err(self.unknown(&p, e.key_mark));
                    };
                    let v = self.check(&e.value, &field.ty, &p)?;
                    map.push_unique(e.key.clone(), v);
                }
                Ok(Value::Map(map))
            }
            (Ty::OneOf(options), _) => self.one_of(options, ty, node, path),
            _ => {
                let got = match node {
                    Node::Scalar(s) => got(&self.scalar(s, path)?),
                    Node::List { .. } => "list".to_string(),
                    Node::Map { .. } => "map".to_string(),
                };
                Err(self.wrong(ty, &got, path, node.mark()))
            }
        }
    }

    /// The first option of the node's shape that accepts it; errors inside a list or mapping
    /// option are the user's, so they are reported as they are.
    fn one_of(
        &mut self,
        options: &'static [Ty],
        whole: &'static Ty,
        node: &Node,
        path: &Path,
    ) -> Result<Value, ConfigError> {
        let shaped = |t: &Ty| match node {
            Node::Scalar(_) => matches!(t, Ty::Str | Ty::Int | Ty::Bool | Ty::Enum(_) | Ty::Any),
            Node::List { .. } => matches!(t, Ty::List(_) | Ty::Any),
            Node::Map { .. } => matches!(t, Ty::Map(_) | Ty::Obj(_) | Ty::Any),
        };
        let mut fits = options.iter().filter(|t| shaped(t)).peekable();
        if matches!(node, Node::Scalar(_)) {
            for t in fits {
                if let Ok(v) = self.check(node, t, path) {
                    return Ok(v);
                }
            }
        } else if let Some(t) = fits.peek() {
            return self.check(node, t, path);
        }
        let got = match node {
            Node::Scalar(s) => got(&self.scalar(s, path)?),
            Node::List { .. } => "list".to_string(),
            Node::Map { .. } => "map".to_string(),
        };
        Err(self.wrong(whole, &got, path, node.mark()))
    }

    /// Free-form YAML: every scalar resolved on its own.
    fn any(&mut self, node: &Node, path: &Path) -> Result<Value, ConfigError> {
        match node {
            Node::Scalar(s) => self.scalar(s, path),
            Node::List { items, .. } => items
                .iter()
                .enumerate()
                .map(|(i, n)| self.check(n, &Ty::Any, &path.index(i)))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::List),
            Node::Map { entries, .. } => {
                let mut map = Map::new();
                for e in entries {
                    let p = path.key(&e.key);
                    self.marks.insert(p.clone(), e.key_mark);
                    let v = self.check(&e.value, &Ty::Any, &p)?;
                    map.push_unique(e.key.clone(), v);
                }
                Ok(Value::Map(map))
            }
        }
    }

    /// A scalar as YAML itself reads it.
    fn scalar(&self, s: &Scalar, path: &Path) -> Result<Value, ConfigError> {
        let bad = |expected: &str| ConfigError::WrongType {
            doc: self.doc.to_string(),
            path: path.to_string(),
            expected: expected.to_string(),
            got: format!("{:?} tagged {expected}", s.text),
            line: Some(s.mark.line),
        };
        match s.tag.as_deref() {
            Some("null") => return Ok(Value::Null),
            Some("int") => {
                return match resolve_plain(&s.text) {
                    Plain::Int(i) => Ok(Value::Int(i)),
                    _ => Err(bad("integer")),
                };
            }
            Some("float") => {
                return match resolve_plain(&s.text) {
                    Plain::Int(i) => Ok(Value::Float(i as f64)),
                    Plain::Float(f) => Ok(Value::Float(f)),
                    _ => Err(bad("number")),
                };
            }
            Some("bool") => {
                return match resolve_plain(&s.text) {
                    Plain::Bool(b) => Ok(Value::Bool(b)),
                    _ => Err(bad("boolean")),
                };
            }
            Some(_) => return Ok(Value::String(s.text.clone())),
            None => {}
        }
        if s.style != Style::Plain {
            return Ok(Value::String(s.text.clone()));
        }
        Ok(match resolve_plain(&s.text) {
            Plain::Null => Value::Null,
            Plain::Bool(b) => Value::Bool(b),
            Plain::Int(i) => Value::Int(i),
            Plain::Float(f) => Value::Float(f),
            Plain::Timestamp | Plain::Str => Value::String(s.text.clone()),
        })
    }

    fn unknown(&self, path: &Path, mark: Mark) -> ConfigError {
        ConfigError::UnknownField { doc: self.doc.to_string(), path: path.to_string(), line: Some(mark.line) }
    }

    fn wrong(&self, ty: &Ty, got: &str, path: &Path, mark: Mark) -> ConfigError {
        ConfigError::WrongType {
            doc: self.doc.to_string(),
            path: path.to_string(),
            expected: describe(ty),
            got: got.to_string(),
            line: Some(mark.line),
        }
    }
}

/// A value as error messages show it: `string "x"`, `integer 5`.
fn got(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Int(i) => format!("integer {i}"),
        Value::Float(f) => format!("number {f}"),
        Value::String(s) => format!("string {s:?}"),
        Value::List(_) => "list".into(),
        Value::Map(_) => "map".into(),
    }
}

//! RFC 6902 JSON patches (`add`, `remove`, `replace`, `move`, `copy`, `test`) with RFC 6901
//! pointers, on config values. Only the operations: which document they apply to, and checking
//! the result, is the patch module's business.

use super::ConfigError;
use super::value::Value;

/// A JSON patch operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Remove,
    Replace,
    Move,
    Copy,
    Test,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Remove => "remove",
            Op::Replace => "replace",
            Op::Move => "move",
            Op::Copy => "copy",
            Op::Test => "test",
        }
    }
}

/// One operation of a JSON patch.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonOp {
    pub op: Op,
    pub path: String,
    pub from: Option<String>,
    pub value: Option<Value>,
}

fn parse_error(index: usize, reason: impl Into<String>) -> ConfigError {
    ConfigError::PatchParse { reason: format!("JSON patch operation {index}: {}", reason.into()) }
}

/// Reads the operations of a patch already parsed as a list.
pub(crate) fn parse_ops(items: &[Value]) -> Result<Vec<JsonOp>, ConfigError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Map(m) = item else {
                return Err(parse_error(i, "not a mapping"));
            };
            if let Some(k) = m.keys().find(|k| !matches!(*k, "op" | "path" | "from" | "value")) {
                return Err(parse_error(i, format!("unknown field {k:?}")));
            }
            let text = |k: &str| match m.get(k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(parse_error(i, format!("{k} must be a string"))),
            };
            let op = match text("op")?.as_deref() {
                Some("add") => Op::Add,
                Some("remove") => Op::Remove,
                Some("replace") => Op::Replace,
                Some("move") => Op::Move,
                Some("copy") => Op::Copy,
                Some("test") => Op::Test,
                Some(other) => return Err(parse_error(i, format!("unknown op {other:?}"))),
                None => return Err(parse_error(i, "missing op")),
            };
            let path = text("path")?.ok_or_else(|| parse_error(i, "missing path"))?;
            let from = text("from")?;
            let value = m.get("value").cloned();
            match op {
                Op::Add | Op::Replace | Op::Test if value.is_none() => Err(parse_error(i, "missing value")),
                Op::Move | Op::Copy if from.is_none() => Err(parse_error(i, "missing from")),
                _ => Ok(JsonOp { op, path, from, value }),
            }
        })
        .collect()
}

/// A parsed RFC 6901 pointer: the reference tokens, unescaped.
fn pointer(text: &str) -> Result<Vec<String>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let rest = text.strip_prefix('/').ok_or_else(|| format!("pointer {text:?} does not start with /"))?;
    Ok(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

fn index(token: &str, len: usize, allow_end: bool) -> Result<usize, String> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    let valid =
        !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) && (token == "0" || !token.starts_with('0'));
    let i: usize = if valid {
        token.parse().map_err(|_| format!("bad index {token:?}"))?
    } else {
        return Err(format!("bad index {token:?}"));
    };
    let limit = if allow_end { len } else { len.saturating_sub(1) };
    if i > limit || (!allow_end && len == 0) {
        return Err(format!("index {i} out of range"));
    }
    Ok(i)
}

fn get<'a>(doc: &'a Value, tokens: &[String]) -> Result<&'a Value, String> {
    let mut here = doc;
    for t in tokens {
        here = match here {
            Value::Map(m) => m.get(t).ok_or_else(|| format!("no {t:?} here"))?,
            Value::List(items) => &items[index(t, items.len(), false)?],
            _ => return Err(format!("cannot look up {t:?} in a {}", here.type_name())),
        };
    }
    Ok(here)
}

fn get_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Result<&'a mut Value, String> {
    let mut here = doc;
    for t in tokens {
        here = match here {
            Value::Map(m) => m.get_mut(t).ok_or_else(|| format!("no {t:?} here"))?,
            Value::List(items) => {
                let i = index(t, items.len(), false)?;
                &mut items[i]
            }
            other => return Err(format!("cannot look up {t:?} in a {}", other.type_name())),
        };
    }
    Ok(here)
}

fn add(doc: &mut Value, tokens: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match get_mut(doc, parent)? {
        Value::Map(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::List(items) => {
            let i = index(last, items.len(), true)?;
            items.insert(i, value);
            Ok(())
        }
        other => Err(format!("cannot add to a {}", other.type_name())),
    }
}

fn remove(doc: &mut Value, tokens: &[String]) -> Result<Value, String> {
    let Some((last, parent)) = tokens.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    match get_mut(doc, parent)? {
        Value::Map(m) => m.remove(last).ok_or_else(|| format!("no {last:?} here")),
        Value::List(items) => {
            let i = index(last, items.len(), false)?;
            Ok(items.remove(i))
        }
        other => Err(format!("cannot remove from a {}", other.type_name())),
    }
}

/// JSON equality: numbers compare by value, whatever their YAML type.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Int(i), Value::Float(f)) | (Value::Float(f), Value::Int(i)) => (*i as f64) == *f,
        (Value::List(x), Value::List(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Applies the operations in order; the first that fails stops the patch.
pub(crate) fn apply(doc: &mut Value, ops: &[JsonOp]) -> Result<(), ConfigError> {
    for (i, op) in ops.iter().enumerate() {
        apply_one(doc, op).map_err(|reason| ConfigError::JsonPatch {
            index: i,
            op: op.op.as_str().to_string(),
            path: op.path.clone(),
            reason,
        })?;
    }
    Ok(())
}

fn apply_one(doc: &mut Value, op: &JsonOp) -> Result<(), String> {
    let path = pointer(&op.path)?;
    let value = || op.value.clone().unwrap_or(Value::Null);
    match op.op {
        Op::Add => add(doc, &path, value()),
        Op::Remove => remove(doc, &path).map(drop),
        Op::Replace => {
            *get_mut(doc, &path)? = value();
            Ok(())
        }
        Op::Test => {
            let want = value();
            let got = get(doc, &path)?;
            if json_eq(got, &want) { Ok(()) } else { Err("test failed: the value differs".into()) }
        }
        Op::Move | Op::Copy => {
            let from = pointer(op.from.as_deref().unwrap_or_default())?;
            if op.op == Op::Move {
                if path.len() > from.len() && path.starts_with(&from) {
                    return Err("cannot move a value into itself".into());
                }
                let moved = remove(doc, &from)?;
                add(doc, &path, moved)
            } else {
                let copied = get(doc, &from)?.clone();
                add(doc, &path, copied)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Map;

    fn doc() -> Value {
        let mut network = Map::new();
        network.insert("hostname", Value::String("a".into()));
        network.insert("nameservers", Value::List(vec![Value::String("1.1.1.1".into())]));
        let mut machine = Map::new();
        machine.insert("network", Value::Map(network));
        let mut root = Map::new();
        root.insert("machine", Value::Map(machine));
        Value::Map(root)
    }

    fn op(op: Op, path: &str, value: Option<Value>, from: Option<&str>) -> JsonOp {
        JsonOp { op, path: path.into(), from: from.map(Into::into), value }
    }

    #[test]
    fn operations_follow_rfc6902() {
        let mut d = doc();
        let s = |s: &str| Some(Value::String(s.into()));
        apply(
            &mut d,
            &[
                op(Op::Test, "/machine/network/hostname", s("a"), None),
                op(Op::Replace, "/machine/network/hostname", s("b"), None),
                op(Op::Add, "/machine/network/nameservers/-", s("8.8.8.8"), None),
                op(Op::Add, "/machine/network/nameservers/0", s("9.9.9.9"), None),
                op(Op::Copy, "/machine/network/copy", None, Some("/machine/network/hostname")),
                op(Op::Move, "/machine/moved", None, Some("/machine/network/copy")),
                op(Op::Remove, "/machine/network/nameservers/1", None, None),
                op(Op::Add, "/machine/a~1b", s("slash"), None),
            ],
        )
        .unwrap();
        let net = d.get("machine").and_then(|m| m.get("network")).unwrap();
        assert_eq!(net.get("hostname"), Some(&Value::String("b".into())));
        let ns: Vec<_> = net.get("nameservers").unwrap().as_list().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(ns, ["9.9.9.9", "8.8.8.8"]);
        assert!(net.get("copy").is_none());
        assert_eq!(d.get("machine").and_then(|m| m.get("moved")), Some(&Value::String("b".into())));
        assert_eq!(d.get("machine").and_then(|m| m.get("a/b")), Some(&Value::String("slash".into())));
    }

    #[test]
    fn failures_name_the_operation() {
        let cases: &[(JsonOp, &str)] = &[
            (
                op(Op::Remove, "/machine/nope", None, None),
                "JSON patch operation 0 (remove /machine/nope): no \"nope\" here",
            ),
            (
                op(Op::Replace, "/machine/x/y", Some(Value::Null), None),
                "JSON patch operation 0 (replace /machine/x/y): no \"x\" here",
            ),
            (
                op(Op::Add, "/machine/network/nameservers/5", Some(Value::Null), None),
                "JSON patch operation 0 (add /machine/network/nameservers/5): index 5 out of range",
            ),
            (
                op(Op::Test, "/machine/network/hostname", Some(Value::String("z".into())), None),
                "JSON patch operation 0 (test /machine/network/hostname): test failed: the value differs",
            ),
            (
                op(Op::Add, "machine", Some(Value::Null), None),
                "JSON patch operation 0 (add machine): pointer \"machine\" does not start with /",
            ),
            (
                op(Op::Move, "/machine/network/x", None, Some("/machine")),
                "JSON patch operation 0 (move /machine/network/x): cannot move a value into itself",
            ),
        ];
        for (o, want) in cases {
            let err = apply(&mut doc(), std::slice::from_ref(o)).unwrap_err();
            assert_eq!(err.to_string(), *want);
        }
    }
}

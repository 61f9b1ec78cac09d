//! The JSONPath subset COSI print columns use (`{.linkName}`, `{.status.ready}`,
//! `{.aliases[:]}`, `{.addresses[0]}`, `{.items[*].name}`, `{.labels['a.b']}`), evaluated
//! on a spec's JSON value. Pure.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("JSONPath {path:?}: {reason}")]
pub struct PathError {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
    All,
}

/// A parsed print-column path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath {
    text: String,
    steps: Vec<Step>,
}

impl JsonPath {
    pub fn parse(text: &str) -> Result<Self, PathError> {
        let err = |reason: &str| PathError { path: text.to_string(), reason: reason.to_string() };
        let inner = text
            .trim()
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .ok_or_else(|| err("must be wrapped in { }"))?;
        let mut rest = inner.strip_prefix('$').unwrap_or(inner);
        let mut steps = Vec::new();
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('.') {
                let end = r.find(['.', '[']).unwrap_or(r.len());
                let name = &r[..end];
                if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-') {
                    return Err(err("a field name must be letters, digits, '_' or '-'"));
                }
                steps.push(Step::Field(name.to_string()));
                rest = &r[end..];
            } else if let Some(r) = rest.strip_prefix('[') {
                let end = r.find(']').ok_or_else(|| err("unclosed ["))?;
                let inside = r[..end].trim();
                steps.push(match inside {
                    "*" | ":" => Step::All,
                    _ if inside.len() >= 2
                        && ((inside.starts_with('\'') && inside.ends_with('\''))
                            || (inside.starts_with('"') && inside.ends_with('"'))) =>
                    {
                        Step::Field(inside[1..inside.len() - 1].to_string())
                    }
                    _ => Step::Index(
                        inside.parse().map_err(|_| err("an index must be a number, '*', ':' or a quoted key"))?,
                    ),
                });
                rest = &r[end + 1..];
            } else {
                return Err(err("expected '.' or '['"));
            }
        }
        Ok(JsonPath { text: text.to_string(), steps })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Every value the path reaches (none when a field is missing).
    pub fn eval<'v>(&self, root: &'v Value) -> Vec<&'v Value> {
        let mut current = vec![root];
        for step in &self.steps {
            let mut next = Vec::new();
            for v in current {
                match (step, v) {
                    (Step::Field(name), Value::Object(map)) => next.extend(map.get(name)),
                    (Step::Index(i), Value::Array(items)) => next.extend(items.get(*i)),
                    (Step::All, Value::Array(items)) => next.extend(items.iter()),
                    (Step::All, Value::Object(map)) => next.extend(map.values()),
                    _ => {}
                }
            }
            current = next;
        }
        current
    }

    /// What a table cell shows: scalars as text, several values comma-separated, nothing for
    /// a missing field.
    pub fn render(&self, root: &Value) -> String {
        self.eval(root)
            .into_iter()
            .flat_map(|v| match v {
                Value::Array(items) => items.iter().collect::<Vec<_>>(),
                other => vec![other],
            })
            .map(|v| match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_and_cells() {
        let spec = json!({
            "linkName": "eth0",
            "status": {"ready": true, "n": 3},
            "aliases": ["rd", "rds"],
            "items": [{"name": "a"}, {"name": "b"}],
            "labels": {"a.b": "x"},
            "none": null,
        });
        let cases = [
            ("{.linkName}", "eth0"),
            ("{$.linkName}", "eth0"),
            ("{.status.ready}", "true"),
            ("{.status.n}", "3"),
            ("{.aliases[:]}", "rd,rds"),
            ("{.aliases[1]}", "rds"),
            ("{.aliases}", "rd,rds"),
            ("{.aliases[9]}", ""),
            ("{.items[*].name}", "a,b"),
            ("{.labels['a.b']}", "x"),
            ("{.missing.deeper}", ""),
            ("{.none}", ""),
            ("{.status}", "{\"n\":3,\"ready\":true}"),
        ];
        for (path, want) in cases {
            let p = JsonPath::parse(path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(p.render(&spec), want, "{path}");
        }
    }

    #[test]
    fn bad_paths() {
        for bad in [".linkName", "{linkName}", "{.}", "{.a[}", "{.a[x]}", "{.a b}"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}

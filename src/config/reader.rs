//! A reader over one checked document's values for the typed views (`network.rs`,
//! `block.rs`): absent, null and empty values read as "not said", and every error it makes
//! names the document and the field's path. It only reads; what a value means is the views'.

use std::str::FromStr;

use super::ConfigError;
use super::document::Document;
use super::value::{Path, Value};

/// Reads one document's fields, each error naming the document and the field.
pub(super) struct R<'a> {
    doc: String,
    root: &'a Value,
}

impl<'a> R<'a> {
    pub(super) fn of(doc: &'a Document) -> R<'a> {
        R { doc: doc.id().label(), root: doc.value() }
    }

    pub(super) fn invalid(&self, path: &Path, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { doc: self.doc.clone(), path: path.to_string(), reason: reason.into() }
    }

    pub(super) fn at(&self, path: &Path) -> Option<&'a Value> {
        self.root.at(path).filter(|v| !v.is_null())
    }

    pub(super) fn has(&self, path: &Path) -> bool {
        self.at(path).is_some()
    }

    pub(super) fn str(&self, path: &Path) -> Option<&'a str> {
        self.at(path).and_then(Value::as_str).filter(|s| !s.is_empty())
    }

    pub(super) fn string(&self, path: &Path) -> String {
        self.str(path).unwrap_or_default().to_string()
    }

    pub(super) fn opt_bool(&self, path: &Path) -> Option<bool> {
        self.at(path).and_then(Value::as_bool)
    }

    pub(super) fn bool(&self, path: &Path) -> bool {
        self.opt_bool(path).unwrap_or(false)
    }

    pub(super) fn list(&self, path: &Path) -> &'a [Value] {
        self.at(path).and_then(Value::as_list).unwrap_or_default()
    }

    /// An integer that must fit `T`; `None` when absent.
    pub(super) fn int<T: TryFrom<i64>>(&self, path: &Path) -> Result<Option<T>, ConfigError> {
        let Some(n) = self.at(path).and_then(Value::as_i64) else { return Ok(None) };
        T::try_from(n).map(Some).map_err(|_| self.invalid(path, format!("{n} is out of range")))
    }

    pub(super) fn parse<T>(
        &self,
        path: &Path,
        f: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        self.str(path).map(|s| f(s).map_err(|e| self.invalid(path, e))).transpose()
    }

    pub(super) fn parse_list<T>(
        &self,
        path: &Path,
        f: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Vec<T>, ConfigError> {
        let mut out = Vec::new();
        for (i, v) in self.list(path).iter().enumerate() {
            if let Some(s) = v.as_str() {
                out.push(f(s).map_err(|e| self.invalid(&path.index(i), e))?);
            }
        }
        Ok(out)
    }

    pub(super) fn strings(&self, path: &Path) -> Vec<String> {
        self.list(path).iter().filter_map(Value::as_str).map(str::to_string).collect()
    }

    /// A name out of `allowed`, or empty when absent.
    pub(super) fn choice(&self, path: &Path, allowed: &[&str]) -> Result<String, ConfigError> {
        match self.str(path) {
            None => Ok(String::new()),
            Some(s) if allowed.contains(&s) => Ok(s.to_string()),
            Some(s) => Err(self.invalid(path, format!("{s:?} is not one of {}", allowed.join(", ")))),
        }
    }

    /// One of a named value's `names` (as [`R::choice`]), parsed into it; `None` when unset.
    pub(super) fn named<T: FromStr>(&self, path: &Path, names: &[&str]) -> Result<Option<T>, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        match self.choice(path, names)?.as_str() {
            "" => Ok(None),
            s => s.parse().map(Some).map_err(|e: T::Err| self.invalid(path, e.to_string())),
        }
    }
}

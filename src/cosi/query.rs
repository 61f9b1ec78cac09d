//! Queries over resources: label terms with COSI's operators, id queries, and the options of a
//! list or a watch. Pure.

use std::collections::BTreeMap;

/// COSI's label operators (`LabelTerm.Operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOp {
    Exists,
    Equal,
    In,
    /// Lexical `<`.
    Lt,
    /// Lexical `<=`.
    Lte,
    /// `<` of both sides read as integers.
    LtNumeric,
    /// `<=` of both sides read as integers.
    LteNumeric,
}

impl LabelOp {
    fn is_comparison(self) -> bool {
        matches!(self, LabelOp::Lt | LabelOp::Lte | LabelOp::LtNumeric | LabelOp::LteNumeric)
    }
}

/// One condition on a label. An inverted comparison on a missing label (or a numeric one on a
/// value that is not a number) still does not match: absence is not "greater".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelTerm {
    pub key: String,
    pub op: LabelOp,
    pub values: Vec<String>,
    pub invert: bool,
}

impl LabelTerm {
    fn new(key: impl Into<String>, op: LabelOp, values: Vec<String>) -> Self {
        LabelTerm { key: key.into(), op, values, invert: false }
    }

    pub fn exists(key: impl Into<String>) -> Self {
        Self::new(key, LabelOp::Exists, Vec::new())
    }

    pub fn equal(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self::new(key, LabelOp::Equal, vec![value.into()])
    }

    pub fn one_of(key: impl Into<String>, values: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::new(key, LabelOp::In, values.into_iter().map(Into::into).collect())
    }

    pub fn compare(key: impl Into<String>, op: LabelOp, value: impl Into<String>) -> Self {
        Self::new(key, op, vec![value.into()])
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let Some(value) = labels.get(&self.key) else {
            return !self.op.is_comparison() && self.invert;
        };
        let first = self.values.first();
        let matched = match (self.op, first) {
            (LabelOp::Exists, _) => Some(true),
            (_, None) => Some(false),
            (LabelOp::Equal, Some(v)) => Some(value == v),
            (LabelOp::In, _) => Some(self.values.contains(value)),
            (LabelOp::Lt, Some(v)) => Some(value < v),
            (LabelOp::Lte, Some(v)) => Some(value <= v),
            (LabelOp::LtNumeric | LabelOp::LteNumeric, Some(v)) => match (value.parse::<i64>(), v.parse::<i64>()) {
                (Ok(l), Ok(r)) => Some(if self.op == LabelOp::LtNumeric { l < r } else { l <= r }),
                _ => None,
            },
        };
        matched.is_some_and(|m| m != self.invert)
    }
}

/// The negation (`NotExists`, `NotEqual` …): `!LabelTerm::exists("role")`.
impl std::ops::Not for LabelTerm {
    type Output = LabelTerm;
    fn not(mut self) -> LabelTerm {
        self.invert = !self.invert;
        self
    }
}

/// Selects resources by their labels; every term must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelQuery {
    pub terms: Vec<LabelTerm>,
}

impl LabelQuery {
    pub fn all() -> Self {
        LabelQuery::default()
    }

    pub fn with(mut self, term: LabelTerm) -> Self {
        self.terms.push(term);
        self
    }

    pub fn is_all(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|term| term.matches(labels))
    }
}

/// Selects resources by id: a regular expression, as COSI's `IDQuery`.
#[derive(Debug, Clone, Default)]
pub struct IdQuery {
    regex: Option<regex::Regex>,
}

impl IdQuery {
    pub fn all() -> Self {
        IdQuery::default()
    }

    /// Ids matching `pattern` (unanchored, as Go's `regexp.MatchString`).
    pub fn regex(pattern: &str) -> Result<Self, regex::Error> {
        Ok(IdQuery { regex: Some(regex::Regex::new(pattern)?) })
    }

    pub fn is_all(&self) -> bool {
        self.regex.is_none()
    }

    pub fn matches(&self, id: &str) -> bool {
        self.regex.as_ref().is_none_or(|r| r.is_match(id))
    }

    pub fn pattern(&self) -> Option<&str> {
        self.regex.as_ref().map(regex::Regex::as_str)
    }
}

impl PartialEq for IdQuery {
    fn eq(&self, other: &Self) -> bool {
        self.pattern() == other.pattern()
    }
}

/// What a list returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListOptions {
    pub labels: LabelQuery,
    pub ids: IdQuery,
}

impl ListOptions {
    pub fn matches(&self, id: &str, labels: &BTreeMap<String, String>) -> bool {
        self.ids.matches(id) && self.labels.matches(labels)
    }
}

/// Where a kind watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchStart {
    /// A `Created` event per matching resource, then `Bootstrapped`, then changes.
    #[default]
    Bootstrap,
    /// Up to this many of the kind's most recent events (from its retained history), then
    /// changes.
    Tail(usize),
    /// Changes from now on only.
    Live,
}

/// How a kind watch starts and what it passes on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchOptions {
    pub start: WatchStart,
    /// Only these resources. One that stops matching arrives as `Destroyed`, one that starts
    /// matching as `Created`.
    pub filter: ListOptions,
}

impl WatchOptions {
    pub fn live() -> Self {
        WatchOptions { start: WatchStart::Live, ..Default::default() }
    }

    pub fn tail(events: usize) -> Self {
        WatchOptions { start: WatchStart::Tail(events), ..Default::default() }
    }

    pub fn with_labels(mut self, labels: LabelQuery) -> Self {
        self.filter.labels = labels;
        self
    }

    pub fn with_ids(mut self, ids: IdQuery) -> Self {
        self.filter.ids = ids;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_terms_follow_cosi() {
        let labels: BTreeMap<String, String> =
            [("role", "cp"), ("zone", "a"), ("n", "10")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let cases: Vec<(LabelTerm, bool)> = vec![
            (LabelTerm::exists("role"), true),
            (!LabelTerm::exists("role"), false),
            (LabelTerm::exists("nope"), false),
            (!LabelTerm::exists("nope"), true),
            (LabelTerm::equal("role", "cp"), true),
            (!LabelTerm::equal("role", "cp"), false),
            (!LabelTerm::equal("nope", "cp"), true),
            (LabelTerm::one_of("zone", ["b", "a"]), true),
            (LabelTerm::one_of("zone", ["b"]), false),
            (LabelTerm::one_of("zone", Vec::<String>::new()), false),
            (LabelTerm::compare("zone", LabelOp::Lt, "b"), true),
            (LabelTerm::compare("zone", LabelOp::Lte, "a"), true),
            (LabelTerm::compare("n", LabelOp::Lt, "9"), true),
            (LabelTerm::compare("n", LabelOp::LtNumeric, "9"), false),
            (LabelTerm::compare("n", LabelOp::LteNumeric, "10"), true),
            (LabelTerm::compare("zone", LabelOp::LtNumeric, "9"), false),
            (!LabelTerm::compare("zone", LabelOp::LtNumeric, "9"), false),
            (!LabelTerm::compare("nope", LabelOp::Lt, "z"), false),
        ];
        for (i, (term, want)) in cases.iter().enumerate() {
            assert_eq!(term.matches(&labels), *want, "case {i}: {term:?}");
        }
        let q = LabelQuery::all().with(LabelTerm::exists("role")).with(LabelTerm::equal("zone", "b"));
        assert!(!q.matches(&labels));
        assert!(LabelQuery::all().matches(&labels));
    }

    #[test]
    fn id_queries_are_unanchored_regexes() {
        let q = IdQuery::regex("^eth[0-9]+$").unwrap();
        assert!(q.matches("eth0") && !q.matches("veth0") && !q.matches("eth"));
        assert!(IdQuery::regex("eth").unwrap().matches("veth0"));
        assert!(IdQuery::all().matches("anything"));
        assert!(IdQuery::regex("(").is_err());
    }
}

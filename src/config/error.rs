//! The one error type of the machine-config module. Every variant names what a user needs to find
//! the problem: the document (`v1alpha1`, `LinkConfig eth0`, or its position in the stream), the
//! field path and, where the text gave one, the line.

use thiserror::Error;

/// Why a config, a patch or a field of either was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// The text held no document at all.
    #[error("no configuration documents found")]
    NoDocuments,

    /// The YAML itself is broken.
    #[error("document {doc}: YAML syntax error at line {line}, column {column}: {reason}")]
    Syntax { doc: usize, line: usize, column: usize, reason: String },

    /// A document that is valid YAML but not a config document (not a mapping, no kind, an
    /// unsupported YAML feature, a repeated key, too big).
    #[error("document {doc} (line {line}): {reason}")]
    Malformed { doc: usize, line: usize, reason: String },

    /// A `kind`/`apiVersion` pair (or v1alpha1 `version`) that Talos does not define.
    #[error("document {doc} (line {line}): unknown document kind {kind:?} with apiVersion {api_version:?}")]
    UnknownKind { doc: usize, line: usize, kind: String, api_version: String },

    /// Two documents with the same kind and name.
    #[error("{doc}: duplicate document (line {line}; first at line {first_line})")]
    Duplicate { doc: String, line: usize, first_line: usize },

    /// A field the document kind does not have.
    #[error("{doc}: {path}: unknown field{}", at_line(.line))]
    UnknownField { doc: String, path: String, line: Option<usize> },

    /// A value of the wrong type for its field.
    #[error("{doc}: {path}: expected {expected}, got {got}{}", at_line(.line))]
    WrongType { doc: String, path: String, expected: String, got: String, line: Option<usize> },

    /// A value outside the field's allowed set.
    #[error("{doc}: {path}: {value:?} is not one of {allowed}{}", at_line(.line))]
    NotAllowed { doc: String, path: String, value: String, allowed: String, line: Option<usize> },

    /// A well-typed value that does not make sense (validation and the typed view).
    #[error("{doc}: {path}: {reason}")]
    Invalid { doc: String, path: String, reason: String },

    /// A document that must be present is not.
    #[error("{doc}: {reason}")]
    Missing { doc: String, reason: String },

    /// A patch that is neither a strategic-merge patch nor a JSON patch.
    #[error("patch: {reason}")]
    PatchParse { reason: String },

    /// A `$patch: delete` that cannot be applied.
    #[error("patch: {doc}: {path}: {reason}")]
    PatchDelete { doc: String, path: String, reason: String },

    /// A strategic merge that meets values it cannot merge.
    #[error("patch: {doc}: {path}: {reason}")]
    Merge { doc: String, path: String, reason: String },

    /// A JSON patch operation that cannot be applied.
    #[error("JSON patch operation {index} ({op} {path}): {reason}")]
    JsonPatch { index: usize, op: String, path: String, reason: String },
}

fn at_line(line: &Option<usize>) -> String {
    match line {
        Some(line) => format!(" (line {line})"),
        None => String::new(),
    }
}

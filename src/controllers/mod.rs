//! Controllers: one per file, each reconciling resources through the runtime context.

pub mod generic_merge;
pub mod runtime;

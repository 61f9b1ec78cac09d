//! Typed resource specs, per domain, under Talos's type names. Plain data: nothing here
//! reads a file or talks to the kernel.

pub mod runtime;

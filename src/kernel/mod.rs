//! Adapters to the Linux kernel: the only place in talosbox where `unsafe` may appear, each
//! block with a `// SAFETY:` comment. Nothing here decides policy.

pub mod power;

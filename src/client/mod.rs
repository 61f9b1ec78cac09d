//! The workstation side of the Talos API: what talosctl knows before it dials anything.
//!
//! Nothing here opens a connection; [`config`] reads and writes the talosconfig file.

pub mod config;

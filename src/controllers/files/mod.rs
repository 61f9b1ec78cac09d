//! The controllers of the `files` namespace: what is rendered under the node's `/etc` is
//! written here, and only here.

mod etc_file_spec;

pub use etc_file_spec::{EtcFileError, EtcFileSpecController, SYSTEM_ETC, write_if_changed};

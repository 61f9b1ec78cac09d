//! The controllers of the `files` namespace: what is rendered under the node's `/etc` is
//! written here, and only here.

mod etc_file_spec;
mod trusted_roots;

pub use etc_file_spec::{EtcFileError, EtcFileSpecController, SYSTEM_ETC, write_if_changed};
pub use trusted_roots::{
    IMAGE_TRUSTED_ROOTS, TRUSTED_ROOTS_FILE, TrustedRootsController, bundle_for as trusted_roots_bundle, custom_roots,
};

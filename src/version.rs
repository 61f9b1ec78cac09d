//! The build's identity, shown by `--version` and `talosctl version`.

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const GIT_COMMIT: &str = env!("TALOSBOX_GIT_COMMIT");

/// `v0.1.0 (commit 0123456789ab)`.
pub fn describe() -> String {
    format!("v{VERSION} (commit {GIT_COMMIT})")
}

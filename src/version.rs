//! The build's identity, shown by `--version` and `talosctl version`.

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

static OS_VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The version the node's image says it is (`VERSION_ID` of its os-release, which the imager
/// writes, `--os-version` or this binary's), once machined has read it on a node; this
/// binary's own everywhere else. What `talosctl version` reports.
pub fn os_version() -> &'static str {
    OS_VERSION.get().map(String::as_str).unwrap_or(VERSION)
}

/// Reads the image's version from `os_release` (its text), once; later calls change nothing.
pub fn set_os_version_from(os_release: &str) {
    if let Some(v) = os_release_version(os_release) {
        let _ = OS_VERSION.set(v);
    }
}

/// `VERSION_ID` of an os-release text.
pub fn os_release_version(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_ID="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
}
pub const GIT_COMMIT: &str = env!("TALOSBOX_GIT_COMMIT");

/// `v0.1.0 (commit 0123456789ab)`.
pub fn describe() -> String {
    format!("v{VERSION} (commit {GIT_COMMIT})")
}

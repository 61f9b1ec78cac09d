//! Records the git commit the binary was built from (`TALOSBOX_GIT_COMMIT` overrides it, for
//! builds from a source tarball such as Nix's). Run by the package's build script,
//! `src/api/build.rs`, as one of its steps.

use std::process::Command;

pub fn record_git_commit() {
    println!("cargo:rerun-if-env-changed=TALOSBOX_GIT_COMMIT");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    let commit = std::env::var("TALOSBOX_GIT_COMMIT").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| {
        Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".to_string())
    });
    println!("cargo:rustc-env=TALOSBOX_GIT_COMMIT={commit}");
}

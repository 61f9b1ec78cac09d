//! Records the git commit the binary was built from (`TALOSBOX_GIT_COMMIT` overrides it, for
//! builds from a source tarball such as Nix's). Run by the package's build script,
//! `src/proto/build.rs`, as one of its steps.

use std::process::Command;

pub fn record_git_commit() {
    println!("cargo:rerun-if-env-changed=TALOSBOX_GIT_COMMIT");
    let given = std::env::var("TALOSBOX_GIT_COMMIT").ok().filter(|c| !c.is_empty());
    // Given, the commit is all this step depends on: a tree without `.git` (Nix's copy of the
    // source) then finds a build of the same files fresh instead of running this again.
    if given.is_none() {
        println!("cargo:rerun-if-changed=.git/HEAD");
        println!("cargo:rerun-if-changed=.git/refs/heads");
    }
    let commit = given.unwrap_or_else(|| {
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

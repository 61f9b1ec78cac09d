//! The package's build script: compiles the API's `.proto` files under `src/proto` into
//! prost messages and tonic clients and servers, and records the git commit (`build.rs` at the
//! top of the repository).
//!
//! The protobuf compiler is protox, in this process: the build needs no `protoc` and gives the
//! same output on every host. It must never reach the network or read anything outside the
//! package.

#[path = "../../build.rs"]
mod git_commit;

use std::path::PathBuf;
use std::process::ExitCode;

use prost::Message as _;

/// Where the `.proto` files live, relative to the package root (the build script's directory).
const PROTO_ROOT: &str = "src/proto";

/// Every file compiled, as imported: one directory per protobuf package.
const PROTO_FILES: &[&str] = &[
    "google/rpc/status.proto",
    "common/common.proto",
    "machine/machine.proto",
    "machine/lifecycle.proto",
    "securityapi/security.proto",
    "time/time.proto",
    "storage/storage.proto",
    "talosbox/volume/volume.proto",
    "talosbox/lifecycle/lifecycle.proto",
    "cosi/resource/resource.proto",
    "cosi/resource/state.proto",
];

/// Protocols this program speaks outside the API (no descriptor set, no authorization table):
/// the KMS of `kms` disk encryption keys, and trustd's record of what it signed, to machined.
const OTHER_PROTO_FILES: &[&str] = &["kms/kms.proto", "talosbox/trustd/audit.proto"];

/// The encoded `FileDescriptorSet`, in `OUT_DIR`; `proto::FILE_DESCRIPTOR_SET` embeds it.
const DESCRIPTOR_SET_FILE: &str = "talosbox_api_descriptor_set.bin";

fn main() -> ExitCode {
    git_commit::record_git_commit();
    match compile_api() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn compile_api() -> Result<(), String> {
    // Printing any rerun-if-changed replaces cargo's default of rerunning on every change in the
    // package, so the protos must be named here (a directory is watched recursively).
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    println!("cargo:rerun-if-changed=src/proto/build.rs");
    println!("cargo:rerun-if-changed=build.rs");

    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set (not run by cargo?)")?);

    // Imports are included so the set is self-contained (the well-known types come with protox),
    // and source info so reflection clients see the comments.
    let descriptors = protox::compile(PROTO_FILES, [PROTO_ROOT])
        .map_err(|e| format!("compiling the API protos in {PROTO_ROOT}: {e}"))?;

    let descriptor_path = out_dir.join(DESCRIPTOR_SET_FILE);
    std::fs::write(&descriptor_path, descriptors.encode_to_vec())
        .map_err(|e| format!("writing {}: {e}", descriptor_path.display()))?;

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // protox already checked the files; prost only generates code from its descriptors.
        .skip_protoc_run()
        .emit_rerun_if_changed(false)
        .compile_fds(descriptors)
        .map_err(|e| format!("generating Rust code for the API protos: {e}"))?;

    let others = protox::compile(OTHER_PROTO_FILES, [PROTO_ROOT])
        .map_err(|e| format!("compiling {OTHER_PROTO_FILES:?} in {PROTO_ROOT}: {e}"))?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .skip_protoc_run()
        .emit_rerun_if_changed(false)
        .compile_fds(others)
        .map_err(|e| format!("generating Rust code for {OTHER_PROTO_FILES:?}: {e}"))
}

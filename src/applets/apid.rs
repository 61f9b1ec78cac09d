//! The `apid` applet: flags and a small runtime; the work is in `crate::api::apid`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// The node's API door: mTLS gRPC on :50000, routing calls to machined or other nodes.
#[derive(Debug, Parser)]
#[command(name = "apid")]
struct Args {
    /// apid's private, read-only state socket.
    #[arg(long, default_value = "/system/run/apid/runtime.sock")]
    runtime_socket: PathBuf,
    /// machined's API socket.
    #[arg(long, default_value = "/system/run/machined/machine.sock")]
    machine_socket: PathBuf,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    super::service_runtime("apid", |cancel| async move {
        let paths = crate::api::apid::ApidPaths { runtime: args.runtime_socket, machine: args.machine_socket };
        crate::api::apid::run(paths, cancel).await.map_err(|e| e.to_string())
    })
}

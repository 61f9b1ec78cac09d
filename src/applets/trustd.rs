//! The `trustd` applet: flags and a small runtime; the work is in `crate::api::trustd`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Signs workers' certificate requests (server certificates only), on :50001.
#[derive(Debug, Parser)]
#[command(name = "trustd")]
struct Args {
    /// trustd's private, read-only state socket.
    #[arg(long, default_value = "/system/run/trustd/runtime.sock")]
    runtime_socket: PathBuf,
    /// Where to listen.
    #[arg(long, default_value = "[::]:50001")]
    listen: SocketAddr,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    super::service_runtime("trustd", |cancel| async move {
        crate::api::trustd::run(args.runtime_socket, args.listen, cancel).await.map_err(|e| e.to_string())
    })
}

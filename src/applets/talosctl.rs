//! `talosctl`: the workstation CLI. Thin: flags here, work in the library.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "talosctl",
    about = "A CLI for out-of-band management of talosbox (and Talos) nodes",
    version = crate::version::VERSION,
)]
struct Cli {
    /// Nodes to act on (the API routes to them through the endpoints).
    #[arg(short = 'n', long = "nodes", global = true, value_delimiter = ',')]
    nodes: Vec<String>,
    /// Endpoints to connect to (apid addresses).
    #[arg(short = 'e', long = "endpoints", global = true, value_delimiter = ',')]
    endpoints: Vec<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the client version (and, once the API exists, the nodes' versions).
    Version {
        /// Print only the client version.
        #[arg(long)]
        client: bool,
        /// Print the short form.
        #[arg(long)]
        short: bool,
    },
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        None => {
            let _ = Cli::command().print_help();
            ExitCode::SUCCESS
        }
        Some(Command::Version { client, short }) => version(&cli.nodes, client, short),
    }
}

fn version(nodes: &[String], client_only: bool, short: bool) -> ExitCode {
    if short {
        println!("Client v{}", crate::version::VERSION);
    } else {
        println!("Client:");
        println!("\tTag:         v{}", crate::version::VERSION);
        println!("\tSHA:         {}", crate::version::GIT_COMMIT);
        println!("\tOS/Arch:     {}/{}", std::env::consts::OS, std::env::consts::ARCH);
    }
    if client_only || nodes.is_empty() {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "talosctl version: querying nodes {} needs the machine API, which this build does not have yet",
        nodes.join(",")
    );
    ExitCode::FAILURE
}

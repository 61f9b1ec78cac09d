//! `talosctl`: the workstation CLI, with Talos's command names, flags and output. Thin: flags
//! and printing here, the work in the library (`client`, `config`, `pki`, `provision`).
//!
//! Errors are one line on stderr, prefixed with the node they came from; with several nodes
//! the command goes on to the others and exits non-zero at the end.

mod apply_config;
mod cluster;
mod config_new;
mod configcmd;
mod dmesg;
mod edit;
mod events;
mod generate;
mod get;
mod health;
mod list;
mod logs;
mod memory;
mod meta;
mod mounts;
mod node;
pub(crate) mod output;
mod patch;
mod processes;
mod read;
mod reboot;
mod reset;
mod service;
mod shutdown;
mod time;
mod unlock;
mod upgrade;
mod validate;
mod version;
mod wipe;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};

use crate::client::api::SessionOptions;

#[derive(Debug, Parser)]
#[command(
    name = "talosctl",
    about = "A CLI for out-of-band management of talosbox (and Talos) nodes",
    version = crate::version::VERSION,
)]
struct Cli {
    /// The talosconfig to use (default: $TALOSCONFIG, then ~/.talos/config).
    #[arg(long, global = true)]
    talosconfig: Option<PathBuf>,
    /// The talosconfig context to use (default: its current context).
    #[arg(long, global = true)]
    context: Option<String>,
    /// Nodes to act on (the API routes to them through the endpoints).
    #[arg(short = 'n', long = "nodes", global = true, value_delimiter = ',')]
    nodes: Vec<String>,
    /// Endpoints to connect to (apid addresses).
    #[arg(short = 'e', long = "endpoints", global = true, value_delimiter = ',')]
    endpoints: Vec<String>,
    /// Talk to a node in maintenance mode: no client certificate, server not verified.
    #[arg(short = 'i', long, global = true)]
    insecure: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

impl Cli {
    fn session(&self) -> SessionOptions {
        SessionOptions {
            talosconfig: self.talosconfig.clone(),
            context: self.context.clone(),
            endpoints: self.endpoints.clone(),
            nodes: self.nodes.clone(),
            insecure: self.insecure,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the client's and the nodes' versions.
    Version(version::VersionArgs),
    /// Read resources (`get members`, `get machinestatus`, `get rd` for every type).
    Get(get::GetArgs),
    /// Apply a new configuration to a node.
    #[command(name = "apply-config", alias = "apply")]
    ApplyConfig(apply_config::ApplyArgs),
    /// Patch a node's machine configuration in place.
    Patch(patch::PatchArgs),
    /// Edit a node's machine configuration in $EDITOR and apply it.
    Edit(edit::EditArgs),
    /// Read a service's logs.
    Logs(logs::LogsArgs),
    /// Read the kernel log.
    Dmesg(dmesg::DmesgArgs),
    /// Print a file's contents.
    #[command(alias = "cat")]
    Read(read::ReadArgs),
    /// List a directory.
    #[command(alias = "ls")]
    List(list::ListArgs),
    /// List processes.
    #[command(alias = "ps")]
    Processes(processes::ProcessesArgs),
    /// Show memory usage.
    #[command(alias = "free")]
    Memory(memory::MemoryArgs),
    /// List mounts.
    #[command(alias = "df")]
    Mounts,
    /// List services, show one, or start, stop or restart it.
    #[command(alias = "services")]
    Service(service::ServiceArgs),
    /// Reboot the nodes.
    Reboot(reboot::RebootArgs),
    /// Power the nodes off.
    Shutdown(shutdown::ShutdownArgs),
    /// Reset the nodes (wipe their state) and reboot or power them off.
    Reset(reset::ResetArgs),
    /// Upgrade the nodes to another version (an imager output directory or its URL), into the
    /// boot slot not in use; a version that does not come up falls back by itself.
    Upgrade(upgrade::UpgradeArgs),
    /// Boot the other slot (the version before the last upgrade) from now on, and reboot.
    Rollback,
    /// Stream the nodes' events.
    Events(events::EventsArgs),
    /// Check that the nodes answer, are running, their services are up and their clocks synced.
    Health(health::HealthArgs),
    /// Show the nodes' time and a time server's, as each node measures it.
    Time(time::TimeArgs),
    /// Write and delete keys in the META partition.
    Meta {
        #[command(subcommand)]
        command: meta::MetaCommand,
    },
    /// Give a recovery passphrase for an encrypted volume no configured key opens (STATE by
    /// default: with --insecure on a node left in maintenance by it).
    Unlock(unlock::UnlockArgs),
    /// Wipe block devices (disks or partitions) that no volume uses.
    Wipe {
        #[command(subcommand)]
        command: wipe::WipeCommand,
    },
    /// Manage the talosconfig (endpoints, nodes, contexts) and mint client configs.
    Config {
        #[command(subcommand)]
        command: configcmd::ConfigCommand,
    },
    /// Generate secrets, machine configs and talosconfigs.
    Gen {
        #[command(subcommand)]
        command: generate::GenCommand,
    },
    /// Create, destroy local clusters (QEMU, as an ordinary user).
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Validate a machine config file (no node is contacted).
    Validate(validate::ValidateArgs),
    /// A KMS server for `kms` disk encryption keys (the launcher runs it for test clusters).
    #[command(hide = true)]
    KmsLaunch(KmsLaunchArgs),
    /// Print a shell completion script.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, clap::Args)]
pub struct KmsLaunchArgs {
    /// Listen on this address (host:port).
    #[arg(long, default_value = "localhost:4050", conflicts_with = "stdio")]
    kms_addr: String,
    /// The AES key to seal with, base64 (16 or 32 bytes).
    #[arg(long, conflicts_with = "kms_key_file", required_unless_present = "kms_key_file")]
    kms_key: Option<String>,
    /// Read the base64 key from this file instead (kept off the command line).
    #[arg(long)]
    kms_key_file: Option<std::path::PathBuf>,
    /// Serve the one connection on stdin and stdout, then exit (QEMU's guestfwd cmd:).
    #[arg(long)]
    stdio: bool,
}

fn kms_launch(a: KmsLaunchArgs) -> ExitCode {
    use base64::Engine as _;
    let text = match (&a.kms_key, &a.kms_key_file) {
        (Some(k), _) => k.clone(),
        (None, Some(f)) => match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("talosctl kms-launch: --kms-key-file {}: {e}", f.display());
                return ExitCode::from(2);
            }
        },
        (None, None) => {
            eprintln!("talosctl kms-launch: no KMS key (--kms-key or --kms-key-file)");
            return ExitCode::from(2);
        }
    };
    let key = match base64::engine::general_purpose::STANDARD.decode(text.trim()) {
        Ok(k) => zeroize::Zeroizing::new(k),
        Err(e) => {
            eprintln!("talosctl kms-launch: --kms-key: not base64: {e}");
            return ExitCode::from(2);
        }
    };
    let server = match crate::api::kms::KmsServer::new(&key) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("talosctl kms-launch: --kms-key: {e}");
            return ExitCode::from(2);
        }
    };
    block_on(async move {
        let served = if a.stdio {
            crate::api::kms::serve_stdio(server).await
        } else {
            match tokio::net::lookup_host(&a.kms_addr).await.map(|mut i| i.next()) {
                Ok(Some(addr)) => {
                    eprintln!("talosctl kms-launch: serving on {addr}");
                    crate::api::kms::serve_tcp(server, addr).await
                }
                Ok(None) => Err(format!("--kms-addr {}: no address", a.kms_addr)),
                Err(e) => Err(format!("--kms-addr {}: {e}", a.kms_addr)),
            }
        };
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("talosctl kms-launch: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, mult) = match s.strip_suffix('m') {
        Some(n) => (n, 60),
        None => match s.strip_suffix('h') {
            Some(n) => (n, 3600),
            None => (s.strip_suffix('s').unwrap_or(s), 1),
        },
    };
    num.parse::<u64>()
        .map(|n| Duration::from_secs(n * mult))
        .map_err(|_| format!("{s:?} is not a duration like 90s, 5m or 8760h"))
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let mut cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let Some(command) = cli.command.take() else {
        let _ = Cli::command().print_help();
        return ExitCode::SUCCESS;
    };
    match command {
        Command::Cluster { command } => command.run(&cli),
        Command::Gen { command } => command.run(),
        Command::Config { command } => configcmd::run(&cli, command),
        Command::Validate(args) => validate::run(&args),
        Command::Meta { command } => meta::run(&cli, command),
        Command::Wipe { command } => wipe::run(&cli, command),
        Command::Unlock(args) => unlock::run(&cli, args),
        Command::Upgrade(args) => upgrade::upgrade(&cli, &args),
        Command::Rollback => upgrade::rollback(&cli),
        Command::KmsLaunch(args) => kms_launch(args),
        Command::Completion { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "talosctl", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Version(a) => version::run(&cli, &a),
        Command::Get(a) => get::run(&cli, &a),
        Command::ApplyConfig(a) => apply_config::run(&cli, &a),
        Command::Patch(a) => patch::run(&cli, &a),
        Command::Edit(a) => edit::run(&cli, &a),
        Command::Logs(a) => logs::run(&cli, &a),
        Command::Dmesg(a) => dmesg::run(&cli, &a),
        Command::Read(a) => read::run(&cli, &a),
        Command::List(a) => list::run(&cli, &a),
        Command::Processes(a) => processes::run(&cli, &a),
        Command::Memory(a) => memory::run(&cli, &a),
        Command::Mounts => mounts::run(&cli),
        Command::Service(a) => service::run(&cli, &a),
        Command::Reboot(a) => reboot::run(&cli, &a),
        Command::Shutdown(a) => shutdown::run(&cli, &a),
        Command::Reset(a) => reset::run(&cli, &a),
        Command::Events(a) => events::run(&cli, &a),
        Command::Health(a) => health::run(&cli, &a),
        Command::Time(a) => time::run(&cli, &a),
    }
}

/// Runs `work` on a small runtime (one thread: talosctl waits on the network, nothing else).
pub(crate) fn block_on<F: std::future::Future<Output = ExitCode>>(work: F) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(work),
        Err(e) => {
            eprintln!("talosctl: starting the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

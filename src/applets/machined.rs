//! The `machined` applet, and `poweroff`, `reboot`, `shutdown`: flags and wiring only; the
//! work is in `crate::machined`.
//!
//! As PID 1, machined takes no flags and must never exit on a parse error, so flags are
//! parsed only when it is not PID 1.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::kernel::power::PowerAction;
use crate::machined::{self, Mode};
use crate::services::{ServiceDefinition, image_services};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ModeFlag {
    /// An ordinary process: no PID 1 duties; files under --state-dir.
    Container,
}

/// The node's init and machine daemon. As PID 1 it takes no flags.
#[derive(Debug, Parser)]
#[command(name = "machined")]
struct Args {
    #[arg(long, value_enum, required_unless_present = "dependency_graph")]
    mode: Option<ModeFlag>,
    /// Directory for the pid file, the stored `config.yaml`, the API sockets (`run/`) and an
    /// optional `cmdline` (this node's kernel command line).
    #[arg(long, required_unless_present = "dependency_graph")]
    state_dir: Option<PathBuf>,
    /// The address this node answers on: apid at ADDRESS:50000, trustd at ADDRESS:50001
    /// (several container-mode nodes share a host on 127.0.0.2, 127.0.0.3 …).
    #[arg(long, default_value = "127.0.0.1")]
    address: std::net::IpAddr,
    /// Print the controller dependency graph of a node or of container mode (Graphviz DOT)
    /// and exit.
    #[arg(long, value_enum, value_name = "SET")]
    dependency_graph: Option<GraphSet>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum GraphSet {
    Node,
    Container,
}

/// The node services whose applets this build has.
fn services() -> Vec<ServiceDefinition> {
    image_services(super::is_built)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    if std::process::id() == 1 {
        return machined::run(Mode::Node, services());
    }
    let Args { mode, state_dir, address, dependency_graph } = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    let container = |state_dir: Option<PathBuf>| Mode::Container { state_dir: state_dir.unwrap_or_default(), address };
    if let Some(set) = dependency_graph {
        let mode = match set {
            GraphSet::Node => Mode::Node,
            GraphSet::Container => container(state_dir),
        };
        return match machined::dependency_graph(&mode) {
            Ok(dot) => {
                print!("{dot}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("machined: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match (mode, state_dir) {
        (Some(ModeFlag::Container), Some(state_dir)) => {
            machined::run(Mode::Container { state_dir, address }, services())
        }
        // clap requires both unless the graph was asked for.
        _ => ExitCode::from(2),
    }
}

/// Asks machined to go down: PID 1, or the container-mode machined of --state-dir.
#[derive(Debug, Parser)]
struct PowerArgs {
    /// Reboot instead of powering off (`shutdown` only).
    #[arg(short = 'r', long)]
    reboot: bool,
    /// Signal the container-mode machined keeping its files here instead of PID 1.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

fn power(args: Vec<OsString>, default: PowerAction, allow_reboot_flag: bool) -> ExitCode {
    let name = args.first().map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
    let parsed = match PowerArgs::try_parse_from(&args) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    if parsed.reboot && !allow_reboot_flag {
        eprintln!("{name}: -r is only for shutdown");
        return ExitCode::from(2);
    }
    let action = if parsed.reboot { PowerAction::Reboot } else { default };
    match machined::request(action, parsed.state_dir.as_deref()) {
        Ok(pid) => {
            println!("{name}: asked machined (pid {pid}) to {action}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn poweroff(args: Vec<OsString>) -> ExitCode {
    power(args, PowerAction::PowerOff, false)
}

pub fn reboot(args: Vec<OsString>) -> ExitCode {
    power(args, PowerAction::Reboot, false)
}

pub fn shutdown(args: Vec<OsString>) -> ExitCode {
    power(args, PowerAction::PowerOff, true)
}

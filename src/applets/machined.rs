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

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ModeFlag {
    /// An ordinary process: no PID 1 duties; files under --state-dir.
    Container,
}

/// The node's init and machine daemon. As PID 1 it takes no flags.
#[derive(Debug, Parser)]
#[command(name = "machined")]
struct Args {
    #[arg(long, value_enum)]
    mode: ModeFlag,
    /// Directory for the pid file and `config.yaml` (its presence means "configured").
    #[arg(long)]
    state_dir: PathBuf,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    if std::process::id() == 1 {
        return machined::run(Mode::Node);
    }
    match Args::try_parse_from(args) {
        Ok(Args { mode: ModeFlag::Container, state_dir }) => machined::run(Mode::Container { state_dir }),
        Err(e) => {
            let _ = e.print();
            ExitCode::from(2)
        }
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

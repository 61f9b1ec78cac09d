//! Applets: the names the binary answers to, and the dispatch from `argv[0]` (or the first
//! argument, when started as `talosbox`) to each one's thin `main`.
//!
//! Applets parse flags and wire library pieces together; logic lives in the library.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub mod apid;
pub mod imager;
pub mod init;
pub mod machined;
pub mod modprobe;
#[cfg(feature = "operator")]
pub mod operator;
pub mod talosctl;
pub mod trustd;

/// An applet's entry point; `args[0]` is the name it was started as.
type Main = fn(Vec<OsString>) -> ExitCode;

/// The fleet operator, when built (the `operator` feature, on by default; a node image can
/// leave it out).
#[cfg(feature = "operator")]
const OPERATOR: Option<Main> = Some(operator::main);
#[cfg(not(feature = "operator"))]
const OPERATOR: Option<Main> = None;

/// Every name the binary answers to, and its entry point (`None`: not built yet).
const APPLETS: &[(&str, Option<Main>)] = &[
    ("init", Some(init::main)),
    ("machined", Some(machined::main)),
    ("apid", Some(apid::main)),
    ("trustd", Some(trustd::main)),
    ("talosctl", Some(talosctl::main)),
    ("imager", Some(imager::main)),
    ("operator", OPERATOR),
    ("poweroff", Some(machined::poweroff)),
    ("reboot", Some(machined::reboot)),
    ("shutdown", Some(machined::shutdown)),
    ("modprobe", Some(modprobe::main)),
];

/// Runs a node service (apid, trustd) on a single-threaded runtime (they are small and mostly
/// wait), until SIGTERM or SIGINT; its errors end it with a message and exit status 1, and the
/// supervisor restarts it.
fn service_runtime<F, Fut>(name: &str, body: F) -> ExitCode
where
    F: FnOnce(tokio_util::sync::CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    // machined raised it already; a service started by hand raises its own, so the door's
    // caps, not the descriptor limit, refuse connections.
    if let Err(e) = crate::kernel::rlimit::raise_nofile() {
        eprintln!("{name}: {e}");
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = rt.block_on(async { body(cancel_on_termination()?).await });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A token cancelled at the first SIGTERM or SIGINT (inside a Tokio runtime).
pub(crate) fn cancel_on_termination() -> Result<tokio_util::sync::CancellationToken, String> {
    let cancel = tokio_util::sync::CancellationToken::new();
    let stop = cancel.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("installing the SIGTERM handler: {e}"))?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        stop.cancel();
    });
    Ok(cancel)
}

fn names() -> String {
    APPLETS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

fn basename(arg0: &OsStr) -> String {
    Path::new(arg0).file_name().unwrap_or(arg0).to_string_lossy().into_owned()
}

/// Dispatches to the applet named by `args[0]`, or by `args[1]` when started as anything
/// else (normally `talosbox`).
pub fn main(args: Vec<OsString>) -> ExitCode {
    let arg0 = args.first().map(|a| basename(a)).unwrap_or_default();
    if let Some(applet) = lookup(&arg0) {
        return run(&arg0, applet, args);
    }
    let Some(first) = args.get(1).map(|a| a.to_string_lossy().into_owned()) else {
        print_usage();
        return ExitCode::from(2);
    };
    match first.as_str() {
        "--version" | "-V" | "version" => {
            println!("talosbox {}", crate::version::describe());
            ExitCode::SUCCESS
        }
        "--help" | "-h" | "help" => {
            print_usage();
            ExitCode::SUCCESS
        }
        "install-links" => install_links(&args[2..]),
        name => match lookup(name) {
            Some(applet) => run(name, applet, args[1..].to_vec()),
            None => {
                eprintln!("talosbox: unknown applet {name:?}; valid names: {}", names());
                ExitCode::from(2)
            }
        },
    }
}

/// Whether the applet `name` exists and is built (machined starts only built services).
pub fn is_built(name: &str) -> bool {
    matches!(lookup(name), Some(Some(_)))
}

fn lookup(name: &str) -> Option<Option<Main>> {
    APPLETS.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
}

fn run(name: &str, applet: Option<Main>, args: Vec<OsString>) -> ExitCode {
    match applet {
        Some(main) => main(args),
        None => {
            eprintln!("talosbox: {name} is not built yet in talosbox {}", crate::version::describe());
            ExitCode::FAILURE
        }
    }
}

fn print_usage() {
    println!(
        "talosbox {}: one binary, many names.\n\n\
         usage: talosbox <applet> [args...]   or start it through a symlink named after the applet\n\
         \x20      talosbox install-links DIR   create talosctl, imager and operator symlinks in DIR (put DIR on PATH)\n\
         \x20      talosbox --version\n\n\
         applets: {}",
        crate::version::describe(),
        names()
    );
}

fn install_links(args: &[OsString]) -> ExitCode {
    let [dir] = args else {
        eprintln!("talosbox install-links: expected exactly one argument, the directory (got {})", args.len());
        return ExitCode::from(2);
    };
    match create_links(Path::new(dir)) {
        Ok(made) => {
            for link in made {
                println!("{}", link.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("talosbox install-links: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error("finding this binary's path: {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error("creating directory {}: {source}", dir.display())]
    CreateDir { dir: PathBuf, source: std::io::Error },
    #[error("{} exists and is not a symlink; not replacing it", link.display())]
    NotALink { link: PathBuf },
    #[error("linking {} to {}: {source}", link.display(), target.display())]
    Link { link: PathBuf, target: PathBuf, source: std::io::Error },
}

/// The applets a workstation runs. The node-side names (init, machined, reboot, poweroff …)
/// are left out: on a workstation's PATH they would shadow the host's own commands.
const WORKSTATION: &[&str] = &["talosctl", "imager", "operator"];

/// Creates (or replaces) a symlink per workstation applet in `dir`, pointing at this binary.
fn create_links(dir: &Path) -> Result<Vec<PathBuf>, LinkError> {
    let target = std::env::current_exe().map_err(LinkError::CurrentExe)?;
    std::fs::create_dir_all(dir).map_err(|source| LinkError::CreateDir { dir: dir.to_path_buf(), source })?;
    let mut made = Vec::new();
    for name in WORKSTATION {
        let link = dir.join(name);
        match std::fs::symlink_metadata(&link) {
            Ok(md) if md.file_type().is_symlink() => {
                std::fs::remove_file(&link).map_err(|source| LinkError::Link {
                    link: link.clone(),
                    target: target.clone(),
                    source,
                })?;
            }
            Ok(_) => return Err(LinkError::NotALink { link }),
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&target, &link).map_err(|source| LinkError::Link {
            link: link.clone(),
            target: target.clone(),
            source,
        })?;
        made.push(link);
    }
    Ok(made)
}

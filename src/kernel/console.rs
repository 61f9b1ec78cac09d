//! The console: attaching it to init's standard streams, `[talosbox] …` lines on it (the
//! serial console when machined is PID 1), and the uptime those lines carry; and beside it the
//! plainer lines a node service (apid, trustd) writes to its own log. Writing never
//! fails loudly: a broken console must not take PID 1 down (`println!` would panic).
//!
//! The lines are an interface: the provisioner and the VM tests read them, so their fixed
//! parts are constants here, not copies.

use std::io::Write;
use std::path::Path;

/// What every console line starts with.
pub const PREFIX: &str = "[talosbox]";
/// What a stage line starts with: `[talosbox] stage: maintenance`.
pub const STAGE_PREFIX: &str = "[talosbox] stage: ";
/// What init's last line starts with when the boot fails (after the prefix).
pub const INIT_FAILED: &str = "init: FAILED";

type Tap = Box<dyn Fn(&str) + Send + Sync>;
static TAP: std::sync::OnceLock<Tap> = std::sync::OnceLock::new();

/// Also hands every console line (without the prefix) to `tap`: machined keeps them as its
/// own log, which `talosctl logs machined` reads. Set once; later calls are ignored.
pub fn set_tap(tap: impl Fn(&str) + Send + Sync + 'static) {
    let _ = TAP.set(Box::new(tap));
}

fn tap(text: &str) {
    if let Some(t) = TAP.get() {
        t(text);
    }
}

/// Writes `[talosbox] <message>` and a newline, ignoring errors.
pub fn line(message: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{PREFIX} {message}");
    let _ = out.flush();
    drop(out);
    tap(message);
}

/// The line announcing a stage (Talos's stage names: `maintenance`, `running` …).
pub fn stage_line(stage: &str) -> String {
    format!("{STAGE_PREFIX}{stage}")
}

/// Writes the line announcing `stage`.
pub fn stage(stage: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", stage_line(stage));
    let _ = out.flush();
    drop(out);
    tap(&format!("stage: {stage}"));
}

/// One line of a node service's log (its stderr, which machined captures, not the console).
/// A write that fails (machined gone) is dropped: a service must not die of its log.
pub fn log_line(service: &str, message: &str) {
    let _ = writeln!(std::io::stderr(), "{service}: {message}");
}

/// Seconds since boot with two decimals (`"3.41"`), for console lines; `"?"` if unreadable.
pub fn uptime() -> String {
    uptime_secs().map(|s| format!("{s:.2}")).unwrap_or_else(|_| "?".to_string())
}

/// Errors attaching the console.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("opening console {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("making {path} stdin/stdout/stderr: {source}")]
    Dup { path: String, source: std::io::Error },
}

/// Points stdin, stdout and stderr at `path` (normally `/dev/console`). The kernel opens the
/// console for init only if the initramfs carries a `/dev/console` node; after devtmpfs is
/// mounted this makes sure init's messages reach the console either way.
pub fn attach_console(path: &Path) -> Result<(), ConsoleError> {
    use rustix::fs::{Mode, OFlags};
    let name = || path.display().to_string();
    let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| ConsoleError::Open { path: name(), source: e.into() })?;
    rustix::stdio::dup2_stdin(&fd)
        .and_then(|()| rustix::stdio::dup2_stdout(&fd))
        .and_then(|()| rustix::stdio::dup2_stderr(&fd))
        .map_err(|e| ConsoleError::Dup { path: name(), source: e.into() })
}

/// Errors reading the kernel's clock files.
#[derive(Debug, thiserror::Error)]
pub enum UptimeError {
    #[error("reading {path}: {source}")]
    Read { path: &'static str, source: std::io::Error },
    #[error("parsing {path}: unexpected content {content:?}")]
    Parse { path: &'static str, content: String },
}

/// Seconds since boot, from `/proc/uptime` (needs /proc mounted).
pub fn uptime_secs() -> Result<f64, UptimeError> {
    const PATH: &str = "/proc/uptime";
    let content =
        std::fs::read_to_string(Path::new(PATH)).map_err(|source| UptimeError::Read { path: PATH, source })?;
    parse_uptime(&content).ok_or_else(|| UptimeError::Parse { path: PATH, content: content.trim().to_string() })
}

fn parse_uptime(content: &str) -> Option<f64> {
    content.split_whitespace().next()?.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::{parse_uptime, stage_line};

    #[test]
    fn stage_lines_start_with_the_prefix() {
        assert_eq!(stage_line("maintenance"), "[talosbox] stage: maintenance");
        assert!(super::STAGE_PREFIX.starts_with(super::PREFIX));
    }

    #[test]
    fn uptime_table() {
        let cases: &[(&str, Option<f64>)] = &[
            ("1.23 4.56\n", Some(1.23)),
            ("0.00 0.00", Some(0.0)),
            ("  7 9", Some(7.0)),
            ("", None),
            ("abc 1", None),
            ("-1 0", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_uptime(input), *want, "input {input:?}");
        }
    }
}

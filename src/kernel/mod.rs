//! Kernel adapters: thin, typed wrappers over the syscalls and kernel files the node needs
//! (mounts, loop devices, module loading, the kernel command line).
//!
//! This is the only place in the crate allowed to hold `unsafe`, each block with a `// SAFETY:`
//! line. Parsing and decisions stay pure and table-tested here; the code that touches the kernel
//! stays thin. Nothing here shells out to `mount`, `losetup` or `modprobe`, and nothing here may
//! panic on a runtime path: PID 1 calls into it.

pub mod cmdline;
pub mod loopdev;
pub mod modules;
pub mod mount;
pub mod power;

use std::path::Path;

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
    use super::parse_uptime;

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

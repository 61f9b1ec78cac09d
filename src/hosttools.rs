//! Host programs that build-time code drives (the imager, the QEMU provisioner), and the Debian
//! packages that provide them.
//!
//! Finding a tool, saying in one error everything that is missing with the command that
//! installs it, and running a tool with its stderr in the error is all this does. It never
//! installs anything, and nothing on a node uses it: the node's runtime path never shells out.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A program (or data file) needed from the host, and its Debian package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub name: &'static str,
    pub package: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(
        "missing host tools: {}; install with: apt-get install -y {}",
        missing.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "),
        packages(missing).join(" ")
    )]
    Missing { missing: Vec<(String, String)> },
    #[error("starting {tool} ({what}): {source}")]
    Spawn { tool: &'static str, what: String, source: std::io::Error },
    #[error("{tool} failed ({what}): {status}: {stderr}")]
    Failed { tool: &'static str, what: String, status: std::process::ExitStatus, stderr: String },
}

/// The distinct packages of the missing items, in first-seen order.
fn packages(missing: &[(String, String)]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for (_, p) in missing {
        if !out.contains(&p.as_str()) {
            out.push(p);
        }
    }
    out
}

/// Looks a program up on `$PATH` and in the sbin directories (mkfs.fat and other root tools
/// live there, and an ordinary user's PATH often lacks them).
pub fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Checks every tool and data file at once, so the user installs them in one go.
pub fn require(tools: &[Tool], files: &[(&Path, &str)]) -> Result<(), HostError> {
    let mut missing: Vec<(String, String)> = Vec::new();
    for t in tools {
        if find(t.name).is_none() && !missing.iter().any(|(n, _)| n == t.name) {
            missing.push((t.name.to_string(), t.package.to_string()));
        }
    }
    for (path, package) in files {
        if !path.exists() {
            missing.push((path.display().to_string(), package.to_string()));
        }
    }
    if missing.is_empty() { Ok(()) } else { Err(HostError::Missing { missing }) }
}

/// A command for `tool`, resolved to its full path when found.
pub fn command(tool: Tool) -> Command {
    Command::new(find(tool.name).unwrap_or_else(|| PathBuf::from(tool.name)))
}

/// Runs `cmd` to completion; a non-zero exit is an error carrying the tool's stderr.
pub fn run(tool: Tool, what: &str, cmd: &mut Command) -> Result<Output, HostError> {
    let out = cmd.output().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            return HostError::Missing { missing: vec![(tool.name.to_string(), tool.package.to_string())] };
        }
        HostError::Spawn { tool: tool.name, what: what.to_string(), source }
    })?;
    if !out.status.success() {
        return Err(HostError::Failed {
            tool: tool.name,
            what: what.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_and_files_are_one_error_naming_each_package_once() {
        let tools = [
            Tool { name: "talosbox-no-such-tool-a", package: "pkg-a" },
            Tool { name: "talosbox-no-such-tool-b", package: "pkg-a" },
            Tool { name: "sh", package: "dash" },
        ];
        let err = require(&tools, &[(Path::new("/nonexistent/OVMF_CODE_4M.fd"), "ovmf")]).unwrap_err().to_string();
        assert_eq!(
            err,
            "missing host tools: talosbox-no-such-tool-a, talosbox-no-such-tool-b, /nonexistent/OVMF_CODE_4M.fd; \
             install with: apt-get install -y pkg-a ovmf"
        );
        assert!(require(&[Tool { name: "sh", package: "dash" }], &[]).is_ok());
    }

    #[test]
    fn failures_carry_stderr_and_absence_names_the_package() {
        let sh = Tool { name: "sh", package: "dash" };
        let err = run(sh, "failing on purpose", command(sh).args(["-c", "echo oops >&2; exit 3"])).unwrap_err();
        assert!(
            err.to_string().contains("sh failed (failing on purpose)") && err.to_string().ends_with("oops"),
            "{err}"
        );
        let ghost = Tool { name: "talosbox-no-such-tool", package: "pkg-x" };
        let err = run(ghost, "x", &mut command(ghost)).unwrap_err().to_string();
        assert!(err.contains("apt-get install -y pkg-x"), "{err}");
    }
}

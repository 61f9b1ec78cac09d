//! `talosctl apply-config -f FILE [-p PATCH]…`: a machine configuration (patched first, if
//! asked) applied to every node, the node's warnings and mode details printed. The apply half
//! (the mode flags and the call) is shared with `patch` and `edit`.

use std::process::ExitCode;
use std::time::Duration;

use super::Cli;
use super::node::{per_node, st};
use crate::client::api::{Session, Target};
use crate::proto::machine::{self as m, apply_configuration_request::Mode};

/// How an apply goes: shared by apply-config, patch and edit.
#[derive(Debug, Clone, clap::Args)]
pub struct ApplyFlags {
    /// auto, no-reboot, reboot, staged or try.
    #[arg(short = 'm', long, default_value = "auto")]
    pub(super) mode: String,
    /// Show what would change, change nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// How long a `--mode try` configuration stays before it is rolled back.
    #[arg(long, default_value = "1m", value_parser = super::parse_duration)]
    pub(super) timeout: Duration,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The machine configuration file.
    #[arg(short = 'f', long)]
    file: std::path::PathBuf,
    /// Patches applied to the file first: `@file.yaml` or inline YAML/JSON (repeatable).
    #[arg(short = 'p', long)]
    config_patch: Vec<String>,
    #[command(flatten)]
    apply: ApplyFlags,
}

pub(super) fn apply_mode(mode: &str) -> Result<Mode, String> {
    Ok(match mode {
        "auto" => Mode::Auto,
        "no-reboot" => Mode::NoReboot,
        #[allow(deprecated)]
        "reboot" => Mode::Reboot,
        "staged" => Mode::Staged,
        "try" => Mode::Try,
        other => return Err(format!("--mode: unknown mode {other:?} (auto, no-reboot, reboot, staged, try)")),
    })
}

pub(super) async fn apply_text(
    session: &Session,
    target: &Target,
    text: String,
    mode: Mode,
    dry_run: bool,
    timeout: Duration,
) -> Result<(), String> {
    let request = m::ApplyConfigurationRequest {
        data: text.into_bytes(),
        mode: mode as i32,
        dry_run,
        try_mode_timeout: (mode == Mode::Try).then(|| prost_types::Duration::try_from(timeout).unwrap_or_default()),
    };
    let reply = session.machine().apply_configuration(session.request(target, request)).await.map_err(st)?.into_inner();
    for msg in reply.messages {
        for w in &msg.warnings {
            eprintln!("WARNING: {}: {w}", target.label(session));
        }
        let details = msg.mode_details.trim_end();
        if !details.is_empty() {
            println!("{details}");
        }
    }
    Ok(())
}

pub fn run(cli: &Cli, a: &ApplyArgs) -> ExitCode {
    let prepared = (|| {
        let mode = apply_mode(&a.apply.mode)?;
        let text = std::fs::read_to_string(&a.file).map_err(|e| format!("reading {}: {e}", a.file.display()))?;
        let text = super::generate::patched(&text, &a.config_patch, &a.file.display().to_string())?;
        Ok::<_, String>((mode, text))
    })();
    let (mode, text) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("talosctl apply-config: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (dry_run, timeout) = (a.apply.dry_run, a.apply.timeout);
    per_node(cli, "apply-config", |session, target| {
        let text = text.clone();
        async move { apply_text(&session, &target, text, mode, dry_run, timeout).await }
    })
}

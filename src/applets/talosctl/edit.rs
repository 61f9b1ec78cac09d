//! `talosctl edit machineconfig`: each node's configuration in force opened in `$EDITOR`, and
//! applied back with the apply-config flags when it changed. An edit that fails to apply is
//! kept in its file, whose name the error gives.

use std::process::ExitCode;

use super::Cli;
use super::apply_config::{ApplyFlags, apply_mode, apply_text};
use super::node::per_node;
use super::patch::machine_config;

#[derive(Debug, clap::Args)]
pub struct EditArgs {
    /// What to edit: `machineconfig` (or `mc`).
    resource: String,
    #[command(flatten)]
    apply: ApplyFlags,
}

const EDIT_HEADER: &str = "# Edit the machine configuration below; lines starting with '#' at the top are dropped.\n\
                           # Save and quit to apply it; quit without changes to leave it as it is.\n";

/// Runs `$VISUAL`, `$EDITOR` or `vi` on `path`, as a shell would (the variable may hold flags).
fn run_editor(path: &std::path::Path) -> Result<(), String> {
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|e| !e.is_empty())
        .or_else(|| std::env::var("EDITOR").ok().filter(|e| !e.is_empty()))
        .unwrap_or_else(|| "vi".to_string());
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("talosctl-edit")
        .arg(path)
        .status()
        .map_err(|e| format!("running the editor {editor:?}: {e}"))?;
    if !status.success() {
        return Err(format!("the editor {editor:?} failed ({status}); nothing applied"));
    }
    Ok(())
}

pub fn run(cli: &Cli, a: &EditArgs) -> ExitCode {
    if !["machineconfig", "machineconfigs", "mc"].contains(&a.resource.to_lowercase().as_str()) {
        eprintln!("talosctl edit: only machineconfig can be edited, not {:?}", a.resource);
        return ExitCode::from(2);
    }
    let mode = match apply_mode(&a.apply.mode) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("talosctl edit: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (dry_run, timeout) = (a.apply.dry_run, a.apply.timeout);
    per_node(cli, "edit", |session, target| async move {
        let text = machine_config(&session, &target).await?;
        let file = tempfile_in_tmp(&target.label(&session).replace(['.', ':', '/'], "-"))?;
        super::generate::write_private(&file, &format!("{EDIT_HEADER}{text}"))?;
        run_editor(&file)?;
        let edited = std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
        let edited: String = {
            let mut lines = edited.lines().peekable();
            while lines.peek().is_some_and(|l| l.starts_with('#')) {
                lines.next();
            }
            lines.map(|l| format!("{l}\n")).collect()
        };
        if edited.trim() == text.trim() {
            let _ = std::fs::remove_file(&file);
            println!("{}: apply was skipped: no changes detected", target.label(&session));
            return Ok(());
        }
        match apply_text(&session, &target, edited, mode, dry_run, timeout).await {
            Ok(()) => {
                let _ = std::fs::remove_file(&file);
                Ok(())
            }
            Err(e) => Err(format!("{e} (your edit is kept in {})", file.display())),
        }
    })
}

/// A fresh file name under the temporary directory for one node's edit.
fn tempfile_in_tmp(label: &str) -> Result<std::path::PathBuf, String> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    Ok(std::env::temp_dir().join(format!("talosctl-edit-{label}-{}-{nanos}.yaml", std::process::id())))
}

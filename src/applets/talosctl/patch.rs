//! `talosctl patch machineconfig -p PATCH…`: each node's configuration in force, read through
//! the `State` service, patched here and applied back with the apply-config flags.

use std::process::ExitCode;

use super::Cli;
use super::apply_config::{ApplyFlags, apply_mode, apply_text};
use super::node::{per_node, st};
use crate::client::api::{Session, Target};

#[derive(Debug, clap::Args)]
pub struct PatchArgs {
    /// What to patch: `machineconfig` (or `mc`).
    resource: String,
    /// The patch: `@file.yaml` or inline YAML/JSON (repeatable).
    #[arg(short = 'p', long = "patch", required = true)]
    patches: Vec<String>,
    #[command(flatten)]
    apply: ApplyFlags,
}

pub fn run(cli: &Cli, a: &PatchArgs) -> ExitCode {
    if !["machineconfig", "machineconfigs", "mc"].contains(&a.resource.to_lowercase().as_str()) {
        eprintln!("talosctl patch: only machineconfig can be patched, not {:?}", a.resource);
        return ExitCode::from(2);
    }
    let mode = match apply_mode(&a.apply.mode) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("talosctl patch: {e}");
            return ExitCode::FAILURE;
        }
    };
    let patches = a.patches.clone();
    let (dry_run, timeout) = (a.apply.dry_run, a.apply.timeout);
    per_node(cli, "patch", |session, target| {
        let patches = patches.clone();
        async move {
            let text = machine_config(&session, &target).await?;
            let patched = super::generate::patched(&text, &patches, "the node's machine configuration")?;
            apply_text(&session, &target, patched, mode, dry_run, timeout).await
        }
    })
}

/// The node's configuration in force, as text.
pub(super) async fn machine_config(session: &Session, target: &Target) -> Result<String, String> {
    use crate::proto::cosi::resource as wire;
    let request = wire::GetRequest {
        namespace: "config".into(),
        r#type: "MachineConfigs.config.talos.dev".into(),
        id: "v1alpha1".into(),
        options: None,
    };
    let current = session.state().get(session.request(target, request)).await.map_err(st)?.into_inner();
    let text = current.resource.and_then(|r| r.spec).map(|s| s.yaml_spec).unwrap_or_default();
    if text.trim().is_empty() {
        return Err("the node has no machine configuration".into());
    }
    Ok(text)
}

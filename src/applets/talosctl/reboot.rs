//! `talosctl reboot [-m default|powercycle]`: each node reboots; the actor id of the request
//! is printed, for following it in `talosctl events`.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};
use crate::proto::machine as m;

#[derive(Debug, clap::Args)]
pub struct RebootArgs {
    /// default or powercycle.
    #[arg(short = 'm', long, default_value = "default")]
    mode: String,
}

pub fn run(cli: &Cli, a: &RebootArgs) -> ExitCode {
    if !["default", "powercycle"].contains(&a.mode.as_str()) {
        eprintln!("talosctl reboot: --mode: {:?} is not default or powercycle", a.mode);
        return ExitCode::from(2);
    }
    let mode = if a.mode == "powercycle" { 1 } else { 0 };
    per_node(cli, "reboot", |session, target| async move {
        let label = target.label(&session).to_string();
        let r = session.machine().reboot(session.request(&target, m::RebootRequest { mode })).await.map_err(st)?;
        let actor: Vec<_> = r.into_inner().messages.into_iter().map(|m| m.actor_id).collect();
        println!("{label}: reboot requested (actor id {})", actor.join(","));
        Ok(())
    })
}

//! `talosctl shutdown [--force]`: each node powers off; the actor id of the request is
//! printed, for following it in `talosctl events`.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};
use crate::proto::machine as m;

#[derive(Debug, clap::Args)]
pub struct ShutdownArgs {
    /// Skip stopping services gracefully.
    #[arg(long)]
    force: bool,
}

pub fn run(cli: &Cli, a: &ShutdownArgs) -> ExitCode {
    let force = a.force;
    per_node(cli, "shutdown", |session, target| async move {
        let label = target.label(&session).to_string();
        let mut machine = session.machine();
        let r = machine.shutdown(session.request(&target, m::ShutdownRequest { force }));
        let actor: Vec<_> = r.await.map_err(st)?.into_inner().messages.into_iter().map(|m| m.actor_id).collect();
        println!("{label}: shutdown requested (actor id {})", actor.join(","));
        Ok(())
    })
}

//! `talosctl reset`: each node wipes what it is told to (the whole system disk, chosen system
//! volumes, user disks) and reboots or powers off; the actor id of the request is printed,
//! for following it in `talosctl events`.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};
use crate::proto::machine as m;

#[derive(Debug, clap::Args)]
pub struct ResetArgs {
    /// Leave the cluster first (etcd; inert here).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    graceful: bool,
    /// Reboot afterwards instead of powering off.
    #[arg(long)]
    reboot: bool,
    /// Wipe only these system volumes (e.g. STATE,EPHEMERAL); without it the whole system
    /// disk is wiped (unless --wipe-mode user-disks).
    #[arg(long, value_delimiter = ',')]
    system_labels_to_wipe: Vec<String>,
    /// Also wipe these disks (device paths, e.g. /dev/vdb); never the system disk.
    #[arg(long, value_delimiter = ',')]
    user_disks_to_wipe: Vec<String>,
    /// What to wipe: all, system-disk or user-disks.
    #[arg(long, default_value = "all", value_parser = ["all", "system-disk", "user-disks"])]
    wipe_mode: String,
}

pub fn run(cli: &Cli, a: &ResetArgs) -> ExitCode {
    let mode = match a.wipe_mode.as_str() {
        "system-disk" => m::reset_request::WipeMode::SystemDisk,
        "user-disks" => m::reset_request::WipeMode::UserDisks,
        _ => m::reset_request::WipeMode::All,
    };
    let request = m::ResetRequest {
        graceful: a.graceful,
        reboot: a.reboot,
        system_partitions_to_wipe: a
            .system_labels_to_wipe
            .iter()
            .map(|label| m::ResetPartitionSpec { label: label.clone(), wipe: true })
            .collect(),
        user_disks_to_wipe: a.user_disks_to_wipe.clone(),
        mode: mode as i32,
    };
    per_node(cli, "reset", |session, target| {
        let request = request.clone();
        async move {
            let label = target.label(&session).to_string();
            let r = session.machine().reset(session.request(&target, request)).await.map_err(st)?;
            let actor: Vec<_> = r.into_inner().messages.into_iter().map(|m| m.actor_id).collect();
            println!("{label}: reset requested (actor id {})", actor.join(","));
            Ok(())
        }
    })
}

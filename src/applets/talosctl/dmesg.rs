//! `talosctl dmesg [-f] [--tail]`: the kernel log, streamed from each node.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, print_stream, st};
use crate::proto::machine as m;

#[derive(Debug, clap::Args)]
pub struct DmesgArgs {
    /// Keep streaming new messages.
    #[arg(short = 'f', long)]
    follow: bool,
    /// With --follow: only new messages.
    #[arg(long)]
    tail: bool,
}

pub fn run(cli: &Cli, a: &DmesgArgs) -> ExitCode {
    let many = cli.nodes.len() > 1;
    per_node(cli, "dmesg", |session, target| async move {
        let request = m::DmesgRequest { follow: a.follow, tail: a.tail };
        let stream = session.machine().dmesg(session.request(&target, request)).await.map_err(st)?.into_inner();
        print_stream(&session, &target, many, stream).await
    })
}

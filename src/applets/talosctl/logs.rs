//! `talosctl logs SERVICE [-f] [--tail N]`: a system service's log, streamed from each node.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, print_stream, st};
use crate::proto::machine as m;

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The service (`machined`, `apid`, `trustd`, …).
    service: String,
    /// Keep streaming new lines.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Only the last N lines (-1: all).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    tail: i32,
}

pub fn run(cli: &Cli, a: &LogsArgs) -> ExitCode {
    let many = cli.nodes.len() > 1;
    per_node(cli, "logs", |session, target| async move {
        let request = m::LogsRequest {
            namespace: "system".into(),
            id: a.service.clone(),
            driver: 0,
            follow: a.follow,
            tail_lines: a.tail,
        };
        let stream = session.machine().logs(session.request(&target, request)).await.map_err(st)?.into_inner();
        print_stream(&session, &target, many, stream).await
    })
}

//! `talosctl read PATH` (`cat`): a file's contents, streamed from each node.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, print_stream, st};
use crate::proto::machine as m;

#[derive(Debug, clap::Args)]
pub struct ReadArgs {
    path: String,
}

pub fn run(cli: &Cli, a: &ReadArgs) -> ExitCode {
    let many = cli.nodes.len() > 1;
    per_node(cli, "read", |session, target| async move {
        let request = m::ReadRequest { path: a.path.clone() };
        let stream = session.machine().read(session.request(&target, request)).await.map_err(st)?.into_inner();
        print_stream(&session, &target, many, stream).await
    })
}

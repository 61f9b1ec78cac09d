//! `talosctl memory [-v]` (`free`): each node's memory in MiB, as `free` shows it, or every
//! /proc/meminfo figure.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};
use super::output::Table;

#[derive(Debug, clap::Args)]
pub struct MemoryArgs {
    /// Every /proc/meminfo figure, not the summary.
    #[arg(short = 'v', long)]
    verbose: bool,
}

pub fn run(cli: &Cli, a: &MemoryArgs) -> ExitCode {
    let verbose = a.verbose;
    per_node(cli, "memory", |session, target| async move {
        let reply = session.machine().memory(session.request(&target, ())).await.map_err(st)?.into_inner();
        let mib = |kib: u64| (kib / 1024).to_string();
        for msg in reply.messages {
            let mi = msg.meminfo.unwrap_or_default();
            if verbose {
                println!("NODE: {}", target.label(&session));
                println!("{mi:#?}");
                continue;
            }
            let mut table = Table::new(["NODE", "TOTAL", "USED", "FREE", "SHARED", "BUFFERS", "CACHE", "AVAILABLE"]);
            let used = mi.memtotal.saturating_sub(mi.memfree + mi.cached + mi.buffers);
            table.row([
                target.label(&session).to_string(),
                mib(mi.memtotal),
                mib(used),
                mib(mi.memfree),
                mib(mi.shmem),
                mib(mi.buffers),
                mib(mi.cached),
                mib(mi.memavailable),
            ]);
            table.print();
        }
        Ok(())
    })
}

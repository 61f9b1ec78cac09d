//! `talosctl processes [-s rss|cpu]` (`ps`): each node's processes, largest first.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};
use super::output::{Table, si_bytes};

#[derive(Debug, clap::Args)]
pub struct ProcessesArgs {
    /// Sort by `rss` or `cpu`.
    #[arg(short = 's', long, default_value = "rss")]
    sort: String,
}

pub fn run(cli: &Cli, a: &ProcessesArgs) -> ExitCode {
    let by_cpu = match a.sort.as_str() {
        "rss" => false,
        "cpu" => true,
        other => {
            eprintln!("talosctl processes: --sort: {other:?} is not rss or cpu");
            return ExitCode::from(2);
        }
    };
    per_node(cli, "processes", |session, target| async move {
        let reply = session.machine().processes(session.request(&target, ())).await.map_err(st)?.into_inner();
        let mut table =
            Table::new(["NODE", "PID", "STATE", "THREADS", "CPU-TIME", "VIRTMEM", "RESMEM", "LABEL", "COMMAND"]);
        for msg in reply.messages {
            let mut procs = msg.processes;
            if by_cpu {
                procs.sort_by(|a, b| b.cpu_time.total_cmp(&a.cpu_time));
            } else {
                procs.sort_by_key(|p| std::cmp::Reverse(p.resident_memory));
            }
            for p in procs {
                let command = if p.args.is_empty() { p.command.clone() } else { p.args.clone() };
                table.row([
                    target.label(&session).to_string(),
                    p.pid.to_string(),
                    p.state,
                    p.threads.to_string(),
                    format!("{:.2}", p.cpu_time),
                    si_bytes(p.virtual_memory),
                    si_bytes(p.resident_memory),
                    p.label,
                    command,
                ]);
            }
        }
        table.print();
        Ok(())
    })
}

//! `talosctl mounts` (`df`): each node's mounted filesystems and their use.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};
use super::output::Table;

pub fn run(cli: &Cli) -> ExitCode {
    per_node(cli, "mounts", |session, target| async move {
        let reply = session.machine().mounts(session.request(&target, ())).await.map_err(st)?.into_inner();
        let mut table =
            Table::new(["NODE", "FILESYSTEM", "SIZE(GB)", "USED(GB)", "AVAILABLE(GB)", "PERCENT USED", "MOUNTED ON"]);
        let gb = |b: u64| format!("{:.2}", b as f64 / 1e9);
        for msg in reply.messages {
            for s in msg.stats {
                let used = s.size.saturating_sub(s.available);
                let pct =
                    if s.size == 0 { "-".to_string() } else { format!("{:.2}%", used as f64 * 100.0 / s.size as f64) };
                table.row([
                    target.label(&session).to_string(),
                    s.filesystem,
                    gb(s.size),
                    gb(used),
                    gb(s.available),
                    pct,
                    s.mounted_on,
                ]);
            }
        }
        table.print();
        Ok(())
    })
}

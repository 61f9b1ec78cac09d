//! `talosctl time [--check SERVER]`: each node's clock beside a time server's, as the node
//! measures them, and the offset between the two.

use std::process::ExitCode;
use std::time::Duration;

use super::Cli;
use super::node::{per_node, st};
use super::output::Table;

#[derive(Debug, clap::Args)]
pub struct TimeArgs {
    /// Ask this time server (host or address, optional :port) instead of the node's first.
    #[arg(short = 'c', long)]
    check: Option<String>,
}

pub fn run(cli: &Cli, a: &TimeArgs) -> ExitCode {
    use crate::proto::time::TimeRequest;
    let check = a.check.clone();
    per_node(cli, "time", |session, target| {
        let check = check.clone();
        async move {
            let reply = match check {
                Some(server) => session.time().time_check(session.request(&target, TimeRequest { server })).await,
                None => session.time().time(session.request(&target, ())).await,
            }
            .map_err(st)?
            .into_inner();
            let mut table = Table::new(["NODE", "NTP-SERVER", "NODE-TIME", "NTP-SERVER-TIME", "OFFSET"]);
            for msg in reply.messages {
                let (local, remote) = (msg.localtime.unwrap_or_default(), msg.remotetime.unwrap_or_default());
                table.row([
                    target.label(&session).to_string(),
                    msg.server,
                    rfc3339(&local),
                    rfc3339(&remote),
                    offset_text(&local, &remote),
                ]);
            }
            table.print();
            Ok(())
        }
    })
}

/// A protobuf timestamp as RFC 3339 UTC, to the millisecond.
fn rfc3339(t: &prost_types::Timestamp) -> String {
    let millis = u32::try_from(t.nanos).unwrap_or(0) / 1_000_000 * 1_000_000;
    let at = std::time::UNIX_EPOCH + Duration::new(u64::try_from(t.seconds).unwrap_or(0), millis);
    crate::cosi::timestamp::format(at)
}

/// The server's time minus the node's, signed, in seconds.
fn offset_text(local: &prost_types::Timestamp, remote: &prost_types::Timestamp) -> String {
    let nanos = |t: &prost_types::Timestamp| i128::from(t.seconds) * 1_000_000_000 + i128::from(t.nanos);
    let d = nanos(remote) - nanos(local);
    format!(
        "{}{}.{:06}s",
        if d < 0 { "-" } else { "+" },
        d.unsigned_abs() / 1_000_000_000,
        d.unsigned_abs() % 1_000_000_000 / 1000
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_print_as_rfc3339_and_offsets_signed() {
        let t = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
        assert_eq!(super::rfc3339(&t(0, 0)), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(&t(1_795_000_000, 123_456_789)), "2026-11-18T11:06:40.123Z");
        assert_eq!(super::rfc3339(&t(951_782_400, 999_999)), "2000-02-29T00:00:00Z");
        assert_eq!(super::offset_text(&t(10, 0), &t(10, 12_345_678)), "+0.012345s");
        assert_eq!(super::offset_text(&t(10, 0), &t(8, 500_000_000)), "-1.500000s");
    }
}

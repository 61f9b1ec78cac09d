//! `talosctl list [PATH] [-l] [-r] [-d N] [-H]` (`ls`): a directory on each node, as a table;
//! the long form prints modes as Go's `fs.FileMode` does, as Talos's talosctl shows them.

use std::process::ExitCode;
use std::time::Duration;

use super::Cli;
use super::node::{per_node, st};
use super::output::{Table, si_bytes};
use crate::proto::machine as m;

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The directory (default /).
    #[arg(default_value = "/")]
    path: String,
    /// Long listing: mode, owner, size, time.
    #[arg(short = 'l', long)]
    long: bool,
    /// Recurse.
    #[arg(short = 'r', long)]
    recurse: bool,
    /// Recursion depth (with -r; 0: unlimited).
    #[arg(short = 'd', long, default_value_t = 0)]
    depth: i32,
    /// Sizes in human units.
    #[arg(short = 'H', long)]
    humanize: bool,
}

fn go_mode_string(mode: u32) -> String {
    // Go's fs.FileMode.String(): type letters, then rwx.
    const TYPES: &[(u32, char)] = &[
        (1 << 31, 'd'),
        (1 << 30, 'a'),
        (1 << 29, 'l'),
        (1 << 28, 'T'),
        (1 << 27, 'L'),
        (1 << 26, 'D'),
        (1 << 25, 'p'),
        (1 << 24, 'S'),
        (1 << 23, 'u'),
        (1 << 22, 'g'),
        (1 << 21, 'c'),
        (1 << 20, 't'),
        (1 << 19, '?'),
    ];
    let mut s: String = TYPES.iter().filter(|(bit, _)| mode & bit != 0).map(|(_, c)| *c).collect();
    if s.is_empty() {
        s.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    s
}

pub fn run(cli: &Cli, a: &ListArgs) -> ExitCode {
    let (root, recurse, depth, long, human) = (a.path.clone(), a.recurse, a.depth, a.long, a.humanize);
    per_node(cli, "list", |session, target| {
        let root = root.clone();
        async move {
            let request = m::ListRequest {
                root,
                recurse,
                recursion_depth: if recurse { depth } else { 1 },
                types: Vec::new(),
                report_xattrs: false,
            };
            let mut stream = session.machine().list(session.request(&target, request)).await.map_err(st)?.into_inner();
            let label = target.label(&session).to_string();
            let mut table = if long {
                Table::new(["NODE", "MODE", "UID", "GID", "SIZE(B)", "LASTMOD", "NAME"])
            } else {
                Table::new(["NODE", "NAME"])
            };
            while let Some(f) = stream.message().await.map_err(st)? {
                if !f.error.is_empty() {
                    eprintln!("talosctl list: {label}: {}: {}", f.name, f.error);
                    continue;
                }
                let mut name = if f.relative_name.is_empty() { f.name.clone() } else { f.relative_name.clone() };
                if !f.link.is_empty() {
                    name = format!("{name} -> {}", f.link);
                }
                if long {
                    let size = if human { si_bytes(f.size.max(0) as u64) } else { f.size.to_string() };
                    let when = std::time::UNIX_EPOCH + Duration::from_secs(f.modified.max(0) as u64);
                    table.row([
                        label.clone(),
                        go_mode_string(f.mode),
                        f.uid.to_string(),
                        f.gid.to_string(),
                        size,
                        crate::cosi::timestamp::format(when),
                        name,
                    ]);
                } else {
                    table.row([label.clone(), name]);
                }
            }
            table.print();
            Ok(())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::go_mode_string;

    #[test]
    fn file_modes_print_as_go_does() {
        assert_eq!(go_mode_string(0o644), "-rw-r--r--");
        assert_eq!(go_mode_string((1 << 31) | 0o755), "drwxr-xr-x");
        assert_eq!(go_mode_string((1 << 29) | 0o777), "Lrwxrwxrwx".replacen('L', "l", 1));
    }
}

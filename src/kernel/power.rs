//! Power: flush, unmount and reboot or power off the machine, the last things PID 1 does.
//!
//! The unmount plan is a pure function of `/proc/self/mountinfo` (tested without a kernel);
//! the effects are thin calls through `rustix`. Nothing here may panic: a failing step is
//! reported and the next one is tried, because the machine must go down regardless.

use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, UnmountFlags};
use rustix::system::RebootCommand;

/// What to do once everything is flushed and unmounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    PowerOff,
    Reboot,
}

impl std::fmt::Display for PowerAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PowerAction::PowerOff => "poweroff",
            PowerAction::Reboot => "reboot",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("unmounting {}: {source}", target.display())]
    Unmount { target: PathBuf, source: std::io::Error },
    #[error("remounting {} read-only: {source}", target.display())]
    RemountReadOnly { target: PathBuf, source: std::io::Error },
    #[error("reboot(2) with {action}: {source}")]
    Reboot { action: PowerAction, source: std::io::Error },
}

/// One line of `/proc/self/mountinfo`: the fields the unmount plan needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub mount_id: u32,
    pub parent_id: u32,
    pub mount_point: PathBuf,
    pub fs_type: String,
}

/// Parses `/proc/self/mountinfo` text. Lines that do not have the documented shape are
/// skipped: a plan from a partial table is better than no plan at shutdown.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_mountinfo_line).collect()
}

fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    let (left, right) = line.split_once(" - ")?;
    let mut fields = left.split(' ');
    let mount_id = fields.next()?.parse().ok()?;
    let parent_id = fields.next()?.parse().ok()?;
    let _dev = fields.next()?;
    let _root = fields.next()?;
    let mount_point = PathBuf::from(unescape(fields.next()?));
    let fs_type = right.split(' ').next()?.to_string();
    Some(MountEntry { mount_id, parent_id, mount_point, fs_type })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if bytes[i] == b'\\'
            && let Some(digits) = octal
        {
            out.push(digits.iter().fold(0u8, |v, d| v.wrapping_mul(8).wrapping_add(d - b'0')));
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What to unmount, in order: every mount but `/`, most recent first (the reverse of the
/// mountinfo order, so children go before their parents). The kernel's pseudo filesystems
/// that hold nothing to flush (proc, sysfs, devtmpfs …) are kept: the reboot call itself
/// needs nothing from them, and unmounting /proc early would hide the table we planned from.
pub fn unmount_plan(entries: &[MountEntry]) -> Vec<PathBuf> {
    const KEEP: &[&str] = &["proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "efivarfs"];
    entries
        .iter()
        .rev()
        .filter(|e| e.mount_point != Path::new("/"))
        .filter(|e| !KEEP.contains(&e.fs_type.as_str()))
        .map(|e| e.mount_point.clone())
        .collect()
}

/// Flushes every filesystem's dirty data to disk.
/// Sends SIGTERM to every process but this one, reaps until they are gone or `grace` runs
/// out, then SIGKILLs what is left and reaps again. For PID 1 on its way down: it never
/// signals itself. Returns how many processes needed SIGKILL.
pub fn terminate_all(grace: std::time::Duration) -> usize {
    use rustix::process::Signal;
    let deadline = std::time::Instant::now() + grace;
    signal_all(Signal::TERM);
    while std::time::Instant::now() < deadline {
        reap_exited();
        if other_pids().is_empty() {
            return 0;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let killed = signal_all(Signal::KILL);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < until && !other_pids().is_empty() {
        reap_exited();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    killed
}

/// Every process id but ours and kernel threads (which have no command line).
fn other_pids() -> Vec<rustix::process::Pid> {
    let me = rustix::process::getpid();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(rustix::process::Pid::from_raw)
        .filter(|pid| *pid != me)
        .filter(|pid| std::fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero())).is_ok_and(|c| !c.is_empty()))
        .collect()
}

fn signal_all(signal: rustix::process::Signal) -> usize {
    other_pids().into_iter().filter(|pid| rustix::process::kill_process(*pid, signal).is_ok()).count()
}

/// Collects every child that has exited, without waiting.
fn reap_exited() {
    use rustix::process::{WaitOptions, waitpid};
    while let Ok(Some(_)) = waitpid(None, WaitOptions::NOHANG) {}
}

/// How many TCP sockets in a `/proc/net/tcp` (or `tcp6`) table still hold data or a FIN the
/// peer has not acknowledged: a non-zero send queue, or FIN-WAIT-1, CLOSING or LAST-ACK.
pub fn unacknowledged_sockets(table: &str) -> usize {
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(state), Some(queues)) = (fields.get(3), fields.get(4)) else { return false };
            let sending = queues.split(':').next().and_then(|tx| u64::from_str_radix(tx, 16).ok()).unwrap_or(0) > 0;
            // FIN-WAIT-1, LAST-ACK, CLOSING (include/net/tcp_states.h).
            sending || matches!(*state, "04" | "09" | "0B")
        })
        .count()
}

/// Waits up to `limit` until the kernel has delivered what the stopped services wrote: the
/// answer to the API call that asked for this reboot is among it, and a reboot(2) right after
/// the last write would drop it with the NIC's queues.
pub fn wait_tcp_delivered(limit: std::time::Duration) -> usize {
    let start = std::time::Instant::now();
    loop {
        let pending: usize = ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .map(|p| std::fs::read_to_string(p).map(|t| unacknowledged_sockets(&t)).unwrap_or(0))
            .sum();
        if pending == 0 || start.elapsed() >= limit {
            return pending;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub fn sync() {
    rustix::fs::sync();
}

/// Unmounts everything the plan names, then remounts `/` read-only. Returns every failure
/// (each one skipped); the caller reports them and goes on to reboot.
pub fn unmount_all() -> Vec<PowerError> {
    let mut failures = Vec::new();
    let path = "/proc/self/mountinfo";
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(source) => {
            failures.push(PowerError::Read { path: path.to_string(), source });
            String::new()
        }
    };
    for target in unmount_plan(&parse_mountinfo(&text)) {
        if let Err(e) = rustix::mount::unmount(&target, UnmountFlags::empty()) {
            // Busy or already gone with its parent: detach lazily so it goes when it can.
            if rustix::mount::unmount(&target, UnmountFlags::DETACH).is_err() {
                failures.push(PowerError::Unmount { target, source: e.into() });
            }
        }
    }
    if let Err(e) = rustix::mount::mount_remount("/", MountFlags::RDONLY, "") {
        failures.push(PowerError::RemountReadOnly { target: PathBuf::from("/"), source: e.into() });
    }
    failures
}

/// Calls reboot(2). Returns only if the kernel refused (not PID 1's namespace, no
/// CAP_SYS_BOOT).
pub fn reboot(action: PowerAction) -> PowerError {
    let cmd = match action {
        PowerAction::PowerOff => RebootCommand::PowerOff,
        PowerAction::Reboot => RebootCommand::Restart,
    };
    match rustix::system::reboot(cmd) {
        Ok(()) => PowerError::Reboot { action, source: std::io::Error::other("reboot(2) returned") },
        Err(e) => PowerError::Reboot { action, source: e.into() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 0:21 / / ro,relatime shared:1 - squashfs /dev/loop0 ro
23 22 0:5 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw
24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:3 - sysfs sysfs rw
25 22 0:6 / /dev rw,nosuid shared:4 - devtmpfs devtmpfs rw,size=4k
26 22 0:23 / /run rw,nosuid,nodev shared:5 - tmpfs tmpfs rw
27 22 0:24 / /var rw,relatime shared:6 - tmpfs tmpfs rw
28 27 254:5 / /var/lib\\040data rw,relatime shared:7 - xfs /dev/vda5 rw
not a mountinfo line
";

    #[test]
    fn parses_mountinfo_and_unescapes() {
        let entries = parse_mountinfo(SAMPLE);
        assert_eq!(entries.len(), 7);
        assert_eq!(
            entries[0],
            MountEntry { mount_id: 22, parent_id: 1, mount_point: "/".into(), fs_type: "squashfs".into() }
        );
        assert_eq!(entries[6].mount_point, PathBuf::from("/var/lib data"));
        assert_eq!(entries[6].fs_type, "xfs");
        assert_eq!(entries[6].parent_id, 27);
    }

    #[test]
    fn plan_is_reverse_order_without_root_and_pseudo_filesystems() {
        let plan = unmount_plan(&parse_mountinfo(SAMPLE));
        let want: Vec<PathBuf> = ["/var/lib data", "/var", "/run"].iter().map(PathBuf::from).collect();
        assert_eq!(plan, want);
    }

    #[test]
    fn plan_of_this_host_never_names_root() {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let entries = parse_mountinfo(&text);
        assert!(!entries.is_empty(), "this host's mountinfo should parse");
        assert!(unmount_plan(&entries).iter().all(|p| p != Path::new("/")));
    }

    #[test]
    fn sockets_with_unacknowledged_data_or_fin_are_counted() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:C350 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1076 1 0 100 0 0 10 0
   1: 0F02000A:C350 0202000A:D2F0 01 00000000:00000000 00:00000000 00000000    50        0 2001 1 0 20 4 30 10 -1
   2: 0F02000A:C350 0202000A:D2F2 01 000001A4:00000000 01:00000014 00000000    50        0 2002 1 0 20 4 30 10 -1
   3: 0F02000A:C350 0202000A:D2F4 04 00000000:00000000 01:00000014 00000000     0        0 0 1 0 20 4 30 10 -1
   4: 0F02000A:C350 0202000A:D2F6 06 00000000:00000000 03:00000F00 00000000     0        0 0 3 0
";
        // The listener, an idle connection and TIME-WAIT are done; queued bytes and FIN-WAIT-1 are not.
        assert_eq!(unacknowledged_sockets(table), 2);
        assert_eq!(unacknowledged_sockets(""), 0);
    }
}

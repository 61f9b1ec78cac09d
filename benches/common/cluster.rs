//! What the API benches share: a control plane and a worker in container mode (real
//! processes on loopback addresses), configured with talosctl alone, and the figures of
//! their processes. Included with `#[path = "common/cluster.rs"] mod cluster;`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The bench's name, for its messages.
const BENCH: &str = env!("CARGO_CRATE_NAME");

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_talosbox"))
}

pub fn talosctl(dir: &Path, args: &[&str]) -> bool {
    Command::new(dir.join("talosctl"))
        .args(args)
        .current_dir(dir)
        .env("TALOSCONFIG", dir.join("talosconfig"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits for `ok`, or ends the bench saying what did not happen.
pub fn until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        if Instant::now() > deadline {
            eprintln!("{BENCH} bench: {what} did not happen within {within:?}");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The machined processes of a bench, stopped (TERM, then waited for) when dropped.
pub struct Nodes(Vec<Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Some(pid) = rustix::process::Pid::from_raw(c.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// A fresh directory `talosbox-<name>-bench-<pid>` with talosctl linked into it, secrets and
/// configs generated for a control plane at `cp`, and the control plane (`dir/cp`) and a worker
/// at `worker` (`dir/worker`) started, configured and answering through the control plane.
pub fn up(name: &str, cp: &str, worker: &str) -> (PathBuf, Nodes) {
    let dir = std::env::temp_dir().join(format!("talosbox-{name}-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench directory");
    std::os::unix::fs::symlink(bin(), dir.join("talosctl")).expect("talosctl link");
    assert!(talosctl(&dir, &["gen", "secrets", "-o", "secrets.yaml"]));
    assert!(talosctl(&dir, &["gen", "config", name, &format!("https://{cp}:6443"), "--with-secrets", "secrets.yaml"]));
    let start = |node: &str, address: &str| {
        Command::new(bin())
            .args(["machined", "--mode", "container", "--address", address, "--state-dir"])
            .arg(dir.join(node))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("machined")
    };
    let nodes = Nodes(vec![start("cp", cp), start("worker", worker)]);
    until("maintenance on both nodes", Duration::from_secs(30), || {
        talosctl(&dir, &["-e", cp, "--insecure", "version"]) && talosctl(&dir, &["-e", worker, "--insecure", "version"])
    });
    assert!(talosctl(&dir, &["-e", cp, "--insecure", "apply-config", "-f", "controlplane.yaml"]));
    assert!(talosctl(&dir, &["-e", worker, "--insecure", "apply-config", "-f", "worker.yaml"]));
    until("the worker answering through the control plane", Duration::from_secs(60), || {
        talosctl(&dir, &["-e", cp, "-n", worker, "version"])
    });
    (dir, nodes)
}

/// `(rss, pss, private)` in KiB of a process: resident, proportional (shared pages of the one
/// binary split between the processes mapping them), and its own pages only.
pub fn memory(pid: u32) -> (u64, u64, u64) {
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    (
        field(&status, "VmRSS:"),
        field(&rollup, "Pss:"),
        field(&rollup, "Private_Clean:") + field(&rollup, "Private_Dirty:"),
    )
}

/// The pid of the applet `name` (argv[0] `name`, or `talosbox name`) whose command line
/// mentions `marker`.
pub fn find(name: &str, marker: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let argv0 = args.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
        let named = argv0 == name || (argv0 == "talosbox" && args.get(1).is_some_and(|a| a == name));
        (named && args.iter().any(|a| a.contains(marker))).then_some(pid)
    })
}

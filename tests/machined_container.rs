//! machined as a real process in container mode: start line, stage lines in order, config
//! presence, clean stop on SIGTERM, and `poweroff`/`reboot` through the pid file. Several
//! run at once (each test has its own state directory).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_talosbox"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("talosbox-machined-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running machined and the lines it has printed so far.
struct Machined {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    cursor: usize,
}

impl Machined {
    /// Starts machined keeping its files in `state_dir`, its API on `address` (each test its
    /// own loopback address, since tests run at once).
    fn start(state_dir: &Path, address: &str) -> Self {
        let mut child = Command::new(bin())
            .args(["machined", "--mode", "container", "--address", address, "--state-dir"])
            .arg(state_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start machined");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Machined { child, lines, seen: Vec::new(), cursor: 0 }
    }

    /// Waits for the next line (after those already matched) that satisfies `pred`; returns
    /// its index among all lines seen. Matching in order makes each call an ordering check.
    fn expect(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> usize {
        if let Some(i) = self.seen[self.cursor..].iter().position(|l| pred(l)) {
            self.cursor += i + 1;
            return self.cursor - 1;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = pred(&line);
                    self.seen.push(line);
                    if hit {
                        self.cursor = self.seen.len();
                        return self.cursor - 1;
                    }
                }
                Err(_) => {
                    panic!("no line {what} within 20s (after line {}); got:\n{}", self.cursor, self.seen.join("\n"))
                }
            }
        }
    }

    fn expect_line(&mut self, want: &str) -> usize {
        self.expect(&format!("{want:?}"), |l| l == want)
    }

    fn expect_line_prefix(&mut self, prefix: &str) -> usize {
        self.expect(&format!("starting {prefix:?}"), |l| l.starts_with(prefix))
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Drain what it printed last.
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(line);
                }
                return status;
            }
            assert!(Instant::now() < deadline, "machined did not exit; output:\n{}", self.seen.join("\n"));
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Machined {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn boots_to_maintenance_without_config_and_stops_on_sigterm() {
    let dir = scratch("maintenance");
    let mut m = Machined::start(&dir, "127.0.1.1");
    let start = m.expect_line_prefix("[talosbox] uptime ");
    assert!(m.seen[start].ends_with(" machined start"), "{}", m.seen[start]);
    assert_eq!(start, 0, "the start line comes first");
    let booting = m.expect_line("[talosbox] stage: booting");
    let maintenance = m.expect_line("[talosbox] stage: maintenance");
    assert!(booting < maintenance);
    let uptime = m.expect_line_prefix("[talosbox] uptime ");
    assert!(m.seen[uptime].ends_with(" stage maintenance"), "{}", m.seen[uptime]);
    assert!(dir.join("machined.pid").is_file());

    m.signal(rustix::process::Signal::TERM);
    m.expect_line("[talosbox] stage: shutting down");
    let status = m.wait_exit();
    assert!(status.success(), "{status:?}; output:\n{}", m.seen.join("\n"));
    let stages: Vec<&String> = m.seen.iter().filter(|l| l.starts_with("[talosbox] stage: ")).collect();
    assert_eq!(
        stages,
        ["[talosbox] stage: booting", "[talosbox] stage: maintenance", "[talosbox] stage: shutting down"]
    );
    assert!(!dir.join("machined.pid").exists(), "pid file removed on exit");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn runs_with_a_stored_config_and_never_enters_maintenance() {
    let dir = scratch("with-config");
    std::fs::write(dir.join("config.yaml"), "version: v1alpha1\nmachine:\n  type: worker\n").unwrap();
    let mut m = Machined::start(&dir, "127.0.1.2");
    m.expect_line("[talosbox] stage: booting");
    m.expect_line("[talosbox] stage: running");
    assert!(!m.seen.iter().any(|l| l.contains("maintenance")), "{:?}", m.seen);
    m.signal(rustix::process::Signal::TERM);
    assert!(m.wait_exit().success());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_stored_config_that_does_not_load_is_not_used() {
    let dir = scratch("bad-config");
    std::fs::write(dir.join("config.yaml"), "version: v1alpha1\nmachine:\n  tpye: worker\n").unwrap();
    let mut m = Machined::start(&dir, "127.0.1.3");
    let failed = m.expect("the store's refusal", |l| l.contains("config.yaml") && l.contains("machine.tpye"));
    assert!(m.seen[failed].contains("maintenance"), "{}", m.seen[failed]);
    m.expect_line("[talosbox] stage: maintenance");
    m.signal(rustix::process::Signal::TERM);
    assert!(m.wait_exit().success());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn poweroff_and_reboot_applets_signal_the_machined_of_a_state_dir() {
    let dir = scratch("poweroff");
    let mut m = Machined::start(&dir, "127.0.1.4");
    m.expect_line("[talosbox] stage: maintenance");
    let out = Command::new(bin()).args(["poweroff", "--state-dir"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    m.expect_line("[talosbox] stage: shutting down");
    m.expect_line("[talosbox] machined: poweroff requested; container mode, exiting");
    assert!(m.wait_exit().success());

    let mut m = Machined::start(&dir, "127.0.1.4");
    m.expect_line("[talosbox] stage: maintenance");
    let out = Command::new(bin()).args(["reboot", "--state-dir"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    m.expect_line("[talosbox] stage: rebooting");
    assert!(m.wait_exit().success());

    // Nobody there: a clear error naming the pid file.
    let out = Command::new(bin()).args(["shutdown", "-r", "--state-dir"]).arg(&dir).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("machined.pid"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn refuses_to_run_outside_pid1_without_container_mode() {
    let out = Command::new(bin()).arg("machined").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--mode"), "{err}");
}

#[test]
fn a_request_as_soon_as_the_pid_file_exists_is_still_a_clean_stop() {
    let dir = scratch("early");
    let mut m = Machined::start(&dir, "127.0.1.5");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("machined.pid").exists() {
        assert!(Instant::now() < deadline, "no pid file");
        std::thread::sleep(Duration::from_millis(1));
    }
    let out = Command::new(bin()).args(["poweroff", "--state-dir"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status = m.wait_exit();
    assert!(status.success(), "{status:?}; output:\n{}", m.seen.join("\n"));
    let _ = std::fs::remove_dir_all(dir);
}

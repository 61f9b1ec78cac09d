//! machined as PID 1, short of a VM: in a fresh PID and mount namespace, chrooted into a
//! tmpfs root of its own (so its unmounts and the read-only remount of `/` touch nothing of
//! the host). It must reach maintenance, reap orphans re-parented to it, and on SIGPWR /
//! SIGINT go down through sync, unmount and reboot(2) — which in a PID namespace ends the
//! namespace with SIGINT (power off) or SIGHUP (restart), as the kernel documents.
//!
//! Needs root and util-linux's unshare/nsenter; says `skipped:` otherwise.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn skip_reason() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root for PID and mount namespaces".into());
    }
    for tool in ["/usr/bin/unshare", "/usr/bin/nsenter", "/usr/sbin/chroot", "/usr/bin/ldd"] {
        if !Path::new(tool).exists() {
            return Some(format!("{tool} not found (util-linux / coreutils / libc-bin)"));
        }
    }
    None
}

/// The binary and its shared libraries (a debug build is not static).
fn closure(bin: &Path) -> Vec<PathBuf> {
    let out = Command::new("/usr/bin/ldd").arg(bin).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut files: Vec<PathBuf> = text.split_whitespace().filter(|w| w.starts_with('/')).map(PathBuf::from).collect();
    files.sort();
    files.dedup();
    files
}

struct Node {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    root: PathBuf,
}

impl Node {
    fn boot(name: &str) -> Node {
        // TALOSBOX_PID1_BIN runs another build (the static image binary) through the same checks.
        let bin = std::env::var_os("TALOSBOX_PID1_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_talosbox")));
        let root = std::env::temp_dir().join(format!("talosbox-pid1-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let mut script = String::from("set -e\n");
        script += &format!("mount -t tmpfs -o size=1g tmpfs {r}\ncd {r}\n", r = root.display());
        script += "mkdir -p sbin proc dev run tmp var\n";
        for lib in closure(&bin) {
            script +=
                &format!("mkdir -p .{d}\ncp -L {f} .{f}\n", d = lib.parent().unwrap().display(), f = lib.display());
        }
        script += &format!("cp {} sbin/init\nln -s init sbin/machined\n", bin.display());
        script += "mount -t proc proc proc\nmount -t tmpfs tmpfs run\nmount -t tmpfs tmpfs var\n";
        script += "mount --bind /dev/null dev/null 2>/dev/null || true\n";
        script += &format!("exec /usr/sbin/chroot {} /sbin/machined\n", root.display());
        let mut child = Command::new("/usr/bin/unshare")
            .args(["--mount", "--pid", "--fork", "--propagation", "private", "/bin/sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Node { child, lines, seen: Vec::new(), root }
    }

    fn expect(&mut self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.seen.iter().any(|l| l == want) {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("no line {want:?} within 20s; got:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// machined's pid as the host sees it: the child of `unshare`, once it has exec'd.
    fn try_machined_pid(&self) -> Option<i32> {
        let unshare = self.child.id();
        let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).ok()?;
        let pid = children.split_whitespace().next()?.parse::<i32>().ok()?;
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "machined").then_some(pid)
    }

    fn machined_pid(&self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pid) = self.try_machined_pid() {
                return pid;
            }
            assert!(Instant::now() < deadline, "machined never appeared under unshare {}", self.child.id());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.machined_pid()).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(line);
                }
                return status;
            }
            assert!(Instant::now() < deadline, "the namespace did not end; output:\n{}", self.seen.join("\n"));
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Killing the namespace's init ends everything in it; killing unshare alone would not.
        if let Some(pid) = self.try_machined_pid().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Zombie children of `pid`, found through every process's stat.
fn zombie_children(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(rest) = stat.rsplit(')').next() else { continue };
        let mut fields = rest.split_whitespace();
        let (state, ppid) = (fields.next(), fields.next().and_then(|p| p.parse::<i32>().ok()));
        if state == Some("Z") && ppid == Some(pid) {
            found.push(entry.file_name().to_string_lossy().parse().unwrap_or(0));
        }
    }
    found
}

#[test]
fn pid1_reaches_maintenance_reaps_orphans_and_powers_off() {
    if let Some(reason) = skip_reason() {
        {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipped: {reason}");
        }
        return;
    }
    let mut node = Node::boot("poweroff");
    node.expect("[talosbox] stage: maintenance");
    assert!(
        node.seen[0].starts_with("[talosbox] uptime ") && node.seen[0].ends_with(" machined start"),
        "{:?}",
        node.seen
    );

    // Orphans inside the namespace are re-parented to machined, which must reap them.
    let machined = node.machined_pid();
    let out = Command::new("/usr/bin/nsenter")
        .args(["-t", &machined.to_string(), "-p", "/bin/sh", "-c", "for i in 1 2 3 4 5; do sleep 0.2 & done; exit 0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::thread::sleep(Duration::from_millis(600));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !zombie_children(machined).is_empty() {
        assert!(Instant::now() < deadline, "unreaped zombies under machined: {:?}", zombie_children(machined));
        std::thread::sleep(Duration::from_millis(20));
    }

    node.signal(rustix::process::Signal::POWER);
    let status = node.wait();
    let out = node.seen.join("\n");
    println!("{out}");
    for want in [
        "[talosbox] stage: shutting down",
        "[talosbox] poweroff: syncing and unmounting filesystems",
        "[talosbox] poweroff: now",
    ] {
        assert!(node.seen.iter().any(|l| l == want), "missing {want:?} in:\n{out}");
    }
    assert!(!out.contains("FAILED"), "{out}");
    // reboot(POWER_OFF) in a PID namespace: the kernel ends its init as if by SIGINT, and
    // unshare re-raises that.
    assert_eq!(status.signal(), Some(libc_sigint()), "{status:?}\n{out}");
}

#[test]
fn pid1_reboots_on_sigint() {
    if let Some(reason) = skip_reason() {
        {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipped: {reason}");
        }
        return;
    }
    let mut node = Node::boot("reboot");
    node.expect("[talosbox] stage: maintenance");
    node.signal(rustix::process::Signal::INT);
    let status = node.wait();
    let out = node.seen.join("\n");
    println!("{out}");
    assert!(node.seen.iter().any(|l| l == "[talosbox] stage: rebooting"), "{out}");
    assert!(node.seen.iter().any(|l| l == "[talosbox] reboot: now"), "{out}");
    // reboot(RESTART) in a PID namespace ends its init as if by SIGHUP.
    assert_eq!(status.signal(), Some(1), "{status:?}\n{out}");
}

fn libc_sigint() -> i32 {
    rustix::process::Signal::INT.as_raw()
}

//! Container-mode nodes as real processes on loopback addresses, talosctl against them, the
//! certificates of the cluster's own bundle, and the figures the abuse checks measure (RSS of
//! machined and of its services, their open connections). `tests/api_cluster.rs` uses it too
//! (`#[path = "door/harness.rs"]`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use talosbox::pki::{self, CertAndKey, CertificateAuthority, Role, RoleSet, SecretsBundle, Validity};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_talosbox"))
}

/// One machined in container mode, its output kept line by line.
pub struct Node {
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    pub name: String,
    pub address: String,
}

impl Node {
    pub fn start(dir: &Path, name: &str, address: &str) -> Node {
        let mut child = Command::new(bin())
            .args(["machined", "--mode", "container", "--address", address, "--state-dir"])
            .arg(dir.join(name))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start machined");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for out in [
            child.stdout.take().map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            child.stderr.take().map(|e| Box::new(e) as _),
        ]
        .into_iter()
        .flatten()
        {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        Node { child, lines, name: name.to_string(), address: address.to_string() }
    }

    pub fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    pub fn wait_line(&self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.lines.lock().unwrap().iter().any(|l| l.contains(want)) {
            assert!(Instant::now() < deadline, "{}: no line {want:?} within 60 s; log:\n{}", self.name, self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "{} did not exit; log:\n{}", self.name, self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The pid of machined's service `name` (its argv[0]), once it runs.
    pub fn service_pid(&self, name: &str) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(pid) = children_of(self.pid()).into_iter().find(|&p| argv0(p).as_deref() == Some(name)) {
                return pid;
            }
            assert!(Instant::now() < deadline, "{}: no {name} process; log:\n{}", self.name, self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// machined's resident set, KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The direct children of `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        // pid (comm) state ppid ...; comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        if rest.split_whitespace().nth(1).and_then(|s| s.parse::<u32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

pub fn argv0(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let first = cmdline.split(|&b| b == 0).next()?;
    let name = String::from_utf8_lossy(first).into_owned();
    Some(name.rsplit('/').next().unwrap_or(&name).to_string())
}

/// `VmRSS` of `pid`, KiB (0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS:")
}

/// `VmHWM` (peak RSS) of `pid`, KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmHWM:")
}

fn status_field(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()))
        })
        .unwrap_or(0)
}

/// Open file descriptors of `pid`.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// talosctl in `dir`, with `TALOSCONFIG` pointing at `dir/talosconfig`.
pub struct Ctl {
    pub dir: PathBuf,
    exe: PathBuf,
}

impl Ctl {
    /// A fresh directory with talosctl linked into it.
    pub fn in_scratch(name: &str) -> Ctl {
        let dir = std::env::temp_dir().join(format!("talosbox-door-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("talosctl");
        std::os::unix::fs::symlink(bin(), &exe).unwrap();
        Ctl { dir, exe }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    pub fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(&self.exe)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(&self.dir)
            .env("TALOSCONFIG", self.dir.join("talosconfig"))
            .env("TALOS_HOME", self.dir.join("talos"))
            .output()
            .unwrap()
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "talosctl {args:?} failed:\n{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "talosctl {args:?} should have failed:\n{}", text(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Retries `args` until it succeeds (certificates arrive asynchronously).
    pub fn eventually(&self, args: &[&str], within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let out = self.run(args);
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            assert!(Instant::now() < deadline, "talosctl {args:?} kept failing:\n{}", text(&out));
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

pub fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A node left in maintenance mode at `address`, and talosctl beside it.
pub struct Maintenance {
    pub ctl: Ctl,
    pub node: Node,
}

impl Maintenance {
    pub fn up(name: &str, address: &str) -> Maintenance {
        let ctl = Ctl::in_scratch(name);
        let node = Node::start(&ctl.dir, "node", address);
        node.wait_line("stage: maintenance");
        ctl.eventually(&["-e", address, "version", "--insecure", "--short"], Duration::from_secs(20));
        Maintenance { ctl, node }
    }
}

/// A configured control plane and its workers, all running, with the bundle their
/// certificates come from.
pub struct Cluster {
    pub ctl: Ctl,
    pub cp: Node,
    pub workers: Vec<Node>,
    pub bundle: SecretsBundle,
    pub ca: CertificateAuthority,
    pub ca_pem: String,
}

impl Cluster {
    pub fn up(name: &str, cp: &str, workers: &[&str]) -> Cluster {
        let ctl = Ctl::in_scratch(name);
        let dir = ctl.dir.clone();
        ctl.ok(&["gen", "secrets", "-o", "secrets.yaml"]);
        ctl.ok(&["gen", "config", name, &format!("https://{cp}:6443"), "--with-secrets", "secrets.yaml"]);
        ctl.ok(&["config", "endpoint", cp]);
        let bundle = SecretsBundle::from_yaml(&std::fs::read_to_string(dir.join("secrets.yaml")).unwrap()).unwrap();
        let ca = bundle.os_ca().unwrap();
        let ca_pem = bundle.certs.os.crt_pem.clone();
        let cp_node = Node::start(&dir, "cp", cp);
        let worker_nodes: Vec<Node> =
            workers.iter().enumerate().map(|(i, w)| Node::start(&dir, &format!("w{}", i + 1), w)).collect();
        for n in std::iter::once(&cp_node).chain(&worker_nodes) {
            n.wait_line("stage: maintenance");
        }
        ctl.eventually(&["-e", cp, "--insecure", "apply-config", "-f", "controlplane.yaml"], Duration::from_secs(20));
        cp_node.wait_line("service trustd: Running");
        for w in workers {
            ctl.eventually(&["-e", w, "--insecure", "apply-config", "-f", "worker.yaml"], Duration::from_secs(20));
        }
        for w in workers {
            ctl.eventually(&["-n", w, "version"], Duration::from_secs(60));
        }
        Cluster { ctl, cp: cp_node, workers: worker_nodes, bundle, ca, ca_pem }
    }

    /// A client certificate of this cluster's CA with `roles`, valid from a minute ago.
    pub fn client(&self, roles: &[Role]) -> CertAndKey {
        let validity = Validity::starting(SystemTime::now() - Duration::from_secs(60), Duration::from_secs(3600));
        pki::issue_client(&self.ca, None, &RoleSet::from_iter(roles.iter().copied()), validity).unwrap()
    }

    /// A talosconfig in the scratch directory for `roles`, named `file`.
    pub fn talosconfig(&self, file: &str, roles: &str) -> PathBuf {
        let cp = self.cp.address.clone();
        self.ctl.ok(&["config", "new", file, "--roles", roles, "--secrets", "secrets.yaml", "-e", &cp]);
        self.ctl.dir.join(file)
    }
}

/// A gRPC channel to `endpoint:port` over TLS, with `identity` as the client certificate.
pub async fn channel(
    endpoint: &str,
    port: u16,
    ca_pem: &str,
    identity: Option<&CertAndKey>,
) -> tonic::transport::Channel {
    let tls = pki::tls::client_config(&[ca_pem], identity).unwrap();
    talosbox::client::conn::dial(endpoint, port, tls).await.unwrap()
}

/// An error with all its causes.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

//! The API door end to end, with real processes and real TLS on loopback addresses: three
//! container-mode nodes (a control plane and two workers) configured and driven with talosctl
//! alone. Maintenance-mode applies, workers getting their API certificates from the control
//! plane's trustd, calls proxied by the control plane's apid, client-side fan-out, role-limited
//! client configs minted offline, rejected configs leaving the running one untouched, dry-run
//! diffs that show no secret, and a reboot through the API.
//!
//! One cluster carries every check (booting it is the slow part).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CP: &str = "127.0.2.1";
const W1: &str = "127.0.2.2";
const W2: &str = "127.0.2.3";

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_talosbox"))
}

struct Node {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    name: &'static str,
}

impl Node {
    fn start(dir: &Path, name: &'static str, address: &str) -> Node {
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
        Node { child, lines, name }
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn wait_line(&self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.lines.lock().unwrap().iter().any(|l| l.contains(want)) {
            assert!(Instant::now() < deadline, "{}: no line {want:?} within 60 s; log:\n{}", self.name, self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "{} did not exit; log:\n{}", self.name, self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
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

/// talosctl in `dir`, with `TALOSCONFIG` pointing at `dir/talosconfig`.
struct Ctl {
    dir: PathBuf,
    exe: PathBuf,
}

impl Ctl {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.exe)
            .args(args)
            .current_dir(&self.dir)
            .env("TALOSCONFIG", self.dir.join("talosconfig"))
            .env_remove("TALOS_HOME")
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "talosctl {args:?} failed:\n{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "talosctl {args:?} should have failed:\n{}", text(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Retries `args` until it succeeds (certificates arrive asynchronously).
    fn eventually(&self, args: &[&str], within: Duration) -> String {
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

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn three_nodes_are_configured_and_driven_through_the_api() {
    let dir = std::env::temp_dir().join(format!("talosbox-api-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("talosctl");
    std::os::unix::fs::symlink(bin(), &exe).unwrap();
    let ctl = Ctl { dir: dir.clone(), exe };

    // Secrets and configs, offline.
    ctl.ok(&["gen", "secrets", "-o", "secrets.yaml"]);
    let again = ctl.fails(&["gen", "secrets", "-o", "secrets.yaml"]);
    assert!(again.contains("already exists, use --force"), "{again}");
    ctl.ok(&["gen", "config", "demo", &format!("https://{CP}:6443"), "--with-secrets", "secrets.yaml"]);
    for f in ["controlplane.yaml", "worker.yaml", "talosconfig"] {
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.join(f)).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600, "{f} holds keys: owner-only");
    }
    ctl.ok(&["config", "endpoint", CP]);
    let contexts = ctl.ok(&["config", "contexts"]);
    assert!(contexts.contains("*         demo"), "{contexts}");

    let cp = Node::start(&dir, "cp", CP);
    let w1 = Node::start(&dir, "w1", W1);
    let mut w2 = Node::start(&dir, "w2", W2);
    for n in [&cp, &w1, &w2] {
        n.wait_line("stage: maintenance");
    }

    // Maintenance: server TLS only, so --insecure; the talosconfig's client certificate is
    // not asked for. Without --insecure the node's maintenance certificate is not trusted.
    let v = ctl.eventually(&["-e", CP, "version", "--insecure", "--short"], Duration::from_secs(20));
    assert!(v.contains(&format!("Server {CP}: v")), "{v}");
    let refused = ctl.fails(&["-e", CP, "version"]);
    assert!(refused.contains(CP), "errors name the endpoint: {refused}");
    assert_eq!(refused.trim().lines().count(), 1, "one line: {refused}");
    // Not in maintenance's allowed set.
    let denied = ctl.fails(&["-e", CP, "service", "--insecure"]);
    assert!(denied.contains("PermissionDenied") || denied.contains("Unimplemented"), "{denied}");

    // A config with a field Talos does not have is refused with its path; nothing changes.
    std::fs::write(dir.join("typo.yaml"), "version: v1alpha1\nmachine:\n  type: controlplane\n  tpye: x\n").unwrap();
    let typo = ctl.fails(&["-e", CP, "apply-config", "--insecure", "-f", "typo.yaml"]);
    assert!(typo.contains("machine.tpye"), "{typo}");
    let dry = ctl.ok(&["-e", CP, "apply-config", "--insecure", "-f", "controlplane.yaml", "--dry-run"]);
    assert!(dry.contains("Dry run summary:"), "{dry}");
    assert!(dry.contains("token: (redacted)"), "{dry}");
    let secrets = std::fs::read_to_string(dir.join("secrets.yaml")).unwrap();
    let token = secrets.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap();
    assert!(!dry.contains(token), "the dry run shows no secret");
    assert!(cp.log().contains("stage: maintenance") && !cp.log().contains("stage: running"));

    let applied = ctl.run(&["-e", CP, "apply-config", "--insecure", "-f", "controlplane.yaml"]);
    assert!(applied.status.success(), "{}", text(&applied));
    let warnings = String::from_utf8_lossy(&applied.stderr);
    assert!(warnings.contains("WARNING") && warnings.contains("cluster"), "inert sections are listed: {warnings}");
    cp.wait_line("stage: running");
    cp.wait_line("service trustd: Running");

    // Running: mTLS with the admin talosconfig.
    let v = ctl.eventually(&["version"], Duration::from_secs(20));
    assert!(v.contains(&format!("NODE:        {CP}")) && v.contains("Enabled:     RBAC"), "{v}");
    assert!(ctl.fails(&["version", "--insecure"]).contains(CP));
    let status = ctl.ok(&["get", "machinestatus"]);
    assert!(status.contains("running"), "{status}");
    let yaml = ctl.ok(&["get", "ms", "-o", "yaml"]);
    assert!(yaml.contains("type: MachineStatuses.runtime.talos.dev") && yaml.contains("stage: running"), "{yaml}");
    let rd = ctl.ok(&["get", "rd"]);
    assert!(rd.contains("machinestatuses.runtime.talos.dev"), "{rd}");
    let mc = ctl.ok(&["get", "machineconfig", "v1alpha1", "-o", "yaml"]);
    assert!(mc.contains("type: controlplane"), "{mc}");
    let services = ctl.ok(&["service"]);
    assert!(services.contains("apid") && services.contains("trustd"), "{services}");
    assert!(ctl.ok(&["logs", "machined"]).contains("stage: running"));
    assert!(!ctl.ok(&["processes"]).is_empty());
    assert!(ctl.ok(&["memory"]).contains("TOTAL"));
    assert!(ctl.ok(&["read", "/proc/self/status"]).contains("Name:"));
    let listing = ctl.ok(&["list", "-l", dir.to_str().unwrap()]);
    assert!(listing.contains("secrets.yaml") && listing.contains("-rw-------"), "{listing}");
    let unknown = ctl.fails(&["get", "nosuchtype"]);
    assert!(unknown.contains("nosuchtype"), "{unknown}");

    // A rejected apply on a running node leaves the config in force untouched.
    let before = ctl.ok(&["get", "mc", "v1alpha1"]);
    let typo = ctl.fails(&["apply-config", "-f", "typo.yaml"]);
    assert!(typo.contains("machine.tpye"), "{typo}");
    assert_eq!(ctl.ok(&["get", "mc", "v1alpha1"]), before);
    // A patch: dry run first (a diff, nothing applied), then for real.
    let patch = r#"{"machine": {"network": {"hostname": "cp-one"}}}"#;
    let dry = ctl.ok(&["patch", "machineconfig", "-p", patch, "--dry-run"]);
    assert!(dry.contains("+        hostname: cp-one") || dry.contains("hostname: cp-one"), "{dry}");
    assert_eq!(ctl.ok(&["get", "mc", "v1alpha1"]), before);
    ctl.ok(&["patch", "mc", "-p", patch]);
    let after = ctl.ok(&["get", "mc", "v1alpha1", "-o", "yaml"]);
    assert!(after.contains("hostname: cp-one"), "{after}");

    // Workers: configured in maintenance, they fetch their API certificates from the control
    // plane's trustd with the cluster token.
    for w in [W1, W2] {
        ctl.ok(&["-e", w, "apply-config", "--insecure", "-f", "worker.yaml"]);
    }
    w1.wait_line("stage: running");
    w2.wait_line("stage: running");
    // Through the control plane: its apid forwards to each worker's apid with its own client
    // certificate; the caller's roles go along.
    let v = ctl.eventually(&["-n", W1, "version", "--short"], Duration::from_secs(60));
    assert!(v.contains(&format!("Server {W1}: v")), "{v}");
    let all = ctl.eventually(&["-n", &format!("{CP},{W1},{W2}"), "version", "--short"], Duration::from_secs(60));
    for n in [CP, W1, W2] {
        assert!(all.contains(&format!("Server {n}: v")), "fan-out tags each reply by node: {all}");
    }
    let table = ctl.ok(&["-n", &format!("{W1},{W2}"), "get", "machinetype"]);
    assert!(table.contains(W1) && table.contains(W2), "{table}");
    let yaml = ctl.ok(&["-n", &format!("{W1},{W2}"), "get", "machinetype", "-o", "yaml"]);
    assert_eq!(yaml.matches("worker").count(), 2, "{yaml}");
    assert_eq!(yaml.matches("\n---\n").count(), 1, "{yaml}");
    // A worker cannot forward (it holds no client certificate).
    let hop = ctl.fails(&["-e", W1, "-n", W2, "version"]);
    assert!(hop.contains(W2), "{hop}");
    // One node down is one error line, the others still answer.
    let some = ctl.run(&["-n", &format!("{W1},127.0.2.9"), "version", "--short"]);
    assert!(!some.status.success());
    assert!(String::from_utf8_lossy(&some.stdout).contains(&format!("Server {W1}")), "{}", text(&some));
    assert!(String::from_utf8_lossy(&some.stderr).contains("127.0.2.9"), "{}", text(&some));

    // A role-limited talosconfig, minted offline from the bundle.
    ctl.ok(&["config", "new", "reader.yaml", "--roles", "os:reader", "--secrets", "secrets.yaml", "-e", CP]);
    let reader = |args: &[&str]| {
        let mut full = vec!["--talosconfig", "reader.yaml"];
        full.extend_from_slice(args);
        ctl.run(&full)
    };
    let info = reader(&["config", "info"]);
    assert!(text(&info).contains("os:reader"), "{}", text(&info));
    assert!(reader(&["version"]).status.success());
    assert!(reader(&["-n", W1, "get", "machinestatus"]).status.success(), "roles travel with the proxied call");
    for denied in [
        reader(&["get", "machineconfig"]),
        reader(&["-n", W1, "get", "machineconfig"]),
        reader(&["apply-config", "-f", "controlplane.yaml"]),
        reader(&["-n", W2, "reboot"]),
        reader(&["read", "/proc/self/status"]),
    ] {
        assert!(!denied.status.success(), "{}", text(&denied));
        assert!(text(&denied).contains("PermissionDenied"), "{}", text(&denied));
    }
    // From the node: a talosconfig generated by the control plane.
    ctl.ok(&["config", "new", "operator.yaml", "--roles", "os:operator"]);
    let op = std::fs::read_to_string(dir.join("operator.yaml")).unwrap();
    assert!(op.contains("operator@demo"), "{op}");

    // Events carry the stage changes.
    let events = ctl.ok(&["events", "--tail", "50", "--duration", "2s"]);
    assert!(events.contains("machine.MachineStatusEvent"), "{events}");

    // A reboot through the API (container mode: machined goes down cleanly and exits).
    let r = ctl.ok(&["-n", W2, "reboot"]);
    assert!(r.contains("reboot requested"), "{r}");
    assert!(w2.wait_exit().success(), "{}", w2.log());
    assert!(w2.log().contains("stage: rebooting"), "{}", w2.log());

    drop(w1);
    drop(cp);
    let _ = std::fs::remove_dir_all(dir);
}

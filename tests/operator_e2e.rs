//! The fleet operator end to end, as a user runs it: `talosbox operator run --fleet DIR` as a
//! process, two real container-mode talosbox nodes (machined with its real apid, mutual TLS
//! on loopback addresses), everything driven through the binary's commands.
//!
//! - the operator configures both nodes from maintenance and sees them healthy (Available);
//! - an out-of-band `talosctl apply-config` on one node is found within one (shortened) poll,
//!   marked Drifted with a NodeDriftDetected event carrying the diff, re-applied, and the
//!   machine is Available again, the node back on the desired config;
//! - a stopped node makes the fetch-errors counter grow and is never marked Drifted;
//! - `/metrics` passes `promtool check metrics` (Debian's prometheus package), and a deleted
//!   machine's series are gone from it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const N1: &str = "127.0.8.1";
const N2: &str = "127.0.8.2";

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_talosbox"))
}

fn version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// A child process whose output is collected, stopped with SIGTERM when dropped.
struct Proc {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    name: String,
}

impl Proc {
    fn spawn(name: &str, cmd: &mut Command) -> Proc {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawning");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for out in [
            child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>),
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
        Proc { child, lines, name: name.into() }
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn wait_line(&self, want: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.lines.lock().unwrap().iter().any(|l| l.contains(want)) {
            assert!(Instant::now() < deadline, "{}: no line {want:?}; log:\n{}", self.name, self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) -> std::process::ExitStatus {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}

struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn run(&self, applet: &str, args: &[&str]) -> Output {
        Command::new(bin())
            .arg(applet)
            .args(args)
            .current_dir(&self.dir)
            .env("TALOSCONFIG", self.dir.join("talosconfig"))
            .env("TALOS_HOME", self.dir.join("talos"))
            .output()
            .unwrap()
    }

    fn ok(&self, applet: &str, args: &[&str]) -> String {
        let out = self.run(applet, args);
        assert!(out.status.success(), "{applet} {args:?} failed:\n{}{}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout)
    }

    fn operator(&self, args: &[&str]) -> String {
        let mut full = args.to_vec();
        full.extend(["--fleet", "fleet"]);
        self.ok("operator", &full)
    }

    fn machine(&self, name: &str) -> serde_json::Value {
        serde_json::from_str(&self.operator(&["get", "tm", name, "-o", "json"])).unwrap()
    }

    fn state(&self, name: &str) -> String {
        self.machine(name)["status"]["state"].as_str().unwrap_or("").to_string()
    }

    fn events(&self, name: &str) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.operator(&["events", name, "-o", "json"])).unwrap()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn until(what: &str, within: Duration, mut ok: impl FnMut() -> bool, log: impl Fn() -> String) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what} did not happen within {within:?}; operator log:\n{}", log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connecting to the metrics endpoint");
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");
    body.to_string()
}

/// The value of the first series of `name` whose labels include `labels`.
fn value(metrics: &str, name: &str, labels: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        .find_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()))
        .unwrap_or(0.0)
}

fn promtool(dir: &Path, metrics: &str) {
    let path = dir.join("metrics.txt");
    std::fs::write(&path, metrics).unwrap();
    let out = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .expect("running promtool (Debian's prometheus package; tests/run installs it)");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- metrics:\n{metrics}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).trim().is_empty() && text(&out.stderr).trim().is_empty(),
        "promtool found problems: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn the_operator_repairs_drift_on_real_nodes() {
    let dir = std::env::temp_dir().join(format!("talosbox-operator-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let s = Scratch { dir: dir.clone() };

    s.ok("talosctl", &["gen", "secrets", "-o", "secrets.yaml"]);
    s.ok("talosctl", &["gen", "config", "fleet", &format!("https://{N1}:6443"), "--with-secrets", "secrets.yaml"]);
    let mut n1 = Proc::spawn(
        "n1",
        Command::new(bin())
            .args(["machined", "--mode", "container", "--address", N1, "--state-dir"])
            .arg(dir.join("n1")),
    );
    let mut n2 = Proc::spawn(
        "n2",
        Command::new(bin())
            .args(["machined", "--mode", "container", "--address", N2, "--state-dir"])
            .arg(dir.join("n2")),
    );
    n1.wait_line("stage: maintenance", Duration::from_secs(60));
    n2.wait_line("stage: maintenance", Duration::from_secs(60));

    // The fleet: its secrets bundle, the base config, and one machine per node.
    s.operator(&["create", "secret", "fleet", "--from-file", "secrets.yaml"]);
    s.operator(&["create", "configmap", "controlplane", "--from-file", "config.yaml=controlplane.yaml"]);
    for (name, addr) in [("n1", N1), ("n2", N2)] {
        let yaml = format!(
            "apiVersion: talosbox.dev/v1alpha1\nkind: TalosMachine\nmetadata:\n  name: {name}\nspec:\n  endpoint: {addr}\n  version: {}\n  credentials:\n    secretsRef: {{name: fleet}}\n  config:\n    configRef: {{name: controlplane}}\n    patches:\n      - 'machine: {{network: {{hostname: {name}-desired}}}}'\n",
            version()
        );
        std::fs::write(dir.join(format!("{name}.yaml")), yaml).unwrap();
        assert!(
            s.operator(&["apply", "-f", &format!("{name}.yaml")]).contains(&format!("talosmachine/{name} created"))
        );
    }

    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let operator = Proc::spawn(
        "operator",
        Command::new(bin())
            .args(["operator", "run", "--fleet", "fleet", "--poll-interval", "2s", "--health-recheck", "500ms"])
            .args(["--readiness-retry", "500ms", "--node-timeout", "5s", "--metrics-address", &metrics_addr])
            .current_dir(&dir)
            .env("RUST_LOG", "talosbox::operator=info"),
    );
    let log = || operator.log();

    // Both configured from maintenance by the operator, then healthy.
    until(
        "both machines Available",
        Duration::from_secs(90),
        || s.state("n1") == "Available" && s.state("n2") == "Available",
        log,
    );
    n1.wait_line("stage: running", Duration::from_secs(5));
    let table = s.operator(&["get", "tm"]);
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "STATE", "VERSION", "ENDPOINT", "AGE"], "{table}");
    assert_eq!(rows[1][..4], ["n1", "Available", version().as_str(), N1], "{table}");
    let reasons: Vec<String> = s.events("n1").iter().map(|e| e["reason"].as_str().unwrap().to_string()).collect();
    assert_eq!(reasons, ["ConfigApplied", "Available"], "{reasons:?}");
    assert!(
        s.ok("talosctl", &["-e", N1, "-n", N1, "get", "mc", "v1alpha1", "-o", "yaml"]).contains("hostname: n1-desired")
    );

    // Out of band: someone applies another configuration to n1 with talosctl.
    std::fs::write(dir.join("by-hand.yaml"), "machine: {network: {hostname: changed-by-hand}}").unwrap();
    s.ok(
        "talosctl",
        &["-e", N1, "-n", N1, "apply-config", "-f", "controlplane.yaml", "--config-patch", "@by-hand.yaml"],
    );
    let changed = Instant::now();
    until(
        "the drift found",
        Duration::from_secs(15),
        || s.events("n1").iter().any(|e| e["reason"] == "NodeDriftDetected"),
        log,
    );
    // Within one poll (2 s ± 10%) and the time it takes to poll.
    assert!(changed.elapsed() < Duration::from_secs(8), "found after {:?}", changed.elapsed());
    let drift = s.events("n1").into_iter().find(|e| e["reason"] == "NodeDriftDetected").unwrap();
    assert_eq!(drift["type"], "Warning");
    let note = drift["note"].as_str().unwrap();
    assert!(note.contains("changed-by-hand") && note.contains("n1-desired"), "the event carries the diff: {note}");
    until(
        "n1 repaired",
        Duration::from_secs(30),
        || {
            let r: Vec<String> = s.events("n1").iter().map(|e| e["reason"].as_str().unwrap().to_string()).collect();
            r.ends_with(&["NodeDriftDetected".into(), "ConfigApplied".into(), "Available".into()])
                && s.state("n1") == "Available"
        },
        log,
    );
    assert!(
        s.ok("talosctl", &["-e", N1, "-n", N1, "get", "mc", "v1alpha1", "-o", "yaml"]).contains("hostname: n1-desired"),
        "the desired config is back on the node"
    );
    assert!(log().contains("TalosMachine drift detected"), "the log has the drift with its diff");
    let describe = s.operator(&["describe", "tm", "n1"]);
    assert!(describe.contains("NodeDriftDetected") && describe.contains("State:          Available"), "{describe}");
    let m = scrape(&metrics_addr);
    assert_eq!(value(&m, "kube_external_watcher_drift_detected_total", "name=\"n1\""), 1.0, "{m}");
    assert_eq!(value(&m, "kube_external_watcher_drift_detected_total", "name=\"n2\""), 0.0, "{m}");
    assert!(value(&m, "kube_external_watcher_poll_total", "name=\"n1\",result=\"success\"") >= 1.0, "{m}");
    assert_eq!(value(&m, "kube_external_watcher_registered_resources", "controller=\"TalosMachine\""), 2.0, "{m}");
    promtool(&dir, &m);

    // A stopped node: errors counted, nothing Drifted.
    n2.stop();
    let errors = |m: &str| value(m, "kube_external_watcher_fetch_external_errors_total", "name=\"n2\"");
    until("n2's fetch errors grow", Duration::from_secs(20), || errors(&scrape(&metrics_addr)) >= 2.0, log);
    let m = scrape(&metrics_addr);
    assert!(value(&m, "kube_external_watcher_poll_total", "name=\"n2\",result=\"error\"") >= 2.0, "{m}");
    assert_eq!(s.state("n2"), "Available", "an unreachable node is not drift");
    assert!(s.events("n2").iter().all(|e| e["reason"] != "NodeDriftDetected"));
    promtool(&dir, &m);

    // Deleted: unregistered at once, its series gone.
    s.operator(&["delete", "tm", "n2"]);
    until("n2 gone", Duration::from_secs(20), || !s.operator(&["get", "tm"]).contains("n2"), log);
    until("n2's series gone", Duration::from_secs(10), || !scrape(&metrics_addr).contains("name=\"n2\""), log);
    let m = scrape(&metrics_addr);
    assert_eq!(value(&m, "kube_external_watcher_registered_resources", "controller=\"TalosMachine\""), 1.0, "{m}");
    promtool(&dir, &m);

    // A second operator on the same fleet is refused; the first stops cleanly on SIGTERM.
    let second = s.run("operator", &["run", "--fleet", "fleet", "--metrics-address", "127.0.0.1:0"]);
    assert!(!second.status.success() && text(&second.stderr).contains("already running"), "{}", text(&second.stderr));
    let mut operator = operator;
    assert!(operator.stop().success(), "operator log:\n{}", operator.log());
    n1.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

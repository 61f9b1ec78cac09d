//! `talosctl cluster create` / `destroy` against real QEMU and swtpm processes. Most nodes boot
//! an empty disk, so no images are needed: these tests are about the provisioner's processes,
//! ports, files, disks and cleanup, not the guest (tests/vm/boot-paths boots real images).
//! What the guest would see of its disks and UUID is asked of QEMU itself, over QMP. The
//! launcher's tests boot Debian's cloud kernel (`$TALOSBOX_KERNEL_ROOT`, as tests/init_boot.rs)
//! with a one-instruction-loop init built here, and make the guest reboot (a kernel panic
//! with `panic=1`, or a reset over QMP) and power off for real.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_talosbox"))
}

/// Says `skipped: <reason>` straight to stderr, past the test harness's capture, so a test that
/// cannot run is seen as such instead of passing silently.
fn skip(reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {reason}");
}

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool} >/dev/null")]).status().is_ok_and(|s| s.success())
}

/// A short scratch root (QMP and swtpm sockets must fit in 107 bytes) with an empty 1 MiB disk.
fn scratch(case: &str) -> Option<PathBuf> {
    if !have("qemu-system-x86_64") {
        skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)");
        return None;
    }
    let dir = PathBuf::from(format!("/tmp/tbp-{case}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("empty.raw"), vec![0u8; 1 << 20]).unwrap();
    Some(dir)
}

fn talosctl(args: &[&str]) -> Output {
    Command::new(bin()).arg("talosctl").args(args).output().unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn pid_alive_as(pid_file: &Path, program: &str) -> bool {
    let Ok(pid) = std::fs::read_to_string(pid_file) else { return false };
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(argv0).rsplit('/').next().is_some_and(|b| b.starts_with(program))
}

fn ephemeral_range() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let mut w = text.split_whitespace().map(|p| p.parse::<u64>().unwrap());
    (w.next().unwrap(), w.next().unwrap())
}

fn read_pid(pid_file: &Path) -> String {
    std::fs::read_to_string(pid_file).unwrap().trim().to_string()
}

fn running(pid: &str, program: &str) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmdline).contains(program)
}

/// Sends one QMP command with its arguments to a node's QEMU and returns the reply's `return`.
fn qmp(socket: &Path, execute: &str, arguments: serde_json::Value) -> serde_json::Value {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap(); // greeting
    let mut send = |cmd: serde_json::Value| {
        writer.write_all(format!("{cmd}\n").as_bytes()).unwrap();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
            // Asynchronous events may come first.
            if reply.get("event").is_none() {
                assert!(reply.get("error").is_none(), "QMP {cmd}: {reply}");
                return reply["return"].clone();
            }
        }
    };
    send(serde_json::json!({"execute": "qmp_capabilities"}));
    send(serde_json::json!({"execute": execute, "arguments": arguments}))
}

/// The serial QEMU gives the guest for the virtio-blk device `id`.
fn disk_serial(socket: &Path, id: &str) -> String {
    let path = format!("/machine/peripheral/{id}");
    qmp(socket, "qom-get", serde_json::json!({"path": path, "property": "serial"})).as_str().unwrap().to_string()
}

/// Bytes the filesystem allocated to a file, as `du` counts them.
fn du(path: &Path) -> u64 {
    let out = Command::new("du").args(["-B1", "--"]).arg(path).output().unwrap();
    assert!(out.status.success(), "du: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().parse().unwrap()
}

/// A process's argv.
fn cmdline(pid: &str) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

/// Fields of /proc/PID/stat after the command: the parent (4) and the session (6).
const PARENT: usize = 4;
const SESSION: usize = 6;

fn stat_field(pid: &str, field: usize) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|(_, rest)| rest).unwrap_or_default();
    after.split(' ').nth(field - 3).unwrap_or_default().to_string()
}

fn record(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("cluster.json")).unwrap()).unwrap()
}

/// Destroys the cluster even when an assertion failed, so no QEMU outlives the test.
struct Cluster<'a> {
    names: &'a [&'a str],
    state: PathBuf,
}

impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        for name in self.names {
            let _ = talosctl(&["cluster", "destroy", "--name", name, "--state", &self.state.to_string_lossy()]);
        }
        let _ = std::fs::remove_dir_all(self.state.parent().unwrap_or(&self.state));
    }
}

#[test]
fn create_forwards_ports_and_destroy_stops_everything() {
    let Some(root) = scratch("two") else { return };
    let state = root.join("s");
    let guard = Cluster { names: &["two"], state: state.clone() };
    let disk = root.join("empty.raw");
    let s = state.to_string_lossy().to_string();
    let d = disk.to_string_lossy().to_string();
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "two",
        "--state",
        &s,
        "--disk-image",
        &d,
        "--workers",
        "1",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = text(&out);
    let dir = state.join("two");
    let rec = record(&dir);
    let nodes = rec["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let mut macs = std::collections::HashSet::new();
    let mut uuids = std::collections::HashSet::new();
    let (lo, hi) = ephemeral_range();
    for node in nodes {
        let name = node["name"].as_str().unwrap();
        let port = node["api_port"].as_u64().unwrap();
        assert!(printed.contains(&format!("127.0.0.1:{port}")), "{printed}");
        // A port from the kernel's ephemeral range could be handed to any connection between
        // being found free and QEMU binding it.
        assert!(!(lo..=hi).contains(&port), "{name}: API port {port} is in the ephemeral range {lo}-{hi}");
        assert!(printed.contains(&format!("{}/{name}.log", dir.display())), "{printed}");
        assert!(pid_alive_as(&dir.join(format!("{name}.pid")), "qemu"), "{name}: no QEMU running");
        // QEMU itself listens on the forwarded port (the guest need not be up for the connect).
        TcpStream::connect(("127.0.0.1", u16::try_from(port).unwrap())).unwrap();
        assert!(macs.insert(node["lan_mac"].as_str().unwrap().to_string()));
        // The node's machine UUID is the record's, and QEMU gives it to the guest.
        let uuid = node["uuid"].as_str().unwrap();
        let qmp_socket = Path::new(node["qmp_socket"].as_str().unwrap());
        assert_eq!(qmp(qmp_socket, "query-uuid", serde_json::json!({}))["UUID"], uuid, "{name}");
        assert!(uuids.insert(uuid.to_string()), "{name}: UUID {uuid} is another node's too");
        // Its system disk: a copy of the image grown to the default --disk-size, costing the
        // host only the image's data, listed in the record, and seen by the guest with its serial.
        let system = dir.join(format!("{name}.system.raw"));
        assert_eq!(node["disks"][0]["path"], system.to_string_lossy().as_ref());
        assert_eq!(node["disks"][0]["role"], "system");
        assert_eq!(node["disks"][0]["source"], d.as_str());
        assert_eq!(node["disks"].as_array().unwrap().len(), 1, "no extra disks unless asked");
        assert_eq!(std::fs::metadata(&system).unwrap().len(), 6144 << 20, "Talos's default --disk");
        assert!(du(&system) <= 64 * 1024, "{name}: a copy of an all-zero image must cost next to nothing");
        assert_eq!(disk_serial(qmp_socket, "system"), "talosbox-system");
        let block = qmp(qmp_socket, "query-block", serde_json::json!({}));
        let files: Vec<String> = block
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["inserted"]["file"].as_str().map(str::to_string))
            .collect();
        assert_eq!(files, [system.to_string_lossy().to_string()], "QEMU writes the copy itself, no overlay");
    }
    assert_eq!(std::fs::read(&disk).unwrap(), vec![0u8; 1 << 20], "the disk image must stay as built");

    let show = talosctl(&["cluster", "show", "--name", "two", "--state", &s]);
    assert!(show.status.success(), "{}", text(&show));
    let shown = text(&show);
    assert_eq!(shown.matches("running (QEMU pid").count(), 2, "{shown}");
    assert!(shown.contains("two-worker-1 "), "{shown}");

    let again = talosctl(&["cluster", "create", "--skip-config", "--name", "two", "--state", &s, "--disk-image", &d]);
    assert!(!again.status.success());
    assert!(text(&again).contains("already exists"), "{}", text(&again));

    // Each node runs under a launcher of its own, in a session of its own, and QEMU is its child.
    let mut launchers = Vec::new();
    for node in nodes {
        let name = node["name"].as_str().unwrap();
        let launch = node["launch_file"].as_str().unwrap();
        assert_eq!(launch, dir.join(format!("{name}.launch.json")).to_string_lossy());
        let pid = read_pid(Path::new(node["launcher_pid_file"].as_str().unwrap()));
        let argv = cmdline(&pid);
        assert_eq!(argv[0], "talosbox", "{argv:?}");
        assert_eq!(argv[1..], ["talosctl", "cluster", "launch-node", "--launch", launch], "{argv:?}");
        assert_eq!(stat_field(&pid, SESSION), pid, "{name}: the launcher leads its own session");
        let qemu = read_pid(&dir.join(format!("{name}.pid")));
        assert_eq!(stat_field(&qemu, PARENT), pid, "{name}: QEMU runs under its launcher");
        assert_eq!(node["boots_from"], "system-disk");
        launchers.push(pid);
    }

    let pids: Vec<PathBuf> = nodes.iter().map(|n| dir.join(format!("{}.pid", n["name"].as_str().unwrap()))).collect();
    let pid_texts: Vec<String> = pids.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    let out = talosctl(&["cluster", "destroy", "--name", "two", "--state", &s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!dir.exists(), "state directory left behind");
    for pid in pid_texts {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&cmdline).contains("qemu"), "QEMU {pid} still running");
    }
    for pid in &launchers {
        assert!(text(&out).contains(&format!(": launcher (pid {pid}) stopped")), "{}", text(&out));
        assert!(!running(pid, "launch-node"), "launcher {pid} still running");
    }
    let out = talosctl(&["cluster", "destroy", "--name", "two", "--state", &s]);
    assert!(!out.status.success());
    assert!(text(&out).contains("no cluster \"two\""), "{}", text(&out));
    drop(guard);
}

#[test]
fn uefi_and_tpm_nodes_get_ovmf_vars_and_a_swtpm_that_destroy_stops() {
    let Some(root) = scratch("tpm") else { return };
    if !have("swtpm") || !Path::new("/usr/share/OVMF/OVMF_CODE_4M.fd").exists() {
        skip("swtpm or OVMF is not installed (apt-get install swtpm ovmf)");
        let _ = std::fs::remove_dir_all(&root);
        return;
    }
    let state = root.join("s");
    let guard = Cluster { names: &["tpm"], state: state.clone() };
    let s = state.to_string_lossy().to_string();
    let d = root.join("empty.raw").to_string_lossy().to_string();
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "tpm",
        "--state",
        &s,
        "--disk-image",
        &d,
        "--with-uefi",
        "--with-tpm",
        "--disk-size",
        "64",
        "--extra-disks",
        "2",
        "--extra-disks-size",
        "32",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let dir = state.join("tpm");
    let node = "tpm-controlplane-1";
    assert!(pid_alive_as(&dir.join(format!("{node}.pid")), "qemu"));
    let swtpm_pid = dir.join("controlplane-1.tpm/swtpm.pid");
    assert!(pid_alive_as(&swtpm_pid, "swtpm"), "no swtpm running");
    let vars = std::fs::metadata(dir.join(format!("{node}.vars.fd"))).unwrap();
    assert_eq!(vars.len(), std::fs::metadata("/usr/share/OVMF/OVMF_VARS_4M.fd").unwrap().len());
    let pid = std::fs::read_to_string(&swtpm_pid).unwrap();
    let system = dir.join(format!("{node}.system.raw"));
    assert_eq!(std::fs::metadata(&system).unwrap().len(), 64 << 20, "system disk size");
    let qmp_socket = dir.join("controlplane-1.qmp");
    assert_eq!(disk_serial(&qmp_socket, "system"), "talosbox-system");
    let rec = record(&dir);
    for n in 1..=2 {
        let extra = dir.join(format!("{node}.extra-{n}.raw"));
        assert_eq!(std::fs::metadata(&extra).unwrap().len(), 32 << 20, "extra disk size");
        assert_eq!(du(&extra), 0, "a blank extra disk costs nothing until written");
        assert_eq!(disk_serial(&qmp_socket, &format!("extra-{n}")), format!("talosbox-extra-{n}"));
        assert_eq!(rec["nodes"][0]["disks"][n]["path"], extra.to_string_lossy().as_ref());
        assert_eq!(rec["nodes"][0]["disks"][n]["role"], "extra");
    }

    let out = talosctl(&["cluster", "destroy", "--name", "tpm", "--state", &s]);
    assert!(out.status.success(), "{}", text(&out));
    // swtpm leaves when QEMU closes its socket, or destroy stops it.
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(5) {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains("swtpm") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&cmdline).contains("swtpm"), "swtpm {pid} still running");
    drop(guard);
}

/// What the node writes to its system disk is in the file at once, so a QEMU killed outright
/// leaves it behind (no snapshot overlay to lose), and destroy removes the disk with the rest.
#[test]
fn a_killed_qemu_leaves_what_it_wrote_on_the_system_disk() {
    let Some(root) = scratch("kill") else { return };
    let state = root.join("s");
    let guard = Cluster { names: &["kill"], state: state.clone() };
    let s = state.to_string_lossy().to_string();
    let d = root.join("empty.raw").to_string_lossy().to_string();
    let out = talosctl(&["cluster", "create", "--skip-config", "--name", "kill", "--state", &s, "--disk-image", &d]);
    assert!(out.status.success(), "{}", text(&out));
    let dir = state.join("kill");
    let system = dir.join("kill-controlplane-1.system.raw");
    // A write through QEMU's block layer, as the guest's would go: 64 KiB of 0xab at 3 MiB,
    // past the image's end, where the copy was a hole.
    let reply = qmp(
        &dir.join("controlplane-1.qmp"),
        "human-monitor-command",
        serde_json::json!({"command-line": "qemu-io system-drive \"write -P 0xab 3M 64k\""}),
    );
    // qemu-io reports to QEMU's stdout (here /dev/null); the monitor only says what failed.
    assert_eq!(reply, "", "qemu-io on the system drive: {reply}");
    let pid = read_pid(&dir.join("kill-controlplane-1.pid"));
    assert!(Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
    let start = std::time::Instant::now();
    while running(&pid, "qemu") {
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "QEMU {pid} survived SIGKILL");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let bytes = std::fs::read(&system).unwrap();
    assert!(bytes[3 << 20..(3 << 20) + 65536].iter().all(|b| *b == 0xab), "the write is lost");
    assert!(bytes[(3 << 20) + 65536..].iter().all(|b| *b == 0) && bytes[..3 << 20].iter().all(|b| *b == 0));
    assert_eq!(std::fs::read(&d).unwrap(), vec![0u8; 1 << 20], "the image must stay as built");
    let out = talosctl(&["cluster", "destroy", "--name", "kill", "--state", &s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!system.exists() && !dir.exists(), "destroy must remove the disks with the directory");
    drop(guard);
}

/// A system disk smaller than the image it copies is refused before anything is made; Talos's
/// flag name `--disk` is the same flag.
#[test]
fn a_system_disk_smaller_than_its_image_is_refused() {
    let root = PathBuf::from(format!("/tmp/tbp-small-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let image = root.join("big.raw");
    std::fs::File::create(&image).unwrap().set_len((3 << 20) + 1).unwrap();
    let state = root.join("s");
    let (s, i) = (state.to_string_lossy().to_string(), image.to_string_lossy().to_string());
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "small",
        "--state",
        &s,
        "--disk-image",
        &i,
        "--disk",
        "3",
    ]);
    assert!(!out.status.success());
    let t = text(&out);
    assert!(t.contains("--disk-size 3 MiB is smaller than the disk image"), "{t}");
    assert!(t.contains(&format!("{i} ({} bytes): give at least 4 MiB", (3 << 20) + 1)), "{t}");
    assert!(!state.join("small").exists(), "a refused create must leave nothing behind");
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "small",
        "--state",
        &s,
        "--disk-image",
        &i,
        "--extra-disks",
        "17",
    ]);
    assert!(!out.status.success());
    assert!(text(&out).contains("--extra-disks: 17 asked, at most 16 per node"), "{}", text(&out));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn wait_times_out_with_the_serial_log_path_and_tail() {
    let Some(root) = scratch("wait") else { return };
    let state = root.join("s");
    let guard = Cluster { names: &["wait"], state: state.clone() };
    let s = state.to_string_lossy().to_string();
    let d = root.join("empty.raw").to_string_lossy().to_string();
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "wait",
        "--state",
        &s,
        "--disk-image",
        &d,
        "--wait",
        "--wait-timeout",
        "3s",
    ]);
    assert!(!out.status.success(), "an empty disk cannot reach maintenance: {}", text(&out));
    let t = text(&out);
    assert!(t.contains("timed out after 3 s"), "{t}");
    assert!(t.contains(&format!("serial log: {}/wait/wait-controlplane-1.log", state.display())), "{t}");
    assert!(t.contains("destroy with: talosctl cluster destroy --name wait"), "{t}");
    drop(guard);
}

#[test]
fn bad_flags_are_one_clear_error() {
    let out = talosctl(&["cluster", "create", "--skip-config", "--name", "Bad_Name"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("invalid cluster name \"Bad_Name\""), "{}", text(&out));
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "x",
        "--artifacts",
        "/nonexistent",
        "--state",
        "/tmp/tbp-none",
    ]);
    assert!(!out.status.success());
    assert!(text(&out).contains("/nonexistent/vmlinuz does not exist"), "{}", text(&out));
    assert!(!Path::new("/tmp/tbp-none/x").exists(), "a failed create must leave nothing behind");
}

#[test]
fn a_qemu_that_will_not_start_is_one_error_and_leaves_nothing_behind() {
    let Some(root) = scratch("acc") else { return };
    let state = root.join("s");
    let s = state.to_string_lossy().to_string();
    let d = root.join("empty.raw").to_string_lossy().to_string();
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "acc",
        "--state",
        &s,
        "--disk-image",
        &d,
        "--accel",
        "bogus",
    ]);
    assert!(!out.status.success());
    let t = text(&out);
    assert!(t.contains("starting node acc-controlplane-1: QEMU exited with exit status: 1"), "{t}");
    assert!(t.contains("invalid accelerator bogus"), "{t}");
    assert!(!state.join("acc").exists(), "a failed create must remove its state directory");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn graceful_destroy_falls_back_to_quit_when_nothing_answers_the_power_button() {
    let Some(root) = scratch("grace") else { return };
    let state = root.join("s");
    let guard = Cluster { names: &["grace"], state: state.clone() };
    let s = state.to_string_lossy().to_string();
    let d = root.join("empty.raw").to_string_lossy().to_string();
    let out = talosctl(&["cluster", "create", "--skip-config", "--name", "grace", "--state", &s, "--disk-image", &d]);
    assert!(out.status.success(), "{}", text(&out));
    let pid = std::fs::read_to_string(state.join("grace/grace-controlplane-1.pid")).unwrap();
    // No OS on the empty disk: nobody handles ACPI, so the node keeps running.
    let out =
        talosctl(&["cluster", "destroy", "--name", "grace", "--state", &s, "--graceful", "--graceful-timeout", "1s"]);
    assert!(out.status.success(), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("grace-controlplane-1: still running 1 s after the power button; stopping it"), "{t}");
    assert!(t.contains("grace-controlplane-1: QEMU (pid"), "{t}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&cmdline).contains("qemu"), "QEMU {pid} still running");
    assert!(!state.join("grace").exists());
    drop(guard);
}

/// A node's QEMU died and its pid went to another cluster's QEMU (same program, same user):
/// destroying the first cluster must leave the other cluster's node running.
#[test]
fn destroy_leaves_another_clusters_qemu_that_reused_a_stale_pid() {
    let Some(root) = scratch("reuse") else { return };
    let state = root.join("s");
    let s = state.to_string_lossy().to_string();
    let d = root.join("empty.raw").to_string_lossy().to_string();
    let guard = Cluster { names: &["mine", "other"], state: state.clone() };
    for name in ["mine", "other"] {
        let out = talosctl(&["cluster", "create", "--skip-config", "--name", name, "--state", &s, "--disk-image", &d]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let mine = state.join("mine/mine-controlplane-1.pid");
    let other = read_pid(&state.join("other/other-controlplane-1.pid"));
    let dead = read_pid(&mine);
    assert!(Command::new("kill").args(["-KILL", &dead]).status().unwrap().success());
    let start = std::time::Instant::now();
    while running(&dead, "qemu") {
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "QEMU {dead} survived SIGKILL");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The stale pid file now names the other cluster's QEMU.
    std::fs::write(&mine, format!("{other}\n")).unwrap();
    let out = talosctl(&["cluster", "destroy", "--name", "mine", "--state", &s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(&format!("pid {other}")), "destroy touched the other cluster's QEMU: {}", text(&out));
    assert!(running(&other, "qemu"), "destroying mine killed the other cluster's QEMU {other}");
    assert!(!state.join("mine").exists());
    drop(guard);
}

/// Several creates of one name at once: exactly one makes the cluster, every other one says it
/// already exists and touches nothing of the winner's.
#[test]
fn concurrent_creates_of_one_name_make_one_cluster() {
    let Some(root) = scratch("race") else { return };
    let state = root.join("s");
    // Many other clusters' records under the root: reading them takes a while, as it does on a
    // busy host, so the creates overlap.
    for i in 0..1500 {
        let dir = state.join(format!("old{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let lan = format!("230.{}.{}.1:{}", i / 256, i % 256, 20000 + i);
        let rec = serde_json::json!({"name": format!("old{i}"), "created": 0, "boot": "test", "lan": lan, "nodes": []});
        std::fs::write(dir.join("cluster.json"), rec.to_string()).unwrap();
    }
    let guard = Cluster { names: &["race"], state: state.clone() };
    let s = state.to_string_lossy().to_string();
    let d = root.join("empty.raw").to_string_lossy().to_string();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(bin())
                .args([
                    "talosctl",
                    "cluster",
                    "create",
                    "--skip-config",
                    "--name",
                    "race",
                    "--state",
                    &s,
                    "--disk-image",
                    &d,
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    let all: Vec<String> = outs.iter().map(text).collect();
    assert_eq!(outs.iter().filter(|o| o.status.success()).count(), 1, "{all:#?}");
    for out in outs.iter().filter(|o| !o.status.success()) {
        assert!(text(out).contains("cluster \"race\" already exists"), "{all:#?}");
    }
    let dir = state.join("race");
    assert_eq!(record(&dir)["name"], "race");
    assert!(pid_alive_as(&dir.join("race-controlplane-1.pid"), "qemu"), "the winner's QEMU is gone: {all:#?}");
    drop(guard);
}

// ---- The launcher: restarts on reboot, moves to the installed disk, ends on power-off ----

/// Debian's cloud kernel, as tests/init_boot.rs finds it: `$TALOSBOX_KERNEL_ROOT` (tests/run
/// sets it), else `/var/cache/talosbox/kernel-dev/root`.
fn kernel() -> Option<PathBuf> {
    let root = std::env::var_os("TALOSBOX_KERNEL_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/talosbox/kernel-dev/root"));
    let version = std::fs::read_dir(root.join("lib/modules")).ok()?.flatten().next()?.file_name();
    let vmlinuz = root.join(format!("boot/vmlinuz-{}", version.to_string_lossy()));
    vmlinuz.exists().then_some(vmlinuz)
}

/// What the test guest's `/init` does.
#[derive(Clone, Copy)]
enum Init {
    /// Waits forever (`pause` in a loop), so the guest stays up until something else happens.
    Wait,
    /// `reboot(LINUX_REBOOT_CMD_RESTART)`: the guest resets itself, at once, every boot.
    Reboot,
    /// `reboot(LINUX_REBOOT_CMD_POWER_OFF)`: ACPI S5, the guest powers itself off.
    PowerOff,
}

/// A static x86-64 Linux executable of a few instructions (ELF header, one PT_LOAD segment),
/// so the guest needs no compiler or libc here.
fn init_elf(init: Init) -> Vec<u8> {
    // loop: mov eax, 34 (pause); syscall; jmp loop
    let pause: &[u8] = &[0xb8, 34, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7];
    let reboot = |cmd: u32| {
        // mov eax, 169 (reboot); mov edi, MAGIC1; mov esi, MAGIC2; mov edx, cmd; syscall
        let mut c = vec![0xb8, 169, 0, 0, 0, 0xbf];
        c.extend(0xfee1_deadu32.to_le_bytes());
        c.push(0xbe);
        c.extend(0x2812_1969u32.to_le_bytes());
        c.push(0xba);
        c.extend(cmd.to_le_bytes());
        c.extend([0x0f, 0x05]);
        c
    };
    let mut code = match init {
        Init::Wait => Vec::new(),
        Init::Reboot => reboot(0x0123_4567),
        Init::PowerOff => reboot(0x4321_fedc),
    };
    // PID 1 must never return: whatever it did, it then waits.
    code.extend(pause);
    let base: u64 = 0x40_0000;
    let (ehdr, phdr) = (64u16, 56u16);
    let total = (u64::from(ehdr) + u64::from(phdr)) + code.len() as u64;
    let mut e = Vec::new();
    e.extend(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    e.extend(2u16.to_le_bytes()); // ET_EXEC
    e.extend(0x3eu16.to_le_bytes()); // x86-64
    e.extend(1u32.to_le_bytes());
    e.extend((base + u64::from(ehdr) + u64::from(phdr)).to_le_bytes()); // entry
    e.extend(u64::from(ehdr).to_le_bytes()); // program headers
    e.extend(0u64.to_le_bytes()); // no section headers
    e.extend(0u32.to_le_bytes());
    for v in [ehdr, phdr, 1, 0, 0, 0] {
        e.extend(v.to_le_bytes());
    }
    e.extend(1u32.to_le_bytes()); // PT_LOAD
    e.extend(5u32.to_le_bytes()); // R+X
    e.extend(0u64.to_le_bytes());
    e.extend(base.to_le_bytes());
    e.extend(base.to_le_bytes());
    e.extend(total.to_le_bytes());
    e.extend(total.to_le_bytes());
    e.extend(0x1000u64.to_le_bytes());
    e.extend(code);
    e
}

/// An uncompressed newc cpio holding `/init`.
fn initramfs(init: Init) -> Vec<u8> {
    fn entry(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8]) {
        let fields = [1, mode, 0, 0, 1, 0, data.len() as u32, 0, 0, 0, 0, name.len() as u32 + 1, 0];
        out.extend(b"070701");
        for f in fields {
            out.extend(format!("{f:08x}").as_bytes());
        }
        out.extend(name.as_bytes());
        out.push(0);
        out.resize(out.len().div_ceil(4) * 4, 0);
        out.extend(data);
        out.resize(out.len().div_ceil(4) * 4, 0);
    }
    let mut out = Vec::new();
    entry(&mut out, "init", 0o100_755, &init_elf(init));
    entry(&mut out, "TRAILER!!!", 0, &[]);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

/// Talos's installed layout, written onto a disk image from the host with sgdisk (a peer), as
/// the node's installer writes it onto its system disk.
fn write_installed_layout(disk: &Path) {
    let out = Command::new("sgdisk")
        .args(["-n", "1:0:+16M", "-t", "1:EF00", "-c", "1:EFI"])
        .args(["-n", "2:0:+1M", "-t", "2:EF02", "-c", "2:BIOS"])
        .args(["-n", "3:0:+16M", "-t", "3:8300", "-c", "3:BOOT"])
        .args(["-n", "4:0:+1M", "-t", "4:8300", "-c", "4:META"])
        .arg(disk)
        .output()
        .unwrap();
    assert!(out.status.success(), "sgdisk: {}", String::from_utf8_lossy(&out.stderr));
}

/// Waits up to `secs` for `done`, polling; panics naming `what` (and `context()`) at the end.
fn eventually(secs: u64, what: &str, context: &dyn Fn() -> String, done: &mut dyn FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < std::time::Duration::from_secs(secs), "{what} within {secs} s\n{}", context());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn read_text(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).replace('\r', "")
}

/// The live QEMU named by a node's pid file, if any: its pid and argv.
fn live_qemu(pid_file: &Path) -> Option<(String, Vec<String>)> {
    let pid = std::fs::read_to_string(pid_file).ok()?.trim().to_string();
    let argv = cmdline(&pid);
    argv.first().is_some_and(|a| a.contains("qemu")).then_some((pid, argv))
}

/// A scratch root for a launcher test, with the kernel and the three inits; `None` (said) when
/// the kernel or a tool is missing.
fn launcher_scratch(case: &str) -> Option<(PathBuf, PathBuf)> {
    let root = scratch(case)?;
    let Some(vmlinuz) = kernel() else {
        skip(
            "no kernel tree at $TALOSBOX_KERNEL_ROOT or /var/cache/talosbox/kernel-dev/root \
             (tests/run unpacks Debian's cloud kernel there)",
        );
        let _ = std::fs::remove_dir_all(&root);
        return None;
    };
    if !have("sgdisk") {
        skip("sgdisk is not installed (apt-get install gdisk)");
        let _ = std::fs::remove_dir_all(&root);
        return None;
    }
    for (name, init) in [("wait", Init::Wait), ("reboot", Init::Reboot), ("poweroff", Init::PowerOff)] {
        std::fs::write(root.join(format!("{name}.cpio")), initramfs(init)).unwrap();
    }
    Some((root, vmlinuz))
}

/// A node booted directly on a blank system disk: while it runs, the host writes Talos's
/// installed layout onto that disk; then the guest panics (an NMI with `unknown_nmi_panic`,
/// and `panic=1` turns the panic into a reset). Its launcher sees QEMU end with `guest-reset`,
/// finds the layout, and starts QEMU again from the system disk (no -kernel, the system disk
/// boot index 0), with a new swtpm on the same TPM state; the record, the launch file, `show`
/// and the launcher log say so, and the serial log keeps the first boot. A quit over QMP then
/// ends the launcher and its swtpm.
#[test]
fn a_direct_node_is_restarted_from_the_disk_it_installed_itself_onto() {
    let Some((root, vmlinuz)) = launcher_scratch("inst") else { return };
    if !have("swtpm") {
        skip("swtpm is not installed (apt-get install swtpm)");
        let _ = std::fs::remove_dir_all(&root);
        return;
    }
    let state = root.join("s");
    let guard = Cluster { names: &["inst"], state: state.clone() };
    let artifacts = root.join("art");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(artifacts.join("SHA256SUMS"), "sums\n").unwrap();
    let (s, k, i, a) = (
        state.to_string_lossy().to_string(),
        vmlinuz.to_string_lossy().to_string(),
        root.join("wait.cpio").to_string_lossy().to_string(),
        artifacts.to_string_lossy().to_string(),
    );
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "inst",
        "--state",
        &s,
        "--artifacts",
        &a,
        "--kernel",
        &k,
        "--initrd",
        &i,
        "--blank-disk",
        "--disk-size",
        "128",
        "--with-tpm",
        "--memory",
        "512",
        "--extra-kernel-args",
        "panic=1 unknown_nmi_panic",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("system disk, blank (--blank-disk"), "{}", text(&out));
    assert!(
        text(&out).contains("inst-controlplane-1: boots the kernel and initramfs (direct) until it installs itself"),
        "{}",
        text(&out)
    );
    let dir = state.join("inst");
    let node = "inst-controlplane-1";
    let (system, serial, launcher_log) = (
        dir.join(format!("{node}.system.raw")),
        dir.join(format!("{node}.log")),
        dir.join(format!("{node}.launcher.log")),
    );
    let pid_file = dir.join(format!("{node}.pid"));
    let rec = record(&dir);
    assert_eq!(rec["nodes"][0]["boots_from"], "direct");
    assert_eq!(rec["nodes"][0]["disks"][0]["source"], serde_json::Value::Null, "--blank-disk: no image copied");
    assert_eq!(du(&system), 0, "a blank system disk");
    assert_eq!(std::fs::read_link(dir.join("images/boot")).unwrap(), artifacts, "images/boot is the artifacts");
    let launcher = read_pid(&dir.join(format!("{node}.launcher.pid")));
    let (first, argv) = live_qemu(&pid_file).expect("QEMU runs");
    assert!(argv.iter().any(|a| a == "-kernel") && argv.iter().any(|a| a == "-no-reboot"), "{argv:?}");
    assert!(!argv.iter().any(|a| a.contains("bootindex")), "{argv:?}");
    let swtpm_pid_file = dir.join("controlplane-1.tpm/swtpm.pid");
    let swtpm_first = read_pid(&swtpm_pid_file);
    assert!(running(&swtpm_first, "swtpm"));
    let logs = || format!("launcher log:\n{}\nserial log tail:\n{}", read_text(&launcher_log), read_text(&serial));

    // The guest is up (its kernel ran /init); then the "installer" writes the layout.
    eventually(120, "the guest runs /init", &logs, &mut || read_text(&serial).contains("Run /init as init process"));
    write_installed_layout(&system);
    qmp(&dir.join("controlplane-1.qmp"), "inject-nmi", serde_json::json!({}));

    let mut next = None;
    eventually(120, "a second QEMU", &logs, &mut || {
        next = live_qemu(&pid_file).filter(|(pid, _)| *pid != first);
        next.is_some()
    });
    let (second, argv) = next.unwrap();
    assert!(!argv.iter().any(|a| a == "-kernel" || a == "-initrd" || a == "-append"), "{argv:?}");
    assert!(
        argv.iter().any(|a| a == "virtio-blk-pci,id=system,drive=system-drive,serial=talosbox-system,bootindex=0"),
        "{argv:?}"
    );
    assert_eq!(stat_field(&second, PARENT), launcher, "the same launcher started it");
    // QEMU writes its pid file before it answers the launcher, which then logs the start.
    eventually(60, "the launcher logs the second start", &logs, &mut || {
        read_text(&launcher_log).contains(&format!("boot 2: QEMU (pid {second}) started, booting from its system disk"))
    });
    let log = read_text(&launcher_log);
    assert!(log.contains("SHUTDOWN guest-reset): the node rebooted"), "{log}");
    assert_eq!(log.matches("restarting from the installed system disk").count(), 1, "{log}");
    let console = read_text(&serial);
    assert_eq!(console.matches("Linux version").count(), 1, "the direct boot stays in the log: {console}");
    assert!(console.contains("Kernel panic - not syncing: NMI"), "{console}");
    assert_eq!(record(&dir)["nodes"][0]["boots_from"], "system-disk");
    let launch: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{node}.launch.json"))).unwrap()).unwrap();
    assert_eq!(launch["qemu"]["media"], serde_json::json!({"kind": "system-disk"}));
    let shown = text(&talosctl(&["cluster", "show", "--name", "inst", "--state", &s]));
    assert!(
        shown.contains(&format!("running (QEMU pid {second}, launcher pid {launcher}); boots from its system disk")),
        "{shown}"
    );
    // A new swtpm on the same state directory.
    let mut swtpm_second = String::new();
    eventually(10, "a second swtpm", &logs, &mut || {
        swtpm_second = std::fs::read_to_string(&swtpm_pid_file).unwrap_or_default().trim().to_string();
        swtpm_second != swtpm_first && running(&swtpm_second, "swtpm")
    });
    assert!(!running(&swtpm_first, "swtpm"), "the first swtpm left with its QEMU");
    let tpmstate = format!("dir={}", dir.join("controlplane-1.tpm").display());
    assert!(cmdline(&swtpm_second).contains(&tpmstate), "{:?}", cmdline(&swtpm_second));
    assert!(dir.join("controlplane-1.tpm/tpm2-00.permall").is_file(), "the TPM's state persists");

    // Quit: the node is off; the launcher and its swtpm end by themselves.
    qmp(&dir.join("controlplane-1.qmp"), "quit", serde_json::json!({}));
    eventually(20, "the launcher ends after quit", &logs, &mut || {
        !running(&launcher, "launch-node") && !running(&swtpm_second, "swtpm") && !running(&second, "qemu")
    });
    assert!(read_text(&launcher_log).contains("SHUTDOWN host-qmp-quit): the node is off; the launcher ends"));
    let out = talosctl(&["cluster", "destroy", "--name", "inst", "--state", &s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!dir.exists());
    drop(guard);
}

/// A directly booted guest that resets itself every boot, whose system disk is a copy of the
/// artifacts' disk.raw (which holds Talos's layout from the start, as the imager's does), is
/// started again each time from its kernel, as it was created (the serial log, appended to,
/// counts the boots), until `destroy` stops its launcher and QEMU in the middle of that; a guest
/// that powers itself off ends its launcher with no one asking.
#[test]
fn reboots_restart_the_node_as_it_was_and_a_power_off_ends_the_launcher() {
    let Some((root, vmlinuz)) = launcher_scratch("loop") else { return };
    let state = root.join("s");
    let guard = Cluster { names: &["loop", "off"], state: state.clone() };
    let s = state.to_string_lossy().to_string();
    let k = vmlinuz.to_string_lossy().to_string();
    let artifacts = root.join("art");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::File::create(artifacts.join("disk.raw")).unwrap().set_len(48 << 20).unwrap();
    write_installed_layout(&artifacts.join("disk.raw"));
    let a = artifacts.to_string_lossy().to_string();
    let create = |name: &str, init: &str, disk: &[&str]| {
        let initrd = root.join(format!("{init}.cpio")).to_string_lossy().to_string();
        let mut args = vec![
            "cluster",
            "create",
            "--skip-config",
            "--name",
            name,
            "--state",
            &s,
            "--artifacts",
            &a,
            "--kernel",
            &k,
            "--initrd",
            &initrd,
            "--disk-size",
            "64",
            "--memory",
            "512",
        ];
        args.extend(disk);
        let out = talosctl(&args);
        assert!(out.status.success(), "{}", text(&out));
        text(&out)
    };

    let printed = create("loop", "reboot", &[]);
    assert!(printed.contains("system disk, 1 MiB of"), "a copy of disk.raw: {printed}");
    assert!(!printed.contains("until it installs itself"), "{printed}");
    let dir = state.join("loop");
    let node = "loop-controlplane-1";
    let (serial, launcher_log) = (dir.join(format!("{node}.log")), dir.join(format!("{node}.launcher.log")));
    let logs = || format!("launcher log:\n{}\nserial log tail:\n{}", read_text(&launcher_log), read_text(&serial));
    eventually(180, "three boots in the serial log", &logs, &mut || {
        read_text(&serial).matches("Linux version").count() >= 3
    });
    let log = read_text(&launcher_log);
    assert!(log.matches("SHUTDOWN guest-reset): the node rebooted").count() >= 2, "{log}");
    assert!(!log.contains("installed"), "a disk installed from the start never switches: {log}");
    if let Some((_, argv)) = live_qemu(&dir.join(format!("{node}.pid"))) {
        assert!(argv.iter().any(|a| a == "-kernel"), "still booting directly: {argv:?}");
    }
    assert_eq!(record(&dir)["nodes"][0]["boots_from"], "direct");
    let launcher = read_pid(&dir.join(format!("{node}.launcher.pid")));
    let pid_file = dir.join(format!("{node}.pid"));
    let out = talosctl(&["cluster", "destroy", "--name", "loop", "--state", &s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&format!("{node}: launcher (pid {launcher}) stopped")), "{}", text(&out));
    assert!(!running(&launcher, "launch-node"));
    // Nothing restarted behind destroy's back: no QEMU of this node is left.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let pid_arg = pid_file.to_string_lossy().to_string();
    let strays: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|p| p.chars().all(|c| c.is_ascii_digit()))
        .filter(|p| cmdline(p).contains(&pid_arg))
        .collect();
    assert!(strays.is_empty(), "QEMU {strays:?} of a destroyed node");

    let printed = create("off", "poweroff", &["--blank-disk"]);
    assert!(printed.contains("until it installs itself onto its system disk"), "{printed}");
    let dir = state.join("off");
    let node = "off-controlplane-1";
    let launcher = read_pid(&dir.join(format!("{node}.launcher.pid")));
    let launcher_log = dir.join(format!("{node}.launcher.log"));
    let logs = || read_text(&launcher_log);
    eventually(120, "the launcher ends when the guest powers off", &logs, &mut || !running(&launcher, "launch-node"));
    let log = read_text(&launcher_log);
    assert!(log.contains("SHUTDOWN guest-shutdown): the node is off; the launcher ends"), "{log}");
    assert_eq!(log.matches("started, booting from").count(), 1, "{log}");
    let shown = text(&talosctl(&["cluster", "show", "--name", "off", "--state", &s]));
    assert!(shown.contains(&format!("{node}: not running")), "{shown}");
    let out = talosctl(&["cluster", "destroy", "--name", "off", "--state", &s]);
    assert!(out.status.success(), "{}", text(&out));
    drop(guard);
}

/// A UKI node (`--uki` without a value: the artifacts' talosbox.efi; its ESP booted under OVMF)
/// whose blank system disk gets the installed layout is moved off its ESP when reset over QMP
/// (`system_reset`, the reset button).
#[test]
fn a_uki_node_leaves_its_esp_for_its_installed_disk() {
    let Some(root) = scratch("esp") else { return };
    if !have("sgdisk") || !have("mcopy") || !Path::new("/usr/share/OVMF/OVMF_CODE_4M.fd").exists() {
        skip("sgdisk, mtools or OVMF is not installed (apt-get install gdisk mtools dosfstools ovmf)");
        let _ = std::fs::remove_dir_all(&root);
        return;
    }
    let state = root.join("s");
    let guard = Cluster { names: &["esp"], state: state.clone() };
    // OVMF will not boot it; the test is about what the launcher does with the media.
    let artifacts = root.join("art");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(artifacts.join("talosbox.efi"), vec![0u8; 4096]).unwrap();
    let (s, a) = (state.to_string_lossy().to_string(), artifacts.to_string_lossy().to_string());
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "esp",
        "--state",
        &s,
        "--artifacts",
        &a,
        "--uki",
        "--blank-disk",
        "--disk-size",
        "64",
        "--memory",
        "512",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let dir = state.join("esp");
    let node = "esp-controlplane-1";
    let pid_file = dir.join(format!("{node}.pid"));
    let launcher_log = dir.join(format!("{node}.launcher.log"));
    let logs = || read_text(&launcher_log);
    let (first, argv) = live_qemu(&pid_file).expect("QEMU runs");
    assert!(argv.iter().any(|a| a.contains("id=esp-drive")), "{argv:?}");
    assert_eq!(record(&dir)["nodes"][0]["boots_from"], "esp");
    write_installed_layout(&dir.join(format!("{node}.system.raw")));
    qmp(&dir.join("controlplane-1.qmp"), "system_reset", serde_json::json!({}));
    let mut next = None;
    eventually(60, "a second QEMU", &logs, &mut || {
        next = live_qemu(&pid_file).filter(|(pid, _)| *pid != first);
        next.is_some()
    });
    let (_, argv) = next.unwrap();
    assert!(!argv.iter().any(|a| a.contains("esp-drive") || a.contains("id=esp,")), "{argv:?}");
    assert!(argv.iter().any(|a| a.ends_with("serial=talosbox-system,bootindex=0")), "{argv:?}");
    let log = read_text(&launcher_log);
    assert!(log.contains("SHUTDOWN host-qmp-system-reset): the node rebooted"), "{log}");
    assert!(log.contains("restarting from the installed system disk instead of the UKI's ESP"), "{log}");
    assert_eq!(record(&dir)["nodes"][0]["boots_from"], "system-disk");
    let out = talosctl(&["cluster", "destroy", "--name", "esp", "--state", &s]);
    assert!(out.status.success(), "{}", text(&out));
    drop(guard);
}

/// Every node's QEMU runs the same serving command for 10.0.2.100:80; run as QEMU runs it (the
/// connection on stdin and stdout, through sh), it answers the artifacts under /images/boot/,
/// refuses to leave images/, and has no configuration for a node not given one.
#[test]
fn every_node_is_served_the_artifacts_it_booted_from() {
    let Some(root) = scratch("img") else { return };
    let state = root.join("s");
    let guard = Cluster { names: &["img"], state: state.clone() };
    let artifacts = root.join("art");
    std::fs::create_dir_all(&artifacts).unwrap();
    let payload: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(artifacts.join("vmlinuz"), &payload).unwrap();
    let (s, d, a) = (
        state.to_string_lossy().to_string(),
        root.join("empty.raw").to_string_lossy().to_string(),
        artifacts.to_string_lossy().to_string(),
    );
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "img",
        "--state",
        &s,
        "--disk-image",
        &d,
        "--artifacts",
        &a,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("at http://10.0.2.100/images/boot/"), "{}", text(&out));
    let dir = state.join("img");
    let (_, argv) = live_qemu(&dir.join("img-controlplane-1.pid")).expect("QEMU runs");
    let netdev = argv.iter().find(|a| a.starts_with("user,id=api,")).unwrap();
    // Each forward's command runs to the next option (the commands hold no single comma).
    let forward = |prefix: &str| {
        let rest = netdev.split(prefix).nth(1)?;
        Some(rest.split(",guestfwd=").next().unwrap_or(rest).to_string())
    };
    let command = forward(",guestfwd=tcp:10.0.2.100:80-cmd:").expect("a serving guestfwd");
    let https = forward(",guestfwd=tcp:10.0.2.100:443-cmd:").expect("an https guestfwd");
    assert!(https.starts_with(&command) && https.contains(" --tls "), "{https}");
    let command = command.as_str();
    let ask = |request: &str| {
        use std::io::Write;
        let mut child = Command::new("sh")
            .args(["-c", command])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(request.as_bytes()).unwrap();
        child.wait_with_output().unwrap().stdout
    };
    let got = ask("GET /images/boot/vmlinuz HTTP/1.1\r\nHost: 10.0.2.100\r\n\r\n");
    let split = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&got[..split]);
    assert!(
        head.starts_with("HTTP/1.1 200 OK") && head.contains(&format!("Content-Length: {}", payload.len())),
        "{head}"
    );
    assert!(got[split..] == payload[..], "the body is the file");
    for (request, status) in [
        ("GET /images/../cluster.json HTTP/1.1\r\n\r\n", "400"),
        ("GET /images/boot/../../kms.key HTTP/1.1\r\n\r\n", "400"),
        ("GET /config.yaml HTTP/1.1\r\n\r\n", "404"),
        ("GET /cluster.json HTTP/1.1\r\n\r\n", "404"),
    ] {
        let got = String::from_utf8_lossy(&ask(request)).into_owned();
        assert!(got.starts_with(&format!("HTTP/1.1 {status} ")), "{request}: {got}");
    }
    drop(guard);
}

#[test]
fn a_blank_disk_with_a_disk_image_is_refused() {
    let root = PathBuf::from(format!("/tmp/tbp-blank-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let image = root.join("disk.raw");
    std::fs::write(&image, vec![0u8; 1 << 20]).unwrap();
    let state = root.join("s");
    let (s, i) = (state.to_string_lossy().to_string(), image.to_string_lossy().to_string());
    let out = talosctl(&[
        "cluster",
        "create",
        "--skip-config",
        "--name",
        "b",
        "--state",
        &s,
        "--disk-image",
        &i,
        "--blank-disk",
    ]);
    assert!(!out.status.success());
    let t = text(&out);
    assert!(t.contains("--blank-disk and --disk-image exclude each other"), "{t}");
    assert!(!state.join("b").exists(), "a refused create must leave nothing behind");
    std::fs::remove_dir_all(&root).unwrap();
}

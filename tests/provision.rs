//! `talosctl cluster create` / `destroy` against real QEMU and swtpm processes. The nodes boot
//! an empty disk, so no images are needed: these tests are about the provisioner's processes,
//! ports, files, disks and cleanup, not the guest (tests/vm/boot-paths boots real images).
//! What the guest would see of its disks and UUID is asked of QEMU itself, over QMP.

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

    let pids: Vec<PathBuf> = nodes.iter().map(|n| dir.join(format!("{}.pid", n["name"].as_str().unwrap()))).collect();
    let pid_texts: Vec<String> = pids.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    let out = talosctl(&["cluster", "destroy", "--name", "two", "--state", &s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!dir.exists(), "state directory left behind");
    for pid in pid_texts {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&cmdline).contains("qemu"), "QEMU {pid} still running");
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

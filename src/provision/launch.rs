//! A node's launcher, as Talos's QEMU launcher: one process per node, `talosbox talosctl cluster
//! launch-node --launch <node>.launch.json`, that `create` starts detached (it makes a session
//! of its own, so it outlives talosctl and any terminal). It owns the node's swtpm and QEMU. QEMU
//! runs in its foreground with `-no-reboot`, so a reboot of the guest ends QEMU; the launcher
//! learns why from the `SHUTDOWN` event on its own QMP connection (QEMU connects to the
//! launcher's socket at start, so no event is missed) and, on a reboot, starts swtpm (same state
//! directory: the TPM's state persists) and QEMU again ([`after_shutdown`]). Before it does, a
//! node booted directly or from the UKI's ESP whose system disk held no installed boot layout
//! when it was created (a `--blank-disk`) and holds one now — the node installed itself there —
//! is switched to booting from that disk ([`media_after_reset`]); the switch is kept in the
//! launch file and the cluster record, and said in the launcher's log. A node whose system disk
//! is a copy of `disk.raw` (which has that layout from the start) keeps the media it was
//! created with. A power-off, a quit or a QEMU that dies ends the launcher.
//!
//! It never restarts anything after SIGTERM (`destroy` stops the launcher first, then QEMU, so a
//! QEMU being stopped is never started again), never signals a process it cannot tell is its own
//! (pids are checked against their command line), and touches the node's disks only to read the
//! system disk's partition table while no QEMU runs.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::argv::{self, BootMedia, Media, NodeLaunch, SwtpmLaunch};
use super::disks::{self, DiskRole};
use super::host;
use super::{ProvisionError, io_err};

/// The launcher's argv[0], whatever the binary's file is called: [`host::Ours::launcher`] finds
/// it by this name and its launch file.
pub const LAUNCHER_ARGV0: &str = "talosbox";

/// How long QEMU may take from its start to answering on the launcher's QMP connection.
const QEMU_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an swtpm may take to leave after its QEMU went away (it ends itself then).
const SWTPM_LEAVE: Duration = Duration::from_secs(5);

/// One node's launch file: everything its launcher needs, written by `create` and rewritten by
/// the launcher when the node switches to its system disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchConfig {
    /// The cluster directory, whose record the launcher updates.
    pub cluster_dir: PathBuf,
    pub qemu: NodeLaunch,
    pub swtpm: Option<SwtpmLaunch>,
    /// The launcher's log: a line per start, stop and switch (and its own errors).
    pub log: PathBuf,
    /// QEMU's stderr, of its latest start.
    pub qemu_stderr: PathBuf,
    /// The node boots other media while its system disk holds no installed boot layout: once
    /// the disk holds one (the node installed itself), the launcher moves it to the disk. Set by
    /// `create` from the disk it made; cleared by the switch.
    #[serde(default)]
    pub switch_when_installed: bool,
}

impl LaunchConfig {
    pub fn read(path: &Path) -> Result<Self, ProvisionError> {
        let text = std::fs::read_to_string(path).map_err(io_err("reading the launch file", path))?;
        serde_json::from_str(&text).map_err(|source| ProvisionError::Record { path: path.to_path_buf(), source })
    }

    /// Writes the file whole or not at all (a new file renamed over the old), readable by this
    /// user only.
    pub fn write(&self, path: &Path) -> Result<(), ProvisionError> {
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|source| ProvisionError::Record { path: path.to_path_buf(), source })?;
        text.push('\n');
        let tmp = path.with_extension("json.tmp");
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(io_err("writing the launch file", &tmp))?;
        std::fs::rename(&tmp, path).map_err(io_err("renaming into place", path))
    }
}

/// A node's launch file in the cluster directory.
pub fn launch_file(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.launch.json"))
}

/// The pid file of a node's launcher.
pub fn pid_file(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.launcher.pid"))
}

/// A node's launcher log, beside its serial log.
pub fn log_file(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.launcher.log"))
}

/// What the launcher does once QEMU has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterStop {
    /// The machine was reset: start QEMU again.
    Restart,
    /// The machine is off: the launcher ends.
    End,
}

/// What QEMU's end means, from the reason of its `SHUTDOWN` event (`None`: it ended without
/// one, killed or crashed). With `-no-reboot` every reset ends QEMU: `guest-reset` is the guest
/// rebooting (a kernel panic with `panic=N` too), `host-qmp-system-reset` a reset asked over QMP
/// (the reset button); both restart. A guest power-off (`guest-shutdown`), `quit`
/// (`host-qmp-quit`), a signal to QEMU (`host-signal`), a panic QEMU itself catches
/// (`guest-panic`) and everything else end the node.
pub fn after_shutdown(reason: Option<&str>) -> AfterStop {
    match reason {
        Some("guest-reset" | "host-qmp-system-reset") => AfterStop::Restart,
        _ => AfterStop::End,
    }
}

/// The media a node restarts from: its system disk once that holds an installed boot layout,
/// when the node does not boot it yet and is waiting to (`armed`: the disk had no such layout
/// when the node was created); `None` keeps what it has.
pub fn media_after_reset(current: &Media, armed: bool, installed: bool) -> Option<Media> {
    (armed && installed && *current != Media::SystemDisk).then_some(Media::SystemDisk)
}

/// The one line a launcher writes to its stdout, for `create`: its QEMU runs, or why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
enum StartReport {
    Started { qemu_pid: u32 },
    QemuFailed { status: String, stderr: String },
    SwtpmFailed { detail: String },
    Failed { message: String },
}

impl StartReport {
    fn from_error(e: &ProvisionError) -> Self {
        match e {
            ProvisionError::QemuStart { status, stderr, .. } => {
                StartReport::QemuFailed { status: status.clone(), stderr: stderr.clone() }
            }
            ProvisionError::SwtpmStart { detail, .. } => StartReport::SwtpmFailed { detail: detail.clone() },
            other => StartReport::Failed { message: other.to_string() },
        }
    }
}

/// A launcher `create` started: its pid and its QEMU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub launcher_pid: u32,
    pub qemu_pid: u32,
}

/// Starts a node's launcher on the launch file `file` (already written), records its pid in
/// `pid_file`, and waits until it reports QEMU running (answering on its QMP connection) or
/// the reason it could not start it: QEMU's exit status and stderr, swtpm's failure, or the
/// launcher's own.
pub fn spawn(exe: &Path, file: &Path, config: &LaunchConfig, pid_file: &Path) -> Result<Started, ProvisionError> {
    use std::os::unix::process::CommandExt;
    let node = &config.qemu.name;
    // The launcher's stderr (panics, a failure to read its launch file) goes to its log.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&config.log)
        .map_err(io_err("opening the launcher log", &config.log))?;
    let mut child = std::process::Command::new(exe)
        .arg0(LAUNCHER_ARGV0)
        .args(["talosctl", "cluster", "launch-node", "--launch"])
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|source| ProvisionError::Spawn {
            tool: format!("{} (node {node}'s launcher)", exe.display()),
            source,
        })?;
    let launcher_pid = child.id();
    if let Err(e) = std::fs::write(pid_file, format!("{launcher_pid}\n")) {
        // Without its pid file nothing could find it later: stop it now (our own child).
        let _ = child.kill();
        let _ = child.wait();
        return Err(io_err("writing the launcher's pid file", pid_file)(e));
    }
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        // Blocks until the launcher reports: it gives QEMU QEMU_START_TIMEOUT, swtpm 5 s.
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let launcher_failed =
        |detail: String| ProvisionError::Launcher { node: node.clone(), detail, log: config.log.clone() };
    match serde_json::from_str::<StartReport>(line.trim()) {
        // The child is not waited for: it runs on, in its own session, after talosctl exits.
        Ok(StartReport::Started { qemu_pid }) => Ok(Started { launcher_pid, qemu_pid }),
        Ok(StartReport::QemuFailed { status, stderr }) => {
            let _ = child.wait();
            Err(ProvisionError::QemuStart { node: node.clone(), status, stderr })
        }
        Ok(StartReport::SwtpmFailed { detail }) => {
            let _ = child.wait();
            Err(ProvisionError::SwtpmStart { node: node.clone(), detail })
        }
        Ok(StartReport::Failed { message }) => {
            let _ = child.wait();
            Err(launcher_failed(format!("failed: {message}")))
        }
        Err(_) => {
            let status = child.wait().map(|s| s.to_string()).unwrap_or_else(|e| format!("an unknown status ({e})"));
            let said = line.trim();
            let said = if said.is_empty() { String::new() } else { format!(" after writing {said:?}") };
            Err(launcher_failed(format!("exited with {status} before starting QEMU{said}")))
        }
    }
}

/// The launcher's log: RFC 3339 time (UTC, seconds) and a line.
struct Log {
    file: std::fs::File,
}

impl Log {
    fn open(path: &Path) -> Result<Self, ProvisionError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(io_err("opening the launcher log", path))?;
        Ok(Log { file })
    }

    /// Best effort: a full disk must not stop the node.
    fn line(&mut self, text: &str) {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let now = crate::cosi::timestamp::format(UNIX_EPOCH + Duration::from_secs(secs));
        let _ = writeln!(self.file, "{now} {text}");
    }
}

/// The launcher's main: runs the node in `file` until it is off or the launcher is told to stop.
/// Its first QEMU's start (or failure) is reported on stdout for `create`.
pub fn run(file: &Path) -> Result<(), ProvisionError> {
    // A session of its own: no terminal's hangup or ^C reaches the launcher or its QEMU. (It is
    // not a process group leader, being freshly spawned, so this succeeds.)
    let _ = rustix::process::setsid();
    let mut report = Some(std::io::stdout());
    let config = match LaunchConfig::read(file) {
        Ok(c) => c,
        Err(e) => {
            send(&mut report, &StartReport::from_error(&e));
            return Err(e);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let e = io_err("starting the launcher's runtime", file)(e);
            send(&mut report, &StartReport::from_error(&e));
            return Err(e);
        }
    };
    runtime.block_on(supervise(file, config, &mut report))
}

/// Writes the report line once; later reports go nowhere.
fn send(report: &mut Option<std::io::Stdout>, what: &StartReport) {
    if let Some(mut out) = report.take()
        && let Ok(text) = serde_json::to_string(what)
    {
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }
}

async fn supervise(
    file: &Path,
    mut config: LaunchConfig,
    report: &mut Option<std::io::Stdout>,
) -> Result<(), ProvisionError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut log = Log::open(&config.log)?;
    let handler = |e: std::io::Error| io_err("installing the launcher's signal handlers", file)(e);
    let mut term = signal(SignalKind::terminate()).map_err(handler)?;
    let mut int = signal(SignalKind::interrupt()).map_err(handler)?;
    let node = config.qemu.name.clone();
    log.line(&format!("launcher (pid {}) for node {node} from {}", std::process::id(), file.display()));
    let mut boot = 0u32;
    loop {
        boot += 1;
        let (mut qemu, mut events) = match start(&config).await {
            Ok(started) => started,
            Err(e) => {
                log.line(&format!("boot {boot}: {e}; the launcher ends"));
                send(report, &StartReport::from_error(&e));
                stop_swtpm(&config, &mut log);
                return Err(e);
            }
        };
        let pid = qemu.id().unwrap_or(0);
        send(report, &StartReport::Started { qemu_pid: pid });
        log.line(&format!("boot {boot}: QEMU (pid {pid}) started, booting from {}", config.qemu.media.kind()));
        let (reason, status) = tokio::select! {
            ended = watch(&mut events, &mut qemu) => ended,
            _ = term.recv() => {
                log.line(&format!("SIGTERM: the launcher ends; QEMU (pid {pid}) is left to whoever stops it"));
                return Ok(());
            }
            _ = int.recv() => {
                log.line(&format!("SIGINT: the launcher ends; QEMU (pid {pid}) is left to whoever stops it"));
                return Ok(());
            }
        };
        let why = match &reason {
            Some(r) => format!("SHUTDOWN {r}"),
            None => "no SHUTDOWN event".to_string(),
        };
        match after_shutdown(reason.as_deref()) {
            AfterStop::End => {
                log.line(&format!("boot {boot}: QEMU exited ({status}, {why}): the node is off; the launcher ends"));
                stop_swtpm(&config, &mut log);
                return Ok(());
            }
            AfterStop::Restart => {
                log.line(&format!("boot {boot}: QEMU exited ({status}, {why}): the node rebooted"));
                switch_if_installed(file, &mut config, &mut log);
            }
        }
    }
}

/// Before a restart: moves a node that is not booting its system disk to it when the disk now
/// holds an installed boot layout, and keeps that in the launch file and the record. A disk
/// that cannot be read is logged and the node restarts as it was.
fn switch_if_installed(file: &Path, config: &mut LaunchConfig, log: &mut Log) {
    if !config.switch_when_installed || config.qemu.media == Media::SystemDisk {
        return;
    }
    let Some(system) = config.qemu.disks.iter().find(|d| d.role == DiskRole::System) else { return };
    let installed = match disks::holds_installed_layout(&system.path) {
        Ok(installed) => installed,
        Err(e) => {
            log.line(&format!("{e}; restarting from {} as before", config.qemu.media.kind()));
            false
        }
    };
    let Some(media) = media_after_reset(&config.qemu.media, config.switch_when_installed, installed) else {
        return;
    };
    let before = config.qemu.media.kind();
    config.qemu.media = media;
    config.switch_when_installed = false;
    log.line(&format!(
        "{} holds an installed boot layout ({}): restarting from the installed system disk instead of {before}",
        system.path.display(),
        disks::INSTALLED_PARTITIONS.join(", ")
    ));
    if let Err(e) = config.write(file) {
        log.line(&format!("{e} (the launcher goes on with the system disk)"));
    }
    let node = config.qemu.name.clone();
    if let Err(e) =
        super::state::update_node(&config.cluster_dir, &node, |n| n.boots_from = Some(BootMedia::SystemDisk))
    {
        log.line(&format!("recording the switch in the cluster record: {e}"));
    }
}

/// QEMU's events as the launcher reads them, with the reason of a `SHUTDOWN` seen so far.
struct Events {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>,
    writer: tokio::net::unix::OwnedWriteHalf,
    shutdown: Option<String>,
}

impl Events {
    /// The next message; `None` at the end of the connection (QEMU is gone).
    async fn next(&mut self) -> Option<serde_json::Value> {
        loop {
            let line = self.lines.next_line().await.ok()??;
            let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if message["event"] == "SHUTDOWN" {
                self.shutdown = message["data"]["reason"].as_str().map(str::to_string);
            }
            return Some(message);
        }
    }

    /// Sends a command and waits for its answer, passing events by.
    async fn execute(&mut self, command: &str) -> Result<(), String> {
        let text = format!("{{\"execute\":\"{command}\"}}\n");
        self.writer.write_all(text.as_bytes()).await.map_err(|e| format!("sending {command}: {e}"))?;
        loop {
            let Some(message) = self.next().await else {
                return Err(format!("QEMU closed its QMP connection before answering {command}"));
            };
            if message.get("return").is_some() {
                return Ok(());
            }
            if let Some(error) = message.get("error") {
                return Err(format!("QMP {command}: {error}"));
            }
        }
    }
}

/// Waits for QEMU to end, reading its events: the last `SHUTDOWN` reason and its exit status.
async fn watch(events: &mut Events, qemu: &mut tokio::process::Child) -> (Option<String>, String) {
    while events.next().await.is_some() {}
    let status = match qemu.wait().await {
        Ok(s) => s.to_string(),
        Err(e) => format!("status unknown: {e}"),
    };
    (events.shutdown.take(), status)
}

/// How QEMU's connection to the launcher's socket went.
enum Connect {
    Stream(tokio::net::UnixStream),
    /// QEMU exited first, with this status.
    Exited(String),
    Failed(String),
}

/// Starts the node's swtpm (when it has one) and QEMU, and waits until QEMU answers on the
/// launcher's QMP connection: then its machine is built and running.
async fn start(config: &LaunchConfig) -> Result<(tokio::process::Child, Events), ProvisionError> {
    let n = &config.qemu;
    if let Some(t) = &config.swtpm {
        wait_swtpm_gone(t);
        start_swtpm(&n.name, t)?;
    }
    let _ = std::fs::remove_file(&n.events_socket);
    let listener =
        tokio::net::UnixListener::bind(&n.events_socket).map_err(io_err("listening on", &n.events_socket))?;
    let stderr = std::fs::File::create(&config.qemu_stderr).map_err(io_err("creating", &config.qemu_stderr))?;
    let program = host::which(host::QEMU.name).unwrap_or_else(|| PathBuf::from(host::QEMU.name));
    let mut child = tokio::process::Command::new(program)
        .args(argv::qemu_argv(n))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|source| ProvisionError::Spawn { tool: host::QEMU.name.into(), source })?;
    let failed = |status: String| ProvisionError::QemuStart {
        node: n.name.clone(),
        status,
        stderr: std::fs::read_to_string(&config.qemu_stderr).unwrap_or_default().trim().to_string(),
    };
    let connected = tokio::time::timeout(QEMU_START_TIMEOUT, async {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => Connect::Stream(stream),
                Err(e) => Connect::Failed(format!("accepting on {}: {e}", n.events_socket.display())),
            },
            status = child.wait() => Connect::Exited(match status {
                Ok(s) => s.to_string(),
                Err(e) => format!("status unknown: {e}"),
            }),
        }
    })
    .await
    .unwrap_or_else(|_| {
        Connect::Failed(format!(
            "no connection to {} within {} s",
            n.events_socket.display(),
            QEMU_START_TIMEOUT.as_secs()
        ))
    });
    drop(listener);
    let _ = std::fs::remove_file(&n.events_socket);
    let stream = match connected {
        Connect::Stream(stream) => stream,
        Connect::Exited(status) => return Err(failed(status)),
        Connect::Failed(why) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(failed(format!("{why} (killed)")));
        }
    };
    let (read, writer) = stream.into_split();
    let mut events = Events { lines: tokio::io::BufReader::new(read).lines(), writer, shutdown: None };
    // The greeting comes as soon as QEMU connects; the answers only once its main loop runs,
    // after the accelerator and the machine are set up (where a bad option fails).
    let handshake = tokio::time::timeout(QEMU_START_TIMEOUT, async {
        events.next().await.ok_or_else(|| "QEMU closed its QMP connection before greeting".to_string())?;
        events.execute("qmp_capabilities").await?;
        events.execute("query-status").await
    })
    .await;
    match handshake {
        Ok(Ok(())) => Ok((child, events)),
        Ok(Err(why)) => {
            let status = match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
                Ok(Ok(s)) => s.to_string(),
                _ => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    format!("{why} (killed)")
                }
            };
            Err(failed(status))
        }
        Err(_) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            Err(failed(format!("no QMP answer within {} s (killed)", QEMU_START_TIMEOUT.as_secs())))
        }
    }
}

/// Waits for the swtpm of the previous QEMU to leave (it ends itself when its QEMU goes), and
/// stops it if it lingers: the next one uses the same state directory and socket.
fn wait_swtpm_gone(t: &SwtpmLaunch) {
    let ours = host::Ours::swtpm(&t.pid_file);
    if let Some(pid) = host::read_pid(&t.pid_file).filter(|p| host::is_ours_or_leaving(*p, &ours))
        && !host::wait_gone(pid, &ours, SWTPM_LEAVE)
    {
        host::terminate(pid, &ours, Duration::from_secs(3));
    }
    let _ = std::fs::remove_file(&t.socket);
}

/// After the node's last QEMU: the swtpm leaves by itself, or is stopped.
fn stop_swtpm(config: &LaunchConfig, log: &mut Log) {
    let Some(t) = &config.swtpm else { return };
    let ours = host::Ours::swtpm(&t.pid_file);
    if let Some(pid) = host::read_pid(&t.pid_file).filter(|p| host::is_ours(*p, &ours))
        && !host::wait_gone(pid, &ours, SWTPM_LEAVE)
    {
        let gone = host::terminate(pid, &ours, Duration::from_secs(3));
        log.line(&format!("swtpm (pid {pid}) {}", if gone { "stopped" } else { "would not stop" }));
    }
}

/// Starts swtpm detached (it ends itself when QEMU disconnects) and waits for its socket.
pub fn start_swtpm(node: &str, t: &SwtpmLaunch) -> Result<(), ProvisionError> {
    std::fs::create_dir_all(&t.state_dir).map_err(io_err("creating the TPM state directory", &t.state_dir))?;
    let program = host::which(host::SWTPM.name).unwrap_or_else(|| PathBuf::from(host::SWTPM.name));
    // An swtpm of the previous QEMU that was seen leaving may hold the state's lock a moment
    // longer: a start that fails is tried again for as long as one may take to leave.
    let tried = std::time::Instant::now();
    loop {
        let out = std::process::Command::new(&program)
            .args(argv::swtpm_argv(t))
            .stdin(Stdio::null())
            .output()
            .map_err(|source| ProvisionError::Spawn { tool: "swtpm".into(), source })?;
        if out.status.success() {
            break;
        }
        if tried.elapsed() >= SWTPM_LEAVE {
            // swtpm says why in its log, not on stderr.
            let log = std::fs::read_to_string(&t.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
            return Err(ProvisionError::SwtpmStart {
                node: node.to_string(),
                detail: format!(
                    "exited with {}: {} (its log {}: {})",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim(),
                    t.log.display(),
                    tail
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // swtpm daemonizes after creating its socket, but give the filesystem a moment regardless.
    let start = std::time::Instant::now();
    while !t.socket.exists() {
        if start.elapsed() > Duration::from_secs(5) {
            return Err(ProvisionError::SwtpmStart {
                node: node.to_string(),
                detail: format!("no control socket at {} after 5 s (log: {})", t.socket.display(), t.log.display()),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reason QEMU 7.2 gives a SHUTDOWN (qapi/run-state.json's ShutdownCause), and none.
    #[test]
    fn only_a_reset_restarts_the_node() {
        use AfterStop::{End, Restart};
        let table: &[(Option<&str>, AfterStop)] = &[
            (Some("guest-reset"), Restart),
            (Some("host-qmp-system-reset"), Restart),
            (Some("guest-shutdown"), End),
            (Some("host-qmp-quit"), End),
            (Some("host-signal"), End),
            (Some("host-ui"), End),
            (Some("host-error"), End),
            (Some("guest-panic"), End),
            (Some("subsystem-reset"), End),
            (Some("snapshot-load"), End),
            (Some("none"), End),
            (Some("something-newer"), End),
            (None, End),
        ];
        for (reason, want) in table {
            assert_eq!(after_shutdown(*reason), *want, "{reason:?}");
        }
    }

    /// (media, armed, installed) → the media of the next boot, if it changes.
    #[test]
    fn a_node_moves_to_its_system_disk_once_installed_and_only_then() {
        let direct = Media::Direct { kernel: "/k".into(), initrd: "/i".into(), cmdline: "c".into() };
        let esp = Media::Esp { image: "/e".into() };
        let disk = Some(Media::SystemDisk);
        let table: &[(&Media, bool, bool, Option<Media>)] = &[
            // A blank disk the node installed itself onto.
            (&direct, true, true, disk.clone()),
            (&esp, true, true, disk.clone()),
            // Not installed yet: as it was.
            (&direct, true, false, None),
            (&esp, true, false, None),
            // A copy of disk.raw, installed from the start: the node keeps its media.
            (&direct, false, true, None),
            (&esp, false, true, None),
            (&direct, false, false, None),
            // Already booting its disk.
            (&Media::SystemDisk, true, true, None),
            (&Media::SystemDisk, false, true, None),
            (&Media::SystemDisk, true, false, None),
        ];
        for (media, armed, installed, want) in table {
            assert_eq!(
                media_after_reset(media, *armed, *installed),
                *want,
                "{media:?} armed={armed} installed={installed}"
            );
        }
    }

    /// The report line `create` reads maps back to the error the launcher met.
    #[test]
    fn start_reports_carry_the_errors_across() {
        let e = ProvisionError::QemuStart { node: "n".into(), status: "exit status: 1".into(), stderr: "bad".into() };
        let line = serde_json::to_string(&StartReport::from_error(&e)).unwrap();
        assert_eq!(line, r#"{"result":"qemu-failed","status":"exit status: 1","stderr":"bad"}"#);
        let started = serde_json::to_string(&StartReport::Started { qemu_pid: 7 }).unwrap();
        assert_eq!(serde_json::from_str::<StartReport>(&started).unwrap(), StartReport::Started { qemu_pid: 7 });
        let e = ProvisionError::SwtpmStart { node: "n".into(), detail: "d".into() };
        assert_eq!(StartReport::from_error(&e), StartReport::SwtpmFailed { detail: "d".into() });
        let e = ProvisionError::NoHome;
        assert!(matches!(StartReport::from_error(&e), StartReport::Failed { .. }));
    }

    #[test]
    fn a_launch_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let config = LaunchConfig {
            cluster_dir: d.to_path_buf(),
            qemu: NodeLaunch {
                name: "c-controlplane-1".into(),
                uuid: crate::provision::alloc::machine_uuid("c", 0),
                accel: "tcg".into(),
                memory_mib: 1024,
                cpus: 2,
                media: Media::Direct { kernel: "/k".into(), initrd: "/i".into(), cmdline: "console=ttyS0".into() },
                ovmf: None,
                api_port: 40000,
                api_mac: crate::provision::alloc::mac("c", crate::provision::alloc::Nic::Api, 0),
                lan: crate::provision::alloc::mcast("c", &[]),
                lan_mac: crate::provision::alloc::mac("c", crate::provision::alloc::Nic::Lan, 0),
                tpm_socket: None,
                disks: disks::plan(d, "c-controlplane-1", &disks::DiskRequest::default(), None),
                serial_log: d.join("c-controlplane-1.log"),
                pid_file: d.join("c-controlplane-1.pid"),
                qmp_socket: d.join("controlplane-1.qmp"),
                events_socket: d.join("controlplane-1.events"),
                serve_command: Some("x".into()),
                serve_tls_command: None,
                kms_command: None,
            },
            swtpm: None,
            log: log_file(d, "c-controlplane-1"),
            qemu_stderr: d.join("c-controlplane-1.qemu.err"),
            switch_when_installed: true,
        };
        let file = launch_file(d, "c-controlplane-1");
        config.write(&file).unwrap();
        assert_eq!(LaunchConfig::read(&file).unwrap(), config);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        let mut switched = config.clone();
        switched.qemu.media = Media::SystemDisk;
        switched.switch_when_installed = false;
        switched.write(&file).unwrap();
        assert_eq!(LaunchConfig::read(&file).unwrap(), switched);
        assert!(!file.with_extension("json.tmp").exists());
    }
}

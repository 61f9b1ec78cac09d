//! The provisioner's contact with the host: finding the tools it runs (and naming the Debian
//! package when one is missing), building the UKI's FAT ESP with mtools, and finding, asking and
//! signalling the processes it started.
//!
//! Never signals a pid whose command line is not the one the pid file belongs to (program and the
//! pid file's own path: a stale pid file may point at a reused pid, even another node's QEMU), and
//! never runs anything as another user.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, test_kill_process};

use super::{ProvisionError, io_err};

pub use crate::hosttools::Tool;

pub const QEMU: Tool = Tool { name: "qemu-system-x86_64", package: "qemu-system-x86" };
pub const SWTPM: Tool = Tool { name: "swtpm", package: "swtpm" };
pub const MKFS_FAT: Tool = Tool { name: "mkfs.fat", package: "dosfstools" };
pub const MMD: Tool = Tool { name: "mmd", package: "mtools" };
pub const MCOPY: Tool = Tool { name: "mcopy", package: "mtools" };

/// Looks `name` up on `$PATH` plus the sbin directories.
pub fn which(name: &str) -> Option<PathBuf> {
    crate::hosttools::find(name)
}

/// Checks every tool (and firmware file) at once, so the user installs them in one go.
pub fn check_tools(tools: &[Tool], files: &[(&str, &'static str)]) -> Result<(), ProvisionError> {
    let files: Vec<(&Path, &str)> = files.iter().map(|(f, p)| (Path::new(*f), *p)).collect();
    crate::hosttools::require(tools, &files).map_err(ProvisionError::Host)
}

/// Runs a host tool to completion, turning failure into an error carrying its stderr.
fn run(tool: &Tool, args: &[&str]) -> Result<(), ProvisionError> {
    let what = args.join(" ");
    let mut cmd = crate::hosttools::command(*tool);
    cmd.args(args).stdin(Stdio::null());
    crate::hosttools::run(*tool, &what, &mut cmd).map(drop).map_err(ProvisionError::Host)
}

/// Builds a FAT image at `esp` holding `uki` as `\EFI\BOOT\BOOTX64.EFI`, the path firmware boots
/// from removable media when it has no boot entries (a fresh OVMF variable store has none).
pub fn build_esp(uki: &Path, esp: &Path) -> Result<(), ProvisionError> {
    let size = std::fs::metadata(uki).map_err(io_err("reading", uki))?.len();
    // Room for the file plus FAT overhead, rounded up to whole MiB, at least 32 MiB (FAT16/32).
    let kib = (size / 1024 + 8 * 1024).div_ceil(1024).max(32) * 1024;
    let _ = std::fs::remove_file(esp);
    let esp_s = esp.to_string_lossy();
    let uki_s = uki.to_string_lossy();
    run(&MKFS_FAT, &["-C", "-n", "ESP", "--invariant", &esp_s, &kib.to_string()])?;
    run(&MMD, &["-i", &esp_s, "::/EFI", "::/EFI/BOOT"])?;
    run(&MCOPY, &["-i", &esp_s, &uki_s, "::/EFI/BOOT/BOOTX64.EFI"])
}

/// Reads a pid file (QEMU's and swtpm's hold the pid and a newline).
pub fn read_pid(pid_file: &Path) -> Option<Pid> {
    let text = std::fs::read_to_string(pid_file).ok()?;
    Pid::from_raw(text.trim().parse().ok()?)
}

/// A process this provisioner started, as its command line shows it: the program its argv[0]
/// names, and the one argument only this node's process has (its own pid file). A pid file can
/// outlive its process, and the pid can then belong to another node's QEMU, of this cluster or
/// another one run by the same user; the program name alone would get that node killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ours {
    /// What argv[0]'s file name starts with.
    pub program: &'static str,
    /// An argument that must appear, whole, after argv[0].
    pub arg: String,
}

impl Ours {
    /// The QEMU started with `-pidfile <pid_file>`.
    pub fn qemu(pid_file: &Path) -> Self {
        Ours { program: "qemu", arg: super::argv::qemu_pid_arg(pid_file) }
    }

    /// The swtpm started with `--pid file=<pid_file>`.
    pub fn swtpm(pid_file: &Path) -> Self {
        Ours { program: "swtpm", arg: super::argv::swtpm_pid_arg(pid_file) }
    }

    /// The node launcher started as `talosbox talosctl cluster launch-node --launch
    /// <launch_file>` (its argv[0] is set to `talosbox` whatever the binary's file is called).
    pub fn launcher(launch_file: &Path) -> Self {
        Ours { program: super::launch::LAUNCHER_ARGV0, arg: launch_file.to_string_lossy().into_owned() }
    }
}

/// Sends a signal; errors (the process is already gone) are of no interest to the callers.
pub type Signaller = fn(Pid, Signal);

/// The real [`Signaller`].
pub fn signal(pid: Pid, sig: Signal) {
    let _ = kill_process(pid, sig);
}

/// The pid is alive and its command line is the one `ours` describes (guards against reused pids).
pub fn is_ours(pid: Pid, ours: &Ours) -> bool {
    if test_kill_process(pid).is_err() {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero())) else { return false };
    let mut args = cmdline.split(|b| *b == 0);
    let named = args.next().is_some_and(|argv0| {
        String::from_utf8_lossy(argv0).rsplit('/').next().is_some_and(|base| base.starts_with(ours.program))
    });
    named && args.any(|a| a == ours.arg.as_bytes())
}

/// Whether `pid` has ended: no such process, or a zombie (its files, locks and sockets are
/// released by then). A process on its way out has no command line for a moment while it still
/// holds them, so a process once seen to be ours is waited for by this, not by its name.
pub fn ended(pid: Pid) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())) else { return true };
    // The state follows the command name, which is in parentheses and may hold anything.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_none_or(|s| matches!(s, "Z" | "X"))
}

/// Whether `pid` is ours, or a process already leaving (no command line any more, not ended):
/// what a pid file names just after its process was told to go.
pub fn is_ours_or_leaving(pid: Pid, ours: &Ours) -> bool {
    is_ours(pid, ours)
        || (!ended(pid) && std::fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero())).is_ok_and(|c| c.is_empty()))
}

/// Waits up to `timeout` for the process to go away, if it is ours (or leaving).
pub fn wait_gone(pid: Pid, ours: &Ours, timeout: Duration) -> bool {
    !is_ours_or_leaving(pid, ours) || wait_ended(pid, timeout)
}

/// Waits up to `timeout` for `pid` to have [`ended`].
fn wait_ended(pid: Pid, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if ended(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ended(pid)
}

/// Stops a process we started: SIGTERM, then SIGKILL if it is still there after `grace`.
/// Returns true when it is gone.
pub fn terminate(pid: Pid, ours: &Ours, grace: Duration) -> bool {
    terminate_with(pid, ours, grace, signal)
}

/// [`terminate`], sending its signals through `send`.
pub fn terminate_with(pid: Pid, ours: &Ours, grace: Duration, send: Signaller) -> bool {
    if !is_ours(pid, ours) {
        return true;
    }
    send(pid, Signal::TERM);
    // Ours was checked: from here on the pid is this process until it is reaped.
    if wait_ended(pid, grace) {
        return true;
    }
    send(pid, Signal::KILL);
    wait_ended(pid, Duration::from_secs(2))
}

/// Sends one QMP command (after the capabilities handshake) and returns the reply line.
pub fn qmp(socket: &Path, command: &str) -> std::io::Result<String> {
    let stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?; // greeting
    writer.write_all(b"{\"execute\":\"qmp_capabilities\"}\n")?;
    line.clear();
    reader.read_line(&mut line)?;
    writer.write_all(format!("{{\"execute\":\"{command}\"}}\n").as_bytes())?;
    line.clear();
    // `quit` may close the socket before answering; that is success too.
    let _ = reader.read_line(&mut line);
    Ok(line)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::process::Command;

    /// Kills a test's process when the test ends, passed or failed, if it is still there: no
    /// stand-in outlives its test (or holds the harness's output open).
    pub(crate) struct Stray(pub Pid, pub Ours);

    impl Drop for Stray {
        fn drop(&mut self) {
            if is_ours(self.0, &self.1) {
                let _ = kill_process(self.0, Signal::KILL);
            }
        }
    }

    /// Waits for a just-spawned child to have exec'd (right after fork its cmdline is the parent's).
    fn wait_exec(pid: Pid, ours: &Ours) {
        let start = Instant::now();
        while !is_ours(pid, ours) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn pid_of(child: &std::process::Child) -> Pid {
        Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap()
    }

    /// A child that has exited but is not reaped yet has ended (a zombie holds nothing); a
    /// live one has not; a pid that never was has.
    #[test]
    fn ended_is_a_zombie_or_nothing() {
        assert!(!ended(rustix::process::getpid()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = pid_of(&child);
        let start = Instant::now();
        while !ended(pid) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(ended(pid), "an exited, unreaped child is a zombie");
        assert!(test_kill_process(pid).is_ok(), "the zombie is still there to be reaped");
        child.wait().unwrap();
        assert!(ended(pid));
    }

    #[test]
    fn terminate_stops_a_real_child_and_checks_its_name() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = pid_of(&child);
        let sleep = Ours { program: "sleep", arg: "30".into() };
        let _stray = Stray(pid, sleep.clone());
        wait_exec(pid, &sleep);
        assert!(is_ours(pid, &sleep));
        let qemu = Ours { program: "qemu", arg: "30".into() };
        assert!(!is_ours(pid, &qemu), "a pid whose program differs is not ours");
        assert!(terminate(pid, &qemu, Duration::from_millis(100)), "nothing named qemu to stop");
        assert!(is_ours(pid, &sleep), "a process of another program must not be signalled");
        // Reap in a thread so the zombie disappears while terminate polls.
        let reaper = std::thread::spawn(move || child.wait());
        assert!(terminate(pid, &sleep, Duration::from_secs(5)));
        reaper.join().unwrap().unwrap();
    }

    /// A stale pid file whose pid now belongs to another node's QEMU: same program, same user,
    /// but its -pidfile is that node's, so it is not ours and must not be signalled.
    #[test]
    fn a_qemu_with_another_nodes_pid_file_is_not_ours() {
        use std::os::unix::process::CommandExt;
        let dir = std::env::temp_dir().join(format!("talosbox-ours-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let theirs = dir.join("other-controlplane-1.pid");
        let mine = dir.join("dev-controlplane-1.pid");
        std::fs::write(&theirs, "").unwrap();
        // A real process whose command line looks like the other node's QEMU: argv[0] names
        // qemu and its pid file is an argument.
        let mut child = Command::new("tail")
            .arg0("qemu-system-x86_64")
            .args(["-f", &theirs.to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = pid_of(&child);
        let _stray = Stray(pid, Ours::qemu(&theirs));
        wait_exec(pid, &Ours::qemu(&theirs));
        assert!(is_ours(pid, &Ours::qemu(&theirs)));
        assert!(!is_ours(pid, &Ours::qemu(&mine)), "another node's QEMU is not ours");
        assert!(!is_ours(pid, &Ours::swtpm(&theirs)), "not a swtpm");
        assert!(terminate(pid, &Ours::qemu(&mine), Duration::from_millis(100)));
        assert!(is_ours(pid, &Ours::qemu(&theirs)), "another node's QEMU must not be signalled");
        let reaper = std::thread::spawn(move || child.wait());
        assert!(terminate(pid, &Ours::qemu(&theirs), Duration::from_secs(5)));
        reaper.join().unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// swtpm is told its pid file as `--pid file=<path>`: a real swtpm is ours only under its own.
    #[test]
    fn a_swtpm_is_ours_only_under_its_own_pid_file() {
        if check_tools(&[SWTPM], &[]).is_err() {
            let _ = writeln!(std::io::stderr(), "skipped: swtpm not installed (apt-get install swtpm)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("talosbox-swtpm-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let launch = |d: PathBuf| super::super::argv::SwtpmLaunch {
            socket: d.join("swtpm.sock"),
            pid_file: d.join("swtpm.pid"),
            log: d.join("swtpm.log"),
            state_dir: d,
        };
        let mine = launch(dir.join("a.tpm"));
        let theirs = launch(dir.join("b.tpm"));
        std::fs::create_dir_all(&mine.state_dir).unwrap();
        let status = Command::new(which("swtpm").unwrap())
            .args(super::super::argv::swtpm_argv(&mine))
            .stdin(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let pid = read_pid(&mine.pid_file).unwrap();
        let _stray = Stray(pid, Ours::swtpm(&mine.pid_file));
        assert!(is_ours(pid, &Ours::swtpm(&mine.pid_file)));
        assert!(!is_ours(pid, &Ours::swtpm(&theirs.pid_file)), "another node's swtpm is not ours");
        assert!(!is_ours(pid, &Ours::qemu(&mine.pid_file)), "not a QEMU");
        assert!(terminate(pid, &Ours::swtpm(&theirs.pid_file), Duration::from_millis(100)));
        assert!(is_ours(pid, &Ours::swtpm(&mine.pid_file)), "must not be signalled under another pid file");
        assert!(terminate(pid, &Ours::swtpm(&mine.pid_file), Duration::from_secs(3)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn esp_holds_the_uki_at_the_removable_path() {
        if check_tools(&[MKFS_FAT, MMD, MCOPY], &[]).is_err() {
            // Straight to stderr, past the harness's capture: a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "skipped: mkfs.fat/mtools not installed (apt-get install dosfstools mtools)"
            );
            return;
        }
        let dir = std::env::temp_dir().join(format!("talosbox-esp-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let uki = dir.join("fake.efi");
        std::fs::write(&uki, vec![0x4d; 300_000]).unwrap();
        let esp = dir.join("esp.img");
        build_esp(&uki, &esp).unwrap();
        assert_eq!(std::fs::metadata(&esp).unwrap().len(), 32 * 1024 * 1024);
        let out = Command::new("mdir").args(["-i", &esp.to_string_lossy(), "-b", "::/EFI/BOOT"]).output().unwrap();
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(listing.contains("BOOTX64.EFI"), "{listing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! The provisioner's contact with the host: finding the tools it runs (and naming the Debian
//! package when one is missing), building the UKI's FAT ESP with mtools, and finding, asking and
//! signalling the processes it started.
//!
//! Never signals a pid whose command line does not name the program the pid file belongs to
//! (a stale pid file may point at a reused pid), and never runs anything as another user.

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

/// The pid is alive and its command line names `program` (guards against reused pids).
pub fn is_ours(pid: Pid, program: &str) -> bool {
    if test_kill_process(pid).is_err() {
        return false;
    }
    match std::fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero())) {
        Ok(cmdline) => cmdline.split(|b| *b == 0).next().is_some_and(|argv0| {
            String::from_utf8_lossy(argv0).rsplit('/').next().is_some_and(|base| base.starts_with(program))
        }),
        Err(_) => false,
    }
}

/// Waits up to `timeout` for the process to go away.
pub fn wait_gone(pid: Pid, program: &str, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if !is_ours(pid, program) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    !is_ours(pid, program)
}

/// Stops a process we started: SIGTERM, then SIGKILL if it is still there after `grace`.
/// Returns true when it is gone.
pub fn terminate(pid: Pid, program: &str, grace: Duration) -> bool {
    if !is_ours(pid, program) {
        return true;
    }
    let _ = kill_process(pid, Signal::TERM);
    if wait_gone(pid, program, grace) {
        return true;
    }
    let _ = kill_process(pid, Signal::KILL);
    wait_gone(pid, program, Duration::from_secs(2))
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
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn terminate_stops_a_real_child_and_checks_its_name() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
        // Right after fork the child may not have exec'd sleep yet.
        let start = Instant::now();
        while !is_ours(pid, "sleep") && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(is_ours(pid, "sleep"));
        assert!(!is_ours(pid, "qemu"), "a pid whose program differs is not ours");
        assert!(terminate(pid, "qemu", Duration::from_millis(100)), "nothing named qemu to stop");
        assert!(is_ours(pid, "sleep"), "a process of another program must not be signalled");
        // Reap in a thread so the zombie disappears while terminate polls.
        let reaper = std::thread::spawn(move || child.wait());
        assert!(terminate(pid, "sleep", Duration::from_secs(5)));
        reaper.join().unwrap().unwrap();
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

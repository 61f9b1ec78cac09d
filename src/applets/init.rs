//! `init`: the initramfs's `/init`, PID 1 for the first second of the node's life.
//!
//! It mounts the kernel filesystems, loads the kernel modules the machine needs, mounts
//! `/rootfs.sqsh` read-only, gives it writable tmpfs places, and hands PID 1 over to
//! `/sbin/init` (started as `machined`) inside it. It must never return and never panic: PID 1
//! exiting panics the kernel. Any failure is printed as `[talosbox] init: FAILED: <step>: <error>`
//! and the machine powers off. The mechanics live in `crate::kernel`; this file is the sequence.

use std::convert::Infallible;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::kernel::console::{self, uptime};
use crate::kernel::{loopdev, modules, mount};

const ROOTFS_IMAGE: &str = "/rootfs.sqsh";
const NEW_ROOT: &str = "/newroot";
const NEXT_INIT: &str = "/sbin/init";
/// The applet name `/sbin/init` is started under, so the binary's dispatch picks machined.
const NEXT_NAME: &str = "machined";

/// What went wrong, by step; the step name is what the console line leads with.
#[derive(Debug, thiserror::Error)]
enum InitError {
    #[error(transparent)]
    EarlyMount(mount::MountError),
    #[error(transparent)]
    Console(console::ConsoleError),
    #[error(transparent)]
    Modules(modules::ModuleError),
    #[error(transparent)]
    Loop(loopdev::LoopError),
    #[error(transparent)]
    RootMount(mount::MountError),
    #[error(transparent)]
    Prepare(mount::MountError),
    #[error(transparent)]
    SwitchRoot(mount::MountError),
    #[error("executing {path} as {name}: {source}")]
    Exec { path: &'static str, name: &'static str, source: std::io::Error },
    #[error("machined's main returned ({code})")]
    MachinedReturned { code: String },
    #[error("{0}")]
    Panic(String),
}

impl InitError {
    fn step(&self) -> &'static str {
        match self {
            InitError::EarlyMount(_) => "mount /dev /proc /sys /run",
            InitError::Console(_) => "attach console",
            InitError::Modules(_) => "load modules",
            InitError::Loop(_) => "attach rootfs.sqsh",
            InitError::RootMount(_) => "mount rootfs",
            InitError::Prepare(_) => "prepare new root",
            InitError::SwitchRoot(_) => "switch_root",
            InitError::Exec { .. } => "exec /sbin/init",
            InitError::MachinedReturned { .. } => "run machined",
            InitError::Panic(_) => "panic",
        }
    }
}

/// Entry point. As PID 1 it never returns; anywhere else it refuses to touch the system.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let pid = rustix::process::getpid();
    if !pid.is_init() {
        eprintln!("init: runs only as PID 1 (this is PID {}); refusing to mount or switch root", pid.as_raw_nonzero());
        return ExitCode::from(2);
    }
    let error = match std::panic::catch_unwind(move || boot(args)) {
        Ok(Ok(never)) => match never {},
        Ok(Err(e)) => e,
        Err(payload) => InitError::Panic(crate::panic::message(payload.as_ref())),
    };
    fail(&error)
}

/// Writes one console line; a console that cannot be written must not stop the boot.
fn say(line: std::fmt::Arguments<'_>) {
    console::line(&line.to_string());
}

fn boot(args: Vec<OsString>) -> Result<Infallible, InitError> {
    early_mounts()?;
    say(format_args!("uptime {} init start", uptime()));

    if !Path::new(ROOTFS_IMAGE).exists() {
        // Already on the real root: be machined here.
        return Err(run_machined(args));
    }

    load_modules()?;

    let new_root = Path::new(NEW_ROOT);
    {
        let device = loopdev::attach_read_only(Path::new(ROOTFS_IMAGE), Path::new("/dev")).map_err(InitError::Loop)?;
        let dev_name = device.path().display().to_string();
        mount::mount_spec(&mount::squashfs_ro(&dev_name, new_root)).map_err(InitError::RootMount)?;
        say(format_args!(
            "uptime {} init rootfs mounted: {ROOTFS_IMAGE} read-only via {dev_name} on {NEW_ROOT}",
            uptime()
        ));
        // `device` drops here, after the mount holds the loop device (autoclear trap).
    }

    for (dir, options) in [("tmp", c"mode=1777"), ("var", c"mode=0755"), ("system", c"mode=0755")] {
        mount::mount_spec(&mount::tmpfs(&new_root.join(dir), options)).map_err(InitError::Prepare)?;
    }
    // /run is already a tmpfs (mounted above); it moves over with the kernel filesystems.
    for dir in ["dev", "proc", "sys", "run"] {
        let from = Path::new("/").join(dir);
        mount::move_mount(&from, &new_root.join(dir)).map_err(InitError::Prepare)?;
    }
    let left = mount::free_initramfs(new_root);
    if left > 0 {
        say(format_args!("init: {left} initramfs entries could not be freed"));
    }
    mount::switch_root(new_root).map_err(InitError::SwitchRoot)?;
    say(format_args!("uptime {} init switch_root done, exec {NEXT_INIT} as {NEXT_NAME}", uptime()));

    let error = std::process::Command::new(NEXT_INIT).arg0(NEXT_NAME).exec();
    Err(InitError::Exec { path: NEXT_INIT, name: NEXT_NAME, source: error })
}

/// /dev first, so that everything after it can reach the console.
fn early_mounts() -> Result<(), InitError> {
    let dev = PathBuf::from("/dev");
    mount_once(&mount::devtmpfs(&dev))?;
    console::attach_console(&dev.join("console")).map_err(InitError::Console)?;
    mount_once(&mount::proc(Path::new("/proc")))?;
    mount_once(&mount::sysfs(Path::new("/sys")))?;
    mount_once(&mount::tmpfs(Path::new("/run"), c"mode=0755"))
}

fn mount_once(spec: &mount::MountSpec<'_>) -> Result<(), InitError> {
    if mount::is_mount_point(spec.target) {
        return Ok(());
    }
    mount::mount_spec(spec).map_err(InitError::EarlyMount)
}

fn load_modules() -> Result<(), InitError> {
    let release = rustix::system::uname().release().to_string_lossy().into_owned();
    let dir = Path::new("/lib/modules").join(&release);
    let fixed = match std::fs::read_to_string(modules::FIXED_LIST) {
        Ok(text) => modules::parse_fixed_list(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            let path = PathBuf::from(modules::FIXED_LIST);
            return Err(InitError::Modules(modules::ModuleError::Read { path, source }));
        }
    };
    if !dir.join("modules.dep").exists() && fixed.is_empty() {
        say(format_args!("init: no modules for kernel {release}; none loaded"));
        return Ok(());
    }
    let index = modules::ModuleIndex::load(&dir).map_err(InitError::Modules)?;
    let summary = modules::load_all(&index, &fixed, Path::new("/sys/bus"), |event| match event {
        modules::LoadEvent::Loaded { name, outcome: modules::LoadOutcome::Loaded } => {
            say(format_args!("init: module {name} loaded"));
        }
        modules::LoadEvent::Loaded { name, outcome: modules::LoadOutcome::AlreadyLoaded } => {
            say(format_args!("init: module {name} already loaded"));
        }
        modules::LoadEvent::Skipped { name, error } => say(format_args!("init: module {name} skipped: {error}")),
    })
    .map_err(InitError::Modules)?;
    say(format_args!(
        "uptime {} init modules: {} loaded, {} already, {} skipped, in {} rounds",
        uptime(),
        summary.loaded,
        summary.already,
        summary.skipped,
        summary.rounds
    ));
    Ok(())
}

/// Without a rootfs image we are already on the real root: machined takes over in this process.
fn run_machined(args: Vec<OsString>) -> InitError {
    let code = crate::applets::machined::main(args);
    InitError::MachinedReturned { code: format!("{code:?}") }
}

/// Prints the failure, syncs and powers off. Never returns: if power-off itself fails there is
/// nothing better to do than wait, since exiting would panic the kernel.
fn fail(error: &InitError) -> ! {
    say(format_args!("{}: {}: {error}", console::INIT_FAILED, error.step()));
    rustix::fs::sync();
    if let Err(e) = rustix::system::reboot(rustix::system::RebootCommand::PowerOff) {
        say(format_args!("init: power off failed: {e}; halting here"));
    }
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_lines_name_step_and_error() {
        let cases = [
            (InitError::MachinedReturned { code: "1".into() }, "run machined: machined's main returned (1)"),
            (
                InitError::Modules(modules::ModuleError::Unknown {
                    name: "virtio_net".into(),
                    dep_file: "/lib/modules/k/modules.dep".into(),
                }),
                "load modules: module virtio_net is not in /lib/modules/k/modules.dep",
            ),
            (
                InitError::Exec {
                    path: NEXT_INIT,
                    name: NEXT_NAME,
                    source: std::io::Error::from_raw_os_error(rustix::io::Errno::NOENT.raw_os_error()),
                },
                "exec /sbin/init: executing /sbin/init as machined: No such file or directory (os error 2)",
            ),
            (InitError::Panic("boom".into()), "panic: boom"),
        ];
        for (error, want) in cases {
            assert_eq!(format!("{}: {error}", error.step()), want);
        }
    }
}

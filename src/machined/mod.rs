//! machined: the node's PID 1 after switch_root, or an ordinary process in container mode.
//!
//! It prints its start, runs the resource runtime with the runtime controllers, supervises
//! the node's services, reaps every child, and goes down cleanly on request (signal, power
//! button, `poweroff`/`reboot`/`shutdown`): services stopped, disks synced and unmounted,
//! then reboot(2). As PID 1 it must never exit and never die: errors and panics end in a
//! logged, clean reboot. In container mode it has no PID 1 duties and just exits.
//!
//! Requests it answers (PID 1, or the container-mode process named by its pid file):
//!
//! | what                                   | does |
//! |----------------------------------------|------|
//! | SIGPWR, SIGTERM, `poweroff`, `shutdown` | power off |
//! | SIGINT, Ctrl-Alt-Del, `reboot`, `shutdown -r` | reboot |
//! | ACPI power button (KEY_POWER), PID 1 only | power off |
//!
//! In container mode "power off" and "reboot" both stop services and exit 0.

pub mod acquire;
pub mod config_store;
pub mod install;
pub mod lifecycle;
pub mod modules;
pub mod node;
pub mod reset;
mod state_volume;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::api::events::EventLog;
use crate::controllers::{self, ControllerSet, Environment};
use crate::cosi::{Event, RegistryError, Resource, Runtime, RuntimeError, State};
use crate::kernel::cmdline::Cmdline;
use crate::kernel::console;
use crate::kernel::power::{self, PowerAction};
use crate::platform::Platform;
use crate::resources::block::{NAMESPACE as BLOCK_NAMESPACE, VolumeLifecycle};
use crate::resources::runtime::{MachineStage, MachineStatus, NAMESPACE, ShutdownAction, ShutdownRequest};
use crate::services::{LogRing, Program, ReapMode, Reaper, ServiceDefinition, Supervisor};
use config_store::ConfigStore;

/// Where machined runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// PID 1 on a node: reaps everything, powers the machine off at the end.
    Node,
    /// An ordinary process keeping its files under `state_dir`, reached at `address` (apid on
    /// `address:50000`, trustd on `address:50001`).
    Container { state_dir: PathBuf, address: IpAddr },
}

impl Mode {
    /// Where the configuration is stored: the STATE tmpfs on a node (until the volume manager
    /// brings a disk), the state directory in container mode.
    pub fn config_path(&self) -> PathBuf {
        match self {
            Mode::Node => PathBuf::from("/system/state/config.yaml"),
            Mode::Container { state_dir, .. } => state_dir.join(CONFIG_FILE),
        }
    }

    /// Where the sockets live.
    pub fn run_dir(&self) -> PathBuf {
        match self {
            Mode::Node => PathBuf::from("/system/run"),
            Mode::Container { state_dir, .. } => state_dir.join("run"),
        }
    }

    fn api_listen(&self) -> String {
        match self {
            Mode::Node => format!(":{}", crate::api::proxy::APID_PORT),
            Mode::Container { address, .. } => {
                std::net::SocketAddr::new(*address, crate::api::proxy::APID_PORT).to_string()
            }
        }
    }

    fn trustd_listen(&self) -> String {
        let port = crate::controllers::secrets::TRUSTD_PORT;
        match self {
            Mode::Node => format!("[::]:{port}"),
            Mode::Container { address, .. } => std::net::SocketAddr::new(*address, port).to_string(),
        }
    }

    /// The name a node has before its configuration gives one.
    fn default_hostname(&self) -> String {
        match self {
            Mode::Node => rustix::system::uname()
                .nodename()
                .to_str()
                .ok()
                .filter(|n| !n.is_empty() && *n != "(none)")
                .map_or_else(|| "talosbox".to_string(), str::to_string),
            Mode::Container { address, .. } => {
                format!("talosbox-{}", address.to_string().replace(['.', ':'], "-"))
            }
        }
    }

    fn addresses(&self) -> Vec<IpAddr> {
        match self {
            Mode::Node => Vec::new(),
            Mode::Container { address, .. } => vec![*address],
        }
    }
}

/// In container mode: machined's pid, for `poweroff --state-dir`.
pub const PID_FILE: &str = "machined.pid";
/// In container mode: the stored machine configuration.
pub const CONFIG_FILE: &str = "config.yaml";
/// How many machine events the Events API keeps.
const EVENT_LOG_CAPACITY: usize = 1000;
/// Bytes of machined's own log (`talosctl logs machined`).
const MACHINED_LOG_CAPACITY: usize = 256 * 1024;
/// In container mode: the kernel command line this node pretends to have (optional).
pub const CMDLINE_FILE: &str = "cmdline";

/// How long a service gets between SIGTERM and SIGKILL.
const SERVICE_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long after the first settled stage the idle memory line is printed.
const IDLE_MEMORY_AFTER: Duration = Duration::from_secs(10);
/// How long the volume manager has to close the volumes at shutdown.
const VOLUME_CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum MachinedError {
    #[error("creating state directory {}: {source}", path.display())]
    StateDir { path: PathBuf, source: std::io::Error },
    #[error("writing pid file {}: {source}", path.display())]
    WritePidFile { path: PathBuf, source: std::io::Error },
    #[error("reading pid file {}: {source} (is machined running with this --state-dir?)", path.display())]
    ReadPidFile { path: PathBuf, source: std::io::Error },
    #[error("pid file {} holds {content:?}, not a pid", path.display())]
    BadPidFile { path: PathBuf, content: String },
    #[error(
        "PID 1 is not talosbox's machined (or cannot be checked); pass --state-dir DIR to reach a container-mode machined"
    )]
    NotOurPid1,
    #[error("signalling machined (pid {pid}) to {action}: {source}")]
    Signal { pid: i32, action: PowerAction, source: std::io::Error },
    #[error("starting the async runtime: {0}")]
    AsyncRuntime(#[source] std::io::Error),
    #[error("installing the {name} handler: {source}")]
    SignalHandler { name: &'static str, source: std::io::Error },
    #[error("registering controllers: {0}")]
    Register(#[from] RuntimeError),
    #[error("registering resource types: {0}")]
    Registry(#[from] RegistryError),
    #[error("the {0} stopped unexpectedly")]
    Stopped(&'static str),
    #[error("{0}")]
    Store(#[from] config_store::StoreError),
}

/// The signal that asks machined for `action`: SIGPWR powers off (SIGTERM too, for
/// container managers), SIGINT reboots (also what the kernel sends PID 1 on Ctrl-Alt-Del).
pub fn signal_for(action: PowerAction) -> Signal {
    match action {
        PowerAction::PowerOff => Signal::POWER,
        PowerAction::Reboot => Signal::INT,
    }
}

/// Runs machined, supervising `services`. As PID 1 this never returns.
pub fn run(mode: Mode, services: Vec<ServiceDefinition>) -> ExitCode {
    console::line(&format!("uptime {} machined start", console::uptime()));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .try_init();
    if mode == Mode::Node {
        become_pid1();
    }
    // Before any service starts, so apid and trustd inherit it.
    if let Err(e) = crate::kernel::rlimit::raise_nofile() {
        console::line(&format!("machined: {e}"));
    }
    let outcome = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("machined")
        .enable_all()
        .build()
    {
        Err(e) => Ok(Err(MachinedError::AsyncRuntime(e))),
        Ok(rt) => {
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(serve(&mode, services))));
            rt.shutdown_timeout(Duration::from_secs(2));
            outcome
        }
    };
    match mode {
        Mode::Node => {
            let action = match outcome {
                Ok(Ok(action)) => action,
                Ok(Err(e)) => {
                    console::line(&format!("machined: FAILED: {e}; rebooting"));
                    PowerAction::Reboot
                }
                Err(_) => {
                    console::line("machined: panicked; rebooting");
                    PowerAction::Reboot
                }
            };
            power_down(action)
        }
        Mode::Container { state_dir, .. } => {
            let _ = std::fs::remove_file(state_dir.join(PID_FILE));
            match outcome {
                Ok(Ok(action)) => {
                    console::line(&format!("machined: {action} requested; container mode, exiting"));
                    ExitCode::SUCCESS
                }
                Ok(Err(e)) => {
                    eprintln!("machined: {e}");
                    ExitCode::FAILURE
                }
                Err(_) => ExitCode::FAILURE,
            }
        }
    }
}

/// PID 1 set-up: panics are logged to the console (the reboot follows when it reaches the
/// top), and Ctrl-Alt-Del becomes SIGINT to us instead of an immediate reset.
fn become_pid1() {
    std::panic::set_hook(Box::new(|info| {
        console::line(&format!("machined: PANIC: {info}"));
        // With panic=abort nothing unwinds to `run`: this is the last chance to go down cleanly.
        if cfg!(panic = "abort") {
            power_down(PowerAction::Reboot);
        }
    }));
    if let Err(e) = rustix::system::reboot(rustix::system::RebootCommand::CadOff) {
        console::line(&format!("machined: cannot route Ctrl-Alt-Del to a signal: {e}"));
    }
}

/// The devices a Reset asked to wipe, wiped by [`power_down`] once nothing is mounted on
/// them.
static RESET_WIPES: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The Reset's wipe list. A panic while it was held cannot leave it half-written (it is only
/// ever replaced or taken whole), so a poisoned lock is used as it is.
pub(crate) fn reset_wipes() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    RESET_WIPES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The last steps of PID 1: sync, unmount, a Reset's wipes, reboot(2). Never returns.
fn power_down(action: PowerAction) -> ! {
    // Whatever is left (orphans, anything that left its service's process group) would keep
    // filesystems busy: ask it to stop, then make it.
    let left = power::terminate_all(Duration::from_secs(3));
    if left > 0 {
        console::line(&format!("{action}: killed {left} process(es) that ignored SIGTERM"));
    }
    let pending = power::wait_tcp_delivered(Duration::from_secs(2));
    if pending > 0 {
        console::line(&format!("{action}: {pending} TCP connection(s) still unacknowledged after 2 s"));
    }
    console::line(&format!("{action}: syncing and unmounting filesystems"));
    power::sync();
    for failure in power::unmount_all() {
        console::line(&format!("{action}: {failure} (skipped)"));
    }
    // Encrypted volumes close once nothing is mounted from them (and before a Reset's wipe,
    // which opens the partition exclusively).
    let (closed, failed) = crate::kernel::dm::close_all("luks2-");
    for name in closed {
        console::line(&format!("{action}: closed {name}"));
    }
    for failure in failed {
        console::line(&format!("{action}: {failure} (left open)"));
    }
    let wipes = std::mem::take(&mut *reset_wipes());
    for device in wipes {
        match crate::block::wipe::fast_wipe(&device) {
            Ok(size) => console::line(&format!("reset: wiped {} ({} bytes)", device.display(), size)),
            Err(e) => console::line(&format!("reset: {e}; it is left as it was")),
        }
    }
    power::sync();
    console::line(&format!("{action}: now"));
    let failure = power::reboot(action);
    console::line(&format!("{action}: FAILED: {failure}; halting here"));
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The controllers' environment in `mode`.
fn environment(
    mode: &Mode,
    supervisor: Arc<Supervisor>,
    config: watch::Receiver<crate::controllers::config::StoredConfig>,
    meta: Arc<crate::block::meta::MetaStore>,
    unlocks: Arc<controllers::block::unlock::Unlocks>,
) -> Environment {
    let (set, cmdline) = match mode {
        Mode::Node => (ControllerSet::Node, Some(PathBuf::from(controllers::runtime::kernel_cmdline::PROC_CMDLINE))),
        // Never the host's own command line: a node process has its own, or none.
        Mode::Container { state_dir, .. } => {
            (ControllerSet::Container, Some(state_dir.join(CMDLINE_FILE)).filter(|p| p.is_file()))
        }
    };
    Environment {
        set,
        supervisor,
        cmdline,
        config,
        config_source: mode.config_path().display().to_string(),
        node: controllers::secrets::NodeIdentity { hostname: mode.default_hostname(), addresses: mode.addresses() },
        api_listen: mode.api_listen(),
        meta,
        unlocks,
        kms: Arc::new(crate::client::kms::GrpcKms),
        tpm: Arc::new(crate::block::tpm_key::NodeTpm),
    }
}

/// The controller dependency graph machined runs in `mode`, in DOT.
pub fn dependency_graph(mode: &Mode) -> Result<String, MachinedError> {
    let reaper = Reaper::new(ReapMode::Own);
    let supervisor = Supervisor::new(reaper, PathBuf::from("/proc/self/exe"), SERVICE_STOP_TIMEOUT, |_| {});
    let mut runtime = Runtime::new(State::in_memory(), Arc::new(crate::resources::registry()?));
    let (_tx, config) = watch::channel(Default::default());
    controllers::register_all(
        &mut runtime,
        &environment(mode, supervisor, config, crate::block::meta::MetaStore::new(), Default::default()),
    )?;
    Ok(runtime.dependency_graph())
}

/// Runs until a power request, then stops services and the runtime; returns the request.
async fn serve(mode: &Mode, services: Vec<ServiceDefinition>) -> Result<PowerAction, MachinedError> {
    let cancel = CancellationToken::new();
    let _stop_all = cancel.clone().drop_guard();
    let (stage_tx, stage_rx) = watch::channel(MachineStage::Booting);
    console::stage(&MachineStage::Booting.to_string());
    // The version a node reports is its image's.
    if *mode == Mode::Node
        && let Ok(text) = std::fs::read_to_string("/etc/os-release")
    {
        crate::version::set_os_version_from(&text);
    }

    // Handlers first: until they exist SIGTERM/SIGPWR/SIGINT would kill a non-PID-1 machined
    // (the pid file announces us), and PID 1 would ignore them.
    let (requests, mut requested) = mpsc::unbounded_channel::<PowerAction>();
    for (name, kind, action) in [
        ("SIGTERM", SignalKind::terminate(), PowerAction::PowerOff),
        ("SIGPWR", SignalKind::from_raw(Signal::POWER.as_raw()), PowerAction::PowerOff),
        ("SIGINT", SignalKind::interrupt(), PowerAction::Reboot),
    ] {
        let mut stream = signal(kind).map_err(|source| MachinedError::SignalHandler { name, source })?;
        let requests = requests.clone();
        tokio::spawn(async move { while stream.recv().await.is_some() && requests.send(action).is_ok() {} });
    }
    let reaper = Reaper::new(if *mode == Mode::Node { ReapMode::All } else { ReapMode::Own });
    let mut reaper_task = tokio::spawn(reaper.clone().run(cancel.clone()));
    let events = Arc::new(EventLog::new(EVENT_LOG_CAPACITY));
    let log = LogRing::new(MACHINED_LOG_CAPACITY);
    let tap = log.clone();
    console::set_tap(move |line| tap.push(line.as_bytes()));
    let published = events.clone();
    let supervisor = Supervisor::new(reaper, PathBuf::from("/proc/self/exe"), SERVICE_STOP_TIMEOUT, move |event| {
        console::line(&format!("service {}: {}", event.service, event.state));
        publish_service_event(&published, event);
    });

    if let Mode::Container { state_dir, .. } = mode {
        supervisor.stop_services_when_we_die();
        std::fs::create_dir_all(state_dir)
            .map_err(|source| MachinedError::StateDir { path: state_dir.clone(), source })?;
        // Written before any stage is printed, so whoever sees a stage can signal us; written
        // aside and renamed, so a reader never sees it empty.
        let path = state_dir.join(PID_FILE);
        let partial = state_dir.join(format!("{PID_FILE}.partial"));
        std::fs::write(&partial, format!("{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&partial, &path))
            .map_err(|source| MachinedError::WritePidFile { path, source })?;
    }

    // On a node the configuration lives on STATE, which the volume controllers mount: the
    // store waits for it (see state_volume).
    let store = match mode {
        Mode::Node => ConfigStore::pending(mode.config_path()),
        Mode::Container { .. } => {
            let store = ConfigStore::open(mode.config_path())?;
            if let Some(text) = store.snapshot().active
                && let Err(e) = text.machine_config()
            {
                console::line(&format!(
                    "machined: the stored configuration {} does not load, so it is not used (maintenance until one is applied): {e}",
                    mode.config_path().display()
                ));
            }
            store
        }
    };
    let state = State::in_memory();
    let registry = Arc::new(crate::resources::registry()?);
    let mut runtime = Runtime::new(state.clone(), registry.clone());
    let meta = crate::block::meta::MetaStore::new();
    let unlocks = Arc::new(controllers::block::unlock::Unlocks::default());
    controllers::register_all(
        &mut runtime,
        &environment(mode, supervisor.clone(), store.subscribe(), Arc::clone(&meta), Arc::clone(&unlocks)),
    )?;
    // Subscribed before the runtime starts, so no stage is missed.
    let stage_watch = state.watch::<MachineStatus>(NAMESPACE, MachineStatus::ID);
    let mut stage_task =
        tokio::spawn(print_stages(state.clone(), stage_watch, stage_tx, events.clone(), cancel.clone()));
    let mut runtime_task = tokio::spawn(runtime.run(cancel.clone()));

    // The boot disk's life on a node: the slot booted, installs, upgrades, a new slot's trial.
    let lifecycle = (*mode == Mode::Node).then(|| {
        let cmdline = std::fs::read_to_string(controllers::runtime::kernel_cmdline::PROC_CMDLINE).unwrap_or_default();
        Arc::new(lifecycle::Lifecycle::new(
            state.clone(),
            Arc::clone(&meta),
            supervisor.reaper(),
            requests.clone(),
            crate::boot::slots::booted(&cmdline),
            PathBuf::from("/tmp/talosbox"),
        ))
    });
    if let Some(lc) = &lifecycle {
        tokio::spawn(Arc::clone(lc).watch_boot(stage_rx.clone(), cancel.clone()));
        tokio::spawn(install::run(Arc::clone(lc), store.clone(), cancel.clone()));
    }

    if *mode == Mode::Node {
        // The volume manager holds it while volumes are open; torn down at shutdown.
        let volumes = Resource::new(BLOCK_NAMESPACE, VolumeLifecycle::ID, VolumeLifecycle::default());
        if let Err(e) = state.create(volumes, "") {
            console::line(&format!("machined: the volume lifecycle: {e}"));
        }
        tokio::spawn(state_volume::settle_store(state.clone(), store.clone(), cancel.clone()));
        modules::start();
        let (presses, mut pressed) = mpsc::unbounded_channel();
        crate::kernel::input::watch_power_button(PathBuf::from("/dev/input"), presses);
        let requests = requests.clone();
        tokio::spawn(async move {
            while pressed.recv().await.is_some() {
                console::line("power button pressed");
                if requests.send(PowerAction::PowerOff).is_err() {
                    return;
                }
            }
        });
    }

    // The idle memory of machined and its services on the console, once in maintenance and once
    // running (configured, with apid and, on a control plane, trustd up).
    let mut settled = stage_rx.clone();
    let watched = supervisor.clone();
    tokio::spawn(async move {
        for wanted in [MachineStage::Maintenance, MachineStage::Running] {
            let Ok(stage) = settled.wait_for(|s| *s == wanted || *s == MachineStage::Running).await.map(|s| *s) else {
                return;
            };
            // A node configured at boot goes straight to running: no maintenance line.
            if stage != wanted {
                continue;
            }
            tokio::time::sleep(IDLE_MEMORY_AFTER).await;
            console::line(&memory_line(&watched));
        }
    });

    // The machine API: machined's sockets, then the services that use them.
    let root = rustix::process::geteuid().is_root();
    let own = rustix::process::geteuid().as_raw();
    let uids = crate::api::sockets::Uids {
        machined: own,
        apid: if root { crate::services::APID_USER_ID } else { own },
        trustd: if root { crate::services::TRUSTD_USER_ID } else { own },
    };
    let hostname_store = store.clone();
    let default_hostname = mode.default_hostname();
    let node = Arc::new(node::MachineNode {
        platform: match mode {
            Mode::Node => {
                let cmdline = Cmdline::read(Path::new(controllers::runtime::kernel_cmdline::PROC_CMDLINE));
                let platform = cmdline.map(|c| Platform::from_cmdline(&c)).unwrap_or(Platform::Metal);
                (platform.name().to_string(), platform.mode().to_string())
            }
            Mode::Container { .. } => ("container".to_string(), "container".to_string()),
        },
        hostname: Box::new(move || configured_hostname(&hostname_store).unwrap_or_else(|| default_hostname.clone())),
        store: store.clone(),
        supervisor: supervisor.clone(),
        events: events.clone(),
        log,
        power: requests.clone(),
        meta,
        state: (*mode == Mode::Node).then(|| state.clone()),
        unlocks,
        lifecycle,
    });
    let sockets = crate::api::sockets::SocketPaths::under(&mode.run_dir());
    // The sockets admit this node's own apid and trustd by pid, not only by uid: in container
    // mode the apids of every node on the host share uid 50.
    let pid_of = |name: &'static str| -> crate::api::server::PidOf {
        let supervisor = supervisor.clone();
        Arc::new(move || supervisor.pid(name))
    };
    let peers = crate::api::sockets::Peers { apid: Some(pid_of("apid")), trustd: Some(pid_of("trustd")) };
    {
        let (state, registry, sockets, cancel) = (state.clone(), registry.clone(), sockets.clone(), cancel.clone());
        tokio::spawn(async move {
            if let Err(e) = crate::api::sockets::serve_for(node, state, registry, &sockets, uids, peers, cancel).await {
                console::line(&format!("machined: FAILED to serve the machine API: {e}"));
            }
        });
    }
    tokio::spawn(acquire::from_cmdline(state.clone(), store.clone(), cancel.clone()));

    let mut trustd = None;
    for service in services {
        let service = prepare_service(service, mode, root);
        // trustd signs with the OS CA's key: it runs on control planes only, once the
        // configuration says this is one.
        if service.name == "trustd" {
            trustd = Some(service);
            continue;
        }
        if let Err(e) = supervisor.start(service) {
            console::line(&format!("machined: {e}"));
        }
    }
    if let Some(trustd) = trustd {
        tokio::spawn(start_on_control_plane(state.clone(), supervisor.clone(), trustd, cancel.clone()));
    }

    let stopped = tokio::select! {
        action = requested.recv() => Ok(action.unwrap_or(PowerAction::PowerOff)),
        _ = &mut reaper_task => Err(MachinedError::Stopped("child reaper")),
        _ = &mut runtime_task => Err(MachinedError::Stopped("controller runtime")),
        _ = &mut stage_task => Err(MachinedError::Stopped("stage printer")),
    };
    let action = match stopped {
        Ok(action) => action,
        Err(e) => {
            // Going down anyway: services first, so nothing writes while filesystems unmount.
            let _ = tokio::time::timeout(SERVICE_STOP_TIMEOUT * 2, supervisor.stop_all()).await;
            return Err(e);
        }
    };

    // Show the stage first, then stop services while the runtime still publishes them.
    let request = ShutdownRequest {
        action: match action {
            PowerAction::PowerOff => ShutdownAction::PowerOff,
            PowerAction::Reboot => ShutdownAction::Reboot,
        },
    };
    if let Err(e) = state.create(Resource::new(NAMESPACE, ShutdownRequest::ID, request), "") {
        console::line(&format!("machined: recording the {action} request: {e}"));
    }
    let mut stage_rx = stage_rx;
    let shown = stage_rx.wait_for(|s| matches!(s, MachineStage::Rebooting | MachineStage::ShuttingDown));
    let _ = tokio::time::timeout(Duration::from_secs(3), shown).await;
    supervisor.stop_all().await;
    close_volumes(&state).await;
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(3), async {
        let _ = runtime_task.await;
        let _ = stage_task.await;
    })
    .await;
    Ok(action)
}

/// Tears the volume lifecycle down and waits (up to [`VOLUME_CLOSE_TIMEOUT`]) for the volume
/// manager to close every volume and let it go: unmounted, encrypted mappings closed. What is
/// left after that is unmounted and closed bluntly by `power_down`.
async fn close_volumes(state: &crate::cosi::State) {
    let mut watch = state.watch::<VolumeLifecycle>(BLOCK_NAMESPACE, VolumeLifecycle::ID);
    match state.teardown::<VolumeLifecycle>(BLOCK_NAMESPACE, VolumeLifecycle::ID, "") {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return,
        Err(e) => {
            console::line(&format!("machined: closing the volumes: {e}"));
            return;
        }
    }
    let released = async {
        loop {
            match state.find::<VolumeLifecycle>(BLOCK_NAMESPACE, VolumeLifecycle::ID) {
                Ok(Some(l)) if !l.metadata().finalizers.is_empty() => {}
                _ => return,
            }
            if watch.next().await.is_err() {
                return;
            }
        }
    };
    if tokio::time::timeout(VOLUME_CLOSE_TIMEOUT, released).await.is_err() {
        console::line(&format!(
            "machined: the volumes were not all closed within {} s",
            VOLUME_CLOSE_TIMEOUT.as_secs()
        ));
    }
    let _ = state.destroy::<VolumeLifecycle>(BLOCK_NAMESPACE, VolumeLifecycle::ID, "");
}

/// A node service's definition for `mode`: its sockets and addresses as arguments, and its
/// own uid only when machined may switch to it (as root).
fn prepare_service(mut def: ServiceDefinition, mode: &Mode, root: bool) -> ServiceDefinition {
    let sockets = crate::api::sockets::SocketPaths::under(&mode.run_dir());
    let args: Vec<String> = match def.name.as_str() {
        "apid" => vec![
            "--runtime-socket".into(),
            sockets.apid_state.display().to_string(),
            "--machine-socket".into(),
            sockets.machine.display().to_string(),
        ],
        "trustd" => vec![
            "--runtime-socket".into(),
            sockets.trustd_state.display().to_string(),
            "--listen".into(),
            mode.trustd_listen(),
        ],
        _ => Vec::new(),
    };
    if let Program::Applet { args: a } = &mut def.program {
        *a = args.into_iter().map(Into::into).collect();
    }
    if !root {
        def.uid = None;
        def.gid = None;
    }
    def
}

/// Starts `service` once the machine type is a control plane's.
async fn start_on_control_plane(
    state: State,
    supervisor: Arc<Supervisor>,
    service: ServiceDefinition,
    cancel: CancellationToken,
) {
    use crate::resources::config::{self as cfg, MachineType, MachineTypeSpec};
    let mut watch = state.watch::<MachineTypeSpec>(cfg::NAMESPACE, MachineType::ID);
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            e = watch.next() => e,
        };
        let control_plane = match event {
            Ok(Event::Created(r) | Event::Updated { new: r, .. }) => {
                Resource::<MachineTypeSpec>::from_any(&r).is_some_and(|t| t.spec().machine_type.is_control_plane())
            }
            Ok(_) => false,
            Err(crate::cosi::WatchError::Overrun { .. }) => state
                .find::<MachineTypeSpec>(cfg::NAMESPACE, MachineType::ID)
                .ok()
                .flatten()
                .is_some_and(|t| t.spec().machine_type.is_control_plane()),
            Err(crate::cosi::WatchError::Closed) => return,
        };
        if control_plane {
            if let Err(e) = supervisor.start(service) {
                console::line(&format!("machined: {e}"));
            }
            return;
        }
    }
}

/// The hostname the configuration in force gives, if any.
fn configured_hostname(store: &ConfigStore) -> Option<String> {
    let active = store.snapshot().active?;
    active.parsed()?.machine.hostname.as_ref().map(|h| h.as_str().to_string())
}

/// A service's state change as Talos's `ServiceStateEvent`.
fn publish_service_event(events: &EventLog, event: &crate::services::ServiceEvent) {
    use crate::proto::machine::{ServiceStateEvent, service_state_event::Action};
    use crate::resources::runtime::ServiceState as S;
    let action = match event.state {
        S::Initialized => Action::Initialized,
        S::Preparing => Action::Preparing,
        S::Waiting => Action::Waiting,
        S::Starting => Action::Starting,
        S::Running => Action::Running,
        S::Stopping => Action::Stopping,
        S::Finished => Action::Finished,
        S::Failed => Action::Failed,
        S::Skipped => Action::Skipped,
    };
    let payload = ServiceStateEvent {
        service: event.service.clone(),
        action: action as i32,
        message: event.message.clone(),
        health: None,
    };
    events.publish("type.googleapis.com/machine.ServiceStateEvent", prost::Message::encode_to_vec(&payload), "");
}

/// The machine's stage and readiness as Talos's `MachineStatusEvent`.
fn publish_stage_event(events: &EventLog, status: &MachineStatus) {
    use crate::proto::machine::machine_status_event::{self as mse, MachineStage as W};
    let stage = match status.stage {
        MachineStage::Unknown => W::Unknown,
        MachineStage::Booting => W::Booting,
        MachineStage::Installing => W::Installing,
        MachineStage::Maintenance => W::Maintenance,
        MachineStage::Running => W::Running,
        MachineStage::Rebooting => W::Rebooting,
        MachineStage::ShuttingDown => W::ShuttingDown,
        MachineStage::Resetting => W::Resetting,
        MachineStage::Upgrading => W::Upgrading,
    };
    let payload = crate::proto::machine::MachineStatusEvent {
        stage: stage as i32,
        status: Some(mse::MachineStatus {
            ready: status.status.ready,
            unmet_conditions: status
                .status
                .unmet_conditions
                .iter()
                .map(|c| mse::machine_status::UnmetCondition { name: c.name.clone(), reason: c.reason.clone() })
                .collect(),
        }),
    };
    events.publish("type.googleapis.com/machine.MachineStatusEvent", prost::Message::encode_to_vec(&payload), "");
}

/// `uptime <s> memory: machined rss <n> KiB pss <n> KiB, apid rss <n> KiB pss <n> KiB, …;
/// machine in use <n> KiB`.
fn memory_line(supervisor: &Supervisor) -> String {
    let kib = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |k| k.to_string());
    let sizes =
        |pid| format!("rss {} KiB pss {} KiB", kib(crate::kernel::rss_kib(pid)), kib(crate::kernel::pss_kib(pid)));
    let mut parts = vec![format!("machined {}", sizes(None))];
    for s in supervisor.snapshot() {
        if let Some(pid) = s.pid {
            parts.push(format!("{} {}", s.name, sizes(Some(pid))));
        }
    }
    let used = crate::kernel::memory_used_kib().map_or_else(|| "?".to_string(), |k| k.to_string());
    format!("uptime {} memory: {}; machine in use {used} KiB", console::uptime(), parts.join(", "))
}

/// Prints `stage: <stage>` once per change of the machine status's stage (and the uptime on
/// reaching maintenance), and publishes the stage it printed.
async fn print_stages(
    state: State,
    mut stages: crate::cosi::Watch,
    printed: watch::Sender<MachineStage>,
    events: Arc<EventLog>,
    cancel: CancellationToken,
) {
    let mut last_status: Option<MachineStatus> = None;
    let mut last = MachineStage::Booting;
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            event = stages.next() => event,
        };
        let status = match event {
            Ok(Event::Created(r) | Event::Updated { new: r, .. }) => {
                Resource::<MachineStatus>::from_any(&r).map(|r| r.spec().clone())
            }
            Ok(_) => None,
            // Fell behind: the current value is what matters.
            Err(crate::cosi::WatchError::Overrun { .. }) => {
                state.find::<MachineStatus>(NAMESPACE, MachineStatus::ID).ok().flatten().map(|r| r.spec().clone())
            }
            Err(crate::cosi::WatchError::Closed) => return,
        };
        if let Some(status) = &status
            && last_status.as_ref() != Some(status)
        {
            publish_stage_event(&events, status);
            last_status = Some(status.clone());
        }
        let stage = status.map(|s| s.stage);
        if let Some(stage) = stage
            && stage != last
        {
            last = stage;
            console::stage(&stage.to_string());
            if stage == MachineStage::Maintenance {
                console::line(&format!("uptime {} stage maintenance", console::uptime()));
            }
            printed.send_replace(stage);
        }
    }
}

/// Whether two paths name the same file (following links).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Asks the running machined for `action`: the one whose pid file is in `state_dir`, or
/// PID 1. Returns the pid signalled.
pub fn request(action: PowerAction, state_dir: Option<&Path>) -> Result<i32, MachinedError> {
    let pid = match state_dir {
        None => {
            // On a workstation PID 1 is systemd or another init, which must not be signalled
            // by accident (SIGINT reboots a systemd host): only a talosbox PID 1 is asked.
            if !same_file(Path::new("/proc/1/exe"), Path::new("/proc/self/exe")) {
                return Err(MachinedError::NotOurPid1);
            }
            1
        }
        Some(dir) => {
            let path = dir.join(PID_FILE);
            let text = std::fs::read_to_string(&path)
                .map_err(|source| MachinedError::ReadPidFile { path: path.clone(), source })?;
            text.trim()
                .parse::<i32>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or(MachinedError::BadPidFile { path, content: text.trim().to_string() })?
        }
    };
    let target = Pid::from_raw(pid).ok_or(MachinedError::Signal {
        pid,
        action,
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    rustix::process::kill_process(target, signal_for(action)).map_err(|e| MachinedError::Signal {
        pid,
        action,
        source: e.into(),
    })?;
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::same_file;
    use std::path::Path;

    #[test]
    fn same_file_follows_links_and_tells_files_apart() {
        assert!(same_file(Path::new("/proc/self/exe"), &std::env::current_exe().unwrap()));
        assert!(!same_file(Path::new("/proc/self/exe"), Path::new("/bin/sh")));
        assert!(!same_file(Path::new("/proc/self/exe"), Path::new("/no/such/file")));
    }
}

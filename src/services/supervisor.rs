//! The service supervisor: starts each service as a child process, captures its output in a
//! bounded ring, restarts it with back-off when it exits, and stops it (SIGTERM, then
//! SIGKILL after a timeout) on shutdown.
//!
//! Every state change is reported once, in order, to an observer (machined prints it on the
//! console) and reflected in a snapshot others read. The supervisor never waits on a child
//! itself: exits come from the [`Reaper`]. It never panics on a child's misbehaviour.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::FutureExt;
use rustix::pipe::PipeFlags;
use rustix::process::{Pid, Signal};
use tokio::io::AsyncReadExt;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::log::LogRing;
use super::reaper::{Exit, Reaper};
use super::{Program, ServiceDefinition};
use crate::resources::runtime::ServiceState;

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("service {name}: already supervised")]
    AlreadyRunning { name: String },
    #[error("service {name}: creating the log pipe: {source}")]
    Pipe { name: String, source: std::io::Error },
    #[error("service {name}: starting {program}: {source}")]
    Spawn { name: String, program: String, source: std::io::Error },
    #[error("service {name}: no such service")]
    Unknown { name: String },
}

/// A state change of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEvent {
    pub service: String,
    pub state: ServiceState,
    pub message: String,
    pub at: std::time::SystemTime,
}

/// What the supervisor knows of one service now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSnapshot {
    pub name: String,
    pub state: ServiceState,
    pub pid: Option<u32>,
    pub restarts: u32,
    pub message: String,
    /// The last state changes, oldest first (at most [`HISTORY`]).
    pub history: Vec<ServiceEvent>,
}

/// How many state changes a snapshot keeps.
pub const HISTORY: usize = 30;

type Observer = Box<dyn Fn(&ServiceEvent) + Send + Sync>;

struct Entry {
    definition: ServiceDefinition,
    snapshot: ServiceSnapshot,
    log: LogRing,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

pub struct Supervisor {
    reaper: Arc<Reaper>,
    /// The binary applet services are started from.
    exe: PathBuf,
    stop_timeout: Duration,
    observer: Observer,
    entries: Mutex<BTreeMap<String, Entry>>,
    changed: watch::Sender<u64>,
    /// Whether services get SIGTERM when the process that started them dies (container mode:
    /// a killed machined must not leave its services running).
    die_with_parent: std::sync::atomic::AtomicBool,
}

impl Supervisor {
    /// A supervisor spawning through `reaper`; applet services run `exe` (normally
    /// `/proc/self/exe`). `observer` sees every state change, in order.
    pub fn new(
        reaper: Arc<Reaper>,
        exe: PathBuf,
        stop_timeout: Duration,
        observer: impl Fn(&ServiceEvent) + Send + Sync + 'static,
    ) -> Arc<Self> {
        let (changed, _) = watch::channel(0);
        Arc::new(Supervisor {
            reaper,
            exe,
            stop_timeout,
            observer: Box::new(observer),
            entries: Mutex::new(BTreeMap::new()),
            changed,
            die_with_parent: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Services started from now on get SIGTERM when this process dies. The kernel sends it
    /// when the spawning *thread* exits, so this is for callers that spawn from long-lived
    /// threads (the async runtime's workers), as machined does.
    /// The reaper every child of this process is spawned through (a formatter, say).
    pub fn reaper(&self) -> Arc<Reaper> {
        Arc::clone(&self.reaper)
    }

    pub fn stop_services_when_we_die(&self) {
        self.die_with_parent.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that sees a new value after every state change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Every supervised service now, by name.
    pub fn snapshot(&self) -> Vec<ServiceSnapshot> {
        self.lock().values().map(|e| e.snapshot.clone()).collect()
    }

    /// The pid of service `name` while its process runs.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.lock().get(name).and_then(|e| e.snapshot.pid)
    }

    pub fn service(&self, name: &str) -> Option<ServiceSnapshot> {
        self.lock().get(name).map(|e| e.snapshot.clone())
    }

    /// The service's captured output (stdout and stderr interleaved), oldest line first.
    pub fn logs(&self, name: &str) -> Option<LogRing> {
        self.lock().get(name).map(|e| e.log.clone())
    }

    /// Starts supervising a service. Call inside a Tokio runtime.
    pub fn start(self: &Arc<Self>, def: ServiceDefinition) -> Result<(), SupervisorError> {
        let stop = CancellationToken::new();
        {
            let mut entries = self.lock();
            if entries.get(&def.name).is_some_and(|e| e.task.as_ref().is_some_and(|t| !t.is_finished())) {
                return Err(SupervisorError::AlreadyRunning { name: def.name });
            }
            // Started again after a stop, a service keeps its log and its history.
            let (log, history) = match entries.remove(&def.name) {
                Some(old) => (old.log, old.snapshot.history),
                None => (LogRing::new(def.log_capacity), Vec::new()),
            };
            let snapshot = ServiceSnapshot {
                name: def.name.clone(),
                state: ServiceState::Initialized,
                pid: None,
                restarts: 0,
                message: String::new(),
                history,
            };
            entries.insert(
                def.name.clone(),
                Entry { definition: def.clone(), snapshot, log, stop: stop.clone(), task: None },
            );
        }
        // A bug in supervision must not leave the service shown as Running forever: a panic
        // marks it Failed, naming the panic.
        let me = Arc::clone(self);
        let name = def.name.clone();
        let supervised = AssertUnwindSafe(Arc::clone(self).supervise(def.clone(), stop));
        let task = tokio::spawn(async move {
            if let Err(panic) = supervised.catch_unwind().await {
                let what = crate::panic::message(&*panic);
                me.set(&name, ServiceState::Failed, None, format!("supervision panicked: {what}"));
            }
        });
        if let Some(entry) = self.lock().get_mut(&def.name) {
            entry.task = Some(task);
        }
        Ok(())
    }

    /// Stops one service (SIGTERM, SIGKILL after the stop timeout) and waits for it; it stays
    /// listed, `Finished`, and can be started again. Stopping a stopped service is not an error.
    pub async fn stop(&self, name: &str) -> Result<(), SupervisorError> {
        let task = {
            let mut entries = self.lock();
            let entry = entries.get_mut(name).ok_or_else(|| SupervisorError::Unknown { name: name.to_string() })?;
            entry.stop.cancel();
            entry.task.take()
        };
        if let Some(task) = task {
            let _ = task.await;
        }
        Ok(())
    }

    /// Starts a stopped service again with its definition; refused while it runs.
    pub fn start_again(self: &Arc<Self>, name: &str) -> Result<(), SupervisorError> {
        let def = self
            .lock()
            .get(name)
            .map(|e| e.definition.clone())
            .ok_or_else(|| SupervisorError::Unknown { name: name.to_string() })?;
        self.start(def)
    }

    /// Stops a service and starts it again.
    pub async fn restart(self: &Arc<Self>, name: &str) -> Result<(), SupervisorError> {
        self.stop(name).await?;
        self.start_again(name)
    }

    /// Stops every service (SIGTERM, SIGKILL after the stop timeout) and waits for them.
    pub async fn stop_all(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut entries = self.lock();
            entries
                .values_mut()
                .filter_map(|e| {
                    e.stop.cancel();
                    e.task.take()
                })
                .collect()
        };
        for task in tasks {
            let _ = task.await;
        }
    }

    fn set(&self, name: &str, state: ServiceState, pid: Option<u32>, message: String) {
        let event = {
            let mut entries = self.lock();
            let Some(entry) = entries.get_mut(name) else { return };
            let s = &mut entry.snapshot;
            let changed = s.state != state;
            s.state = state;
            s.pid = pid;
            s.message = message.clone();
            changed.then(|| {
                let event =
                    ServiceEvent { service: name.to_string(), state, message, at: std::time::SystemTime::now() };
                s.history.push(event.clone());
                if s.history.len() > HISTORY {
                    s.history.remove(0);
                }
                event
            })
        };
        if let Some(event) = event {
            (self.observer)(&event);
        }
        self.changed.send_modify(|n| *n += 1);
    }

    fn count_restart(&self, name: &str) {
        if let Some(entry) = self.lock().get_mut(name) {
            entry.snapshot.restarts += 1;
        }
    }

    async fn supervise(self: Arc<Self>, def: ServiceDefinition, stop: CancellationToken) {
        let name = def.name.clone();
        let mut delay = def.restart.backoff.next(None);
        loop {
            self.set(&name, ServiceState::Starting, None, String::new());
            match self.spawn(&def) {
                Err(e) => self.set(&name, ServiceState::Failed, None, e.to_string()),
                Ok((pid, mut exit)) => {
                    let started = Instant::now();
                    self.set(&name, ServiceState::Running, Some(pid), format!("process {pid} started"));
                    let outcome = tokio::select! {
                        exit = &mut exit => Some(exit.unwrap_or(Exit::Code(-1))),
                        () = stop.cancelled() => None,
                    };
                    match outcome {
                        Some(exit) => {
                            // Whatever the service left behind in its group goes with it.
                            kill_group(pid, Signal::KILL);
                            let state = if exit.success() { ServiceState::Finished } else { ServiceState::Failed };
                            self.set(&name, state, None, exit.to_string());
                            if started.elapsed() >= def.restart.reset_after {
                                delay = def.restart.backoff.next(None);
                            }
                        }
                        None => {
                            self.set(&name, ServiceState::Stopping, Some(pid), "stopping".to_string());
                            let exit = self.terminate(pid, exit).await;
                            self.set(&name, ServiceState::Finished, None, format!("stopped: {exit}"));
                            return;
                        }
                    }
                }
            }
            if stop.is_cancelled() {
                return;
            }
            self.count_restart(&name);
            self.set(&name, ServiceState::Waiting, None, format!("restarting in {delay:?}"));
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => {
                    self.set(&name, ServiceState::Finished, None, "stopped while waiting to restart".to_string());
                    return;
                }
            }
            delay = def.restart.backoff.next(Some(delay));
        }
    }

    /// SIGTERM to the service's process group; SIGKILL if it has not exited in time.
    async fn terminate(&self, pid: u32, mut exit: oneshot::Receiver<Exit>) -> String {
        kill_group(pid, Signal::TERM);
        if let Ok(result) = tokio::time::timeout(self.stop_timeout, &mut exit).await {
            kill_group(pid, Signal::KILL);
            return result.map(|e| e.to_string()).unwrap_or_else(|_| "exit status lost".to_string());
        }
        kill_group(pid, Signal::KILL);
        match tokio::time::timeout(Duration::from_secs(5), exit).await {
            Ok(Ok(e)) => format!("{e} after SIGKILL (no exit {:?} after SIGTERM)", self.stop_timeout),
            Ok(Err(_)) => "exit status lost".to_string(),
            Err(_) => "did not exit even after SIGKILL".to_string(),
        }
    }

    fn spawn(&self, def: &ServiceDefinition) -> Result<(u32, oneshot::Receiver<Exit>), SupervisorError> {
        let name = def.name.clone();
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)
            .map_err(|e| SupervisorError::Pipe { name: name.clone(), source: e.into() })?;
        let write_err = write.try_clone().map_err(|source| SupervisorError::Pipe { name: name.clone(), source })?;
        let (mut cmd, program) = match &def.program {
            Program::Applet { args } => {
                let mut cmd = Command::new(&self.exe);
                cmd.arg0(&def.name).args(args);
                (cmd, format!("{} as {}", self.exe.display(), def.name))
            }
            Program::Exec { path, args } => {
                let mut cmd = Command::new(path);
                cmd.args(args);
                (cmd, path.display().to_string())
            }
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::from(write)).stderr(Stdio::from(write_err)).process_group(0);
        if let Some(gid) = def.gid {
            cmd.gid(gid);
        }
        if let Some(uid) = def.uid {
            cmd.uid(uid);
        }
        if self.die_with_parent.load(std::sync::atomic::Ordering::Relaxed) {
            // SAFETY: the closure runs in the child between fork and exec and makes a single
            // prctl(2) system call, which is async-signal-safe; it allocates nothing and takes
            // no locks. It runs after the uid/gid switch, which would otherwise clear it.
            unsafe {
                cmd.pre_exec(|| {
                    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
                        .map_err(std::io::Error::from)
                });
            }
        }
        let spawned = self.reaper.spawn(&mut cmd);
        // Closes our copies of the pipe's write end, so the reader sees EOF when the service
        // (and everything it started) is gone.
        drop(cmd);
        let (pid, exit) = spawned.map_err(|source| SupervisorError::Spawn { name: name.clone(), program, source })?;
        if let Some(log) = self.logs(&name) {
            match tokio::net::unix::pipe::Receiver::from_owned_fd(read) {
                Ok(rx) => {
                    tokio::spawn(capture(rx, log));
                }
                Err(e) => tracing::warn!(service = %name, "cannot read the service's output: {e}"),
            }
        }
        Ok((pid, exit))
    }
}

/// Splits the pipe's bytes into lines for the ring until EOF. A line longer than the ring is
/// flushed in pieces rather than buffered without bound.
async fn capture(mut rx: tokio::net::unix::pipe::Receiver, log: LogRing) {
    let mut buf = [0u8; 4096];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                log.push(&line);
                line.clear();
            } else {
                line.push(b);
                if line.len() >= 64 * 1024 {
                    log.push(&line);
                    line.clear();
                }
            }
        }
    }
    if !line.is_empty() {
        log.push(&line);
    }
}

/// Signals a service's whole process group (its pid is the group id). A group already gone
/// is not an error.
fn kill_group(pid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

//! The one place that waits for child processes.
//!
//! As PID 1 machined inherits every orphan and must reap them all with `waitpid(-1)`; that
//! would steal the exit status of any child someone else is waiting for. So nothing else in
//! machined waits on a child (no `tokio::process`, no `Child::wait`): processes are spawned
//! through [`Reaper::spawn`], which registers the pid under the same lock the reaper takes,
//! and the reaper hands each exit status to whoever registered it.
//!
//! When not PID 1 (container mode, tests) the reaper waits only for the pids it spawned, so
//! it never steals from other code in the same process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::process::{Pid, WaitOptions};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    pub fn success(&self) -> bool {
        *self == Exit::Code(0)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exited with code {c}"),
            Exit::Signal(s) => write!(f, "killed by signal {s}"),
        }
    }
}

/// Which children the reaper collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReapMode {
    /// Every child, including orphans re-parented to us: PID 1's duty.
    All,
    /// Only the pids spawned through this reaper.
    Own,
}

#[derive(Default)]
struct Waiting {
    by_pid: HashMap<i32, oneshot::Sender<Exit>>,
}

pub struct Reaper {
    mode: ReapMode,
    waiting: Mutex<Waiting>,
}

impl Reaper {
    /// Runs `program` with `args` and only `env` in its environment, stdin and stdout on
    /// /dev/null, to its end: its stderr, when it fails, is the error (a formatter, the one
    /// kind of program a node runs besides its services).
    pub async fn run_to_end(
        &self,
        program: &std::path::Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<(), String> {
        let name = program.display().to_string();
        let base = name.rsplit('/').next().unwrap_or("program");
        let log = std::env::temp_dir().join(format!("{base}.{}.{}.log", std::process::id(), next_log_id()));
        let stderr = std::fs::File::create(&log).map_err(|e| format!("{name}: creating {}: {e}", log.display()))?;
        let mut command = std::process::Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(env.iter().cloned())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr);
        let (_pid, done) = self.spawn(&mut command).map_err(|e| format!("starting {name}: {e}"))?;
        let exit = done.await.map_err(|_| format!("{name}: lost its exit status"))?;
        let exit = if exit.success() { Ok(()) } else { Err(exit.to_string()) };
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        exit.map_err(|e| format!("{name} {e}: {}", said.trim()))
    }
}

/// A number for each captured stderr, so two programs run at once never share a file.
fn next_log_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Reaper {
    pub fn new(mode: ReapMode) -> Arc<Self> {
        Arc::new(Reaper { mode, waiting: Mutex::new(Waiting::default()) })
    }

    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Spawns `cmd` and returns its pid and a receiver for its exit. The registration happens
    /// under the reaper's lock, so an exit can never be reaped before it is registered.
    pub fn spawn(&self, cmd: &mut std::process::Command) -> std::io::Result<(u32, oneshot::Receiver<Exit>)> {
        let mut waiting = self.lock();
        let child = cmd.spawn()?;
        let pid = child.id();
        // The std handle is dropped without waiting: the reaper owns the wait.
        drop(child);
        let (tx, rx) = oneshot::channel();
        waiting.by_pid.insert(pid as i32, tx);
        Ok((pid, rx))
    }

    /// Collects every exited child that is ready and dispatches its status. Returns how many
    /// were reaped (orphans included).
    pub fn reap(&self) -> usize {
        let mut waiting = self.lock();
        let mut reaped = 0;
        match self.mode {
            ReapMode::All => {
                while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
                    reaped += 1;
                    let exit = to_exit(status);
                    match waiting.by_pid.remove(&pid.as_raw_nonzero().get()) {
                        Some(tx) => {
                            let _ = tx.send(exit);
                        }
                        None => tracing::debug!(pid = pid.as_raw_nonzero().get(), %exit, "reaped orphan"),
                    }
                }
            }
            ReapMode::Own => {
                let pids: Vec<i32> = waiting.by_pid.keys().copied().collect();
                for raw in pids {
                    let Some(pid) = Pid::from_raw(raw) else { continue };
                    if let Ok(Some((_, status))) = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG) {
                        reaped += 1;
                        if let Some(tx) = waiting.by_pid.remove(&raw) {
                            let _ = tx.send(to_exit(status));
                        }
                    }
                }
            }
        }
        reaped
    }

    /// Reaps on every SIGCHLD until cancelled, and once a second in case a signal was
    /// coalesced away before the handler was installed.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let mut sigchld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!("installing the SIGCHLD handler: {e}; reaping by polling");
                None
            }
        };
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            self.reap();
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = async { match sigchld.as_mut() { Some(s) => s.recv().await, None => std::future::pending().await } } => {}
                _ = tick.tick() => {}
            }
        }
    }
}

fn to_exit(status: rustix::process::WaitStatus) -> Exit {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        // Stopped/continued are not asked for (no WUNTRACED); treat as a code we can see.
        (None, None) => Exit::Code(-1),
    }
}

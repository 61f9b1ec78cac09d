//! The operator's engine: one loop over a store's watch that feeds the [`Watcher`] and a
//! work queue of reconciles, shared by every backend. It decides nothing about a machine
//! itself (the watcher and the reconciler do); it routes changes:
//! - a new machine, or a change of its spec (generation), annotations or deletion, registers
//!   it with the watcher again and enqueues a reconcile;
//! - a status-only change is ignored (the operator's own writes come back this way);
//! - a deletion unregisters it at once.
//!
//! Reconciles of one key never run concurrently; a key enqueued while it runs runs again after.
//! Failing reconciles back off per key, doubling up to a limit.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;
use super::model::{MachineKey, TalosMachine};
use super::node::NodeClient;
use super::reconciler::{self, Requeue};
use super::render::CredentialSource;
use super::store::{Store, StoreError, WatchEvent};
use super::watcher::Watcher;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{field}: {detail}")]
    Config { field: &'static str, detail: String },
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// The operator's timings.
#[derive(Debug, Clone)]
pub struct OperatorConfig {
    /// How often a watched machine is polled (3 minutes by default).
    pub poll_interval: Duration,
    /// Each wait is the interval ± this fraction of it, at random; the first poll waits a
    /// random part of one interval, so a restart does not poll the whole fleet at once.
    pub jitter: f64,
    /// The first wait before a machine that is not watchable yet is looked at again; it
    /// doubles up to `readiness_retry_max`.
    pub readiness_retry: Duration,
    pub readiness_retry_max: Duration,
    /// How often an Installing or Upgrading machine's health is checked.
    pub health_recheck: Duration,
    /// How often a dryrun machine is reported on again.
    pub dryrun_requeue: Duration,
    /// The first back-off of a failing reconcile; it doubles up to `error_backoff_max`.
    pub error_backoff: Duration,
    pub error_backoff_max: Duration,
    pub max_concurrent_reconciles: usize,
    /// How long the empty-state probe's Version call may take.
    pub probe_timeout: Duration,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        OperatorConfig {
            poll_interval: Duration::from_secs(180),
            jitter: 0.1,
            readiness_retry: Duration::from_secs(10),
            readiness_retry_max: Duration::from_secs(600),
            health_recheck: Duration::from_secs(30),
            dryrun_requeue: Duration::from_secs(300),
            error_backoff: Duration::from_secs(5),
            error_backoff_max: Duration::from_secs(300),
            max_concurrent_reconciles: 10,
            probe_timeout: Duration::from_secs(5),
        }
    }
}

impl OperatorConfig {
    /// Refuses timings that would hot-loop or never run.
    pub fn validate(&self) -> Result<(), EngineError> {
        let positive = |field: &'static str, d: Duration| {
            if d.is_zero() {
                Err(EngineError::Config { field, detail: "must be greater than zero".into() })
            } else {
                Ok(())
            }
        };
        positive("poll interval", self.poll_interval)?;
        positive("readiness retry", self.readiness_retry)?;
        positive("readiness retry maximum", self.readiness_retry_max)?;
        positive("health recheck", self.health_recheck)?;
        positive("dry-run requeue", self.dryrun_requeue)?;
        positive("error back-off", self.error_backoff)?;
        positive("error back-off maximum", self.error_backoff_max)?;
        positive("probe timeout", self.probe_timeout)?;
        if !(0.0..1.0).contains(&self.jitter) {
            return Err(EngineError::Config { field: "jitter", detail: format!("{} is not in [0, 1)", self.jitter) });
        }
        if self.max_concurrent_reconciles == 0 {
            return Err(EngineError::Config {
                field: "max concurrent reconciles",
                detail: "must be at least 1".into(),
            });
        }
        Ok(())
    }

    /// The wait before a newly registered machine's first poll: a random part of one interval.
    pub fn first_delay(&self) -> Duration {
        self.poll_interval.mul_f64(random_unit())
    }

    /// The wait between two polls: the interval ± the jitter.
    pub fn next_delay(&self) -> Duration {
        self.poll_interval.mul_f64(1.0 + self.jitter * (2.0 * random_unit() - 1.0))
    }
}

/// A number in [0, 1) from the system's random generator (a poll schedule needs no more).
fn random_unit() -> f64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

/// What the watcher and the reconciler share.
pub struct Context {
    pub store: Arc<dyn Store>,
    pub nodes: Arc<dyn NodeClient>,
    pub metrics: Arc<Metrics>,
    pub credentials: CredentialSource,
    pub config: OperatorConfig,
}

impl Context {
    pub fn new(
        store: Arc<dyn Store>,
        nodes: Arc<dyn NodeClient>,
        metrics: Arc<Metrics>,
        config: OperatorConfig,
    ) -> Result<Arc<Context>, EngineError> {
        config.validate()?;
        Ok(Arc::new(Context { store, nodes, metrics, credentials: CredentialSource::new(), config }))
    }
}

/// Enqueues reconciles.
#[derive(Clone)]
pub struct Queue {
    tx: mpsc::UnboundedSender<MachineKey>,
}

impl Queue {
    pub fn add(&self, key: MachineKey) {
        let _ = self.tx.send(key);
    }

    pub fn add_after(&self, key: MachineKey, after: Duration) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(key);
        });
    }

    /// A queue whose keys go to `tx` (for driving the watcher alone in tests).
    pub fn from_sender(tx: mpsc::UnboundedSender<MachineKey>) -> Queue {
        Queue { tx }
    }
}

/// What the engine remembers of a machine to tell a spec change from a status write.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    generation: i64,
    annotations: BTreeMap<String, String>,
    deleting: bool,
    endpoint: String,
}

impl Seen {
    fn of(m: &TalosMachine) -> Seen {
        Seen {
            generation: m.metadata.generation,
            annotations: m.metadata.annotations.clone(),
            deleting: m.deleting(),
            endpoint: m.spec.endpoint.clone(),
        }
    }
}

/// A running engine's handles, for tests and the applet.
pub struct Engine {
    pub ctx: Arc<Context>,
    pub watcher: Arc<Watcher>,
    pub queue: Queue,
    rx: Mutex<Option<mpsc::UnboundedReceiver<MachineKey>>>,
}

impl Engine {
    pub fn new(ctx: Arc<Context>) -> Engine {
        let (tx, rx) = mpsc::unbounded_channel();
        let queue = Queue { tx };
        let watcher = Watcher::new(ctx.clone(), queue.clone());
        Engine { ctx, watcher, queue, rx: Mutex::new(Some(rx)) }
    }

    /// Runs until `cancel`: the watch loop and the reconcile workers. Returns after the
    /// in-flight polls and reconciles have ended.
    pub async fn run(&self, cancel: CancellationToken) -> Result<(), EngineError> {
        let Some(rx) = self.rx.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Err(EngineError::Config { field: "engine", detail: "already running".into() });
        };
        let mut events = self.ctx.store.watch().await?;
        let initial = self.ctx.store.list().await?;
        tracing::info!(store = %self.ctx.store.name(), machines = initial.len(), "operator started");
        let mut seen: HashMap<MachineKey, Seen> = HashMap::new();
        for m in initial {
            self.applied(&mut seen, m);
        }
        let workers =
            tokio::spawn(dispatch(self.ctx.clone(), self.watcher.clone(), self.queue.clone(), rx, cancel.clone()));
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                event = events.recv() => match event {
                    Some(WatchEvent::Applied(m)) => self.applied(&mut seen, *m),
                    Some(WatchEvent::Deleted(key)) => {
                        if let Some(s) = seen.remove(&key) {
                            self.ctx.nodes.forget(&s.endpoint);
                        }
                        self.watcher.unregister(&key);
                        tracing::info!(machine = %key, "machine deleted: no longer polled");
                    }
                    None => {
                        tracing::error!(store = %self.ctx.store.name(), "the store's watch ended");
                        break;
                    }
                },
            }
        }
        cancel.cancel();
        self.watcher.stop().await;
        let _ = workers.await;
        Ok(())
    }

    fn applied(&self, seen: &mut HashMap<MachineKey, Seen>, m: TalosMachine) {
        let key = m.key();
        let now = Seen::of(&m);
        if seen.get(&key) == Some(&now) {
            return;
        }
        seen.insert(key.clone(), now);
        self.watcher.register(&m);
        self.queue.add(key);
    }
}

/// The reconcile workers: at most N at once, one per key at a time, failing keys backing off.
async fn dispatch(
    ctx: Arc<Context>,
    watcher: Arc<Watcher>,
    queue: Queue,
    mut rx: mpsc::UnboundedReceiver<MachineKey>,
    cancel: CancellationToken,
) {
    let running: Arc<Mutex<(HashSet<MachineKey>, HashSet<MachineKey>)>> = Arc::default();
    let failures: Arc<Mutex<HashMap<MachineKey, u32>>> = Arc::default();
    let slots = Arc::new(tokio::sync::Semaphore::new(ctx.config.max_concurrent_reconciles));
    let tasks = tokio_util::task::TaskTracker::new();
    loop {
        let key = tokio::select! {
            _ = cancel.cancelled() => break,
            key = rx.recv() => match key { Some(k) => k, None => break },
        };
        {
            let mut r = running.lock().unwrap_or_else(|p| p.into_inner());
            if r.0.contains(&key) {
                r.1.insert(key);
                continue;
            }
            r.0.insert(key.clone());
        }
        let Ok(permit) = slots.clone().acquire_owned().await else { break };
        let (ctx, watcher, queue, running, failures) =
            (ctx.clone(), watcher.clone(), queue.clone(), running.clone(), failures.clone());
        tasks.spawn(async move {
            let outcome = std::panic::AssertUnwindSafe(reconciler::reconcile(&ctx, &watcher, &key));
            let outcome = futures::FutureExt::catch_unwind(outcome).await;
            drop(permit);
            let requeue = match outcome {
                Ok(Ok(r)) => {
                    failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                    r
                }
                Ok(Err(e)) => {
                    let n = {
                        let mut f = failures.lock().unwrap_or_else(|p| p.into_inner());
                        let n = f.entry(key.clone()).or_default();
                        *n += 1;
                        *n
                    };
                    let backoff =
                        ctx.config.error_backoff.saturating_mul(1 << (n - 1).min(16)).min(ctx.config.error_backoff_max);
                    tracing::warn!(machine = %key, "reconcile failed (retrying in {backoff:?}): {e}");
                    Requeue::After(backoff)
                }
                Err(panic) => {
                    tracing::error!(machine = %key, "a reconcile panicked: {}", crate::panic::message(&*panic));
                    Requeue::After(ctx.config.error_backoff_max)
                }
            };
            let again = {
                let mut r = running.lock().unwrap_or_else(|p| p.into_inner());
                r.0.remove(&key);
                r.1.remove(&key)
            };
            match requeue {
                _ if again => queue.add(key),
                Requeue::Now => queue.add(key),
                Requeue::After(d) => queue.add_after(key, d),
                Requeue::Never => {}
            }
        });
    }
    tasks.close();
    tasks.wait().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_timings_are_refused() {
        assert!(OperatorConfig::default().validate().is_ok());
        let zero = OperatorConfig { poll_interval: Duration::ZERO, ..OperatorConfig::default() };
        assert!(zero.validate().unwrap_err().to_string().contains("poll interval"));
        let jitter = OperatorConfig { jitter: 1.5, ..OperatorConfig::default() };
        assert!(jitter.validate().is_err());
    }

    #[test]
    fn delays_stay_within_the_jitter() {
        let c = OperatorConfig { poll_interval: Duration::from_secs(100), jitter: 0.1, ..OperatorConfig::default() };
        for _ in 0..1000 {
            let d = c.next_delay();
            assert!(d >= Duration::from_secs(90) && d <= Duration::from_secs(110), "{d:?}");
            assert!(c.first_delay() < Duration::from_secs(100));
        }
        let firsts: HashSet<u64> = (0..50).map(|_| c.first_delay().as_millis() as u64).collect();
        assert!(firsts.len() > 40, "the first poll is spread, not synchronized");
    }
}

//! The drift watcher: polls each watchable machine's node and marks Available machines
//! Drifted when the node's version or configuration no longer matches the desired one.
//!
//! Design points (each one a defect the Go watcher library had to fix after the fact):
//! - one task per machine key, replaced whole on re-registration; registration follows spec
//!   changes only (the engine decides), and registering after [`Watcher::stop`] is refused;
//! - every poll reads the machine fresh (endpoint, credentials, state), so nothing is cached
//!   from registration, and a machine not ready to watch is retried with a doubling back-off
//!   in the same task (no second map of retries to get out of step);
//! - the first poll is jittered like every other one, and an interval of zero is refused
//!   when the configuration is made;
//! - a panic inside a poll is caught and counted as a failed poll; the task goes on;
//! - unregistering cancels the task at once (an in-flight poll is dropped) and removes the
//!   machine's metric series; the gauge and the series are changed only under the entries
//!   lock, after checking the task was not cancelled, so a late poll can never bring them back;
//! - the only write is Available → Drifted, conditional on the resourceVersion the poll read:
//!   a poll that started before an apply cannot overwrite Installing;
//! - a node error is counted, never drift.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use tokio_util::sync::CancellationToken;

use super::engine::{Context, Queue};
use super::metrics::PollResult;
use super::model::{
    EVENT_NOTE_LIMIT, MachineEvent, MachineKey, MachineState, ReconcileMode, TalosMachine, now_rfc3339, truncate_note,
};
use super::node::{NodeError, NodeTarget};
use super::render::DesiredConfig;

/// Reason and action of the event the watcher records.
pub const DRIFT_REASON: &str = "NodeDriftDetected";
const NOTE_PREFIX: &str = "Node drifted from desired state, re-applying:\n";
const NOTE_TRUNCATED: &str = "\n… (truncated, full diff in operator logs)";

/// What a poll found on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub version: String,
    /// The dry-run diff; empty when the running config is the desired one.
    pub config_diff: String,
}

/// How a node differs from its machine's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub desired_version: String,
    pub observed: Observed,
}

impl Drift {
    /// The drift between the desired version and what the node reported, if any.
    pub fn between(desired_version: &str, observed: Observed) -> Option<Drift> {
        (desired_version != observed.version || !observed.config_diff.is_empty())
            .then(|| Drift { desired_version: desired_version.to_string(), observed })
    }

    pub fn version_diverged(&self) -> bool {
        self.desired_version != self.observed.version
    }

    /// What differs, in words, with the whole config diff.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.version_diverged() {
            parts.push(format!("version: desired {}, node reports {}", self.desired_version, self.observed.version));
        }
        if !self.observed.config_diff.is_empty() {
            parts.push(format!("config diff reported by node:\n{}", self.observed.config_diff));
        }
        parts.join("\n")
    }

    /// The event's note: the description, cut at a character boundary under the events API's
    /// size limit.
    pub fn note(&self) -> String {
        truncate_note(&format!("{NOTE_PREFIX}{}", self.describe()), EVENT_NOTE_LIMIT, NOTE_TRUNCATED)
    }
}

/// Whether a poll that found (or did not find) drift writes the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatcherWrite {
    MarkDrifted,
    Skip(&'static str),
}

/// The watcher's one decision about the status: only Available becomes Drifted, and never for
/// a machine being deleted or in dryrun or disable mode.
pub fn watcher_write(m: &TalosMachine, drifted: bool) -> WatcherWrite {
    if !drifted {
        return WatcherWrite::Skip("in sync");
    }
    if m.deleting() {
        return WatcherWrite::Skip("being deleted");
    }
    if matches!(m.reconcile_mode().0, ReconcileMode::DryRun | ReconcileMode::Disable) {
        return WatcherWrite::Skip("reconcile mode dryrun or disable: status is never written");
    }
    match m.state() {
        Some(MachineState::Available) => WatcherWrite::MarkDrifted,
        Some(MachineState::Drifted) => WatcherWrite::Skip("already Drifted"),
        _ => WatcherWrite::Skip("not Available: the reconciler is converging it"),
    }
}

/// What one poll came to.
#[derive(Debug, Clone, PartialEq)]
pub enum PollOutcome {
    /// The machine no longer exists.
    Gone,
    /// Not Available/Drifted, deleting, or no endpoint: nothing was asked of the node.
    NotReady,
    Polled {
        /// How long fetching from the node took, when it was asked.
        fetch: Option<Duration>,
        ok: bool,
        /// Drift was found (and a reconcile enqueued).
        drift: bool,
        /// The status was written Drifted.
        marked: bool,
    },
}

/// Asks the node for its version and for a dry-run diff of `desired`.
pub async fn fetch(ctx: &Context, target: &NodeTarget, desired: &str) -> Result<Observed, NodeError> {
    let version = ctx.nodes.version(target).await?;
    let config_diff = ctx.nodes.dry_run(target, desired).await?;
    Ok(Observed { version, config_diff })
}

/// One poll of one machine: read fresh, render, fetch, compare, and (conditionally) mark.
pub async fn poll_once(ctx: &Context, queue: &Queue, key: &MachineKey) -> PollOutcome {
    let failed = |fetch| PollOutcome::Polled { fetch, ok: false, drift: false, marked: false };
    let m = match ctx.store.get(key).await {
        Ok(Some(m)) => m,
        Ok(None) => return PollOutcome::Gone,
        Err(e) => {
            tracing::warn!(machine = %key, "poll: reading the machine: {e}");
            return failed(None);
        }
    };
    if !m.ready_to_watch() {
        return PollOutcome::NotReady;
    }
    let desired = match DesiredConfig::resolve(ctx.store.as_ref(), &m).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(machine = %key, "poll: rendering the desired config: {e}");
            return failed(None);
        }
    };
    let credentials = match ctx.credentials.resolve(ctx.store.as_ref(), &m).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(machine = %key, "poll: credentials: {e}");
            return failed(None);
        }
    };
    let target = NodeTarget { endpoint: m.spec.endpoint.clone(), credentials };
    let started = Instant::now();
    let fetched = fetch(ctx, &target, &desired.text).await;
    let took = Some(started.elapsed());
    let observed = match fetched {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(machine = %key, "poll: {e} (an unreachable node is not drift)");
            return failed(took);
        }
    };
    let Some(drift) = Drift::between(&m.spec.version, observed) else {
        return PollOutcome::Polled { fetch: took, ok: true, drift: false, marked: false };
    };
    tracing::info!(
        machine = %key,
        desired_version = %drift.desired_version,
        observed_version = %drift.observed.version,
        diff = %drift.observed.config_diff,
        "TalosMachine drift detected"
    );
    let mut marked = false;
    match watcher_write(&m, true) {
        WatcherWrite::MarkDrifted => {
            let mut status = m.status.clone();
            status.state = Some(MachineState::Drifted);
            status.set_condition("Drifted", true, DRIFT_REASON, &drift.describe_short(), &now_rfc3339());
            match ctx.store.update_status(key, &m.metadata.resource_version, &status).await {
                Ok(_) => {
                    marked = true;
                    let event = MachineEvent {
                        type_: "Warning".into(),
                        reason: DRIFT_REASON.into(),
                        action: DRIFT_REASON.into(),
                        note: drift.note(),
                        time: now_rfc3339(),
                    };
                    if let Err(e) = ctx.store.record_event(key, &event).await {
                        tracing::warn!(machine = %key, "recording the drift event: {e}");
                    }
                }
                Err(e) if e.is_conflict() => {
                    tracing::info!(machine = %key, "not marking Drifted: the machine changed since this poll read it");
                }
                Err(e) => tracing::warn!(machine = %key, "marking Drifted: {e}"),
            }
        }
        WatcherWrite::Skip(why) => tracing::debug!(machine = %key, "drift not written: {why}"),
    }
    queue.add(key.clone());
    PollOutcome::Polled { fetch: took, ok: true, drift: true, marked }
}

impl Drift {
    /// One line for a condition's message (the event and the log have the diff).
    fn describe_short(&self) -> String {
        match (self.version_diverged(), self.observed.config_diff.is_empty()) {
            (true, true) => format!("node reports {}, desired {}", self.observed.version, self.desired_version),
            (true, false) => format!(
                "node reports {}, desired {}; its configuration differs",
                self.observed.version, self.desired_version
            ),
            _ => "the node's configuration differs from the desired one".into(),
        }
    }
}

struct Entry {
    cancel: CancellationToken,
    /// Counted in the registered gauge (its last readiness check passed).
    registered: Arc<AtomicBool>,
}

/// The per-machine poll tasks.
pub struct Watcher {
    ctx: Arc<Context>,
    queue: Queue,
    entries: Mutex<HashMap<MachineKey, Entry>>,
    tasks: tokio_util::task::TaskTracker,
    stopped: AtomicBool,
}

impl Watcher {
    pub fn new(ctx: Arc<Context>, queue: Queue) -> Arc<Watcher> {
        Arc::new(Watcher {
            ctx,
            queue,
            entries: Mutex::new(HashMap::new()),
            tasks: tokio_util::task::TaskTracker::new(),
            stopped: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MachineKey, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts (or restarts) polling `m`'s key, judging readiness from `m` as seen now.
    pub fn register(self: &Arc<Self>, m: &TalosMachine) {
        let key = m.key();
        let mut entries = self.lock();
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        if let Some(old) = entries.remove(&key) {
            self.retire(&key, old);
        }
        let ready = m.ready_to_watch();
        let entry = Entry { cancel: CancellationToken::new(), registered: Arc::new(AtomicBool::new(ready)) };
        if ready {
            self.ctx.metrics.registered(1);
        }
        let cancel = entry.cancel.clone();
        entries.insert(key.clone(), entry);
        drop(entries);
        let me = self.clone();
        self.tasks.spawn(async move { me.run(key, cancel, ready).await });
    }

    /// Starts polling `m` if its task is waiting for it to become ready: the reconciler
    /// calls this when it has made a machine Available, so polling does not wait for the
    /// readiness back-off.
    pub fn ready_hint(self: &Arc<Self>, m: &TalosMachine) {
        let waiting = self.lock().get(&m.key()).is_some_and(|e| !e.registered.load(Ordering::SeqCst));
        if waiting && m.ready_to_watch() {
            self.register(m);
        }
    }

    /// Stops polling `key` at once and forgets its metric series.
    pub fn unregister(&self, key: &MachineKey) {
        let mut entries = self.lock();
        if let Some(old) = entries.remove(key) {
            self.retire(key, old);
        }
        self.ctx.metrics.remove(key);
    }

    /// Called with the entries lock held.
    fn retire(&self, _key: &MachineKey, old: Entry) {
        old.cancel.cancel();
        if old.registered.swap(false, Ordering::SeqCst) {
            self.ctx.metrics.registered(-1);
        }
    }

    /// Whether `key` has a poll task (registered or waiting for readiness).
    pub fn has(&self, key: &MachineKey) -> bool {
        self.lock().contains_key(key)
    }

    /// Stops every task and waits for them to end; later registrations are refused.
    pub async fn stop(&self) {
        {
            let mut entries = self.lock();
            self.stopped.store(true, Ordering::SeqCst);
            for (key, entry) in entries.drain() {
                self.retire(&key, entry);
            }
        }
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Applies a poll's outcome to the gauge and the metrics, unless the task was cancelled.
    fn record(&self, key: &MachineKey, cancel: &CancellationToken, outcome: &PollOutcome) {
        let entries = self.lock();
        if cancel.is_cancelled() {
            return;
        }
        let Some(entry) = entries.get(key) else { return };
        let metrics = &self.ctx.metrics;
        match outcome {
            PollOutcome::Gone => {}
            PollOutcome::NotReady => {
                if entry.registered.swap(false, Ordering::SeqCst) {
                    metrics.registered(-1);
                }
            }
            PollOutcome::Polled { fetch, ok, drift, .. } => {
                if !entry.registered.swap(true, Ordering::SeqCst) {
                    metrics.registered(1);
                }
                if let Some(d) = fetch {
                    metrics.fetch_duration(key, *d);
                }
                if *ok {
                    metrics.poll(key, PollResult::Success);
                } else {
                    metrics.poll(key, PollResult::Error);
                    metrics.fetch_error(key);
                }
                if *drift {
                    metrics.drift(key);
                }
            }
        }
    }

    async fn run(self: Arc<Self>, key: MachineKey, cancel: CancellationToken, ready: bool) {
        let config = &self.ctx.config;
        let mut delay = if ready { config.first_delay() } else { config.readiness_retry };
        let mut retry = config.readiness_retry;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            let poll = AssertUnwindSafe(poll_once(&self.ctx, &self.queue, &key)).catch_unwind();
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return,
                outcome = poll => outcome,
            };
            let outcome = outcome.unwrap_or_else(|panic| {
                tracing::error!(machine = %key, "a poll panicked: {}; the watcher goes on", crate::panic::message(&*panic));
                PollOutcome::Polled { fetch: None, ok: false, drift: false, marked: false }
            });
            self.record(&key, &cancel, &outcome);
            match outcome {
                PollOutcome::Gone => {
                    // The informer's deletion unregisters it too; stop polling now either way.
                    return;
                }
                PollOutcome::NotReady => {
                    delay = retry;
                    retry = (retry * 2).min(config.readiness_retry_max);
                }
                PollOutcome::Polled { .. } => {
                    retry = config.readiness_retry;
                    delay = config.next_delay();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::testing::machine;

    #[test]
    fn only_an_available_drifted_machine_is_marked() {
        let mut m = machine("a");
        type Case = (Option<MachineState>, Option<&'static str>, bool, bool, WatcherWrite);
        let cases: &[Case] = &[
            (Some(MachineState::Available), None, false, true, WatcherWrite::MarkDrifted),
            (Some(MachineState::Available), Some("IMPORT"), false, true, WatcherWrite::MarkDrifted),
            (Some(MachineState::Available), None, false, false, WatcherWrite::Skip("in sync")),
            (Some(MachineState::Drifted), None, false, true, WatcherWrite::Skip("already Drifted")),
            (
                Some(MachineState::Installing),
                None,
                false,
                true,
                WatcherWrite::Skip("not Available: the reconciler is converging it"),
            ),
            (
                Some(MachineState::Available),
                Some("DryRun"),
                false,
                true,
                WatcherWrite::Skip("reconcile mode dryrun or disable: status is never written"),
            ),
            (
                Some(MachineState::Available),
                Some("disable"),
                false,
                true,
                WatcherWrite::Skip("reconcile mode dryrun or disable: status is never written"),
            ),
            (Some(MachineState::Available), None, true, true, WatcherWrite::Skip("being deleted")),
        ];
        for (state, mode, deleting, drifted, want) in cases {
            m.status.state = *state;
            m.metadata.annotations.clear();
            if let Some(mode) = mode {
                m.metadata
                    .annotations
                    .insert(crate::operator::model::RECONCILE_MODE_ANNOTATION.into(), mode.to_string());
            }
            m.metadata.deletion_timestamp = deleting.then(now_rfc3339);
            assert_eq!(watcher_write(&m, *drifted), *want, "{state:?} {mode:?} deleting={deleting}");
        }
    }

    #[test]
    fn drift_is_a_version_or_a_non_empty_diff() {
        let o = |v: &str, d: &str| Observed { version: v.into(), config_diff: d.into() };
        assert_eq!(Drift::between("v1", o("v1", "")), None);
        let d = Drift::between("v1", o("v2", "")).unwrap();
        assert_eq!(d.describe(), "version: desired v1, node reports v2");
        let d = Drift::between("v1", o("v1", "-a\n+b")).unwrap();
        assert_eq!(d.describe(), "config diff reported by node:\n-a\n+b");
        let big = Drift::between("v1", o("v1", &"ü".repeat(2000))).unwrap();
        let note = big.note();
        assert!(note.len() <= EVENT_NOTE_LIMIT && note.ends_with(NOTE_TRUNCATED), "{}", note.len());
        assert!(note.starts_with(NOTE_PREFIX));
    }
}

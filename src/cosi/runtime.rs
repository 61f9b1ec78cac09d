//! The controller runtime: registers controllers against the type registry, checks who owns
//! which output, runs each controller in its own task woken by coalesced input events and
//! its event sources, finishes the destroy of outputs their holders let go, retries failed
//! keys on their own back-off, and restarts a failing or panicking controller with back-off.
//!
//! Everything a controller needs runs beside it and is watched: an input watch or a
//! released-output watch that ends is logged and re-subscribed (followed by a full
//! reconcile), an event source that ends is restarted. A reconcile in flight is dropped
//! when the runtime shuts down. A controller caught reading or writing what it never
//! declared is stopped and reported ([`Runtime::stopped`]), not retried forever. Nothing a
//! controller does can take the runtime down.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use super::backoff::Backoff;
use super::controller::{
    Context, ContextError, Controller, Input, InputKind, Output, OutputKind, Pending, Pointer, Waker, destroy_released,
};
use super::query::WatchOptions;
use super::registry::Registry;
use super::resource::{Phase, ResourceType};
use super::source::EventSource;
use super::state::{Event, State, Watch, WatchError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    #[error("controller {name:?} is registered twice")]
    DuplicateController { name: String },
    #[error("controller {name:?} declares exclusive output {type_name}, which {other:?} also writes")]
    ExclusiveOutputTaken { name: String, type_name: String, other: String },
    #[error("controller {name:?} declares output {type_name}, which {owner:?} owns exclusively")]
    OutputOwnedExclusively { name: String, type_name: String, owner: String },
    #[error("controller {name:?} declares output {type_name} twice")]
    DuplicateOutput { name: String, type_name: String },
    #[error("controller {name:?} declares input {type_name} in {namespace:?} twice")]
    DuplicateInput { name: String, type_name: String, namespace: String },
    #[error("controller {name:?} declares {type_name}, which is not a registered type")]
    UnregisteredType { name: String, type_name: String },
    #[error("controller {name:?} reads {type_name} from namespace {namespace:?}, which is not registered")]
    UnknownNamespace { name: String, type_name: String, namespace: String },
}

struct Registered {
    name: String,
    inputs: Vec<Input>,
    outputs: Vec<Output>,
    sources: Vec<Box<dyn EventSource>>,
    controller: Box<dyn Controller>,
}

pub struct Runtime {
    state: State,
    registry: Arc<Registry>,
    backoff: Backoff,
    controllers: Vec<Registered>,
    stopped: watch::Sender<BTreeMap<String, String>>,
}

impl Runtime {
    pub fn new(state: State, registry: Arc<Registry>) -> Self {
        Runtime {
            state,
            registry,
            backoff: Backoff::default(),
            controllers: Vec::new(),
            stopped: watch::channel(BTreeMap::new()).0,
        }
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Controllers stopped for reading or writing what they never declared, with the error.
    pub fn stopped(&self) -> watch::Receiver<BTreeMap<String, String>> {
        self.stopped.subscribe()
    }

    /// Adds a controller, refusing one whose declarations name unregistered types or
    /// namespaces, or whose outputs clash with those already registered: an exclusive output
    /// type has exactly one writer.
    pub fn register(&mut self, controller: impl Controller) -> Result<(), RuntimeError> {
        self.register_boxed(Box::new(controller))
    }

    pub fn register_boxed(&mut self, mut controller: Box<dyn Controller>) -> Result<(), RuntimeError> {
        let name = controller.name();
        if self.controllers.iter().any(|c| c.name == name) {
            return Err(RuntimeError::DuplicateController { name });
        }
        let inputs = controller.inputs();
        let mut seen_inputs = HashSet::new();
        for input in &inputs {
            self.check_registered(&name, input.resource_type)?;
            if !self.registry.contains_namespace(&input.namespace) {
                return Err(RuntimeError::UnknownNamespace {
                    name,
                    type_name: input.type_name().to_string(),
                    namespace: input.namespace.clone(),
                });
            }
            if !seen_inputs.insert((input.namespace.clone(), input.type_name(), input.id.clone())) {
                return Err(RuntimeError::DuplicateInput {
                    name,
                    type_name: input.type_name().to_string(),
                    namespace: input.namespace.clone(),
                });
            }
        }
        let outputs = controller.outputs();
        let mut seen = HashSet::new();
        for output in &outputs {
            self.check_registered(&name, output.resource_type)?;
            let type_name = output.type_name();
            if !seen.insert(type_name) {
                return Err(RuntimeError::DuplicateOutput { name, type_name: type_name.to_string() });
            }
            for other in &self.controllers {
                for theirs in other.outputs.iter().filter(|o| o.type_name() == type_name) {
                    if output.kind == OutputKind::Exclusive {
                        return Err(RuntimeError::ExclusiveOutputTaken {
                            name,
                            type_name: type_name.to_string(),
                            other: other.name.clone(),
                        });
                    }
                    if theirs.kind == OutputKind::Exclusive {
                        return Err(RuntimeError::OutputOwnedExclusively {
                            name,
                            type_name: type_name.to_string(),
                            owner: other.name.clone(),
                        });
                    }
                }
            }
        }
        let sources = controller.sources();
        self.controllers.push(Registered { name, inputs, outputs, sources, controller });
        Ok(())
    }

    fn check_registered(&self, name: &str, t: ResourceType) -> Result<(), RuntimeError> {
        if self.registry.get(t.type_name()).is_some() {
            Ok(())
        } else {
            Err(RuntimeError::UnregisteredType { name: name.to_string(), type_name: t.type_name().to_string() })
        }
    }

    /// The names of the registered controllers, in registration order.
    pub fn controller_names(&self) -> Vec<&str> {
        self.controllers.iter().map(|c| c.name.as_str()).collect()
    }

    /// The controller dependency graph in Graphviz DOT: resource types are ellipses,
    /// controllers boxes; a strong input is a solid edge, a weak one dashed.
    pub fn dependency_graph(&self) -> String {
        let mut dot = String::from("digraph controllers {\n  rankdir=LR;\n");
        let mut types = std::collections::BTreeSet::new();
        for c in &self.controllers {
            let _ = writeln!(dot, "  {:?} [shape=box];", c.name);
            for input in &c.inputs {
                types.insert(input.type_name());
                let style = match input.kind {
                    InputKind::Weak => "dashed",
                    InputKind::Strong => "solid",
                };
                let _ = writeln!(
                    dot,
                    "  {:?} -> {:?} [style={style}, label={:?}];",
                    input.type_name(),
                    c.name,
                    input.namespace
                );
            }
            for output in &c.outputs {
                types.insert(output.type_name());
                let _ = writeln!(dot, "  {:?} -> {:?};", c.name, output.type_name());
            }
        }
        for t in types {
            let _ = writeln!(dot, "  {t:?} [shape=ellipse];");
        }
        dot.push_str("}\n");
        dot
    }

    /// Publishes the registry into the state, then runs every controller until `cancel`
    /// fires; returns once every controller has stopped.
    pub async fn run(self, cancel: CancellationToken) {
        if let Err(e) = self.registry.publish(&self.state) {
            tracing::error!("publishing resource definitions: {e}");
        }
        let stopped = Arc::new(self.stopped);
        let mut tasks = JoinSet::new();
        for registered in self.controllers {
            let env = ControllerEnv {
                state: self.state.clone(),
                backoff: self.backoff,
                cancel: cancel.clone(),
                stopped: Arc::clone(&stopped),
            };
            tasks.spawn(run_controller(registered, env));
        }
        while let Some(joined) = tasks.join_next().await {
            if let Err(e) = joined
                && e.is_panic()
            {
                tracing::error!(
                    "a controller task panicked outside its reconcile: {}",
                    crate::panic::message(&*e.into_panic())
                );
            }
        }
    }
}

struct ControllerEnv {
    state: State,
    backoff: Backoff,
    cancel: CancellationToken,
    stopped: Arc<watch::Sender<BTreeMap<String, String>>>,
}

/// What a helper task of a controller watches, so the controller can restart it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Helper {
    Input(usize),
    Released(String, ResourceType),
}

fn subscribe(state: &State, input: &Input) -> Watch {
    match &input.id {
        Some(id) => state.backend().watch(&input.namespace, input.type_name(), id),
        None => state.backend().watch_kind(&input.namespace, input.type_name(), &WatchOptions::live()),
    }
}

/// Forwards input events to a controller's waker until cancelled or the state is gone. A
/// watch that fell behind is replaced by a fresh one, followed by a full reconcile. With
/// no `watch` given (a restart), it subscribes after `delay` and asks for a full reconcile.
async fn forward_input(
    state: State,
    input: Input,
    watch: Option<Watch>,
    delay: Duration,
    waker: Waker,
    cancel: CancellationToken,
) {
    let mut watch = match watch {
        Some(w) => w,
        None => {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
            let w = subscribe(&state, &input);
            waker.wake_full();
            w
        }
    };
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => return,
            next = watch.next() => next,
        };
        match next {
            Ok(Event::Bootstrapped) => {}
            Ok(event) => {
                if let Some(r) = event.resource() {
                    waker.changed(Pointer::new(input.namespace.clone(), input.type_name(), r.metadata.id.clone()));
                }
            }
            Err(WatchError::Overrun { missed }) => {
                tracing::debug!(input = input.type_name(), missed, "input watch fell behind; re-subscribing");
                watch = subscribe(&state, &input);
                waker.wake_full();
            }
            Err(WatchError::Closed) => return,
        }
    }
}

/// Tells a controller when one of its torn-down outputs loses its last finalizer, so the
/// runtime finishes its destroy. Outputs already released when the watch starts arrive in
/// its snapshot, so a release just before it is not missed either.
async fn watch_released(
    state: State,
    namespace: String,
    output: ResourceType,
    owner: String,
    waker: Waker,
    cancel: CancellationToken,
) {
    let mut watch = state.backend().watch_kind(&namespace, output.type_name(), &WatchOptions::default());
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => return,
            next = watch.next() => next,
        };
        // Released: an own output tearing down that just lost its last finalizer (or is
        // found so at the start). The controller's own teardown of an unheld output is not
        // one: it destroys that itself.
        let released = match &next {
            Ok(Event::Updated { old, new }) => (!old.metadata.finalizers.is_empty()).then_some(new),
            Ok(Event::Created(new)) => Some(new),
            _ => None,
        }
        .filter(|new| {
            new.metadata.owner == owner
                && new.metadata.phase == Phase::TearingDown
                && new.metadata.finalizers.is_empty()
        });
        if let Some(new) = released {
            waker.destroy_ready(Pointer::new(namespace.clone(), output.type_name(), new.metadata.id.clone()));
            continue;
        }
        match next {
            Ok(_) => {}
            Err(WatchError::Overrun { .. }) => {
                watch = state.backend().watch_kind(&namespace, output.type_name(), &WatchOptions::default())
            }
            Err(WatchError::Closed) => return,
        }
    }
}

/// Runs one event source, restarting it whenever it returns or panics.
async fn run_source(
    mut source: Box<dyn EventSource>,
    controller: String,
    backoff: Backoff,
    waker: Waker,
    cancel: CancellationToken,
) {
    let mut delay = None;
    loop {
        let started = Instant::now();
        let outcome = AssertUnwindSafe(source.run(&waker, &cancel)).catch_unwind().await;
        if cancel.is_cancelled() {
            return;
        }
        let why = match outcome {
            Ok(Ok(())) => "ended".to_string(),
            Ok(Err(e)) => format!("failed: {e}"),
            Err(panic) => format!("panicked: {}", crate::panic::message(&*panic)),
        };
        if started.elapsed() > backoff.max {
            delay = None;
        }
        let wait = backoff.next(delay);
        delay = Some(wait);
        tracing::error!(controller = %controller, source = %source.name(), retry_in = ?wait, "event source {why}");
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        // Whatever happened while it was down was not reported.
        waker.wake_full();
    }
}

/// When failed and requeued keys are due again, and how long each failing key waits.
#[derive(Default)]
struct KeySchedule {
    entries: HashMap<Pointer, KeyEntry>,
}

#[derive(Default)]
struct KeyEntry {
    /// The back-off of a failing key; `None` once it succeeds.
    delay: Option<Duration>,
    due: Option<Instant>,
}

impl KeySchedule {
    fn fail(&mut self, key: Pointer, backoff: &Backoff) -> Duration {
        let entry = self.entries.entry(key).or_default();
        let delay = backoff.next(entry.delay);
        entry.delay = Some(delay);
        entry.due = Some(Instant::now() + delay);
        delay
    }

    fn requeue(&mut self, key: Pointer, delay: Duration) {
        let entry = self.entries.entry(key).or_default();
        let at = Instant::now() + delay;
        entry.due = Some(entry.due.map_or(at, |d| d.min(at)));
    }

    fn succeed(&mut self, key: &Pointer) {
        self.entries.remove(key);
    }

    /// Keeps only the keys in `failed` (after a full reconcile, where every other key was
    /// looked at and went through).
    fn keep_only(&mut self, failed: &HashSet<Pointer>) {
        self.entries.retain(|k, _| failed.contains(k));
    }

    fn take_due(&mut self, now: Instant) -> Vec<Pointer> {
        let mut due = Vec::new();
        for (key, entry) in &mut self.entries {
            if entry.due.is_some_and(|d| d <= now) {
                entry.due = None;
                due.push(key.clone());
            }
        }
        self.entries.retain(|_, e| e.delay.is_some() || e.due.is_some());
        due
    }

    fn next_due(&self) -> Option<Instant> {
        self.entries.values().filter_map(|e| e.due).min()
    }
}

fn reconcile_failure(
    outcome: Result<Result<(), super::ReconcileError>, Box<dyn std::any::Any + Send>>,
) -> Option<(String, bool)> {
    match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => {
            let mistake = e.downcast_ref::<ContextError>().is_some_and(ContextError::is_declaration_mistake);
            Some((e.to_string(), mistake))
        }
        Err(panic) => Some((format!("panicked: {}", crate::panic::message(&*panic)), false)),
    }
}

async fn run_controller(registered: Registered, env: ControllerEnv) {
    let Registered { name, inputs, outputs, sources, mut controller } = registered;
    let ControllerEnv { state, backoff, cancel, stopped } = env;
    let waker = Waker::default();
    let mut helpers: JoinSet<()> = JoinSet::new();
    let mut helper_of: HashMap<tokio::task::Id, Helper> = HashMap::new();
    let mut helper_delay: HashMap<Helper, Duration> = HashMap::new();
    // Subscribed before the first reconcile, so no change slips between the two.
    for (i, input) in inputs.iter().enumerate() {
        let watch = subscribe(&state, input);
        let task = helpers.spawn(forward_input(
            state.clone(),
            input.clone(),
            Some(watch),
            Duration::ZERO,
            waker.clone(),
            cancel.clone(),
        ));
        helper_of.insert(task.id(), Helper::Input(i));
    }
    let mut source_tasks = JoinSet::new();
    for source in sources {
        source_tasks.spawn(run_source(source, name.clone(), backoff, waker.clone(), cancel.clone()));
    }
    let mut ctx = Context::new(name.clone(), state.clone(), inputs.clone(), outputs, waker.clone());
    ctx.cancel = cancel.clone();
    let mut watched_outputs = HashSet::new();
    let mut keys = KeySchedule::default();
    let mut delay = None;
    let mut full = true;
    'run: loop {
        let Pending { full: asked_full, mut changed, destroy_ready } = waker.take();
        for key in destroy_ready {
            if let Err(e) = destroy_released(&state, &name, &key) {
                tracing::error!(controller = %name, output = %key, "destroying a released output: {e}");
            }
            changed.insert(key);
        }
        changed.extend(keys.take_due(Instant::now()));
        let this_full = full || asked_full;
        ctx.begin(Pending { full: this_full, changed, destroy_ready: Default::default() });
        let outcome = tokio::select! {
            () = cancel.cancelled() => break 'run,
            outcome = AssertUnwindSafe(controller.reconcile(&mut ctx)).catch_unwind() => outcome,
        };
        for (namespace, output) in &ctx.written {
            let helper = Helper::Released(namespace.clone(), *output);
            if watched_outputs.insert(helper.clone()) {
                let task = helpers.spawn(watch_released(
                    state.clone(),
                    namespace.clone(),
                    *output,
                    name.clone(),
                    waker.clone(),
                    cancel.clone(),
                ));
                helper_of.insert(task.id(), helper);
            }
        }
        match reconcile_failure(outcome) {
            None => {
                full = false;
                delay = None;
                let failed: HashSet<Pointer> = ctx.key_failures.iter().map(|(k, _)| k.clone()).collect();
                for (key, error) in std::mem::take(&mut ctx.key_failures) {
                    let retry_in = keys.fail(key.clone(), &backoff);
                    tracing::warn!(controller = %name, key = %key, retry_in = ?retry_in, "reconcile failed for this key: {error}");
                }
                if this_full {
                    keys.keep_only(&failed);
                } else {
                    for key in ctx.changed() {
                        if !failed.contains(key) {
                            keys.succeed(key);
                        }
                    }
                }
                for (key, after) in std::mem::take(&mut ctx.key_requeues) {
                    keys.requeue(key, after);
                }
            }
            Some((message, true)) => {
                tracing::error!(controller = %name, "controller stopped: it read or wrote what it never declared: {message}");
                stopped.send_modify(|s| {
                    s.insert(name.clone(), message);
                });
                cancel.cancelled().await;
                break 'run;
            }
            Some((message, false)) => {
                let wait = backoff.next(delay);
                delay = Some(wait);
                tracing::error!(controller = %name, retry_in = ?wait, "reconcile failed: {message}");
                // Whatever the failed run missed, the next one must see everything.
                full = true;
                tokio::select! {
                    () = cancel.cancelled() => break 'run,
                    () = tokio::time::sleep(wait) => {}
                }
                continue;
            }
        }
        let deadline = match (ctx.requeue.map(|d| Instant::now() + d), keys.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        loop {
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = cancel.cancelled() => break 'run,
                () = waker.notify.notified() => break,
                () = sleep => break,
                Some(joined) = helpers.join_next_with_id() => {
                    let (id, why) = match joined {
                        Ok((id, ())) => (id, "ended".to_string()),
                        Err(e) => (e.id(), if e.is_panic() { format!("panicked: {}", crate::panic::message(&*e.into_panic())) } else { "was cancelled".to_string() }),
                    };
                    let Some(helper) = helper_of.remove(&id) else { continue };
                    if cancel.is_cancelled() {
                        break 'run;
                    }
                    let wait = backoff.next(helper_delay.get(&helper).copied());
                    helper_delay.insert(helper.clone(), wait);
                    let task = match &helper {
                        Helper::Input(i) => {
                            let input = &inputs[*i];
                            tracing::error!(controller = %name, input = input.type_name(), namespace = %input.namespace, retry_in = ?wait, "input watch {why}; re-subscribing");
                            helpers.spawn(forward_input(state.clone(), input.clone(), None, wait, waker.clone(), cancel.clone()))
                        }
                        Helper::Released(namespace, output) => {
                            tracing::error!(controller = %name, output = output.type_name(), namespace = %namespace, "released-output watch {why}; re-subscribing");
                            waker.wake_full();
                            helpers.spawn(watch_released(state.clone(), namespace.clone(), *output, name.clone(), waker.clone(), cancel.clone()))
                        }
                    };
                    helper_of.insert(task.id(), helper);
                }
            }
        }
    }
    helpers.abort_all();
    source_tasks.abort_all();
    while source_tasks.join_next().await.is_some() {}
    while helpers.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> Pointer {
        Pointer::new("ns", "Things.test.talos.dev", id)
    }

    #[tokio::test(start_paused = true)]
    async fn key_schedule_backs_off_each_key_alone() {
        let backoff = Backoff { initial: Duration::from_millis(100), max: Duration::from_millis(400) };
        let mut s = KeySchedule::default();
        assert_eq!(s.fail(key("a"), &backoff), Duration::from_millis(100));
        s.requeue(key("b"), Duration::from_millis(50));
        assert!(s.take_due(Instant::now()).is_empty());
        tokio::time::advance(Duration::from_millis(60)).await;
        assert_eq!(s.take_due(Instant::now()), [key("b")]);
        tokio::time::advance(Duration::from_millis(50)).await;
        assert_eq!(s.take_due(Instant::now()), [key("a")]);
        assert_eq!(s.fail(key("a"), &backoff), Duration::from_millis(200));
        assert_eq!(s.fail(key("a"), &backoff), Duration::from_millis(400));
        assert_eq!(s.fail(key("a"), &backoff), Duration::from_millis(400));
        s.succeed(&key("a"));
        assert_eq!(s.fail(key("a"), &backoff), Duration::from_millis(100), "success starts the back-off over");
        s.fail(key("c"), &backoff);
        s.keep_only(&[key("c")].into_iter().collect());
        assert!(s.entries.contains_key(&key("c")) && !s.entries.contains_key(&key("a")));
        assert!(s.next_due().is_some());
    }
}

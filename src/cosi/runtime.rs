//! The controller runtime: registers controllers, checks who owns which output, runs each
//! controller in its own task woken by coalesced input events, cleans up outputs a reconcile
//! no longer produces, and restarts a failing or panicking controller with back-off.
//!
//! Nothing a controller does can take the runtime down.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::controller::{Context, Controller, Input, InputKind, Output, OutputKind, Pending, Waker, remove_output};
use super::resource::Phase;
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
}

/// Back-off between restarts of a failing controller.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(10) }
    }
}

struct Registered {
    name: String,
    inputs: Vec<Input>,
    outputs: Vec<Output>,
    controller: Box<dyn Controller>,
}

pub struct Runtime {
    state: State,
    backoff: Backoff,
    controllers: Vec<Registered>,
}

impl Runtime {
    pub fn new(state: State) -> Self {
        Runtime { state, backoff: Backoff::default(), controllers: Vec::new() }
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// Adds a controller, refusing one whose outputs clash with those already registered:
    /// an exclusive output type has exactly one writer.
    pub fn register(&mut self, controller: impl Controller) -> Result<(), RuntimeError> {
        self.register_boxed(Box::new(controller))
    }

    pub fn register_boxed(&mut self, controller: Box<dyn Controller>) -> Result<(), RuntimeError> {
        let name = controller.name();
        if self.controllers.iter().any(|c| c.name == name) {
            return Err(RuntimeError::DuplicateController { name });
        }
        let outputs = controller.outputs();
        let mut seen = HashSet::new();
        for output in &outputs {
            if !seen.insert(output.type_name) {
                return Err(RuntimeError::DuplicateOutput { name, type_name: output.type_name.to_string() });
            }
            for other in &self.controllers {
                for theirs in other.outputs.iter().filter(|o| o.type_name == output.type_name) {
                    if output.kind == OutputKind::Exclusive {
                        return Err(RuntimeError::ExclusiveOutputTaken {
                            name,
                            type_name: output.type_name.to_string(),
                            other: other.name.clone(),
                        });
                    }
                    if theirs.kind == OutputKind::Exclusive {
                        return Err(RuntimeError::OutputOwnedExclusively {
                            name,
                            type_name: output.type_name.to_string(),
                            owner: other.name.clone(),
                        });
                    }
                }
            }
        }
        let inputs = controller.inputs();
        self.controllers.push(Registered { name, inputs, outputs, controller });
        Ok(())
    }

    /// The controller dependency graph in Graphviz DOT: resource types are ellipses,
    /// controllers boxes; weak inputs are dashed.
    pub fn dependency_graph(&self) -> String {
        let mut dot = String::from("digraph controllers {\n  rankdir=LR;\n");
        let mut types = BTreeSet::new();
        for c in &self.controllers {
            let _ = writeln!(dot, "  {:?} [shape=box];", c.name);
            for input in &c.inputs {
                types.insert(input.type_name);
                let style = match input.kind {
                    InputKind::Weak => "dashed",
                    InputKind::Strong => "solid",
                };
                let _ = writeln!(
                    dot,
                    "  {:?} -> {:?} [style={style}, label={:?}];",
                    input.type_name, c.name, input.namespace
                );
            }
            for output in &c.outputs {
                types.insert(output.type_name);
                let _ = writeln!(dot, "  {:?} -> {:?};", c.name, output.type_name);
            }
        }
        for t in types {
            let _ = writeln!(dot, "  {t:?} [shape=ellipse];");
        }
        dot.push_str("}\n");
        dot
    }

    /// Runs every controller until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut tasks = JoinSet::new();
        for registered in self.controllers {
            let state = self.state.clone();
            let cancel = cancel.clone();
            let backoff = self.backoff;
            tasks.spawn(run_controller(registered, state, backoff, cancel));
        }
        while tasks.join_next().await.is_some() {}
    }
}

/// Forwards input events to a controller's waker until cancelled. The watch is made by the
/// caller before the controller's first reconcile, so no change can slip between the two.
async fn forward_input(mut watch: Watch, input: Input, waker: Waker, cancel: CancellationToken) {
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => return,
            next = watch.next() => next,
        };
        match next {
            Ok(Event::Bootstrapped) => {}
            Ok(event) => {
                if let Some(r) = event.resource() {
                    waker.changed((input.namespace.clone(), input.type_name, r.metadata.id.clone()));
                }
            }
            Err(WatchError::Overrun { .. }) => waker.wake_full(),
            Err(WatchError::Closed) => return,
        }
    }
}

/// Wakes a controller when one of its torn-down outputs loses its last finalizer, so the
/// destroy it could not finish before happens now. Outputs already released when the watch
/// starts arrive in its snapshot, so a release just before it is not missed either.
async fn forward_released_outputs(
    state: State,
    namespace: String,
    type_name: &'static str,
    owner: String,
    waker: Waker,
    cancel: CancellationToken,
) {
    let mut watch = state.backend().watch_kind(&namespace, type_name);
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => return,
            next = watch.next() => next,
        };
        match next {
            Ok(Event::Updated { new, .. } | Event::Created(new))
                if new.metadata.owner == owner
                    && new.metadata.phase == Phase::TearingDown
                    && new.metadata.finalizers.is_empty() =>
            {
                waker.wake()
            }
            Ok(_) => {}
            Err(WatchError::Overrun { .. }) => waker.wake(),
            Err(WatchError::Closed) => return,
        }
    }
}

async fn run_controller(registered: Registered, state: State, backoff: Backoff, cancel: CancellationToken) {
    let Registered { name, inputs, outputs, mut controller } = registered;
    let waker = Waker::default();
    let mut watchers = JoinSet::new();
    for input in &inputs {
        let watch = match &input.id {
            Some(id) => state.backend().watch(&input.namespace, input.type_name, id),
            None => state.backend().watch_kind(&input.namespace, input.type_name),
        };
        watchers.spawn(forward_input(watch, input.clone(), waker.clone(), cancel.clone()));
    }
    let mut ctx = Context {
        name: name.clone(),
        state: state.clone(),
        inputs,
        outputs,
        waker: waker.clone(),
        touched: HashSet::new(),
        written: BTreeSet::new(),
        requeue: None,
        cleanup: true,
        changes: Pending::default(),
    };
    let mut watched_outputs = HashSet::new();
    let mut delay = backoff.initial;
    let mut full = true;
    loop {
        let pending = waker.take();
        ctx.changes = Pending { full: full || pending.full, changed: pending.changed };
        ctx.touched.clear();
        ctx.requeue = None;
        ctx.cleanup = true;
        let outcome = AssertUnwindSafe(controller.reconcile(&mut ctx)).catch_unwind().await;
        let failure = match outcome {
            Ok(Ok(())) => {
                full = false;
                match cleanup_untouched(&ctx) {
                    Ok(()) => None,
                    Err(e) => Some(format!("cleaning up outputs: {e}")),
                }
            }
            Ok(Err(e)) => Some(e.to_string()),
            Err(panic) => Some(format!("panicked: {}", panic_message(&panic))),
        };
        for (namespace, type_name) in &ctx.written {
            if watched_outputs.insert((namespace.clone(), *type_name)) {
                watchers.spawn(forward_released_outputs(
                    state.clone(),
                    namespace.clone(),
                    type_name,
                    name.clone(),
                    waker.clone(),
                    cancel.clone(),
                ));
            }
        }
        if let Some(message) = failure {
            tracing::error!(controller = %name, retry_in = ?delay, "reconcile failed: {message}");
            // Whatever the failed run missed, the next one must see everything.
            full = true;
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(backoff.max);
            continue;
        }
        delay = backoff.initial;
        let sleep = async {
            match ctx.requeue {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancel.cancelled() => break,
            () = waker.notify.notified() => {}
            () = sleep => {}
        }
    }
    watchers.abort_all();
}

/// Destroys (or starts tearing down) every output this controller owns that the reconcile
/// that just finished did not touch.
fn cleanup_untouched(ctx: &Context) -> Result<(), super::state::StateError> {
    if !ctx.cleanup {
        return Ok(());
    }
    let mut stale: BTreeMap<(String, &'static str), Vec<String>> = BTreeMap::new();
    for (namespace, type_name) in &ctx.written {
        for r in ctx.state.backend().list(namespace, type_name, &Default::default()) {
            let key = (namespace.clone(), *type_name, r.metadata.id.clone());
            if r.metadata.owner == ctx.name && !ctx.touched.contains(&key) {
                stale.entry((namespace.clone(), type_name)).or_default().push(key.2);
            }
        }
    }
    for ((namespace, type_name), ids) in stale {
        for id in ids {
            remove_output(&ctx.state, &ctx.name, &namespace, type_name, &id)?;
        }
    }
    Ok(())
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

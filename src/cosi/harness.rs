//! A test harness: a runtime with chosen controllers on a fresh in-memory state, inputs
//! seeded from outside, and assertions that wait on watches for the state to get there.
//!
//! No sleeps: every wait is driven by watch events and bounded by a timeout whose message
//! shows the last value seen. Built only for tests (the `test-harness` feature).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::controller::Controller;
use super::registry::Registry;
use super::resource::{Resource, ResourceSpec, ResourceType};
use super::runtime::{Backoff, Runtime, RuntimeError};
use super::state::{Event, State, StateError};

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("timed out after {timeout:?} waiting for {what}; last seen: {last_seen}")]
    Timeout { what: String, timeout: Duration, last_seen: String },
    #[error(transparent)]
    State(#[from] StateError),
}

pub struct Harness {
    state: State,
    registry: Arc<Registry>,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
    stopped: watch::Receiver<BTreeMap<String, String>>,
    timeout: Duration,
}

/// A registry holding every type and namespace the controllers declare.
pub fn registry_for(controllers: &[Box<dyn Controller>]) -> Registry {
    let mut registry = Registry::new();
    let mut add = |t: ResourceType, namespace: &str| {
        let _ = registry.add_namespace(namespace, "");
        let _ = registry.add_namespace(t.definition().default_namespace, "");
        let _ = registry.register_type(t);
    };
    for c in controllers {
        for input in c.inputs() {
            add(input.resource_type, &input.namespace);
        }
        for output in c.outputs() {
            add(output.resource_type, output.definition().default_namespace);
        }
    }
    registry
}

impl Harness {
    /// Starts the controllers on a fresh in-memory state. Call inside a Tokio runtime.
    pub fn start(controllers: Vec<Box<dyn Controller>>) -> Result<Self, RuntimeError> {
        Self::start_on(State::in_memory(), controllers)
    }

    /// Starts the controllers on `state`, with a registry of what they declare.
    pub fn start_on(state: State, controllers: Vec<Box<dyn Controller>>) -> Result<Self, RuntimeError> {
        let registry = registry_for(&controllers);
        Self::start_with(state, Arc::new(registry), controllers)
    }

    pub fn start_with(
        state: State,
        registry: Arc<Registry>,
        controllers: Vec<Box<dyn Controller>>,
    ) -> Result<Self, RuntimeError> {
        let mut runtime = Runtime::new(state.clone(), Arc::clone(&registry))
            .with_backoff(Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(200) });
        for c in controllers {
            runtime.register_boxed(c)?;
        }
        let stopped = runtime.stopped();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(runtime.run(cancel.clone()));
        Ok(Harness { state, registry, cancel, task: Some(task), stopped, timeout: DEFAULT_TIMEOUT })
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Creates or replaces an input as an outside writer (no owner).
    pub fn seed<T: ResourceSpec>(&self, namespace: &str, id: &str, spec: T) -> Result<Resource<T>, StateError> {
        match self.state.find::<T>(namespace, id)? {
            None => self.state.create(Resource::new(namespace, id, spec), ""),
            Some(current) => self.state.update(current.with_spec(spec), ""),
        }
    }

    /// Tears an outside-written input down and destroys it if nothing holds it.
    pub fn unseed<T: ResourceSpec>(&self, namespace: &str, id: &str) -> Result<(), StateError> {
        self.state.teardown::<T>(namespace, id, "")?;
        match self.state.destroy::<T>(namespace, id, "") {
            Err(StateError::PendingFinalizers { .. }) => Ok(()),
            other => other,
        }
    }

    /// Waits until `pred` holds for the resource (`None` while it does not exist).
    pub async fn eventually<T, F>(
        &self,
        namespace: &str,
        id: &str,
        what: &str,
        pred: F,
    ) -> Result<Option<Resource<T>>, HarnessError>
    where
        T: ResourceSpec,
        F: Fn(Option<&Resource<T>>) -> bool,
    {
        let mut watch = self.state.watch::<T>(namespace, id);
        let mut last: Option<Resource<T>> = None;
        let what = format!("{what} ({namespace}/{}/{id})", T::DEFINITION.type_name);
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let event = match tokio::time::timeout_at(deadline, watch.next()).await {
                Ok(Ok(event)) => event,
                Ok(Err(_)) => {
                    // Fell behind: start over from the current value.
                    watch = self.state.watch::<T>(namespace, id);
                    continue;
                }
                Err(_) => {
                    return Err(HarnessError::Timeout { what, timeout: self.timeout, last_seen: show(last.as_ref()) });
                }
            };
            match &event {
                Event::Created(r) | Event::Updated { new: r, .. } => last = Resource::from_any(r),
                Event::Destroyed(_) => last = None,
                Event::Bootstrapped => {}
            }
            if pred(last.as_ref()) {
                return Ok(last);
            }
        }
    }

    /// Waits until `pred` holds for the whole list of a kind.
    pub async fn eventually_list<T, F>(
        &self,
        namespace: &str,
        what: &str,
        pred: F,
    ) -> Result<Vec<Resource<T>>, HarnessError>
    where
        T: ResourceSpec,
        F: Fn(&[Resource<T>]) -> bool,
    {
        let mut watch = self.state.watch_kind::<T>(namespace);
        let what = format!("{what} ({namespace}/{})", T::DEFINITION.type_name);
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let list = self.state.list::<T>(namespace);
            if pred(&list) {
                return Ok(list);
            }
            match tokio::time::timeout_at(deadline, watch.next()).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => watch = self.state.watch_kind::<T>(namespace),
                Err(_) => {
                    let list = self.state.list::<T>(namespace);
                    let last_seen = format!("{:?}", list.iter().map(|r| (r.id(), r.spec())).collect::<Vec<_>>());
                    return Err(HarnessError::Timeout { what, timeout: self.timeout, last_seen });
                }
            }
        }
    }

    /// Like `eventually`, panicking with the timeout message: for tests.
    pub async fn assert_eventually<T, F>(&self, namespace: &str, id: &str, what: &str, pred: F) -> Option<Resource<T>>
    where
        T: ResourceSpec,
        F: Fn(Option<&Resource<T>>) -> bool,
    {
        match self.eventually(namespace, id, what, pred).await {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    /// Waits for the resource to exist with exactly this spec.
    pub async fn assert_spec<T: ResourceSpec>(&self, namespace: &str, id: &str, want: &T) -> Resource<T> {
        let what = format!("spec == {want:?}");
        match self.assert_eventually::<T, _>(namespace, id, &what, |r| r.is_some_and(|r| r.spec() == want)).await {
            Some(r) => r,
            None => panic!("{what}: resource vanished"),
        }
    }

    /// Waits for the resource not to exist.
    pub async fn assert_absent<T: ResourceSpec>(&self, namespace: &str, id: &str) {
        self.assert_eventually::<T, _>(namespace, id, "absent", |r| r.is_none()).await;
    }

    pub async fn assert_list<T, F>(&self, namespace: &str, what: &str, pred: F) -> Vec<Resource<T>>
    where
        T: ResourceSpec,
        F: Fn(&[Resource<T>]) -> bool,
    {
        match self.eventually_list(namespace, what, pred).await {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    /// Waits for the runtime to stop `controller` for a declaration mistake; returns the
    /// error it was stopped with.
    pub async fn assert_stopped(&self, controller: &str) -> String {
        let mut stopped = self.stopped.clone();
        let wait = stopped.wait_for(|s| s.contains_key(controller));
        match tokio::time::timeout(self.timeout, wait).await {
            Ok(Ok(s)) => s.get(controller).cloned().unwrap_or_default(),
            _ => panic!("controller {controller} was not stopped within {:?}", self.timeout),
        }
    }

    /// Stops the runtime and waits for every controller to finish.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn show<T: ResourceSpec>(r: Option<&Resource<T>>) -> String {
    match r {
        Some(r) => format!("{:?} (version {}, phase {})", r.spec(), r.metadata().version, r.metadata().phase),
        None => "nothing (absent)".to_string(),
    }
}

//! Controllers: what they declare (inputs, outputs, event sources) and the context a
//! reconcile works through.
//!
//! A controller reads only what it declared as input or output and writes only the output
//! types it declared; the runtime checks the declarations against the type registry when the
//! controller is registered, and the context refuses anything else at run time — a refusal
//! the runtime treats as a programming mistake that stops the controller, not as something
//! to retry. So the dependency graph the runtime prints is the whole truth. Controllers
//! never call each other.
//!
//! Outputs are destroyed only when the controller says so: with [`Context::remove`], or by
//! tracking what a reconcile writes ([`Context::start_tracking_outputs`]) and cleaning up the
//! rest ([`Context::cleanup_outputs`]). An output that others hold with finalizers is torn
//! down and destroyed by the runtime once the last holder lets go; the controller is then
//! woken with that output in [`Context::changed`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::blocking::{BlockingError, blocking};
use super::query::{LabelQuery, ListOptions};
use super::resource::{Phase, Resource, ResourceDefinition, ResourceSpec, ResourceType};
use super::source::EventSource;
use super::state::{State, StateError};

/// What a reconcile may fail with; the runtime logs it and retries with back-off.
pub type ReconcileError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputKind {
    /// Wakes the controller on change.
    Weak,
    /// Wakes it, and lets it hold a finalizer on the input until it has released it.
    Strong,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Input {
    pub namespace: String,
    pub resource_type: ResourceType,
    pub id: Option<String>,
    pub kind: InputKind,
}

impl Input {
    pub fn weak<T: ResourceSpec>(namespace: impl Into<String>) -> Self {
        Input { namespace: namespace.into(), resource_type: ResourceType::of::<T>(), id: None, kind: InputKind::Weak }
    }

    pub fn strong<T: ResourceSpec>(namespace: impl Into<String>) -> Self {
        Input { kind: InputKind::Strong, ..Self::weak::<T>(namespace) }
    }

    /// Narrows the input to one resource id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    pub fn type_name(&self) -> &'static str {
        self.resource_type.type_name()
    }

    pub fn definition(&self) -> &'static ResourceDefinition {
        self.resource_type.definition()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputKind {
    /// The controller is the only writer of this type.
    Exclusive,
    /// Several controllers write this type, each owning the ids it created.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Output {
    pub resource_type: ResourceType,
    pub kind: OutputKind,
}

impl Output {
    pub fn exclusive<T: ResourceSpec>() -> Self {
        Output { resource_type: ResourceType::of::<T>(), kind: OutputKind::Exclusive }
    }

    pub fn shared<T: ResourceSpec>() -> Self {
        Output { resource_type: ResourceType::of::<T>(), kind: OutputKind::Shared }
    }

    pub fn type_name(&self) -> &'static str {
        self.resource_type.type_name()
    }

    pub fn definition(&self) -> &'static ResourceDefinition {
        self.resource_type.definition()
    }
}

/// A reconciling controller. The runtime calls `reconcile` once at start and again whenever
/// its inputs change (many changes coalesce into one call), when one of its event sources or
/// its waker wakes it, when a key it failed or requeued is due, or when it asked for a
/// requeue.
#[async_trait::async_trait]
pub trait Controller: Send + 'static {
    fn name(&self) -> String;
    fn inputs(&self) -> Vec<Input>;
    fn outputs(&self) -> Vec<Output>;
    /// Streams from outside the state that wake this controller (netlink, uevents, timers, a
    /// supervisor's feed). The runtime starts them with the controller, restarts one that
    /// ends or fails (with back-off, followed by a full reconcile) and stops them with it.
    /// Called once, at registration.
    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        Vec::new()
    }
    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError>;
}

#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("controller {controller}: {type_name} in {namespace:?} is neither an input nor an output")]
    NotReadable { controller: String, namespace: String, type_name: String },
    #[error("controller {controller}: {type_name} is not a declared output")]
    NotAnOutput { controller: String, type_name: String },
    #[error("controller {controller}: {type_name} in {namespace:?} is not a strong input; cannot hold it")]
    NotStrong { controller: String, namespace: String, type_name: String },
    #[error("controller {controller}: {source}")]
    State {
        controller: String,
        #[source]
        source: StateError,
    },
    #[error("controller {controller}: {source}")]
    Blocking {
        controller: String,
        #[source]
        source: BlockingError,
    },
}

impl ContextError {
    /// A read or write the controller never declared: a bug in the controller, which no
    /// retry can fix.
    pub fn is_declaration_mistake(&self) -> bool {
        matches!(
            self,
            ContextError::NotReadable { .. } | ContextError::NotAnOutput { .. } | ContextError::NotStrong { .. }
        )
    }
}

/// A resource reference: namespace, type, id. Also the key an event source reports a change
/// under (its own "type", such as `netlink`), and the unit of per-key errors and requeues.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pointer {
    pub namespace: String,
    pub type_name: &'static str,
    pub id: String,
}

impl Pointer {
    pub fn new(namespace: impl Into<String>, type_name: &'static str, id: impl Into<String>) -> Self {
        Pointer { namespace: namespace.into(), type_name, id: id.into() }
    }

    pub fn of<T: ResourceSpec>(namespace: impl Into<String>, id: impl Into<String>) -> Self {
        Self::new(namespace, T::DEFINITION.type_name, id)
    }

    /// Whether this points at a `T` in `namespace`.
    pub fn is<T: ResourceSpec>(&self, namespace: &str) -> bool {
        self.type_name == T::DEFINITION.type_name && self.namespace == namespace
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.type_name, self.id)
    }
}

/// Changes gathered between two reconciles.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(crate) full: bool,
    pub(crate) changed: BTreeSet<Pointer>,
    /// Own outputs tearing down whose last finalizer is gone: the runtime destroys them
    /// before the next reconcile.
    pub(crate) destroy_ready: BTreeSet<Pointer>,
}

/// A handle that wakes a controller from outside its inputs (an event source, a child
/// process). Waking many times before the controller runs wakes it once.
#[derive(Clone, Default)]
pub struct Waker {
    pub(crate) notify: Arc<Notify>,
    pending: Arc<Mutex<Pending>>,
}

impl Waker {
    /// Something changed; the controller looks for itself.
    pub fn wake(&self) {
        self.notify.notify_one();
    }

    /// `key` changed: it shows in the next reconcile's [`Context::changed`].
    pub fn changed(&self, key: Pointer) {
        self.lock().changed.insert(key);
        self.notify.notify_one();
    }

    /// The next reconcile must look at everything.
    pub fn wake_full(&self) {
        self.lock().full = true;
        self.notify.notify_one();
    }

    pub(crate) fn destroy_ready(&self, key: Pointer) {
        self.lock().destroy_ready.insert(key);
        self.notify.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn take(&self) -> Pending {
        std::mem::take(&mut *self.lock())
    }
}

/// What a reconcile sees and writes through.
pub struct Context {
    pub(crate) name: String,
    pub(crate) state: State,
    pub(crate) inputs: Vec<Input>,
    pub(crate) outputs: Vec<Output>,
    pub(crate) waker: Waker,
    pub(crate) cancel: CancellationToken,
    /// Outputs written or kept since `start_tracking_outputs`, if it was called.
    pub(crate) tracked: Option<HashSet<Pointer>>,
    /// Every (namespace, output type) this controller ever wrote: where cleanup looks, and
    /// what the runtime watches for released outputs.
    pub(crate) written: BTreeSet<(String, ResourceType)>,
    pub(crate) requeue: Option<Duration>,
    pub(crate) changes: Pending,
    pub(crate) key_failures: Vec<(Pointer, String)>,
    pub(crate) key_requeues: Vec<(Pointer, Duration)>,
}

const APPLY_ATTEMPTS: usize = 8;

impl Context {
    pub(crate) fn new(name: String, state: State, inputs: Vec<Input>, outputs: Vec<Output>, waker: Waker) -> Self {
        Context {
            name,
            state,
            inputs,
            outputs,
            waker,
            cancel: CancellationToken::new(),
            tracked: None,
            written: BTreeSet::new(),
            requeue: None,
            changes: Pending::default(),
            key_failures: Vec::new(),
            key_requeues: Vec::new(),
        }
    }

    /// Clears what belongs to one reconcile.
    pub(crate) fn begin(&mut self, changes: Pending) {
        self.changes = changes;
        self.tracked = None;
        self.requeue = None;
        self.key_failures.clear();
        self.key_requeues.clear();
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// True when this reconcile must look at everything: the first one, one after a failure
    /// or restart, and one after an input watch fell behind. Otherwise `changed` lists every
    /// input that changed since the last reconcile.
    pub fn is_full(&self) -> bool {
        self.changes.full
    }

    /// What changed since the last reconcile: inputs created, updated or destroyed; own
    /// outputs the runtime destroyed after their holders let go; keys an event source
    /// reported; failed or requeued keys that are due.
    pub fn changed(&self) -> impl Iterator<Item = &Pointer> {
        self.changes.changed.iter()
    }

    /// Cancelled when the runtime shuts down: long work checks it between steps.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Runs the controller again after `delay` even if nothing changes.
    pub fn requeue_after(&mut self, delay: Duration) {
        self.requeue = Some(self.requeue.map_or(delay, |d| d.min(delay)));
    }

    /// Records that `key` failed: the runtime logs it and offers the key again (in
    /// `changed`) after that key's own back-off, without holding back the others. A key
    /// that goes through a later reconcile without failing starts its back-off over.
    pub fn fail_key(&mut self, key: Pointer, error: impl fmt::Display) {
        self.key_failures.push((key, error.to_string()));
    }

    /// Offers `key` again (in `changed`) after `delay`.
    pub fn requeue_key_after(&mut self, key: Pointer, delay: Duration) {
        self.key_requeues.push((key, delay));
    }

    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }

    /// Runs blocking work off the async workers (see [`super::blocking`]).
    pub async fn blocking<T, F>(&self, what: &str, work: F) -> Result<T, ContextError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        blocking(what, work).await.map_err(|source| ContextError::Blocking { controller: self.name.clone(), source })
    }

    fn state_error(&self, source: StateError) -> ContextError {
        ContextError::State { controller: self.name.clone(), source }
    }

    fn readable(&self, namespace: &str, type_name: &'static str) -> Result<(), ContextError> {
        let declared = self.inputs.iter().any(|i| i.namespace == namespace && i.type_name() == type_name)
            || self.outputs.iter().any(|o| o.type_name() == type_name);
        if declared {
            Ok(())
        } else {
            Err(ContextError::NotReadable {
                controller: self.name.clone(),
                namespace: namespace.to_string(),
                type_name: type_name.to_string(),
            })
        }
    }

    fn writable(&self, type_name: &'static str) -> Result<(), ContextError> {
        if self.outputs.iter().any(|o| o.type_name() == type_name) {
            Ok(())
        } else {
            Err(ContextError::NotAnOutput { controller: self.name.clone(), type_name: type_name.to_string() })
        }
    }

    pub fn get<T: ResourceSpec>(&self, namespace: &str, id: &str) -> Result<Option<Resource<T>>, ContextError> {
        self.readable(namespace, T::DEFINITION.type_name)?;
        self.state.find(namespace, id).map_err(|e| self.state_error(e))
    }

    pub fn list<T: ResourceSpec>(&self, namespace: &str) -> Result<Vec<Resource<T>>, ContextError> {
        self.list_with(namespace, &ListOptions::default())
    }

    pub fn list_labeled<T: ResourceSpec>(
        &self,
        namespace: &str,
        labels: &LabelQuery,
    ) -> Result<Vec<Resource<T>>, ContextError> {
        self.list_with(namespace, &ListOptions { labels: labels.clone(), ..Default::default() })
    }

    pub fn list_with<T: ResourceSpec>(
        &self,
        namespace: &str,
        options: &ListOptions,
    ) -> Result<Vec<Resource<T>>, ContextError> {
        self.readable(namespace, T::DEFINITION.type_name)?;
        Ok(self.state.list_with(namespace, options))
    }

    /// From now until [`Context::cleanup_outputs`], remember every output this reconcile
    /// applies or keeps.
    pub fn start_tracking_outputs(&mut self) {
        self.tracked = Some(HashSet::new());
    }

    /// Removes every output this controller owns that was neither applied nor kept since
    /// [`Context::start_tracking_outputs`] (held ones are torn down and destroyed once
    /// released). Without tracking started, does nothing: a reconcile that returns early
    /// destroys nothing.
    pub fn cleanup_outputs(&mut self) -> Result<(), ContextError> {
        let Some(tracked) = self.tracked.take() else { return Ok(()) };
        let mut stale = Vec::new();
        for (namespace, output) in &self.written {
            for r in self.state.backend().list(namespace, output.type_name(), &ListOptions::default()) {
                let key = Pointer::new(namespace.clone(), output.type_name(), r.metadata.id.clone());
                if r.metadata.owner == self.name && !tracked.contains(&key) {
                    stale.push(key);
                }
            }
        }
        for key in stale {
            remove_output(&self.state, &self.name, &key).map_err(|e| self.state_error(e))?;
        }
        Ok(())
    }

    fn touch(&mut self, key: Pointer, output: ResourceType) {
        self.written.insert((key.namespace.clone(), output));
        if let Some(tracked) = &mut self.tracked {
            tracked.insert(key);
        }
    }

    /// Makes the output `namespace/id` hold `spec`, creating it if needed; writes nothing if
    /// it already does.
    ///
    /// An output still tearing down and held by another controller's finalizer cannot be
    /// re-created yet: it is returned as it is (phase tearing-down); the runtime destroys it
    /// when the holder lets go and wakes this controller with it in `changed`, to apply again.
    pub fn apply<T: ResourceSpec>(&mut self, namespace: &str, id: &str, spec: T) -> Result<Resource<T>, ContextError> {
        self.apply_labeled(namespace, id, spec, BTreeMap::new())
    }

    pub fn apply_labeled<T: ResourceSpec>(
        &mut self,
        namespace: &str,
        id: &str,
        spec: T,
        labels: BTreeMap<String, String>,
    ) -> Result<Resource<T>, ContextError> {
        let type_name = T::DEFINITION.type_name;
        self.writable(type_name)?;
        self.touch(Pointer::new(namespace, type_name, id), ResourceType::of::<T>());
        let mut last = None;
        for _ in 0..APPLY_ATTEMPTS {
            match self.try_apply(namespace, id, &spec, &labels) {
                Err(e) if e.is_conflict() || matches!(e, StateError::AlreadyExists { .. }) => last = Some(e),
                other => return other.map_err(|e| self.state_error(e)),
            }
        }
        Err(self.state_error(last.unwrap_or(StateError::VersionConflict {
            reference: format!("{namespace}/{type_name}/{id}"),
            expected: 0,
            actual: 0,
        })))
    }

    fn try_apply<T: ResourceSpec>(
        &self,
        namespace: &str,
        id: &str,
        spec: &T,
        labels: &BTreeMap<String, String>,
    ) -> Result<Resource<T>, StateError> {
        match self.state.find::<T>(namespace, id)? {
            None => {
                self.state.create(Resource::new(namespace, id, spec.clone()).with_labels(labels.clone()), &self.name)
            }
            Some(current) if current.metadata().phase == Phase::TearingDown => {
                // Wanted again while on its way out: finish the teardown first if nothing
                // holds it; if something does, leave it be until it is released.
                match self.state.destroy::<T>(namespace, id, &self.name) {
                    Err(StateError::PendingFinalizers { .. }) => Ok(current),
                    Err(e) => Err(e),
                    Ok(()) => self.try_apply(namespace, id, spec, labels),
                }
            }
            Some(current) => {
                if current.spec() == spec && current.metadata().labels == *labels {
                    return Ok(current);
                }
                self.state.update(current.with_spec(spec.clone()).with_labels(labels.clone()), &self.name)
            }
        }
    }

    /// Marks an output as still wanted without writing it.
    pub fn keep<T: ResourceSpec>(&mut self, namespace: &str, id: &str) {
        self.touch(Pointer::of::<T>(namespace, id), ResourceType::of::<T>());
    }

    /// Tears an output down now and destroys it once nothing holds it. Returns true when it
    /// is gone.
    pub fn remove<T: ResourceSpec>(&mut self, namespace: &str, id: &str) -> Result<bool, ContextError> {
        let type_name = T::DEFINITION.type_name;
        self.writable(type_name)?;
        let key = Pointer::new(namespace, type_name, id);
        // Watched for its release from now on, even if this controller never applied it.
        self.written.insert((namespace.to_string(), ResourceType::of::<T>()));
        if let Some(tracked) = &mut self.tracked {
            tracked.remove(&key);
        }
        remove_output(&self.state, &self.name, &key).map_err(|e| self.state_error(e))
    }

    fn strong(&self, namespace: &str, type_name: &'static str) -> Result<(), ContextError> {
        if self
            .inputs
            .iter()
            .any(|i| i.kind == InputKind::Strong && i.namespace == namespace && i.type_name() == type_name)
        {
            Ok(())
        } else {
            Err(ContextError::NotStrong {
                controller: self.name.clone(),
                namespace: namespace.to_string(),
                type_name: type_name.to_string(),
            })
        }
    }

    /// Holds a strong input with this controller's finalizer, so it cannot be destroyed until
    /// `release`d. Works in any phase: holding an input that is already tearing down is how
    /// a controller keeps it until its own outputs are gone.
    pub fn hold<T: ResourceSpec>(&self, resource: &Resource<T>) -> Result<(), ContextError> {
        let md = resource.metadata();
        self.strong(&md.namespace, T::DEFINITION.type_name)?;
        if md.finalizers.contains(&self.name) {
            return Ok(());
        }
        self.state.add_finalizer::<T>(&md.namespace, &md.id, &self.name).map_err(|e| self.state_error(e))
    }

    /// Releases a strong input held with `hold`.
    pub fn release<T: ResourceSpec>(&self, resource: &Resource<T>) -> Result<(), ContextError> {
        let md = resource.metadata();
        self.strong(&md.namespace, T::DEFINITION.type_name)?;
        match self.state.remove_finalizer::<T>(&md.namespace, &md.id, &self.name) {
            Err(e) if e.is_not_found() => Ok(()),
            other => other.map_err(|e| self.state_error(e)),
        }
    }
}

/// Teardown then destroy, as far as finalizers allow. True when the resource is gone.
pub(crate) fn remove_output(state: &State, owner: &str, key: &Pointer) -> Result<bool, StateError> {
    let backend = state.backend();
    let (namespace, type_name, id) = (key.namespace.as_str(), key.type_name, key.id.as_str());
    let current = match backend.get(namespace, type_name, id) {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return Ok(true),
        Err(e) => return Err(e),
    };
    let current = if current.metadata.phase == Phase::Running {
        backend.teardown(namespace, type_name, id, owner)?
    } else {
        current
    };
    if !current.metadata.finalizers.is_empty() {
        return Ok(false);
    }
    match backend.destroy(namespace, type_name, id, owner) {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(true),
        Err(StateError::PendingFinalizers { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Finishes the destroy of an own output whose holders have let go, if it still is one.
pub(crate) fn destroy_released(state: &State, owner: &str, key: &Pointer) -> Result<(), StateError> {
    let backend = state.backend();
    match backend.get(&key.namespace, key.type_name, &key.id) {
        Ok(r)
            if r.metadata.owner == owner
                && r.metadata.phase == Phase::TearingDown
                && r.metadata.finalizers.is_empty() =>
        {
            match backend.destroy(&key.namespace, key.type_name, &key.id, owner) {
                Ok(()) | Err(StateError::PendingFinalizers { .. }) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(e),
            }
        }
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

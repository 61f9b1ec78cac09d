//! Controllers: what they declare (inputs, outputs) and the context a reconcile works through.
//!
//! A controller reads only what it declared as input or output and writes only the output
//! types it declared; the context refuses anything else, so the dependency graph the runtime
//! prints is the whole truth. Controllers never call each other.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::resource::{LabelQuery, Phase, Resource, ResourceSpec};
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
    pub type_name: &'static str,
    pub id: Option<String>,
    pub kind: InputKind,
}

impl Input {
    pub fn weak<T: ResourceSpec>(namespace: impl Into<String>) -> Self {
        Input { namespace: namespace.into(), type_name: T::DEFINITION.type_name, id: None, kind: InputKind::Weak }
    }

    pub fn strong<T: ResourceSpec>(namespace: impl Into<String>) -> Self {
        Input { kind: InputKind::Strong, ..Self::weak::<T>(namespace) }
    }

    /// Narrows the input to one resource id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
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
    pub type_name: &'static str,
    pub kind: OutputKind,
}

impl Output {
    pub fn exclusive<T: ResourceSpec>() -> Self {
        Output { type_name: T::DEFINITION.type_name, kind: OutputKind::Exclusive }
    }

    pub fn shared<T: ResourceSpec>() -> Self {
        Output { type_name: T::DEFINITION.type_name, kind: OutputKind::Shared }
    }
}

/// A reconciling controller. The runtime calls `reconcile` once at start and again whenever
/// its inputs change (many changes coalesce into one call), when its waker is woken, or when
/// it asked for a requeue.
#[async_trait::async_trait]
pub trait Controller: Send + 'static {
    fn name(&self) -> String;
    fn inputs(&self) -> Vec<Input>;
    fn outputs(&self) -> Vec<Output>;
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
}

/// A resource reference: namespace, type, id.
pub type Pointer = (String, &'static str, String);

/// Input changes gathered between two reconciles.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(crate) full: bool,
    pub(crate) changed: BTreeSet<Pointer>,
}

/// A handle that wakes a controller from outside its inputs (a netlink socket, a timer, a
/// child process). Waking many times before the controller runs wakes it once.
#[derive(Clone, Default)]
pub struct Waker {
    pub(crate) notify: Arc<Notify>,
    pub(crate) pending: Arc<Mutex<Pending>>,
}

impl Waker {
    pub fn wake(&self) {
        self.notify.notify_one();
    }

    pub(crate) fn changed(&self, pointer: Pointer) {
        self.lock().changed.insert(pointer);
        self.notify.notify_one();
    }

    pub(crate) fn wake_full(&self) {
        self.lock().full = true;
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
    pub(crate) touched: HashSet<Pointer>,
    pub(crate) written: BTreeSet<(String, &'static str)>,
    pub(crate) requeue: Option<Duration>,
    pub(crate) cleanup: bool,
    pub(crate) changes: Pending,
}

const APPLY_ATTEMPTS: usize = 8;

impl Context {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True when this reconcile must look at everything: the first one, one after a restart,
    /// and one after change tracking overflowed. Otherwise `changed` lists every input that
    /// changed since the last reconcile.
    pub fn is_full(&self) -> bool {
        self.changes.full
    }

    /// Input resources created, updated or destroyed since the last reconcile.
    pub fn changed(&self) -> impl Iterator<Item = &Pointer> {
        self.changes.changed.iter()
    }

    /// Keeps outputs this reconcile did not touch (for reconciles that handle only what
    /// changed; such a controller destroys outputs itself with `remove`).
    pub fn skip_cleanup(&mut self) {
        self.cleanup = false;
    }

    /// Runs the controller again after `delay` even if nothing changes.
    pub fn requeue_after(&mut self, delay: Duration) {
        self.requeue = Some(self.requeue.map_or(delay, |d| d.min(delay)));
    }

    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }

    fn state_error(&self, source: StateError) -> ContextError {
        ContextError::State { controller: self.name.clone(), source }
    }

    fn readable(&self, namespace: &str, type_name: &'static str) -> Result<(), ContextError> {
        let declared = self.inputs.iter().any(|i| i.namespace == namespace && i.type_name == type_name)
            || self.outputs.iter().any(|o| o.type_name == type_name);
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
        if self.outputs.iter().any(|o| o.type_name == type_name) {
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
        self.list_labeled(namespace, &LabelQuery::all())
    }

    pub fn list_labeled<T: ResourceSpec>(
        &self,
        namespace: &str,
        query: &LabelQuery,
    ) -> Result<Vec<Resource<T>>, ContextError> {
        self.readable(namespace, T::DEFINITION.type_name)?;
        Ok(self.state.list_labeled(namespace, query))
    }

    /// Makes the output `namespace/id` hold `spec`, creating it if needed; writes nothing if
    /// it already does. Marks it touched for this reconcile.
    ///
    /// An output still tearing down and held by another controller's finalizer cannot be
    /// re-created yet: it is returned as it is (phase tearing-down), and the controller is
    /// woken when the holder releases it, to apply again.
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
        self.touched.insert((namespace.to_string(), type_name, id.to_string()));
        self.written.insert((namespace.to_string(), type_name));
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
                let mut fresh = Resource::new(namespace, id, spec.clone());
                for (k, v) in labels {
                    fresh = fresh.with_label(k.clone(), v.clone());
                }
                self.state.create(fresh, &self.name)
            }
            Some(current) if current.metadata().phase == Phase::TearingDown => {
                // Wanted again while on its way out: finish the teardown first if nothing
                // holds it. If something does, leave it be: the runtime wakes this controller
                // when the last holder lets go, and the next apply re-creates it.
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
                let mut next = current.with_spec(spec.clone());
                if current.metadata().labels != *labels {
                    let mut any = next.clone().into_any();
                    any.metadata.labels = labels.clone();
                    next = Resource::from_any(&Arc::new(any)).unwrap_or(next);
                }
                self.state.update(next, &self.name)
            }
        }
    }

    /// Marks an output as still wanted without writing it.
    pub fn keep<T: ResourceSpec>(&mut self, namespace: &str, id: &str) {
        self.touched.insert((namespace.to_string(), T::DEFINITION.type_name, id.to_string()));
    }

    /// Tears an output down now and destroys it once nothing holds it. Returns true when it
    /// is gone.
    pub fn remove<T: ResourceSpec>(&mut self, namespace: &str, id: &str) -> Result<bool, ContextError> {
        let type_name = T::DEFINITION.type_name;
        self.writable(type_name)?;
        self.touched.remove(&(namespace.to_string(), type_name, id.to_string()));
        remove_output(&self.state, &self.name, namespace, type_name, id).map_err(|e| self.state_error(e))
    }

    fn strong(&self, namespace: &str, type_name: &'static str) -> Result<(), ContextError> {
        if self
            .inputs
            .iter()
            .any(|i| i.kind == InputKind::Strong && i.namespace == namespace && i.type_name == type_name)
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
    /// `release`d.
    pub fn hold<T: ResourceSpec>(&self, resource: &Resource<T>) -> Result<(), ContextError> {
        let md = resource.metadata();
        self.strong(&md.namespace, T::DEFINITION.type_name)?;
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
pub(crate) fn remove_output(
    state: &State,
    owner: &str,
    namespace: &str,
    type_name: &str,
    id: &str,
) -> Result<bool, StateError> {
    let backend = state.backend();
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
    if current.metadata.finalizers.is_empty() {
        match backend.destroy(namespace, type_name, id, owner) {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(true),
            Err(StateError::PendingFinalizers { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    } else {
        Ok(false)
    }
}

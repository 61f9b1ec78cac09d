//! The in-memory state backend: one lock over namespaces → types → resources, and one
//! bounded broadcast channel per watched kind.
//!
//! Events are sent while the lock is held, so every watcher sees writes in the order they
//! happened and a watch's snapshot joins its live events with nothing lost or repeated.
//! A kind gets its channel only when first watched: unwatched kinds cost no history.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use tokio::sync::broadcast;

use super::resource::{AnyResource, LabelQuery, Phase};
use super::state::{Event, StateBackend, StateError, Watch};

/// Events a kind keeps for slow watchers before they are told they fell behind.
pub const DEFAULT_HISTORY: usize = 1024;

#[derive(Default)]
struct Kind {
    items: BTreeMap<String, Arc<AnyResource>>,
    events: Option<broadcast::Sender<Event>>,
}

impl Kind {
    fn publish(&self, event: Event) {
        if let Some(tx) = &self.events {
            // No receivers is fine: nobody is watching right now.
            let _ = tx.send(event);
        }
    }
}

pub struct InMemoryState {
    history: usize,
    kinds: Mutex<HashMap<String, HashMap<String, Kind>>>,
}

impl Default for InMemoryState {
    fn default() -> Self {
        Self::new()
    }
}

fn reference(namespace: &str, type_name: &str, id: &str) -> String {
    format!("{namespace}/{type_name}/{id}")
}

fn not_found(namespace: &str, type_name: &str, id: &str) -> StateError {
    StateError::NotFound { reference: reference(namespace, type_name, id) }
}

fn check_owner(current: &AnyResource, writer: &str) -> Result<(), StateError> {
    if current.metadata.owner == writer {
        Ok(())
    } else {
        Err(StateError::OwnerConflict {
            reference: current.metadata.reference(),
            owner: current.metadata.owner.clone(),
            writer: writer.to_string(),
        })
    }
}

impl InMemoryState {
    pub fn new() -> Self {
        Self::with_history(DEFAULT_HISTORY)
    }

    /// A state whose watchers may fall `history` events behind before they get an error.
    pub fn with_history(history: usize) -> Self {
        InMemoryState { history: history.max(1), kinds: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, HashMap<String, Kind>>> {
        // A panic while holding the lock cannot leave a half-written map behind (every write
        // is a single insert or remove), so a poisoned lock is safe to keep using.
        self.kinds.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on an existing resource's kind and current value; `f` returns the new value
    /// (or `None` to leave it) and the event to publish.
    fn mutate(
        &self,
        namespace: &str,
        type_name: &str,
        id: &str,
        f: impl FnOnce(&Arc<AnyResource>) -> Result<Option<AnyResource>, StateError>,
    ) -> Result<Arc<AnyResource>, StateError> {
        let mut kinds = self.lock();
        let kind = kinds
            .get_mut(namespace)
            .and_then(|types| types.get_mut(type_name))
            .ok_or_else(|| not_found(namespace, type_name, id))?;
        let current = kind.items.get(id).ok_or_else(|| not_found(namespace, type_name, id))?;
        let Some(mut next) = f(current)? else {
            return Ok(Arc::clone(current));
        };
        next.metadata.version = current.metadata.version + 1;
        next.metadata.updated = SystemTime::now();
        let next = Arc::new(next);
        let old = kind.items.insert(id.to_string(), Arc::clone(&next));
        if let Some(old) = old {
            kind.publish(Event::Updated { old, new: Arc::clone(&next) });
        }
        Ok(next)
    }

    fn subscribe(&self, namespace: &str, type_name: &str, id: Option<&str>) -> Watch {
        let mut kinds = self.lock();
        let kind = kinds.entry(namespace.to_string()).or_default().entry(type_name.to_string()).or_default();
        let history = self.history;
        let rx = kind.events.get_or_insert_with(|| broadcast::channel(history).0).subscribe();
        let snapshot = match id {
            Some(id) => kind.items.get(id).cloned().into_iter().collect(),
            None => kind.items.values().cloned().collect(),
        };
        Watch::new(snapshot, rx, id.map(str::to_string))
    }
}

impl StateBackend for InMemoryState {
    fn get(&self, namespace: &str, type_name: &str, id: &str) -> Result<Arc<AnyResource>, StateError> {
        self.lock()
            .get(namespace)
            .and_then(|types| types.get(type_name))
            .and_then(|kind| kind.items.get(id))
            .cloned()
            .ok_or_else(|| not_found(namespace, type_name, id))
    }

    fn list(&self, namespace: &str, type_name: &str, query: &LabelQuery) -> Vec<Arc<AnyResource>> {
        self.lock()
            .get(namespace)
            .and_then(|types| types.get(type_name))
            .map(|kind| kind.items.values().filter(|r| query.matches(&r.metadata.labels)).cloned().collect())
            .unwrap_or_default()
    }

    fn create(&self, mut resource: AnyResource, owner: &str) -> Result<Arc<AnyResource>, StateError> {
        let md = &resource.metadata;
        let spec_type = resource.spec.definition().type_name;
        if spec_type != md.type_name {
            return Err(StateError::TypeMismatch {
                reference: md.reference(),
                spec_type: spec_type.to_string(),
                type_name: md.type_name.clone(),
            });
        }
        let mut kinds = self.lock();
        let kind = kinds.entry(md.namespace.clone()).or_default().entry(md.type_name.clone()).or_default();
        if kind.items.contains_key(&md.id) {
            return Err(StateError::AlreadyExists { reference: md.reference() });
        }
        let now = SystemTime::now();
        let md = &mut resource.metadata;
        md.version = 1;
        md.owner = owner.to_string();
        md.phase = Phase::Running;
        md.finalizers.clear();
        md.created = now;
        md.updated = now;
        let stored = Arc::new(resource);
        kind.items.insert(stored.metadata.id.clone(), Arc::clone(&stored));
        kind.publish(Event::Created(Arc::clone(&stored)));
        Ok(stored)
    }

    fn update(
        &self,
        resource: AnyResource,
        expected_version: u64,
        owner: &str,
    ) -> Result<Arc<AnyResource>, StateError> {
        let (namespace, type_name, id) =
            (resource.metadata.namespace.clone(), resource.metadata.type_name.clone(), resource.metadata.id.clone());
        self.mutate(&namespace, &type_name, &id, |current| {
            let reference = current.metadata.reference();
            if current.metadata.version != expected_version {
                return Err(StateError::VersionConflict {
                    reference,
                    expected: expected_version,
                    actual: current.metadata.version,
                });
            }
            check_owner(current, owner)?;
            if current.metadata.phase == Phase::TearingDown {
                return Err(StateError::PhaseConflict { reference });
            }
            let current_type = current.spec.definition().type_name;
            let new_type = resource.spec.definition().type_name;
            if current_type != new_type {
                return Err(StateError::TypeMismatch {
                    reference,
                    spec_type: new_type.to_string(),
                    type_name: current_type.to_string(),
                });
            }
            let mut next = AnyResource::clone(current);
            next.spec = resource.spec;
            next.metadata.labels = resource.metadata.labels;
            next.metadata.annotations = resource.metadata.annotations;
            Ok(Some(next))
        })
    }

    fn teardown(
        &self,
        namespace: &str,
        type_name: &str,
        id: &str,
        owner: &str,
    ) -> Result<Arc<AnyResource>, StateError> {
        self.mutate(namespace, type_name, id, |current| {
            check_owner(current, owner)?;
            if current.metadata.phase == Phase::TearingDown {
                return Ok(None);
            }
            let mut next = AnyResource::clone(current);
            next.metadata.phase = Phase::TearingDown;
            Ok(Some(next))
        })
    }

    fn destroy(&self, namespace: &str, type_name: &str, id: &str, owner: &str) -> Result<(), StateError> {
        let mut kinds = self.lock();
        let kind = kinds
            .get_mut(namespace)
            .and_then(|types| types.get_mut(type_name))
            .ok_or_else(|| not_found(namespace, type_name, id))?;
        let current = kind.items.get(id).ok_or_else(|| not_found(namespace, type_name, id))?;
        check_owner(current, owner)?;
        if !current.metadata.finalizers.is_empty() {
            return Err(StateError::PendingFinalizers {
                reference: current.metadata.reference(),
                finalizers: current.metadata.finalizers.iter().cloned().collect(),
            });
        }
        if let Some(gone) = kind.items.remove(id) {
            kind.publish(Event::Destroyed(gone));
        }
        Ok(())
    }

    fn add_finalizer(
        &self,
        namespace: &str,
        type_name: &str,
        id: &str,
        finalizer: &str,
    ) -> Result<Arc<AnyResource>, StateError> {
        self.mutate(namespace, type_name, id, |current| {
            if current.metadata.finalizers.contains(finalizer) {
                return Ok(None);
            }
            if current.metadata.phase == Phase::TearingDown {
                return Err(StateError::PhaseConflict { reference: current.metadata.reference() });
            }
            let mut next = AnyResource::clone(current);
            next.metadata.finalizers.insert(finalizer.to_string());
            Ok(Some(next))
        })
    }

    fn remove_finalizer(
        &self,
        namespace: &str,
        type_name: &str,
        id: &str,
        finalizer: &str,
    ) -> Result<Arc<AnyResource>, StateError> {
        self.mutate(namespace, type_name, id, |current| {
            if !current.metadata.finalizers.contains(finalizer) {
                return Ok(None);
            }
            let mut next = AnyResource::clone(current);
            next.metadata.finalizers.remove(finalizer);
            Ok(Some(next))
        })
    }

    fn watch_kind(&self, namespace: &str, type_name: &str) -> Watch {
        self.subscribe(namespace, type_name, None)
    }

    fn watch(&self, namespace: &str, type_name: &str, id: &str) -> Watch {
        self.subscribe(namespace, type_name, Some(id))
    }
}

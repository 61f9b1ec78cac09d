//! The in-memory state backend: one lock over namespaces → types → resources, a bounded
//! event history per kind, and one per watched id.
//!
//! Events are recorded while the lock is held, so every watcher sees writes in the order they
//! happened and a watch's snapshot joins its live events with nothing lost or repeated. A
//! watch of one id reads a history of its own, so writes to other ids never push it behind.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use super::query::{ListOptions, WatchOptions, WatchStart};
use super::resource::{AnyResource, Phase};
use super::state::{Event, StateBackend, StateError, Watch};
use super::watch::EventRing;

/// Events a kind keeps for slow watchers before they are told they fell behind (as Talos's
/// machined state).
pub const DEFAULT_HISTORY: usize = 1024;

/// Per-id histories kept before the ones nobody reads any more are swept.
const ID_RING_SWEEP: usize = 64;

struct Kind {
    items: BTreeMap<String, Arc<AnyResource>>,
    events: Arc<EventRing>,
    by_id: HashMap<String, Arc<EventRing>>,
}

impl Kind {
    fn new(history: usize) -> Self {
        Kind { items: BTreeMap::new(), events: EventRing::new(history), by_id: HashMap::new() }
    }

    fn publish(&mut self, id: &str, event: Event) {
        if let Some(ring) = self.by_id.get(id) {
            if ring.readers() == 0 {
                self.by_id.remove(id);
            } else {
                ring.push(event.clone());
            }
        }
        self.events.push(event);
    }
}

type Kinds = HashMap<String, HashMap<String, Kind>>;

pub struct InMemoryState {
    history: usize,
    kinds: Mutex<Kinds>,
}

impl Default for InMemoryState {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for InMemoryState {
    fn drop(&mut self) {
        for kind in self.lock().values().flat_map(HashMap::values) {
            kind.events.close();
            kind.by_id.values().for_each(|r| r.close());
        }
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

    /// A state whose watchers may fall `history` events behind before their watch ends.
    pub fn with_history(history: usize) -> Self {
        InMemoryState { history: history.max(1), kinds: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> MutexGuard<'_, Kinds> {
        // A panic while holding the lock cannot leave a half-written map behind (every write
        // is a single insert or remove), so a poisoned lock is safe to keep using.
        self.kinds.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn kind<'a>(kinds: &'a mut Kinds, history: usize, namespace: &str, type_name: &str) -> &'a mut Kind {
        kinds
            .entry(namespace.to_string())
            .or_default()
            .entry(type_name.to_string())
            .or_insert_with(|| Kind::new(history))
    }

    /// Runs `f` on an existing resource's current value; `f` returns the new value (or `None`
    /// to leave it), which is stored with the next version and published.
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
        if let Some(old) = kind.items.insert(id.to_string(), Arc::clone(&next)) {
            kind.publish(id, Event::Updated { old, new: Arc::clone(&next) });
        }
        Ok(next)
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

    fn list(&self, namespace: &str, type_name: &str, options: &ListOptions) -> Vec<Arc<AnyResource>> {
        self.lock()
            .get(namespace)
            .and_then(|types| types.get(type_name))
            .map(|kind| {
                kind.items.values().filter(|r| options.matches(&r.metadata.id, &r.metadata.labels)).cloned().collect()
            })
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
        let kind = Self::kind(&mut kinds, self.history, &md.namespace, &md.type_name);
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
        let id = stored.metadata.id.clone();
        kind.items.insert(id.clone(), Arc::clone(&stored));
        kind.publish(&id, Event::Created(Arc::clone(&stored)));
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
            kind.publish(id, Event::Destroyed(gone));
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

    fn watch_kind(&self, namespace: &str, type_name: &str, options: &WatchOptions) -> Watch {
        let mut kinds = self.lock();
        let kind = Self::kind(&mut kinds, self.history, namespace, type_name);
        let filter = &options.filter;
        let (initial, cursor) = match options.start {
            WatchStart::Bootstrap => {
                let snapshot = kind
                    .items
                    .values()
                    .filter(|r| filter.matches(&r.metadata.id, &r.metadata.labels))
                    .cloned()
                    .collect();
                (Watch::bootstrap(snapshot), kind.events.live())
            }
            WatchStart::Tail(n) => (Vec::new(), kind.events.tail(n)),
            WatchStart::Live => (Vec::new(), kind.events.live()),
        };
        Watch::new(initial, cursor, filter.clone())
    }

    fn watch(&self, namespace: &str, type_name: &str, id: &str) -> Watch {
        let mut kinds = self.lock();
        let history = self.history;
        let kind = Self::kind(&mut kinds, history, namespace, type_name);
        if kind.by_id.len() >= ID_RING_SWEEP {
            kind.by_id.retain(|_, ring| ring.readers() > 0);
        }
        let ring = kind.by_id.entry(id.to_string()).or_insert_with(|| EventRing::new(history));
        let snapshot = kind.items.get(id).cloned().into_iter().collect();
        Watch::new(Watch::bootstrap(snapshot), ring.live(), ListOptions::default())
    }
}

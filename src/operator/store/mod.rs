//! Where the fleet's machines live: the [`Store`] the operator's engine reads and writes through,
//! and the [`FleetAdmin`] side a user (or a test) changes the fleet with. Three backends share
//! these traits and one conformance suite: [`memory`] (tests, benches), [`sqlite`] (the
//! standalone operator, the default) and, with the `kubernetes` feature, the API server.
//!
//! Every status write is conditional on the resourceVersion the writer read: a store refuses
//! it with [`StoreError::Conflict`] once anyone else wrote the machine. Nothing in the engine
//! may write a machine any other way.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;

use super::model::{MachineEvent, MachineKey, MachineStatus, TalosMachine};

pub mod memory;
pub mod sqlite;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{key}: changed since it was read (resourceVersion {expected} is stale)")]
    Conflict { key: MachineKey, expected: String },
    #[error("{key}: not found")]
    NotFound { key: MachineKey },
    #[error("{what}: {detail}")]
    Invalid { what: String, detail: String },
    #[error("{store}: {detail}")]
    Backend { store: String, detail: String },
}

impl StoreError {
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }
}

/// A change seen by a store's watch.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// Created or changed (spec, metadata or status).
    Applied(Box<TalosMachine>),
    Deleted(MachineKey),
}

/// What the operator's engine needs from a backend.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A name for messages (`sqlite /var/lib/fleet/fleet.db`, `kubernetes`).
    fn name(&self) -> String;
    async fn list(&self) -> Result<Vec<TalosMachine>, StoreError>;
    async fn get(&self, key: &MachineKey) -> Result<Option<TalosMachine>, StoreError>;
    /// Replaces the status if the machine's resourceVersion is still `expected`.
    async fn update_status(
        &self,
        key: &MachineKey,
        expected: &str,
        status: &MachineStatus,
    ) -> Result<TalosMachine, StoreError>;
    /// Adds the operator's finalizer, if the resourceVersion is still `expected`.
    async fn add_finalizer(&self, key: &MachineKey, expected: &str) -> Result<TalosMachine, StoreError>;
    /// Removes the operator's finalizer (a deleting machine then goes), if still `expected`.
    async fn remove_finalizer(&self, key: &MachineKey, expected: &str) -> Result<(), StoreError>;
    async fn record_event(&self, key: &MachineKey, event: &MachineEvent) -> Result<(), StoreError>;
    /// A Secret's data (text values), or None.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, StoreError>;
    /// A ConfigMap's data, or None.
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, StoreError>;
    /// Changes from now on. A backend that lost track lists again and reports the difference,
    /// so a deletion is never missed.
    async fn watch(&self) -> Result<tokio::sync::mpsc::Receiver<WatchEvent>, StoreError>;
}

/// Changing the fleet: `talosbox operator apply|delete`, and the tests' seeding. On Kubernetes
/// this is kubectl's part.
#[async_trait]
pub trait FleetAdmin: Send + Sync {
    /// Creates the machine, or updates its spec, annotations and labels (status kept). The
    /// generation goes up when the spec changed.
    async fn apply_machine(&self, machine: TalosMachine) -> Result<TalosMachine, StoreError>;
    /// Asks for deletion: gone at once without finalizers, else marked deleting.
    async fn delete_machine(&self, key: &MachineKey) -> Result<bool, StoreError>;
    async fn put_secret(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) -> Result<(), StoreError>;
    async fn put_config_map(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<(), StoreError>;
    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<(), StoreError>;
    /// The machine's events, oldest first.
    async fn events(&self, key: &MachineKey) -> Result<Vec<MachineEvent>, StoreError>;
}

/// The watch events that take a consumer from `known` (key → resourceVersion) to `now`, and
/// `known` updated: what a backend sends after (re)listing.
pub fn resync(known: &mut HashMap<MachineKey, String>, now: Vec<TalosMachine>) -> Vec<WatchEvent> {
    let mut events = Vec::new();
    let mut seen = HashMap::with_capacity(now.len());
    for m in now {
        let key = m.key();
        if known.get(&key) != Some(&m.metadata.resource_version) {
            seen.insert(key, m.metadata.resource_version.clone());
            events.push(WatchEvent::Applied(Box::new(m)));
        } else {
            seen.insert(key, m.metadata.resource_version.clone());
        }
    }
    for key in known.keys() {
        if !seen.contains_key(key) {
            events.push(WatchEvent::Deleted(key.clone()));
        }
    }
    *known = seen;
    events
}

/// The first step of every apply: the namespace defaulted to `default` (as kubectl does) and
/// the machine validated, refused with its key. Shared so every backend admits the same machines.
pub(crate) fn admit(mut machine: TalosMachine) -> Result<TalosMachine, StoreError> {
    if machine.metadata.namespace.is_empty() {
        machine.metadata.namespace = "default".into();
    }
    let key = machine.key();
    machine
        .validate(&key.to_string())
        .map_err(|e| StoreError::Invalid { what: key.to_string(), detail: e.to_string() })?;
    Ok(machine)
}

/// The spec half of an apply: what a store keeps of an existing machine and takes from the
/// new one. Shared so every backend bumps the generation on the same changes.
pub(crate) fn merge_apply(existing: Option<&TalosMachine>, mut new: TalosMachine) -> (TalosMachine, bool) {
    match existing {
        None => {
            new.metadata.generation = 1;
            new.metadata.resource_version.clear();
            new.metadata.deletion_timestamp = None;
            new.metadata.finalizers.clear();
            new.status = MachineStatus::default();
            new.metadata.creation_timestamp = Some(super::model::now_rfc3339());
            (new, true)
        }
        Some(old) => {
            let spec_changed = old.spec != new.spec;
            let mut merged = old.clone();
            merged.spec = new.spec;
            merged.metadata.annotations = new.metadata.annotations;
            merged.metadata.labels = new.metadata.labels;
            if spec_changed {
                merged.metadata.generation += 1;
            }
            let changed = spec_changed || merged.metadata != old.metadata;
            (merged, changed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, rv: &str) -> TalosMachine {
        let mut m = crate::operator::testing::machine(name);
        m.metadata.resource_version = rv.into();
        m
    }

    #[test]
    fn a_resync_reports_changes_and_deletions_once() {
        let mut known = HashMap::new();
        let ev = resync(&mut known, vec![machine("a", "1"), machine("b", "2")]);
        assert_eq!(ev.len(), 2);
        assert!(resync(&mut known, vec![machine("a", "1"), machine("b", "2")]).is_empty());
        let ev = resync(&mut known, vec![machine("a", "3")]);
        assert_eq!(
            ev,
            vec![WatchEvent::Applied(Box::new(machine("a", "3"))), WatchEvent::Deleted(machine("b", "").key())]
        );
        assert!(resync(&mut known, vec![machine("a", "3")]).is_empty());
    }
}

//! A store in memory, with the same semantics as the others (conditional writes, finalizers,
//! watch): the engine's unit tests and the bench run on it. It keeps nothing across restarts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::{FleetAdmin, Store, StoreError, WatchEvent, admit, merge_apply};
use crate::operator::model::{FINALIZER, MachineEvent, MachineKey, MachineStatus, TalosMachine, now_rfc3339};

#[derive(Default)]
struct Inner {
    revision: u64,
    machines: BTreeMap<MachineKey, TalosMachine>,
    events: HashMap<MachineKey, Vec<MachineEvent>>,
    secrets: HashMap<(String, String), BTreeMap<String, String>>,
    config_maps: HashMap<(String, String), BTreeMap<String, String>>,
    watchers: Vec<mpsc::Sender<WatchEvent>>,
}

impl Inner {
    fn bump(&mut self, m: &mut TalosMachine) {
        self.revision += 1;
        m.metadata.resource_version = self.revision.to_string();
    }

    fn notify(&mut self, event: WatchEvent) {
        // A watcher that stopped listening is dropped; a full one loses nothing but waits in
        // its channel (capacity is generous, and the engine drains it continuously).
        self.watchers.retain(|w| match w.try_send(event.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }

    fn conditional(&mut self, key: &MachineKey, expected: &str) -> Result<&mut TalosMachine, StoreError> {
        let m = self.machines.get_mut(key).ok_or_else(|| StoreError::NotFound { key: key.clone() })?;
        if m.metadata.resource_version != expected {
            return Err(StoreError::Conflict { key: key.clone(), expected: expected.to_string() });
        }
        Ok(m)
    }

    fn write(&mut self, key: &MachineKey, mut m: TalosMachine) -> TalosMachine {
        self.bump(&mut m);
        if m.deleting() && m.metadata.finalizers.is_empty() {
            self.machines.remove(key);
            self.events.remove(key);
            self.notify(WatchEvent::Deleted(key.clone()));
        } else {
            self.machines.insert(key.clone(), m.clone());
            self.notify(WatchEvent::Applied(Box::new(m.clone())));
        }
        m
    }
}

#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind, still consistent per field.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn name(&self) -> String {
        "memory".into()
    }

    async fn list(&self) -> Result<Vec<TalosMachine>, StoreError> {
        Ok(self.lock().machines.values().cloned().collect())
    }

    async fn get(&self, key: &MachineKey) -> Result<Option<TalosMachine>, StoreError> {
        Ok(self.lock().machines.get(key).cloned())
    }

    async fn update_status(
        &self,
        key: &MachineKey,
        expected: &str,
        status: &MachineStatus,
    ) -> Result<TalosMachine, StoreError> {
        let mut inner = self.lock();
        let mut m = inner.conditional(key, expected)?.clone();
        m.status = status.clone();
        Ok(inner.write(key, m))
    }

    async fn add_finalizer(&self, key: &MachineKey, expected: &str) -> Result<TalosMachine, StoreError> {
        let mut inner = self.lock();
        let mut m = inner.conditional(key, expected)?.clone();
        if m.metadata.finalizers.iter().any(|f| f == FINALIZER) {
            return Ok(m);
        }
        m.metadata.finalizers.push(FINALIZER.into());
        Ok(inner.write(key, m))
    }

    async fn remove_finalizer(&self, key: &MachineKey, expected: &str) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let mut m = inner.conditional(key, expected)?.clone();
        m.metadata.finalizers.retain(|f| f != FINALIZER);
        inner.write(key, m);
        Ok(())
    }

    async fn record_event(&self, key: &MachineKey, event: &MachineEvent) -> Result<(), StoreError> {
        self.lock().events.entry(key.clone()).or_default().push(event.clone());
        Ok(())
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        Ok(self.lock().secrets.get(&(namespace.into(), name.into())).cloned())
    }

    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        Ok(self.lock().config_maps.get(&(namespace.into(), name.into())).cloned())
    }

    async fn watch(&self) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        let (tx, rx) = mpsc::channel(65536);
        self.lock().watchers.push(tx);
        Ok(rx)
    }
}

#[async_trait]
impl FleetAdmin for MemoryStore {
    async fn apply_machine(&self, machine: TalosMachine) -> Result<TalosMachine, StoreError> {
        let machine = admit(machine)?;
        let key = machine.key();
        let mut inner = self.lock();
        let (merged, changed) = merge_apply(inner.machines.get(&key), machine);
        if !changed {
            return Ok(merged);
        }
        Ok(inner.write(&key, merged))
    }

    async fn delete_machine(&self, key: &MachineKey) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(m) = inner.machines.get(key).cloned() else { return Ok(false) };
        if m.deleting() {
            return Ok(true);
        }
        let mut m = m;
        m.metadata.deletion_timestamp = Some(now_rfc3339());
        inner.write(key, m);
        Ok(true)
    }

    async fn put_secret(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) -> Result<(), StoreError> {
        self.lock().secrets.insert((namespace.into(), name.into()), data);
        Ok(())
    }

    async fn put_config_map(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<(), StoreError> {
        self.lock().config_maps.insert((namespace.into(), name.into()), data);
        Ok(())
    }

    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        self.lock().secrets.remove(&(namespace.into(), name.into()));
        Ok(())
    }

    async fn events(&self, key: &MachineKey) -> Result<Vec<MachineEvent>, StoreError> {
        Ok(self.lock().events.get(key).cloned().unwrap_or_default())
    }
}

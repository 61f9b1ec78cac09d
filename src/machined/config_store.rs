//! The machine configuration's one writer: it persists what an apply stores, holds what is in
//! force, and publishes both on a watch channel the configuration controller reads.
//!
//! Modes (Talos's): no-reboot stores and makes the new text active; staged only stores it (it
//! becomes active at the next boot); try makes it active without storing it and, unless another
//! apply comes first, falls back to the stored one when its timeout runs out. Only one apply
//! runs at a time; a second is refused, not queued. Callers validate first, so what reaches
//! it is already accepted. Each text is parsed once, as it comes in (applied, or read from the
//! file), and published with its parse ([`ConfigText`]): the configuration controller and
//! machined's own readers all take that one. The file is written aside and renamed, so a
//! crash leaves the old configuration or the new one, never half of either.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{OwnedMutexGuard, watch};
use tokio::task::JoinHandle;

pub use crate::controllers::config::ConfigText;
pub use crate::controllers::config::StoredConfig as ConfigSnapshot;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("reading the stored machine configuration {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("storing the machine configuration at {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

pub struct ConfigStore {
    path: PathBuf,
    tx: watch::Sender<ConfigSnapshot>,
    apply: Arc<tokio::sync::Mutex<()>>,
    rollback: Mutex<Option<JoinHandle<()>>>,
}

/// What [`ConfigStore::adopt_volume`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopted {
    /// The volume held a configuration: it is in force.
    Loaded,
    /// The volume held none: what was applied is written there.
    Written,
    /// Neither held one.
    Empty,
}

/// Held for the length of one apply.
pub struct ApplyGuard {
    _held: OwnedMutexGuard<()>,
}

impl ConfigStore {
    /// Opens the store at `path`, loading what a previous run stored there (if anything).
    pub fn open(path: PathBuf) -> Result<Arc<Self>, StoreError> {
        let persisted = match std::fs::read_to_string(&path) {
            Ok(text) => Some(ConfigText::from(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(StoreError::Read { path, source }),
        };
        let snapshot = ConfigSnapshot { active: persisted.clone(), persisted, try_until: None, pending: false };
        Ok(Arc::new(ConfigStore {
            path,
            tx: watch::channel(snapshot).0,
            apply: Arc::new(tokio::sync::Mutex::new(())),
            rollback: Mutex::new(None),
        }))
    }

    /// A store whose file is on a volume not mounted yet: until [`ConfigStore::settle`] it
    /// reports `pending`, and what is applied meanwhile is written to `path` as it is then
    /// (the tmpfs under the mount point) and written again once the volume is there.
    pub fn pending(path: PathBuf) -> Arc<Self> {
        let snapshot = ConfigSnapshot { pending: true, ..ConfigSnapshot::default() };
        Arc::new(ConfigStore {
            path,
            tx: watch::channel(snapshot).0,
            apply: Arc::new(tokio::sync::Mutex::new(())),
            rollback: Mutex::new(None),
        })
    }

    /// The volume is mounted (or there will be none): what an apply stored meanwhile is
    /// written to it; otherwise what it holds is loaded and put in force. Once only; a second
    /// call changes nothing.
    pub async fn settle(&self) -> Result<(), StoreError> {
        if !self.tx.borrow().pending {
            return Ok(());
        }
        // No apply runs while the file moves.
        let _held = self.apply.lock().await;
        let applied = self.tx.borrow().persisted.clone();
        match applied {
            Some(text) => {
                let written = self.write(&text);
                self.tx.send_modify(|s| s.pending = false);
                written
            }
            None => {
                let read = match std::fs::read_to_string(&self.path) {
                    Ok(text) => Ok(Some(ConfigText::from(text))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(source) => Err(StoreError::Read { path: self.path.clone(), source }),
                };
                let stored = read.as_ref().ok().cloned().flatten();
                self.tx.send_modify(|s| {
                    s.pending = false;
                    if s.active.is_none() {
                        s.active = stored.clone();
                    }
                    s.persisted = stored.clone();
                });
                read.map(|_| ())
            }
        }
    }

    /// The volume came after the store settled without it (STATE made once a configuration
    /// was applied, or opened late): what it holds is put in force, in place of anything
    /// applied meanwhile, as it is what the node was; when it holds nothing, what was applied
    /// meanwhile is written to it.
    pub async fn adopt_volume(&self) -> Result<Adopted, StoreError> {
        let _held = self.apply.lock().await;
        self.cancel_rollback();
        let stored = match std::fs::read_to_string(&self.path) {
            Ok(text) => Some(ConfigText::from(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(StoreError::Read { path: self.path.clone(), source }),
        };
        match stored {
            Some(text) => {
                self.tx.send_modify(|s| {
                    s.persisted = Some(text.clone());
                    s.active = Some(text);
                    s.try_until = None;
                });
                Ok(Adopted::Loaded)
            }
            None => {
                let applied = self.tx.borrow().persisted.clone();
                match applied {
                    Some(text) => self.write(&text).map(|()| Adopted::Written),
                    None => Ok(Adopted::Empty),
                }
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn snapshot(&self) -> ConfigSnapshot {
        self.tx.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<ConfigSnapshot> {
        self.tx.subscribe()
    }

    /// The right to apply, or `None` while another apply runs.
    pub fn begin_apply(&self) -> Option<ApplyGuard> {
        Arc::clone(&self.apply).try_lock_owned().ok().map(|g| ApplyGuard { _held: g })
    }

    /// Stores `text` and puts it in force. A text given as a [`ConfigText`] (a candidate
    /// parsed to be validated) is not parsed again.
    pub fn apply_now(&self, _guard: &ApplyGuard, text: impl Into<ConfigText>) -> Result<(), StoreError> {
        self.cancel_rollback();
        let text = text.into();
        self.write(&text)?;
        self.tx.send_modify(|s| {
            s.persisted = Some(text.clone());
            s.active = Some(text);
            s.try_until = None;
        });
        Ok(())
    }

    /// Stores `text` for the next boot; what is in force stays.
    pub fn apply_staged(&self, _guard: &ApplyGuard, text: impl Into<ConfigText>) -> Result<(), StoreError> {
        self.cancel_rollback();
        let text = text.into();
        self.write(&text)?;
        self.tx.send_modify(|s| {
            s.persisted = Some(text);
            // A try in force ends: what is stored is what it would fall back to anyway.
            if s.try_until.take().is_some() {
                s.active = s.persisted.clone();
            }
        });
        Ok(())
    }

    /// Puts `text` in force for `timeout` without storing it, then falls back to what is
    /// stored. Must be called inside a Tokio runtime.
    pub fn apply_try(self: &Arc<Self>, _guard: &ApplyGuard, text: impl Into<ConfigText>, timeout: Duration) {
        self.cancel_rollback();
        let text = text.into();
        let until = SystemTime::now() + timeout;
        self.tx.send_modify(|s| {
            s.active = Some(text);
            s.try_until = Some(until);
        });
        let me = Arc::clone(self);
        let task = tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            me.tx.send_modify(|s| {
                if s.try_until == Some(until) {
                    s.active = s.persisted.clone();
                    s.try_until = None;
                }
            });
        });
        *self.rollback.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// Forgets the stored configuration (a reset): the file is removed; what is in force stays
    /// until the node goes down.
    pub fn forget(&self, _guard: &ApplyGuard) -> Result<(), StoreError> {
        self.cancel_rollback();
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(StoreError::Write { path: self.path.clone(), source: e });
            }
            _ => {}
        }
        self.tx.send_modify(|s| {
            s.persisted = None;
            s.try_until = None;
        });
        Ok(())
    }

    fn cancel_rollback(&self) {
        if let Some(task) = self.rollback.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }

    fn write(&self, text: &str) -> Result<(), StoreError> {
        use std::io::Write;
        let err = |source| StoreError::Write { path: self.path.clone(), source };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let partial = self.path.with_extension("partial");
        let mut f = crate::pki::open_private(&partial).map_err(err)?;
        f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).map_err(err)?;
        std::fs::rename(&partial, &self.path).map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Arc<ConfigStore>) {
        let dir = tempfile::tempdir().unwrap();
        let s = ConfigStore::open(dir.path().join("state/config.yaml")).unwrap();
        (dir, s)
    }

    #[tokio::test]
    async fn modes_store_and_activate_as_talos() {
        let (_d, s) = store();
        assert_eq!(s.snapshot(), ConfigSnapshot::default());
        let g = s.begin_apply().unwrap();
        assert!(s.begin_apply().is_none(), "a second apply is refused while one runs");
        s.apply_now(&g, "a").unwrap();
        assert_eq!(std::fs::read_to_string(s.path()).unwrap(), "a");
        s.apply_staged(&g, "b").unwrap();
        let snap = s.snapshot();
        assert_eq!((snap.persisted.as_deref(), snap.active.as_deref()), (Some("b"), Some("a")));
        drop(g);
        // A new store over the same file is the next boot: the staged text is in force.
        let again = ConfigStore::open(s.path().to_path_buf()).unwrap();
        assert_eq!(again.snapshot().active.as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn a_pending_store_loads_or_keeps_what_is_there_once_settled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/config.yaml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();

        // Booted with a stored configuration: pending, then the stored text in force.
        std::fs::write(&path, "stored").unwrap();
        let s = ConfigStore::pending(path.clone());
        assert!(s.snapshot().pending && s.snapshot().active.is_none());
        s.settle().await.unwrap();
        let snap = s.snapshot();
        assert_eq!(
            (snap.pending, snap.persisted.as_deref(), snap.active.as_deref()),
            (false, Some("stored"), Some("stored"))
        );

        // Applied before the volume came: the applied text wins and is written again.
        let s = ConfigStore::pending(path.clone());
        let g = s.begin_apply().unwrap();
        s.apply_now(&g, "applied").unwrap();
        drop(g);
        std::fs::write(&path, "what the volume held").unwrap();
        s.settle().await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "applied");
        assert_eq!(s.snapshot().active.as_deref(), Some("applied"));

        // The volume comes after the store settled without it: empty, it gets what was
        // applied meanwhile; holding a configuration, that one is put in force.
        std::fs::remove_file(&path).unwrap();
        let s = ConfigStore::pending(path.clone());
        s.settle().await.unwrap();
        let g = s.begin_apply().unwrap();
        s.apply_now(&g, "in memory").unwrap();
        drop(g);
        std::fs::remove_file(&path).unwrap(); // the tmpfs file, hidden by the mount
        assert_eq!(s.adopt_volume().await.unwrap(), Adopted::Written);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "in memory");
        std::fs::write(&path, "on the volume").unwrap();
        assert_eq!(s.adopt_volume().await.unwrap(), Adopted::Loaded);
        let snap = s.snapshot();
        assert_eq!((snap.persisted.as_deref(), snap.active.as_deref()), (Some("on the volume"), Some("on the volume")));

        // Nothing anywhere: settled, no configuration; settling twice changes nothing.
        std::fs::remove_file(&path).unwrap();
        let s = ConfigStore::pending(path.clone());
        s.settle().await.unwrap();
        s.settle().await.unwrap();
        assert_eq!(s.snapshot(), ConfigSnapshot::default());
    }

    /// A text is parsed once, as it comes in: the text in force, the text stored, every
    /// snapshot and every subscriber share that one parse; a candidate parsed to be validated
    /// is that parse; a try falling back takes the stored text's parse again, not a new one.
    #[tokio::test(start_paused = true)]
    async fn a_text_set_is_parsed_once_for_every_reader() {
        let (_d, s) = store();
        let parse = |c: &Option<ConfigText>| Arc::clone(c.as_ref().and_then(|c| c.parsed()).unwrap());
        let g = s.begin_apply().unwrap();
        s.apply_now(&g, "version: v1alpha1\nmachine:\n  type: worker\n").unwrap();
        let rx = s.subscribe();
        let (first, second) = (s.snapshot(), s.snapshot());
        let one = parse(&first.active);
        assert!(Arc::ptr_eq(&one, &parse(&first.persisted)), "the text stored is the text in force");
        assert!(Arc::ptr_eq(&one, &parse(&second.active)), "a second reader");
        assert!(Arc::ptr_eq(&one, &parse(&rx.borrow().active)), "a subscriber");

        let candidate = ConfigText::new("version: v1alpha1\nmachine:\n  type: controlplane\n");
        let checked = Arc::clone(candidate.parsed().unwrap());
        s.apply_now(&g, candidate).unwrap();
        let stored = parse(&s.snapshot().persisted);
        assert!(Arc::ptr_eq(&checked, &stored), "the candidate's parse is the one kept");
        assert!(Arc::ptr_eq(&checked, &parse(&s.snapshot().active)));

        s.apply_try(&g, "version: v1alpha1\nmachine:\n  type: init\n", Duration::from_secs(60));
        assert!(!Arc::ptr_eq(&stored, &parse(&s.snapshot().active)), "the trial is in force");
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert!(Arc::ptr_eq(&stored, &parse(&s.snapshot().active)), "back to the stored parse");

        // Read from the file (the next boot): parsed once, for both.
        let again = ConfigStore::open(s.path().to_path_buf()).unwrap().snapshot();
        assert!(Arc::ptr_eq(&parse(&again.active), &parse(&again.persisted)));
        // A text that does not load keeps why, for each reader to report.
        s.apply_now(&g, "machine: {typo: 1}\n").unwrap();
        let bad = s.snapshot().active.unwrap();
        assert!(bad.parsed().is_none());
        assert!(bad.machine_config().unwrap_err().to_string().contains("machine.typo"));
    }

    #[tokio::test(start_paused = true)]
    async fn try_falls_back_unless_replaced() {
        let (_d, s) = store();
        let g = s.begin_apply().unwrap();
        s.apply_now(&g, "stored").unwrap();
        s.apply_try(&g, "trial", Duration::from_secs(60));
        assert_eq!(s.snapshot().active.as_deref(), Some("trial"));
        assert_eq!(std::fs::read_to_string(s.path()).unwrap(), "stored", "a try is not stored");
        let mut rx = s.subscribe();
        rx.borrow_and_update();
        tokio::time::sleep(Duration::from_secs(61)).await;
        rx.changed().await.unwrap();
        let snap = s.snapshot();
        assert_eq!((snap.active.as_deref(), snap.try_until), (Some("stored"), None));

        s.apply_try(&g, "trial2", Duration::from_secs(60));
        s.apply_now(&g, "final").unwrap();
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(s.snapshot().active.as_deref(), Some("final"), "a later apply cancels the fallback");
    }
}

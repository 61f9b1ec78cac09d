//! The standalone operator's store: one SQLite database in the fleet directory
//! (`DIR/fleet.db`), shared by `operator run` and the `operator get|apply|delete|events`
//! commands, which are separate processes (SQLite's locking makes that safe; WAL lets readers
//! go on while one writes).
//!
//! Machines are kept as their JSON with a resourceVersion taken from one revision counter that
//! every write bumps inside its transaction, so a conditional write (`BEGIN IMMEDIATE`, compare,
//! write) is atomic against every other process. The watch polls that counter and, when it
//! moved, lists again and reports the difference: another process's change is seen within
//! one poll period.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::mpsc;

use super::{FleetAdmin, Store, StoreError, WatchEvent, admit, merge_apply, resync};
use crate::operator::model::{FINALIZER, MachineEvent, MachineKey, MachineStatus, TalosMachine, now_rfc3339};

/// The database's file name inside the fleet directory.
pub const FILE_NAME: &str = "fleet.db";
/// How many events are kept per machine (the oldest go first).
const EVENTS_KEPT: i64 = 200;
/// How often the watch looks at the revision counter, unless told otherwise.
pub const DEFAULT_WATCH_PERIOD: Duration = Duration::from_millis(500);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS revision (id INTEGER PRIMARY KEY CHECK (id = 0), value INTEGER NOT NULL);
INSERT OR IGNORE INTO revision (id, value) VALUES (0, 0);
CREATE TABLE IF NOT EXISTS machines (
    namespace TEXT NOT NULL, name TEXT NOT NULL, rv INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (namespace, name));
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (kind, namespace, name));
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_machine ON events (namespace, name, id);
";

pub struct SqliteStore {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
    watch_period: Duration,
}

impl SqliteStore {
    /// Opens (creating if needed) the fleet database in `dir`.
    pub fn open_dir(dir: &Path) -> Result<SqliteStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Backend {
            store: format!("fleet directory {}", dir.display()),
            detail: format!("creating it: {e}"),
        })?;
        SqliteStore::open(&dir.join(FILE_NAME))
    }

    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let err = |e: rusqlite::Error| StoreError::Backend {
            store: format!("sqlite {}", path.display()),
            detail: e.to_string(),
        };
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
        conn.execute_batch(SCHEMA).map_err(err)?;
        // The fleet holds secrets bundles: owner only.
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        Ok(SqliteStore {
            path: path.to_path_buf(),
            conn: Arc::new(Mutex::new(conn)),
            watch_period: DEFAULT_WATCH_PERIOD,
        })
    }

    /// How often the watch looks for changes made by other processes.
    pub fn with_watch_period(mut self, period: Duration) -> SqliteStore {
        self.watch_period = period;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn backend(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Backend { store: format!("sqlite {}", self.path.display()), detail: e.to_string() }
    }

    /// Runs `f` on the connection off the async threads.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection, &dyn Fn(rusqlite::Error) -> StoreError) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let err = move |e: rusqlite::Error| StoreError::Backend {
                store: format!("sqlite {}", path.display()),
                detail: e.to_string(),
            };
            let mut conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut conn, &err)
        })
        .await
        .map_err(|e| self.backend(format!("database task failed: {e}")))?
    }
}

fn decode(body: &str, key: &MachineKey, rv: i64) -> Result<TalosMachine, StoreError> {
    let mut m: TalosMachine = serde_json::from_str(body)
        .map_err(|e| StoreError::Invalid { what: key.to_string(), detail: format!("stored machine: {e}") })?;
    m.metadata.resource_version = rv.to_string();
    Ok(m)
}

fn encode(m: &TalosMachine) -> Result<String, StoreError> {
    serde_json::to_string(m).map_err(|e| StoreError::Invalid { what: m.key().to_string(), detail: e.to_string() })
}

fn read(
    conn: &Connection,
    key: &MachineKey,
    err: &dyn Fn(rusqlite::Error) -> StoreError,
) -> Result<Option<TalosMachine>, StoreError> {
    let row: Option<(i64, String)> = conn
        .query_row(
            "SELECT rv, body FROM machines WHERE namespace = ?1 AND name = ?2",
            params![key.namespace, key.name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(err)?;
    row.map(|(rv, body)| decode(&body, key, rv)).transpose()
}

/// Writes `m` at the next revision (or removes it, when deleting without finalizers).
fn write(
    tx: &rusqlite::Transaction<'_>,
    mut m: TalosMachine,
    err: &dyn Fn(rusqlite::Error) -> StoreError,
) -> Result<TalosMachine, StoreError> {
    tx.execute("UPDATE revision SET value = value + 1 WHERE id = 0", []).map_err(err)?;
    let rev: i64 = tx.query_row("SELECT value FROM revision WHERE id = 0", [], |r| r.get(0)).map_err(err)?;
    m.metadata.resource_version = rev.to_string();
    let key = m.key();
    if m.deleting() && m.metadata.finalizers.is_empty() {
        tx.execute("DELETE FROM machines WHERE namespace = ?1 AND name = ?2", params![key.namespace, key.name])
            .map_err(err)?;
        tx.execute("DELETE FROM events WHERE namespace = ?1 AND name = ?2", params![key.namespace, key.name])
            .map_err(err)?;
    } else {
        tx.execute(
            "INSERT INTO machines (namespace, name, rv, body) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (namespace, name) DO UPDATE SET rv = excluded.rv, body = excluded.body",
            params![key.namespace, key.name, rev, encode(&m)?],
        )
        .map_err(err)?;
    }
    Ok(m)
}

/// Reads the machine, checks it is still at `expected`, changes it with `f` and writes it,
/// in one immediate transaction.
fn conditional(
    conn: &mut Connection,
    key: &MachineKey,
    expected: &str,
    err: &dyn Fn(rusqlite::Error) -> StoreError,
    f: impl FnOnce(&mut TalosMachine) -> bool,
) -> Result<TalosMachine, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
    let mut m = read(&tx, key, err)?.ok_or_else(|| StoreError::NotFound { key: key.clone() })?;
    if m.metadata.resource_version != expected {
        return Err(StoreError::Conflict { key: key.clone(), expected: expected.to_string() });
    }
    if !f(&mut m) {
        return Ok(m);
    }
    let m = write(&tx, m, err)?;
    tx.commit().map_err(err)?;
    Ok(m)
}

fn object(
    conn: &Connection,
    kind: &str,
    namespace: &str,
    name: &str,
    err: &dyn Fn(rusqlite::Error) -> StoreError,
) -> Result<Option<BTreeMap<String, String>>, StoreError> {
    let body: Option<String> = conn
        .query_row(
            "SELECT body FROM objects WHERE kind = ?1 AND namespace = ?2 AND name = ?3",
            params![kind, namespace, name],
            |r| r.get(0),
        )
        .optional()
        .map_err(err)?;
    body.map(|b| {
        serde_json::from_str(&b)
            .map_err(|e| StoreError::Invalid { what: format!("{kind} {namespace}/{name}"), detail: e.to_string() })
    })
    .transpose()
}

fn list_all(conn: &Connection, err: &dyn Fn(rusqlite::Error) -> StoreError) -> Result<Vec<TalosMachine>, StoreError> {
    let mut stmt =
        conn.prepare("SELECT namespace, name, rv, body FROM machines ORDER BY namespace, name").map_err(err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, String>(3)?))
        })
        .map_err(err)?;
    let mut out = Vec::new();
    for row in rows {
        let (ns, name, rv, body) = row.map_err(err)?;
        out.push(decode(&body, &MachineKey::new(ns, name), rv)?);
    }
    Ok(out)
}

#[async_trait]
impl Store for SqliteStore {
    fn name(&self) -> String {
        format!("sqlite {}", self.path.display())
    }

    async fn list(&self) -> Result<Vec<TalosMachine>, StoreError> {
        self.with(|conn, err| list_all(conn, err)).await
    }

    async fn get(&self, key: &MachineKey) -> Result<Option<TalosMachine>, StoreError> {
        let key = key.clone();
        self.with(move |conn, err| read(conn, &key, err)).await
    }

    async fn update_status(
        &self,
        key: &MachineKey,
        expected: &str,
        status: &MachineStatus,
    ) -> Result<TalosMachine, StoreError> {
        let (key, expected, status) = (key.clone(), expected.to_string(), status.clone());
        self.with(move |conn, err| {
            conditional(conn, &key, &expected, err, |m| {
                m.status = status;
                true
            })
        })
        .await
    }

    async fn add_finalizer(&self, key: &MachineKey, expected: &str) -> Result<TalosMachine, StoreError> {
        let (key, expected) = (key.clone(), expected.to_string());
        self.with(move |conn, err| {
            conditional(conn, &key, &expected, err, |m| {
                if m.metadata.finalizers.iter().any(|f| f == FINALIZER) {
                    return false;
                }
                m.metadata.finalizers.push(FINALIZER.into());
                true
            })
        })
        .await
    }

    async fn remove_finalizer(&self, key: &MachineKey, expected: &str) -> Result<(), StoreError> {
        let (key, expected) = (key.clone(), expected.to_string());
        self.with(move |conn, err| {
            conditional(conn, &key, &expected, err, |m| {
                m.metadata.finalizers.retain(|f| f != FINALIZER);
                true
            })
            .map(|_| ())
        })
        .await
    }

    async fn record_event(&self, key: &MachineKey, event: &MachineEvent) -> Result<(), StoreError> {
        let key = key.clone();
        let body = serde_json::to_string(event).map_err(|e| self.backend(e))?;
        self.with(move |conn, err| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
            tx.execute(
                "INSERT INTO events (namespace, name, body) VALUES (?1, ?2, ?3)",
                params![key.namespace, key.name, body],
            )
            .map_err(err)?;
            tx.execute(
                "DELETE FROM events WHERE namespace = ?1 AND name = ?2 AND id NOT IN
                 (SELECT id FROM events WHERE namespace = ?1 AND name = ?2 ORDER BY id DESC LIMIT ?3)",
                params![key.namespace, key.name, EVENTS_KEPT],
            )
            .map_err(err)?;
            tx.commit().map_err(err)
        })
        .await
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        let (ns, name) = (namespace.to_string(), name.to_string());
        self.with(move |conn, err| object(conn, "Secret", &ns, &name, err)).await
    }

    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        let (ns, name) = (namespace.to_string(), name.to_string());
        self.with(move |conn, err| object(conn, "ConfigMap", &ns, &name, err)).await
    }

    async fn watch(&self) -> Result<mpsc::Receiver<WatchEvent>, StoreError> {
        let (tx, rx) = mpsc::channel(4096);
        let conn = self.conn.clone();
        let period = self.watch_period;
        let first: (i64, Vec<TalosMachine>) = self
            .with(|conn, err| {
                let rev = conn.query_row("SELECT value FROM revision WHERE id = 0", [], |r| r.get(0)).map_err(err)?;
                Ok((rev, list_all(conn, err)?))
            })
            .await?;
        let mut known = HashMap::new();
        resync(&mut known, first.1);
        let path = self.path.clone();
        tokio::spawn(async move {
            let mut last = first.0;
            loop {
                tokio::time::sleep(period).await;
                if tx.is_closed() {
                    return;
                }
                let conn = conn.clone();
                let path = path.clone();
                let seen = tokio::task::spawn_blocking(move || {
                    let err = |e: rusqlite::Error| StoreError::Backend {
                        store: format!("sqlite {}", path.display()),
                        detail: e.to_string(),
                    };
                    let conn = conn.lock().unwrap_or_else(|p| p.into_inner());
                    let rev: i64 =
                        conn.query_row("SELECT value FROM revision WHERE id = 0", [], |r| r.get(0)).map_err(err)?;
                    if rev == last {
                        return Ok(None);
                    }
                    Ok::<_, StoreError>(Some((rev, list_all(&conn, &err)?)))
                })
                .await;
                match seen {
                    Ok(Ok(Some((rev, machines)))) => {
                        last = rev;
                        for event in resync(&mut known, machines) {
                            if tx.send(event).await.is_err() {
                                return;
                            }
                        }
                    }
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => tracing::warn!("fleet watch: {e}"),
                    Err(e) => tracing::warn!("fleet watch: the database task failed: {e}"),
                }
            }
        });
        Ok(rx)
    }
}

#[async_trait]
impl FleetAdmin for SqliteStore {
    async fn apply_machine(&self, machine: TalosMachine) -> Result<TalosMachine, StoreError> {
        let machine = admit(machine)?;
        let key = machine.key();
        self.with(move |conn, err| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
            let existing = read(&tx, &key, err)?;
            let (merged, changed) = merge_apply(existing.as_ref(), machine);
            if !changed {
                return Ok(merged);
            }
            let m = write(&tx, merged, err)?;
            tx.commit().map_err(err)?;
            Ok(m)
        })
        .await
    }

    async fn delete_machine(&self, key: &MachineKey) -> Result<bool, StoreError> {
        let key = key.clone();
        self.with(move |conn, err| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
            let Some(mut m) = read(&tx, &key, err)? else { return Ok(false) };
            if m.deleting() {
                return Ok(true);
            }
            m.metadata.deletion_timestamp = Some(now_rfc3339());
            write(&tx, m, err)?;
            tx.commit().map_err(err)?;
            Ok(true)
        })
        .await
    }

    async fn put_secret(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) -> Result<(), StoreError> {
        self.put_object("Secret", namespace, name, data).await
    }

    async fn put_config_map(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<(), StoreError> {
        self.put_object("ConfigMap", namespace, name, data).await
    }

    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        let (ns, name) = (namespace.to_string(), name.to_string());
        self.with(move |conn, err| {
            conn.execute(
                "DELETE FROM objects WHERE kind = 'Secret' AND namespace = ?1 AND name = ?2",
                params![ns, name],
            )
            .map_err(err)
            .map(|_| ())
        })
        .await
    }

    async fn events(&self, key: &MachineKey) -> Result<Vec<MachineEvent>, StoreError> {
        let key = key.clone();
        self.with(move |conn, err| {
            let mut stmt =
                conn.prepare("SELECT body FROM events WHERE namespace = ?1 AND name = ?2 ORDER BY id").map_err(err)?;
            let rows = stmt.query_map(params![key.namespace, key.name], |r| r.get::<_, String>(0)).map_err(err)?;
            let mut out = Vec::new();
            for row in rows {
                let body = row.map_err(err)?;
                out.push(
                    serde_json::from_str(&body)
                        .map_err(|e| StoreError::Invalid { what: format!("event of {key}"), detail: e.to_string() })?,
                );
            }
            Ok(out)
        })
        .await
    }
}

impl SqliteStore {
    async fn put_object(
        &self,
        kind: &'static str,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<(), StoreError> {
        let (ns, name) = (namespace.to_string(), name.to_string());
        let body = serde_json::to_string(&data).map_err(|e| self.backend(e))?;
        self.with(move |conn, err| {
            conn.execute(
                "INSERT INTO objects (kind, namespace, name, body) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (kind, namespace, name) DO UPDATE SET body = excluded.body",
                params![kind, ns, name, body],
            )
            .map_err(err)
            .map(|_| ())
        })
        .await
    }
}

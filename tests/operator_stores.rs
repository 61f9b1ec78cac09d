//! The store conformance suite (`talosbox::operator::conformance`) against every backend:
//! memory, SQLite (two handles on one file, as `operator run` and `operator apply` are two
//! processes). The Kubernetes backend runs the same suite in tests/operator_kube.rs, against
//! the in-process fake API server.

use std::sync::Arc;
use std::time::Duration;

use talosbox::operator::conformance;
use talosbox::operator::store::memory::MemoryStore;
use talosbox::operator::store::sqlite::SqliteStore;

#[tokio::test]
async fn memory_store_conforms() {
    let store = Arc::new(MemoryStore::new());
    conformance::run(store.clone(), store.as_ref(), "mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_conforms_across_two_handles() {
    let dir = tempfile::tempdir().unwrap();
    let engine_side = Arc::new(SqliteStore::open_dir(dir.path()).unwrap().with_watch_period(Duration::from_millis(20)));
    // The user's side is another connection to the same file, as another process would have.
    let user_side = SqliteStore::open_dir(dir.path()).unwrap();
    conformance::run(engine_side.clone(), &user_side, "sql").await;
    // And the database is private: it holds secrets bundles.
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(engine_side.path()).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
}

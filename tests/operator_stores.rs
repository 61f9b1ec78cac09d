//! The store conformance suite (`talosbox::operator::conformance`) against every backend:
//! memory, SQLite (two handles on one file, as `operator run` and `operator apply` are two
//! processes). The Kubernetes backend runs the same suite in tests/operator_kube.rs, against
//! the in-process fake API server. Last, the gRPC node client against simulated nodes that
//! answer as Talos does.

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

/// The gRPC node client against simulated nodes that answer as Talos does (the diff as text
/// in mode_details only), over mutual TLS with a certificate the operator mints itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_client_reads_talos_replies_over_mutual_tls() {
    use talosbox::operator::node::{GrpcNodes, NodeClient, NodeTarget};
    use talosbox::operator::simnode::SimNodes;
    let bundle = talosbox::pki::SecretsBundle::from_yaml(talosbox::operator::testing::bundle_yaml()).unwrap();
    let sims = SimNodes::start(2, &bundle, "v1.9.0").await.unwrap();
    let store = Arc::new(MemoryStore::new());
    talosbox::operator::testing::seed_fleet(store.as_ref(), "default").await;
    let creds = talosbox::operator::render::CredentialSource::new();
    let m = talosbox::operator::testing::machine("x");
    let credentials = creds.resolve(store.as_ref(), &m).await.unwrap();
    assert_eq!(creds.resolve(store.as_ref(), &m).await.unwrap().id, credentials.id, "minted once, then reused");
    let nodes = GrpcNodes::new(Duration::from_secs(5));
    let target = |i: usize| NodeTarget { endpoint: sims.addrs[i].to_string(), credentials: credentials.clone() };
    sims.set(1, "v1.9.1", "--- a\n+++ b\n-  hostname: a\n+  hostname: b");
    assert_eq!(nodes.version(&target(0)).await.unwrap(), "v1.9.0");
    assert_eq!(nodes.dry_run(&target(0), "x").await.unwrap(), "", "\"No changes.\" is no diff");
    assert_eq!(nodes.version(&target(1)).await.unwrap(), "v1.9.1");
    assert_eq!(nodes.dry_run(&target(1), "x").await.unwrap(), "--- a\n+++ b\n-  hostname: a\n+  hostname: b");
    let e = nodes.apply(&target(1), "x").await.unwrap_err().to_string();
    assert!(e.contains(&sims.addrs[1].to_string()) && e.contains("ApplyConfiguration"), "{e}");
    // A client without the fleet's certificate is refused by the node.
    let other = talosbox::pki::SecretsBundle::generate(std::time::SystemTime::now()).unwrap();
    let wrong = talosbox::operator::render::NodeCredentials {
        tls: talosbox::pki::tls::client_config(
            &[bundle.certs.os.crt_pem.as_str()],
            Some(
                &other
                    .client_certificate(
                        &talosbox::pki::RoleSet::new(),
                        Duration::from_secs(60),
                        std::time::SystemTime::now(),
                    )
                    .unwrap(),
            ),
        )
        .unwrap(),
        id: "wrong".into(),
    };
    let refused = nodes.version(&NodeTarget { endpoint: sims.addrs[0].to_string(), credentials: wrong }).await;
    assert!(refused.is_err(), "a certificate of another CA is refused");
}

//! Every server stream ends when its client does: thousands of Watches of a resource nobody
//! changes, and hundreds of Logs -f, Events and Dmesg -f, opened through apid and dropped,
//! leave machined's resident memory where it was (within 2 MiB, after settling). Before the
//! streams were raced against their client, each abandoned watch stayed in machined for ever.
//! Addresses 127.0.9.x.

use std::future::Future;
use std::time::{Duration, Instant};

use talosbox::pki::Role;
use talosbox::proto::cosi::resource::{WatchRequest, state_client::StateClient};
use talosbox::proto::machine::{
    DmesgRequest, EventsRequest, LogsRequest, machine_service_client::MachineServiceClient,
};
use tonic::transport::Channel;

use crate::harness::{self, Cluster, Maintenance, Node};

/// How far machined's RSS may move over a flood of closed streams.
const SLACK_KIB: u64 = 2048;
/// Streams open at once (below any per-connection stream limit).
const BATCH: usize = 100;

/// A Watch of a resource that does not change while the test runs.
fn quiet_watch() -> WatchRequest {
    WatchRequest {
        namespace: String::new(),
        r#type: "Versions.runtime.talos.dev".into(),
        id: None,
        options: None,
        api_version: 1,
    }
}

/// Opens `total` streams with `open`, `BATCH` at a time, each until its response headers came
/// (so machined serves it), then drops them all.
async fn flood<F, Fut>(total: usize, open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Box<dyn Send>, tonic::Status>>,
{
    let mut opened = 0;
    while opened < total {
        let n = BATCH.min(total - opened);
        let streams = futures::future::join_all((0..n).map(|_| open())).await;
        for s in &streams {
            if let Err(status) = s {
                panic!("stream {opened}+ refused: {status:?}");
            }
        }
        opened += n;
        drop(streams);
    }
}

/// machined's RSS once it stops moving (two readings 1 s apart within 64 KiB, at most 15 s).
fn settled_rss(node: &Node) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = node.rss_kib();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = node.rss_kib();
        if now.abs_diff(last) <= 64 || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Floods machined with `total` closed streams of `what` (after a warm-up of a tenth, so the
/// allocator's arenas and the connections exist before the first figure) and checks its RSS.
fn check_flat<F, Fut>(rt: &tokio::runtime::Runtime, node: &Node, what: &str, total: usize, open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Box<dyn Send>, tonic::Status>>,
{
    rt.block_on(flood((total / 10).max(BATCH), &open));
    let before = settled_rss(node);
    let started = Instant::now();
    rt.block_on(flood(total, &open));
    let took = started.elapsed();
    let after = settled_rss(node);
    println!(
        "{what}: {total} streams opened and closed in {:.1} s; machined RSS {before} KiB before, {after} KiB after ({:+} KiB)",
        took.as_secs_f64(),
        after as i64 - before as i64
    );
    assert!(
        after <= before + SLACK_KIB,
        "{what}: machined grew from {before} to {after} KiB over {total} closed streams"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn boxed<T: Send + 'static>(r: Result<tonic::Response<T>, tonic::Status>) -> Result<Box<dyn Send>, tonic::Status> {
    r.map(|s| Box::new(s.into_inner()) as Box<dyn Send>)
}

#[test]
fn closed_streams_of_a_reader_leave_machined_flat() {
    let cluster = Cluster::up("streams", "127.0.9.1", &[]);
    // apid comes back with the configured certificates after the apply.
    cluster.ctl.eventually(&["-n", "127.0.9.1", "version"], Duration::from_secs(60));
    let rt = runtime();
    let reader = cluster.client(&[Role::Reader]);
    let channel: Channel = rt.block_on(harness::channel("127.0.9.1", 50000, &cluster.ca_pem, Some(&reader)));

    let state = StateClient::new(channel.clone());
    check_flat(&rt, &cluster.cp, "Watch (reader)", 10_000, || {
        let mut c = state.clone();
        async move { boxed(c.watch(quiet_watch()).await) }
    });

    let machine = MachineServiceClient::new(channel);
    check_flat(&rt, &cluster.cp, "Logs -f machined (reader)", 500, || {
        let mut c = machine.clone();
        async move {
            let request = LogsRequest {
                namespace: "system".into(),
                id: "machined".into(),
                follow: true,
                tail_lines: 0,
                ..Default::default()
            };
            boxed(c.logs(request).await)
        }
    });
    check_flat(&rt, &cluster.cp, "Events tail 0 (reader)", 500, || {
        let mut c = machine.clone();
        async move { boxed(c.events(EventsRequest { tail_events: 0, ..Default::default() }).await) }
    });
    check_flat(&rt, &cluster.cp, "Dmesg -f (reader)", 500, || {
        let mut c = machine.clone();
        async move { boxed(c.dmesg(DmesgRequest { follow: true, tail: true }).await) }
    });

    // The node still answers.
    cluster.ctl.ok(&["-n", "127.0.9.1", "version"]);
}

#[test]
fn closed_watches_without_credentials_leave_a_maintenance_node_flat() {
    let m = Maintenance::up("streams-maintenance", "127.0.9.2");
    let rt = runtime();
    let channel: Channel = rt.block_on(async {
        let tls = talosbox::pki::tls::insecure_client_config(None).unwrap();
        talosbox::proto::conn::dial("127.0.9.2", 50000, tls).await.unwrap()
    });
    let state = StateClient::new(channel);
    check_flat(&rt, &m.node, "Watch (maintenance, no certificate)", 10_000, || {
        let mut c = state.clone();
        async move { boxed(c.watch(quiet_watch()).await) }
    });
    m.ctl.ok(&["-e", "127.0.9.2", "version", "--insecure", "--short"]);
}

//! apid's proxy under abuse by the least privileged callers: a silent node routed to, a huge
//! fan-out, and a flood of held-open streams through the control plane must not stop routing
//! for anyone else, nor grow apid's memory.

use std::time::{Duration, Instant};

use talosbox::pki::{self, CertAndKey, Role};
use talosbox::proto::common::Data;
use talosbox::proto::cosi::resource::{WatchOptions, WatchRequest, WatchResponse};
use talosbox::proto::machine::VersionResponse;
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use crate::harness::{Cluster, Maintenance, channel, peak_rss_kib, rss_kib};

/// The proxy's dial timeout (`api::proxy::DIAL_TIMEOUT`).
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap()
}

fn request<M>(message: M, metadata: &[(&'static str, &str)]) -> tonic::Request<M> {
    let mut request = tonic::Request::new(message);
    for (k, v) in metadata {
        request.metadata_mut().append(*k, MetadataValue::try_from(*v).unwrap());
    }
    request
}

/// `Version` on `channel` with `metadata`.
async fn version(channel: Channel, metadata: &[(&'static str, &str)]) -> Result<VersionResponse, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let codec = tonic_prost::ProstCodec::<(), VersionResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/machine.MachineService/Version");
    grpc.unary(request((), metadata), path, codec).await.map(|r| r.into_inner())
}

/// `Version`, which must answer within `within`.
async fn version_within(channel: Channel, metadata: &[(&'static str, &str)], within: Duration) -> VersionResponse {
    let start = Instant::now();
    let r = tokio::time::timeout(within, version(channel, metadata)).await;
    let r = r.unwrap_or_else(|_| panic!("Version with {metadata:?} unanswered after {within:?}"));
    let r = r.unwrap_or_else(|e| panic!("Version with {metadata:?}: {e}"));
    println!("Version with {metadata:?} answered in {:?}", start.elapsed());
    r
}

#[test]
fn a_silent_node_delays_only_its_own_callers() {
    let cluster = Cluster::up("proxy-silent", "127.0.6.1", &["127.0.6.2"]);
    // Accepts TCP and never says a word.
    let silent = std::net::TcpListener::bind("127.0.6.99:50000").unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
        }
    });
    let reader = cluster.client(&[Role::Reader]);
    let admin = cluster.client(&[Role::Admin]);
    runtime().block_on(async {
        let as_reader = channel("127.0.6.1", 50000, &cluster.ca_pem, Some(&reader)).await;
        let as_admin = channel("127.0.6.1", 50000, &cluster.ca_pem, Some(&admin)).await;
        let start = Instant::now();
        let hung = tokio::spawn(version(as_reader.clone(), &[("node", "127.0.6.99")]));
        tokio::time::sleep(Duration::from_millis(300)).await;
        version_within(as_admin.clone(), &[("node", "127.0.6.2")], Duration::from_secs(2)).await;
        let merged =
            version_within(as_admin.clone(), &[("nodes", "127.0.6.1,127.0.6.2")], Duration::from_secs(2)).await;
        assert_eq!(merged.messages.len(), 2, "{merged:?}");
        // A reader routed elsewhere is not behind the silent dial either.
        version_within(as_reader.clone(), &[("node", "127.0.6.2")], Duration::from_secs(2)).await;
        assert!(!hung.is_finished(), "the call to the silent node ended before the others were tried");

        let status = tokio::time::timeout(DIAL_TIMEOUT + Duration::from_secs(3), hung)
            .await
            .expect("the call to the silent node outlived the dial timeout")
            .unwrap()
            .expect_err("a silent node answered");
        println!("silent node: {:?} after {:?}: {}", status.code(), start.elapsed(), status.message());
        assert!(matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded), "{status:?}");
        assert!(status.message().contains("127.0.6.99"), "{status:?}");
        assert!(status.message().contains("timed out"), "{status:?}");
    });
}

/// Client-streams `count` messages of `size` bytes to `Version` with `metadata`.
async fn stream_of(
    channel: Channel,
    count: usize,
    size: usize,
    metadata: &[(&'static str, &str)],
) -> Result<VersionResponse, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(64 << 20);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let messages =
        futures::stream::iter((0..count).map(move |_| Data { bytes: vec![7u8; size], ..Default::default() }));
    let codec = tonic_prost::ProstCodec::<Data, VersionResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/machine.MachineService/Version");
    grpc.client_streaming(request(messages, metadata), path, codec).await.map(|r| r.into_inner())
}

/// 10 × 30 MiB and 40 × 1 MiB with `nodes`: each refused, apid's memory flat.
async fn huge_fan_outs_are_refused(channel: Channel, nodes: &'static str, apid: u32) {
    let (rss, peak) = (rss_kib(apid), peak_rss_kib(apid));
    let mut outcomes = Vec::new();
    for (count, size) in [(10, 30 << 20), (40, 1 << 20)] {
        let start = Instant::now();
        let r =
            tokio::time::timeout(Duration::from_secs(60), stream_of(channel.clone(), count, size, &[("nodes", nodes)]))
                .await
                .expect("a huge fan-out was neither answered nor refused");
        println!(
            "{count} × {size} bytes to nodes={nodes}: in {:?}: {:?}",
            start.elapsed(),
            r.as_ref().map_err(|s| (s.code(), s.message())).map(|_| "accepted")
        );
        outcomes.push(r);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss_after, peak_after) = (rss_kib(apid), peak_rss_kib(apid));
    println!("apid RSS {rss} → {rss_after} KiB, peak {peak} → {peak_after} KiB");
    for r in outcomes {
        let status = r.expect_err("a huge fan-out was accepted");
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    }
    assert!(rss_after < rss + 8 * 1024, "apid kept {} KiB", rss_after.saturating_sub(rss));
    assert!(peak_after < peak + 16 * 1024, "apid's peak grew by {} KiB", peak_after - peak);
    // A fan-out within the limits still works.
    let ok = stream_of(channel, 1, 16, &[("nodes", nodes)]).await;
    // Version takes one message: whatever machined says of the call, apid let it through.
    if let Err(s) = &ok {
        assert_ne!(s.code(), Code::ResourceExhausted, "{s:?}");
    }
}

#[test]
fn a_huge_fan_out_is_refused_and_apid_stays_flat() {
    let cluster = Cluster::up("proxy-fanout", "127.0.6.3", &["127.0.6.4"]);
    let reader = cluster.client(&[Role::Reader]);
    let apid = cluster.cp.service_pid("apid");
    runtime().block_on(async {
        let as_reader = channel("127.0.6.3", 50000, &cluster.ca_pem, Some(&reader)).await;
        version_within(as_reader.clone(), &[("nodes", "127.0.6.3,127.0.6.4")], Duration::from_secs(5)).await;
        huge_fan_outs_are_refused(as_reader, "127.0.6.3,127.0.6.4", apid).await;
    });
}

#[test]
fn a_huge_fan_out_without_credentials_is_refused_in_maintenance() {
    let node = Maintenance::up("proxy-m", "127.0.6.10");
    let apid = node.node.service_pid("apid");
    runtime().block_on(async {
        let tls = pki::tls::insecure_client_config(None).unwrap();
        let nobody = talosbox::client::conn::dial("127.0.6.10", 50000, tls).await.unwrap();
        huge_fan_outs_are_refused(nobody, "127.0.6.10", apid).await;
    });
}

/// A `Watch` of MachineStatuses held open: `Ok` once its stream started, or the refusal.
async fn watch(channel: Channel, node: &'static str) -> Result<tonic::Streaming<WatchResponse>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let message = WatchRequest {
        namespace: "runtime".into(),
        r#type: "MachineStatuses.runtime.talos.dev".into(),
        id: None,
        options: Some(WatchOptions { bootstrap_contents: true, ..Default::default() }),
        api_version: 1,
    };
    let codec = tonic_prost::ProstCodec::<WatchRequest, WatchResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/cosi.resource.State/Watch");
    grpc.server_streaming(request(message, &[("node", node)]), path, codec).await.map(|r| r.into_inner())
}

#[test]
fn a_readers_watches_leave_room_for_an_admin_and_another_reader() {
    let cluster = Cluster::up("proxy-watch", "127.0.6.5", &["127.0.6.6"]);
    let reader: CertAndKey = cluster.client(&[Role::Reader]);
    let other_reader: CertAndKey = cluster.client(&[Role::Reader]);
    let admin = cluster.client(&[Role::Admin]);
    runtime().block_on(async {
        // Three connections of 100 streams each, so apid's own per-connection limit is not
        // what stops them.
        let mut readers = Vec::new();
        for _ in 0..3 {
            readers.push(channel("127.0.6.5", 50000, &cluster.ca_pem, Some(&reader)).await);
        }
        let watches: Vec<_> = (0..300).map(|i| tokio::spawn(watch(readers[i % 3].clone(), "127.0.6.6"))).collect();
        tokio::time::sleep(Duration::from_secs(3)).await;

        let as_admin = channel("127.0.6.5", 50000, &cluster.ca_pem, Some(&admin)).await;
        version_within(as_admin, &[("node", "127.0.6.6")], Duration::from_secs(2)).await;
        // Another reader (a certificate of its own, the same role set) is not crowded out
        // either: its watch starts at once, on the pool's connections.
        let second = channel("127.0.6.5", 50000, &cluster.ca_pem, Some(&other_reader)).await;
        let started = Instant::now();
        let theirs = tokio::time::timeout(Duration::from_secs(2), watch(second, "127.0.6.6")).await;
        assert!(matches!(theirs, Ok(Ok(_))), "another reader's watch: {theirs:?}");
        println!("another reader's watch started in {:?}", started.elapsed());

        let (mut open, mut refused, mut pending) = (Vec::new(), 0, 0);
        for w in watches {
            if !w.is_finished() {
                pending += 1;
                w.abort();
                continue;
            }
            match w.await.unwrap() {
                Ok(stream) => open.push(stream),
                Err(s) => {
                    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
                    assert!(s.message().contains("127.0.6.6"), "{s:?}");
                    refused += 1;
                }
            }
        }
        println!("300 reader watches via the control plane: {} open, {refused} refused, {pending} waiting", open.len());
        assert_eq!(pending, 0, "watches neither started nor refused");
        assert_eq!(open.len(), talosbox::api::proxy::CALLS_PER_CALLER, "one caller's calls in flight to a node");
        assert_eq!(refused, 300 - open.len());
        // The streams are live: each got its first event.
        let first = tokio::time::timeout(Duration::from_secs(10), open[0].message()).await;
        assert!(matches!(first, Ok(Ok(Some(_)))), "{first:?}");
    });
}

//! The door under abuse, for minutes: legitimate calls from three roles (Version direct and
//! proxied, Get, a short Watch, Logs) on a control plane and a worker in container mode (real
//! processes, real mTLS on loopback), while floods run beside them:
//!
//! - idle connections that never speak, held and reopened from three source addresses;
//! - a reader routing calls to a node that accepts TCP and never answers;
//! - a reader opening State Watches and dropping them at once;
//! - a reader holding 300 Watches through the control plane on the worker;
//! - fan-outs with a 30 MiB message each;
//! - a YAML alias bomb as an admin's dry-run apply;
//! - CSRs with the cluster token asking trustd for the control plane's address.
//!
//! The reader floods use a reader certificate of their own, as another caller would.
//!
//! It prints p50/p99 of the legitimate calls, their errors, what each flood got, and the RSS of
//! the control plane's machined, apid and trustd before the floods and after them. Nothing here
//! asserts; the figures are the result (`ROW` lines for `tests/bench`). SOAK_SECS sets the length
//! (default 600).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use talosbox::pki::{CertAndKey, Role, RoleSet, SecretsBundle};
use talosbox::proto::cosi::resource::{GetRequest, GetResponse, WatchOptions, WatchRequest, WatchResponse};
use talosbox::proto::machine::{ApplyConfigurationRequest, ApplyConfigurationResponse};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

#[path = "common/cluster.rs"]
mod cluster;

use cluster::{find, memory};

const CP: &str = "127.0.13.1";
const WORKER: &str = "127.0.13.2";
/// Accepts TCP on the API port and never says a word.
const SILENT: &str = "127.0.13.99";
/// Where the idle-connection flood comes from.
const IDLE_SOURCES: [&str; 3] = ["127.0.13.50", "127.0.13.51", "127.0.13.52"];
/// Idle connections the flood tries to keep open.
const IDLE_TARGET: usize = 600;
/// How long a legitimate call may take before it counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `VmRSS` of `pid`, KiB.
fn rss(pid: u32) -> u64 {
    memory(pid).0
}

/// Latencies and failures of one kind of legitimate call.
#[derive(Default)]
struct Series {
    took_us: Vec<f64>,
    errors: Vec<String>,
}

type Record = Arc<std::sync::Mutex<BTreeMap<&'static str, Series>>>;

fn note(record: &Record, kind: &'static str, took: Duration, result: Result<(), String>) {
    let mut r = record.lock().unwrap_or_else(|e| e.into_inner());
    let s = r.entry(kind).or_default();
    match result {
        Ok(()) => s.took_us.push(took.as_secs_f64() * 1e6),
        Err(e) => s.errors.push(e),
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

async fn dial(ca: &str, identity: Option<&CertAndKey>) -> Result<Channel, String> {
    let tls = talosbox::pki::tls::client_config(&[ca], identity).map_err(|e| e.to_string())?;
    talosbox::client::conn::dial(CP, 50000, tls).await.map_err(|e| e.to_string())
}

fn with_node<M>(message: M, key: &'static str, node: Option<&str>) -> tonic::Request<M> {
    let mut request = tonic::Request::new(message);
    if let Some(n) = node.and_then(|n| MetadataValue::try_from(n).ok()) {
        request.metadata_mut().insert(key, n);
    }
    request
}

async fn unary<M: prost::Message + 'static, R: prost::Message + Default + 'static>(
    channel: &Channel,
    path: &'static str,
    request: tonic::Request<M>,
) -> Result<R, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone()).max_encoding_message_size(64 << 20);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let codec = tonic_prost::ProstCodec::<M, R>::default();
    grpc.unary(request, http::uri::PathAndQuery::from_static(path), codec).await.map(|r| r.into_inner())
}

async fn watch(channel: &Channel, node: Option<&str>) -> Result<tonic::Streaming<WatchResponse>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let request = WatchRequest {
        namespace: "runtime".into(),
        r#type: "MachineStatuses.runtime.talos.dev".into(),
        id: Some("machine".into()),
        options: Some(WatchOptions::default()),
        api_version: 1,
    };
    let codec = tonic_prost::ProstCodec::<WatchRequest, WatchResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/cosi.resource.State/Watch");
    grpc.server_streaming(with_node(request, "node", node), path, codec).await.map(|r| r.into_inner())
}

fn machine_status() -> GetRequest {
    GetRequest {
        namespace: "runtime".into(),
        r#type: "MachineStatuses.runtime.talos.dev".into(),
        id: "machine".into(),
        ..Default::default()
    }
}

/// One legitimate call of `kind`.
async fn legitimate(channel: &Channel, kind: &'static str) -> Result<(), String> {
    use talosbox::proto::common::Data;
    use talosbox::proto::machine::LogsRequest;
    let status = |s: tonic::Status| format!("{:?}: {}", s.code(), s.message());
    match kind {
        "version" => unary::<(), talosbox::proto::machine::VersionResponse>(
            channel,
            "/machine.MachineService/Version",
            tonic::Request::new(()),
        )
        .await
        .map(drop)
        .map_err(status),
        "version via cp" => unary::<(), talosbox::proto::machine::VersionResponse>(
            channel,
            "/machine.MachineService/Version",
            with_node((), "node", Some(WORKER)),
        )
        .await
        .map(drop)
        .map_err(status),
        "get" => unary::<_, GetResponse>(channel, "/cosi.resource.State/Get", tonic::Request::new(machine_status()))
            .await
            .map(drop)
            .map_err(status),
        "watch" => {
            let mut stream = watch(channel, None).await.map_err(status)?;
            stream.message().await.map_err(status)?.ok_or("the watch ended at once")?;
            Ok(())
        }
        "logs" => {
            let mut grpc = tonic::client::Grpc::new(channel.clone());
            grpc.ready().await.map_err(|e| e.to_string())?;
            let request = LogsRequest {
                namespace: "system".into(),
                id: "machined".into(),
                driver: 0,
                follow: false,
                tail_lines: 5,
            };
            let codec = tonic_prost::ProstCodec::<LogsRequest, Data>::default();
            let path = http::uri::PathAndQuery::from_static("/machine.MachineService/Logs");
            let mut stream =
                grpc.server_streaming(tonic::Request::new(request), path, codec).await.map_err(status)?.into_inner();
            while stream.message().await.map_err(status)?.is_some() {}
            Ok(())
        }
        other => Err(format!("no call {other}")),
    }
}

/// Counts of what a flood got, by outcome.
#[derive(Default)]
struct Tally(std::sync::Mutex<BTreeMap<String, u64>>);

impl Tally {
    fn add(&self, outcome: impl Into<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()).entry(outcome.into()).or_default() += 1;
    }
    fn show(&self) -> String {
        let t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        t.iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", ")
    }
}

fn outcome<R>(r: &Result<R, tonic::Status>) -> String {
    match r {
        Ok(_) => "answered".into(),
        Err(s) => format!("{:?}", s.code()),
    }
}

fn alias_bomb() -> Vec<u8> {
    let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    let mut prev = 'a';
    for name in "bcdefghij".chars() {
        text.push_str(&format!("{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        prev = name;
    }
    text.into_bytes()
}

fn raise_nofile() {
    if let Ok(limit) = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum.ok_or(()) {
        let _ = rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit { current: Some(limit), maximum: Some(limit) },
        );
    }
}

fn main() {
    let secs: u64 = std::env::var("SOAK_SECS").ok().and_then(|c| c.parse().ok()).unwrap_or(600);
    raise_nofile();
    eprintln!("door bench: starting a control plane at {CP} and a worker at {WORKER}");
    let (dir, nodes) = cluster::up("door", CP, WORKER);

    let bundle =
        SecretsBundle::from_yaml(&std::fs::read_to_string(dir.join("secrets.yaml")).expect("bundle")).expect("bundle");
    let cert = |role: Role| {
        bundle.client_certificate(&RoleSet::from([role]), Duration::from_secs(7200), SystemTime::now()).expect("cert")
    };
    let (admin, operator, reader) = (cert(Role::Admin), cert(Role::Operator), cert(Role::Reader));
    // The reader floods come from a reader certificate of their own: another caller, whom the
    // door limits apart from the legitimate reader.
    let flooder = cert(Role::Reader);
    let ca = bundle.certs.os.crt_pem.clone();
    let token = bundle.trustd_info.token.clone();
    let marker = dir.join("cp").display().to_string();
    let pids: Vec<(&str, u32)> = ["machined", "apid", "trustd"]
        .into_iter()
        .map(|n| (n, find(n, &marker).unwrap_or_else(|| panic!("no {n} of the control plane"))))
        .collect();

    // The silent node: accepts, keeps the socket, never writes.
    let silent = std::net::TcpListener::bind((SILENT, 50000)).expect("silent listener");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
            if held.len() > 2000 {
                held.remove(0);
            }
        }
    });

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async move {
        // Warm every path, then the figures before the floods.
        let record: Record = Default::default();
        eprintln!("door bench: the cluster is up; warming every call");
        for identity in [&admin, &operator, &reader] {
            let channel = dial(&ca, Some(identity)).await.expect("dial");
            for kind in ["version", "version via cp", "get", "watch", "logs"] {
                match tokio::time::timeout(CALL_TIMEOUT, legitimate(&channel, kind)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => eprintln!("door bench: warming {kind}: {e}"),
                    Err(_) => eprintln!("door bench: warming {kind}: no answer within {CALL_TIMEOUT:?}"),
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before: Vec<u64> = pids.iter().map(|(_, p)| rss(*p)).collect();

        let stop = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut tasks = Vec::new();

        // Legitimate load: each role one call every 50 ms, round the kinds.
        for (role, identity) in [("admin", admin.clone()), ("operator", operator.clone()), ("reader", reader.clone())] {
            let (ca, record, stop) = (ca.clone(), record.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut channel = None;
                let kinds = ["version", "version via cp", "get", "watch", "logs"];
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let kind = kinds[i % kinds.len()];
                    i += 1;
                    let t = Instant::now();
                    let result = async {
                        if channel.is_none() {
                            channel = Some(dial(&ca, Some(&identity)).await?);
                        }
                        let Some(c) = channel.as_ref() else { return Err("no channel".to_string()) };
                        match tokio::time::timeout(CALL_TIMEOUT, legitimate(c, kind)).await {
                            Ok(r) => r,
                            Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
                        }
                    }
                    .await;
                    if result.is_err() {
                        channel = None;
                    }
                    note(&record, kind, t.elapsed(), result.map_err(|e| format!("{role}: {e}")));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }));
        }

        let idle = Arc::new(Tally::default());
        let silent = Arc::new(Tally::default());
        let closed_watches = Arc::new(AtomicU64::new(0));
        let held = Arc::new(Tally::default());
        let fanout = Arc::new(Tally::default());
        let bomb = Arc::new(Tally::default());
        let csr = Arc::new(Tally::default());

        // Idle connections: keep IDLE_TARGET open; count the ones the node closes.
        {
            let (idle, stop) = (idle.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut open: Vec<tokio::net::TcpStream> = Vec::new();
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let mut still = Vec::with_capacity(open.len());
                    for s in open.drain(..) {
                        let mut byte = [0u8; 1];
                        match s.try_read(&mut byte) {
                            Ok(0) => idle.add("closed by the node"),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => still.push(s),
                            _ => idle.add("closed by the node"),
                        }
                    }
                    open = still;
                    while open.len() < IDLE_TARGET && !stop.load(Ordering::Relaxed) {
                        let source: std::net::IpAddr = IDLE_SOURCES[n % IDLE_SOURCES.len()].parse().expect("address");
                        n += 1;
                        let Ok(socket) = tokio::net::TcpSocket::new_v4() else { break };
                        if socket.bind((source, 0).into()).is_err() {
                            break;
                        }
                        let to: std::net::SocketAddr = (CP.parse::<std::net::IpAddr>().expect("address"), 50000).into();
                        match tokio::time::timeout(Duration::from_secs(2), socket.connect(to)).await {
                            Ok(Ok(s)) => {
                                idle.add("opened");
                                open.push(s);
                            }
                            _ => {
                                idle.add("refused");
                                break;
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }));
        }
        // A reader routing to the silent node, one call at a time.
        {
            let (ca, reader, silent, stop) = (ca.clone(), flooder.clone(), silent.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let Ok(channel) = dial(&ca, Some(&reader)).await else { return silent.add("no channel") };
                while !stop.load(Ordering::Relaxed) {
                    let call = unary::<(), talosbox::proto::machine::VersionResponse>(
                        &channel,
                        "/machine.MachineService/Version",
                        with_node((), "node", Some(SILENT)),
                    );
                    match tokio::time::timeout(Duration::from_secs(30), call).await {
                        Ok(r) => silent.add(outcome(&r)),
                        Err(_) => silent.add("no answer within 30 s"),
                    }
                }
            }));
        }
        // A reader opening watches and dropping them.
        {
            let (ca, reader, closed, stop) = (ca.clone(), flooder.clone(), closed_watches.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let Ok(channel) = dial(&ca, Some(&reader)).await else { return };
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(Ok(mut stream)) =
                        tokio::time::timeout(Duration::from_secs(5), watch(&channel, None)).await
                    {
                        let _ = tokio::time::timeout(Duration::from_secs(5), stream.message()).await;
                        closed.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }));
        }
        // A reader holding 300 watches on the worker through the control plane, opened side by
        // side: all of them have their answer (a stream or a refusal) within 5 s.
        let mut holding = Vec::new();
        if let Ok(channel) = dial(&ca, Some(&flooder)).await {
            let opens = (0..300).map(|_| tokio::time::timeout(Duration::from_secs(5), watch(&channel, Some(WORKER))));
            for opened in futures::future::join_all(opens).await {
                match opened {
                    Ok(Ok(s)) => {
                        held.add("held");
                        holding.push(s);
                    }
                    Ok(Err(s)) => held.add(format!("{:?}", s.code())),
                    Err(_) => held.add("no answer within 5 s"),
                }
            }
        }
        eprintln!("door bench: watches on the worker: {}", held.show());
        // Fan-outs of a 30 MiB message, one every 2 s.
        {
            let (ca, reader, fanout, stop) = (ca.clone(), flooder.clone(), fanout.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let Ok(channel) = dial(&ca, Some(&reader)).await else { return fanout.add("no channel") };
                let big = talosbox::proto::common::Data { metadata: None, bytes: vec![7u8; 30 << 20] };
                while !stop.load(Ordering::Relaxed) {
                    let request = with_node(big.clone(), "nodes", Some(&format!("{CP},{WORKER}")));
                    let r = tokio::time::timeout(
                        Duration::from_secs(30),
                        unary::<_, talosbox::proto::machine::VersionResponse>(
                            &channel,
                            "/machine.MachineService/Version",
                            request,
                        ),
                    )
                    .await;
                    match r {
                        Ok(r) => fanout.add(outcome(&r)),
                        Err(_) => fanout.add("no answer within 30 s"),
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }));
        }
        // The alias bomb as an admin's dry run, every 10 s.
        {
            let (ca, admin, bomb, stop) = (ca.clone(), admin.clone(), bomb.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let Ok(channel) = dial(&ca, Some(&admin)).await else { return bomb.add("no channel") };
                while !stop.load(Ordering::Relaxed) {
                    let request =
                        ApplyConfigurationRequest { data: alias_bomb(), dry_run: true, mode: 1, ..Default::default() };
                    let r = unary::<_, ApplyConfigurationResponse>(
                        &channel,
                        "/machine.MachineService/ApplyConfiguration",
                        tonic::Request::new(request),
                    )
                    .await;
                    bomb.add(outcome(&r));
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
            }));
        }
        // CSRs for the control plane's address, every 3 s.
        {
            let (ca, token, csr, stop) = (ca.clone(), token.clone(), csr.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                use talosbox::proto::securityapi::{CertificateRequest, CertificateResponse};
                while !stop.load(Ordering::Relaxed) {
                    let r = async {
                        let request =
                            talosbox::pki::generate_csr("soak", &[CP.parse().map_err(|_| "address")?], &[], None)
                                .map_err(|e| e.to_string())?;
                        let tls = talosbox::pki::tls::client_config(&[&ca], None).map_err(|e| e.to_string())?;
                        let channel = talosbox::client::conn::dial(CP, 50001, tls).await.map_err(|e| e.to_string())?;
                        let mut message = tonic::Request::new(CertificateRequest { csr: request.csr_pem.into_bytes() });
                        let token = MetadataValue::try_from(token.as_str()).map_err(|e| e.to_string())?;
                        message.metadata_mut().insert("token", token);
                        let r = unary::<_, CertificateResponse>(
                            &channel,
                            "/securityapi.SecurityService/Certificate",
                            message,
                        )
                        .await;
                        Ok::<_, String>(outcome(&r))
                    }
                    .await;
                    csr.add(r.unwrap_or_else(|e| format!("failed: {e}")));
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
            }));
        }

        eprintln!("door bench: floods and legitimate load running for {secs} s");
        let mut next = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if Instant::now() >= next {
                next += Duration::from_secs(60);
                let now: Vec<String> = pids.iter().map(|(n, p)| format!("{n} {} KiB", rss(*p))).collect();
                eprintln!(
                    "door bench: {} s left; {}",
                    deadline.saturating_duration_since(Instant::now()).as_secs(),
                    now.join(", ")
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        drop(holding);
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(35), t).await;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after: Vec<u64> = pids.iter().map(|(_, p)| rss(*p)).collect();

        println!("legitimate calls over {secs} s beside the floods (admin, operator, reader):");
        let record = record.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = Vec::new();
        let mut errors = 0;
        for (kind, s) in record.iter() {
            let mut took = s.took_us.clone();
            took.sort_by(f64::total_cmp);
            all.extend_from_slice(&took);
            errors += s.errors.len();
            println!(
                "  {kind:<15} {:6} calls   p50 {:8.0} µs   p99 {:8.0} µs   {} errors",
                took.len(),
                quantile(&took, 0.5),
                quantile(&took, 0.99),
                s.errors.len()
            );
            for e in s.errors.iter().take(3) {
                println!("      {e}");
            }
        }
        all.sort_by(f64::total_cmp);
        let (p50, p99) = (quantile(&all, 0.5), quantile(&all, 0.99));
        println!("  all             {:6} calls   p50 {p50:8.0} µs   p99 {p99:8.0} µs   {errors} errors", all.len());
        println!("floods:");
        println!("  idle connections        {}", idle.show());
        println!("  routing to a silent node {}", silent.show());
        println!("  watches opened and dropped: {}", closed_watches.load(Ordering::Relaxed));
        println!("  watches held on the worker: {}", held.show());
        println!("  30 MiB fan-outs         {}", fanout.show());
        println!("  alias bomb applies      {}", bomb.show());
        println!("  CSRs for another node   {}", csr.show());
        println!("control plane RSS (KiB), before the floods -> after:");
        let mut growth = 0i64;
        for (((name, _), b), a) in pids.iter().zip(&before).zip(&after) {
            growth += *a as i64 - *b as i64;
            println!("  {name:<9} {b:7} -> {a:7}   ({:+})", *a as i64 - *b as i64);
        }
        let ok = errors == 0 && p99 < 50_000.0 && growth < 5 * 1024;
        println!(
            "target (no legitimate call fails, p99 < 50 ms, RSS growth < 5 MiB): {}",
            if ok { "met" } else { "missed" }
        );
        println!("ROW\tsoak: legitimate calls p99 beside the floods (p50 as anchor)\t{p99:.0}\t{p50:.0}\tµs");
        println!("ROW\tsoak: legitimate calls failed\t{errors}\t-\tcalls");
        println!("ROW\tsoak: machined+apid+trustd RSS growth\t{growth}\t-\tKiB");
    });
    drop(nodes);
    let _ = std::fs::remove_dir_all(dir);
}

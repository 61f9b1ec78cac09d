//! API figures on two container-mode nodes (a control plane and a worker, real processes, real
//! mTLS on loopback): Version latency p50/p99 and sequential rate called directly on the
//! control plane, and proxied through it to the worker, side by side; then the idle RSS and PSS
//! of machined, apid and trustd on the control plane.
//!
//! `cargo bench --bench api` prints them, then `ROW<TAB>name<TAB>value<TAB>anchor<TAB>unit`
//! lines for `tests/bench`; nothing here asserts. CALLS sets the calls per series (default 2000).

use std::time::{Duration, Instant, SystemTime};

use talosbox::pki::{Role, RoleSet, SecretsBundle};
use talosbox::proto::machine::machine_service_client::MachineServiceClient;
use tonic::metadata::MetadataValue;

#[path = "common/cluster.rs"]
mod cluster;

use cluster::{find, memory};

const CP: &str = "127.0.6.1";
const WORKER: &str = "127.0.6.2";

/// `(p50, p99, calls per second)` of `calls` sequential Version calls, in microseconds.
async fn series(
    client: &mut MachineServiceClient<tonic::transport::Channel>,
    node: Option<&str>,
    calls: usize,
) -> (f64, f64, f64) {
    let mut took = Vec::with_capacity(calls);
    let start = Instant::now();
    for _ in 0..calls {
        let mut request = tonic::Request::new(());
        if let Some(n) = node {
            request
                .metadata_mut()
                .insert("node", MetadataValue::try_from(n).unwrap_or(MetadataValue::from_static("x")));
        }
        let t = Instant::now();
        if let Err(e) = client.version(request).await {
            eprintln!("api bench: Version failed: {e}");
            std::process::exit(1);
        }
        took.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let rate = calls as f64 / start.elapsed().as_secs_f64();
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99), rate)
}

fn main() {
    let calls: usize = std::env::var("CALLS").ok().and_then(|c| c.parse().ok()).unwrap_or(2000);
    let (dir, nodes) = cluster::up("api", CP, WORKER);

    let bundle =
        SecretsBundle::from_yaml(&std::fs::read_to_string(dir.join("secrets.yaml")).expect("bundle")).expect("bundle");
    let admin = bundle.client_certificate(&RoleSet::from([Role::Admin]), Duration::from_secs(3600), SystemTime::now());
    let admin = admin.expect("client certificate");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (direct, proxied) = rt.block_on(async {
        let tls = talosbox::pki::tls::client_config(&[&bundle.certs.os.crt_pem], Some(&admin)).expect("tls");
        let channel = talosbox::client::conn::dial(CP, 50000, tls).await.expect("dial");
        let mut client = MachineServiceClient::new(channel);
        // Warm both paths (connections, the proxy's upstream).
        series(&mut client, None, 50).await;
        series(&mut client, Some(WORKER), 50).await;
        let direct = series(&mut client, None, calls).await;
        let proxied = series(&mut client, Some(WORKER), calls).await;
        (direct, proxied)
    });
    println!("Version over mTLS, {calls} sequential calls each:");
    println!(
        "  direct (control plane)         p50 {:7.0} µs   p99 {:7.0} µs   {:6.0} calls/s",
        direct.0, direct.1, direct.2
    );
    println!(
        "  proxied (cp apid -> worker)    p50 {:7.0} µs   p99 {:7.0} µs   {:6.0} calls/s",
        proxied.0, proxied.1, proxied.2
    );

    // Idle: a few seconds after the last call.
    std::thread::sleep(Duration::from_secs(3));
    let marker = dir.join("cp").display().to_string();
    let mut total = (0, 0, 0);
    println!("idle memory on the control plane (KiB):");
    for name in ["machined", "apid", "trustd"] {
        match find(name, &marker) {
            Some(pid) => {
                let (rss, pss, private) = memory(pid);
                total = (total.0 + rss, total.1 + pss, total.2 + private);
                println!("  {name:<9} RSS {rss:6}   PSS {pss:6}   private {private:6}");
                println!("ROW\t{name} idle RSS (private as anchor)\t{rss}\t{private}\tKiB");
            }
            None => println!("  {name}: not found"),
        }
    }
    println!("  together  RSS {:6}   PSS {:6}   private {:6}", total.0, total.1, total.2);
    println!("ROW\tVersion p50, direct vs proxied\t{:.0}\t{:.0}\tµs", proxied.0, direct.0);
    println!("ROW\tVersion p99, direct vs proxied\t{:.0}\t{:.0}\tµs", proxied.1, direct.1);
    println!("ROW\tVersion calls/s, direct vs proxied\t{:.0}\t{:.0}\tcalls/s", proxied.2, direct.2);
    println!("ROW\tmachined+apid+trustd idle RSS (PSS as anchor)\t{}\t{}\tKiB", total.0, total.1);
    println!("ROW\tmachined+apid+trustd idle private memory\t{}\t-\tKiB", total.2);
    drop(nodes);
    let _ = std::fs::remove_dir_all(dir);
}

//! `operator`: the fleet drift operator's command line. `run` starts the engine on a fleet
//! directory (SQLite, the default) or, built with the `kubernetes` feature, on a Kubernetes
//! cluster; `apply|create|delete|get|describe|events` change and show the fleet kubectl-style;
//! `crd` prints the custom resource definition. Thin: the engine, stores and node client are
//! in `crate::operator`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use super::talosctl::output::Table;
use crate::operator::model::{MachineEvent, MachineKey, TalosMachine};
use crate::operator::store::sqlite::SqliteStore;
use crate::operator::store::{FleetAdmin, Store};
use crate::operator::{Engine, OperatorConfig};

#[derive(Debug, Parser)]
#[command(name = "operator", about = "Keeps a fleet of Talos(box) nodes at their desired configuration and version", version = crate::version::VERSION)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct FleetArgs {
    /// The fleet directory (its database is DIR/fleet.db).
    #[arg(long, default_value = "fleet")]
    fleet: PathBuf,
    /// The namespace (the standalone fleet has `default` unless told otherwise).
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator: watch the fleet, poll the nodes, repair drift.
    Run(RunArgs),
    /// Create or update machines, Secrets and ConfigMaps from YAML files (kubectl's shapes).
    Apply {
        #[command(flatten)]
        fleet: FleetArgs,
        /// A file of one or more YAML documents; `-` is standard input.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
    },
    /// Create a Secret or ConfigMap from files, as `kubectl create secret generic --from-file`.
    Create {
        #[command(subcommand)]
        what: CreateCommand,
    },
    /// Delete a machine (its deletionPolicy is carried out by the running operator).
    Delete {
        #[command(flatten)]
        fleet: FleetArgs,
        #[arg(value_parser = ["talosmachine", "talosmachines", "tm"])]
        kind: String,
        name: String,
    },
    /// List machines (or one) with their state, version and endpoint.
    Get {
        #[command(flatten)]
        fleet: FleetArgs,
        #[arg(value_parser = ["talosmachine", "talosmachines", "tm"])]
        kind: String,
        name: Option<String>,
        /// table, yaml or json.
        #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "yaml", "json"])]
        output: String,
    },
    /// Show one machine: spec, status, conditions and its events.
    Describe {
        #[command(flatten)]
        fleet: FleetArgs,
        #[arg(value_parser = ["talosmachine", "talosmachines", "tm"])]
        kind: String,
        name: String,
    },
    /// List the events of the fleet's machines (or one), oldest first.
    Events {
        #[command(flatten)]
        fleet: FleetArgs,
        name: Option<String>,
        #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "yaml", "json"])]
        output: String,
    },
    /// Print the TalosMachine CustomResourceDefinition (for `kubectl apply -f -`).
    Crd,
}

#[derive(Debug, Subcommand)]
enum CreateCommand {
    /// A Secret: `create secret NAME --from-file [KEY=]PATH ...`.
    Secret {
        #[command(flatten)]
        fleet: FleetArgs,
        name: String,
        #[arg(long = "from-file", required = true)]
        from_file: Vec<String>,
    },
    /// A ConfigMap: `create configmap NAME --from-file [KEY=]PATH ...`.
    #[command(alias = "cm")]
    Configmap {
        #[command(flatten)]
        fleet: FleetArgs,
        name: String,
        #[arg(long = "from-file", required = true)]
        from_file: Vec<String>,
    },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The fleet directory (standalone store).
    #[arg(long, default_value = "fleet")]
    fleet: PathBuf,
    /// How often each Available machine's node is polled (> 0; e.g. 3m, 30s, 500ms).
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    poll_interval: Duration,
    /// How often an Installing or Upgrading machine's health is checked.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    health_recheck: Duration,
    /// First wait before a machine not yet watchable is looked at again (doubles up to 10m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    readiness_retry: Duration,
    /// How long one call to a node may take.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    node_timeout: Duration,
    /// Where /metrics and /healthz are served.
    #[arg(long, default_value = "127.0.0.1:9090")]
    metrics_address: SocketAddr,
    /// Reconciles running at once.
    #[arg(long, default_value_t = 10)]
    max_concurrent_reconciles: usize,
    /// Use the Kubernetes API (in-cluster config or $KUBECONFIG) instead of a fleet directory.
    #[arg(long)]
    kubernetes: bool,
    /// With --kubernetes: the namespace of the leader-election Lease.
    #[arg(long, default_value = "talosbox-system")]
    lease_namespace: String,
    /// With --kubernetes: this replica's identity in the Lease (default: the host name).
    #[arg(long)]
    identity: Option<String>,
}

/// Go-style durations: `500ms`, `30s`, `3m`, `1h`, `1.5s`. Negative ones are refused here, zero
/// ones when the operator's configuration is checked.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("{s:?} is negative: a duration must be greater than zero"));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration like 500ms, 30s, 3m or 1h"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("operator: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("operator: {e}");
            ExitCode::FAILURE
        }
    }
}

fn open(fleet: &FleetArgs) -> Result<SqliteStore, String> {
    SqliteStore::open_dir(&fleet.fleet).map_err(|e| e.to_string())
}

async fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Run(a) => run_operator(a).await,
        Command::Crd => {
            print!("{}", crate::operator::crd::CRD_YAML);
            Ok(())
        }
        Command::Apply { fleet, files } => {
            let store = open(&fleet)?;
            for file in files {
                let text = if file == Path::new("-") {
                    std::io::read_to_string(std::io::stdin()).map_err(|e| format!("reading standard input: {e}"))?
                } else {
                    std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?
                };
                apply_documents(&store, &fleet.namespace, &text, &file.display().to_string()).await?;
            }
            Ok(())
        }
        Command::Create { what } => {
            let (kind, fleet, name, from) = match what {
                CreateCommand::Secret { fleet, name, from_file } => ("secret", fleet, name, from_file),
                CreateCommand::Configmap { fleet, name, from_file } => ("configmap", fleet, name, from_file),
            };
            let mut data = BTreeMap::new();
            for f in from {
                let (key, path) = match f.split_once('=') {
                    Some((k, p)) => (k.to_string(), PathBuf::from(p)),
                    None => {
                        let p = PathBuf::from(&f);
                        let k = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                        (k, p)
                    }
                };
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("--from-file {f}: reading {}: {e}", path.display()))?;
                data.insert(key, text);
            }
            let store = open(&fleet)?;
            match kind {
                "secret" => store.put_secret(&fleet.namespace, &name, data).await,
                _ => store.put_config_map(&fleet.namespace, &name, data).await,
            }
            .map_err(|e| e.to_string())?;
            println!("{kind}/{name} created");
            Ok(())
        }
        Command::Delete { fleet, name, .. } => {
            let store = open(&fleet)?;
            let key = MachineKey::new(fleet.namespace.clone(), name.clone());
            if store.delete_machine(&key).await.map_err(|e| e.to_string())? {
                println!("talosmachine/{name} deleted");
                Ok(())
            } else {
                Err(format!("talosmachine {name:?} not found in namespace {:?}", fleet.namespace))
            }
        }
        Command::Get { fleet, name, output, .. } => {
            let store = open(&fleet)?;
            let machines = select(&store, &fleet.namespace, name.as_deref()).await?;
            match output.as_str() {
                "yaml" => print!("{}", to_yaml(&machines)?),
                "json" => println!("{}", to_json(&machines)?),
                _ => print!("{}", machine_table(&machines)),
            }
            Ok(())
        }
        Command::Describe { fleet, name, .. } => {
            let store = open(&fleet)?;
            let machines = select(&store, &fleet.namespace, Some(&name)).await?;
            for m in machines {
                let events = store.events(&m.key()).await.map_err(|e| e.to_string())?;
                print!("{}", describe(&m, &events));
            }
            Ok(())
        }
        Command::Events { fleet, name, output } => {
            let store = open(&fleet)?;
            let machines = select(&store, &fleet.namespace, name.as_deref()).await?;
            let mut all = Vec::new();
            for m in &machines {
                for e in store.events(&m.key()).await.map_err(|e| e.to_string())? {
                    all.push((m.metadata.name.clone(), e));
                }
            }
            all.sort_by(|a, b| a.1.time.cmp(&b.1.time));
            match output.as_str() {
                "yaml" | "json" => {
                    let list: Vec<serde_json::Value> = all
                        .iter()
                        .map(|(n, e)| serde_json::json!({"object": format!("talosmachine/{n}"), "type": e.type_, "reason": e.reason, "action": e.action, "note": e.note, "time": e.time}))
                        .collect();
                    if output == "json" {
                        println!("{}", serde_json::to_string_pretty(&list).map_err(|e| e.to_string())?);
                    } else {
                        print!("{}", serde_saphyr::to_string(&list).map_err(|e| e.to_string())?);
                    }
                }
                _ => {
                    let mut t = Table::new(["TIME", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
                    for (n, e) in &all {
                        let first = e.note.lines().next().unwrap_or("");
                        t.row([
                            e.time.clone(),
                            e.type_.clone(),
                            e.reason.clone(),
                            format!("talosmachine/{n}"),
                            first.to_string(),
                        ]);
                    }
                    print!("{}", t.render());
                }
            }
            Ok(())
        }
    }
}

async fn select(store: &SqliteStore, namespace: &str, name: Option<&str>) -> Result<Vec<TalosMachine>, String> {
    match name {
        Some(n) => match store.get(&MachineKey::new(namespace, n)).await.map_err(|e| e.to_string())? {
            Some(m) => Ok(vec![m]),
            None => Err(format!("talosmachine {n:?} not found in namespace {namespace:?}")),
        },
        None => Ok(store
            .list()
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|m| m.metadata.namespace == namespace)
            .collect()),
    }
}

/// Applies each YAML document of `text`: TalosMachine, Secret (`stringData`, or base64
/// `data`) or ConfigMap (`data`).
async fn apply_documents(store: &SqliteStore, namespace: &str, text: &str, what: &str) -> Result<(), String> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).map_err(|e| format!("{what}: {e}"))?;
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let here = format!("{what}: document {}", i + 1);
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let ns = doc["metadata"]["namespace"].as_str().filter(|s| !s.is_empty()).unwrap_or(namespace).to_string();
        match kind.as_str() {
            crate::operator::model::KIND => {
                let body = serde_json::to_string(&doc).map_err(|e| format!("{here}: {e}"))?;
                let mut m = TalosMachine::from_yaml(&body, &here).map_err(|e| e.to_string())?;
                m.metadata.namespace = ns;
                let before = store.get(&m.key()).await.map_err(|e| e.to_string())?;
                let after = store.apply_machine(m).await.map_err(|e| format!("{here}: {e}"))?;
                let verb = match before {
                    None => "created",
                    Some(b) if b.metadata.resource_version == after.metadata.resource_version => "unchanged",
                    Some(_) => "configured",
                };
                println!("talosmachine/{} {verb}", after.metadata.name);
            }
            "Secret" | "ConfigMap" => {
                if name.is_empty() {
                    return Err(format!("{here}: metadata.name: required"));
                }
                let mut data = BTreeMap::new();
                if kind == "Secret" {
                    for (k, v) in doc["data"].as_object().into_iter().flatten() {
                        use base64::Engine as _;
                        let raw = base64::engine::general_purpose::STANDARD
                            .decode(v.as_str().unwrap_or_default())
                            .map_err(|e| format!("{here}: data.{k}: not base64: {e}"))?;
                        let text = String::from_utf8(raw).map_err(|_| format!("{here}: data.{k}: not UTF-8 text"))?;
                        data.insert(k.clone(), text);
                    }
                    for (k, v) in doc["stringData"].as_object().into_iter().flatten() {
                        data.insert(
                            k.clone(),
                            v.as_str().ok_or_else(|| format!("{here}: stringData.{k}: not a string"))?.to_string(),
                        );
                    }
                    store.put_secret(&ns, &name, data).await.map_err(|e| e.to_string())?;
                    println!("secret/{name} configured");
                } else {
                    for (k, v) in doc["data"].as_object().into_iter().flatten() {
                        data.insert(
                            k.clone(),
                            v.as_str().ok_or_else(|| format!("{here}: data.{k}: not a string"))?.to_string(),
                        );
                    }
                    store.put_config_map(&ns, &name, data).await.map_err(|e| e.to_string())?;
                    println!("configmap/{name} configured");
                }
            }
            other => {
                return Err(format!("{here}: kind: {other:?} is not TalosMachine, Secret or ConfigMap"));
            }
        }
    }
    Ok(())
}

fn to_yaml(machines: &[TalosMachine]) -> Result<String, String> {
    let docs: Result<Vec<String>, String> =
        machines.iter().map(|m| serde_saphyr::to_string(m).map_err(|e| e.to_string())).collect();
    Ok(docs?.join("---\n"))
}

fn to_json(machines: &[TalosMachine]) -> Result<String, String> {
    let value = if machines.len() == 1 {
        serde_json::to_value(&machines[0])
    } else {
        serde_json::to_value(serde_json::json!({"apiVersion": "v1", "kind": "List", "items": machines}))
    };
    value.and_then(|v| serde_json::to_string_pretty(&v)).map_err(|e| e.to_string())
}

/// `kubectl get tm`'s columns.
fn machine_table(machines: &[TalosMachine]) -> String {
    let mut t = Table::new(["NAME", "STATE", "VERSION", "ENDPOINT", "AGE"]);
    for m in machines {
        t.row([
            m.metadata.name.clone(),
            m.state().map(|s| s.to_string()).unwrap_or_default(),
            m.spec.version.clone(),
            m.spec.endpoint.clone(),
            m.metadata.creation_timestamp.as_deref().map(age).unwrap_or_default(),
        ]);
    }
    t.render()
}

/// Age as kubectl prints it (`45s`, `12m`, `3h`, `5d`), from an RFC 3339 time.
fn age(created: &str) -> String {
    let Some(then) = parse_rfc3339(created) else { return "<unknown>".into() };
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let s = (now - then).max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn parse_rfc3339(t: &str) -> Option<i64> {
    let b = t.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let n = |r: std::ops::Range<usize>| t.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, s) = (n(0..4)?, n(5..7)?, n(8..10)?, n(11..13)?, n(14..16)?, n(17..19)?);
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some(days * 86400 + h * 3600 + mi * 60 + s)
}

fn describe(m: &TalosMachine, events: &[MachineEvent]) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "Name:             {}", m.metadata.name);
    let _ = writeln!(o, "Namespace:        {}", m.metadata.namespace);
    let _ = writeln!(o, "Created:          {}", m.metadata.creation_timestamp.as_deref().unwrap_or(""));
    if let Some(d) = &m.metadata.deletion_timestamp {
        let _ = writeln!(o, "Deleting since:   {d}");
    }
    let mode = m
        .metadata
        .annotations
        .get(crate::operator::model::RECONCILE_MODE_ANNOTATION)
        .map(String::as_str)
        .unwrap_or("reconcile");
    let _ = writeln!(o, "Reconcile mode:   {mode}");
    let _ = writeln!(o, "Spec:");
    let _ = writeln!(o, "  Endpoint:       {}", m.spec.endpoint);
    let _ = writeln!(o, "  Version:        {}", m.spec.version);
    let _ = writeln!(o, "  Image:          {}", m.spec.image.as_deref().unwrap_or(""));
    let _ = writeln!(o, "  Deletion:       {:?}", m.spec.deletion_policy);
    let _ = writeln!(o, "  Patches:        {}", m.spec.config.patches.len());
    let _ = writeln!(o, "Status:");
    let _ = writeln!(o, "  State:          {}", m.state().map(|s| s.to_string()).unwrap_or_default());
    let _ = writeln!(o, "  Observed:       {}", m.status.observed_version);
    let _ = writeln!(o, "  Config hash:    {}", m.status.config_hash);
    let _ = writeln!(o, "  Generation:     {} (observed {})", m.metadata.generation, m.status.observed_generation);
    if m.status.imported {
        let _ = writeln!(o, "  Imported:       true");
    }
    let _ = writeln!(o, "Conditions:");
    let mut t = Table::new(["  TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"]);
    for c in &m.status.conditions {
        t.row([
            format!("  {}", c.type_),
            c.status.clone(),
            c.reason.clone(),
            c.last_transition_time.clone(),
            c.message.clone(),
        ]);
    }
    o.push_str(&t.render());
    let _ = writeln!(o, "Events:");
    for e in events {
        let _ = writeln!(o, "  {}  {}  {}", e.time, e.type_, e.reason);
        for line in e.note.lines() {
            let _ = writeln!(o, "      {line}");
        }
    }
    o
}

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "talosbox::operator=info,warn".into()),
        )
        .try_init();
}

async fn run_operator(a: RunArgs) -> Result<(), String> {
    init_logging();
    let config = OperatorConfig {
        poll_interval: a.poll_interval,
        health_recheck: a.health_recheck,
        readiness_retry: a.readiness_retry,
        max_concurrent_reconciles: a.max_concurrent_reconciles,
        ..OperatorConfig::default()
    };
    config.validate().map_err(|e| e.to_string())?;
    if a.node_timeout.is_zero() {
        return Err("--node-timeout: must be greater than zero".into());
    }
    let metrics = Arc::new(crate::operator::metrics::Metrics::new());
    let nodes = Arc::new(crate::operator::node::GrpcNodes::new(a.node_timeout));
    let cancel = super::cancel_on_termination()?;
    let (bound, server) = crate::operator::http::serve(a.metrics_address, metrics.clone(), cancel.clone())
        .await
        .map_err(|e| format!("--metrics-address {}: {e}", a.metrics_address))?;
    tracing::info!("metrics on http://{bound}/metrics");

    if a.kubernetes {
        return run_kubernetes(&a, config, metrics, nodes, cancel, server).await;
    }

    let _lock = lock_fleet(&a.fleet)?;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open_dir(&a.fleet).map_err(|e| e.to_string())?);
    let ctx = crate::operator::Context::new(store, nodes, metrics, config).map_err(|e| e.to_string())?;
    let engine = Engine::new(ctx);
    let outcome = engine.run(cancel.clone()).await.map_err(|e| e.to_string());
    cancel.cancel();
    let _ = server.await;
    outcome
}

#[cfg(feature = "kubernetes")]
async fn run_kubernetes(
    a: &RunArgs,
    config: OperatorConfig,
    metrics: Arc<crate::operator::metrics::Metrics>,
    nodes: Arc<crate::operator::node::GrpcNodes>,
    cancel: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<()>,
) -> Result<(), String> {
    let client = ::kube::Client::try_default().await.map_err(|e| format!("connecting to Kubernetes: {e}"))?;
    let identity =
        a.identity.clone().unwrap_or_else(|| rustix::system::uname().nodename().to_string_lossy().into_owned());
    let outcome = crate::operator::kube::run_with_leader_election(
        client,
        &a.lease_namespace,
        &identity,
        config,
        metrics,
        nodes,
        cancel.clone(),
    )
    .await
    .map_err(|e| e.to_string());
    cancel.cancel();
    let _ = server.await;
    outcome
}

#[cfg(not(feature = "kubernetes"))]
async fn run_kubernetes(
    _: &RunArgs,
    _: OperatorConfig,
    _: Arc<crate::operator::metrics::Metrics>,
    _: Arc<crate::operator::node::GrpcNodes>,
    _: tokio_util::sync::CancellationToken,
    _: tokio::task::JoinHandle<()>,
) -> Result<(), String> {
    Err("--kubernetes: this binary was built without the `kubernetes` feature (the node image's build leaves it out; build the workstation's with `--features kubernetes`)".into())
}

/// One `operator run` per fleet directory: a second would poll every node twice and race the
/// first's writes (harmlessly, they are conditional, but to no purpose).
fn lock_fleet(dir: &Path) -> Result<std::fs::File, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--fleet {}: {e}", dir.display()))?;
    let path = dir.join("operator.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("--fleet: {}: {e}", path.display()))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(|_| {
        format!(
            "--fleet {}: another operator is already running on this fleet ({} is locked)",
            dir.display(),
            path.display()
        )
    })?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_go_writes_them_and_negative_ones_are_refused() {
        assert_eq!(parse_duration("3m"), Ok(Duration::from_secs(180)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("5d").unwrap_err().contains("unit"));
    }

    #[test]
    fn ages_read_rfc3339() {
        let t = crate::operator::model::rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(1_798_761_599));
        assert_eq!(parse_rfc3339(&t), Some(1_798_761_599));
        assert_eq!(parse_rfc3339("x"), None);
    }
}

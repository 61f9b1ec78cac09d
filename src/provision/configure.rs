//! `cluster create`'s configuration, so the cluster answers `talosctl` right away. Before the
//! nodes boot, [`generate_files`] writes a secrets bundle, the control plane and worker configs,
//! a talosconfig and each node's own config into the cluster's state directory (readable by
//! their owner only: they hold keys). A directly booted node fetches its own from
//! `talos.config=` (served by [`super::serve`], as Talos's QEMU provisioner serves it); a UKI
//! or disk boot, whose command line is built in, gets it through the maintenance API
//! (`apply-config --insecure`) in [`deliver`]. Then every node must answer Version over mutual TLS.
//!
//! It only talks to the nodes through 127.0.0.1 and the forwards the launcher set up; it never
//! changes a node that already has a configuration (a node out of maintenance refuses an insecure
//! apply, and that is reported, not retried around).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::alloc::Role;
use super::state::{ClusterRecord, NodeRecord};
use super::{ProvisionError, io_err};
use crate::client::api::{Session, SessionOptions, Target, status_line};
use crate::client::config::Config as Talosconfig;
use crate::config::generate::{GenerateOptions, generate};
use crate::config::patch::{self, Patch};
use crate::pki::SecretsBundle;
use crate::proto::machine::{ApplyConfigurationRequest, apply_configuration_request::Mode};

/// How the configuration step runs.
#[derive(Debug, Clone)]
pub struct ConfigureOptions {
    /// How long each node may take to accept its config and then to answer over mTLS.
    pub timeout: Duration,
    /// Written into the (inert) cluster section.
    pub kubernetes_version: String,
    /// `--config-patch`: for every node's config.
    pub patches: Vec<Patch>,
    /// `--config-patch-control-plane` and `--config-patch-worker`.
    pub controlplane_patches: Vec<Patch>,
    pub worker_patches: Vec<Patch>,
}

/// What [`generate_files`] wrote.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The cluster's own talosconfig in the state directory.
    pub talosconfig_path: PathBuf,
    pub talosconfig: Talosconfig,
    /// Each node's configuration, in record order.
    pub node_configs: Vec<String>,
}

/// A key type of `--disk-encryption-key-types`, as Talos's launcher names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskKeyType {
    /// `uuid`: a nodeID key (the machine UUID and the volume id).
    Uuid,
    /// `kms`: sealed by the cluster's KMS (the launcher serves one).
    Kms,
    /// `tpm`: sealed by the node's TPM (the launcher gives it one with `--with-tpm`).
    Tpm,
}

impl std::str::FromStr for DiskKeyType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uuid" => Ok(DiskKeyType::Uuid),
            "kms" => Ok(DiskKeyType::Kms),
            "tpm" => Ok(DiskKeyType::Tpm),
            other => Err(format!("unknown key type {other:?} (uuid, kms or tpm)")),
        }
    }
}

/// The patch `--encrypt-ephemeral` adds to every node's config: EPHEMERAL in LUKS2, with one
/// key slot per key type, in the order given (Talos's launcher does the same).
pub fn ephemeral_encryption_patch(keys: &[DiskKeyType]) -> Result<Patch, String> {
    system_volume_encryption_patch("EPHEMERAL", keys)
}

/// The patch `--encrypt-state` adds: STATE likewise.
pub fn state_encryption_patch(keys: &[DiskKeyType]) -> Result<Patch, String> {
    system_volume_encryption_patch("STATE", keys)
}

fn system_volume_encryption_patch(volume: &str, keys: &[DiskKeyType]) -> Result<Patch, String> {
    if keys.is_empty() {
        return Err("no disk encryption key types enabled".into());
    }
    let mut yaml =
        format!("apiVersion: v1alpha1\nkind: VolumeConfig\nname: {volume}\nencryption:\n  provider: luks2\n  keys:\n");
    for (slot, key) in keys.iter().enumerate() {
        match key {
            DiskKeyType::Uuid => yaml.push_str(&format!("    - slot: {slot}\n      nodeID: {{}}\n")),
            DiskKeyType::Kms => yaml.push_str(&format!(
                "    - slot: {slot}\n      kms:\n        endpoint: {}\n",
                super::serve::kms_endpoint()
            )),
            DiskKeyType::Tpm => yaml.push_str(&format!("    - slot: {slot}\n      tpm: {{}}\n")),
        }
    }
    Patch::parse(&yaml).map_err(|e| format!("the {volume} encryption patch: {e}"))
}

/// The files written into the state directory.
pub const SECRETS_FILE: &str = "secrets.yaml";
pub const CONTROLPLANE_FILE: &str = "controlplane.yaml";
pub const WORKER_FILE: &str = "worker.yaml";
pub const TALOSCONFIG_FILE: &str = "talosconfig";

/// Where a node's own configuration is written.
pub fn node_config_path(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.config.yaml"))
}

/// The endpoint Kubernetes would use, named in the generated configs (inert here): the first
/// control plane's LAN address, as Talos's QEMU clusters have it.
pub fn cluster_endpoint(record: &ClusterRecord) -> String {
    let first_cp = record.nodes.iter().find(|n| n.role == Role::Controlplane).and_then(|n| n.lan_address);
    let host = first_cp.map_or_else(|| super::alloc::lan_address(0).to_string(), |a| a.to_string());
    format!("https://{host}:6443")
}

/// A node's own patch: the names its API certificate must carry besides its own addresses —
/// 127.0.0.1, through which the forward reaches it, and its LAN address, through which its peers'
/// apid proxies to it.
pub fn node_patch(node: &NodeRecord) -> String {
    let mut sans = vec!["127.0.0.1".to_string()];
    if let Some(lan) = node.lan_address {
        sans.push(lan.to_string());
    }
    format!("machine:\n  certSANs: [{}]\n", sans.join(", "))
}

/// What the launcher's network means for every node, before the user's patches (which may
/// undo it): QEMU's restricted user network reaches no time server, and the node's clock
/// starts from the host's RTC, so time sync is off (as Talos's Docker clusters have it).
pub const LAUNCHER_DEFAULTS: &str = "machine:\n  time:\n    disabled: true\n";

/// The config a node gets: the generated one for its role, the launcher's defaults, the
/// user's patches, its own patch.
fn node_config(base: &str, patches: &[Patch], node: &NodeRecord) -> Result<String, String> {
    let loaded = crate::config::load(base).map_err(|e| e.to_string())?.config;
    let defaults = Patch::parse(LAUNCHER_DEFAULTS).map_err(|e| e.to_string())?;
    let own = Patch::parse(&node_patch(node)).map_err(|e| e.to_string())?;
    let all: Vec<Patch> = std::iter::once(defaults).chain(patches.iter().cloned()).chain([own]).collect();
    let patched = patch::apply(&loaded, &all).map_err(|e| e.to_string())?;
    crate::config::validate(&patched).map_err(|e| e.to_string())?;
    Ok(patched.to_yaml())
}

fn write_private(path: &Path, text: &str) -> Result<(), ProvisionError> {
    crate::pki::write_private(path, text).map_err(io_err("writing", path))
}

fn forward(node: &NodeRecord) -> String {
    format!("127.0.0.1:{}", node.api_port)
}

/// Generates the cluster's secrets and configs and writes them, with each node's own config,
/// into `dir`. `step` hears what was written.
pub fn generate_files(
    record: &ClusterRecord,
    dir: &Path,
    opts: &ConfigureOptions,
    images_ca: &str,
    step: &mut dyn FnMut(String),
) -> Result<Generated, ProvisionError> {
    let failed = |what: &str, e: String| ProvisionError::Configure(format!("cluster {:?}: {what}: {e}", record.name));
    let now = SystemTime::now();
    let bundle = SecretsBundle::generate(now).map_err(|e| failed("generating secrets", e.to_string()))?;
    let options = GenerateOptions::new(&opts.kubernetes_version);
    let generated = generate(&bundle, &record.name, &cluster_endpoint(record), &options, now)
        .map_err(|e| failed("generating the machine configs", e.to_string()))?;

    let mut talosconfig = generated.talosconfig.clone();
    let cp = record
        .nodes
        .iter()
        .find(|n| n.role == Role::Controlplane)
        .ok_or_else(|| failed("generating the talosconfig", "the cluster has no control plane".into()))?;
    talosconfig.set_endpoints(vec![forward(cp)]).map_err(|e| failed("generating the talosconfig", e.to_string()))?;

    let mut node_configs = Vec::new();
    for node in &record.nodes {
        let (base, own) = if node.role == Role::Controlplane {
            (&generated.controlplane, &opts.controlplane_patches)
        } else {
            (&generated.worker, &opts.worker_patches)
        };
        let patches: Vec<Patch> = opts.patches.iter().chain(own).cloned().collect();
        let text = node_config(base, &patches, node).map_err(|e| failed(&format!("the config of {}", node.name), e))?;
        // A node told to fetch an image from the launcher's https server trusts its CA.
        node_configs.push(super::serve::trust_images_ca(&text, images_ca));
    }

    let secrets_text = bundle.to_yaml();
    let talosconfig_path = dir.join(TALOSCONFIG_FILE);
    for (name, text) in [
        (SECRETS_FILE, &secrets_text),
        (CONTROLPLANE_FILE, &generated.controlplane),
        (WORKER_FILE, &generated.worker),
        (TALOSCONFIG_FILE, &talosconfig.to_yaml()),
    ] {
        write_private(&dir.join(name), text)?;
    }
    for (node, text) in record.nodes.iter().zip(&node_configs) {
        write_private(&node_config_path(dir, &node.name), text)?;
    }
    step(format!("generated secrets, machine configs and a talosconfig in {}", dir.display()));
    Ok(Generated { talosconfig_path, talosconfig, node_configs })
}

/// Gets each node its configuration — nothing to do for one that fetches it from
/// `talos.config=`, the maintenance API for the others — then waits until every node answers
/// over mutual TLS. `step` hears each stage.
pub fn deliver(
    record: &ClusterRecord,
    generated: &Generated,
    timeout: Duration,
    step: &mut dyn FnMut(String),
) -> Result<(), ProvisionError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
        ProvisionError::Configure(format!("cluster {:?}: starting the client runtime: {e}", record.name))
    })?;
    for (node, text) in record.nodes.iter().zip(&generated.node_configs) {
        if node.served_config.is_some() {
            step(format!("{}: fetches its configuration from talos.config={}", node.name, super::serve::config_url()));
            continue;
        }
        runtime.block_on(apply_insecure(node, text.clone(), timeout)).map_err(ProvisionError::Configure)?;
        step(format!("{}: configuration applied (maintenance API on {})", node.name, forward(node)));
    }
    for node in &record.nodes {
        let started = Instant::now();
        runtime.block_on(await_mtls(node, &generated.talosconfig_path, timeout)).map_err(ProvisionError::Configure)?;
        step(format!("{}: answers over mutual TLS ({:.1} s)", node.name, started.elapsed().as_secs_f64()));
    }
    Ok(())
}

/// Retries until `deadline`, keeping the last error for the message.
async fn retry<T, F, Fut>(what: String, timeout: Duration, mut attempt: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Retry>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match tokio::time::timeout(Duration::from_secs(10), attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(Retry::Fatal(e))) => return Err(format!("{what}: {e}")),
            Ok(Err(Retry::Again(e))) => e,
            Err(_) => "no answer within 10 s".to_string(),
        };
        if Instant::now() >= deadline {
            return Err(format!("{what}: gave up after {} s: {last}", timeout.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

enum Retry {
    /// The node is not there yet (not listening, not up): try again.
    Again(String),
    /// The node answered and refused: stop.
    Fatal(String),
}

fn classify(status: &tonic::Status) -> Retry {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::Unknown | Code::DeadlineExceeded => Retry::Again(status_line(status)),
        _ => Retry::Fatal(status_line(status)),
    }
}

async fn apply_insecure(node: &NodeRecord, text: String, timeout: Duration) -> Result<(), String> {
    let options = SessionOptions { endpoints: vec![forward(node)], insecure: true, ..SessionOptions::default() };
    retry(format!("applying the configuration to {} at {}", node.name, forward(node)), timeout, || {
        let (options, text) = (options.clone(), text.clone());
        async move {
            let session = Session::open(&options).await.map_err(|e| Retry::Again(e.to_string()))?;
            let request = ApplyConfigurationRequest {
                data: text.into_bytes(),
                mode: Mode::Auto as i32,
                dry_run: false,
                try_mode_timeout: None,
            };
            session
                .machine()
                .apply_configuration(session.request(&Target(None), request))
                .await
                .map_err(|s| classify(&s))?;
            Ok(())
        }
    })
    .await
}

async fn await_mtls(node: &NodeRecord, talosconfig: &Path, timeout: Duration) -> Result<(), String> {
    let options = SessionOptions {
        talosconfig: Some(talosconfig.to_path_buf()),
        endpoints: vec![forward(node)],
        ..SessionOptions::default()
    };
    retry(format!("reaching {} over mutual TLS at {}", node.name, forward(node)), timeout, || {
        let options = options.clone();
        async move {
            let session = Session::open(&options).await.map_err(|e| Retry::Again(e.to_string()))?;
            session.machine().version(session.request(&Target(None), ())).await.map_err(|s| classify(&s))?;
            Ok(())
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(role: Role, lan: Option<&str>) -> NodeRecord {
        NodeRecord {
            name: "c-controlplane-1".into(),
            role,
            uuid: String::new(),
            api_port: 40000,
            lan_address: lan.map(|a| a.parse().unwrap()),
            api_mac: "52:54:00:00:00:01".into(),
            lan_mac: "52:54:00:00:01:01".into(),
            serial_log: "/x/log".into(),
            pid_file: "/x/pid".into(),
            qmp_socket: "/x/qmp".into(),
            swtpm_pid_file: None,
            disks: Vec::new(),
            served_config: None,
            launch_file: None,
            launcher_pid_file: None,
            boots_from: None,
        }
    }

    #[test]
    fn encrypt_ephemeral_adds_a_valid_volume_config_with_a_slot_per_key_type() {
        let bundle = SecretsBundle::generate(SystemTime::now()).unwrap();
        let generated =
            generate(&bundle, "c", "https://10.5.0.2:6443", &GenerateOptions::new("1.34.1"), SystemTime::now())
                .unwrap();
        let types: Vec<DiskKeyType> = ["uuid", "kms", "tpm"].iter().map(|t| t.parse().unwrap()).collect();
        let patch = ephemeral_encryption_patch(&types).unwrap();
        let text = node_config(&generated.worker, &[patch], &node(Role::Worker, Some("10.5.0.3"))).unwrap();
        let doc = &text[text.find("kind: VolumeConfig").expect("a VolumeConfig document")..];
        let doc = doc.split("\n---").next().unwrap();
        assert!(doc.contains("name: EPHEMERAL"), "{doc}");
        assert!(doc.contains("provider: luks2"), "{doc}");
        let (uuid, kms) =
            (doc.find("nodeID: {}").expect(doc), doc.find("endpoint: grpc://10.0.2.101:4050").expect(doc));
        assert!(uuid < kms, "slot 0 is the first type given: {doc}");
        let slot2 = doc.find("- slot: 2").expect(doc);
        assert!(doc[slot2..].trim_start_matches("- slot: 2").trim_start().starts_with("tpm: {}"), "{doc}");
        assert!(ephemeral_encryption_patch(&[]).unwrap_err().contains("no disk encryption key types"));
        assert!("luks".parse::<DiskKeyType>().unwrap_err().contains("unknown key type"));

        // --encrypt-state beside it: both documents, and the config reads with both encrypted.
        let state = state_encryption_patch(&types[..1]).unwrap();
        let eph = ephemeral_encryption_patch(&types[..1]).unwrap();
        let text = node_config(&generated.worker, &[state, eph], &node(Role::Worker, Some("10.5.0.3"))).unwrap();
        let view = crate::config::load(&text).unwrap().config.block().unwrap();
        for v in [crate::config::block::SystemVolume::State, crate::config::block::SystemVolume::Ephemeral] {
            let keys = &view.volume(v).and_then(|d| d.encryption.as_ref()).expect("encrypted").keys;
            assert_eq!(keys.len(), 1, "{v:?}");
            assert_eq!(keys[0].kind, crate::config::block::KeyKind::NodeId, "{v:?}");
        }
    }

    #[test]
    fn each_node_config_names_its_forward_and_lan_address() {
        let bundle = SecretsBundle::generate(SystemTime::now()).unwrap();
        let generated =
            generate(&bundle, "c", "https://10.5.0.2:6443", &GenerateOptions::new("1.34.1"), SystemTime::now())
                .unwrap();
        let text = node_config(&generated.worker, &[], &node(Role::Worker, Some("10.5.0.3"))).unwrap();
        let loaded = crate::config::load(&text).unwrap().config;
        let sans: Vec<String> = loaded
            .machine()
            .unwrap()
            .cert_sans
            .iter()
            .map(|s| match s {
                crate::config::CertSan::Ip(ip) => ip.to_string(),
                crate::config::CertSan::Dns(name) => name.clone(),
            })
            .collect();
        assert!(sans.contains(&"127.0.0.1".to_string()) && sans.contains(&"10.5.0.3".to_string()), "{sans:?}");
        // Without a LAN address (a UKI or disk boot) only the forward's.
        assert_eq!(node_patch(&node(Role::Controlplane, None)), "machine:\n  certSANs: [127.0.0.1]\n");
    }

    #[test]
    fn the_endpoint_is_the_first_control_plane_on_the_lan() {
        let record = ClusterRecord {
            name: "c".into(),
            created: 0,
            boot: "direct".into(),
            lan: "230.1.2.3:20001".parse().unwrap(),
            nodes: vec![node(Role::Worker, Some("10.5.0.9")), node(Role::Controlplane, Some("10.5.0.2"))],
        };
        assert_eq!(cluster_endpoint(&record), "https://10.5.0.2:6443");
    }

    #[test]
    fn the_files_are_written_owner_only_with_each_nodes_config() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tb-configure-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut worker = node(Role::Worker, Some("10.5.0.3"));
        worker.name = "c-worker-1".into();
        let record = ClusterRecord {
            name: "c".into(),
            created: 0,
            boot: "direct".into(),
            lan: "230.1.2.3:20001".parse().unwrap(),
            nodes: vec![node(Role::Controlplane, Some("10.5.0.2")), worker],
        };
        let opts = ConfigureOptions {
            timeout: Duration::from_secs(1),
            kubernetes_version: "1.34.1".into(),
            patches: vec![Patch::parse("machine:\n  network:\n    nameservers: [10.0.2.3]\n").unwrap()],
            controlplane_patches: vec![],
            worker_patches: vec![Patch::parse("machine:\n  network:\n    hostname: w\n").unwrap()],
        };
        let mut steps = Vec::new();
        let generated = generate_files(&record, &dir, &opts, "", &mut |s| steps.push(s)).unwrap();
        assert_eq!(generated.node_configs.len(), 2);
        for (node, text) in record.nodes.iter().zip(&generated.node_configs) {
            let path = node_config_path(&dir, &node.name);
            assert_eq!(&std::fs::read_to_string(&path).unwrap(), text);
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            let want = if node.role == Role::Worker { "type: worker" } else { "type: controlplane" };
            assert!(text.contains(want), "{text}");
        }
        assert!(generated.node_configs[1].contains("hostname: w"), "the worker patch reaches workers only");
        assert!(!generated.node_configs[0].contains("hostname: w"));
        assert!(generated.node_configs.iter().all(|t| t.contains("10.0.2.3")), "the common patch reaches every node");
        for text in &generated.node_configs {
            let c = crate::config::load(text).unwrap().config;
            assert!(crate::controllers::network::time_sync::time_settings(Some(&c)).disabled, "{text}");
        }
        for f in [SECRETS_FILE, CONTROLPLANE_FILE, WORKER_FILE, TALOSCONFIG_FILE] {
            assert_eq!(std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777, 0o600, "{f}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

//! Test fixtures for the operator (behind the `test-harness` feature, never in a node's
//! binary): machines, a fleet's Secret, and [`FakeNodes`], a [`NodeClient`] holding each
//! node's version and running configuration in memory, whose dry runs are computed with the
//! config module's own diff, and which a test can take down, slow down or stop mid-poll.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use tokio::sync::Notify;

use super::model::{
    API_VERSION, ConfigSource, KIND, KeyRef, MachineCredentials, MachineKey, MachineSpec, ObjectMeta, TalosMachine,
};
use super::node::{NodeClient, NodeError, NodeTarget};
use super::store::FleetAdmin;

/// A worker configuration generated from [`bundle_yaml`]'s secrets, as `gen config` makes it.
pub fn base_config() -> &'static str {
    static CONFIG: OnceLock<String> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let bundle = crate::pki::SecretsBundle::from_yaml(bundle_yaml()).expect("the test bundle reads back");
        let options = crate::config::generate::GenerateOptions::new("1.32.0");
        crate::config::generate::generate(
            &bundle,
            "fleet",
            "https://127.0.0.1:6443",
            &options,
            std::time::SystemTime::now(),
        )
        .expect("generating a worker config")
        .worker
    })
}

/// A machine in `default` whose node is reached at the endpoint `name`, version `v1`, its
/// config inline, its credentials the Secret `fleet`.
pub fn machine(name: &str) -> TalosMachine {
    TalosMachine {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        metadata: ObjectMeta { name: name.into(), namespace: "default".into(), ..ObjectMeta::default() },
        spec: MachineSpec {
            endpoint: name.into(),
            version: "v1".into(),
            image: Some("v1".into()),
            credentials: MachineCredentials {
                secrets_ref: Some(KeyRef { name: "fleet".into(), key: None }),
                talosconfig_ref: None,
            },
            config: ConfigSource { inline: Some(base_config().into()), config_ref: None, patches: Vec::new() },
            deletion_policy: Default::default(),
        },
        status: Default::default(),
    }
}

/// A secrets bundle, generated once per test process.
pub fn bundle_yaml() -> &'static str {
    static BUNDLE: OnceLock<String> = OnceLock::new();
    BUNDLE.get_or_init(|| {
        crate::pki::SecretsBundle::generate(std::time::SystemTime::now())
            .expect("generating a secrets bundle")
            .to_yaml()
    })
}

/// Puts the fleet's Secret (`fleet`, key `secrets.yaml`) into `namespace`.
pub async fn seed_fleet(admin: &dyn FleetAdmin, namespace: &str) {
    let data = BTreeMap::from([("secrets.yaml".to_string(), bundle_yaml().to_string())]);
    admin.put_secret(namespace, "fleet", data).await.expect("putting the fleet's Secret");
}

/// The config text of [`base_config`] rendered as the operator renders it.
pub fn rendered(patches: &[String]) -> String {
    super::render::render(base_config(), patches).expect("rendering the base config")
}

/// One simulated node.
#[derive(Debug, Clone)]
pub struct FakeNode {
    pub version: String,
    /// The configuration in force; None in maintenance.
    pub config: Option<String>,
    /// Unreachable: every call fails.
    pub down: bool,
    /// What its health check reports.
    pub problems: Vec<String>,
    /// Its dry run panics (a defect in the caller's path must be isolated).
    pub panic_on_dry_run: bool,
}

impl FakeNode {
    pub fn configured(version: &str, config: &str) -> FakeNode {
        FakeNode {
            version: version.into(),
            config: Some(config.into()),
            down: false,
            problems: Vec::new(),
            panic_on_dry_run: false,
        }
    }

    pub fn maintenance(version: &str) -> FakeNode {
        FakeNode { config: None, ..FakeNode::configured(version, "") }
    }
}

/// A gate a dry run waits at: the test learns the poll is inside the node call, does what it
/// wants to race with it, then lets it go on.
#[derive(Default)]
pub struct Gate {
    pub entered: Notify,
    pub release: Notify,
}

#[derive(Default)]
pub struct FakeNodes {
    nodes: Mutex<HashMap<String, FakeNode>>,
    gate: Mutex<Option<Arc<Gate>>>,
    /// Every call, as (endpoint, call).
    pub calls: Mutex<Vec<(String, &'static str)>>,
}

impl FakeNodes {
    pub fn new() -> Arc<FakeNodes> {
        Arc::new(FakeNodes::default())
    }

    pub fn set(&self, endpoint: &str, node: FakeNode) {
        self.nodes.lock().unwrap().insert(endpoint.into(), node);
    }

    pub fn update(&self, endpoint: &str, f: impl FnOnce(&mut FakeNode)) {
        f(self.nodes.lock().unwrap().get_mut(endpoint).expect("no such fake node"));
    }

    pub fn get(&self, endpoint: &str) -> FakeNode {
        self.nodes.lock().unwrap().get(endpoint).cloned().expect("no such fake node")
    }

    /// The next dry run waits at the returned gate.
    pub fn gate_next_dry_run(&self) -> Arc<Gate> {
        let gate = Arc::new(Gate::default());
        *self.gate.lock().unwrap() = Some(gate.clone());
        gate
    }

    pub fn count(&self, endpoint: &str, call: &str) -> usize {
        self.calls.lock().unwrap().iter().filter(|(e, c)| e == endpoint && *c == call).count()
    }

    fn node(&self, endpoint: &str, call: &'static str) -> Result<FakeNode, NodeError> {
        self.calls.lock().unwrap().push((endpoint.into(), call));
        let node = self.nodes.lock().unwrap().get(endpoint).cloned();
        match node {
            Some(n) if !n.down => Ok(n),
            _ => Err(NodeError::Connect { endpoint: endpoint.into(), detail: "connection refused".into() }),
        }
    }

    fn secure(&self, endpoint: &str, call: &'static str) -> Result<FakeNode, NodeError> {
        let n = self.node(endpoint, call)?;
        if n.config.is_none() {
            return Err(NodeError::Connect {
                endpoint: endpoint.into(),
                detail: "in maintenance: no client certificate accepted".into(),
            });
        }
        Ok(n)
    }
}

/// The Talos-layout diff between two config texts, empty when equal.
pub fn config_diff(running: &str, desired: &str) -> String {
    let old = crate::config::load(running).map(|l| l.config).unwrap_or_default();
    let new = match crate::config::load(desired) {
        Ok(l) => l.config,
        Err(e) => return format!("invalid: {e}"),
    };
    crate::config::diff(&old, &new).talos_text().to_string()
}

#[async_trait]
impl NodeClient for FakeNodes {
    async fn version(&self, t: &NodeTarget) -> Result<String, NodeError> {
        Ok(self.secure(&t.endpoint, "version")?.version)
    }

    async fn dry_run(&self, t: &NodeTarget, config: &str) -> Result<String, NodeError> {
        let n = self.secure(&t.endpoint, "dry_run")?;
        let gate = self.gate.lock().unwrap().take();
        if let Some(gate) = gate {
            gate.entered.notify_one();
            gate.release.notified().await;
        }
        if n.panic_on_dry_run {
            panic!("dry run of {} blew up", t.endpoint);
        }
        // Read again: the node may have changed while the gate held the call.
        let n = self.secure(&t.endpoint, "dry_run (after gate)")?;
        Ok(config_diff(n.config.as_deref().unwrap_or(""), config))
    }

    async fn apply(&self, t: &NodeTarget, config: &str) -> Result<(), NodeError> {
        self.secure(&t.endpoint, "apply")?;
        self.update(&t.endpoint, |n| n.config = Some(config.into()));
        Ok(())
    }

    async fn apply_maintenance(&self, endpoint: &str, config: &str) -> Result<(), NodeError> {
        let n = self.node(endpoint, "apply_maintenance")?;
        if n.config.is_some() {
            return Err(NodeError::Call {
                endpoint: endpoint.into(),
                call: "ApplyConfiguration (maintenance)",
                detail: "PermissionDenied: not in maintenance mode".into(),
            });
        }
        self.update(endpoint, |n| n.config = Some(config.into()));
        Ok(())
    }

    async fn upgrade(&self, t: &NodeTarget, image: &str) -> Result<(), NodeError> {
        self.secure(&t.endpoint, "upgrade")?;
        self.update(&t.endpoint, |n| n.version = image.into());
        Ok(())
    }

    async fn unhealthy(&self, t: &NodeTarget) -> Result<Vec<String>, NodeError> {
        Ok(self.secure(&t.endpoint, "unhealthy")?.problems)
    }

    async fn reset(&self, t: &NodeTarget) -> Result<(), NodeError> {
        self.secure(&t.endpoint, "reset")?;
        self.update(&t.endpoint, |n| n.config = None);
        Ok(())
    }
}

/// The key of [`machine`]`(name)`.
pub fn key(name: &str) -> MachineKey {
    MachineKey::new("default", name)
}

//! `talosctl gen config`: a control plane and a worker machine config, and the admin talosconfig,
//! from a secrets bundle, a cluster name and the Kubernetes endpoint. The configs have the shape
//! Talos v1.15 generates: the `v1alpha1` document holding only the OS identity (trustd token, OS
//! CA, cert SANs) and the bootstrap token and etcd CA, then the multi-document kinds in Talos's
//! order (discovery, install, host DNS, EPHEMERAL, trim, workload isolation, hostname, and the
//! Kubernetes documents). Kubernetes settings are carried as Talos writes them; talosbox does
//! not act on them.
//!
//! Pure apart from the key and serial of the talosconfig's client certificate: it never reads a
//! file or the clock (`now` is passed in). It never writes comments.

use std::time::SystemTime;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::pki::issue::CLIENT_CERT_VALIDITY;
use crate::pki::{Role, RoleSet, SecretsBundle};
use crate::proto::talosconfig::{ClientConfigError, Config as Talosconfig};
use crate::yaml::Node;

pub const DEFAULT_DNS_DOMAIN: &str = "cluster.local";
pub const DISCOVERY_SERVICE_ENDPOINT: &str = "https://discovery.talos.dev/";
const POD_SUBNET: &str = "10.244.0.0/16";
const SERVICE_SUBNET: &str = "10.96.0.0/12";
const KUBEPRISM_PORT: i64 = 7445;
const FLANNEL_BACKEND: &str = "vxlan";
const FLANNEL_PORT: i64 = 4789;
const TRIM_INTERVAL: &str = "168h0m0s";
const KUBELET_IMAGE: &str = "ghcr.io/siderolabs/kubelet";
const APISERVER_IMAGE: &str = "registry.k8s.io/kube-apiserver";
const CONTROLLER_MANAGER_IMAGE: &str = "registry.k8s.io/kube-controller-manager";
const SCHEDULER_IMAGE: &str = "registry.k8s.io/kube-scheduler";
const PROXY_IMAGE: &str = "registry.k8s.io/kube-proxy";
const LABEL_CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
const LABEL_EXCLUDE_FROM_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// What `gen config` takes besides the bundle, the cluster name and the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateOptions {
    /// Adds an UnattendedInstallConfig selecting this disk (`--install-disk`).
    pub install_disk: Option<String>,
    /// The installer image in that document (`--install-image`).
    pub install_image: Option<String>,
    /// Extra SANs for the API certificates (`--additional-sans`).
    pub additional_sans: Vec<String>,
    /// `--dns-domain`.
    pub dns_domain: String,
    /// Kubernetes version for the image tags, with or without a leading `v`.
    pub kubernetes_version: String,
}

impl GenerateOptions {
    /// Talos's defaults for everything but the Kubernetes version, which has none here.
    pub fn new(kubernetes_version: &str) -> Self {
        GenerateOptions {
            install_disk: None,
            install_image: None,
            additional_sans: Vec::new(),
            dns_domain: DEFAULT_DNS_DOMAIN.to_owned(),
            kubernetes_version: kubernetes_version.to_owned(),
        }
    }
}

/// The three files `gen config` writes.
#[derive(Debug, Clone)]
pub struct Generated {
    /// `controlplane.yaml`.
    pub controlplane: String,
    /// `worker.yaml`.
    pub worker: String,
    /// `talosconfig`: context named after the cluster, the endpoint's host, role os:admin.
    pub talosconfig: Talosconfig,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("invalid cluster endpoint {endpoint:?}: {detail}")]
    Endpoint { endpoint: String, detail: String },
    #[error("invalid cluster name {name:?}: {detail}")]
    ClusterName { name: String, detail: String },
    #[error("invalid kubernetes version {version:?}: {detail}")]
    KubernetesVersion { version: String, detail: String },
    #[error("invalid {field} {value:?}: {detail}")]
    Option { field: &'static str, value: String, detail: String },
    #[error("generating the talosconfig: {0}")]
    Talosconfig(#[from] ClientConfigError),
}

/// Everything `gen config` produces.
pub fn generate(
    bundle: &SecretsBundle,
    cluster_name: &str,
    endpoint: &str,
    options: &GenerateOptions,
    now: SystemTime,
) -> Result<Generated, GenerateError> {
    let input = Input::new(bundle, cluster_name, endpoint, options)?;
    let talosconfig = Talosconfig::from_bundle(
        bundle,
        cluster_name,
        &RoleSet::from([Role::Admin]),
        std::slice::from_ref(&input.endpoint_host),
        CLIENT_CERT_VALIDITY,
        now,
    )?;
    Ok(Generated {
        controlplane: crate::yaml::to_string_multi(&input.documents(true)),
        worker: crate::yaml::to_string_multi(&input.documents(false)),
        talosconfig,
    })
}

/// The checked inputs.
struct Input<'a> {
    bundle: &'a SecretsBundle,
    cluster_name: &'a str,
    endpoint: &'a str,
    endpoint_host: String,
    options: &'a GenerateOptions,
    kubernetes_version: &'a str,
}

impl<'a> Input<'a> {
    fn new(
        bundle: &'a SecretsBundle,
        cluster_name: &'a str,
        endpoint: &'a str,
        options: &'a GenerateOptions,
    ) -> Result<Self, GenerateError> {
        if cluster_name.trim().is_empty() {
            return Err(GenerateError::ClusterName { name: cluster_name.into(), detail: "must not be empty".into() });
        }
        let endpoint_host = endpoint_host(endpoint)?;
        let version = options.kubernetes_version.strip_prefix('v').unwrap_or(&options.kubernetes_version);
        if version.is_empty()
            || !version.starts_with(|c: char| c.is_ascii_digit())
            || version.contains(char::is_whitespace)
        {
            return Err(GenerateError::KubernetesVersion {
                version: options.kubernetes_version.clone(),
                detail: "expected a version such as 1.34.0".into(),
            });
        }
        for (field, value) in [("install disk", &options.install_disk), ("install image", &options.install_image)] {
            if value.as_deref().is_some_and(|v| v.is_empty() || v.contains(char::is_whitespace)) {
                let value = value.clone().unwrap_or_default();
                return Err(GenerateError::Option { field, value, detail: "must be non-empty without spaces".into() });
            }
        }
        if options.dns_domain.is_empty() {
            return Err(GenerateError::Option {
                field: "dns domain",
                value: String::new(),
                detail: "must not be empty".into(),
            });
        }
        Ok(Input { bundle, cluster_name, endpoint, endpoint_host, options, kubernetes_version: version })
    }

    fn image(&self, repository: &str) -> Node {
        Node::Str(format!("{repository}:v{}", self.kubernetes_version))
    }

    fn documents(&self, controlplane: bool) -> Vec<Node> {
        let certs = &self.bundle.certs;
        let mut docs = vec![self.v1alpha1(controlplane)];
        docs.push(doc(
            "DiscoveryServiceConfig",
            [("name", "default".into()), ("endpoint", DISCOVERY_SERVICE_ENDPOINT.into())],
        ));
        docs.push(doc(
            "DiscoveryIdentityConfig",
            [("clusterID", (&self.bundle.cluster.id).into()), ("clusterSecret", (&self.bundle.cluster.secret).into())],
        ));
        if let Some(disk) = &self.options.install_disk {
            let installer = match &self.options.install_image {
                Some(image) => Node::map([("image", image.into())]),
                None => Node::Map(vec![]),
            };
            let selector = format!("disk.dev_path == {}", go_quote(disk));
            docs.push(doc(
                "UnattendedInstallConfig",
                [
                    ("installer", installer),
                    (
                        "provisioning",
                        Node::map([("diskSelector", Node::map([("match", selector.into())])), ("wipe", false.into())]),
                    ),
                ],
            ));
        }
        docs.push(doc(
            "ResolverConfig",
            [("hostDNS", Node::map([("enabled", true.into()), ("forwardKubeDNSToHost", true.into())]))],
        ));
        docs.push(doc("VolumeConfig", [("name", "EPHEMERAL".into()), ("mount", Node::map([("secure", true.into())]))]));
        docs.push(doc("FilesystemTrimConfig", [("interval", TRIM_INTERVAL.into())]));
        docs.push(doc("SecurityProfileConfig", [("workloadIsolation", true.into())]));
        docs.push(doc("HostnameConfig", [("auto", "stable".into())]));

        docs.push(doc(
            "KubeClusterConfig",
            [("clusterName", self.cluster_name.into()), ("endpoint", self.endpoint.into())],
        ));
        let mut node = vec![("nodeIP", Node::Map(vec![]))];
        if controlplane {
            node.push(("labels", Node::map([(LABEL_CONTROL_PLANE, "".into()), (LABEL_EXCLUDE_FROM_LB, "".into())])));
            node.push(("taints", Node::map([(LABEL_CONTROL_PLANE, "NoSchedule".into())])));
        }
        docs.push(doc("KubeNodeConfig", node));
        docs.push(doc(
            "KubeletConfig",
            [
                ("image", self.image(KUBELET_IMAGE)),
                ("config", Node::Map(vec![])),
                ("defaultRuntimeSeccompProfileEnabled", true.into()),
            ],
        ));
        docs.push(doc(
            "KubeNetworkConfig",
            [
                ("dnsDomain", (&self.options.dns_domain).into()),
                ("podSubnets", Node::seq([POD_SUBNET])),
                ("serviceSubnets", Node::seq([SERVICE_SUBNET])),
            ],
        ));
        let ca = if controlplane {
            ("issuingCA", Node::map([("cert", (&certs.k8s.crt_pem).into()), ("key", (&certs.k8s.key_pem).into())]))
        } else {
            ("acceptedCAs", Node::seq([&certs.k8s.crt_pem]))
        };
        docs.push(doc("KubeAPIServerCAConfig", [ca]));
        docs.push(doc("KubePrismConfig", [("port", Node::Int(KUBEPRISM_PORT))]));
        if controlplane {
            docs.extend(self.controlplane_kubernetes());
        }
        docs
    }

    /// The `v1alpha1` document: what is left in it once everything has a document of its own.
    fn v1alpha1(&self, controlplane: bool) -> Node {
        let b64 = |pem: &str| Node::Str(STANDARD.encode(pem.as_bytes()));
        let os = &self.bundle.certs.os;
        // A worker carries the OS CA certificate only; the key stays on control planes.
        let os_key = if controlplane { b64(&os.key_pem) } else { "".into() };
        let machine = Node::map([
            ("type", if controlplane { "controlplane" } else { "worker" }.into()),
            ("token", (&self.bundle.trustd_info.token).into()),
            ("ca", Node::map([("crt", b64(&os.crt_pem)), ("key", os_key)])),
            ("certSANs", Node::seq(&self.options.additional_sans)),
            ("features", Node::map([("diskQuotaSupport", true.into())])),
        ]);
        let mut cluster = vec![("token", Node::from(&self.bundle.secrets.bootstrap_token))];
        if controlplane {
            let etcd = &self.bundle.certs.etcd;
            cluster.push((
                "etcd",
                Node::map([("ca", Node::map([("crt", b64(&etcd.crt_pem)), ("key", b64(&etcd.key_pem))]))]),
            ));
        }
        Node::map([
            ("version", "v1alpha1".into()),
            ("debug", false.into()),
            ("persist", true.into()),
            ("machine", machine),
            ("cluster", Node::map(cluster)),
        ])
    }

    fn controlplane_kubernetes(&self) -> Vec<Node> {
        let certs = &self.bundle.certs;
        let secrets = &self.bundle.secrets;
        let mut docs = vec![doc(
            "KubeAggregatorCAConfig",
            [(
                "issuingCA",
                Node::map([
                    ("cert", (&certs.k8s_aggregator.crt_pem).into()),
                    ("key", (&certs.k8s_aggregator.key_pem).into()),
                ]),
            )],
        )];
        docs.extend(kubernetes_policy_documents());

        // Names and order must match what kube-apiserver was given before, or it cannot decrypt
        // the secrets it already stored: secretbox is `key2`, the older aescbc `key1`.
        let mut providers = Vec::new();
        if let Some(secret) = &secrets.secretbox_encryption_secret {
            providers.push(encryption_provider("secretbox", "key2", secret));
        }
        if let Some(secret) = &secrets.aescbc_encryption_secret {
            providers.push(encryption_provider("aescbc", "key1", secret));
        }
        docs.push(doc(
            "KubeEtcdEncryptionConfig",
            [(
                "config",
                Node::map([(
                    "resources",
                    Node::seq([Node::map([
                        ("providers", Node::Seq(providers)),
                        ("resources", Node::seq(["secrets"])),
                    ])]),
                )]),
            )],
        ));
        docs.push(doc(
            "KubeServiceAccountConfig",
            [(
                "issuer",
                Node::map([
                    ("privateKey", (&certs.k8s_service_account_key).into()),
                    ("issuerURL", self.endpoint.into()),
                ]),
            )],
        ));
        let mut apiserver = vec![("image", self.image(APISERVER_IMAGE))];
        if !self.options.additional_sans.is_empty() {
            apiserver.push(("certExtraSANs", Node::seq(&self.options.additional_sans)));
        }
        docs.push(doc("KubeAPIServerConfig", apiserver));
        docs.push(doc("KubeControllerManagerConfig", [("image", self.image(CONTROLLER_MANAGER_IMAGE))]));
        docs.push(doc("KubeSchedulerConfig", [("image", self.image(SCHEDULER_IMAGE)), ("config", Node::Map(vec![]))]));
        docs.push(doc("KubeProxyConfig", [("image", self.image(PROXY_IMAGE)), ("config", Node::Map(vec![]))]));
        docs.push(doc(
            "KubeFlannelCNIConfig",
            [("backendType", FLANNEL_BACKEND.into()), ("backendPort", Node::Int(FLANNEL_PORT))],
        ));
        docs.push(doc("KubeCoreDNSConfig", [("enabled", true.into())]));
        docs
    }
}

/// A multi-document config document: `apiVersion`, `kind`, then its fields.
fn doc<'k>(kind: &str, fields: impl IntoIterator<Item = (&'k str, Node)>) -> Node {
    let mut entries = vec![("apiVersion".to_owned(), Node::from("v1alpha1")), ("kind".to_owned(), Node::from(kind))];
    entries.extend(fields.into_iter().map(|(k, v)| (k.to_owned(), v)));
    Node::Map(entries)
}

fn encryption_provider(kind: &str, name: &str, secret: &str) -> Node {
    Node::map([(
        kind,
        Node::map([("keys", Node::seq([Node::map([("name", name.into()), ("secret", secret.into())])]))]),
    )])
}

/// The admission, audit, authentication and authorization defaults Talos generates.
fn kubernetes_policy_documents() -> Vec<Node> {
    let pod_security = Node::map([
        ("apiVersion", "pod-security.admission.config.k8s.io/v1alpha1".into()),
        (
            "defaults",
            Node::map([
                ("audit", "restricted".into()),
                ("audit-version", "latest".into()),
                ("enforce", "baseline".into()),
                ("enforce-version", "latest".into()),
                ("warn", "restricted".into()),
                ("warn-version", "latest".into()),
            ]),
        ),
        (
            "exemptions",
            Node::map([
                ("namespaces", Node::seq(["kube-system"])),
                ("runtimeClasses", Node::Seq(vec![])),
                ("usernames", Node::Seq(vec![])),
            ]),
        ),
        ("kind", "PodSecurityConfiguration".into()),
    ]);
    let audit = Node::map([
        ("apiVersion", "audit.k8s.io/v1".into()),
        ("kind", "Policy".into()),
        ("rules", Node::seq([Node::map([("level", "Metadata".into())])])),
    ]);
    let anonymous_paths = ["/livez", "/readyz", "/healthz"].map(|p| Node::map([("path", p.into())]));
    let authentication = Node::map([
        ("anonymous", Node::map([("conditions", Node::seq(anonymous_paths)), ("enabled", true.into())])),
        ("jwt", Node::Seq(vec![])),
    ]);
    vec![
        doc("KubeAdmissionControlConfig", [("name", "PodSecurity".into()), ("configuration", pod_security)]),
        doc("KubeAuditPolicyConfig", [("configuration", audit)]),
        doc("KubeAuthenticationConfig", [("configuration", authentication)]),
        doc("KubeAuthorizerConfig", [("name", "node".into()), ("type", "Node".into())]),
        doc("KubeAuthorizerConfig", [("name", "rbac".into()), ("type", "RBAC".into())]),
    ]
}

/// The host of an `https://host[:port][/path]` endpoint, checked as talosctl checks it.
fn endpoint_host(endpoint: &str) -> Result<String, GenerateError> {
    let err = |detail: String| GenerateError::Endpoint { endpoint: endpoint.to_owned(), detail };
    let Some(rest) = endpoint.strip_prefix("https://") else {
        let bare = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
        let with_port = if split_host_port(bare).is_some_and(|(_, port)| port.is_some()) {
            bare.to_owned()
        } else {
            format!("{bare}:6443")
        };
        let what = if endpoint.contains("://") { "the scheme must be https" } else { "no scheme" };
        return Err(err(format!("{what}; try \"https://{with_port}\"")));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (host, port) = split_host_port(authority).ok_or_else(|| err("malformed host".into()))?;
    if host.is_empty() {
        return Err(err("no host".into()));
    }
    if let Some(port) = port
        && port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(err(format!("invalid port {port:?}")));
    }
    Ok(host.to_owned())
}

/// `host[:port]` or `[v6]:port` into its parts.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => None, // an IPv6 address needs brackets
        Some((host, port)) => Some((host, Some(port))),
        None => Some((authority, None)),
    }
}

/// A string literal as Go's `%q` writes it, for the CEL selector.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::pki::{ExtKeyUsage, inspect_pem};

    const TALOS_CONTROLPLANE: &str = include_str!("testdata/generate/base-controlplane.yaml");
    const TALOS_WORKER: &str = include_str!("testdata/generate/base-worker.yaml");
    const TALOS_SECRETS: &str = include_str!("../pki/testdata/secrets.yaml");

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn docs(text: &str) -> Vec<Node> {
        serde_saphyr::from_multiple(text).unwrap()
    }

    fn key_paths(text: &str) -> Vec<(String, Vec<String>)> {
        docs(text)
            .iter()
            .map(|d| (d.get("kind").and_then(Node::as_str).unwrap_or("v1alpha1").to_owned(), d.key_paths()))
            .collect()
    }

    #[test]
    fn talos_s_bundle_gives_talos_s_configs_byte_for_byte() {
        let bundle = SecretsBundle::from_yaml(TALOS_SECRETS).unwrap();
        let generated = generate(&bundle, "base", "https://base:6443", &GenerateOptions::new("1.28.0"), now()).unwrap();
        assert_eq!(generated.controlplane, TALOS_CONTROLPLANE);
        assert_eq!(generated.worker, TALOS_WORKER);
    }

    #[test]
    fn a_fresh_bundle_gives_the_same_documents_keys_and_order() {
        let bundle = SecretsBundle::generate(now()).unwrap();
        let generated =
            generate(&bundle, "lab", "https://10.5.0.2:6443", &GenerateOptions::new("v1.34.1"), now()).unwrap();
        assert_eq!(key_paths(&generated.controlplane), key_paths(TALOS_CONTROLPLANE));
        assert_eq!(key_paths(&generated.worker), key_paths(TALOS_WORKER));
        assert_ne!(generated.controlplane, TALOS_CONTROLPLANE);
        let cp = docs(&generated.controlplane);
        let kubelet = cp.iter().find(|d| d.get("kind").and_then(Node::as_str) == Some("KubeletConfig")).unwrap();
        assert_eq!(kubelet.get("image").and_then(Node::as_str), Some("ghcr.io/siderolabs/kubelet:v1.34.1"));
        // The worker never gets the OS CA key.
        let worker = docs(&generated.worker);
        let ca = worker[0].get("machine").and_then(|m| m.get("ca")).unwrap();
        assert_eq!(ca.get("key").and_then(Node::as_str), Some(""));
        assert!(!generated.worker.contains(&STANDARD.encode(&bundle.certs.os.key_pem)));
    }

    #[test]
    fn options_add_install_sans_and_dns_domain() {
        let bundle = SecretsBundle::from_yaml(TALOS_SECRETS).unwrap();
        let options = GenerateOptions {
            install_disk: Some("/dev/vda".into()),
            install_image: Some("ghcr.io/example/installer:v1".into()),
            additional_sans: vec!["foo".into(), "10.0.0.1".into()],
            dns_domain: "example.com".into(),
            ..GenerateOptions::new("1.28.0")
        };
        let generated = generate(&bundle, "base", "https://base:6443", &options, now()).unwrap();
        for text in [&generated.controlplane, &generated.worker] {
            let d = docs(text);
            assert_eq!(d[3].get("kind").and_then(Node::as_str), Some("UnattendedInstallConfig"), "after discovery");
            assert!(text.contains(
                "kind: UnattendedInstallConfig\ninstaller:\n    image: ghcr.io/example/installer:v1\nprovisioning:\n    diskSelector:\n        match: disk.dev_path == \"/dev/vda\"\n    wipe: false\n"
            ), "{text}");
            assert!(text.contains("    certSANs:\n        - foo\n        - 10.0.0.1\n"), "{text}");
            assert!(text.contains("dnsDomain: example.com\n"));
        }
        assert!(generated.controlplane.contains("kind: KubeAPIServerConfig\nimage: registry.k8s.io/kube-apiserver:v1.28.0\ncertExtraSANs:\n    - foo\n    - 10.0.0.1\n"));
        // Without an image the installer is empty, as in Talos's overrides fixture.
        let options = GenerateOptions { install_disk: Some("/dev/vda".into()), ..GenerateOptions::new("1.28.0") };
        let generated = generate(&bundle, "base", "https://base:6443", &options, now()).unwrap();
        assert!(generated.worker.contains("kind: UnattendedInstallConfig\ninstaller: {}\n"));
    }

    #[test]
    fn the_talosconfig_is_an_admin_context_named_after_the_cluster() {
        let bundle = SecretsBundle::generate(now()).unwrap();
        let generated =
            generate(&bundle, "lab", "https://[fd00::2]:6443", &GenerateOptions::new("1.34.1"), now()).unwrap();
        let tc = &generated.talosconfig;
        let (name, context) = tc.current().unwrap();
        assert_eq!((name, context.endpoints.as_slice()), ("lab", &["fd00::2".to_owned()][..]));
        let identity = tc.credentials("lab").unwrap().identity.unwrap();
        let info = inspect_pem(&identity.crt_pem).unwrap();
        assert_eq!(info.organizations, ["os:admin"]);
        assert_eq!(info.extended_key_usages, [ExtKeyUsage::ClientAuth].into());
        assert_eq!(info.not_after, now() + CLIENT_CERT_VALIDITY);
    }

    #[test]
    fn endpoints_are_checked_like_talosctl() {
        for (endpoint, host) in [
            ("https://base:6443", "base"),
            ("https://10.5.0.2:6443/", "10.5.0.2"),
            ("https://[fd00::2]:6443", "fd00::2"),
            ("https://lb.example", "lb.example"),
        ] {
            assert_eq!(endpoint_host(endpoint).unwrap(), host, "{endpoint}");
        }
        for (endpoint, want) in [
            ("base:6443", "no scheme; try \"https://base:6443\""),
            ("10.5.0.2", "no scheme; try \"https://10.5.0.2:6443\""),
            ("http://base:6443", "the scheme must be https; try \"https://base:6443\""),
            ("https://:6443", "no host"),
            ("https://base:0", "invalid port"),
            ("https://base:http", "invalid port"),
            ("https://fd00::2:6443", "malformed host"),
        ] {
            let err = endpoint_host(endpoint).unwrap_err().to_string();
            assert!(err.contains(want), "{endpoint}: {err}");
        }
    }

    #[test]
    fn bad_inputs_are_refused() {
        let bundle = SecretsBundle::from_yaml(TALOS_SECRETS).unwrap();
        let ok = GenerateOptions::new("1.28.0");
        assert!(matches!(generate(&bundle, " ", "https://b:6443", &ok, now()), Err(GenerateError::ClusterName { .. })));
        let err = generate(&bundle, "b", "https://b:6443", &GenerateOptions::new(""), now()).unwrap_err();
        assert!(matches!(err, GenerateError::KubernetesVersion { .. }), "{err}");
        let disk = GenerateOptions { install_disk: Some(String::new()), ..ok };
        let err = generate(&bundle, "b", "https://b:6443", &disk, now()).unwrap_err().to_string();
        assert!(err.starts_with("invalid install disk"), "{err}");
    }

    #[test]
    fn an_aescbc_bundle_keeps_its_provider_name() {
        let mut bundle = SecretsBundle::from_yaml(TALOS_SECRETS).unwrap();
        bundle.secrets.aescbc_encryption_secret = bundle.secrets.secretbox_encryption_secret.take();
        let generated = generate(&bundle, "b", "https://b:6443", &GenerateOptions::new("1.28.0"), now()).unwrap();
        assert!(generated.controlplane.contains(
            "        - providers:\n            - aescbc:\n                keys:\n                    - name: key1\n"
        ));
    }
}

//! What talosbox makes of each config field, beyond its type: whether the value is a secret
//! (never shown: not in diffs, not in logs), whether talosbox leaves it alone (accepted and kept
//! but not acted on, because Kubernetes, etcd and containers are out of scope), and whether a
//! change takes effect live or needs a reboot. Rules are path patterns per document kind; this
//! file decides, the schema table only describes.
//!
//! Patterns are dot-separated: a field name, `*` for any one step (a field, a map key or a list
//! index) or `**` for any number of steps. A rule covers the whole subtree under what it
//! matches. Kinds are named exactly, `@group` names every kind of a Talos package, `*` any kind.

use serde::Serialize;

use super::schema::Kind;
use super::value::{Path, Seg, Value};

/// When a change to a field takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Controllers apply it on the running node.
    Live,
    /// It is read at boot (or install): the node must reboot for it to apply.
    Reboot,
}

/// What a secret is shown as.
pub(crate) const REDACTED: &str = "(redacted)";

const K8S: &str = "Kubernetes and etcd are out of scope";
const CRI: &str = "containers are out of scope";
const KUBESPAN: &str = "KubeSpan (the WireGuard mesh) is out of scope";

/// Field names that hold secrets wherever they appear.
const SECRET_NAMES: &[&str] = &[
    "key",
    "privateKey",
    "presharedKey",
    "passphrase",
    "password",
    "identityToken",
    "apiToken",
    "token",
    "uniqueToken",
    "secret",
    "clusterSecret",
    "aescbcEncryptionSecret",
    "secretboxEncryptionSecret",
];

/// Secrets that a generic name does not catch, and free text that often carries secrets
/// (file contents, environments, manifests, headers): redacting those costs a readable diff,
/// leaking them costs a cluster.
const SENSITIVE: &[(&str, &str)] = &[
    ("*", "**.kms.endpoint"),
    ("v1alpha1", "machine.registries.config.*.auth.auth"),
    ("v1alpha1", "machine.files.*.content"),
    ("v1alpha1", "machine.env"),
    ("v1alpha1", "machine.pods"),
    ("v1alpha1", "cluster.inlineManifests.*.contents"),
    ("v1alpha1", "cluster.extraManifestHeaders"),
    ("v1alpha1", "cluster.*.env"),
    ("RegistryAuthConfig", "auth"),
    // The SideroLink URL carries the join token in its query.
    ("SideroLinkConfig", "apiUrl"),
    ("KubeEtcdEncryptionConfig", "config"),
    ("KubeAPIServerConfig", "env"),
    ("KubeControllerManagerConfig", "env"),
    ("KubeSchedulerConfig", "env"),
    ("KubeExternalManifestConfig", "headers"),
    ("KubeInlineManifestConfig", "manifest"),
    ("KubeStaticPodConfig", "pod"),
    ("CRICustomizationConfig", "content"),
    ("EtcFileConfig", "contents"),
    ("EnvironmentConfig", "variables"),
    ("ExtensionServiceConfig", "configFiles.*.content"),
    ("ExtensionServiceConfig", "environment"),
    ("ContainerConfig", "environment"),
];

/// Subtrees talosbox keeps but does not act on, and why. An empty path is the whole document.
const INERT: &[(&str, &str, &str)] = &[
    ("v1alpha1", "cluster", K8S),
    ("v1alpha1", "machine.controlPlane", K8S),
    ("v1alpha1", "machine.kubelet", K8S),
    ("v1alpha1", "machine.pods", K8S),
    ("v1alpha1", "machine.nodeLabels", K8S),
    ("v1alpha1", "machine.nodeAnnotations", K8S),
    ("v1alpha1", "machine.nodeTaints", K8S),
    ("v1alpha1", "machine.seccompProfiles", K8S),
    ("v1alpha1", "machine.features.kubernetesTalosAPIAccess", K8S),
    ("v1alpha1", "machine.features.kubePrism", K8S),
    ("v1alpha1", "machine.features.diskQuotaSupport", K8S),
    ("v1alpha1", "machine.features.hostDNS.forwardKubeDNSToHost", K8S),
    ("v1alpha1", "machine.baseRuntimeSpecOverrides", CRI),
    ("v1alpha1", "machine.registries", CRI),
    ("v1alpha1", "machine.features.imageCache", CRI),
    ("@k8s", "", K8S),
    ("@cri", "", CRI),
    ("ContainerConfig", "", CRI),
    ("ExtensionServiceConfig", "", CRI),
    ("SecurityProfileConfig", "", K8S),
    ("ResolverConfig", "hostDNS.forwardKubeDNSToHost", K8S),
    ("v1alpha1", "machine.network.kubespan", KUBESPAN),
    ("KubeSpanConfig", "", KUBESPAN),
    ("KubeSpanEndpointsConfig", "", KUBESPAN),
];

/// Why talosbox keeps a system volume's `VolumeConfig` but does not act on it, if it does not.
/// The kind is acted on (STATE, EPHEMERAL), so the rule is by document name, not by path.
pub(crate) fn inert_system_volume(name: &str) -> Option<&'static str> {
    match name {
        "IMAGECACHE" | "CRI" => Some(CRI),
        "ETCD" | "KUBELET" => Some(K8S),
        _ => None,
    }
}

/// When changes apply; the most specific matching rule wins, and anything no rule covers needs
/// a reboot, so an unforeseen field fails safe. Inert fields are live: nothing acts on them.
const EFFECTS: &[(&str, &str, Effect)] = &[
    ("v1alpha1", "", Effect::Reboot),
    ("v1alpha1", "machine.token", Effect::Live),
    ("v1alpha1", "machine.ca", Effect::Live),
    ("v1alpha1", "machine.acceptedCAs", Effect::Live),
    ("v1alpha1", "machine.certSANs", Effect::Live),
    ("v1alpha1", "machine.network", Effect::Live),
    ("v1alpha1", "machine.time", Effect::Live),
    ("v1alpha1", "machine.logging", Effect::Live),
    ("v1alpha1", "machine.sysctls", Effect::Live),
    ("v1alpha1", "machine.sysfs", Effect::Live),
    ("@network", "", Effect::Live),
    ("@cluster", "", Effect::Live),
    ("@security", "", Effect::Live),
    ("@siderolink", "", Effect::Live),
    ("@block", "", Effect::Reboot),
    // The volume controllers make, mount and take down these volumes on the running node; a
    // volume already made keeps its partition and filesystem (sizes apply to new ones).
    ("UserVolumeConfig", "", Effect::Live),
    ("RawVolumeConfig", "", Effect::Live),
    ("ExistingVolumeConfig", "", Effect::Live),
    ("ExternalVolumeConfig", "", Effect::Live),
    ("SwapVolumeConfig", "", Effect::Live),
    ("DiskWipeConfig", "", Effect::Live),
    ("FilesystemTrimConfig", "", Effect::Live),
    ("FilesystemScrubConfig", "", Effect::Live),
    ("@storage", "", Effect::Reboot),
    ("@hardware", "", Effect::Reboot),
    ("@runtime", "", Effect::Reboot),
    ("EtcFileConfig", "", Effect::Live),
    ("EventSinkConfig", "", Effect::Live),
    ("KmsgLogConfig", "", Effect::Live),
    ("OOMConfig", "", Effect::Live),
    ("SysctlConfig", "", Effect::Live),
    ("SysfsConfig", "", Effect::Live),
    ("WatchdogTimerConfig", "", Effect::Live),
];

fn kind_matches(rule: &str, kind: &Kind) -> bool {
    match rule.strip_prefix('@') {
        Some(group) => kind.group == group,
        None => rule == "*" || rule == kind.kind,
    }
}

/// How many leading steps of `path` the pattern covers, if it covers a prefix of it.
pub(crate) fn match_prefix(pattern: &str, path: &[Seg]) -> Option<usize> {
    prefix_len(pattern, path, 0)
}

fn prefix_len(pattern: &str, path: &[Seg], used: usize) -> Option<usize> {
    if pattern.is_empty() {
        return Some(used);
    }
    let (first, rest) = pattern.split_once('.').unwrap_or((pattern, ""));
    if first == "**" {
        // `**` takes as few steps as lets the rest match.
        return (0..=path.len()).find_map(|skip| prefix_len(rest, &path[skip..], used + skip));
    }
    let (seg, tail) = path.split_first()?;
    let ok = match seg {
        Seg::Key(k) => first == "*" || first == k,
        Seg::Index(_) => first == "*",
    };
    if ok { prefix_len(rest, tail, used + 1) } else { None }
}

/// Whether the value at `path` (or anything above it) is a secret.
pub(crate) fn is_sensitive(kind: &Kind, path: &Path) -> bool {
    let segs = path.segments();
    let by_name = segs.iter().any(|s| matches!(s, Seg::Key(k) if SECRET_NAMES.contains(&k.as_str())));
    by_name || SENSITIVE.iter().any(|(k, p)| kind_matches(k, kind) && match_prefix(p, segs).is_some())
}

/// The value at `path` with every secret below it replaced by [`REDACTED`].
pub(crate) fn redacted(kind: &Kind, path: &Path, v: &Value) -> Value {
    if is_sensitive(kind, path) {
        return Value::String(REDACTED.into());
    }
    match v {
        Value::Map(m) => Value::Map(m.iter().map(|(k, v)| (k.to_string(), redacted(kind, &path.key(k), v))).collect()),
        Value::List(items) => {
            Value::List(items.iter().enumerate().map(|(i, v)| redacted(kind, &path.index(i), v)).collect())
        }
        other => other.clone(),
    }
}

/// The inert subtree `path` is in, as (its root, the reason), if any.
pub(crate) fn inert(kind: &Kind, path: &Path) -> Option<(Path, &'static str)> {
    let segs = path.segments();
    INERT
        .iter()
        .filter(|(k, _, _)| kind_matches(k, kind))
        .filter_map(|(_, p, reason)| match_prefix(p, segs).map(|n| (n, *reason)))
        .min_by_key(|(n, _)| *n)
        .map(|(n, reason)| (Path::from(segs[..n].to_vec()), reason))
}

/// When a change at `path` takes effect.
pub(crate) fn effect(kind: &Kind, path: &Path) -> Effect {
    if inert(kind, path).is_some() {
        return Effect::Live;
    }
    let segs = path.segments();
    EFFECTS
        .iter()
        .filter(|(k, _, _)| kind_matches(k, kind))
        .filter_map(|(k, p, e)| {
            let n = match_prefix(p, segs)?;
            // an exact kind beats its group at the same depth
            Some(((n, !k.starts_with('@')), *e))
        })
        .max_by_key(|(rank, _)| *rank)
        .map_or(Effect::Reboot, |(_, e)| e)
}

/// When a change to the subtree at `path` takes effect, given its old and new values: the
/// strictest effect of any field in either.
pub(crate) fn subtree_effect(kind: &Kind, path: &Path, old: Option<&Value>, new: Option<&Value>) -> Effect {
    fn walk(kind: &Kind, path: &Path, v: &Value, worst: &mut Effect) {
        if *worst == Effect::Reboot {
            return;
        }
        *worst = (*worst).max(effect(kind, path));
        match v {
            Value::Map(m) => m.iter().for_each(|(k, v)| walk(kind, &path.key(k), v, worst)),
            Value::List(items) => items.iter().enumerate().for_each(|(i, v)| walk(kind, &path.index(i), v, worst)),
            _ => {}
        }
    }
    let mut worst = effect(kind, path);
    for v in [old, new].into_iter().flatten() {
        walk(kind, path, v, &mut worst);
    }
    worst
}

/// One warning per inert subtree present in a document, outermost first.
pub(crate) fn inert_warnings(kind: &Kind, doc: &str, value: &Value) -> Vec<String> {
    fn walk(kind: &Kind, doc: &str, path: &Path, v: &Value, out: &mut Vec<String>) {
        if let Some((root, reason)) = inert(kind, path) {
            if root == *path {
                out.push(if path.is_root() {
                    format!("{doc}: accepted and kept, not acted on ({reason})")
                } else {
                    format!("{doc}: {path}: accepted and kept, not acted on ({reason})")
                });
            }
            return;
        }
        match v {
            Value::Map(m) => m.iter().for_each(|(k, v)| walk(kind, doc, &path.key(k), v, out)),
            Value::List(items) => items.iter().enumerate().for_each(|(i, v)| walk(kind, doc, &path.index(i), v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(kind, doc, &Path::root(), value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::super::schema::{Ty, all_kinds, kind, v1alpha1};
    use super::*;

    fn p(s: &str) -> Path {
        let mut path = Path::root();
        for part in s.split('.').filter(|s| !s.is_empty()) {
            path = match part.parse::<usize>() {
                Ok(i) => path.index(i),
                Err(_) => path.key(part),
            };
        }
        path
    }

    #[test]
    fn secrets_are_sensitive() {
        let v1 = v1alpha1();
        for path in [
            "machine.token",
            "machine.ca.key",
            "cluster.secret",
            "cluster.token",
            "cluster.ca.key",
            "cluster.aggregatorCA.key",
            "cluster.serviceAccount.key",
            "cluster.etcd.ca.key",
            "cluster.secretboxEncryptionSecret",
            "cluster.aescbcEncryptionSecret",
            "machine.registries.config.mirror.auth.password",
            "machine.registries.config.mirror.auth.auth",
            "machine.registries.config.mirror.tls.clientIdentity.key",
            "machine.network.interfaces.0.wireguard.privateKey",
            "machine.network.interfaces.0.vip.hcloud.apiToken",
            "machine.network.interfaces.0.vlans.2.vip.equinixMetal.apiToken",
            "machine.systemDiskEncryption.state.keys.0.static.passphrase",
            "machine.systemDiskEncryption.state.keys.0.kms.endpoint",
            "machine.files.0.content",
        ] {
            assert!(is_sensitive(v1, &p(path)), "{path}");
        }
        for path in ["machine.ca.crt", "machine.certSANs", "machine.network.hostname", "cluster.id"] {
            assert!(!is_sensitive(v1, &p(path)), "{path}");
        }
        let cases = [
            ("WireguardConfig", "privateKey"),
            ("WireguardConfig", "peers.0.presharedKey"),
            ("UserVolumeConfig", "encryption.keys.1.static.passphrase"),
            ("VolumeConfig", "encryption.keys.0.kms.endpoint"),
            ("RegistryAuthConfig", "password"),
            ("RegistryAuthConfig", "identityToken"),
            ("RegistryTLSConfig", "clientIdentity.key"),
            ("HCloudVIPConfig", "apiToken"),
            ("SideroLinkConfig", "apiUrl"),
            ("DiscoveryIdentityConfig", "clusterSecret"),
            ("KubeServiceAccountConfig", "issuer.privateKey"),
            ("KubeEtcdEncryptionConfig", "config.resources.0.providers"),
        ];
        for (k, path) in cases {
            let k = kind(k, "v1alpha1").unwrap();
            assert!(is_sensitive(k, &p(path)), "{} {path}", k.kind);
        }
        let wg = kind("WireguardConfig", "v1alpha1").unwrap();
        assert!(!is_sensitive(wg, &p("peers.0.publicKey")));
    }

    /// Every field whose name suggests a secret is either redacted or known not to be one, so a
    /// regenerated table cannot slip a new secret past the diff.
    #[test]
    fn no_secret_looking_field_escapes() {
        const NOT_SECRETS: &[&str] = &[
            "keys",
            "keySize",
            "publicKey",
            "publicKeys",
            "adUserPortKey",
            "credentialProviderConfig",
            "disableManifestsDirectory",
            "apidCheckExtKeyUsage",
        ];
        fn walk(kind: &Kind, ty: &'static Ty, path: &Path, depth: usize, bad: &mut Vec<String>) {
            if depth > 12 {
                return;
            }
            match ty {
                Ty::Obj(o) => {
                    for f in o.fields {
                        let here = path.key(f.name);
                        let lower = f.name.to_ascii_lowercase();
                        let looks = ["key", "secret", "token", "passw", "passphrase", "credential", "auth"]
                            .iter()
                            .any(|w| lower.contains(w));
                        let allowed = NOT_SECRETS.contains(&f.name)
                            || lower.starts_with("author")
                            || lower.starts_with("authentic");
                        let leaf = !matches!(f.ty, Ty::Obj(_));
                        if looks && leaf && !allowed && !is_sensitive(kind, &here) {
                            bad.push(format!("{} {here}", kind.kind));
                        }
                        walk(kind, &f.ty, &here, depth + 1, bad);
                    }
                }
                Ty::List(t) => walk(kind, t, &path.index(0), depth + 1, bad),
                Ty::Map(t) => walk(kind, t, &path.key("x"), depth + 1, bad),
                Ty::OneOf(ts) => ts.iter().for_each(|t| walk(kind, t, path, depth + 1, bad)),
                _ => {}
            }
        }
        let mut bad = Vec::new();
        for k in all_kinds() {
            walk(k, &k.root, &Path::root(), 0, &mut bad);
        }
        assert!(bad.is_empty(), "secret-looking fields not redacted: {bad:#?}");
    }

    #[test]
    fn inert_subtrees_and_effects() {
        let v1 = v1alpha1();
        assert_eq!(inert(v1, &p("cluster.network.cni")).map(|(r, _)| r.to_string()), Some("cluster".into()));
        assert!(inert(v1, &p("machine.network")).is_none());
        assert!(inert(v1, &p("machine.network.interfaces")).is_none());
        assert_eq!(
            inert(v1, &p("machine.network.kubespan.enabled")).map(|(r, _)| r.to_string()),
            Some("machine.network.kubespan".into())
        );
        let kubelet = kind("KubeletConfig", "v1alpha1").unwrap();
        assert!(inert(kubelet, &p("image")).is_some_and(|(r, _)| r.is_root()));

        assert_eq!(effect(v1, &p("machine.network.hostname")), Effect::Live);
        assert_eq!(effect(v1, &p("machine.install.disk")), Effect::Reboot);
        assert_eq!(effect(v1, &p("machine.type")), Effect::Reboot);
        assert_eq!(effect(v1, &p("machine.somethingNew")), Effect::Reboot);
        assert_eq!(effect(v1, &p("cluster.clusterName")), Effect::Live);
        let link = kind("LinkConfig", "v1alpha1").unwrap();
        assert_eq!(effect(link, &p("mtu")), Effect::Live);
        let volume = kind("VolumeConfig", "v1alpha1").unwrap();
        assert_eq!(effect(volume, &p("provisioning.maxSize")), Effect::Reboot);
        for live in
            ["UserVolumeConfig", "RawVolumeConfig", "ExistingVolumeConfig", "ExternalVolumeConfig", "SwapVolumeConfig"]
        {
            assert_eq!(effect(kind(live, "v1alpha1").unwrap(), &p("provisioning.maxSize")), Effect::Live, "{live}");
        }
        let trim = kind("FilesystemTrimConfig", "v1alpha1").unwrap();
        assert_eq!(effect(trim, &p("interval")), Effect::Live);
        let sysctl = kind("SysctlConfig", "v1alpha1").unwrap();
        assert_eq!(effect(sysctl, &p("params.x")), Effect::Live);
        let env = kind("EnvironmentConfig", "v1alpha1").unwrap();
        assert_eq!(effect(env, &p("variables.x")), Effect::Reboot);
    }
}

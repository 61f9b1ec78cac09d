//! Text to a checked [`Config`]: splits the YAML stream, tells each document's kind the way
//! Talos's loader does (a `kind` and `apiVersion`, or the legacy `v1alpha1` shape), checks every
//! field against the schema, refuses duplicates and lists the inert parts as warnings. Pure: it
//! reads nothing but the text it is given.

use std::collections::HashMap;

use super::ConfigError;
use super::check::{Checker, Marks};
use super::document::{Config, DocId, Document};
use super::parse::{Entry, Node, RawDoc, parse_stream};
use super::policy::inert_warnings;
use super::schema::{self, Kind, Ty};
use super::value::Value;

/// A loaded config and what the loader has to say about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub config: Config,
    /// One line per accepted-but-inert part, naming it.
    pub warnings: Vec<String>,
}

/// The keys that make a document without `kind` a legacy v1alpha1 document.
const LEGACY_KEYS: &[&str] = &["machine", "cluster", "debug", "persist"];

/// Parses and checks a config (one or more YAML documents).
pub fn load(text: &str) -> Result<Loaded, ConfigError> {
    let mut docs = Vec::new();
    for raw in parse_stream(text)? {
        if let Some(found) = identify(&raw)? {
            docs.push(check_document(&found)?);
        }
    }
    if docs.is_empty() {
        return Err(ConfigError::NoDocuments);
    }
    refuse_duplicates(&docs)?;
    let warnings = docs.iter().flat_map(|d| inert_warnings(d.kind, &d.id().label(), &d.value)).collect();
    Ok(Loaded { config: Config { docs }, warnings })
}

/// A document whose kind is known but whose fields are not checked yet.
pub(crate) struct Found<'a> {
    pub kind: &'static Kind,
    pub name: Option<String>,
    pub entries: &'a [Entry],
    pub line: usize,
}

impl Found<'_> {
    pub fn id(&self) -> DocId {
        DocId { kind: self.kind.kind.to_string(), name: self.name.clone() }
    }
}

fn scalar_text<'a>(entries: &'a [Entry], key: &str, raw: &RawDoc) -> Result<Option<&'a str>, ConfigError> {
    match entries.iter().find(|e| e.key == key) {
        None => Ok(None),
        Some(Entry { value: Node::Scalar(s), .. }) => Ok(Some(s.text.as_str())),
        Some(e) => Err(ConfigError::Malformed {
            doc: raw.index,
            line: e.key_mark.line,
            reason: format!("{key} must be a string"),
        }),
    }
}

/// Tells the kind of a raw document; `None` for an empty one, which Talos skips too.
pub(crate) fn identify(raw: &RawDoc) -> Result<Option<Found<'_>>, ConfigError> {
    let Some(root) = &raw.root else { return Ok(None) };
    if root.is_null() {
        return Ok(None);
    }
    let Node::Map { entries, mark } = root else {
        return Err(ConfigError::Malformed {
            doc: raw.index,
            line: root.mark().line,
            reason: "a config document must be a mapping".into(),
        });
    };
    let malformed = |reason: &str| ConfigError::Malformed { doc: raw.index, line: mark.line, reason: reason.into() };
    let kind = scalar_text(entries, "kind", raw)?;
    let api_version = scalar_text(entries, "apiVersion", raw)?;
    let version = scalar_text(entries, "version", raw)?;
    let legacy = entries.iter().any(|e| LEGACY_KEYS.contains(&e.key.as_str()));

    let kind = match (kind, api_version) {
        (Some(kind), Some(api)) => schema::kind(kind, api).ok_or_else(|| ConfigError::UnknownKind {
            doc: raw.index,
            line: mark.line,
            kind: kind.into(),
            api_version: api.into(),
        })?,
        (Some(_), None) => return Err(malformed("missing apiVersion")),
        (None, Some(_)) => return Err(malformed("missing kind")),
        (None, None) if version.is_some() || legacy => match version {
            None | Some("v1alpha1") => schema::v1alpha1(),
            Some(other) => {
                return Err(ConfigError::UnknownKind {
                    doc: raw.index,
                    line: mark.line,
                    kind: "v1alpha1".into(),
                    api_version: other.into(),
                });
            }
        },
        (None, None) => return Err(malformed("missing kind")),
    };
    let name = if kind.named { scalar_text(entries, "name", raw)?.map(str::to_string) } else { None };
    Ok(Some(Found { kind, name, entries, line: mark.line }))
}

/// Checks a document's fields against its kind.
pub(crate) fn check_document(found: &Found<'_>) -> Result<Document, ConfigError> {
    let label = found.id().label();
    let mut marks = Marks::new();
    let root: &'static Ty = &found.kind.root;
    let skip: &[&str] = if found.kind.is_v1alpha1() { &[] } else { &["apiVersion", "kind"] };
    let map = Checker { doc: &label, marks: &mut marks }.document(found.entries, root, skip)?;
    Ok(Document { kind: found.kind, name: found.name.clone(), value: Value::Map(map), marks, line: found.line })
}

pub(crate) fn refuse_duplicates(docs: &[Document]) -> Result<(), ConfigError> {
    let mut seen: HashMap<DocId, usize> = HashMap::new();
    for d in docs {
        if let Some(first) = seen.insert(d.id(), d.line) {
            return Err(ConfigError::Duplicate { doc: d.id().label(), line: d.line, first_line: first });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Talos-generated configs, by path under `testdata/talos/`.
    pub(crate) const TALOS_FIXTURES: &[(&str, &str)] = &[
        ("v1.3/base-controlplane.yaml", include_str!("testdata/talos/v1.3/base-controlplane.yaml")),
        ("v1.3/base-worker.yaml", include_str!("testdata/talos/v1.3/base-worker.yaml")),
        ("v1.3/overrides-controlplane.yaml", include_str!("testdata/talos/v1.3/overrides-controlplane.yaml")),
        ("v1.3/overrides-worker.yaml", include_str!("testdata/talos/v1.3/overrides-worker.yaml")),
        ("v1.6/base-controlplane.yaml", include_str!("testdata/talos/v1.6/base-controlplane.yaml")),
        ("v1.6/base-worker.yaml", include_str!("testdata/talos/v1.6/base-worker.yaml")),
        ("v1.6/overrides-controlplane.yaml", include_str!("testdata/talos/v1.6/overrides-controlplane.yaml")),
        ("v1.6/overrides-worker.yaml", include_str!("testdata/talos/v1.6/overrides-worker.yaml")),
        ("v1.9/base-controlplane.yaml", include_str!("testdata/talos/v1.9/base-controlplane.yaml")),
        ("v1.9/base-worker.yaml", include_str!("testdata/talos/v1.9/base-worker.yaml")),
        ("v1.9/overrides-controlplane.yaml", include_str!("testdata/talos/v1.9/overrides-controlplane.yaml")),
        ("v1.9/overrides-worker.yaml", include_str!("testdata/talos/v1.9/overrides-worker.yaml")),
        ("v1.12/base-controlplane.yaml", include_str!("testdata/talos/v1.12/base-controlplane.yaml")),
        ("v1.12/base-worker.yaml", include_str!("testdata/talos/v1.12/base-worker.yaml")),
        ("v1.12/overrides-controlplane.yaml", include_str!("testdata/talos/v1.12/overrides-controlplane.yaml")),
        ("v1.12/overrides-worker.yaml", include_str!("testdata/talos/v1.12/overrides-worker.yaml")),
        ("v1.14/base-controlplane.yaml", include_str!("testdata/talos/v1.14/base-controlplane.yaml")),
        ("v1.14/base-worker.yaml", include_str!("testdata/talos/v1.14/base-worker.yaml")),
        ("v1.14/overrides-controlplane.yaml", include_str!("testdata/talos/v1.14/overrides-controlplane.yaml")),
        ("v1.14/overrides-worker.yaml", include_str!("testdata/talos/v1.14/overrides-worker.yaml")),
        ("v1.15/base-controlplane.yaml", include_str!("testdata/talos/v1.15/base-controlplane.yaml")),
        ("v1.15/base-worker.yaml", include_str!("testdata/talos/v1.15/base-worker.yaml")),
        ("v1.15/overrides-controlplane.yaml", include_str!("testdata/talos/v1.15/overrides-controlplane.yaml")),
        ("v1.15/overrides-worker.yaml", include_str!("testdata/talos/v1.15/overrides-worker.yaml")),
    ];

    #[test]
    fn talos_generated_configs_load_and_render_back_exactly() {
        let mut failures = Vec::new();
        for (name, text) in TALOS_FIXTURES {
            match load(text) {
                Err(e) => failures.push(format!("{name}: {e}")),
                Ok(loaded) => {
                    let again = loaded.config.to_yaml();
                    if again != *text {
                        let at = again.lines().zip(text.lines()).position(|(a, b)| a != b).unwrap_or(0);
                        failures.push(format!(
                            "{name}: renders differently from line {}: {:?} vs {:?}",
                            at + 1,
                            again.lines().nth(at),
                            text.lines().nth(at)
                        ));
                    }
                }
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// Hand-written configs that must load, with the warnings they must give.
    #[test]
    fn accepted() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "multi-document network and volumes",
                "version: v1alpha1\nmachine:\n  type: worker\n  token: abcdef.0123456789abcdef\n---\n\
                 apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nup: true\nmtu: 9000\n\
                 addresses:\n  - address: 10.0.0.5/24\n    routePriority: 100\n---\n\
                 apiVersion: v1alpha1\nkind: LinkConfig\nname: eth1\n---\n\
                 apiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n\
                 \x20 diskSelector:\n    match: disk.transport == \"nvme\"\n  minSize: 10GiB\n",
                &[],
            ),
            ("multi-document only", "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: node-1\n", &[]),
            (
                "JSON is YAML too",
                "{\"version\": \"v1alpha1\", \"machine\": {\"type\": \"worker\", \"certSANs\": [\"10.0.0.1\"]}}",
                &[],
            ),
            ("empty documents are skipped", "---\n---\nversion: v1alpha1\ndebug: true\n---\n", &[]),
            ("legacy document without version", "machine:\n  type: controlplane\n  network:\n    hostname: cp1\n", &[]),
            (
                "YAML 1.1 booleans and numbers as Talos reads them",
                "version: v1alpha1\nmachine:\n  files:\n    - path: /var/x\n      permissions: 0644\n\
                 \x20     op: create\n      content: x\n  install:\n    wipe: yes\n",
                &[],
            ),
            (
                "inert parts are named once each",
                "version: v1alpha1\nmachine:\n  kubelet:\n    image: k\n  nodeLabels:\n    a: b\n\
                 cluster:\n  clusterName: c\n  network:\n    dnsDomain: d\n---\n\
                 apiVersion: v1alpha1\nkind: KubeletConfig\nimage: k\n",
                &[
                    "v1alpha1: machine.kubelet: accepted and kept, not acted on (Kubernetes and etcd are out of scope)",
                    "v1alpha1: machine.nodeLabels: accepted and kept, not acted on (Kubernetes and etcd are out of scope)",
                    "v1alpha1: cluster: accepted and kept, not acted on (Kubernetes and etcd are out of scope)",
                    "KubeletConfig: accepted and kept, not acted on (Kubernetes and etcd are out of scope)",
                ],
            ),
            (
                "free-form fields take any YAML",
                "version: v1alpha1\nmachine:\n  baseRuntimeSpecOverrides:\n    process:\n      rlimits:\n\
                 \x20       - type: RLIMIT_NOFILE\n          hard: 1024\n",
                &[
                    "v1alpha1: machine.baseRuntimeSpecOverrides: accepted and kept, not acted on (containers are out of scope)",
                ],
            ),
        ];
        for (name, text, warnings) in cases {
            let loaded = load(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(loaded.warnings, *warnings, "{name}");
            let again = load(&loaded.config.to_yaml()).unwrap_or_else(|e| panic!("{name}: reload: {e}"));
            assert_eq!(again.config, loaded.config, "{name}: round trip");
        }
    }

    #[test]
    fn values_are_typed_as_talos_reads_them() {
        let text = "version: v1alpha1\nmachine:\n  network:\n    hostname: 1234\n  files:\n\
                    \x20 - path: /x\n    permissions: 0644\n    op: create\n    content: ''\n  install:\n    wipe: on\n";
        let config = load(text).unwrap().config;
        let v1 = config.v1alpha1().unwrap().value();
        use crate::config::value::Path;
        assert_eq!(v1.at(&Path::keys("machine.network.hostname")), Some(&Value::String("1234".into())));
        let mode = Path::keys("machine.files").index(0).key("permissions");
        assert_eq!(v1.at(&mode), Some(&Value::Int(0o644)));
        assert_eq!(v1.at(&Path::keys("machine.install.wipe")), Some(&Value::Bool(true)));
        assert_eq!(config.v1alpha1().unwrap().line_of(&Path::keys("machine.install.wipe")), Some(11));
    }

    /// Inputs that must be refused, with the exact message.
    #[test]
    fn refused() {
        let cases: &[(&str, &str)] = &[
            ("", "no configuration documents found"),
            ("---\n", "no configuration documents found"),
            (
                "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        mtux: 1\n",
                "v1alpha1: machine.network.interfaces[0].mtux: unknown field (line 6)",
            ),
            (
                "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtu: x\n",
                "LinkConfig eth0: mtu: expected integer, got string \"x\" (line 4)",
            ),
            (
                "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtu: \"1500\"\n",
                "LinkConfig eth0: mtu: expected integer, got string \"1500\" (line 4)",
            ),
            (
                "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nup: maybe\n",
                "LinkConfig eth0: up: expected boolean, got string \"maybe\" (line 4)",
            ),
            (
                "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\naddresses: 10.0.0.1/24\n",
                "LinkConfig eth0: addresses: expected list, got string \"10.0.0.1/24\" (line 4)",
            ),
            (
                "apiVersion: v1alpha1\nkind: UserVolumeConfig\nname: d\nfilesystem:\n  type: zfs\n",
                "UserVolumeConfig d: filesystem.type: \"zfs\" is not one of ext4, xfs, btrfs (line 5)",
            ),
            (
                "version: v1alpha1\nmachine:\n  nodeLabels:\n    kubernetes.io/os: [linux]\n",
                "v1alpha1: machine.nodeLabels[\"kubernetes.io/os\"]: expected string, got list (line 4)",
            ),
            (
                "apiVersion: v1alpha1\nkind: NoSuchConfig\n",
                "document 1 (line 1): unknown document kind \"NoSuchConfig\" with apiVersion \"v1alpha1\"",
            ),
            (
                "machine: {}\n---\napiVersion: v1alpha9\nkind: LinkConfig\nname: x\n",
                "document 2 (line 3): unknown document kind \"LinkConfig\" with apiVersion \"v1alpha9\"",
            ),
            (
                "version: v1alpha2\nmachine: {}\n",
                "document 1 (line 1): unknown document kind \"v1alpha1\" with apiVersion \"v1alpha2\"",
            ),
            ("kind: LinkConfig\nname: x\n", "document 1 (line 1): missing apiVersion"),
            ("apiVersion: v1alpha1\nname: x\n", "document 1 (line 1): missing kind"),
            ("foo: bar\n", "document 1 (line 1): missing kind"),
            ("- a\n- b\n", "document 1 (line 1): a config document must be a mapping"),
            (
                "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\n",
                "LinkConfig eth0: duplicate document (line 5; first at line 1)",
            ),
            (
                "machine: {}\n---\nversion: v1alpha1\ndebug: true\n",
                "v1alpha1: duplicate document (line 3; first at line 1)",
            ),
            (
                "version: v1alpha1\n---\napiVersion: v1alpha1\nkind: SysctlConfig\nparams: {a: 1\n",
                "document 2: YAML syntax error at line 5, column 9: unclosed bracket '{'",
            ),
            ("apiVersion: v1alpha1\nkind: SysctlConfig\nname: x\n", "SysctlConfig: name: unknown field (line 3)"),
            ("version: v1alpha1\nmachine:\n  $patch: delete\n", "v1alpha1: machine.$patch: unknown field (line 3)"),
        ];
        for (text, want) in cases {
            match load(text) {
                Ok(_) => panic!("accepted: {text:?}"),
                Err(e) => assert_eq!(e.to_string(), *want, "{text:?}"),
            }
        }
    }
}

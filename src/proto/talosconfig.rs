//! talosconfig: the client configuration file, in Talos's format exactly. A file holds named
//! contexts, each with the endpoints to dial, the default nodes to target, and the OS CA, client
//! certificate and key (base64 of PEM); `context` names the current one. Fields Talos knows but
//! talosbox does not use (`auth`, `cluster`, `proxy-url`) and any others in the file are kept and
//! written back, never dropped; the deprecated `target` is folded into `endpoints` on reading, as
//! Talos does.
//!
//! The file is found as Talos finds it: `$TALOSCONFIG`, then `$TALOS_HOME/config` (an absolute
//! `$TALOS_HOME` only) or `~/.talos/config`, then the read-only
//! `/var/run/secrets/talos.dev/config`. It is written with mode 0600, next to its final name and
//! renamed into place, so a reader never sees half a file. Only the load and save helpers touch
//! the filesystem; everything else is pure.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use crate::pki::{CertAndKey, PkiError, RoleSet, SecretsBundle};
use crate::yaml::Node;

pub const TALOSCONFIG_ENV: &str = "TALOSCONFIG";
pub const TALOS_HOME_ENV: &str = "TALOS_HOME";
/// Where Talos mounts a talosconfig into a pod (read-only).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/talos.dev";
/// The file's name inside a Talos directory.
pub const FILE_NAME: &str = "config";

/// Everything that can go wrong with a talosconfig; messages name the file and the context.
#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    #[error("reading talosconfig {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("parsing talosconfig {}: {detail}", path.display())]
    Parse { path: PathBuf, detail: String },
    #[error("writing talosconfig {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("talosconfig {} is read-only", path.display())]
    ReadOnly { path: PathBuf },
    #[error("talosconfig {file}: context {name:?} not found (contexts: {known})")]
    NoSuchContext { file: String, name: String, known: String },
    #[error("talosconfig {file}: no current context; choose one with `talosctl config context <name>`")]
    NoCurrentContext { file: String },
    #[error("talosconfig {file}: context {context:?}: {field}: {detail}")]
    Field { file: String, context: String, field: &'static str, detail: String },
    #[error("minting a client certificate for context {context:?}: {source}")]
    Mint { context: String, source: PkiError },
    #[error("finding the talosconfig: none of $TALOSCONFIG, $TALOS_HOME or $HOME is set")]
    NoPath,
}

/// A whole talosconfig.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// The current context's name; empty when none is chosen.
    pub context: String,
    pub contexts: BTreeMap<String, Context>,
    /// Top-level keys talosbox does not know, kept as read.
    pub extra: BTreeMap<String, Node>,
    /// The file it was read from, for messages.
    path: Option<PathBuf>,
}

/// One context: where to dial and with what credentials.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    /// apid addresses dialled (port 50000 unless given).
    pub endpoints: Vec<String>,
    /// Default targets, sent as `node` metadata and never dialled.
    pub nodes: Vec<String>,
    /// base64 of the OS CA PEM.
    pub ca: String,
    /// base64 of the client certificate PEM.
    pub crt: String,
    /// base64 of the client key PEM.
    pub key: String,
    pub auth: Auth,
    pub cluster: String,
    pub proxy_url: String,
    /// Keys talosbox does not know, kept as read.
    pub extra: BTreeMap<String, Node>,
}

/// Alternative authentication Talos's clients support (Omni): kept, not used here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Auth {
    pub basic: Option<BasicAuth>,
    pub siderov1: Option<SideroV1>,
    pub extra: BTreeMap<String, Node>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BasicAuth {
    pub username: String,
    pub password: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SideroV1 {
    pub identity: String,
}

impl Auth {
    fn is_empty(&self) -> bool {
        self.basic.is_none() && self.siderov1.is_none() && self.extra.is_empty()
    }
}

/// A context renamed by [`Config::merge`] because the name was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    pub from: String,
    pub to: String,
}

/// A context's credentials, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The CA to trust, PEM.
    pub ca_pem: Option<String>,
    /// The client certificate and key, PEM.
    pub identity: Option<CertAndKey>,
}

impl Context {
    /// A context with a client certificate for `roles` minted offline from the bundle's OS CA,
    /// valid from `now` for `ttl`: what `talosctl config new --roles` yields, without a node.
    pub fn from_bundle(
        bundle: &SecretsBundle,
        roles: &RoleSet,
        endpoints: &[String],
        ttl: Duration,
        now: SystemTime,
    ) -> Result<Context, PkiError> {
        let client = bundle.client_certificate(roles, ttl, now)?;
        Ok(Context {
            endpoints: endpoints.to_vec(),
            ca: STANDARD.encode(bundle.certs.os.crt_pem.as_bytes()),
            crt: STANDARD.encode(client.crt_pem.as_bytes()),
            key: STANDARD.encode(client.key_pem.as_bytes()),
            ..Context::default()
        })
    }

    fn to_node(&self) -> Node {
        let mut entries = vec![("endpoints".to_owned(), Node::seq(&self.endpoints))];
        if !self.nodes.is_empty() {
            entries.push(("nodes".into(), Node::seq(&self.nodes)));
        }
        for (key, value) in [("ca", &self.ca), ("crt", &self.crt), ("key", &self.key)] {
            if !value.is_empty() {
                entries.push((key.into(), value.into()));
            }
        }
        if !self.auth.is_empty() {
            let mut auth = Vec::new();
            if let Some(b) = &self.auth.basic {
                auth.push((
                    "basic".to_owned(),
                    Node::map([("username", (&b.username).into()), ("password", (&b.password).into())]),
                ));
            }
            if let Some(s) = &self.auth.siderov1 {
                auth.push(("siderov1".into(), Node::map([("identity", (&s.identity).into())])));
            }
            auth.extend(self.auth.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
            entries.push(("auth".into(), Node::Map(auth)));
        }
        for (key, value) in [("cluster", &self.cluster), ("proxy-url", &self.proxy_url)] {
            if !value.is_empty() {
                entries.push((key.into(), value.into()));
            }
        }
        entries.extend(self.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        Node::Map(entries)
    }
}

impl Config {
    /// A file holding `context` alone, named `name` and current.
    pub fn single(name: &str, context: Context) -> Config {
        Config { context: name.to_owned(), contexts: BTreeMap::from([(name.to_owned(), context)]), ..Config::default() }
    }

    /// A talosconfig with one context `name` whose client certificate for `roles` is minted
    /// offline from the bundle's OS CA (Talos can only do this through a node: its issue #12576).
    pub fn from_bundle(
        bundle: &SecretsBundle,
        name: &str,
        roles: &RoleSet,
        endpoints: &[String],
        ttl: Duration,
        now: SystemTime,
    ) -> Result<Config, ClientConfigError> {
        let context = Context::from_bundle(bundle, roles, endpoints, ttl, now)
            .map_err(|source| ClientConfigError::Mint { context: name.to_owned(), source })?;
        Ok(Config::single(name, context))
    }

    /// Parses a talosconfig's text; `path` only names it in errors.
    pub fn from_yaml(text: &str, path: &Path) -> Result<Config, ClientConfigError> {
        if text.trim().is_empty() {
            return Ok(Config { path: Some(path.to_owned()), ..Config::default() });
        }
        let raw: RawConfig = serde_saphyr::from_str(text)
            .map_err(|e| ClientConfigError::Parse { path: path.to_owned(), detail: e.to_string() })?;
        let contexts = raw
            .contexts
            .unwrap_or_default()
            .into_iter()
            .map(|(name, c)| (name, c.unwrap_or_default().into_context()))
            .collect();
        Ok(Config { context: raw.context.unwrap_or_default(), contexts, extra: raw.extra, path: Some(path.to_owned()) })
    }

    /// The text Talos writes for the same values.
    pub fn to_yaml(&self) -> String {
        let contexts = Node::Map(self.contexts.iter().map(|(name, c)| (name.clone(), c.to_node())).collect());
        let mut entries = vec![("context".to_owned(), Node::from(&self.context)), ("contexts".into(), contexts)];
        entries.extend(self.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        crate::yaml::to_string(&Node::Map(entries))
    }

    pub fn load(path: &Path) -> Result<Config, ClientConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ClientConfigError::Read { path: path.to_owned(), source })?;
        Config::from_yaml(&text, path)
    }

    /// The talosconfig `lookup` finds, or an empty one bound to where it would be created.
    pub fn load_default(lookup: &Lookup) -> Result<(Config, ConfigPath), ClientConfigError> {
        let found = lookup.find()?;
        let config = if found.path.exists() {
            Config::load(&found.path)?
        } else {
            Config { path: Some(found.path.clone()), ..Config::default() }
        };
        Ok((config, found))
    }

    /// The file this was read from.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Writes the file with mode 0600 (its directory 0700 if created): to a temporary name
    /// beside it first, then renamed over the old one.
    pub fn save(&self, path: &Path) -> Result<(), ClientConfigError> {
        let werr = |source| ClientConfigError::Write { path: path.to_owned(), source };
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(werr)?;
        let mut tmp_name = path.file_name().map(OsString::from).unwrap_or_else(|| FILE_NAME.into());
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        let written = (|| {
            let mut file = crate::pki::open_private(&tmp)?;
            file.write_all(self.to_yaml().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(werr)
    }

    /// Saves to a path found by [`Lookup`], refusing the read-only one.
    pub fn save_to(&self, target: &ConfigPath) -> Result<(), ClientConfigError> {
        if !target.writable {
            return Err(ClientConfigError::ReadOnly { path: target.path.clone() });
        }
        self.save(&target.path)
    }

    /// Adds `other`'s contexts. A name already taken becomes `name-1` (or the first free
    /// `name-N`), as Talos renames; `other`'s current context, when set, becomes current.
    pub fn merge(&mut self, other: Config) -> Vec<Rename> {
        let mut renames = Vec::new();
        let mut mapped = BTreeMap::new();
        for (name, context) in other.contexts {
            let mut merged = name.clone();
            let mut n = 1;
            while self.contexts.contains_key(&merged) {
                merged = format!("{name}-{n}");
                n += 1;
            }
            if merged != name {
                renames.push(Rename { from: name.clone(), to: merged.clone() });
            }
            mapped.insert(name, merged.clone());
            self.contexts.insert(merged, context);
        }
        if !other.context.is_empty() {
            self.context = mapped.get(&other.context).cloned().unwrap_or_default();
        }
        renames
    }

    /// The current context and its name.
    pub fn current(&self) -> Result<(&str, &Context), ClientConfigError> {
        if self.context.is_empty() {
            return Err(ClientConfigError::NoCurrentContext { file: self.file() });
        }
        let context = self.contexts.get(&self.context).ok_or_else(|| self.no_such(&self.context))?;
        Ok((&self.context, context))
    }

    pub fn current_mut(&mut self) -> Result<&mut Context, ClientConfigError> {
        self.current()?;
        let name = self.context.clone();
        let err = self.no_such(&name);
        self.contexts.get_mut(&name).ok_or(err)
    }

    /// `talosctl config context <name>`.
    pub fn set_current(&mut self, name: &str) -> Result<(), ClientConfigError> {
        if !self.contexts.contains_key(name) {
            return Err(self.no_such(name));
        }
        self.context = name.to_owned();
        Ok(())
    }

    /// `talosctl config endpoint …`, on the current context.
    pub fn set_endpoints(&mut self, endpoints: Vec<String>) -> Result<(), ClientConfigError> {
        self.current_mut()?.endpoints = endpoints;
        Ok(())
    }

    /// `talosctl config node …`, on the current context.
    pub fn set_nodes(&mut self, nodes: Vec<String>) -> Result<(), ClientConfigError> {
        self.current_mut()?.nodes = nodes;
        Ok(())
    }

    /// The credentials of context `name`, decoded from base64.
    pub fn credentials(&self, name: &str) -> Result<Credentials, ClientConfigError> {
        let context = self.contexts.get(name).ok_or_else(|| self.no_such(name))?;
        let decode = |field: &'static str, value: &str| -> Result<Option<String>, ClientConfigError> {
            if value.is_empty() {
                return Ok(None);
            }
            let bad = |detail: String| ClientConfigError::Field {
                file: self.file(),
                context: name.to_owned(),
                field,
                detail,
            };
            let bytes = STANDARD.decode(value.trim()).map_err(|e| bad(format!("not base64: {e}")))?;
            String::from_utf8(bytes).map(Some).map_err(|_| bad("not PEM text".into()))
        };
        let ca_pem = decode("ca", &context.ca)?;
        let identity = match (decode("crt", &context.crt)?, decode("key", &context.key)?) {
            (Some(crt_pem), Some(key_pem)) => Some(CertAndKey { crt_pem, key_pem }),
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(ClientConfigError::Field {
                    file: self.file(),
                    context: name.to_owned(),
                    field: "crt/key",
                    detail: "a client certificate needs both crt and key".into(),
                });
            }
        };
        Ok(Credentials { ca_pem, identity })
    }

    fn file(&self) -> String {
        self.path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(not from a file)".into())
    }

    fn no_such(&self, name: &str) -> ClientConfigError {
        let known = self.contexts.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
        ClientConfigError::NoSuchContext {
            file: self.file(),
            name: name.to_owned(),
            known: if known.is_empty() { "none".into() } else { known },
        }
    }
}

/// A place a talosconfig may live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigPath {
    pub path: PathBuf,
    /// False for the service-account mount, which talosctl only reads.
    pub writable: bool,
}

/// The inputs of the lookup, so tests need not touch the real environment or home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub talosconfig: Option<PathBuf>,
    pub talos_home: Option<PathBuf>,
    pub home: Option<PathBuf>,
    pub service_account_dir: PathBuf,
}

impl Lookup {
    /// From `$TALOSCONFIG`, `$TALOS_HOME` and `$HOME`.
    pub fn from_env() -> Lookup {
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        Lookup {
            talosconfig: var(TALOSCONFIG_ENV),
            talos_home: var(TALOS_HOME_ENV),
            home: var("HOME"),
            service_account_dir: PathBuf::from(SERVICE_ACCOUNT_DIR),
        }
    }

    /// The Talos directory: `$TALOS_HOME` when absolute, else `~/.talos`.
    pub fn talos_dir(&self) -> Option<PathBuf> {
        match &self.talos_home {
            Some(dir) if dir.is_absolute() => Some(dir.clone()),
            _ => self.home.as_ref().map(|h| h.join(".talos")),
        }
    }

    /// Every candidate, in priority order.
    pub fn candidates(&self) -> Vec<ConfigPath> {
        let mut out = Vec::new();
        if let Some(path) = &self.talosconfig {
            out.push(ConfigPath { path: path.clone(), writable: true });
        }
        if let Some(dir) = self.talos_dir() {
            out.push(ConfigPath { path: dir.join(FILE_NAME), writable: true });
        }
        out.push(ConfigPath { path: self.service_account_dir.join(FILE_NAME), writable: false });
        out
    }

    /// The first candidate that exists; when none does, the first writable one (where a new
    /// file would be created).
    pub fn find(&self) -> Result<ConfigPath, ClientConfigError> {
        let candidates = self.candidates();
        if let Some(found) = candidates.iter().find(|c| c.path.exists()) {
            return Ok(found.clone());
        }
        candidates.into_iter().find(|c| c.writable).ok_or(ClientConfigError::NoPath)
    }
}

// The file's shape.

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    contexts: Option<BTreeMap<String, Option<RawContext>>>,
    #[serde(flatten)]
    extra: BTreeMap<String, Node>,
}

#[derive(Deserialize, Default)]
struct RawContext {
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    endpoints: Option<Vec<String>>,
    #[serde(default)]
    nodes: Option<Vec<String>>,
    #[serde(default)]
    ca: Option<String>,
    #[serde(default)]
    crt: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    auth: Option<RawAuth>,
    #[serde(default)]
    cluster: Option<String>,
    #[serde(default, rename = "proxy-url")]
    proxy_url: Option<String>,
    #[serde(flatten)]
    extra: BTreeMap<String, Node>,
}

#[derive(Deserialize, Default)]
struct RawAuth {
    #[serde(default)]
    basic: Option<RawBasic>,
    #[serde(default)]
    siderov1: Option<RawSideroV1>,
    #[serde(flatten)]
    extra: BTreeMap<String, Node>,
}

#[derive(Deserialize)]
struct RawBasic {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

#[derive(Deserialize)]
struct RawSideroV1 {
    #[serde(default)]
    identity: String,
}

impl RawContext {
    fn into_context(self) -> Context {
        let mut endpoints = self.endpoints.unwrap_or_default();
        // Talos's `upgrade`: the single deprecated target becomes one more endpoint.
        if let Some(target) = self.target.filter(|t| !t.is_empty()) {
            endpoints.push(target);
        }
        let auth = self.auth.unwrap_or_default();
        Context {
            endpoints,
            nodes: self.nodes.unwrap_or_default(),
            ca: self.ca.unwrap_or_default(),
            crt: self.crt.unwrap_or_default(),
            key: self.key.unwrap_or_default(),
            auth: Auth {
                basic: auth.basic.map(|b| BasicAuth { username: b.username, password: b.password }),
                siderov1: auth.siderov1.map(|s| SideroV1 { identity: s.identity }),
                extra: auth.extra,
            },
            cluster: self.cluster.unwrap_or_default(),
            proxy_url: self.proxy_url.unwrap_or_default(),
            extra: self.extra,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::pki::{ExtKeyUsage, Role, inspect_pem, tls};

    /// A fresh directory under the system temp dir, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("talosbox-talosconfig-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    const TALOS_STYLE: &str = "\
context: mycluster
contexts:
    mycluster:
        endpoints:
            - 10.5.0.2
            - 10.5.0.3
        nodes:
            - 10.5.0.2
        ca: Q0E=
        crt: Q1JU
        key: S0VZ
    omni:
        endpoints:
            - https://omni.example
        auth:
            siderov1:
                identity: someone@example.com
        cluster: prod
        proxy-url: socks5://localhost:1080
";

    #[test]
    fn talos_s_format_round_trips_exactly() {
        let config = Config::from_yaml(TALOS_STYLE, &p("t")).unwrap();
        assert_eq!(config.context, "mycluster");
        let (name, current) = config.current().unwrap();
        assert_eq!(
            (name, current.endpoints.as_slice()),
            ("mycluster", &["10.5.0.2".to_owned(), "10.5.0.3".to_owned()][..])
        );
        let omni = &config.contexts["omni"];
        assert_eq!(omni.auth.siderov1, Some(SideroV1 { identity: "someone@example.com".into() }));
        assert_eq!((omni.cluster.as_str(), omni.proxy_url.as_str()), ("prod", "socks5://localhost:1080"));
        assert_eq!(config.to_yaml(), TALOS_STYLE);
    }

    #[test]
    fn unknown_fields_are_kept_and_target_becomes_an_endpoint() {
        let text = "\
context: a
contexts:
    a:
        target: 10.0.0.9
        endpoints: []
        auth:
            basic:
                username: u
                password: pw
            future: {x: 1}
        newfield: kept
toplevel: also
";
        let config = Config::from_yaml(text, &p("t")).unwrap();
        let a = &config.contexts["a"];
        assert_eq!(a.endpoints, ["10.0.0.9"]);
        assert_eq!(a.auth.basic, Some(BasicAuth { username: "u".into(), password: "pw".into() }));
        let out = config.to_yaml();
        for kept in ["newfield: kept", "toplevel: also", "future:", "x: 1", "password: pw"] {
            assert!(out.contains(kept), "{kept:?} missing from:\n{out}");
        }
        assert!(!out.contains("target"), "{out}");
        assert_eq!(Config::from_yaml(&out, &p("t")).unwrap().to_yaml(), out);
    }

    #[test]
    fn empty_and_null_parts_read_as_empty() {
        let config = Config::from_yaml("", &p("t")).unwrap();
        assert!(config.contexts.is_empty() && config.context.is_empty());
        assert_eq!(config.to_yaml(), "context: \"\"\ncontexts: {}\n");
        let config = Config::from_yaml("context: x\ncontexts:\n    x:\n", &p("t")).unwrap();
        assert_eq!(config.contexts["x"], Context::default());
        let err = Config::from_yaml("contexts: [1, 2]", &p("/home/u/.talos/config")).unwrap_err().to_string();
        assert!(err.starts_with("parsing talosconfig /home/u/.talos/config:"), "{err}");
    }

    #[test]
    fn merge_renames_clashes_like_talos() {
        let ctx = |e: &str| Context { endpoints: vec![e.into()], ..Context::default() };
        // Into an empty config: taken as is, current included.
        let mut config = Config::default();
        let renames = config.merge(Config::single("foo", ctx("1")));
        assert!(renames.is_empty());
        assert_eq!(config.context, "foo");
        // No clash, no current in the other: ours stays current.
        let mut other = Config::single("bar", ctx("2"));
        other.context.clear();
        assert!(config.merge(other).is_empty());
        assert_eq!((config.context.as_str(), config.contexts.len()), ("foo", 2));
        // A clash: renamed foo-1, then foo-2, and the renamed one becomes current.
        assert_eq!(config.merge(Config::single("foo", ctx("3"))), [Rename { from: "foo".into(), to: "foo-1".into() }]);
        assert_eq!(config.context, "foo-1");
        assert_eq!(config.merge(Config::single("foo", ctx("4"))), [Rename { from: "foo".into(), to: "foo-2".into() }]);
        assert_eq!(config.contexts["foo"], ctx("1"));
        assert_eq!(config.contexts["foo-2"], ctx("4"));
        assert_eq!(config.context, "foo-2");
    }

    #[test]
    fn current_context_edits_and_errors_name_file_and_context() {
        let mut config = Config::from_yaml(TALOS_STYLE, &p("/tmp/tc")).unwrap();
        config.set_endpoints(vec!["cp1".into(), "cp2".into()]).unwrap();
        config.set_nodes(vec!["w3".into()]).unwrap();
        assert_eq!(config.contexts["mycluster"].endpoints, ["cp1", "cp2"]);
        assert_eq!(config.contexts["mycluster"].nodes, ["w3"]);
        config.set_current("omni").unwrap();
        assert_eq!(config.current().unwrap().0, "omni");
        let err = config.set_current("nope").unwrap_err().to_string();
        assert_eq!(err, "talosconfig /tmp/tc: context \"nope\" not found (contexts: mycluster, omni)");
        config.context.clear();
        let err = config.set_nodes(vec![]).unwrap_err().to_string();
        assert!(err.starts_with("talosconfig /tmp/tc: no current context"), "{err}");
        let err = config.credentials("mycluster").unwrap();
        assert_eq!(err.ca_pem.as_deref(), Some("CA"));
        config.contexts.get_mut("mycluster").unwrap().key = "!!".into();
        let err = config.credentials("mycluster").unwrap_err().to_string();
        assert!(err.contains("/tmp/tc") && err.contains("\"mycluster\"") && err.contains("key: not base64"), "{err}");
    }

    #[test]
    fn save_is_private_and_atomic_and_load_reads_it_back() {
        let dir = TempDir::new("save");
        let path = dir.0.join("nested").join("config");
        let config = Config::from_yaml(TALOS_STYLE, &p("x")).unwrap();
        config.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        // Overwriting an existing, looser file leaves it 0600 and nothing beside it.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        config.save(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [OsString::from("config")]);
        let back = Config::load(&path).unwrap();
        assert_eq!(back.path(), Some(path.as_path()));
        assert_eq!(back.to_yaml(), TALOS_STYLE);
        let err = Config::load(&dir.0.join("missing")).unwrap_err().to_string();
        assert!(err.starts_with("reading talosconfig ") && err.contains("missing"), "{err}");
        let ro = ConfigPath { path: dir.0.join("ro"), writable: false };
        assert!(matches!(config.save_to(&ro), Err(ClientConfigError::ReadOnly { .. })));
    }

    #[test]
    fn lookup_order_follows_talos() {
        let dir = TempDir::new("lookup");
        let explicit = dir.0.join("explicit");
        let home = dir.0.join("home");
        let talos_home = dir.0.join("talos-home");
        let sa = dir.0.join("sa");
        let lookup = Lookup {
            talosconfig: Some(explicit.clone()),
            talos_home: Some(talos_home.clone()),
            home: Some(home.clone()),
            service_account_dir: sa.clone(),
        };
        let paths: Vec<_> = lookup.candidates().into_iter().map(|c| (c.path, c.writable)).collect();
        assert_eq!(paths, [(explicit.clone(), true), (talos_home.join("config"), true), (sa.join("config"), false)]);

        // Nothing exists: the first writable candidate, where a new file goes.
        assert_eq!(lookup.find().unwrap().path, explicit);
        let (config, at) = Config::load_default(&lookup).unwrap();
        assert!(config.contexts.is_empty());
        assert_eq!(at.path, explicit);

        // Only the read-only one exists: it is found, and saving to it is refused.
        std::fs::create_dir_all(&sa).unwrap();
        Config::single("sa", Context::default()).save(&sa.join("config")).unwrap();
        let found = lookup.find().unwrap();
        assert_eq!((found.path.clone(), found.writable), (sa.join("config"), false));
        assert!(Config::load_default(&lookup).unwrap().0.contexts.contains_key("sa"));

        // $TALOS_HOME/config beats it; $TALOSCONFIG beats both.
        Config::single("home", Context::default()).save(&talos_home.join("config")).unwrap();
        assert_eq!(lookup.find().unwrap().path, talos_home.join("config"));
        Config::single("explicit", Context::default()).save(&explicit).unwrap();
        assert_eq!(lookup.find().unwrap().path, explicit);

        // A relative $TALOS_HOME is ignored in favour of ~/.talos, as Talos does.
        let relative =
            Lookup { talosconfig: None, talos_home: Some(p("rel")), home: Some(home.clone()), service_account_dir: sa };
        assert_eq!(relative.talos_dir(), Some(home.join(".talos")));
        assert_eq!(relative.candidates()[0].path, home.join(".talos").join("config"));
        let nothing =
            Lookup { talosconfig: None, talos_home: None, home: None, service_account_dir: p("/nonexistent-sa") };
        assert!(matches!(nothing.find(), Err(ClientConfigError::NoPath)));
    }

    #[test]
    fn from_bundle_mints_a_role_limited_client_offline() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let bundle = SecretsBundle::generate(now).unwrap();
        let roles = RoleSet::from([Role::Reader]);
        let config =
            Config::from_bundle(&bundle, "lab", &roles, &["10.5.0.2".into()], Duration::from_secs(3600), now).unwrap();
        assert_eq!(config.current().unwrap().1.endpoints, ["10.5.0.2"]);
        let creds = config.credentials("lab").unwrap();
        assert_eq!(creds.ca_pem.as_deref(), Some(bundle.certs.os.crt_pem.as_str()));
        let identity = creds.identity.unwrap();
        let info = inspect_pem(&identity.crt_pem).unwrap();
        assert_eq!(info.roles(), (roles, vec![]));
        assert_eq!(info.extended_key_usages, [ExtKeyUsage::ClientAuth].into());
        assert_eq!(info.not_after, now + Duration::from_secs(3600));
        assert!(info.is_signed_by(&inspect_pem(&bundle.certs.os.crt_pem).unwrap()));
        // Usable as-is for the API door's TLS.
        tls::client_config(&[creds.ca_pem.unwrap()], Some(&identity)).unwrap();
        let reread = Config::from_yaml(&config.to_yaml(), &p("t")).unwrap();
        assert_eq!(reread.contexts, config.contexts);
    }
}

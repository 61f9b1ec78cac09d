//! A machine's desired configuration and its credentials, from its spec and the fleet's
//! Secrets and ConfigMaps. The watcher's dry run and the reconciler's apply both take the
//! text from [`DesiredConfig::resolve`], so a poll compares exactly what an apply would send.
//!
//! Rendering is `talosctl apply-config --config-patch`'s: the base loaded and checked against
//! the schema, each patch applied in order, the result validated and written out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use sha2::Digest as _;

use super::model::{DEFAULT_CONFIG_KEY, DEFAULT_SECRETS_KEY, DEFAULT_TALOSCONFIG_KEY, KeyRef, TalosMachine};
use super::store::{Store, StoreError};

#[derive(Debug, Clone, thiserror::Error)]
pub enum RenderError {
    /// A referenced Secret or ConfigMap (or its key) does not exist.
    #[error("{machine}: {field}: {kind} {name:?} {detail}")]
    Missing { machine: String, field: &'static str, kind: &'static str, name: String, detail: String },
    #[error("{machine}: {field}: {detail}")]
    Invalid { machine: String, field: &'static str, detail: String },
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl RenderError {
    /// The machine's credentials are gone: its fleet (secrets bundle or talosconfig) no
    /// longer exists, so the machine is Orphaned.
    pub fn orphans(&self) -> bool {
        matches!(self, RenderError::Missing { field, .. } if field.starts_with("spec.credentials"))
    }
}

/// The desired configuration of one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredConfig {
    pub text: String,
    /// SHA-256 of `text`, hex.
    pub hash: String,
}

/// Renders `base` with `patches` applied, as the config module checks them; `what` names the
/// source in errors.
pub fn render(base: &str, patches: &[String]) -> Result<String, String> {
    let loaded = crate::config::load(base).map_err(|e| format!("base: {e}"))?;
    let parsed = patches
        .iter()
        .enumerate()
        .map(|(i, p)| crate::config::patch::Patch::parse(p).map_err(|e| format!("patches[{i}]: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let config = crate::config::patch::apply(&loaded.config, &parsed).map_err(|e| format!("patches: {e}"))?;
    crate::config::validate(&config).map_err(|e| format!("after patching: {e}"))?;
    Ok(config.to_yaml())
}

pub fn hash(text: &str) -> String {
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

async fn key_of(
    store: &dyn Store,
    m: &TalosMachine,
    field: &'static str,
    kind: &'static str,
    r: &KeyRef,
    default: &str,
) -> Result<String, RenderError> {
    let ns = &m.metadata.namespace;
    let data = match kind {
        "Secret" => store.secret(ns, &r.name).await?,
        _ => store.config_map(ns, &r.name).await?,
    };
    let missing = |detail: String| RenderError::Missing {
        machine: m.key().to_string(),
        field,
        kind,
        name: r.name.clone(),
        detail,
    };
    let data = data.ok_or_else(|| missing(format!("does not exist in namespace {ns:?}")))?;
    let key = r.key_or(default);
    data.get(key).cloned().ok_or_else(|| missing(format!("has no key {key:?}")))
}

impl DesiredConfig {
    /// The machine's desired configuration, read fresh from the store.
    pub async fn resolve(store: &dyn Store, m: &TalosMachine) -> Result<DesiredConfig, RenderError> {
        let source = &m.spec.config;
        let base = match (&source.inline, &source.config_ref) {
            (Some(text), _) => text.clone(),
            (None, Some(r)) => key_of(store, m, "spec.config.configRef", "ConfigMap", r, DEFAULT_CONFIG_KEY).await?,
            (None, None) => {
                return Err(RenderError::Invalid {
                    machine: m.key().to_string(),
                    field: "spec.config",
                    detail: "neither inline nor configRef is set".into(),
                });
            }
        };
        let text = render(&base, &source.patches).map_err(|detail| RenderError::Invalid {
            machine: m.key().to_string(),
            field: "spec.config",
            detail,
        })?;
        Ok(DesiredConfig { hash: hash(&text), text })
    }
}

/// A TLS client configuration for a machine's node, with an identity for connection reuse.
#[derive(Clone)]
pub struct NodeCredentials {
    pub tls: Arc<rustls::ClientConfig>,
    /// Changes whenever the credentials do (a hash of what they were made from).
    pub id: String,
}

impl std::fmt::Debug for NodeCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCredentials").field("id", &self.id).finish()
    }
}

/// How long a client certificate the operator mints from a secrets bundle is valid; it is
/// minted again at half that age.
pub const MINTED_TTL: Duration = Duration::from_secs(24 * 3600);

/// Turns a machine's credential references into TLS configurations, minting client
/// certificates from secrets bundles once per bundle and half-life rather than per poll.
#[derive(Default)]
pub struct CredentialSource {
    minted: Mutex<HashMap<String, (NodeCredentials, Instant)>>,
}

impl CredentialSource {
    pub fn new() -> CredentialSource {
        CredentialSource::default()
    }

    pub async fn resolve(&self, store: &dyn Store, m: &TalosMachine) -> Result<NodeCredentials, RenderError> {
        let c = &m.spec.credentials;
        let invalid = |field, detail: String| RenderError::Invalid { machine: m.key().to_string(), field, detail };
        if let Some(r) = &c.secrets_ref {
            let text = key_of(store, m, "spec.credentials.secretsRef", "Secret", r, DEFAULT_SECRETS_KEY).await?;
            let id = hash(&text);
            if let Some((creds, at)) = self.lock().get(&id)
                && at.elapsed() < MINTED_TTL / 2
            {
                return Ok(creds.clone());
            }
            let bundle = crate::pki::SecretsBundle::from_yaml(&text)
                .map_err(|e| invalid("spec.credentials.secretsRef", e.to_string()))?;
            let mut roles = crate::pki::RoleSet::new();
            roles.insert(crate::pki::Role::Admin);
            let identity = bundle
                .client_certificate(&roles, MINTED_TTL, SystemTime::now())
                .map_err(|e| invalid("spec.credentials.secretsRef", format!("minting a client certificate: {e}")))?;
            let tls = crate::pki::tls::client_config(&[bundle.certs.os.crt_pem.as_str()], Some(&identity))
                .map_err(|e| invalid("spec.credentials.secretsRef", e.to_string()))?;
            let creds = NodeCredentials { tls, id: id.clone() };
            let mut minted = self.lock();
            minted.retain(|_, (_, at)| at.elapsed() < MINTED_TTL / 2);
            minted.insert(id, (creds.clone(), Instant::now()));
            return Ok(creds);
        }
        if let Some(r) = &c.talosconfig_ref {
            let text =
                key_of(store, m, "spec.credentials.talosconfigRef", "Secret", r, DEFAULT_TALOSCONFIG_KEY).await?;
            let field = "spec.credentials.talosconfigRef";
            let config = crate::client::config::Config::from_yaml(&text, std::path::Path::new(&r.name))
                .map_err(|e| invalid(field, e.to_string()))?;
            let (name, _) = config.current().map_err(|e| invalid(field, e.to_string()))?;
            let creds = config.credentials(name).map_err(|e| invalid(field, e.to_string()))?;
            let ca = creds.ca_pem.ok_or_else(|| invalid(field, format!("context {name:?} has no CA")))?;
            let identity =
                creds.identity.ok_or_else(|| invalid(field, format!("context {name:?} has no client certificate")))?;
            let tls = crate::pki::tls::client_config(&[ca.as_str()], Some(&identity))
                .map_err(|e| invalid(field, e.to_string()))?;
            return Ok(NodeCredentials { tls, id: hash(&text) });
        }
        Err(invalid("spec.credentials", "neither secretsRef nor talosconfigRef is set".into()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (NodeCredentials, Instant)>> {
        self.minted.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_apply_in_order_and_the_hash_follows_the_text() {
        let base = crate::operator::testing::base_config();
        let one = render(base, &["machine: {network: {hostname: a}}".into()]).unwrap();
        let two =
            render(base, &["machine: {network: {hostname: a}}".into(), "machine: {network: {hostname: b}}".into()])
                .unwrap();
        assert!(one.contains("hostname: a") && two.contains("hostname: b"), "{one}\n{two}");
        assert_ne!(hash(&one), hash(&two));
        assert_eq!(hash(&one), hash(&render(base, &["machine: {network: {hostname: a}}".into()]).unwrap()));
    }

    #[test]
    fn a_bad_base_or_patch_names_where() {
        assert!(render("machine: {tpye: x}\nversion: v1alpha1\n", &[]).unwrap_err().starts_with("base:"));
        let e = render(crate::operator::testing::base_config(), &["machine: {netwrk: {}}".into()]).unwrap_err();
        assert!(e.contains("patches[0]") && e.contains("netwrk"), "{e}");
    }
}

//! The secrets bundle: every secret a cluster's machine configs are generated from, in Talos's
//! `secrets.yaml` format (`talosctl gen secrets`, `gen config --with-secrets`): the discovery
//! identity, the Kubernetes bootstrap token and etcd encryption secret, the trustd join token,
//! and five CAs (etcd, Kubernetes, the aggregator, the service account key, and the OS CA that
//! signs every Talos API certificate). Certificates and keys are base64 of their PEM.
//!
//! Key types follow Talos: the OS CA is Ed25519, the other CAs and the service account key are
//! ECDSA P-256. Parsing validates; an unknown field is an error rather than a secret silently
//! dropped on the next write.

use std::fmt;
use std::time::SystemTime;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::ca::{CA_VALIDITY, CaOptions, CertificateAuthority};
use super::inspect::inspect_pem;
use super::issue::{CertAndKey, Validity, issue_client};
use super::key::{KeyAlgorithm, PrivateKey};
use super::role::RoleSet;
use super::{PkiError, pem, random_bytes};
use crate::yaml::Node;

/// Bytes of random in the cluster ID and secret, and in an etcd encryption secret.
const SECRET_BYTES: usize = 32;

#[derive(Clone, PartialEq, Eq)]
pub struct SecretsBundle {
    pub cluster: ClusterSecrets,
    pub secrets: Secrets,
    pub trustd_info: TrustdInfo,
    pub certs: Certs,
}

/// The discovery identity (base64 of random bytes; older bundles used URL-safe base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSecrets {
    pub id: String,
    pub secret: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secrets {
    /// `[a-z0-9]{6}.[a-z0-9]{16}`, as kubeadm's.
    pub bootstrap_token: String,
    /// Base64 of 32 random bytes; Talos 1.3 and later generate this one.
    pub secretbox_encryption_secret: Option<String>,
    /// The same, from bundles made before Talos 1.3.
    pub aescbc_encryption_secret: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustdInfo {
    /// `machine.token`: what a worker presents to trustd.
    pub token: String,
}

/// The CAs, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certs {
    pub etcd: CertAndKey,
    pub k8s: CertAndKey,
    pub k8s_aggregator: CertAndKey,
    /// The service account signing key (no certificate).
    pub k8s_service_account_key: String,
    pub os: CertAndKey,
}

impl fmt::Debug for SecretsBundle {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("SecretsBundle").field("cluster_id", &self.cluster.id).finish_non_exhaustive()
    }
}

impl SecretsBundle {
    /// A new bundle, every CA valid from `now` for ten years.
    pub fn generate(now: SystemTime) -> Result<Self, PkiError> {
        let validity = Validity::starting(now, CA_VALIDITY);
        let ca = |organization, common_name| {
            CertificateAuthority::generate(&CaOptions {
                algorithm: KeyAlgorithm::EcdsaP256,
                organization,
                common_name,
                validity,
            })
            .map(|ca| ca.to_cert_and_key())
        };
        Ok(SecretsBundle {
            cluster: ClusterSecrets { id: random_base64(SECRET_BYTES)?, secret: random_base64(SECRET_BYTES)? },
            secrets: Secrets {
                bootstrap_token: generate_token()?,
                secretbox_encryption_secret: Some(random_base64(SECRET_BYTES)?),
                aescbc_encryption_secret: None,
            },
            trustd_info: TrustdInfo { token: generate_token()? },
            certs: Certs {
                etcd: ca(Some("etcd"), None)?,
                k8s: ca(Some("kubernetes"), None)?,
                k8s_aggregator: ca(None, Some("front-proxy"))?,
                k8s_service_account_key: PrivateKey::generate(KeyAlgorithm::EcdsaP256)?.to_pem()?,
                os: CertificateAuthority::generate_os(now)?.to_cert_and_key(),
            },
        })
    }

    /// Reads and validates a `secrets.yaml`.
    pub fn from_yaml(text: &str) -> Result<Self, PkiError> {
        let raw: RawBundle =
            serde_saphyr::from_str(text).map_err(|e| PkiError::BundleYaml { detail: e.to_string() })?;
        let pair = |field: &str, p: RawPair| -> Result<CertAndKey, PkiError> {
            Ok(CertAndKey {
                crt_pem: decode_pem(&format!("certs.{field}.crt"), &p.crt)?,
                key_pem: decode_pem(&format!("certs.{field}.key"), &p.key)?,
            })
        };
        let c = raw.certs;
        let bundle = SecretsBundle {
            cluster: ClusterSecrets { id: raw.cluster.id, secret: raw.cluster.secret },
            secrets: Secrets {
                bootstrap_token: raw.secrets.bootstraptoken,
                secretbox_encryption_secret: raw.secrets.secretboxencryptionsecret.filter(|s| !s.is_empty()),
                aescbc_encryption_secret: raw.secrets.aescbcencryptionsecret.filter(|s| !s.is_empty()),
            },
            trustd_info: TrustdInfo { token: raw.trustdinfo.token },
            certs: Certs {
                etcd: pair("etcd", c.etcd)?,
                k8s: pair("k8s", c.k8s)?,
                k8s_aggregator: pair("k8saggregator", c.k8saggregator)?,
                k8s_service_account_key: decode_pem("certs.k8sserviceaccount.key", &c.k8sserviceaccount.key)?,
                os: pair("os", c.os)?,
            },
        };
        bundle.validate()?;
        Ok(bundle)
    }

    /// The bundle in Talos's layout, byte for byte what Talos writes for the same values.
    pub fn to_yaml(&self) -> String {
        let b64 = |pem: &str| Node::Str(STANDARD.encode(pem.as_bytes()));
        let pair = |p: &CertAndKey| Node::map([("crt", b64(&p.crt_pem)), ("key", b64(&p.key_pem))]);
        let mut secrets = vec![("bootstraptoken", Node::from(&self.secrets.bootstrap_token))];
        if let Some(s) = &self.secrets.aescbc_encryption_secret {
            secrets.push(("aescbcencryptionsecret", s.into()));
        }
        if let Some(s) = &self.secrets.secretbox_encryption_secret {
            secrets.push(("secretboxencryptionsecret", s.into()));
        }
        let doc = Node::map([
            ("cluster", Node::map([("id", (&self.cluster.id).into()), ("secret", (&self.cluster.secret).into())])),
            ("secrets", Node::map(secrets)),
            ("trustdinfo", Node::map([("token", (&self.trustd_info.token).into())])),
            (
                "certs",
                Node::map([
                    ("etcd", pair(&self.certs.etcd)),
                    ("k8s", pair(&self.certs.k8s)),
                    ("k8saggregator", pair(&self.certs.k8s_aggregator)),
                    ("k8sserviceaccount", Node::map([("key", b64(&self.certs.k8s_service_account_key))])),
                    ("os", pair(&self.certs.os)),
                ]),
            ),
        ]);
        crate::yaml::to_string(&doc)
    }

    /// Every field present, every certificate a CA with a key that reads, the OS CA usable for
    /// signing, and exactly one etcd encryption secret.
    pub fn validate(&self) -> Result<(), PkiError> {
        let field = |name: &str, detail: &str| PkiError::Bundle { field: name.to_owned(), detail: detail.to_owned() };
        for (name, value) in [
            ("cluster.id", &self.cluster.id),
            ("cluster.secret", &self.cluster.secret),
            ("secrets.bootstraptoken", &self.secrets.bootstrap_token),
            ("trustdinfo.token", &self.trustd_info.token),
        ] {
            if value.is_empty() {
                return Err(field(name, "is required"));
            }
        }
        match (&self.secrets.secretbox_encryption_secret, &self.secrets.aescbc_encryption_secret) {
            (None, None) => {
                return Err(field("secrets", "one of secretboxencryptionsecret, aescbcencryptionsecret is required"));
            }
            (Some(_), Some(_)) => {
                return Err(field(
                    "secrets",
                    "only one of secretboxencryptionsecret, aescbcencryptionsecret is allowed",
                ));
            }
            _ => {}
        }
        for (name, pair) in
            [("etcd", &self.certs.etcd), ("k8s", &self.certs.k8s), ("k8saggregator", &self.certs.k8s_aggregator)]
        {
            check_ca(name, pair)?;
        }
        check_private_key("certs.k8sserviceaccount.key", &self.certs.k8s_service_account_key)?;
        self.os_ca().map(|_| ())
    }

    /// The OS CA, ready to sign.
    pub fn os_ca(&self) -> Result<CertificateAuthority, PkiError> {
        CertificateAuthority::from_pem_named(
            &self.certs.os.crt_pem,
            &self.certs.os.key_pem,
            "certs.os.crt",
            "certs.os.key",
        )
    }

    /// A client certificate for `roles` from the OS CA, valid for `ttl` from `now` (what
    /// `talosctl gen config` puts in the admin talosconfig, and `config new --roles` asks a
    /// node for). It is minted on a workstation for nodes whose clocks it does not know — a
    /// node that has not synced its clock yet runs behind — so its validity starts
    /// [`OFFLINE_CLOCK_SKEW`] early; a node would refuse it as not valid yet otherwise.
    pub fn client_certificate(
        &self,
        roles: &RoleSet,
        ttl: std::time::Duration,
        now: SystemTime,
    ) -> Result<CertAndKey, PkiError> {
        let validity = Validity::starting(now, ttl);
        let validity = Validity { not_before: now.checked_sub(OFFLINE_CLOCK_SKEW).unwrap_or(now), ..validity };
        issue_client(&self.os_ca()?, None, roles, validity)
    }
}

/// How far before its minting an offline client certificate is valid from.
pub const OFFLINE_CLOCK_SKEW: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// A token in the bootstrap-token format Talos uses for trustd and Kubernetes:
/// `[a-z0-9]{6}.[a-z0-9]{16}`.
pub fn generate_token() -> Result<String, PkiError> {
    Ok(format!("{}.{}", random_token_part(6)?, random_token_part(16)?))
}

fn random_token_part(len: usize) -> Result<String, PkiError> {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    // 252 is the largest multiple of 36 below 256: larger bytes are drawn again, so every
    // character is equally likely.
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 32];
    while out.len() < len {
        random_bytes(&mut buf)?;
        for b in buf.iter().filter(|b| **b < 252) {
            if out.len() == len {
                break;
            }
            out.push(char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]));
        }
    }
    Ok(out)
}

fn random_base64(n: usize) -> Result<String, PkiError> {
    let mut bytes = vec![0u8; n];
    random_bytes(&mut bytes)?;
    Ok(STANDARD.encode(bytes))
}

fn decode_pem(field: &str, b64: &str) -> Result<String, PkiError> {
    let err = |detail: String| PkiError::Bundle { field: field.to_owned(), detail };
    if b64.is_empty() {
        return Err(err("is required".into()));
    }
    let bytes = STANDARD.decode(b64.trim()).map_err(|e| err(format!("not base64: {e}")))?;
    String::from_utf8(bytes).map_err(|_| err("not PEM text".into()))
}

fn check_ca(name: &str, pair: &CertAndKey) -> Result<(), PkiError> {
    let crt_field = format!("certs.{name}.crt");
    let key_field = format!("certs.{name}.key");
    let info =
        inspect_pem(&pair.crt_pem).map_err(|e| PkiError::Bundle { field: crt_field.clone(), detail: e.to_string() })?;
    if !info.is_ca {
        return Err(PkiError::Bundle { field: crt_field, detail: "is not a CA certificate".into() });
    }
    check_private_key(&key_field, &pair.key_pem)?;
    // Old bundles may hold RSA Kubernetes CAs, which are carried but not used to sign here.
    if let Ok(key) = PrivateKey::from_pem(&pair.key_pem, &key_field) {
        let (_, cert) = x509_parser::parse_x509_certificate(&info.der)
            .map_err(|e| PkiError::Bundle { field: crt_field.clone(), detail: e.to_string() })?;
        if cert.public_key().raw != key.public_key_info().as_slice() {
            return Err(PkiError::Bundle { field: key_field, detail: "does not belong to the certificate".into() });
        }
    }
    Ok(())
}

fn check_private_key(field: &str, text: &str) -> Result<(), PkiError> {
    let labels = [pem::ED25519_PRIVATE_KEY, pem::EC_PRIVATE_KEY, pem::PRIVATE_KEY, "RSA PRIVATE KEY"];
    pem::decode_one(text, &labels, field)
        .map(|_| ())
        .map_err(|e| PkiError::Bundle { field: field.to_owned(), detail: e.to_string() })
}

// The file's shape; field names are what Go's YAML encoder derives from Talos's struct names.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBundle {
    cluster: RawCluster,
    secrets: RawSecrets,
    trustdinfo: RawTrustd,
    certs: RawCerts,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    #[serde(default)]
    id: String,
    #[serde(default)]
    secret: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecrets {
    #[serde(default)]
    bootstraptoken: String,
    #[serde(default)]
    aescbcencryptionsecret: Option<String>,
    #[serde(default)]
    secretboxencryptionsecret: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrustd {
    #[serde(default)]
    token: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCerts {
    etcd: RawPair,
    k8s: RawPair,
    k8saggregator: RawPair,
    k8sserviceaccount: RawKey,
    os: RawPair,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPair {
    #[serde(default)]
    crt: String,
    #[serde(default)]
    key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    #[serde(default)]
    key: String,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::pki::fixtures::{TALOS_OS_CRT, TALOS_OS_KEY, TALOS_SECRETS};
    use crate::pki::inspect::ExtKeyUsage;
    use crate::pki::role::Role;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn token_ok(t: &str) -> bool {
        let Some((a, b)) = t.split_once('.') else { return false };
        let ok = |s: &str, n| s.len() == n && s.bytes().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase());
        ok(a, 6) && ok(b, 16)
    }

    #[test]
    fn talos_fixture_parses_and_writes_back_byte_for_byte() {
        let bundle = SecretsBundle::from_yaml(TALOS_SECRETS).unwrap();
        assert_eq!(bundle.cluster.id, "0raF93qnkMvF-FZNuvyGozXNdLiT2FOWSlyBaW4PR-w=");
        assert_eq!(bundle.secrets.bootstrap_token, "inn7ol.u4ehnti8qyls9ymo");
        assert_eq!(bundle.trustd_info.token, "d8cwfa.eyvpi0xwxyarbfid");
        assert_eq!(
            bundle.secrets.secretbox_encryption_secret.as_deref(),
            Some("45yd2Ke+sytiICojDf8aibTfgt99nzJmO53cjDqrCto=")
        );
        assert_eq!(bundle.certs.os, CertAndKey { crt_pem: TALOS_OS_CRT.into(), key_pem: TALOS_OS_KEY.into() });
        assert!(bundle.certs.k8s_service_account_key.starts_with("-----BEGIN EC PRIVATE KEY-----"));
        // Everything but the fixture's leading comment.
        let body: String = TALOS_SECRETS.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect();
        assert_eq!(bundle.to_yaml(), body);
    }

    #[test]
    fn generated_bundle_has_talos_key_types_and_formats() {
        let bundle = SecretsBundle::generate(now()).unwrap();
        assert!(token_ok(&bundle.secrets.bootstrap_token), "{}", bundle.secrets.bootstrap_token);
        assert!(token_ok(&bundle.trustd_info.token), "{}", bundle.trustd_info.token);
        assert_ne!(bundle.secrets.bootstrap_token, bundle.trustd_info.token);
        for secret in
            [&bundle.cluster.id, &bundle.cluster.secret, bundle.secrets.secretbox_encryption_secret.as_ref().unwrap()]
        {
            assert_eq!(STANDARD.decode(secret).unwrap().len(), 32, "{secret}");
        }
        assert_eq!(bundle.secrets.aescbc_encryption_secret, None);
        let kinds = [
            (&bundle.certs.etcd, KeyAlgorithm::EcdsaP256, vec!["etcd"], None),
            (&bundle.certs.k8s, KeyAlgorithm::EcdsaP256, vec!["kubernetes"], None),
            (&bundle.certs.k8s_aggregator, KeyAlgorithm::EcdsaP256, vec![], Some("front-proxy")),
            (&bundle.certs.os, KeyAlgorithm::Ed25519, vec!["talos"], None),
        ];
        for (pair, alg, orgs, cn) in kinds {
            let info = inspect_pem(&pair.crt_pem).unwrap();
            assert!(info.is_ca);
            assert_eq!(info.key_algorithm, Some(alg));
            assert_eq!(info.organizations, orgs);
            assert_eq!(info.common_name.as_deref(), cn);
            assert_eq!((info.not_before, info.not_after), (now(), now() + CA_VALIDITY));
            assert_eq!(PrivateKey::from_pem(&pair.key_pem, "k").unwrap().algorithm(), alg);
        }
        assert_eq!(
            PrivateKey::from_pem(&bundle.certs.k8s_service_account_key, "sa").unwrap().algorithm(),
            KeyAlgorithm::EcdsaP256
        );
        let again = SecretsBundle::from_yaml(&bundle.to_yaml()).unwrap();
        assert_eq!(again, bundle);
    }

    #[test]
    fn client_certificates_come_from_the_os_ca() {
        let bundle = SecretsBundle::from_yaml(TALOS_SECRETS).unwrap();
        let crt = bundle.client_certificate(&RoleSet::from([Role::Reader]), Duration::from_secs(3600), now()).unwrap();
        let info = inspect_pem(&crt.crt_pem).unwrap();
        assert_eq!(info.organizations, ["os:reader"]);
        assert_eq!(info.extended_key_usages, BTreeSet::from([ExtKeyUsage::ClientAuth]));
        // Valid from a little before its minting (a node's clock may run behind), for its ttl.
        assert_eq!((info.not_before, info.not_after), (now() - OFFLINE_CLOCK_SKEW, now() + Duration::from_secs(3600)));
        assert!(info.is_signed_by(&inspect_pem(TALOS_OS_CRT).unwrap()));
    }

    #[test]
    fn tokens_use_the_whole_alphabet_and_nothing_else() {
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            let t = generate_token().unwrap();
            assert!(token_ok(&t), "{t}");
            seen.extend(t.bytes().filter(|b| *b != b'.'));
        }
        assert_eq!(seen.len(), 36);
    }

    #[test]
    fn invalid_bundles_name_the_field() {
        let cases = [
            (
                TALOS_SECRETS.replace("    token: d8cwfa.eyvpi0xwxyarbfid", "    token: \"\""),
                "trustdinfo.token: is required",
            ),
            (
                TALOS_SECRETS.replace(
                    "    secretboxencryptionsecret: 45yd",
                    "    extra: x\n    secretboxencryptionsecret: 45yd",
                ),
                "extra",
            ),
            (
                TALOS_SECRETS.replace(
                    "    secretboxencryptionsecret:",
                    "    aescbcencryptionsecret: x\n    secretboxencryptionsecret:",
                ),
                "only one of",
            ),
            (
                TALOS_SECRETS.replacen(
                    "        key: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSU03",
                    "        key: x$y",
                    1,
                ),
                "certs.etcd.key: not base64",
            ),
        ];
        for (text, want) in cases {
            let err = SecretsBundle::from_yaml(&text).unwrap_err().to_string();
            assert!(err.contains(want), "want {want:?} in: {err}");
        }
        // The OS key swapped for another CA's key.
        let mut bundle = SecretsBundle::from_yaml(TALOS_SECRETS).unwrap();
        bundle.certs.os.key_pem = SecretsBundle::generate(now()).unwrap().certs.os.key_pem;
        let err = bundle.validate().unwrap_err().to_string();
        assert_eq!(err, "certs.os.crt: the private key does not belong to the certificate");
        assert!(!format!("{bundle:?}").contains("PRIVATE"));
    }
}

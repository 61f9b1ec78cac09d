//! Leaf certificates signed by a [`CertificateAuthority`], in the shapes Talos mints them:
//! a server certificate (IP and DNS SANs, ExtKeyUsage ServerAuth only) and a client certificate
//! whose Subject Organizations are its roles (ExtKeyUsage ClientAuth only). Both have KeyUsage
//! DigitalSignature, no BasicConstraints, an AuthorityKeyIdentifier when the CA has a key id,
//! a random 128-bit serial, and a key of the CA's family (Ed25519 under an Ed25519 CA).
//!
//! A certificate is never both server and client: apid tells a trustd-issued server certificate
//! from a client identity by exactly that.

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyUsagePurpose,
    PublicKeyData, SanType, SerialNumber, SigningKey,
};

use super::ca::CertificateAuthority;
use super::der::{self, BIT_STRING, CONTEXT_0, PRINTABLE_STRING, SEQUENCE, SET, UTF8_STRING};
use super::key::{KeyAlgorithm, PrivateKey};
use super::role::RoleSet;
use super::{PkiError, pem, random_bytes};

/// How long a node's own API certificates live before they are minted again (siderolabs/crypto's
/// `DefaultCertificateValidityDuration`); they are renewed at half of it.
pub const NODE_CERT_VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// How long a client certificate for a talosconfig lives by default (Talos's
/// `TalosAPIDefaultCertificateValidityDuration`).
pub const CLIENT_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// OIDs of the two name attributes Talos uses, encoded.
pub(crate) const OID_COMMON_NAME: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x03];
pub(crate) const OID_ORGANIZATION: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x0a];

/// A certificate and its private key, both PEM.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct CertAndKey {
    pub crt_pem: String,
    pub key_pem: String,
}

/// Talos's YAML and JSON shape: `crt` and `key`, each the base64 of the PEM text; `key` is
/// left out when empty (a worker holds the OS CA's certificate only).
impl serde::Serialize for CertAndKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        use serde::ser::SerializeMap;
        let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t.as_bytes());
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("crt", &b64(&self.crt_pem))?;
        if !self.key_pem.is_empty() {
            m.serialize_entry("key", &b64(&self.key_pem))?;
        }
        m.end()
    }
}

impl<'de> serde::Deserialize<'de> for CertAndKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use base64::Engine;
        use serde::de::Error;
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            crt: String,
            #[serde(default)]
            key: String,
        }
        let w = Wire::deserialize(d)?;
        let decode = |field: &str, text: &str| -> Result<String, D::Error> {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|e| D::Error::custom(format!("{field}: not base64: {e}")))?;
            String::from_utf8(bytes).map_err(|_| D::Error::custom(format!("{field}: not PEM text")))
        };
        Ok(CertAndKey { crt_pem: decode("crt", &w.crt)?, key_pem: decode("key", &w.key)? })
    }
}

impl fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("CertAndKey").field("crt_pem", &self.crt_pem).field("key_pem", &"<redacted>").finish()
    }
}

/// When a certificate is valid. X.509 keeps whole seconds; the fractions are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// From `now` for `lifetime`, as Talos mints every certificate. A lifetime past the end of
    /// time leaves an empty window, which issuing refuses.
    pub fn starting(now: SystemTime, lifetime: Duration) -> Self {
        Validity { not_before: now, not_after: now.checked_add(lifetime).unwrap_or(now) }
    }

    /// Seconds since the epoch of both ends, checked to be in order.
    fn seconds(&self) -> Result<(Duration, Duration), PkiError> {
        let since = |t: SystemTime, which: &str| {
            t.duration_since(UNIX_EPOCH)
                .map(|d| Duration::from_secs(d.as_secs()))
                .map_err(|_| PkiError::Validity { detail: format!("{which} is before 1970") })
        };
        let (nb, na) = (since(self.not_before, "not_before")?, since(self.not_after, "not_after")?);
        if na <= nb {
            return Err(PkiError::Validity { detail: "not_after must be later than not_before".into() });
        }
        Ok((nb, na))
    }

    pub(crate) fn apply(&self, params: &mut CertificateParams) -> Result<(), PkiError> {
        let (nb, na) = self.seconds()?;
        // rcgen's times are `time::OffsetDateTime`; counting from its epoch avoids naming the crate.
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        params.not_before = epoch + nb;
        params.not_after = epoch + na;
        Ok(())
    }
}

/// A server certificate for apid: `common_name` (Talos uses the node's FQDN), the SANs it may
/// be dialled by, ServerAuth only.
pub fn issue_server(
    ca: &CertificateAuthority,
    common_name: &str,
    ips: &[IpAddr],
    dns_names: &[String],
    validity: Validity,
) -> Result<CertAndKey, PkiError> {
    let what = format!("server certificate {common_name:?}");
    let sans = subject_alt_names(ips, dns_names, &what)?;
    let cn = (!common_name.is_empty()).then_some(common_name);
    let leaf = Leaf { subject: go_subject(&[], cn), sans, ekus: vec![ExtendedKeyUsagePurpose::ServerAuth], validity };
    issue_with_new_key(ca, leaf, &what)
}

/// A client certificate carrying `roles` as its Subject Organizations, ClientAuth only. Talos's
/// admin certificates have no common name; apid's own (for forwarding) use the node's FQDN.
pub fn issue_client(
    ca: &CertificateAuthority,
    common_name: Option<&str>,
    roles: &RoleSet,
    validity: Validity,
) -> Result<CertAndKey, PkiError> {
    let what = format!("client certificate for {roles}");
    let leaf = Leaf {
        subject: go_subject(&roles.strings(), common_name.filter(|c| !c.is_empty())),
        sans: Vec::new(),
        ekus: vec![ExtendedKeyUsagePurpose::ClientAuth],
        validity,
    };
    issue_with_new_key(ca, leaf, &what)
}

/// A client-style certificate (roles as Organizations) with any set of purposes, for tests
/// that need the shapes apid must refuse.
#[cfg(test)]
pub(crate) fn issue_with_ekus(
    ca: &CertificateAuthority,
    roles: &RoleSet,
    ekus: Vec<ExtendedKeyUsagePurpose>,
    validity: Validity,
) -> Result<CertAndKey, PkiError> {
    let leaf = Leaf { subject: go_subject(&roles.strings(), None), sans: Vec::new(), ekus, validity };
    issue_with_new_key(ca, leaf, "a test certificate")
}

fn issue_with_new_key(ca: &CertificateAuthority, leaf: Leaf, what: &str) -> Result<CertAndKey, PkiError> {
    let algorithm = match ca.key().algorithm() {
        KeyAlgorithm::Ed25519 => KeyAlgorithm::Ed25519,
        // Talos answers any ECDSA CA with P-256 leaves.
        KeyAlgorithm::EcdsaP256 | KeyAlgorithm::EcdsaP384 => KeyAlgorithm::EcdsaP256,
    };
    let key = PrivateKey::generate(algorithm)?;
    let der = sign_leaf(ca, leaf, key.key_pair(), what)?;
    Ok(CertAndKey { crt_pem: pem::encode(pem::CERTIFICATE, &der), key_pem: key.to_pem()? })
}

pub(crate) fn subject_alt_names(ips: &[IpAddr], dns_names: &[String], what: &str) -> Result<Vec<SanType>, PkiError> {
    let mut sans: Vec<SanType> = ips.iter().copied().map(SanType::IpAddress).collect();
    for name in dns_names {
        let ia5 = name.as_str().try_into().map_err(|_| PkiError::Encode {
            what: what.to_owned(),
            detail: format!("DNS name {name:?} is not ASCII"),
        })?;
        sans.push(SanType::DnsName(ia5));
    }
    Ok(sans)
}

/// What differs between the leaves this PKI signs.
pub(crate) struct Leaf {
    /// The DER Name.
    pub subject: Vec<u8>,
    pub sans: Vec<SanType>,
    /// Empty leaves the extension out.
    pub ekus: Vec<ExtendedKeyUsagePurpose>,
    pub validity: Validity,
}

/// Signs a leaf for `public_key`, returning its DER.
///
/// rcgen keeps one value per name attribute, while a Talos client certificate carries every
/// role as an Organization, in one relative name as Go writes them. So rcgen builds the
/// certificate, and the issuer and subject are then set to their exact encodings (the CA's
/// subject as it stands in the CA certificate, the Go-shaped subject) and it is signed again.
pub(crate) fn sign_leaf(
    ca: &CertificateAuthority,
    leaf: Leaf,
    public_key: &impl PublicKeyData,
    what: &str,
) -> Result<Vec<u8>, PkiError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    // The placeholder only tells rcgen the subject is not empty: an empty subject would make
    // the SAN extension critical, as RFC 5280 asks. It is replaced below.
    if leaf.subject != der::wrap(SEQUENCE, &[]) {
        params.distinguished_name.push(DnType::CommonName, "subject");
    }
    params.subject_alt_names = leaf.sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = leaf.ekus;
    params.is_ca = IsCa::NoCa;
    params.serial_number = Some(random_serial()?);
    params.use_authority_key_identifier_extension = ca.key_id().is_some();
    leaf.validity.apply(&mut params)?;

    let mut issuer_params = CertificateParams::default();
    issuer_params.distinguished_name = DistinguishedName::new();
    if let Some(id) = ca.key_id() {
        issuer_params.key_identifier_method = KeyIdMethod::PreSpecified(id.to_vec());
    }
    let signer = ca.key().key_pair();
    let issuer = Issuer::new(issuer_params, signer);
    let draft =
        params.signed_by(public_key, &issuer).map_err(|source| PkiError::Sign { what: what.to_owned(), source })?;
    set_names_and_sign(draft.der(), ca.subject_der(), &leaf.subject, signer)
        .map_err(|detail| PkiError::Encode { what: what.to_owned(), detail })
}

/// Replaces the issuer and subject of a DER certificate and signs its TBS part again.
fn set_names_and_sign(cert: &[u8], issuer: &[u8], subject: &[u8], key: &impl SigningKey) -> Result<Vec<u8>, String> {
    let malformed = || "unexpected certificate layout".to_owned();
    let parts = der::children(cert, SEQUENCE).ok_or_else(malformed)?;
    let (tbs, algorithm) = (parts.first().ok_or_else(malformed)?, parts.get(1).ok_or_else(malformed)?);
    let fields = der::elements(tbs.content).ok_or_else(malformed)?;
    // version [0], serial, signature, issuer, validity, subject, subjectPublicKeyInfo, [3] extensions
    if fields.len() < 7 || fields[0].tag != CONTEXT_0 {
        return Err(malformed());
    }
    let mut tbs_parts: Vec<&[u8]> = fields.iter().map(|f| f.raw).collect();
    tbs_parts[3] = issuer;
    tbs_parts[5] = subject;
    let new_tbs = der::wrap_all(SEQUENCE, &tbs_parts);
    let signature = key.sign(&new_tbs).map_err(|e| e.to_string())?;
    let mut bits = Vec::with_capacity(signature.len() + 1);
    bits.push(0); // no unused bits
    bits.extend_from_slice(&signature);
    Ok(der::wrap_all(SEQUENCE, &[&new_tbs, algorithm.raw, &der::wrap(BIT_STRING, &bits)]))
}

/// A Name as Go's crypto/x509 writes one: all Organizations in one relative name (sorted, as a
/// DER SET OF must be), then the common name; PrintableString where it fits, else UTF8String.
pub(crate) fn go_subject(organizations: &[&str], common_name: Option<&str>) -> Vec<u8> {
    let mut rdns: Vec<Vec<u8>> = Vec::new();
    if !organizations.is_empty() {
        let mut values: Vec<Vec<u8>> = organizations.iter().map(|o| attribute(OID_ORGANIZATION, o)).collect();
        values.sort();
        values.dedup();
        rdns.push(der::wrap(SET, &values.concat()));
    }
    if let Some(cn) = common_name {
        rdns.push(der::wrap(SET, &attribute(OID_COMMON_NAME, cn)));
    }
    der::wrap(SEQUENCE, &rdns.concat())
}

fn attribute(oid: &[u8], value: &str) -> Vec<u8> {
    let printable = value.bytes().all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b));
    let tag = if printable { PRINTABLE_STRING } else { UTF8_STRING };
    der::wrap_all(SEQUENCE, &[oid, &der::wrap(tag, value.as_bytes())])
}

/// A positive 128-bit serial, as siderolabs/crypto draws them.
pub(crate) fn random_serial() -> Result<SerialNumber, PkiError> {
    let mut bytes = [0u8; 16];
    random_bytes(&mut bytes)?;
    bytes[0] &= 0x7f;
    if bytes.iter().all(|b| *b == 0) {
        bytes[15] = 1;
    }
    Ok(SerialNumber::from(bytes.to_vec()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::net::Ipv4Addr;

    use super::*;
    use crate::pki::inspect::{ExtKeyUsage, inspect_pem};
    use crate::pki::role::Role;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    const NOW: u64 = 1_750_000_000;

    #[test]
    fn server_certificate_has_talos_shape() {
        let ca = CertificateAuthority::generate_os(at(NOW)).unwrap();
        let ip: IpAddr = Ipv4Addr::new(10, 5, 0, 2).into();
        let v6: IpAddr = "fd00::2".parse().unwrap();
        let validity = Validity::starting(at(NOW), NODE_CERT_VALIDITY);
        let issued = issue_server(&ca, "cp-1.example", &[ip, v6], &["cp-1.example".into()], validity).unwrap();
        assert!(issued.key_pem.starts_with("-----BEGIN ED25519 PRIVATE KEY-----"));
        let info = inspect_pem(&issued.crt_pem).unwrap();
        assert_eq!(info.common_name.as_deref(), Some("cp-1.example"));
        assert!(info.organizations.is_empty());
        assert_eq!(info.ip_addresses, [ip, v6]);
        assert_eq!(info.dns_names, ["cp-1.example"]);
        assert_eq!(info.extended_key_usages, BTreeSet::from([ExtKeyUsage::ServerAuth]));
        assert!(info.digital_signature && !info.is_ca);
        assert_eq!((info.not_before, info.not_after), (at(NOW), at(NOW + 24 * 3600)));
        assert!(info.is_signed_by(&inspect_pem(ca.crt_pem()).unwrap()));
        assert_eq!(info.key_algorithm, Some(KeyAlgorithm::Ed25519));
    }

    #[test]
    fn client_certificate_carries_every_role_in_one_relative_name() {
        let ca = CertificateAuthority::generate_os(at(NOW)).unwrap();
        let roles = RoleSet::from([Role::Reader, Role::EtcdBackup, Role::Operator]);
        let issued = issue_client(&ca, None, &roles, Validity::starting(at(NOW), CLIENT_CERT_VALIDITY)).unwrap();
        let info = inspect_pem(&issued.crt_pem).unwrap();
        assert_eq!(info.common_name, None);
        let mut orgs = info.organizations.clone();
        orgs.sort();
        assert_eq!(orgs, ["os:etcd:backup", "os:operator", "os:reader"]);
        assert_eq!(info.roles(), (roles, vec![]));
        assert_eq!(info.extended_key_usages, BTreeSet::from([ExtKeyUsage::ClientAuth]));
        assert!(info.ip_addresses.is_empty() && info.dns_names.is_empty());
        assert!(info.is_signed_by(&inspect_pem(ca.crt_pem()).unwrap()));
        assert_eq!(info.not_after, at(NOW + 365 * 24 * 3600));
        // One SET holding three attributes.
        let subject = go_subject(&["os:reader", "os:etcd:backup", "os:operator"], None);
        let rdns = der::children(&subject, SEQUENCE).unwrap();
        assert_eq!(rdns.len(), 1);
        assert_eq!(der::elements(rdns[0].content).unwrap().len(), 3);
    }

    #[test]
    fn impersonator_client_certificate_has_a_common_name() {
        let ca = CertificateAuthority::generate_os(at(NOW)).unwrap();
        let roles = RoleSet::from([Role::Impersonator]);
        let issued = issue_client(&ca, Some("cp-1"), &roles, Validity::starting(at(NOW), NODE_CERT_VALIDITY)).unwrap();
        let info = inspect_pem(&issued.crt_pem).unwrap();
        assert_eq!(
            (info.common_name.as_deref(), info.organizations.as_slice()),
            (Some("cp-1"), &["os:impersonator".to_owned()][..])
        );
    }

    #[test]
    fn an_ecdsa_ca_issues_p256_leaves() {
        let ca = CertificateAuthority::generate(&crate::pki::ca::CaOptions {
            algorithm: KeyAlgorithm::EcdsaP256,
            organization: Some("etcd"),
            common_name: None,
            validity: Validity::starting(at(NOW), crate::pki::ca::CA_VALIDITY),
        })
        .unwrap();
        let issued =
            issue_server(&ca, "n", &[], &["n".into()], Validity::starting(at(NOW), NODE_CERT_VALIDITY)).unwrap();
        assert!(issued.key_pem.starts_with("-----BEGIN EC PRIVATE KEY-----"));
        let info = inspect_pem(&issued.crt_pem).unwrap();
        assert_eq!(info.key_algorithm, Some(KeyAlgorithm::EcdsaP256));
        assert!(info.is_signed_by(&inspect_pem(ca.crt_pem()).unwrap()));
    }

    #[test]
    fn bad_validity_and_names_are_errors() {
        let ca = CertificateAuthority::generate_os(at(NOW)).unwrap();
        let backwards = Validity { not_before: at(NOW), not_after: at(NOW - 1) };
        let err = issue_server(&ca, "n", &[], &[], backwards).unwrap_err().to_string();
        assert!(err.contains("not_after must be later"), "{err}");
        let err =
            issue_server(&ca, "n", &[], &["bücher.example".into()], Validity::starting(at(NOW), NODE_CERT_VALIDITY))
                .unwrap_err()
                .to_string();
        assert!(err.contains("server certificate \"n\"") && err.contains("not ASCII"), "{err}");
    }

    #[test]
    fn names_use_printable_string_where_go_does() {
        assert_eq!(attribute(OID_ORGANIZATION, "os:admin")[7], PRINTABLE_STRING);
        assert_eq!(attribute(OID_COMMON_NAME, "node_1")[7], UTF8_STRING);
        assert_eq!(go_subject(&[], None), [0x30, 0x00]);
    }
}

//! Certificate signing requests: what a worker (which holds no CA key) sends trustd for its
//! apid server certificate, and how trustd signs one.
//!
//! Signing never grants what a request asks beyond names: whatever it requested, the result has
//! ExtKeyUsage ServerAuth only, KeyUsage DigitalSignature, no BasicConstraints, and its subject
//! without any Organization, since Organizations are roles and a worker must never mint itself
//! a client identity. The request's common name and SANs are kept.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;

use super::ca::CertificateAuthority;
use super::der::{self, SEQUENCE, SET};
use super::issue::{Leaf, OID_ORGANIZATION, Validity, sign_leaf, subject_alt_names};
use super::key::{KeyAlgorithm, PrivateKey};
use super::{PkiError, pem};

/// A request and the key it was made for; the key never leaves the node.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeCsr {
    pub csr_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for NodeCsr {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("NodeCsr").field("csr_pem", &self.csr_pem).field("key_pem", &"<redacted>").finish()
    }
}

/// A fresh Ed25519 key and a request for `common_name` with the given SANs. `organization`
/// exists for old workers and for tests: trustd drops it.
pub fn generate_csr(
    common_name: &str,
    ips: &[IpAddr],
    dns_names: &[String],
    organization: Option<&str>,
) -> Result<NodeCsr, PkiError> {
    let what = format!("a CSR for {common_name:?}");
    let key = PrivateKey::generate(KeyAlgorithm::Ed25519)?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    if let Some(o) = organization {
        name.push(DnType::OrganizationName, o);
    }
    if !common_name.is_empty() {
        name.push(DnType::CommonName, common_name);
    }
    params.distinguished_name = name;
    params.subject_alt_names = subject_alt_names(ips, dns_names, &what)?;
    let csr =
        params.serialize_request(key.key_pair()).map_err(|source| PkiError::Sign { what: what.clone(), source })?;
    Ok(NodeCsr { csr_pem: pem::encode(pem::CERTIFICATE_REQUEST, csr.der()), key_pem: key.to_pem()? })
}

/// What trustd does with a worker's request: checks its signature and signs it as a server
/// certificate valid from `now` for `validity`. Returns the certificate, PEM.
pub fn sign_csr_as_server(
    ca: &CertificateAuthority,
    csr_pem: &str,
    validity: Duration,
    now: SystemTime,
) -> Result<String, PkiError> {
    let bad = |detail: String| PkiError::Csr { detail };
    let block = pem::decode_one(csr_pem, &[pem::CERTIFICATE_REQUEST], "the certificate signing request")?;
    let request = CertificateSigningRequestParams::from_der(&block.der.as_slice().into())
        .map_err(|e| bad(format!("not a valid signed request: {e}")))?;
    let (_, parsed) = X509CertificationRequest::from_der(&block.der).map_err(|e| bad(e.to_string()))?;
    let subject = without_organizations(parsed.certification_request_info.subject.as_raw())
        .ok_or_else(|| bad("malformed subject name".into()))?;
    let leaf = Leaf {
        subject,
        sans: request.params.subject_alt_names,
        ekus: vec![ExtendedKeyUsagePurpose::ServerAuth],
        validity: Validity::starting(now, validity),
    };
    let der = sign_leaf(ca, leaf, &request.public_key, "a server certificate for a CSR")?;
    Ok(pem::encode(pem::CERTIFICATE, &der))
}

/// The subject with every Organization attribute removed, and relative names left empty by that
/// dropped; every other attribute keeps its exact encoding.
fn without_organizations(name: &[u8]) -> Option<Vec<u8>> {
    let mut rdns = Vec::new();
    for rdn in der::children(name, SEQUENCE)? {
        if rdn.tag != SET {
            return None;
        }
        let mut kept = Vec::new();
        for attr in der::elements(rdn.content)? {
            let (oid, _) = der::read(attr.content)?;
            if oid.raw != OID_ORGANIZATION {
                kept.extend_from_slice(attr.raw);
            }
        }
        if !kept.is_empty() {
            rdns.push(der::wrap(SET, &kept));
        }
    }
    Some(der::wrap(SEQUENCE, &rdns.concat()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::pki::inspect::{ExtKeyUsage, inspect_pem};
    use crate::pki::issue::{NODE_CERT_VALIDITY, go_subject};

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn a_csr_asking_for_admin_gets_a_plain_server_certificate() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let ip: IpAddr = "10.5.0.3".parse().unwrap();
        let csr = generate_csr("worker-1", &[ip], &["worker-1".into()], Some("os:admin")).unwrap();
        assert!(csr.csr_pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        let crt = sign_csr_as_server(&ca, &csr.csr_pem, NODE_CERT_VALIDITY, now()).unwrap();
        let info = inspect_pem(&crt).unwrap();
        assert!(info.organizations.is_empty(), "the role is stripped: {:?}", info.organizations);
        assert_eq!(info.common_name.as_deref(), Some("worker-1"));
        assert_eq!(info.extended_key_usages, BTreeSet::from([ExtKeyUsage::ServerAuth]));
        assert!(info.digital_signature && !info.is_ca);
        assert_eq!(
            (info.ip_addresses.as_slice(), info.dns_names.as_slice()),
            (&[ip][..], &["worker-1".to_owned()][..])
        );
        assert_eq!((info.not_before, info.not_after), (now(), now() + NODE_CERT_VALIDITY));
        assert!(info.is_signed_by(&inspect_pem(ca.crt_pem()).unwrap()));
        // The certificate is for the CSR's key.
        let key = PrivateKey::from_pem(&csr.key_pem, "node key").unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&info.der).unwrap();
        assert_eq!(cert.public_key().raw, key.public_key_info().as_slice());
    }

    #[test]
    fn requested_client_auth_is_not_granted() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let key = PrivateKey::generate(KeyAlgorithm::Ed25519).unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, "sneaky");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth, ExtendedKeyUsagePurpose::ServerAuth];
        let csr = params.serialize_request(key.key_pair()).unwrap();
        let crt = sign_csr_as_server(&ca, &pem::encode(pem::CERTIFICATE_REQUEST, csr.der()), NODE_CERT_VALIDITY, now())
            .unwrap();
        let info = inspect_pem(&crt).unwrap();
        assert_eq!(info.extended_key_usages, BTreeSet::from([ExtKeyUsage::ServerAuth]));
    }

    #[test]
    fn tampered_or_foreign_requests_are_refused() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let csr = generate_csr("w", &[], &[], None).unwrap();
        let mut der = pem::decode_one(&csr.csr_pem, &[pem::CERTIFICATE_REQUEST], "csr").unwrap().der;
        let n = der.len();
        der[n - 1] ^= 0xff; // flip a signature bit
        let err = sign_csr_as_server(&ca, &pem::encode(pem::CERTIFICATE_REQUEST, &der), NODE_CERT_VALIDITY, now());
        assert!(matches!(err, Err(PkiError::Csr { .. })), "{err:?}");
        let err = sign_csr_as_server(&ca, ca.crt_pem(), NODE_CERT_VALIDITY, now()).unwrap_err().to_string();
        assert!(err.contains("expected CERTIFICATE REQUEST"), "{err}");
    }

    #[test]
    fn organizations_are_removed_wherever_they_sit() {
        let with = go_subject(&["os:admin", "os:reader"], Some("n"));
        assert_eq!(without_organizations(&with).unwrap(), go_subject(&[], Some("n")));
        assert_eq!(without_organizations(&go_subject(&["x"], None)).unwrap(), [0x30, 0x00]);
    }
}

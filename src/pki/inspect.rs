//! Reading a certificate back: who it names, where it may be dialled, when it is valid, what it
//! may be used for, and whether a given CA signed it. apid's door, `talosctl config info`-style
//! output and the tests all look at certificates through this.
//!
//! It only reads; deciding whether a certificate is acceptable is the TLS verifiers' job.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::oid_registry;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::time::ASN1Time;

use super::key::KeyAlgorithm;
use super::role::RoleSet;
use super::{PkiError, pem};

/// One extended key usage.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExtKeyUsage {
    Any,
    ServerAuth,
    ClientAuth,
    CodeSigning,
    EmailProtection,
    TimeStamping,
    OcspSigning,
    /// Any other purpose, by dotted OID.
    Other(String),
}

/// What a certificate says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateInfo {
    pub der: Vec<u8>,
    pub common_name: Option<String>,
    /// Subject Organizations in certificate order; for a client certificate, its roles.
    pub organizations: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub dns_names: Vec<String>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// Exactly the purposes listed; empty when the extension is absent (which TLS reads as
    /// "any purpose").
    pub extended_key_usages: BTreeSet<ExtKeyUsage>,
    pub digital_signature: bool,
    pub key_cert_sign: bool,
    pub is_ca: bool,
    /// The subject key's algorithm, when it is one the PKI signs with.
    pub key_algorithm: Option<KeyAlgorithm>,
    pub subject_key_id: Option<Vec<u8>>,
    pub authority_key_id: Option<Vec<u8>>,
}

/// The first certificate in PEM text.
pub fn inspect_pem(text: &str) -> Result<CertificateInfo, PkiError> {
    let block = pem::decode_one(text, &[pem::CERTIFICATE], "a certificate")?;
    inspect_der(&block.der)
}

pub fn inspect_der(der: &[u8]) -> Result<CertificateInfo, PkiError> {
    let cert = parse(der)?;
    let mut info = CertificateInfo {
        der: der.to_vec(),
        common_name: cert.subject().iter_common_name().next().and_then(|a| a.as_str().ok()).map(str::to_owned),
        organizations: cert.subject().iter_organization().filter_map(|a| a.as_str().ok()).map(str::to_owned).collect(),
        ip_addresses: Vec::new(),
        dns_names: Vec::new(),
        not_before: to_system_time(cert.validity().not_before),
        not_after: to_system_time(cert.validity().not_after),
        extended_key_usages: BTreeSet::new(),
        digital_signature: false,
        key_cert_sign: false,
        is_ca: cert.is_ca(),
        key_algorithm: key_algorithm(&cert),
        subject_key_id: None,
        authority_key_id: None,
    };
    for ext in cert.iter_extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    match name {
                        GeneralName::DNSName(dns) => info.dns_names.push((*dns).to_owned()),
                        GeneralName::IPAddress(bytes) => {
                            if let Some(ip) = ip_from_bytes(bytes) {
                                info.ip_addresses.push(ip);
                            }
                        }
                        _ => {}
                    }
                }
            }
            ParsedExtension::ExtendedKeyUsage(eku) => {
                let flags = [
                    (eku.any, ExtKeyUsage::Any),
                    (eku.server_auth, ExtKeyUsage::ServerAuth),
                    (eku.client_auth, ExtKeyUsage::ClientAuth),
                    (eku.code_signing, ExtKeyUsage::CodeSigning),
                    (eku.email_protection, ExtKeyUsage::EmailProtection),
                    (eku.time_stamping, ExtKeyUsage::TimeStamping),
                    (eku.ocsp_signing, ExtKeyUsage::OcspSigning),
                ];
                info.extended_key_usages.extend(flags.into_iter().filter(|(on, _)| *on).map(|(_, u)| u));
                info.extended_key_usages.extend(eku.other.iter().map(|oid| ExtKeyUsage::Other(oid.to_id_string())));
            }
            ParsedExtension::KeyUsage(ku) => {
                info.digital_signature = ku.digital_signature();
                info.key_cert_sign = ku.key_cert_sign();
            }
            ParsedExtension::SubjectKeyIdentifier(id) => info.subject_key_id = Some(id.0.to_vec()),
            ParsedExtension::AuthorityKeyIdentifier(aki) => {
                info.authority_key_id = aki.key_identifier.as_ref().map(|id| id.0.to_vec());
            }
            _ => {}
        }
    }
    Ok(info)
}

impl CertificateInfo {
    /// True when `ca` is this certificate's issuer: the names match and `ca`'s key verifies
    /// the signature. Validity and purposes are not considered.
    pub fn is_signed_by(&self, ca: &CertificateInfo) -> bool {
        let (Ok(cert), Ok(issuer)) = (parse(&self.der), parse(&ca.der)) else { return false };
        cert.issuer().as_raw() == issuer.subject().as_raw() && cert.verify_signature(Some(issuer.public_key())).is_ok()
    }

    /// The roles in the subject's Organizations, and the names that are not roles.
    pub fn roles(&self) -> (RoleSet, Vec<String>) {
        RoleSet::parse(&self.organizations)
    }
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, PkiError> {
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Ok(cert),
        Ok(_) => Err(PkiError::Certificate { what: "a certificate".into(), detail: "trailing data after it".into() }),
        Err(e) => Err(PkiError::Certificate { what: "a certificate".into(), detail: e.to_string() }),
    }
}

fn key_algorithm(cert: &X509Certificate) -> Option<KeyAlgorithm> {
    let spki = cert.public_key();
    let alg = &spki.algorithm.algorithm;
    if *alg == oid_registry::OID_SIG_ED25519 {
        return Some(KeyAlgorithm::Ed25519);
    }
    if *alg == oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = spki.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok())?;
        if curve == oid_registry::OID_EC_P256 {
            return Some(KeyAlgorithm::EcdsaP256);
        }
        if curve == oid_registry::OID_NIST_EC_P384 {
            return Some(KeyAlgorithm::EcdsaP384);
        }
    }
    None
}

fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

fn to_system_time(t: ASN1Time) -> SystemTime {
    let secs = Duration::from_secs(t.timestamp().unsigned_abs());
    let time = if t.timestamp() >= 0 { UNIX_EPOCH.checked_add(secs) } else { UNIX_EPOCH.checked_sub(secs) };
    time.unwrap_or(UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::ca::CertificateAuthority;
    use crate::pki::issue::{Validity, issue_client, issue_server};
    use crate::pki::role::Role;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn signature_check_tells_cas_apart() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let other = CertificateAuthority::generate_os(now()).unwrap();
        let leaf =
            issue_client(&ca, None, &RoleSet::from([Role::Admin]), Validity::starting(now(), Duration::from_secs(60)))
                .unwrap();
        let leaf = inspect_pem(&leaf.crt_pem).unwrap();
        assert!(leaf.is_signed_by(&inspect_pem(ca.crt_pem()).unwrap()));
        // Same subject (O=talos), different key: the name matches, the signature does not.
        assert!(!leaf.is_signed_by(&inspect_pem(other.crt_pem()).unwrap()));
        assert!(!leaf.is_signed_by(&leaf));
    }

    #[test]
    fn reads_talos_s_own_certificates() {
        let info = inspect_pem(crate::pki::fixtures::TALOS_OS_CRT).unwrap();
        assert_eq!(info.organizations, ["talos"]);
        assert_eq!(info.not_before, UNIX_EPOCH + Duration::from_secs(1_697_107_569)); // 2023-10-12T10:46:09Z
        assert!(info.subject_key_id.is_some() && info.authority_key_id.is_none());
    }

    // A client certificate talosctl minted in 2021, from Talos's cmd/talosctl/cmd/talos/
    // config_test.go ("FutureRole"): a role this version does not know, and both purposes, as
    // Talos issued them before apid checked ExtKeyUsage.
    const TALOS_FUTURE_ROLE_CRT: &str = "-----BEGIN CERTIFICATE-----
MIIBMzCB5qADAgECAhAP/S+TltY0Gti9CX4P3Ue+MAUGAytlcDAQMQ4wDAYDVQQK
EwV0YWxvczAeFw0yMTA3MDUxMTQzMjFaFw0zMTA3MDMxMTQzMjFaMBQxEjAQBgNV
BAoTCW9zOmZ1dHVyZTAqMAUGAytlcAMhAKrM86kObmLtl99Wiw1E/oivyvaujVcd
iPNO6MXP4lD2o1IwUDAOBgNVHQ8BAf8EBAMCB4AwHQYDVR0lBBYwFAYIKwYBBQUH
AwEGCCsGAQUFBwMCMB8GA1UdIwQYMBaAFHK71rj5NNlZwRuVWpW8nCZn+valMAUG
AytlcANBACJz759FyQI1yHY2MDood3kf7YxoGDmGzmg6YjDrnyp1XjZCz5CTPnoc
8qZP2Mq902g9vRIHuvo87CHf2Zq3FgU=
-----END CERTIFICATE-----
";

    #[test]
    fn reads_a_go_minted_client_certificate() {
        let info = inspect_pem(TALOS_FUTURE_ROLE_CRT).unwrap();
        assert_eq!(info.organizations, ["os:future"]);
        assert_eq!(info.roles(), (RoleSet::new(), vec!["os:future".to_owned()]));
        assert_eq!(info.extended_key_usages, BTreeSet::from([ExtKeyUsage::ServerAuth, ExtKeyUsage::ClientAuth]));
        assert!(info.digital_signature && !info.key_cert_sign && !info.is_ca);
        assert_eq!(info.authority_key_id.as_ref().map(Vec::len), Some(20));
    }

    #[test]
    fn sans_keep_their_order_and_kind() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let ips: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        let dns = vec!["a.example".to_owned(), "b".to_owned()];
        let crt = issue_server(&ca, "a", &ips, &dns, Validity::starting(now(), Duration::from_secs(60))).unwrap();
        let info = inspect_pem(&crt.crt_pem).unwrap();
        assert_eq!((info.ip_addresses, info.dns_names), (ips, dns));
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(inspect_der(b"\x30\x00"), Err(PkiError::Certificate { .. })));
        assert!(matches!(inspect_pem("no pem"), Err(PkiError::Pem { .. })));
    }
}

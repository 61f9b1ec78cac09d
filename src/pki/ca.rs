//! A certificate authority: its certificate and the key that signs with it. Generated ones
//! have the shape of Talos's CAs: self-signed, BasicConstraints CA (critical, no path length),
//! KeyUsage DigitalSignature and CertSign (critical), ExtKeyUsage ServerAuth and ClientAuth, a
//! SubjectKeyIdentifier, a random serial, ten years of validity. The OS CA (the Talos API's) is
//! Ed25519 with Organization `talos`; the etcd and Kubernetes CAs are ECDSA P-256.
//!
//! Loading checks that the key belongs to the certificate and that it is a CA, so a mismatched
//! pair is refused here rather than discovered by a failing handshake.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose,
};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::issue::{CertAndKey, Validity, random_serial};
use super::key::{KeyAlgorithm, PrivateKey};
use super::{PkiError, pem};

/// Talos's `CAValidityTime`: 87600 hours.
pub const CA_VALIDITY: Duration = Duration::from_secs(87_600 * 3600);

/// What a new CA looks like.
#[derive(Debug, Clone)]
pub struct CaOptions<'a> {
    pub algorithm: KeyAlgorithm,
    pub organization: Option<&'a str>,
    pub common_name: Option<&'a str>,
    pub validity: Validity,
}

pub struct CertificateAuthority {
    crt_pem: String,
    crt_der: Vec<u8>,
    key: PrivateKey,
    key_pem: String,
    /// The subject exactly as encoded in the certificate: leaves carry it as their issuer.
    subject_der: Vec<u8>,
    key_id: Option<Vec<u8>>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority").field("crt_pem", &self.crt_pem).finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// The Talos OS CA: Ed25519, Organization `talos`, valid from `now` for [`CA_VALIDITY`].
    pub fn generate_os(now: SystemTime) -> Result<Self, PkiError> {
        Self::generate(&CaOptions {
            algorithm: KeyAlgorithm::Ed25519,
            organization: Some("talos"),
            common_name: None,
            validity: Validity::starting(now, CA_VALIDITY),
        })
    }

    /// A new self-signed CA.
    pub fn generate(options: &CaOptions) -> Result<Self, PkiError> {
        let what = "a new CA certificate";
        let key = PrivateKey::generate(options.algorithm)?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        if let Some(o) = options.organization {
            name.push(DnType::OrganizationName, o);
        }
        if let Some(cn) = options.common_name {
            name.push(DnType::CommonName, cn);
        }
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyCertSign];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.serial_number = Some(random_serial()?);
        options.validity.apply(&mut params)?;
        let cert = params.self_signed(key.key_pair()).map_err(|source| PkiError::Sign { what: what.into(), source })?;
        let crt_pem = pem::encode(pem::CERTIFICATE, cert.der());
        let key_pem = key.to_pem()?;
        Self::from_parts(crt_pem, cert.der().to_vec(), key, key_pem, what)
    }

    /// A CA from its certificate and key, both PEM (a Talos `machine.ca` or `certs.os`).
    pub fn from_pem(crt_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        Self::from_pem_named(crt_pem, key_pem, "the CA certificate", "the CA key")
    }

    /// As [`from_pem`](Self::from_pem), naming the inputs in errors (`certs.os.crt`).
    pub fn from_pem_named(crt_pem: &str, key_pem: &str, crt_what: &str, key_what: &str) -> Result<Self, PkiError> {
        let der = pem::decode_one(crt_pem, &[pem::CERTIFICATE], crt_what)?.der;
        let key = PrivateKey::from_pem(key_pem, key_what)?;
        Self::from_parts(crt_pem.to_owned(), der, key, key_pem.to_owned(), crt_what)
    }

    fn from_parts(
        crt_pem: String,
        crt_der: Vec<u8>,
        key: PrivateKey,
        key_pem: String,
        what: &str,
    ) -> Result<Self, PkiError> {
        let (_, cert) = X509Certificate::from_der(&crt_der)
            .map_err(|e| PkiError::Certificate { what: what.to_owned(), detail: e.to_string() })?;
        if !cert.is_ca() {
            return Err(PkiError::NotCa { what: what.to_owned() });
        }
        if cert.public_key().raw != key.public_key_info().as_slice() {
            return Err(PkiError::KeyMismatch { what: what.to_owned() });
        }
        let key_id = cert.iter_extensions().find_map(|ext| match ext.parsed_extension() {
            x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
            _ => None,
        });
        let subject_der = cert.subject().as_raw().to_vec();
        Ok(CertificateAuthority { crt_pem, crt_der, key, key_pem, subject_der, key_id })
    }

    pub fn crt_pem(&self) -> &str {
        &self.crt_pem
    }

    pub fn crt_der(&self) -> &[u8] {
        &self.crt_der
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Certificate and key as a pair (for a bundle or a machine config's `machine.ca`).
    pub fn to_cert_and_key(&self) -> CertAndKey {
        CertAndKey { crt_pem: self.crt_pem.clone(), key_pem: self.key_pem.clone() }
    }

    pub(crate) fn key(&self) -> &PrivateKey {
        &self.key
    }

    pub(crate) fn subject_der(&self) -> &[u8] {
        &self.subject_der
    }

    pub(crate) fn key_id(&self) -> Option<&[u8]> {
        self.key_id.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::pki::fixtures::{TALOS_OS_CRT, TALOS_OS_KEY};
    use crate::pki::inspect::{ExtKeyUsage, inspect_pem};

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn generated_os_ca_has_the_shape_of_talos_s() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let ours = inspect_pem(ca.crt_pem()).unwrap();
        let talos = inspect_pem(TALOS_OS_CRT).unwrap();
        for info in [&ours, &talos] {
            assert!(info.is_ca && info.digital_signature && info.key_cert_sign);
            assert_eq!(info.organizations, ["talos"]);
            assert_eq!(info.common_name, None);
            assert_eq!(info.extended_key_usages, BTreeSet::from([ExtKeyUsage::ServerAuth, ExtKeyUsage::ClientAuth]));
            assert_eq!(info.key_algorithm, Some(KeyAlgorithm::Ed25519));
            assert_eq!(info.not_after.duration_since(info.not_before).unwrap(), CA_VALIDITY);
            assert!(info.is_signed_by(info), "self-signed");
        }
        assert_eq!(ours.not_before, now());
        assert!(ca.key_pem().starts_with("-----BEGIN ED25519 PRIVATE KEY-----"));
        assert!(ca.key_id().is_some());
        let again = CertificateAuthority::from_pem(ca.crt_pem(), ca.key_pem()).unwrap();
        assert_eq!(again.crt_der(), ca.crt_der());
    }

    #[test]
    fn talos_s_os_ca_loads_and_signs() {
        let ca = CertificateAuthority::from_pem(TALOS_OS_CRT, TALOS_OS_KEY).unwrap();
        assert_eq!(ca.key().algorithm(), KeyAlgorithm::Ed25519);
        let leaf =
            crate::pki::issue_server(&ca, "n", &[], &["n".into()], Validity::starting(now(), Duration::from_secs(60)))
                .unwrap();
        let info = inspect_pem(&leaf.crt_pem).unwrap();
        assert!(info.is_signed_by(&inspect_pem(TALOS_OS_CRT).unwrap()));
        assert_eq!(info.authority_key_id.as_deref(), ca.key_id());
    }

    #[test]
    fn mismatched_or_non_ca_pairs_are_refused() {
        let other = CertificateAuthority::generate_os(now()).unwrap();
        let err = CertificateAuthority::from_pem_named(TALOS_OS_CRT, other.key_pem(), "certs.os.crt", "certs.os.key")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "certs.os.crt: the private key does not belong to the certificate");
        let leaf = crate::pki::issue_server(&other, "n", &[], &[], Validity::starting(now(), Duration::from_secs(60)))
            .unwrap();
        let err = CertificateAuthority::from_pem(&leaf.crt_pem, &leaf.key_pem).unwrap_err();
        assert!(matches!(err, PkiError::NotCa { .. }), "{err}");
    }
}

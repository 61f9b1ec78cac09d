//! Private keys in the encodings Talos uses: Ed25519 as PKCS#8 under the label
//! `ED25519 PRIVATE KEY` (the OS CA and every API certificate), ECDSA as SEC 1 under
//! `EC PRIVATE KEY` (the etcd and Kubernetes CAs, the service account key). Plain
//! `PRIVATE KEY` (PKCS#8) is read as well.
//!
//! A key is only ever written back in Talos's encoding; it is never printed (`Debug` shows the
//! algorithm only).

use std::fmt;

use rcgen::{KeyPair, PublicKeyData};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use super::der::{self, CONTEXT_0, CONTEXT_1, INTEGER, OCTET_STRING, OID, SEQUENCE};
use super::{PkiError, pem};

/// id-ecPublicKey, 1.2.840.10045.2.1, encoded.
const OID_EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];

/// The key algorithms the PKI signs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    Ed25519,
    EcdsaP256,
    EcdsaP384,
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            KeyAlgorithm::Ed25519 => "Ed25519",
            KeyAlgorithm::EcdsaP256 => "ECDSA P-256",
            KeyAlgorithm::EcdsaP384 => "ECDSA P-384",
        })
    }
}

/// A private key able to sign certificates and TLS handshakes.
pub struct PrivateKey {
    algorithm: KeyAlgorithm,
    pair: KeyPair,
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("PrivateKey").field("algorithm", &self.algorithm).finish_non_exhaustive()
    }
}

impl PrivateKey {
    /// A fresh key. Only Ed25519 and P-256 are generated, as Talos does.
    pub fn generate(algorithm: KeyAlgorithm) -> Result<Self, PkiError> {
        let alg = match algorithm {
            KeyAlgorithm::Ed25519 => &rcgen::PKCS_ED25519,
            KeyAlgorithm::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyAlgorithm::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
        };
        let pair = KeyPair::generate_for(alg).map_err(|source| PkiError::Generate { algorithm, source })?;
        Ok(PrivateKey { algorithm, pair })
    }

    /// Reads the first key block of `text`; `what` names it in errors.
    pub fn from_pem(text: &str, what: &str) -> Result<Self, PkiError> {
        let block = pem::decode_one(
            text,
            &[pem::ED25519_PRIVATE_KEY, pem::EC_PRIVATE_KEY, pem::PRIVATE_KEY, "RSA PRIVATE KEY"],
            what,
        )?;
        let err = |detail: &str| PkiError::Key { what: what.to_owned(), detail: detail.to_owned() };
        let pkcs8 = match block.label.as_str() {
            pem::EC_PRIVATE_KEY => sec1_to_pkcs8(&block.der).ok_or_else(|| err("malformed SEC 1 EC private key"))?,
            "RSA PRIVATE KEY" => return Err(err("RSA keys are not supported; the Talos OS CA uses Ed25519")),
            _ => block.der,
        };
        let pair = KeyPair::try_from(&PrivatePkcs8KeyDer::from(pkcs8))
            .map_err(|e| err(&format!("not a usable Ed25519 or ECDSA key: {e}")))?;
        let algorithm = if *pair.algorithm() == rcgen::PKCS_ED25519 {
            KeyAlgorithm::Ed25519
        } else if *pair.algorithm() == rcgen::PKCS_ECDSA_P256_SHA256 {
            KeyAlgorithm::EcdsaP256
        } else if *pair.algorithm() == rcgen::PKCS_ECDSA_P384_SHA384 {
            KeyAlgorithm::EcdsaP384
        } else {
            return Err(err("RSA keys are not supported; the Talos OS CA uses Ed25519"));
        };
        Ok(PrivateKey { algorithm, pair })
    }

    pub fn algorithm(&self) -> KeyAlgorithm {
        self.algorithm
    }

    /// Talos's encoding: Ed25519 as a version-1 PKCS#8 (what Go writes) under
    /// `ED25519 PRIVATE KEY`, ECDSA as SEC 1 with its curve named, under `EC PRIVATE KEY`.
    pub fn to_pem(&self) -> Result<String, PkiError> {
        let bad =
            || PkiError::Key { what: format!("{} key", self.algorithm), detail: "unexpected PKCS#8 layout".into() };
        let pkcs8 = self.pair.serialized_der();
        match self.algorithm {
            KeyAlgorithm::Ed25519 => {
                let v1 = pkcs8_v1(pkcs8).ok_or_else(bad)?;
                Ok(pem::encode(pem::ED25519_PRIVATE_KEY, &v1))
            }
            KeyAlgorithm::EcdsaP256 | KeyAlgorithm::EcdsaP384 => {
                let sec1 = pkcs8_to_sec1(pkcs8).ok_or_else(bad)?;
                Ok(pem::encode(pem::EC_PRIVATE_KEY, &sec1))
            }
        }
    }

    /// The DER SubjectPublicKeyInfo, to compare with a certificate's.
    pub fn public_key_info(&self) -> Vec<u8> {
        self.pair.subject_public_key_info()
    }

    pub(crate) fn key_pair(&self) -> &KeyPair {
        &self.pair
    }

    /// The key for rustls's key provider.
    pub(crate) fn to_rustls(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.pair.serialized_der().to_vec()))
    }
}

/// ring writes PKCS#8 version 2 (with the public key); Go writes and expects version 1, which
/// ring reads too. Version 1 is version 2 without the trailing public key.
fn pkcs8_v1(pkcs8: &[u8]) -> Option<Vec<u8>> {
    let parts = der::children(pkcs8, SEQUENCE)?;
    let (alg, key) = (parts.get(1)?, parts.get(2)?);
    (alg.tag == SEQUENCE && key.tag == OCTET_STRING)
        .then(|| der::wrap_all(SEQUENCE, &[&der::wrap(INTEGER, &[0]), alg.raw, key.raw]))
}

/// PKCS#8 wraps the SEC 1 structure; ring leaves the curve out of the inner one, Go's reader
/// requires it, so it is put back from the outer algorithm identifier.
fn pkcs8_to_sec1(pkcs8: &[u8]) -> Option<Vec<u8>> {
    let parts = der::children(pkcs8, SEQUENCE)?;
    let alg = der::elements(parts.get(1)?.content)?;
    let curve = alg.get(1).filter(|c| c.tag == OID)?;
    let inner = parts.get(2).filter(|p| p.tag == OCTET_STRING)?;
    let fields = der::children(inner.content, SEQUENCE)?;
    let version = fields.first().filter(|f| f.tag == INTEGER)?;
    let private = fields.get(1).filter(|f| f.tag == OCTET_STRING)?;
    let public = fields.iter().find(|f| f.tag == CONTEXT_1)?;
    let params = der::wrap(CONTEXT_0, curve.raw);
    Some(der::wrap_all(SEQUENCE, &[version.raw, private.raw, &params, public.raw]))
}

/// The reverse: a SEC 1 key (which names its curve) wrapped as PKCS#8 for ring.
fn sec1_to_pkcs8(sec1: &[u8]) -> Option<Vec<u8>> {
    let fields = der::children(sec1, SEQUENCE)?;
    let params = fields.iter().find(|f| f.tag == CONTEXT_0)?;
    let (curve, rest) = der::read(params.content)?;
    if curve.tag != OID || !rest.is_empty() || !fields.iter().any(|f| f.tag == CONTEXT_1) {
        return None;
    }
    let alg = der::wrap_all(SEQUENCE, &[OID_EC_PUBLIC_KEY, curve.raw]);
    Some(der::wrap_all(SEQUENCE, &[&der::wrap(INTEGER, &[0]), &alg, &der::wrap(OCTET_STRING, sec1)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::fixtures::TALOS_OS_KEY as TALOS_ED25519;

    // The etcd CA key of Talos's stability fixture (pki/testdata/secrets.yaml), decoded: Go's MarshalECPrivateKey (SEC 1, curve named).
    const TALOS_P256: &str = "-----BEGIN EC PRIVATE KEY-----\n\
        MHcCAQEEIM7Ceg2MFAnS3tN35zA74hVwTIdNKa+FpPyXTDBuN0TYoAoGCCqGSM49\n\
        AwEHoUQDQgAE6lSy3SzDQFgALseItyQMii5ZIRdU1FRc3pFwox5AA5TwcgEUCLZ4\n\
        p12R4jwdj3YxjnlKaoFcz7ATy0NfY7LUkw==\n\
        -----END EC PRIVATE KEY-----\n";

    #[test]
    fn talos_keys_read_and_write_back_byte_for_byte() {
        let ed = PrivateKey::from_pem(TALOS_ED25519, "os key").unwrap();
        assert_eq!(ed.algorithm(), KeyAlgorithm::Ed25519);
        assert_eq!(ed.to_pem().unwrap(), TALOS_ED25519);
        let ec = PrivateKey::from_pem(TALOS_P256, "etcd key").unwrap();
        assert_eq!(ec.algorithm(), KeyAlgorithm::EcdsaP256);
        assert_eq!(ec.to_pem().unwrap(), TALOS_P256);
    }

    #[test]
    fn generated_keys_use_talos_encodings_and_read_back() {
        for (alg, label) in
            [(KeyAlgorithm::Ed25519, "ED25519 PRIVATE KEY"), (KeyAlgorithm::EcdsaP256, "EC PRIVATE KEY")]
        {
            let key = PrivateKey::generate(alg).unwrap();
            let text = key.to_pem().unwrap();
            assert!(text.starts_with(&format!("-----BEGIN {label}-----\n")), "{text}");
            let back = PrivateKey::from_pem(&text, "k").unwrap();
            assert_eq!(back.algorithm(), alg);
            assert_eq!(back.public_key_info(), key.public_key_info());
            assert_eq!(back.to_pem().unwrap(), text);
        }
        let ed = PrivateKey::generate(KeyAlgorithm::Ed25519).unwrap();
        assert_eq!(pem::decode_one(&ed.to_pem().unwrap(), &["ED25519 PRIVATE KEY"], "k").unwrap().der.len(), 48);
    }

    #[test]
    fn plain_pkcs8_is_accepted() {
        let key = PrivateKey::generate(KeyAlgorithm::EcdsaP256).unwrap();
        let text = pem::encode(pem::PRIVATE_KEY, key.key_pair().serialized_der());
        assert_eq!(PrivateKey::from_pem(&text, "k").unwrap().public_key_info(), key.public_key_info());
    }

    #[test]
    fn unusable_keys_are_errors_naming_the_input() {
        let rsa = pem::encode("RSA PRIVATE KEY", b"\x30\x00");
        let err = PrivateKey::from_pem(&rsa, "certs.os.key").unwrap_err().to_string();
        assert!(err.starts_with("reading certs.os.key: RSA keys are not supported"), "{err}");
        let junk = pem::encode(pem::PRIVATE_KEY, b"\x30\x03\x02\x01\x00");
        let err = PrivateKey::from_pem(&junk, "certs.os.key").unwrap_err().to_string();
        assert!(err.contains("certs.os.key") && err.contains("not a usable"), "{err}");
        let err = PrivateKey::from_pem(&pem::encode(pem::CERTIFICATE, b"x"), "k").unwrap_err().to_string();
        assert!(err.contains("expected ED25519 PRIVATE KEY"), "{err}");
        assert!(!format!("{:?}", PrivateKey::generate(KeyAlgorithm::Ed25519).unwrap()).contains('['));
    }
}

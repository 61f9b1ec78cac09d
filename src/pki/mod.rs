//! The OS PKI: the cluster's Talos API certificate authority (Ed25519, Organization `talos`),
//! the apid server and role-bearing client certificates a control plane mints from it, the CSRs a
//! worker sends to trustd and how trustd signs them (server auth only, roles stripped), reading
//! certificates back, when to renew them, the rustls configurations of the API door, and the
//! secrets bundle (`secrets.yaml`) all of it is generated from.
//!
//! Pure apart from randomness: it reads no files, opens no sockets and never looks at the clock;
//! callers pass the time, so tests choose it. Private keys never leave the values holding them
//! except through the `*_pem` accessors, and nothing here logs key material.

pub mod bundle;
pub mod ca;
pub mod csr;
mod der;
pub mod inspect;
pub mod issue;
pub mod key;
pub mod pem;
pub mod role;
pub mod rotation;
pub mod tls;

pub use bundle::SecretsBundle;
pub use ca::CertificateAuthority;
pub use csr::{CsrRequest, Issued, NodeCsr, SanPolicy, SanRefusal, SignError, generate_csr, sign_csr_as_server};
pub use inspect::{CertificateInfo, ExtKeyUsage, inspect_der, inspect_pem};
pub use issue::{CertAndKey, Validity, issue_client, issue_server};
pub use key::{KeyAlgorithm, PrivateKey};
pub use role::{Role, RoleSet};

/// Writes `text` to `path`, readable and writable by its owner only: secrets bundles, machine
/// configs and talosconfigs hold keys.
pub fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())
}

/// Everything that can go wrong in the PKI; each message names the certificate, key or field.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("reading {what}: {detail}")]
    Pem { what: String, detail: String },
    #[error("parsing {what}: {detail}")]
    Certificate { what: String, detail: String },
    #[error("{what} is not a CA certificate")]
    NotCa { what: String },
    #[error("reading {what}: {detail}")]
    Key { what: String, detail: String },
    #[error("{what}: the private key does not belong to the certificate")]
    KeyMismatch { what: String },
    #[error("generating a {algorithm} key: {source}")]
    Generate { algorithm: KeyAlgorithm, source: rcgen::Error },
    #[error("signing {what}: {source}")]
    Sign { what: String, source: rcgen::Error },
    #[error("signing {what}: {detail}")]
    Encode { what: String, detail: String },
    #[error("reading a certificate signing request: {detail}")]
    Csr { detail: String },
    #[error("invalid validity: {detail}")]
    Validity { detail: String },
    #[error("unknown role {role:?} (known: {})", role::Role::ALL.map(|r| r.as_str()).join(", "))]
    UnknownRole { role: String },
    #[error("the system random generator failed")]
    Random,
    #[error("building the TLS configuration ({what}): {detail}")]
    Tls { what: String, detail: String },
    #[error("the peer presented no certificate")]
    NoPeerCertificate,
    #[error("parsing secrets bundle: {detail}")]
    BundleYaml { detail: String },
    #[error("secrets bundle: {field}: {detail}")]
    Bundle { field: String, detail: String },
}

/// Fills `buf` from the system's secure random generator, through the one crypto provider.
pub(crate) fn random_bytes(buf: &mut [u8]) -> Result<(), PkiError> {
    rustls::crypto::ring::default_provider().secure_random.fill(buf).map_err(|_| PkiError::Random)
}

/// Talos's stability secrets (`testdata/secrets.yaml`), decoded where tests need the PEM.
#[cfg(test)]
pub(crate) mod fixtures {
    pub const TALOS_SECRETS: &str = include_str!("testdata/secrets.yaml");

    /// `certs.os.crt`, decoded.
    pub const TALOS_OS_CRT: &str = "-----BEGIN CERTIFICATE-----
MIIBPjCB8aADAgECAhB9q+FUzhw92puOzki70uxdMAUGAytlcDAQMQ4wDAYDVQQK
EwV0YWxvczAeFw0yMzEwMTIxMDQ2MDlaFw0zMzEwMDkxMDQ2MDlaMBAxDjAMBgNV
BAoTBXRhbG9zMCowBQYDK2VwAyEAhuKs6qx+JZ/0Xo2mwiACc+Q0IV2HhLwz3U6H
e1zfcKijYTBfMA4GA1UdDwEB/wQEAwIChDAdBgNVHSUEFjAUBggrBgEFBQcDAQYI
KwYBBQUHAwIwDwYDVR0TAQH/BAUwAwEB/zAdBgNVHQ4EFgQUJX3ZUMFKVXVy5hJY
3doMXCiTBYEwBQYDK2VwA0EABmLkl8HNd7qJD7ujBI6PoZmTPAiDqOFCCST6IbVC
QwS45nMm2WmjTHsvkaNECGgy0aArZhWlnuXYK0cKwgeICA==
-----END CERTIFICATE-----
";

    /// `certs.os.key`, decoded: Go's PKCS#8 for Ed25519 under Talos's label.
    pub const TALOS_OS_KEY: &str = "-----BEGIN ED25519 PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIMDWnIDuZRvXPqmmm+znMyIc+vNwf7gbK/JdwX/b7guE
-----END ED25519 PRIVATE KEY-----
";
}

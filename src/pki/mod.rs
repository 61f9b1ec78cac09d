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
pub use csr::{
    CsrRequest, Issued, NodeCsr, SanPolicy, SanRefusal, SignError, generate_csr, local_only, sign_csr_as_server,
};
pub use inspect::{CertificateInfo, ExtKeyUsage, inspect_der, inspect_pem};
pub use issue::{CertAndKey, Validity, issue_client, issue_server};
pub use key::{KeyAlgorithm, PrivateKey};
pub use role::{Role, RoleSet};

/// Opens `path` to be written for its owner only, emptied: every file that holds a secret
/// (secrets bundles, machine configs, talosconfigs, salts) is written through this. The open
/// never follows a symbolic link (one at `path` is refused, so a link planted there cannot
/// send the secret elsewhere), creates the file 0600 if it is not there, and makes it 0600 on
/// the open descriptor whatever mode it had, before it is emptied: the checks come first, so a
/// refused path is left as it was. Anything but a regular file (a FIFO, a device) is refused.
pub fn open_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        // O_NONBLOCK: a FIFO without a reader fails at once instead of hanging the writer.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                Error::new(ErrorKind::InvalidInput, "it is a symbolic link, which is never written through")
            }
            _ => e,
        })?;
    if !file.metadata()?.file_type().is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "it is not a regular file"));
    }
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.set_len(0)?;
    Ok(file)
}

/// Writes `text` to `path` through [`open_private`]: mode 0600 whatever was there, never
/// through a symbolic link.
pub fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = open_private(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
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

#[cfg(test)]
mod write_tests {
    use std::os::unix::fs::PermissionsExt;

    use super::write_private;

    fn mode(path: &std::path::Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn an_existing_file_of_any_mode_comes_out_0600_with_the_new_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.yaml");
        std::fs::write(&path, "a much longer old text than the new one\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, "new\n").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        let fresh = dir.path().join("fresh");
        write_private(&fresh, "x").unwrap();
        assert_eq!(mode(&fresh), 0o600);
    }

    #[test]
    fn a_symbolic_link_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        let link = dir.path().join("talosconfig");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = write_private(&link, "secret").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!target.exists(), "the dangling link's target was created");
        // A link to an existing file: the file keeps its text and mode.
        std::fs::write(&target, "theirs").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(write_private(&link, "secret").is_err());
        assert_eq!((std::fs::read_to_string(&target).unwrap().as_str(), mode(&target)), ("theirs", 0o644));
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = write_private(&fifo, "secret").unwrap_err();
        assert!(!err.to_string().is_empty());
        let err = write_private(dir.path(), "secret").unwrap_err();
        assert!(!err.to_string().is_empty());
    }
}

//! Secrets controllers: the OS root from the machine configuration, and the certificates apid
//! and trustd serve with, issued locally on control planes, through trustd on workers, from a
//! per-boot maintenance CA before there is a configuration. Certificates are renewed at half
//! their lifetime; the services watch the resources and swap them without a restart.

pub mod api;
pub mod cert_sans;
pub mod encryption_salt;
pub mod root;
pub mod trustd;

pub use api::ApiCertController;
pub use cert_sans::CertSansController;
pub use encryption_salt::EncryptionSaltController;
pub use root::RootController;
pub use trustd::TrustdCertController;

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

/// How a node names itself in certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub hostname: String,
    /// The addresses it is reached on (until the network controllers publish them).
    pub addresses: Vec<IpAddr>,
}

/// trustd's port, where workers ask for their certificates.
pub const TRUSTD_PORT: u16 = 50001;

/// When a certificate should be renewed (half its lifetime), or `None` if it does not parse.
pub(crate) fn renew_at(crt_pem: &str) -> Option<SystemTime> {
    crate::pki::inspect_pem(crt_pem).ok().map(|i| i.renew_at())
}

/// How long until `at`, at least a second (so a due certificate is redone promptly but not in
/// a tight loop).
pub(crate) fn until(at: SystemTime) -> Duration {
    at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO).max(Duration::from_secs(1))
}

//! When to mint a certificate again: at half its lifetime, as Talos renews its API certificates,
//! so a node that misses one renewal still has half a lifetime to catch up before it expires.
//!
//! Pure time arithmetic: the caller brings `now` and does the renewing.

use std::time::{Duration, SystemTime};

use super::inspect::CertificateInfo;

/// The instant half-way between `not_before` and `not_after`; `not_before` itself when the
/// window is empty or inverted.
pub fn renew_at(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or(Duration::ZERO);
    not_before + lifetime / 2
}

/// Whether a certificate valid from `not_before` to `not_after` should be renewed at `now`.
pub fn renewal_due(not_before: SystemTime, not_after: SystemTime, now: SystemTime) -> bool {
    now >= renew_at(not_before, not_after)
}

impl CertificateInfo {
    pub fn renew_at(&self) -> SystemTime {
        renew_at(self.not_before, self.not_after)
    }

    pub fn renewal_due(&self, now: SystemTime) -> bool {
        renewal_due(self.not_before, self.not_after, now)
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::pki::ca::CertificateAuthority;
    use crate::pki::inspect::inspect_pem;
    use crate::pki::issue::{NODE_CERT_VALIDITY, Validity, issue_server};

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn half_life() {
        assert_eq!(renew_at(at(1000), at(3000)), at(2000));
        assert!(!renewal_due(at(1000), at(3000), at(1999)));
        assert!(renewal_due(at(1000), at(3000), at(2000)));
        assert!(renewal_due(at(1000), at(3000), at(5000)), "expired is due");
        assert_eq!(renew_at(at(3000), at(1000)), at(3000), "inverted window renews at once");
    }

    #[test]
    fn a_node_certificate_is_renewed_after_twelve_hours() {
        let t0 = 1_700_000_000;
        let ca = CertificateAuthority::generate_os(at(t0)).unwrap();
        let crt = issue_server(&ca, "n", &[], &[], Validity::starting(at(t0), NODE_CERT_VALIDITY)).unwrap();
        let info = inspect_pem(&crt.crt_pem).unwrap();
        assert_eq!(info.renew_at(), at(t0 + 12 * 3600));
        assert!(!info.renewal_due(at(t0 + 12 * 3600 - 1)));
        assert!(info.renewal_due(at(t0 + 12 * 3600)));
    }
}

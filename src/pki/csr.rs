//! Certificate signing requests: what a worker (which holds no CA key) sends trustd for its
//! apid server certificate, and how trustd signs one.
//!
//! Signing never grants what a request asks beyond names: whatever it requested, the result has
//! ExtKeyUsage ServerAuth only, KeyUsage DigitalSignature, no BasicConstraints, and its subject
//! without any Organization, since Organizations are roles and a worker must never mint itself
//! a client identity. The request's common name is kept, and its SANs only as far as
//! [`SanPolicy`] allows them: a request is signed whole or refused, never trimmed.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rcgen::{
    CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, SanType,
};
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

/// Which SANs trustd signs for one request, decided by who sent it.
///
/// The machine token is the same on every worker, so it says "a worker of this cluster", never
/// which one; a certificate's names must come from something the requester cannot choose.
/// The rule:
///
/// - **IP SANs**: only the address the request came from, as trustd sees it (the TCP peer;
///   an IPv4-mapped IPv6 peer is its IPv4 address). A worker asks for the address it dials
///   trustd from, which is the one the control plane and clients reach its apid at. Any other
///   IP, the control plane's above all, is refused: that is the certificate a fake apid would
///   need to be taken for another node. The one exception is `127.0.0.1` and `::1`
///   ([`local_only`]): they name no node on any network, only the machine a client runs on,
///   and a client reaches a node there only through a port its own machine forwards (as
///   `talosctl cluster create` does, listing `127.0.0.1` in every node's certSANs).
/// - **DNS SANs**: trustd cannot check a name, so it refuses those it knows belong to someone
///   else and those that would match anything: the names the control plane itself is known by
///   (`reserved_names`: the DNS SANs of trustd's own certificate, i.e. the control plane's
///   hostname and `machine.certSANs`), `localhost`, wildcards, IP literals, and anything that is
///   not a hostname (letters, digits, `-` and `.`, labels of 1 to 63 characters, at most 253 in
///   all). A worker's own hostname and `machine.certSANs` pass. A name a client uses for
///   another control plane must be in that control plane's certSANs and in this one's: list
///   the cluster endpoint's name in every control plane's certSANs.
/// - **Other SANs** (e-mail, URI, other names): refused; Talos's apid uses none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SanPolicy {
    /// The requesting peer's address.
    pub peer: IpAddr,
    /// Names nobody but the control plane may have, lower case.
    pub reserved_names: BTreeSet<String>,
}

/// Why a request was refused: the SAN and the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SAN {san} refused for peer {peer}: {reason}")]
pub struct SanRefusal {
    pub san: String,
    pub peer: IpAddr,
    pub reason: String,
}

/// The peer's address as SANs compare it: an IPv4-mapped IPv6 address is its IPv4 address.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `ip` is `127.0.0.1` or `::1`: an address that names no node on any network, only the
/// machine a client runs on (see [`SanPolicy`]). Other loopback addresses are not: nodes run as
/// processes on a host use them as their own.
pub fn local_only(ip: IpAddr) -> bool {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => v4 == std::net::Ipv4Addr::LOCALHOST,
        IpAddr::V6(v6) => v6 == std::net::Ipv6Addr::LOCALHOST,
    }
}

/// Whether `name` is a plain DNS hostname (no wildcard, no IP literal).
fn is_hostname(name: &str) -> bool {
    let labels_ok = name.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    // All-numeric last label: an IPv4 literal or something a resolver would take for one.
    let numeric_tld = name.rsplit('.').next().is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()));
    !name.is_empty() && name.len() <= 253 && labels_ok && !numeric_tld
}

impl SanPolicy {
    pub fn new(peer: IpAddr, reserved_names: impl IntoIterator<Item = String>) -> Self {
        SanPolicy {
            peer: canonical_ip(peer),
            reserved_names: reserved_names.into_iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }

    /// Every SAN of `request` allowed, or the first that is not.
    pub fn check(&self, request: &CsrRequest) -> Result<(), SanRefusal> {
        let refuse = |san: String, reason: &str| SanRefusal { san, peer: self.peer, reason: reason.to_string() };
        for ip in &request.ips {
            if canonical_ip(*ip) != self.peer && !local_only(*ip) {
                return Err(refuse(ip.to_string(), "an IP SAN must be the address the request comes from"));
            }
        }
        for name in &request.dns_names {
            let lower = name.to_ascii_lowercase();
            let lower = lower.strip_suffix('.').unwrap_or(&lower);
            if name.parse::<IpAddr>().is_ok() {
                return Err(refuse(format!("DNS:{name}"), "an IP address as a DNS name"));
            }
            if !is_hostname(lower) {
                return Err(refuse(format!("DNS:{name}"), "not a hostname (wildcards are never signed)"));
            }
            if lower == "localhost" || lower.ends_with(".localhost") {
                return Err(refuse(format!("DNS:{name}"), "localhost is every node's"));
            }
            if self.reserved_names.contains(lower) {
                return Err(refuse(format!("DNS:{name}"), "a name of the control plane"));
            }
        }
        if let Some(other) = request.other_sans.first() {
            return Err(refuse(other.clone(), "only IP and DNS SANs are signed"));
        }
        Ok(())
    }
}

/// A request whose signature checked, and what it asks for.
pub struct CsrRequest {
    params: CertificateSigningRequestParams,
    /// The subject without Organizations, DER.
    subject: Vec<u8>,
    pub common_name: Option<String>,
    pub ips: Vec<IpAddr>,
    pub dns_names: Vec<String>,
    /// SANs of other kinds, described.
    pub other_sans: Vec<String>,
}

impl CsrRequest {
    /// Reads a PEM request and checks its signature.
    pub fn parse(csr_pem: &str) -> Result<CsrRequest, PkiError> {
        let bad = |detail: String| PkiError::Csr { detail };
        let block = pem::decode_one(csr_pem, &[pem::CERTIFICATE_REQUEST], "the certificate signing request")?;
        let params = CertificateSigningRequestParams::from_der(&block.der.as_slice().into())
            .map_err(|e| bad(format!("not a valid signed request: {e}")))?;
        let (_, parsed) = X509CertificationRequest::from_der(&block.der).map_err(|e| bad(e.to_string()))?;
        let subject = without_organizations(parsed.certification_request_info.subject.as_raw())
            .ok_or_else(|| bad("malformed subject name".into()))?;
        let common_name = parsed
            .certification_request_info
            .subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_string);
        let (mut ips, mut dns_names, mut other_sans) = (Vec::new(), Vec::new(), Vec::new());
        for san in &params.params.subject_alt_names {
            match san {
                SanType::IpAddress(ip) => ips.push(*ip),
                SanType::DnsName(name) => dns_names.push(name.as_str().to_string()),
                SanType::Rfc822Name(n) => other_sans.push(format!("email:{}", n.as_str())),
                SanType::URI(u) => other_sans.push(format!("URI:{}", u.as_str())),
                _ => other_sans.push("othername".to_string()),
            }
        }
        Ok(CsrRequest { params, subject, common_name, ips, dns_names, other_sans })
    }
}

/// A certificate trustd issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub crt_pem: String,
    /// The serial number, lower-case hex.
    pub serial: String,
}

/// What trustd does with a worker's request: checks its SANs against `policy` and signs it as
/// a server certificate valid from `now` for `validity`.
pub fn sign_csr_as_server(
    ca: &CertificateAuthority,
    request: CsrRequest,
    policy: &SanPolicy,
    validity: Duration,
    now: SystemTime,
) -> Result<Issued, SignError> {
    policy.check(&request)?;
    let leaf = Leaf {
        subject: request.subject,
        sans: request.params.params.subject_alt_names,
        ekus: vec![ExtendedKeyUsagePurpose::ServerAuth],
        validity: Validity::starting(now, validity),
    };
    let der = sign_leaf(ca, leaf, &request.params.public_key, "a server certificate for a CSR")?;
    let serial = x509_parser::parse_x509_certificate(&der)
        .map(|(_, c)| c.raw_serial().iter().map(|b| format!("{b:02x}")).collect::<String>())
        .map_err(|e| PkiError::Certificate { what: "the certificate just signed".into(), detail: e.to_string() })?;
    Ok(Issued { crt_pem: pem::encode(pem::CERTIFICATE, &der), serial })
}

/// Why a request was not signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error(transparent)]
    Refused(#[from] SanRefusal),
    #[error(transparent)]
    Pki(#[from] PkiError),
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

    /// Signs `csr` for a request from `peer`, with the control plane named `cp-1`.
    fn sign(ca: &CertificateAuthority, csr: &str, peer: IpAddr) -> Result<Issued, SignError> {
        let policy = SanPolicy::new(peer, ["cp-1".to_string()]);
        sign_csr_as_server(ca, CsrRequest::parse(csr)?, &policy, NODE_CERT_VALIDITY, now())
    }

    #[test]
    fn the_san_rule() {
        let peer: IpAddr = "10.5.0.3".parse().unwrap();
        let reserved = ["cp-1".to_string(), "CP.Example.com".to_string()];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // (peer, IPs, DNS names, the SAN refused or None)
        type Case<'a> = (IpAddr, &'a [&'a str], &'a [&'a str], Option<&'a str>);
        let table: &[Case] = &[
            (peer, &[], &[], None),
            (peer, &["10.5.0.3"], &[], None),
            (peer, &["10.5.0.3"], &["worker-1", "worker-1.example.com", "w1.example.com."], None),
            (ip("::ffff:10.5.0.3"), &["10.5.0.3"], &[], None),
            (peer, &["::ffff:10.5.0.3"], &[], None),
            (ip("fd00::3"), &["fd00::3"], &[], None),
            (peer, &["10.5.0.2"], &[], Some("10.5.0.2")),
            (peer, &["10.5.0.3", "10.5.0.2"], &[], Some("10.5.0.2")),
            (peer, &["fd00::3"], &[], Some("fd00::3")),
            (ip("::ffff:10.5.0.2"), &["10.5.0.3"], &[], Some("10.5.0.3")),
            (peer, &["10.5.0.3", "127.0.0.1", "::1"], &[], None),
            (peer, &["127.0.0.2"], &[], Some("127.0.0.2")),
            (peer, &[], &["cp-1"], Some("DNS:cp-1")),
            (peer, &[], &["cp.example.COM"], Some("DNS:cp.example.COM")),
            (peer, &[], &["cp.example.com."], Some("DNS:cp.example.com.")),
            (peer, &[], &["localhost"], Some("DNS:localhost")),
            (peer, &[], &["a.localhost"], Some("DNS:a.localhost")),
            (peer, &[], &["*.example.com"], Some("DNS:*.example.com")),
            (peer, &[], &["10.5.0.1"], Some("DNS:10.5.0.1")),
            (peer, &[], &["fd00::1"], Some("DNS:fd00::1")),
            (peer, &[], &["a..b"], Some("DNS:a..b")),
            (peer, &[], &["-a"], Some("DNS:-a")),
            (peer, &[], &["under_score"], Some("DNS:under_score")),
            (peer, &[], &[""], Some("DNS:")),
        ];
        for (peer, ips, names, refused) in table {
            let request = CsrRequest {
                params: CertificateSigningRequestParams::from_der(
                    &pem::decode_one(
                        &generate_csr("w", &[], &[], None).unwrap().csr_pem,
                        &[pem::CERTIFICATE_REQUEST],
                        "csr",
                    )
                    .unwrap()
                    .der
                    .as_slice()
                    .into(),
                )
                .unwrap(),
                subject: Vec::new(),
                common_name: None,
                ips: ips.iter().map(|s| ip(s)).collect(),
                dns_names: names.iter().map(|s| s.to_string()).collect(),
                other_sans: Vec::new(),
            };
            let got = SanPolicy::new(*peer, reserved.iter().cloned()).check(&request);
            match refused {
                None => assert_eq!(got, Ok(()), "{peer} asking for {ips:?} {names:?}"),
                Some(san) => {
                    let e = got.expect_err(&format!("{peer} asking for {ips:?} {names:?}"));
                    assert_eq!(e.san, *san, "{e}");
                    assert_eq!(e.peer, canonical_ip(*peer));
                    assert!(e.to_string().contains(&format!("for peer {}", canonical_ip(*peer))), "{e}");
                }
            }
        }
    }

    #[test]
    fn a_refused_request_is_not_signed_and_says_why() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let cp: IpAddr = "10.5.0.2".parse().unwrap();
        let csr = generate_csr("worker-1", &[cp], &[], None).unwrap();
        let err = sign(&ca, &csr.csr_pem, "10.5.0.3".parse().unwrap()).unwrap_err();
        assert!(matches!(&err, SignError::Refused(r) if r.san == "10.5.0.2"), "{err}");
        assert_eq!(
            err.to_string(),
            "SAN 10.5.0.2 refused for peer 10.5.0.3: an IP SAN must be the address the request comes from"
        );
        let csr = generate_csr("worker-1", &[], &["cp-1".into()], None).unwrap();
        assert!(matches!(sign(&ca, &csr.csr_pem, cp), Err(SignError::Refused(_))));
        // Other SAN kinds are seen and refused.
        let key = PrivateKey::generate(KeyAlgorithm::Ed25519).unwrap();
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![SanType::URI("spiffe://x/y".try_into().unwrap())];
        let csr = pem::encode(pem::CERTIFICATE_REQUEST, params.serialize_request(key.key_pair()).unwrap().der());
        let request = CsrRequest::parse(&csr).unwrap();
        assert_eq!(request.other_sans, ["URI:spiffe://x/y"]);
        assert!(matches!(sign(&ca, &csr, cp), Err(SignError::Refused(r)) if r.san == "URI:spiffe://x/y"));
    }

    #[test]
    fn a_csr_asking_for_admin_gets_a_plain_server_certificate() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let ip: IpAddr = "10.5.0.3".parse().unwrap();
        let csr = generate_csr("worker-1", &[ip], &["worker-1".into()], Some("os:admin")).unwrap();
        assert!(csr.csr_pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        let issued = sign(&ca, &csr.csr_pem, ip).unwrap();
        let info = inspect_pem(&issued.crt_pem).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&info.der).unwrap();
        assert_eq!(issued.serial, cert.raw_serial().iter().map(|b| format!("{b:02x}")).collect::<String>());
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
        let crt = sign(&ca, &pem::encode(pem::CERTIFICATE_REQUEST, csr.der()), "10.5.0.3".parse().unwrap()).unwrap();
        let info = inspect_pem(&crt.crt_pem).unwrap();
        assert_eq!(info.extended_key_usages, BTreeSet::from([ExtKeyUsage::ServerAuth]));
    }

    #[test]
    fn tampered_or_foreign_requests_are_refused() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let csr = generate_csr("w", &[], &[], None).unwrap();
        let mut der = pem::decode_one(&csr.csr_pem, &[pem::CERTIFICATE_REQUEST], "csr").unwrap().der;
        let n = der.len();
        der[n - 1] ^= 0xff; // flip a signature bit
        let err = CsrRequest::parse(&pem::encode(pem::CERTIFICATE_REQUEST, &der)).err();
        assert!(matches!(err, Some(PkiError::Csr { .. })), "{err:?}");
        let err = CsrRequest::parse(ca.crt_pem()).err().unwrap().to_string();
        assert!(err.contains("expected CERTIFICATE REQUEST"), "{err}");
    }

    #[test]
    fn organizations_are_removed_wherever_they_sit() {
        let with = go_subject(&["os:admin", "os:reader"], Some("n"));
        assert_eq!(without_organizations(&with).unwrap(), go_subject(&[], Some("n")));
        assert_eq!(without_organizations(&go_subject(&["x"], None)).unwrap(), [0x30, 0x00]);
    }
}

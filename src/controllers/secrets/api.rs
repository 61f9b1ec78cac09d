//! `ApiCertController`: what apid serves with (`ApiCertificates`).
//!
//! - No configuration: a maintenance CA made at this boot (`MaintenanceRootSecrets`) signs a
//!   server certificate, and client certificates are not asked for.
//! - Control plane: the OS CA signs apid's server certificate and its `os:impersonator` client
//!   certificate (what it forwards to other nodes with).
//! - Worker: a CSR goes to trustd on the control plane endpoint, authenticated by the machine
//!   token; what comes back is a server certificate only, and there is no client certificate,
//!   so a worker's apid cannot forward. trustd signs one node IP, the address the request comes
//!   from (and the local-only `127.0.0.1`/`::1` of certSANs), so the worker asks for the
//!   address it dials from (see [`source_towards`]) and its DNS names; names trustd refuses (the control plane's own, as a default hostname may be)
//!   are dropped in a second request, and the certificate then has the IP alone.
//!
//! Certificates are kept while their SANs and issuer still fit, and renewed at half life.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::SystemTime;

use super::{TRUSTD_PORT, renew_at, until};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::pki::{self, CertificateAuthority, Role, RoleSet, Validity};
use crate::resources::config::{self as cfg, MachineConfig, MachineTypeSpec};
use crate::resources::secrets::{self as sec, ApiCertificates, CertAndKey, CertSans, MaintenanceRoot, OsRoot};

#[derive(Default)]
pub struct ApiCertController {}

impl ApiCertController {
    pub fn new() -> Self {
        ApiCertController {}
    }
}

/// Whether `crt` still serves: issued by `ca`, carrying exactly `sans`, not yet due.
fn still_good(crt: &str, ca: &str, sans: &CertSans, now: SystemTime) -> bool {
    let (Ok(leaf), Ok(ca)) = (pki::inspect_pem(crt), pki::inspect_pem(ca)) else { return false };
    let want_ips: BTreeSet<_> = sans.ips.iter().collect();
    let want_dns: BTreeSet<_> = sans.dns_names.iter().collect();
    leaf.is_signed_by(&ca)
        && leaf.ip_addresses.iter().collect::<BTreeSet<_>>() == want_ips
        && leaf.dns_names.iter().collect::<BTreeSet<_>>() == want_dns
        && !leaf.renewal_due(now)
}

fn server(ca: &CertificateAuthority, sans: &CertSans, now: SystemTime) -> Result<CertAndKey, pki::PkiError> {
    pki::issue_server(
        ca,
        &sans.fqdn,
        &sans.ips,
        &sans.dns_names,
        Validity::starting(now, pki::issue::NODE_CERT_VALIDITY),
    )
}

/// Whether a worker's `crt` still serves: issued by `ca`, for one of the node's addresses (or
/// any, while they are not known) and no other IP, with no DNS name beyond the node's, not yet due.
fn worker_still_good(crt: &str, ca: &str, sans: &CertSans, now: SystemTime) -> bool {
    let (Ok(leaf), Ok(ca)) = (pki::inspect_pem(crt), pki::inspect_pem(ca)) else { return false };
    let node_ips: Vec<&IpAddr> = leaf.ip_addresses.iter().filter(|ip| !pki::local_only(**ip)).collect();
    let ip_ok = match node_ips.as_slice() {
        [ip] => sans.ips.is_empty() || sans.ips.contains(ip),
        _ => false,
    } && leaf.ip_addresses.iter().all(|ip| !pki::local_only(*ip) || sans.ips.contains(ip));
    leaf.is_signed_by(&ca)
        && ip_ok
        && leaf.dns_names.iter().all(|n| sans.dns_names.contains(n))
        && !leaf.renewal_due(now)
}

/// The address a worker asks trustd's certificate for and dials trustd from, and whether it
/// must bind it: trustd signs only the address it sees the request come from. That is the
/// kernel's source address towards `host` when it is one of the node's addresses `own` (or
/// `own` is empty: not known yet); otherwise the first of `own` of the same family, bound
/// (container mode, nodes on loopback addresses, where the kernel would pick 127.0.0.1).
async fn source_towards(host: &str, own: &[IpAddr]) -> Result<(IpAddr, bool), String> {
    let target = tokio::net::lookup_host((host, TRUSTD_PORT))
        .await
        .map_err(|e| format!("resolving trustd's host {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("trustd's host {host} has no address"))?;
    let unspecified: IpAddr =
        if target.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
    // A connected UDP socket sends nothing: it only asks the routing table for the source.
    let udp = tokio::net::UdpSocket::bind((unspecified, 0)).await.map_err(|e| format!("a UDP socket: {e}"))?;
    udp.connect(target).await.map_err(|e| format!("no route to trustd at {target}: {e}"))?;
    let routed = udp.local_addr().map_err(|e| format!("the source towards {target}: {e}"))?.ip();
    if own.is_empty() || own.contains(&routed) {
        return Ok((routed, false));
    }
    own.iter()
        .find(|ip| ip.is_ipv4() == target.is_ipv4())
        .map(|ip| (*ip, true))
        .ok_or_else(|| format!("none of this node's addresses {own:?} is of the family of trustd's {target}"))
}

/// A worker's certificate, signed by trustd at `endpoint`.
async fn from_trustd(
    endpoint: &str,
    token: &str,
    cas: &[String],
    sans: &CertSans,
) -> Result<CertAndKey, ReconcileError> {
    use crate::proto::securityapi::{CertificateRequest, security_service_client::SecurityServiceClient};
    let own: Vec<IpAddr> = sans.ips.iter().copied().filter(|ip| !pki::local_only(*ip)).collect();
    let (source, bind) = source_towards(endpoint, &own).await?;
    let tls = pki::tls::client_config(cas, None)?;
    let channel = crate::proto::conn::dial_from(endpoint, TRUSTD_PORT, tls, bind.then_some(source)).await?;
    let mut names = sans.dns_names.clone();
    loop {
        // The address trustd sees, and the local-only ones the config lists (a node reached
        // through a port its client's machine forwards).
        let ips: Vec<IpAddr> =
            std::iter::once(source).chain(sans.ips.iter().copied().filter(|ip| pki::local_only(*ip))).collect();
        let csr = pki::generate_csr(&sans.fqdn, &ips, &names, None)?;
        let mut request = tonic::Request::new(CertificateRequest { csr: csr.csr_pem.into_bytes() });
        request.metadata_mut().insert("token", token.parse().map_err(|_| "the machine token is not valid metadata")?);
        let reply = match SecurityServiceClient::new(channel.clone()).certificate(request).await {
            Ok(reply) => reply.into_inner(),
            // A name trustd will not sign for a worker: the certificate is the address alone.
            Err(s) if s.code() == tonic::Code::PermissionDenied && !names.is_empty() => {
                tracing::warn!("trustd at {endpoint} refused this node's names {names:?}: {}", s.message());
                names.clear();
                continue;
            }
            Err(s) => return Err(format!("trustd at {endpoint}: {}: {}", s.code(), s.message()).into()),
        };
        let crt = String::from_utf8(reply.crt)
            .map_err(|_| format!("trustd at {endpoint} sent a certificate that is not PEM"))?;
        return Ok(CertAndKey { crt_pem: crt, key_pem: csr.key_pem });
    }
}

#[async_trait::async_trait]
impl Controller for ApiCertController {
    fn name(&self) -> String {
        "ApiCertController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<OsRoot>(sec::NAMESPACE).with_id(OsRoot::ID),
            Input::weak::<CertSans>(sec::NAMESPACE),
            Input::weak::<MachineTypeSpec>(cfg::NAMESPACE),
            Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<ApiCertificates>(), Output::exclusive::<MaintenanceRoot>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let now = SystemTime::now();
        let current = ctx.get::<ApiCertificates>(sec::NAMESPACE, ApiCertificates::ID)?.map(|r| r.spec().clone());
        let root = ctx.get::<OsRoot>(sec::NAMESPACE, OsRoot::ID)?.filter(|r| r.is_running());
        ctx.start_tracking_outputs();

        let Some(root) = root else {
            // Maintenance: this boot's own CA.
            let Some(sans) = ctx.get::<CertSans>(sec::NAMESPACE, CertSans::MAINTENANCE_ID)? else {
                ctx.cleanup_outputs()?;
                return Ok(());
            };
            let ca = match ctx.get::<MaintenanceRoot>(sec::NAMESPACE, MaintenanceRoot::ID)? {
                Some(r) => r.spec().ca.clone(),
                None => CertificateAuthority::generate_os(now)?.to_cert_and_key(),
            };
            ctx.apply(sec::NAMESPACE, MaintenanceRoot::ID, MaintenanceRoot { ca: ca.clone() })?;
            let server_cert = match current {
                Some(c)
                    if c.skip_verifying_client_cert && still_good(&c.server.crt_pem, &ca.crt_pem, sans.spec(), now) =>
                {
                    c.server
                }
                _ => server(&CertificateAuthority::from_pem(&ca.crt_pem, &ca.key_pem)?, sans.spec(), now)?,
            };
            let next = renew_at(&server_cert.crt_pem);
            ctx.apply(
                sec::NAMESPACE,
                ApiCertificates::ID,
                ApiCertificates {
                    accepted_cas: Vec::new(),
                    client: None,
                    server: server_cert,
                    skip_verifying_client_cert: true,
                },
            )?;
            ctx.cleanup_outputs()?;
            if let Some(at) = next {
                ctx.requeue_after(until(at));
            }
            return Ok(());
        };

        let Some(sans) = ctx.get::<CertSans>(sec::NAMESPACE, CertSans::API_ID)? else {
            // Comes with the root; until then keep what there is.
            if current.is_some() {
                ctx.keep::<ApiCertificates>(sec::NAMESPACE, ApiCertificates::ID);
            }
            ctx.cleanup_outputs()?;
            return Ok(());
        };
        let sans = sans.spec().clone();
        let root = root.spec().clone();
        let control_plane = ctx
            .get::<MachineTypeSpec>(cfg::NAMESPACE, crate::resources::config::MachineType::ID)?
            .is_some_and(|t| t.spec().machine_type.is_control_plane());
        let ca_pem = root.issuing_ca.crt_pem.clone();
        let fits = |crt: &str| match control_plane {
            true => still_good(crt, &ca_pem, &sans, now),
            false => worker_still_good(crt, &ca_pem, &sans, now),
        };
        let current = current.filter(|c| !c.skip_verifying_client_cert && fits(&c.server.crt_pem));

        let certs = if control_plane {
            if root.issuing_ca.key_pem.is_empty() {
                return Err("a control plane's configuration must hold the OS CA's key (machine.ca.key)".into());
            }
            match current.filter(|c| c.client.is_some()) {
                Some(c) => ApiCertificates { accepted_cas: root.accepted_cas.clone(), ..c },
                None => {
                    let ca = CertificateAuthority::from_pem(&ca_pem, &root.issuing_ca.key_pem)?;
                    let client = pki::issue_client(
                        &ca,
                        Some(&sans.fqdn),
                        &RoleSet::from([Role::Impersonator]),
                        Validity::starting(now, pki::issue::NODE_CERT_VALIDITY),
                    )?;
                    ApiCertificates {
                        accepted_cas: root.accepted_cas.clone(),
                        client: Some(client),
                        server: server(&ca, &sans, now)?,
                        skip_verifying_client_cert: false,
                    }
                }
            }
        } else {
            match current {
                Some(c) => ApiCertificates { accepted_cas: root.accepted_cas.clone(), client: None, ..c },
                None => {
                    let mc = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)?;
                    let parsed = mc.as_ref().and_then(|mc| mc.spec().parsed());
                    let view = &parsed.ok_or("no machine configuration in force")?.machine;
                    let endpoint = view
                        .control_plane_endpoint
                        .as_ref()
                        .ok_or("a worker needs cluster.controlPlane.endpoint to reach trustd")?;
                    let cas: Vec<String> = root.accepted_cas.iter().map(|c| c.crt.clone()).collect();
                    let server = from_trustd(endpoint.host(), &root.token, &cas, &sans).await?;
                    ApiCertificates {
                        accepted_cas: root.accepted_cas.clone(),
                        client: None,
                        server,
                        skip_verifying_client_cert: false,
                    }
                }
            }
        };
        let next = renew_at(&certs.server.crt_pem);
        ctx.apply(sec::NAMESPACE, ApiCertificates::ID, certs)?;
        ctx.cleanup_outputs()?;
        if let Some(at) = next {
            ctx.requeue_after(until(at));
        }
        Ok(())
    }
}

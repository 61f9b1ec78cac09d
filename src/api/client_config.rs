//! GenerateClientConfiguration: a client certificate for the roles asked, minted from the OS
//! CA on a control plane, with a talosconfig around it (Talos's context naming:
//! `<role>@<cluster>` for a single role, the cluster's name otherwise).

use std::time::{Duration, SystemTime};

use base64::Engine;
use tonic::Status;

use super::machine_service::MachineApi;
use crate::pki::{CertificateAuthority, RoleSet, Validity};
use crate::proto::machine as m;
use crate::resources::config::MachineConfig;
use crate::resources::secrets::{self as sec, OsRoot};

pub fn generate(
    api: &MachineApi,
    r: m::GenerateClientConfigurationRequest,
) -> Result<m::GenerateClientConfigurationResponse, Status> {
    let root = api
        .state
        .find::<OsRoot>(sec::NAMESPACE, OsRoot::ID)
        .map_err(|e| Status::internal(e.to_string()))?
        .filter(|r| !r.spec().issuing_ca.key_pem.is_empty())
        .ok_or_else(|| {
            Status::failed_precondition("client configuration can only be generated on control plane nodes")
        })?;
    let ttl = r.crt_ttl.and_then(|d| Duration::try_from(d).ok()).filter(|d| !d.is_zero());
    let ttl = ttl.ok_or_else(|| Status::invalid_argument("crt_ttl should be positive"))?;
    let (roles, _unknown) = RoleSet::parse(&r.roles);
    let root = root.spec();
    let ca = CertificateAuthority::from_pem(&root.issuing_ca.crt_pem, &root.issuing_ca.key_pem)
        .map_err(|e| Status::internal(e.to_string()))?;
    let cert = crate::pki::issue_client(&ca, None, &roles, Validity::starting(SystemTime::now(), ttl))
        .map_err(|e| Status::internal(e.to_string()))?;

    let cluster = MachineConfig::active(&api.state)
        .and_then(|c| c.machine().ok())
        .and_then(|v| v.cluster_name)
        .unwrap_or_else(|| "talos-default".to_string());
    let names = roles.strings();
    let context_name = match names.as_slice() {
        [one] => format!("{}@{cluster}", one.trim_start_matches("os:")),
        _ => cluster,
    };
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t.as_bytes());
    let context = crate::proto::talosconfig::Context {
        ca: b64(&root.issuing_ca.crt_pem),
        crt: b64(&cert.crt_pem),
        key: b64(&cert.key_pem),
        ..Default::default()
    };
    let talosconfig = crate::proto::talosconfig::Config::single(&context_name, context).to_yaml();
    Ok(m::GenerateClientConfigurationResponse {
        messages: vec![m::GenerateClientConfiguration {
            metadata: None,
            ca: root.issuing_ca.crt_pem.clone().into_bytes(),
            crt: cert.crt_pem.into_bytes(),
            key: cert.key_pem.into_bytes(),
            talosconfig: talosconfig.into_bytes(),
        }],
    })
}

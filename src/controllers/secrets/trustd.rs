//! `TrustdCertController`: trustd's server certificate (`TrustdCertificates`), on control
//! planes only, signed by the OS CA for the node's names and renewed at half life.

use std::time::SystemTime;

use super::{renew_at, until};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::pki::{self, CertificateAuthority, Validity};
use crate::resources::config::{self as cfg, MachineType, MachineTypeSpec};
use crate::resources::secrets::{self as sec, CertSans, OsRoot, TrustdCertificates};

pub struct TrustdCertController;

#[async_trait::async_trait]
impl Controller for TrustdCertController {
    fn name(&self) -> String {
        "TrustdCertController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<OsRoot>(sec::NAMESPACE).with_id(OsRoot::ID),
            Input::weak::<CertSans>(sec::NAMESPACE).with_id(CertSans::API_ID),
            Input::weak::<MachineTypeSpec>(cfg::NAMESPACE),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<TrustdCertificates>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let now = SystemTime::now();
        let current = ctx.get::<TrustdCertificates>(sec::NAMESPACE, TrustdCertificates::ID)?.map(|r| r.spec().clone());
        ctx.start_tracking_outputs();
        let control_plane = ctx
            .get::<MachineTypeSpec>(cfg::NAMESPACE, MachineType::ID)?
            .is_some_and(|t| t.spec().machine_type.is_control_plane());
        let root = ctx.get::<OsRoot>(sec::NAMESPACE, OsRoot::ID)?.filter(|r| r.is_running());
        let sans = ctx.get::<CertSans>(sec::NAMESPACE, CertSans::API_ID)?;
        if let (true, Some(root), Some(sans)) = (control_plane, root, sans)
            && !root.spec().issuing_ca.key_pem.is_empty()
        {
            let root = root.spec();
            let sans = sans.spec();
            let keep = current.as_ref().is_some_and(|c| {
                pki::inspect_pem(&c.server.crt_pem).is_ok_and(|leaf| {
                    pki::inspect_pem(&root.issuing_ca.crt_pem).is_ok_and(|ca| leaf.is_signed_by(&ca))
                        && !leaf.renewal_due(now)
                        && leaf.ip_addresses == sans.ips
                        && leaf.dns_names == sans.dns_names
                })
            });
            let server = match current.filter(|_| keep) {
                Some(c) => c.server,
                None => {
                    let ca = CertificateAuthority::from_pem(&root.issuing_ca.crt_pem, &root.issuing_ca.key_pem)?;
                    let v = Validity::starting(now, pki::issue::NODE_CERT_VALIDITY);
                    pki::issue_server(&ca, &sans.fqdn, &sans.ips, &sans.dns_names, v)?
                }
            };
            let next = renew_at(&server.crt_pem);
            ctx.apply(
                sec::NAMESPACE,
                TrustdCertificates::ID,
                TrustdCertificates { accepted_cas: root.accepted_cas.clone(), server },
            )?;
            if let Some(at) = next {
                ctx.requeue_after(until(at));
            }
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

//! `RootController`: the machine configuration's OS CA, accepted CAs, extra SANs and machine
//! token, as the `OSRootSecrets` resource. Its key is there only on nodes that sign (control
//! planes); workers carry the certificate alone.

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::config::{self as cfg, MachineConfig};
use crate::resources::secrets::{self as sec, Cert, CertAndKey, OsRoot};

pub struct RootController;

fn pem_text(p: &crate::config::Pem) -> String {
    String::from_utf8_lossy(p.as_bytes()).into_owned()
}

#[async_trait::async_trait]
impl Controller for RootController {
    fn name(&self) -> String {
        "RootController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<OsRoot>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        ctx.start_tracking_outputs();
        if let Some(mc) = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)?
            && mc.is_running()
            && let Some(parsed) = mc.spec().parsed()
        {
            let view = &parsed.machine;
            if let Some(ca) = &view.ca {
                let crt = pem_text(&ca.crt);
                let mut accepted = vec![Cert { crt: crt.clone() }];
                accepted.extend(view.accepted_cas.iter().map(|p| Cert { crt: pem_text(p) }));
                let (mut ips, mut dns) = (Vec::new(), Vec::new());
                for san in &view.cert_sans {
                    match san {
                        crate::config::CertSan::Ip(ip) => ips.push(*ip),
                        crate::config::CertSan::Dns(name) => dns.push(name.clone()),
                    }
                }
                let root = OsRoot {
                    issuing_ca: CertAndKey { crt_pem: crt, key_pem: ca.key.as_ref().map(pem_text).unwrap_or_default() },
                    accepted_cas: accepted,
                    cert_san_ips: ips,
                    cert_san_dns_names: dns,
                    token: view.token.as_ref().map(|t| t.expose().to_string()).unwrap_or_default(),
                };
                ctx.apply(sec::NAMESPACE, OsRoot::ID, root)?;
            }
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

//! `CertSansController`: the names apid's certificate carries (`CertSANs` id `api`): the
//! node's addresses and hostname plus the configuration's extra SANs. Before there is a
//! configuration, the same names for the maintenance certificate (id `maintenance`).

use super::NodeIdentity;
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::secrets::{self as sec, CertSans, OsRoot};

pub struct CertSansController {
    node: NodeIdentity,
}

impl CertSansController {
    pub fn new(node: NodeIdentity) -> Self {
        CertSansController { node }
    }
}

#[async_trait::async_trait]
impl Controller for CertSansController {
    fn name(&self) -> String {
        "CertSansController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<OsRoot>(sec::NAMESPACE).with_id(OsRoot::ID)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<CertSans>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let mut ips = self.node.addresses.clone();
        let mut dns = vec![self.node.hostname.clone()];
        ctx.apply(
            sec::NAMESPACE,
            CertSans::MAINTENANCE_ID,
            CertSans { ips: ips.clone(), dns_names: dns.clone(), fqdn: self.node.hostname.clone() },
        )?;
        if let Some(root) = ctx.get::<OsRoot>(sec::NAMESPACE, OsRoot::ID)?.filter(|r| r.is_running()) {
            for ip in &root.spec().cert_san_ips {
                if !ips.contains(ip) {
                    ips.push(*ip);
                }
            }
            for name in &root.spec().cert_san_dns_names {
                if !dns.contains(name) {
                    dns.push(name.clone());
                }
            }
            ctx.apply(
                sec::NAMESPACE,
                CertSans::API_ID,
                CertSans { ips, dns_names: dns, fqdn: self.node.hostname.clone() },
            )?;
        } else {
            ctx.remove::<CertSans>(sec::NAMESPACE, CertSans::API_ID)?;
        }
        Ok(())
    }
}

//! `HostnameStatusController`: the kernel's hostname and NIS domain name (`uname`), as the
//! `HostnameStatus` of `network` with id `hostname`. A pure observer: no inputs, woken by the
//! kernel's signal that a name was set, it reads the names of the UTS namespace its
//! [`UtsTarget`] names and writes what it sees; while no hostname is set (the kernel's
//! `(none)`), there is no status. It never changes the kernel.

use crate::cosi::{Context, Controller, EventSource, Input, Output, ReconcileError};
use crate::kernel::uts::{UtsEvents, UtsNames, UtsTarget};
use crate::resources::network::{HostnameStatus, NAMESPACE};

pub struct HostnameStatusController {
    target: UtsTarget,
}

impl HostnameStatusController {
    /// Observes the UTS namespace `target` names.
    pub fn new(target: UtsTarget) -> Self {
        HostnameStatusController { target }
    }
}

/// The status for the kernel's names; none while no hostname is set.
pub(crate) fn hostname_status(names: &UtsNames) -> Option<HostnameStatus> {
    (!names.hostname.is_empty())
        .then(|| HostnameStatus { hostname: names.hostname.clone(), domainname: names.domainname.clone() })
}

#[async_trait::async_trait]
impl Controller for HostnameStatusController {
    fn name(&self) -> String {
        "HostnameStatusController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<HostnameStatus>()]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(UtsEvents)]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let names = self.target.names().map_err(|e| format!("reading the kernel's hostname: {e}"))?;
        ctx.start_tracking_outputs();
        if let Some(status) = hostname_status(&names) {
            ctx.apply(NAMESPACE, HostnameStatus::ID, status)?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_names_become_the_status() {
        let names = UtsNames { hostname: "node1".into(), domainname: "example.org".into() };
        let status = hostname_status(&names).unwrap();
        assert_eq!((status.hostname.as_str(), status.domainname.as_str()), ("node1", "example.org"));
        assert_eq!(status.fqdn(), "node1.example.org");
        assert_eq!(hostname_status(&UtsNames::default()), None, "no hostname set: no status");
    }
}

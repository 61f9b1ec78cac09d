//! `HostnameSpecController`: sets the kernel's hostname and NIS domain name to the merged
//! `HostnameSpec` of `network` (`sethostname`, `setdomainname`), in the UTS namespace its
//! [`UtsTarget`] names. Idempotent: names already in force are not set again. Woken by its
//! spec and by the kernel's signal that a name was set, so a hostname changed behind its back
//! is put back. A spec that goes away leaves the names as they are, as Talos does; the
//! kernel's names are reported by `HostnameStatusController`, not here.

use crate::cosi::{Context, Controller, EventSource, Input, Output, Pointer, ReconcileError};
use crate::kernel::uts::{UtsEvents, UtsNames, UtsTarget};
use crate::resources::network::{HostnameSpec, NAMESPACE, NetworkValueError};

pub struct HostnameSpecController {
    target: UtsTarget,
}

impl HostnameSpecController {
    /// Sets the names of the UTS namespace `target` names.
    pub fn new(target: UtsTarget) -> Self {
        HostnameSpecController { target }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HostnameSpecError {
    #[error(transparent)]
    Invalid(#[from] NetworkValueError),
    #[error("reading the kernel's hostname: {0}")]
    Read(std::io::Error),
    #[error("setting the hostname to {hostname:?} and the domain name to {domainname:?}: {source}")]
    Set { hostname: String, domainname: String, source: std::io::Error },
}

/// The names to set for `spec`, or none when the kernel holds them already: a pure decision.
pub(crate) fn wanted(spec: &HostnameSpec, kernel: &UtsNames) -> Result<Option<UtsNames>, NetworkValueError> {
    spec.validate()?;
    let want = UtsNames { hostname: spec.hostname.clone(), domainname: spec.domainname.clone() };
    Ok((want != *kernel).then_some(want))
}

impl HostnameSpecController {
    fn sync(&self, spec: &HostnameSpec) -> Result<(), HostnameSpecError> {
        let kernel = self.target.names().map_err(HostnameSpecError::Read)?;
        if let Some(want) = wanted(spec, &kernel)? {
            self.target.set_names(&want).map_err(|source| HostnameSpecError::Set {
                hostname: want.hostname.clone(),
                domainname: want.domainname.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Controller for HostnameSpecController {
    fn name(&self) -> String {
        "HostnameSpecController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<HostnameSpec>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        Vec::new()
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(UtsEvents)]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let Some(spec) = ctx.get::<HostnameSpec>(NAMESPACE, HostnameSpec::ID)? else { return Ok(()) };
        if !spec.is_running() {
            return Ok(());
        }
        if let Err(e) = self.sync(spec.spec()) {
            ctx.fail_key(Pointer::of::<HostnameSpec>(NAMESPACE, HostnameSpec::ID), e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::ConfigLayer;

    fn names(hostname: &str, domainname: &str) -> UtsNames {
        UtsNames { hostname: hostname.into(), domainname: domainname.into() }
    }

    #[test]
    fn names_are_set_only_when_they_differ_and_are_valid() {
        let spec = HostnameSpec::from_fqdn("node1.example.org", ConfigLayer::Cmdline).unwrap();
        assert_eq!(wanted(&spec, &names("", "")).unwrap(), Some(names("node1", "example.org")));
        assert_eq!(wanted(&spec, &names("node1", "example.org")).unwrap(), None, "in force: nothing");
        assert_eq!(wanted(&spec, &names("node1", "")).unwrap(), Some(names("node1", "example.org")), "domain drift");
        let short = HostnameSpec { hostname: "node1".into(), ..HostnameSpec::default() };
        assert_eq!(wanted(&short, &names("node1", "old.example")).unwrap(), Some(names("node1", "")), "domain cleared");
        let empty = HostnameSpec::default();
        assert!(wanted(&empty, &names("node1", "")).is_err(), "an empty hostname is refused, not set");
        let long = HostnameSpec { hostname: "x".repeat(64), ..HostnameSpec::default() };
        assert!(wanted(&long, &names("", "")).is_err());
    }
}

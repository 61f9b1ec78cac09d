//! The hostname: the desired one and the one in force.

use serde::{Deserialize, Serialize};

use super::{ConfigLayer, NAMESPACE, NetworkValueError};
use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};

/// The desired hostname and domain name, merged id `hostname`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct HostnameSpec {
    pub hostname: String,
    pub domainname: String,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
}

impl HostnameSpec {
    pub const ID: &'static str = "hostname";

    pub fn fqdn(&self) -> String {
        fqdn(&self.hostname, &self.domainname)
    }

    /// Splits `node1.example.org` into hostname and domain, checked as Talos checks them:
    /// a hostname of 1 to 63 characters, a name of at most 253.
    pub fn from_fqdn(fqdn: &str, layer: ConfigLayer) -> Result<HostnameSpec, NetworkValueError> {
        let (hostname, domainname) = fqdn.split_once('.').unwrap_or((fqdn, ""));
        let spec =
            HostnameSpec { hostname: hostname.to_string(), domainname: domainname.to_string(), config_layer: layer };
        spec.validate()?;
        Ok(spec)
    }

    pub fn validate(&self) -> Result<(), NetworkValueError> {
        let invalid = |reason: &str| NetworkValueError::Invalid {
            kind: "hostname",
            value: self.fqdn(),
            reason: reason.to_string(),
        };
        if self.hostname.is_empty() || self.hostname.len() > 63 {
            return Err(invalid("the hostname must be 1 to 63 characters"));
        }
        if self.fqdn().len() > 253 {
            return Err(invalid("the fully qualified name must be at most 253 characters"));
        }
        Ok(())
    }
}

fn fqdn(hostname: &str, domainname: &str) -> String {
    if domainname.is_empty() { hostname.to_string() } else { format!("{hostname}.{domainname}") }
}

impl ResourceSpec for HostnameSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "HostnameSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// The hostname in force, id `hostname`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct HostnameStatus {
    pub hostname: String,
    pub domainname: String,
}

impl HostnameStatus {
    pub const ID: &'static str = "hostname";

    pub fn fqdn(&self) -> String {
        fqdn(&self.hostname, &self.domainname)
    }

    /// The names certificates carry: the hostname, and the FQDN when there is a domain.
    pub fn dns_names(&self) -> Vec<String> {
        let mut names = vec![self.hostname.clone()];
        if !self.domainname.is_empty() {
            names.push(self.fqdn());
        }
        names
    }
}

impl ResourceSpec for HostnameStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "HostnameStatuses.net.talos.dev",
        aliases: &["hostname"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Hostname", json_path: "{.hostname}" },
            PrintColumn { name: "Domainname", json_path: "{.domainname}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

//! Secrets resources (namespace `secrets`), under Talos's names, ids, fields and protobuf
//! numbers: the OS root (the CA apid trusts and, on control planes, its key), the certificates
//! apid and trustd serve with, the maintenance CA, and the SANs those certificates carry.
//! Every one is `Sensitive`: only `os:admin` may read them through the API. Plain data.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

pub use super::pem::{Cert, CertAndKey};
use super::pem::{CertAndKeyWire, CertWire, NetIpWire};
use crate::cosi::{Registry, RegistryError, ResourceDefinition, ResourceSpec, Sensitivity};

pub const NAMESPACE: &str = "secrets";

/// The OS CA as this node holds it, id `os`. `issuing_ca.key` is empty on workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct OsRoot {
    #[serde(rename = "issuingCA")]
    pub issuing_ca: CertAndKey,
    #[serde(rename = "acceptedCAs", default)]
    pub accepted_cas: Vec<Cert>,
    #[serde(rename = "certSANIPs", default)]
    pub cert_san_ips: Vec<IpAddr>,
    #[serde(rename = "certSANDNSNames", default)]
    pub cert_san_dns_names: Vec<String>,
    /// The machine token workers present to trustd.
    pub token: String,
}

impl OsRoot {
    pub const ID: &'static str = "os";
}

#[derive(Clone, PartialEq, prost::Message)]
struct OsRootWire {
    #[prost(message, optional, tag = "1")]
    issuing_ca: Option<CertAndKeyWire>,
    #[prost(message, repeated, tag = "2")]
    cert_san_ips: Vec<NetIpWire>,
    #[prost(string, repeated, tag = "3")]
    cert_san_dns_names: Vec<String>,
    #[prost(string, tag = "4")]
    token: String,
    #[prost(message, repeated, tag = "5")]
    accepted_cas: Vec<CertWire>,
}

impl ResourceSpec for OsRoot {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "OSRootSecrets.secrets.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        Some(prost::Message::encode_to_vec(&OsRootWire {
            issuing_ca: Some((&self.issuing_ca).into()),
            cert_san_ips: self.cert_san_ips.iter().map(Into::into).collect(),
            cert_san_dns_names: self.cert_san_dns_names.clone(),
            token: self.token.clone(),
            accepted_cas: self.accepted_cas.iter().map(Into::into).collect(),
        }))
    }
}

/// What apid serves with, id `api`: its server certificate, the CAs whose clients it accepts,
/// and on control planes the `os:impersonator` client certificate it forwards with. In
/// maintenance mode the server certificate comes from the maintenance CA and client
/// certificates are not asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ApiCertificates {
    #[serde(rename = "acceptedCAs", default)]
    pub accepted_cas: Vec<Cert>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<CertAndKey>,
    pub server: CertAndKey,
    #[serde(default)]
    pub skip_verifying_client_cert: bool,
}

impl ApiCertificates {
    pub const ID: &'static str = "api";
}

#[derive(Clone, PartialEq, prost::Message)]
struct ApiCertificatesWire {
    #[prost(message, optional, tag = "2")]
    client: Option<CertAndKeyWire>,
    #[prost(message, optional, tag = "3")]
    server: Option<CertAndKeyWire>,
    #[prost(message, repeated, tag = "4")]
    accepted_cas: Vec<CertWire>,
    #[prost(bool, tag = "5")]
    skip_verifying_client_cert: bool,
}

impl ResourceSpec for ApiCertificates {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "ApiCertificates.secrets.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        Some(prost::Message::encode_to_vec(&ApiCertificatesWire {
            client: self.client.as_ref().map(Into::into),
            server: Some((&self.server).into()),
            accepted_cas: self.accepted_cas.iter().map(Into::into).collect(),
            skip_verifying_client_cert: self.skip_verifying_client_cert,
        }))
    }
}

/// What trustd serves with, id `trustd` (control planes only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TrustdCertificates {
    #[serde(rename = "acceptedCAs", default)]
    pub accepted_cas: Vec<Cert>,
    pub server: CertAndKey,
}

impl TrustdCertificates {
    pub const ID: &'static str = "trustd";
}

#[derive(Clone, PartialEq, prost::Message)]
struct TrustdCertificatesWire {
    #[prost(message, optional, tag = "2")]
    server: Option<CertAndKeyWire>,
    #[prost(message, repeated, tag = "3")]
    accepted_cas: Vec<CertWire>,
}

impl ResourceSpec for TrustdCertificates {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "TrustdCertificates.secrets.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        Some(prost::Message::encode_to_vec(&TrustdCertificatesWire {
            server: Some((&self.server).into()),
            accepted_cas: self.accepted_cas.iter().map(Into::into).collect(),
        }))
    }
}

/// The self-signed CA of maintenance mode, id `maintenance`, made fresh at every boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MaintenanceRoot {
    pub ca: CertAndKey,
}

impl MaintenanceRoot {
    pub const ID: &'static str = "maintenance";
}

#[derive(Clone, PartialEq, prost::Message)]
struct MaintenanceRootWire {
    #[prost(message, optional, tag = "1")]
    ca: Option<CertAndKeyWire>,
}

impl ResourceSpec for MaintenanceRoot {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "MaintenanceRootSecrets.secrets.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        Some(prost::Message::encode_to_vec(&MaintenanceRootWire { ca: Some((&self.ca).into()) }))
    }
}

/// The names a certificate of this node carries, id `api` or `maintenance`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct CertSans {
    #[serde(default)]
    pub ips: Vec<IpAddr>,
    #[serde(default)]
    pub dns_names: Vec<String>,
    #[serde(default)]
    pub fqdn: String,
}

impl CertSans {
    pub const API_ID: &'static str = "api";
    pub const MAINTENANCE_ID: &'static str = "maintenance";
}

#[derive(Clone, PartialEq, prost::Message)]
struct CertSansWire {
    #[prost(message, repeated, tag = "1")]
    ips: Vec<NetIpWire>,
    #[prost(string, repeated, tag = "2")]
    dns_names: Vec<String>,
    #[prost(string, tag = "3")]
    fqdn: String,
}

impl ResourceSpec for CertSans {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "CertSANs.secrets.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        Some(prost::Message::encode_to_vec(&CertSansWire {
            ips: self.ips.iter().map(Into::into).collect(),
            dns_names: self.dns_names.clone(),
            fqdn: self.fqdn.clone(),
        }))
    }
}

/// The node's disk encryption salt, id `salt`: 32 random bytes kept on STATE
/// (`encryption-salt.yaml`), appended to the passphrase of every `lockToState` key, so a
/// volume so locked opens only beside the STATE it was made with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct EncryptionSalt {
    #[serde(with = "crate::block::luks2::b64")]
    pub disk_salt: Vec<u8>,
}

impl EncryptionSalt {
    pub const ID: &'static str = "salt";
    /// Talos's `constants.DiskEncryptionSaltSize`.
    pub const SIZE: usize = 32;
}

#[derive(Clone, PartialEq, prost::Message)]
struct EncryptionSaltWire {
    #[prost(bytes = "vec", tag = "1")]
    disk_salt: Vec<u8>,
}

impl ResourceSpec for EncryptionSalt {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "EncryptionSalts.secrets.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::Sensitive,
    };

    fn to_proto(&self) -> Option<Vec<u8>> {
        Some(prost::Message::encode_to_vec(&EncryptionSaltWire { disk_salt: self.disk_salt.clone() }))
    }
}

pub fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.add_namespace(NAMESPACE, "Resources with secret material.")?;
    registry.register::<OsRoot>()?;
    registry.register::<ApiCertificates>()?;
    registry.register::<TrustdCertificates>()?;
    registry.register::<MaintenanceRoot>()?;
    registry.register::<CertSans>()?;
    registry.register::<EncryptionSalt>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_uses_talos_field_names() {
        let root = OsRoot {
            issuing_ca: CertAndKey { crt_pem: "C".into(), key_pem: "K".into() },
            accepted_cas: vec![Cert { crt: "C".into() }],
            cert_san_ips: vec!["10.5.0.2".parse().unwrap()],
            cert_san_dns_names: vec!["cp1".into()],
            token: "abcdef.0123456789abcdef".into(),
        };
        let yaml = serde_saphyr::to_string(&root).unwrap();
        for key in ["issuingCA:", "acceptedCAs:", "certSANIPs:", "certSANDNSNames:", "token:"] {
            assert!(yaml.contains(key), "{key} missing in\n{yaml}");
        }
        assert_eq!(serde_saphyr::from_str::<OsRoot>(&yaml).unwrap(), root);
        let api = ApiCertificates { skip_verifying_client_cert: true, ..Default::default() };
        assert!(serde_saphyr::to_string(&api).unwrap().contains("skipVerifyingClientCert: true"));
    }

    #[test]
    fn every_secret_is_sensitive() {
        let mut r = Registry::new();
        register(&mut r).unwrap();
        for t in r.types().filter(|t| t.definition().default_namespace == NAMESPACE) {
            assert_eq!(t.definition().sensitivity, Sensitivity::Sensitive, "{}", t.type_name());
        }
    }

    #[test]
    fn proto_specs_use_talos_numbers() {
        let api = ApiCertificates { skip_verifying_client_cert: true, ..Default::default() };
        let bytes = ResourceSpec::to_proto(&api).unwrap();
        // server (field 3, empty message) then field 5 varint 1.
        assert_eq!(bytes, vec![0x1a, 0x00, 0x28, 0x01]);
    }
}

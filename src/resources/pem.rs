//! PEM certificates and keys as resource fields: PEM text in memory, base64 of the PEM in
//! YAML and JSON (Talos's `crt`/`key` encoding; `pki::CertAndKey` carries the same), bytes in
//! protobuf (`common.PEMEncoded*`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A certificate, PEM.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cert {
    pub crt: String,
}

pub use crate::pki::CertAndKey;

fn encode<S: Serializer>(pem: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&STANDARD.encode(pem.as_bytes()))
}

fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    let text = String::deserialize(d)?;
    let bytes = STANDARD.decode(text.trim()).map_err(|e| D::Error::custom(format!("not base64: {e}")))?;
    String::from_utf8(bytes).map_err(|_| D::Error::custom("not PEM text"))
}

#[derive(Serialize, Deserialize)]
struct WireCert {
    #[serde(serialize_with = "encode", deserialize_with = "decode")]
    crt: String,
}

impl Serialize for Cert {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WireCert { crt: self.crt.clone() }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Cert {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Cert { crt: WireCert::deserialize(d)?.crt })
    }
}

/// `common.PEMEncodedCertificateAndKey`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CertAndKeyWire {
    #[prost(bytes = "vec", tag = "1")]
    pub crt: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
}

/// `common.PEMEncodedCertificate`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CertWire {
    #[prost(bytes = "vec", tag = "1")]
    pub crt: Vec<u8>,
}

/// `common.NetIP`: 4 or 16 bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NetIpWire {
    #[prost(bytes = "vec", tag = "1")]
    pub ip: Vec<u8>,
}

impl From<&CertAndKey> for CertAndKeyWire {
    fn from(c: &CertAndKey) -> Self {
        CertAndKeyWire { crt: c.crt_pem.as_bytes().to_vec(), key: c.key_pem.as_bytes().to_vec() }
    }
}

impl From<&Cert> for CertWire {
    fn from(c: &Cert) -> Self {
        CertWire { crt: c.crt.as_bytes().to_vec() }
    }
}

impl From<&std::net::IpAddr> for NetIpWire {
    fn from(ip: &std::net::IpAddr) -> Self {
        NetIpWire {
            ip: match ip {
                std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
                std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_carries_base64_pem_and_round_trips() {
        let c = CertAndKey {
            crt_pem: "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n".into(),
            key_pem: "PRIVATE".into(),
        };
        let yaml = serde_saphyr::to_string(&c).unwrap();
        assert!(yaml.starts_with("crt: LS0tLS1CRUdJTi"), "{yaml}");
        assert!(yaml.contains("key: UFJJVkFURQ=="), "{yaml}");
        assert_eq!(serde_saphyr::from_str::<CertAndKey>(&yaml).unwrap(), c);
        assert!(!format!("{c:?}").contains("PRIVATE"), "the key never shows in debug output");
        let no_key = CertAndKey { crt_pem: "C".into(), key_pem: String::new() };
        assert_eq!(serde_saphyr::to_string(&no_key).unwrap(), "crt: Qw==\n");
    }
}

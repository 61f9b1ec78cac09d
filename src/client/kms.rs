//! The client of a KMS server (Talos's `sidero.kms.KMSService`), for the `kms` disk
//! encryption key: `Seal` a fresh passphrase when a key slot is made, `Unseal` it when the
//! slot is opened.
//!
//! The endpoint is read as Talos reads it: `grpc://host:port` (or no scheme) is gRPC in the
//! clear, `https://host[:port]` is gRPC over TLS (port 443 by default) checked against the
//! node's CA bundle. Each call has 10 s, as in Talos.

use std::future::Future;
use std::time::Duration;

use crate::proto::sidero::kms::Request;
use crate::proto::sidero::kms::kms_service_client::KmsServiceClient;

/// How long one Seal or Unseal may take, dialling included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the node's CA bundle is looked for, for `https://` endpoints.
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A parsed `kms.endpoint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsEndpoint {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

/// Reads `endpoint` as Talos's `endpoint.Parse` does.
pub fn parse_endpoint(endpoint: &str) -> Result<KmsEndpoint, String> {
    let bad = |why: &str| format!("kms.endpoint {endpoint:?}: {why}");
    let (tls, rest) = match endpoint.split_once("://") {
        None => (false, endpoint),
        Some(("grpc", rest)) => (false, rest),
        Some(("https", rest)) => (true, rest),
        Some((scheme, _)) => return Err(bad(&format!("scheme {scheme:?} is not supported (grpc:// or https://)"))),
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') {
        return Err(bad("expected host:port"));
    }
    let default_port = if tls { 443 } else { 0 };
    let (host, port) = crate::proto::conn::split_endpoint(rest, default_port).map_err(|e| bad(&e.to_string()))?;
    if port == 0 {
        return Err(bad("no port (grpc:// needs one)"));
    }
    Ok(KmsEndpoint { host, port, tls })
}

/// The KMS client the node's volumes use.
#[derive(Debug, Default, Clone, Copy)]
pub struct GrpcKms;

impl crate::block::encryption::Kms for GrpcKms {
    fn seal(&self, endpoint: &str, node_uuid: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        call(endpoint, node_uuid, data, true).map_err(|e| format!("failed to seal KMS passphrase: {e}"))
    }

    fn unseal(&self, endpoint: &str, node_uuid: &str, data: &[u8]) -> Result<Vec<u8>, String> {
        call(endpoint, node_uuid, data, false).map_err(|e| format!("failed to unseal KMS passphrase: {e}"))
    }
}

fn call(endpoint: &str, node_uuid: &str, data: &[u8], seal: bool) -> Result<Vec<u8>, String> {
    let ep = parse_endpoint(endpoint)?;
    let req = Request { node_uuid: node_uuid.to_string(), data: data.to_vec() };
    run(async move {
        let work = async {
            let channel = if ep.tls {
                // Before machined renders the bundle (early in a boot), the image's own roots.
                let bundle = std::fs::read_to_string(CA_BUNDLE)
                    .or_else(|_| std::fs::read_to_string(crate::boot::IMAGE_TRUSTED_ROOTS))
                    .map_err(|e| format!("{CA_BUNDLE}: {e}"))?;
                let tls = crate::pki::tls::client_config(&[bundle], None).map_err(|e| e.to_string())?;
                crate::proto::conn::dial(&format!("{}:{}", bracket(&ep.host), ep.port), ep.port, tls)
                    .await
                    .map_err(|e| e.to_string())?
            } else {
                let uri = format!("http://{}:{}", bracket(&ep.host), ep.port);
                tonic::transport::Endpoint::from_shared(uri)
                    .map_err(|e| e.to_string())?
                    .connect_timeout(CALL_TIMEOUT)
                    .connect()
                    .await
                    .map_err(|e| format!("{}:{}: {e}", ep.host, ep.port))?
            };
            let mut client = KmsServiceClient::new(channel);
            let reply = if seal { client.seal(req).await } else { client.unseal(req).await };
            reply.map(|r| r.into_inner().data).map_err(|s| format!("{}: {}", s.code(), s.message()))
        };
        match tokio::time::timeout(CALL_TIMEOUT, work).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer in {CALL_TIMEOUT:?}")),
        }
    })
}

fn bracket(host: &str) -> String {
    if host.contains(':') { format!("[{host}]") } else { host.to_string() }
}

/// Runs `work` to its end from synchronous code: on the runtime this thread belongs to (a
/// blocking-pool thread of the node's), or on a runtime of its own.
fn run<F: Future<Output = Result<Vec<u8>, String>>>(work: F) -> Result<Vec<u8>, String> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.block_on(work),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("starting a runtime: {e}"))?
            .block_on(work),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_read_as_talos_reads_them() {
        let ok = |e: &str| parse_endpoint(e).unwrap();
        assert_eq!(ok("grpc://10.5.0.1:4050"), KmsEndpoint { host: "10.5.0.1".into(), port: 4050, tls: false });
        assert_eq!(ok("10.5.0.1:4050"), KmsEndpoint { host: "10.5.0.1".into(), port: 4050, tls: false });
        assert_eq!(ok("https://kms.example"), KmsEndpoint { host: "kms.example".into(), port: 443, tls: true });
        assert_eq!(ok("https://kms.example:4443/"), KmsEndpoint { host: "kms.example".into(), port: 4443, tls: true });
        assert_eq!(ok("grpc://[fd00::1]:4050"), KmsEndpoint { host: "fd00::1".into(), port: 4050, tls: false });
        assert!(parse_endpoint("http://kms:80").unwrap_err().contains("scheme \"http\" is not supported"));
        assert!(parse_endpoint("grpc://kms").unwrap_err().contains("no port"));
        assert!(parse_endpoint("grpc://kms:1/path").unwrap_err().contains("expected host:port"));
    }
}

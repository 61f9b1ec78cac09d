//! The API: apid's routing and transparent proxy, authorization, and the servers behind apid,
//! speaking the wire types of `crate::proto`.
//!
//! This layer sits above `controllers/` and must never import them, nor the client library: it
//! reads and watches the resource state only, and shares the wire types and constants with the
//! client through `proto`.

pub mod apid;
pub mod apply;
pub mod audit;
pub mod authz;
pub mod client_config;
pub mod door;
pub mod events;
pub mod fanout;
pub mod follow;
pub mod fuzz;
pub mod grpc_body;
pub mod kms;
pub mod lifecycle_service;
pub mod machine_service;
pub mod meta;
pub mod node;
pub mod proxy;
pub mod router;
pub mod server;
pub mod sockets;
pub mod state_service;
pub mod storage_service;
pub mod stream;
pub mod time_service;
pub mod trustd;
pub mod volume_service;

/// `t` as a protobuf timestamp (never before the epoch).
pub fn timestamp(t: std::time::SystemTime) -> prost_types::Timestamp {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The roles asserted in a call's `talos-role` metadata (as apid sets them; a value may list
/// several, comma-separated).
pub fn roles(metadata: &tonic::metadata::MetadataMap) -> Vec<String> {
    metadata
        .get_all(router::keys::ROLE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .collect()
}

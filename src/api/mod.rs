//! The API: apid's routing and transparent proxy, and (with machined) the servers behind it.

pub mod authz;
pub mod events;
pub mod grpc_body;
pub mod proxy;
pub mod router;

//! The gRPC API: Talos's wire protocol, compiled from our own `.proto` files.
//!
//! This layer sits above `controllers/` and must never import them: it reads and watches the
//! resource state only.

pub mod proto;

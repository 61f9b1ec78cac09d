//! The API door under load and abuse, with real processes, real TLS and real connections on
//! loopback addresses: a caller of the least privilege (or none, on a node in maintenance)
//! must not freeze routing, exhaust memory or connections, or get a certificate for another
//! node. Each module attacks one part and checks what a legitimate caller still gets, and
//! what the node's processes cost, before and after. Floods are bounded in count and time.
//!
//! Each module has loopback addresses of its own, so the tests run side by side:
//! proxy 127.0.6.x, door 127.0.7.x, streams 127.0.9.x, trustd 127.0.10.x,
//! container 127.0.11.x, yaml 127.0.12.x.

mod container;
mod door;
mod harness;
mod proxy;
mod streams;
mod trustd;
mod yaml;

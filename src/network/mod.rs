//! The pure decisions of the networking family: turning config sources into layered
//! candidate specs (at their [`ConfigLayer`](crate::resources::network::ConfigLayer)), with
//! tables of tests beside them. Nothing here reads a file, opens a socket or talks
//! rtnetlink: controllers feed these functions what they watch and write what they return,
//! and the kernel side lives in `crate::kernel`.
//!
//! Two exceptions speak over sockets `crate::kernel` makes while their codecs and state
//! machines stay pure: the operators' protocol clients ([`dhcp4::Dhcp4Operator`] and
//! [`dhcp6::Dhcp6Operator`]), which never configure the kernel themselves — what they learn
//! leaves as specs — and [`dns`], the host DNS forwarder, whose wire-format and cache modules sit
//! beside the small server that listens and forwards.

pub mod cmdline;
pub mod config;
pub mod dhcp4;
pub mod dhcp6;
pub mod dhcp_client;
pub mod dns;
pub mod nocloud;
pub mod operator;
pub mod sntp;

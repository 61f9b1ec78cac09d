//! The pure decisions of the networking family: turning config sources into layered
//! candidate specs (at their [`ConfigLayer`](crate::resources::network::ConfigLayer)), with
//! tables of tests beside them. Nothing here reads a file, opens a socket or talks
//! rtnetlink: controllers feed these functions what they watch and write what they return,
//! and the kernel side lives in `crate::kernel`.
//!
//! The operators' protocol clients are the one exception: [`dhcp4::Dhcp4Operator`] and
//! [`dhcp6::Dhcp6Operator`] speak their protocol over sockets `crate::kernel` makes, driving
//! codecs and state machines that stay pure. They still never configure the kernel: what they learn leaves as specs.

pub mod cmdline;
pub mod dhcp4;
pub mod dhcp6;
pub mod operator;

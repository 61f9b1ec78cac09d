//! The pure decisions of the networking family: turning config sources into layered
//! candidate specs (at their [`ConfigLayer`](crate::resources::network::ConfigLayer)), with
//! tables of tests beside them. Nothing here reads a file, opens a socket or talks
//! rtnetlink: controllers feed these functions what they watch and write what they return,
//! and the kernel side lives in `crate::kernel`. The one exception is [`dns`], the host DNS
//! forwarder, whose pure wire-format and cache modules sit beside the small server that
//! listens and forwards.

pub mod cmdline;
pub mod dns;
pub mod sntp;

//! The networking controllers: config sources writing layered candidates into
//! `network-config`, the merge into `network`, the Spec controllers that push the merged
//! specs to the kernel and the Status controllers that mirror the kernel back.
//!
//! Only the Spec and Status controllers reach the kernel. None of these controllers may run
//! in `--mode container`, where the namespace is the host's.

mod cmdline_config;
mod merge;

pub use cmdline_config::{CmdlineConfigController, link_resolver};
pub use merge::{
    AddressMergeController, HostnameMergeController, LinkMergeController, ResolverMergeController,
    RouteMergeController, TimeServerMergeController, merge_controllers,
};

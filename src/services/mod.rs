//! Services: long-running programs machined supervises (apid, trustd), each a child process
//! of the same binary started under its own name and uid.
//!
//! What runs is data ([`image_services`]); how it runs is the [`Supervisor`]; who waits for
//! children is the [`Reaper`]. Nothing here touches the resource state: a controller reads
//! the supervisor's snapshots and publishes them.

pub mod log;
pub mod reaper;
pub mod supervisor;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::cosi::Backoff;
pub use log::LogRing;
pub use reaper::{Exit, ReapMode, Reaper};
pub use supervisor::{ServiceEvent, ServiceSnapshot, Supervisor, SupervisorError};

/// What a service runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// This binary, started with `argv[0]` = the service name (so dispatch picks the applet).
    Applet { args: Vec<OsString> },
    /// Another program (tests, and nothing on a node).
    Exec { path: PathBuf, args: Vec<OsString> },
}

/// Back-off between restarts of a service that exits; a run that lasted `reset_after` starts
/// the back-off over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    pub backoff: Backoff,
    pub reset_after: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            backoff: Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(30) },
            reset_after: Duration::from_secs(60),
        }
    }
}

/// One service to supervise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceDefinition {
    pub name: String,
    pub program: Program,
    /// Run as this uid/gid (supplementary groups are dropped); `None` keeps machined's.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub restart: RestartPolicy,
    /// Bytes of output kept in the service's log ring.
    pub log_capacity: usize,
}

/// Default log ring size per service.
pub const DEFAULT_LOG_CAPACITY: usize = 256 * 1024;

impl ServiceDefinition {
    /// This binary under `name`, with the default restart policy and log size.
    pub fn applet(name: &str) -> Self {
        ServiceDefinition {
            name: name.to_string(),
            program: Program::Applet { args: Vec::new() },
            uid: None,
            gid: None,
            restart: RestartPolicy::default(),
            log_capacity: DEFAULT_LOG_CAPACITY,
        }
    }

    pub fn with_user(mut self, uid: u32, gid: u32) -> Self {
        self.uid = Some(uid);
        self.gid = Some(gid);
        self
    }
}

/// Talos's service users: apid runs as 50, trustd as 51 (uid = gid).
pub const APID_USER_ID: u32 = 50;
pub const TRUSTD_USER_ID: u32 = 51;

/// The services a node runs, in start order, each with its Talos uid.
pub fn node_services() -> Vec<ServiceDefinition> {
    vec![
        ServiceDefinition::applet("apid").with_user(APID_USER_ID, APID_USER_ID),
        ServiceDefinition::applet("trustd").with_user(TRUSTD_USER_ID, TRUSTD_USER_ID),
    ]
}

/// The node services this build can actually run: those whose applet is built.
pub fn image_services(is_built: impl Fn(&str) -> bool) -> Vec<ServiceDefinition> {
    node_services().into_iter().filter(|s| is_built(&s.name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_built_applets_are_started() {
        let none = image_services(|_| false);
        assert!(none.is_empty());
        let apid_only: Vec<String> = image_services(|n| n == "apid").into_iter().map(|s| s.name).collect();
        assert_eq!(apid_only, vec!["apid"]);
    }

    #[test]
    fn services_run_as_talos_users() {
        let all = node_services();
        let users: Vec<(&str, Option<u32>, Option<u32>)> =
            all.iter().map(|s| (s.name.as_str(), s.uid, s.gid)).collect();
        assert_eq!(users, vec![("apid", Some(50), Some(50)), ("trustd", Some(51), Some(51))]);
    }
}

//! The limit on open files of the node's processes: raised at their start, so that the API
//! door's own caps (`api::door`), not the descriptor limit, are what refuses a connection.
//! Children (the services machined starts) inherit it.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The soft limit asked for: the door's worst case (576 connections on apid, as many on
/// trustd, each with a TLS session, plus apid's connections to machined and to other nodes)
/// many times over, and the controllers' sockets and files besides. Not the hard limit when
/// that is larger: some kernels allow 2^30, and code that walks every possible descriptor
/// becomes slow.
pub const NOFILE_WANTED: u64 = 1 << 16;

/// The soft limit to set, given the current soft and hard limits (`None`: unlimited), or
/// `None` when the current one is already high enough.
pub fn nofile_target(soft: Option<u64>, hard: Option<u64>) -> Option<u64> {
    let want = hard.map_or(NOFILE_WANTED, |h| h.min(NOFILE_WANTED));
    match soft {
        Some(s) if s < want => Some(want),
        _ => None,
    }
}

#[derive(Debug, thiserror::Error)]
#[error("raising RLIMIT_NOFILE from {soft} to {target} (hard limit {hard}): {source}")]
pub struct RlimitError {
    soft: u64,
    target: u64,
    hard: String,
    source: std::io::Error,
}

/// Raises this process's soft RLIMIT_NOFILE towards [`NOFILE_WANTED`] (never above the hard
/// limit). Returns the new soft limit, or `None` if it was already high enough.
pub fn raise_nofile() -> Result<Option<u64>, RlimitError> {
    let current = getrlimit(Resource::Nofile);
    let Some(target) = nofile_target(current.current, current.maximum) else { return Ok(None) };
    setrlimit(Resource::Nofile, Rlimit { current: Some(target), maximum: current.maximum }).map_err(|e| {
        RlimitError {
            soft: current.current.unwrap_or(u64::MAX),
            target,
            hard: current.maximum.map_or_else(|| "unlimited".to_string(), |h| h.to_string()),
            source: e.into(),
        }
    })?;
    Ok(Some(target))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_goes_up_to_the_hard_one_or_the_wanted_figure() {
        assert_eq!(nofile_target(Some(1024), Some(4096)), Some(4096));
        assert_eq!(nofile_target(Some(1024), Some(1 << 20)), Some(NOFILE_WANTED));
        assert_eq!(nofile_target(Some(1024), None), Some(NOFILE_WANTED));
        assert_eq!(nofile_target(Some(1 << 20), Some(1 << 20)), None);
        assert_eq!(nofile_target(Some(4096), Some(4096)), None);
        assert_eq!(nofile_target(None, None), None);
    }
}

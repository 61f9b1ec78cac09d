//! The one way a controller runs blocking work (mkfs, LUKS formatting, sysfs walks, reading a
//! slow device): on Tokio's blocking pool, off the async workers.
//!
//! machined runs its async runtime on two worker threads; a controller that blocks one of
//! them stalls half the node's controllers and the API with it. Anything that may take more
//! than a few milliseconds of syscalls goes through [`blocking`]. A panic in the work comes
//! back as an error, never as a dead worker. The work itself cannot be interrupted: when the
//! runtime shuts down, the reconcile that awaited it is dropped and the work finishes alone.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct BlockingError {
    pub what: String,
    pub reason: String,
}

/// Runs `work` on the blocking pool and waits for it; `what` names it in errors.
pub async fn blocking<T, F>(what: &str, work: F) -> Result<T, BlockingError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => Ok(value),
        Err(e) if e.is_panic() => Err(BlockingError {
            what: what.to_string(),
            reason: format!("panicked: {}", crate::panic::message(&*e.into_panic())),
        }),
        Err(_) => Err(BlockingError { what: what.to_string(), reason: "cancelled".to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn runs_off_the_worker_and_turns_panics_into_errors() {
        let worker = std::thread::current().id();
        let ran_on = blocking("reading a thread id", || std::thread::current().id()).await.unwrap();
        assert_ne!(ran_on, worker, "blocking work ran on the async worker");
        let err = blocking("formatting STATE", || -> u8 { panic!("mkfs exploded") }).await.unwrap_err();
        assert_eq!(err.to_string(), "formatting STATE: panicked: mkfs exploded");
    }
}

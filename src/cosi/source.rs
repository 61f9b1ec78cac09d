//! Event sources: streams from outside the state that wake a controller — netlink and
//! uevent sockets (written beside the kernel adapters), a supervisor's change feed, timers.
//!
//! A controller declares its sources; the runtime runs each in a task of its own next to
//! the controller, restarts one that returns or fails (after the controller's back-off, and
//! follows the restart with a full reconcile, since events may have been missed), and stops
//! them when the controller stops. A source only wakes: it never writes the state.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::controller::Waker;

pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

#[async_trait::async_trait]
pub trait EventSource: Send + 'static {
    /// For log lines (`netlink links`, `every 1s`).
    fn name(&self) -> String;
    /// Runs until `cancel` fires, waking the controller through `waker` (with
    /// [`Waker::changed`] when it knows which key changed). Returning early, with or without
    /// an error, gets it restarted.
    async fn run(&mut self, waker: &Waker, cancel: &CancellationToken) -> Result<(), SourceError>;
}

/// Wakes the controller every `period`.
pub struct Timer {
    period: Duration,
}

impl Timer {
    pub fn every(period: Duration) -> Self {
        Timer { period }
    }
}

#[async_trait::async_trait]
impl EventSource for Timer {
    fn name(&self) -> String {
        format!("every {:?}", self.period)
    }

    async fn run(&mut self, waker: &Waker, cancel: &CancellationToken) -> Result<(), SourceError> {
        let mut ticks = tokio::time::interval(self.period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; the controller's first reconcile already covers it.
        ticks.tick().await;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                _ = ticks.tick() => waker.wake(),
            }
        }
    }
}

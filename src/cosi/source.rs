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

/// Wakes the controller whenever a tokio watch channel's value changes (a store or a feed the
/// controller reads with `borrow`).
pub struct Changes<T> {
    name: String,
    rx: tokio::sync::watch::Receiver<T>,
}

impl<T> Changes<T> {
    pub fn new(name: impl Into<String>, rx: tokio::sync::watch::Receiver<T>) -> Self {
        Changes { name: name.into(), rx }
    }
}

#[async_trait::async_trait]
impl<T: Send + Sync + 'static> EventSource for Changes<T> {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn run(&mut self, waker: &Waker, cancel: &CancellationToken) -> Result<(), SourceError> {
        // What is there now is covered by the controller's first reconcile.
        self.rx.borrow_and_update();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                changed = self.rx.changed() => match changed {
                    Ok(()) => waker.wake(),
                    // The sender is gone: nothing will change again.
                    Err(_) => { cancel.cancelled().await; return Ok(()) }
                },
            }
        }
    }
}

//! `ServiceController`: publishes the supervisor's view of each service as a `Service`
//! resource (Talos's `Services.v1alpha1.talos.dev`), one per service.
//!
//! The supervisor lives outside the runtime; its change feed is this controller's event
//! source, and each reconcile copies the snapshots. It never starts or stops a service.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cosi::{Context, Controller, EventSource, Input, Output, ReconcileError, SourceError, Waker};
use crate::resources::runtime::{NAMESPACE, Service, ServiceState};
use crate::services::{ServiceSnapshot, Supervisor};

pub struct ServiceController {
    supervisor: Arc<Supervisor>,
}

impl ServiceController {
    pub fn new(supervisor: Arc<Supervisor>) -> Self {
        ServiceController { supervisor }
    }
}

/// The resource spec for one snapshot.
pub fn service_spec(s: &ServiceSnapshot) -> Service {
    let running = s.state == ServiceState::Running;
    Service {
        running,
        // No health checks yet: a running service is taken as healthy, and says it is unknown.
        healthy: running,
        unknown: running,
        state: s.state,
        pid: s.pid,
        restarts: s.restarts,
        message: s.message.clone(),
    }
}

/// The supervisor's change feed.
struct SupervisorFeed(Arc<Supervisor>);

#[async_trait::async_trait]
impl EventSource for SupervisorFeed {
    fn name(&self) -> String {
        "service supervisor".to_string()
    }

    async fn run(&mut self, waker: &Waker, cancel: &CancellationToken) -> Result<(), SourceError> {
        let mut changes = self.0.changes();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                changed = changes.changed() => match changed {
                    Ok(()) => waker.wake(),
                    Err(_) => return Err("the supervisor is gone".into()),
                },
            }
        }
    }
}

#[async_trait::async_trait]
impl Controller for ServiceController {
    fn name(&self) -> String {
        "ServiceController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<Service>()]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        vec![Box::new(SupervisorFeed(Arc::clone(&self.supervisor)))]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        for snapshot in self.supervisor.snapshot() {
            ctx.apply(NAMESPACE, &snapshot.name, service_spec(&snapshot))?;
        }
        Ok(())
    }
}

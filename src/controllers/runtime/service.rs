//! `ServiceController`: publishes the supervisor's view of each service as a `Service`
//! resource (Talos's `Services.v1alpha1.talos.dev`), one per service.
//!
//! The supervisor lives outside the runtime; this controller is woken by its change feed and
//! copies snapshots. It never starts or stops a service.

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::runtime::{NAMESPACE, Service, ServiceState};
use crate::services::{ServiceSnapshot, Supervisor};

pub struct ServiceController {
    supervisor: Arc<Supervisor>,
    feed: Option<JoinHandle<()>>,
}

impl ServiceController {
    pub fn new(supervisor: Arc<Supervisor>) -> Self {
        ServiceController { supervisor, feed: None }
    }
}

impl Drop for ServiceController {
    fn drop(&mut self) {
        if let Some(feed) = self.feed.take() {
            feed.abort();
        }
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

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        if self.feed.is_none() {
            let mut changes = self.supervisor.changes();
            let waker = ctx.waker();
            self.feed = Some(tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    waker.wake();
                }
            }));
        }
        for snapshot in self.supervisor.snapshot() {
            ctx.apply(NAMESPACE, &snapshot.name, service_spec(&snapshot))?;
        }
        Ok(())
    }
}

//! `MachineConfigFileController`: says whether a machine configuration exists, as the
//! `MachineConfigStatus` resource.
//!
//! On a node the configuration lives on the STATE volume, which does not exist yet: the
//! controller is built without a path and reports "none". In container mode it watches
//! `<state-dir>/config.yaml`, woken by a timer so a file written later is noticed. It only
//! looks: it never reads, parses or writes the configuration.

use std::path::PathBuf;
use std::time::Duration;

use crate::cosi::{Context, Controller, EventSource, Input, Output, ReconcileError, Timer};
use crate::resources::runtime::{MachineConfigStatus, NAMESPACE};

const POLL: Duration = Duration::from_secs(1);

pub struct MachineConfigFileController {
    path: Option<PathBuf>,
}

impl MachineConfigFileController {
    /// Looks for the configuration at `path`; `None`: there is nowhere to look yet.
    pub fn new(path: Option<PathBuf>) -> Self {
        MachineConfigFileController { path }
    }
}

#[async_trait::async_trait]
impl Controller for MachineConfigFileController {
    fn name(&self) -> String {
        "MachineConfigFileController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<MachineConfigStatus>()]
    }

    fn sources(&mut self) -> Vec<Box<dyn EventSource>> {
        match self.path {
            Some(_) => vec![Box::new(Timer::every(POLL))],
            None => Vec::new(),
        }
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let spec = match &self.path {
            None => MachineConfigStatus { present: false, source: "none: no STATE volume yet".to_string() },
            Some(path) => MachineConfigStatus { present: path.is_file(), source: path.display().to_string() },
        };
        ctx.apply(NAMESPACE, MachineConfigStatus::ID, spec)?;
        Ok(())
    }
}

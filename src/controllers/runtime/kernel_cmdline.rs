//! `KernelCmdlineController`: publishes `/proc/cmdline` as the `KernelCmdline` resource.
//! Reads one file; never writes anything but its output.

use std::path::PathBuf;

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::runtime::{KernelCmdline, NAMESPACE};

#[derive(Debug, thiserror::Error)]
pub enum KernelCmdlineError {
    #[error("reading the kernel command line from {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
}

pub struct KernelCmdlineController {
    path: PathBuf,
}

impl KernelCmdlineController {
    /// Reads `/proc/cmdline`.
    pub fn new() -> Self {
        Self::from_path("/proc/cmdline")
    }

    /// Reads another file (tests).
    pub fn from_path(path: impl Into<PathBuf>) -> Self {
        KernelCmdlineController { path: path.into() }
    }
}

impl Default for KernelCmdlineController {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait::async_trait]
impl Controller for KernelCmdlineController {
    fn name(&self) -> String {
        "KernelCmdlineController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<KernelCmdline>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|source| KernelCmdlineError::Read { path: self.path.clone(), source })?;
        ctx.apply(NAMESPACE, KernelCmdline::ID, KernelCmdline { cmdline: text.trim().to_string() })?;
        Ok(())
    }
}

//! `KernelCmdlineController`: publishes the kernel command line (`/proc/cmdline` on a node)
//! as the `KernelCmdline` resource. Reads one file; never writes anything but its output.
//! Without a file (a container-mode machined given none) the command line is empty.

use std::path::PathBuf;

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::runtime::{KernelCmdline, NAMESPACE};

#[derive(Debug, thiserror::Error)]
pub enum KernelCmdlineError {
    #[error("reading the kernel command line from {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
}

/// The node's kernel command line.
pub const PROC_CMDLINE: &str = "/proc/cmdline";

pub struct KernelCmdlineController {
    path: Option<PathBuf>,
}

impl KernelCmdlineController {
    /// Reads `path`; `None`: the command line is empty.
    pub fn new(path: Option<PathBuf>) -> Self {
        KernelCmdlineController { path }
    }

    /// Reads `path` (tests).
    pub fn from_path(path: impl Into<PathBuf>) -> Self {
        Self::new(Some(path.into()))
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
        let text = match &self.path {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|source| KernelCmdlineError::Read { path: path.clone(), source })?,
            None => String::new(),
        };
        ctx.apply(NAMESPACE, KernelCmdline::ID, KernelCmdline { cmdline: text.trim().to_string() })?;
        Ok(())
    }
}

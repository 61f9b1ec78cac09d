//! Upgrades through the API: Talos's `machine.LifecycleService` (`Upgrade`, its progress
//! streamed, no reboot: the caller reboots) and talosbox's `talosbox.lifecycle.ArtifactService`
//! (`Upload`, the artifacts of an upgrade streamed in when the node cannot fetch them).
//! MachineService's legacy `Upgrade` and `Rollback` are in `machine_service` and use the same
//! [`Node`] calls.
//!
//! An upload is written under the node's upload directory, one directory per upload (the
//! previous ones are dropped: an upload is for the upgrade that follows it), and answered only
//! once every file matches the SHA256SUMS among them. Names are bare file names, sizes and
//! counts are bounded.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use super::node::Node;
use super::stream::{BoxStream, produce};
use crate::boot::artifacts::{self, Artifacts};
use crate::proto::machine::{self as m, lifecycle_service_server::LifecycleService};
use crate::proto::talosbox::lifecycle::{self as l, artifact_service_server::ArtifactService};

/// The most files an upload holds (an imager output directory has a dozen).
const MAX_FILES: usize = 16;
/// The most bytes an upload holds.
const MAX_UPLOAD: u64 = 1 << 30;
/// The prefix of an uploaded image's name.
pub const UPLOAD_PREFIX: &str = "upload:";

pub struct LifecycleApi {
    node: Arc<dyn Node>,
}

impl LifecycleApi {
    pub fn new(node: Arc<dyn Node>) -> Self {
        LifecycleApi { node }
    }
}

fn progress(response: m::lifecycle_service_install_progress::Response) -> m::LifecycleServiceUpgradeResponse {
    m::LifecycleServiceUpgradeResponse {
        progress: Some(m::LifecycleServiceInstallProgress { response: Some(response) }),
    }
}

/// The directory of upload `image` (`upload:<id>`) under `root`; a malformed name is refused.
pub fn upload_dir(root: &Path, image: &str) -> Result<PathBuf, Status> {
    let id = image.strip_prefix(UPLOAD_PREFIX).unwrap_or_default();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Status::invalid_argument(format!("image {image:?}: an upload is named upload:<hex id>")));
    }
    let dir = root.join(id);
    if !dir.is_dir() {
        return Err(Status::not_found(format!("image {image:?}: no such upload on this node")));
    }
    Ok(dir)
}

#[tonic::async_trait]
impl LifecycleService for LifecycleApi {
    type InstallStream = BoxStream<m::LifecycleServiceInstallResponse>;
    type UpgradeStream = BoxStream<m::LifecycleServiceUpgradeResponse>;

    async fn install(
        &self,
        _: Request<m::LifecycleServiceInstallRequest>,
    ) -> Result<Response<Self::InstallStream>, Status> {
        Err(Status::unimplemented(
            "a node installs itself when its configuration names the disk (machine.install.disk or diskSelector); apply one",
        ))
    }

    async fn upgrade(
        &self,
        request: Request<m::LifecycleServiceUpgradeRequest>,
    ) -> Result<Response<Self::UpgradeStream>, Status> {
        let image = request.into_inner().source.map(|s| s.image_name).unwrap_or_default();
        if image.is_empty() {
            return Err(Status::invalid_argument("source.image_name: the artifacts to upgrade to are required"));
        }
        let (lines_tx, mut lines_rx) = mpsc::unbounded_channel::<String>();
        let node = self.node.clone();
        // The upgrade goes on if the client leaves: only the relay of its progress ends.
        let mut work = tokio::spawn(async move { node.upgrade(&image, lines_tx).await });
        Ok(Response::new(produce(32, move |tx| async move {
            let outcome = loop {
                tokio::select! {
                    r = &mut work => break r.unwrap_or_else(|e| Err(Status::internal(format!("the upgrade task: {e}")))),
                    Some(line) = lines_rx.recv() => {
                        let _ = tx.send(Ok(progress(m::lifecycle_service_install_progress::Response::Message(line)))).await;
                    }
                }
            };
            while let Ok(line) = lines_rx.try_recv() {
                let _ = tx.send(Ok(progress(m::lifecycle_service_install_progress::Response::Message(line)))).await;
            }
            let code = match outcome {
                Ok(()) => 0,
                Err(e) => {
                    let message = format!("upgrade failed: {}", e.message());
                    let _ =
                        tx.send(Ok(progress(m::lifecycle_service_install_progress::Response::Message(message)))).await;
                    1
                }
            };
            let _ = tx.send(Ok(progress(m::lifecycle_service_install_progress::Response::ExitCode(code)))).await;
        })))
    }
}

#[tonic::async_trait]
impl ArtifactService for LifecycleApi {
    async fn upload(
        &self,
        request: Request<Streaming<l::UploadRequest>>,
    ) -> Result<Response<l::UploadResponse>, Status> {
        let root = self.node.uploads().ok_or_else(|| Status::failed_precondition("this node takes no uploads"))?;
        let mut id_bytes = [0u8; 8];
        getrandom::fill(&mut id_bytes).map_err(|e| Status::internal(format!("an upload id: {e}")))?;
        let id: String = id_bytes.iter().map(|b| format!("{b:02x}")).collect();
        // One upload at a time is kept: the one the next upgrade takes.
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = root.join(&id);
        std::fs::create_dir_all(&dir).map_err(|e| Status::internal(format!("{}: {e}", dir.display())))?;
        let result = receive(request.into_inner(), &dir).await;
        let result = match result {
            Ok(()) => {
                let d = dir.clone();
                tokio::task::spawn_blocking(move || Artifacts::verified(&d))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?
                    .map_err(|e| Status::invalid_argument(format!("the upload: {e}")))
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(a) => Ok(Response::new(l::UploadResponse {
                messages: vec![l::Upload {
                    metadata: None,
                    image_name: format!("{UPLOAD_PREFIX}{id}"),
                    version: a.version,
                }],
            })),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }
}

/// Writes the streamed files into `dir`.
async fn receive(mut stream: Streaming<l::UploadRequest>, dir: &Path) -> Result<(), Status> {
    let mut current: Option<(String, std::fs::File)> = None;
    let mut names: Vec<String> = Vec::new();
    let mut total = 0u64;
    let mut this_file = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if current.as_ref().is_none_or(|(n, _)| *n != chunk.name) {
            artifacts::check_name(&chunk.name).map_err(|e| Status::invalid_argument(e.to_string()))?;
            if names.contains(&chunk.name) {
                return Err(Status::invalid_argument(format!("{}: sent twice", chunk.name)));
            }
            if names.len() == MAX_FILES {
                return Err(Status::invalid_argument(format!("more than {MAX_FILES} files")));
            }
            names.push(chunk.name.clone());
            let path = dir.join(&chunk.name);
            let file =
                std::fs::File::create(&path).map_err(|e| Status::internal(format!("{}: {e}", path.display())))?;
            current = Some((chunk.name.clone(), file));
            this_file = 0;
        }
        total += chunk.data.len() as u64;
        this_file += chunk.data.len() as u64;
        if total > MAX_UPLOAD || this_file > artifacts::MAX_FILE {
            return Err(Status::invalid_argument("the upload is too large"));
        }
        if let Some((name, file)) = current.as_mut() {
            file.write_all(&chunk.data).map_err(|e| Status::internal(format!("writing {name}: {e}")))?;
        }
    }
    if names.is_empty() {
        return Err(Status::invalid_argument("nothing was uploaded"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_names_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("00ff")).unwrap();
        assert_eq!(upload_dir(tmp.path(), "upload:00ff").unwrap(), tmp.path().join("00ff"));
        for bad in ["upload:", "upload:../etc", "00ff", "upload:zz"] {
            assert_eq!(upload_dir(tmp.path(), bad).unwrap_err().code(), tonic::Code::InvalidArgument, "{bad}");
        }
        assert_eq!(upload_dir(tmp.path(), "upload:0a").unwrap_err().code(), tonic::Code::NotFound);
    }
}

//! `EtcFileSpecController` (Talos's `files.EtcFileController`): writes each `EtcFileSpec`
//! under an `/etc` root handed in at construction (`/system/etc` on a node, where the
//! read-only rootfs's `/etc` entries point; a temporary directory in a test), and reports the
//! spec version on disk as its `EtcFileStatus`. A file is written atomically (a temporary
//! file beside it, then a rename), so a reader never sees half a file, and only when its
//! contents or mode changed. A spec that goes away takes its file with it.
//!
//! It never decides what a file holds, and never writes outside its root: an id that is
//! absolute or climbs out with `..` is refused.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use crate::cosi::{Context, Controller, Input, Output, Pointer, ReconcileError};
use crate::resources::files::{EtcFileSpec, EtcFileStatus, NAMESPACE};

/// Where a node's rendered `/etc` files live (as in Talos: the rootfs is read-only).
pub const SYSTEM_ETC: &str = "/system/etc";

#[derive(Debug, thiserror::Error)]
pub enum EtcFileError {
    #[error("etc file {name:?}: not a relative path inside the /etc root")]
    BadName { name: String },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> EtcFileError + 'a {
    move |source| EtcFileError::Io { what, path: path.to_path_buf(), source }
}

/// `root/name`, for a name that stays inside `root`.
fn target(root: &Path, name: &str) -> Result<PathBuf, EtcFileError> {
    let rel = Path::new(name);
    let inside = !name.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if inside { Ok(root.join(rel)) } else { Err(EtcFileError::BadName { name: name.to_string() }) }
}

/// Writes `contents` with `mode` to `root/name` unless it already holds exactly that;
/// returns whether it wrote.
pub fn write_if_changed(root: &Path, name: &str, contents: &[u8], mode: u32) -> Result<bool, EtcFileError> {
    let path = target(root, name)?;
    if let (Ok(old), Ok(meta)) = (fs::read(&path), fs::metadata(&path))
        && old == contents
        && meta.permissions().mode() & 0o7777 == mode
    {
        return Ok(false);
    }
    let dir = path.parent().unwrap_or(root);
    fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp"));
    {
        let mut f = fs::File::create(&tmp).map_err(io("creating", &tmp))?;
        f.write_all(contents).map_err(io("writing", &tmp))?;
        f.set_permissions(fs::Permissions::from_mode(mode)).map_err(io("setting the mode of", &tmp))?;
        f.sync_all().map_err(io("syncing", &tmp))?;
    }
    fs::rename(&tmp, &path).map_err(io("renaming into place", &path))?;
    Ok(true)
}

fn remove(root: &Path, name: &str) -> Result<(), EtcFileError> {
    let path = target(root, name)?;
    match fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", &path)(e)),
        _ => Ok(()),
    }
}

pub struct EtcFileSpecController {
    root: PathBuf,
}

impl EtcFileSpecController {
    /// Writes under `root` (`SYSTEM_ETC` on a node).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        EtcFileSpecController { root: root.into() }
    }
}

#[async_trait::async_trait]
impl Controller for EtcFileSpecController {
    fn name(&self) -> String {
        "EtcFileSpecController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::strong::<EtcFileSpec>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<EtcFileStatus>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let specs = ctx.list::<EtcFileSpec>(NAMESPACE)?;
        ctx.start_tracking_outputs();
        for spec in &specs {
            let name = spec.id().to_string();
            let key = Pointer::of::<EtcFileSpec>(NAMESPACE, &name);
            if !spec.is_running() {
                match remove(&self.root, &name) {
                    Ok(()) => ctx.release(spec)?,
                    Err(e) => ctx.fail_key(key, e),
                }
                continue;
            }
            ctx.hold(spec)?;
            match write_if_changed(&self.root, &name, spec.spec().contents.as_bytes(), spec.spec().mode) {
                Ok(_) => {
                    ctx.apply(NAMESPACE, &name, EtcFileStatus { spec_version: spec.version().to_string() })?;
                }
                Err(e) => {
                    // The last status stays: it names the version that is still on disk.
                    ctx.keep::<EtcFileStatus>(NAMESPACE, &name);
                    ctx.fail_key(key, e);
                }
            }
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::cosi::Harness;

    #[test]
    fn writes_only_on_change_and_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert!(write_if_changed(root, "hosts", b"one\n", 0o644).unwrap(), "first write");
        let first = fs::metadata(root.join("hosts")).unwrap();
        assert_eq!(first.permissions().mode() & 0o7777, 0o644);
        assert!(!write_if_changed(root, "hosts", b"one\n", 0o644).unwrap(), "same contents: no write");
        assert_eq!(fs::metadata(root.join("hosts")).unwrap().ino(), first.ino(), "untouched");
        assert!(write_if_changed(root, "hosts", b"one\n", 0o600).unwrap(), "a mode change writes");
        let before = fs::metadata(root.join("hosts")).unwrap().ino();
        assert!(write_if_changed(root, "hosts", b"two\n", 0o600).unwrap());
        // The new file exists beside the old one before the rename, so it has another inode.
        assert_ne!(fs::metadata(root.join("hosts")).unwrap().ino(), before, "replaced by a rename");
        assert_eq!(fs::read_to_string(root.join("hosts")).unwrap(), "two\n");
        assert!(write_if_changed(root, "iscsi/initiatorname.iscsi", b"x", 0o644).unwrap(), "subdirectories");
        let leftovers: Vec<_> = fs::read_dir(root).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 2, "no temporary file left: {leftovers:?}");
        for bad in ["", "/etc/passwd", "../escape", "a/../../b", "."] {
            assert!(matches!(write_if_changed(root, bad, b"x", 0o644), Err(EtcFileError::BadName { .. })), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn specs_become_files_and_statuses() {
        let dir = tempfile::tempdir().unwrap();
        let h = Harness::start(vec![Box::new(EtcFileSpecController::new(dir.path())) as Box<dyn Controller>]).unwrap();
        let spec = |text: &str| EtcFileSpec { contents: text.into(), mode: 0o644, selinux_label: String::new() };
        let seeded = h.seed(NAMESPACE, "resolv.conf", spec("nameserver 10.0.0.1\n")).unwrap();
        let want = EtcFileStatus { spec_version: seeded.version().to_string() };
        h.assert_spec(NAMESPACE, "resolv.conf", &want).await;
        assert_eq!(fs::read_to_string(dir.path().join("resolv.conf")).unwrap(), "nameserver 10.0.0.1\n");

        let seeded = h.seed(NAMESPACE, "resolv.conf", spec("nameserver 127.0.0.53\n")).unwrap();
        h.assert_spec(NAMESPACE, "resolv.conf", &EtcFileStatus { spec_version: seeded.version().to_string() }).await;
        assert_eq!(fs::read_to_string(dir.path().join("resolv.conf")).unwrap(), "nameserver 127.0.0.53\n");

        h.unseed::<EtcFileSpec>(NAMESPACE, "resolv.conf").unwrap();
        h.assert_absent::<EtcFileStatus>(NAMESPACE, "resolv.conf").await;
        h.assert_eventually::<EtcFileSpec, _>(NAMESPACE, "resolv.conf", "released", |r| {
            r.is_some_and(|r| r.metadata().finalizers.is_empty())
        })
        .await;
        assert!(!dir.path().join("resolv.conf").exists(), "a spec that goes takes its file");
        h.stop().await;
    }
}

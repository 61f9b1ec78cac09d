//! `MountController`: mounts every ready volume that has a mount target, with the flags its
//! `VolumeConfig` asks for (`secure`: nosuid and nodev; `noExec`), sets the mount point's mode
//! once mounted, and records each as a `MountStatus`. A volume is mounted once per boot: a
//! mount already there (the same source on the target) is adopted. The filesystem's module
//! comes through the kernel's own `request_module` (`fs-xfs`), answered by the node's
//! `modprobe`. Unmounting happens at power-down, after every service has stopped.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::mount::MountFlags;

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::kernel::mount::{self as km, MountSpec};
use crate::resources::block::{FilesystemType, MountStatus, NAMESPACE, VolumePhase, VolumeStatus};

#[derive(Default)]
pub struct MountController {
    /// Volume id → (source, target) mounted by this controller.
    mounted: BTreeMap<String, (String, String)>,
    /// Mount targets are made relative to this root (tests); `/` on a node.
    root: PathBuf,
}

impl MountController {
    pub fn new() -> Self {
        Self::under(PathBuf::from("/"))
    }

    pub fn under(root: PathBuf) -> Self {
        MountController { mounted: BTreeMap::new(), root }
    }
}

fn flags(status: &VolumeStatus) -> MountFlags {
    let mut f = MountFlags::empty();
    if status.mount_spec.secure {
        f |= MountFlags::NOSUID | MountFlags::NODEV;
    }
    if status.mount_spec.no_exec {
        f |= MountFlags::NOEXEC;
    }
    f
}

fn mount_volume(source: &str, target: &Path, fs: FilesystemType, flags: MountFlags, mode: u32) -> Result<(), String> {
    km::mount_spec(&MountSpec { fstype: fs.fstype(), source, target, flags, data: None }).map_err(|e| e.to_string())?;
    if mode != 0 {
        std::fs::set_permissions(target, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("setting mode {mode:o} on {}: {e}", target.display()))?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl Controller for MountController {
    fn name(&self) -> String {
        "MountController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<VolumeStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<MountStatus>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let mut volumes: Vec<_> = ctx
            .list::<VolumeStatus>(NAMESPACE)?
            .into_iter()
            .filter(|v| {
                let s = v.spec();
                s.phase == VolumePhase::Ready
                    && !s.mount_spec.target_path.is_empty()
                    && s.filesystem != FilesystemType::None
                    && !s.mount_location.is_empty()
            })
            .collect();
        // Parents before children: `/var` before `/var/mnt/data`.
        volumes.sort_by_key(|v| v.spec().mount_spec.target_path.len());
        ctx.start_tracking_outputs();
        let mut failed = Vec::new();
        for v in volumes {
            let id = v.metadata().id.clone();
            let s = v.spec().clone();
            let target = self.root.join(s.mount_spec.target_path.trim_start_matches('/'));
            let wanted = (s.mount_location.clone(), s.mount_spec.target_path.clone());
            if self.mounted.get(&id) != Some(&wanted) {
                let (source, fs, flags, mode) =
                    (s.mount_location.clone(), s.filesystem, flags(&s), s.mount_spec.file_mode);
                let at = target.clone();
                let done =
                    ctx.blocking("mounting a volume", move || mount_volume(&source, &at, fs, flags, mode)).await?;
                match done {
                    Ok(()) => {
                        crate::kernel::console::line(&format!(
                            "volume {id}: mounted {} on {}",
                            s.mount_location, s.mount_spec.target_path
                        ));
                        self.mounted.insert(id.clone(), wanted);
                    }
                    Err(e) => {
                        failed.push(format!("volume {id}: {e}"));
                        continue;
                    }
                }
            }
            ctx.apply(
                NAMESPACE,
                &id,
                MountStatus {
                    source: s.mount_location.clone(),
                    target: s.mount_spec.target_path.clone(),
                    filesystem: s.filesystem,
                    volume_id: id.clone(),
                    read_only: false,
                },
            )?;
        }
        ctx.cleanup_outputs()?;
        if !failed.is_empty() {
            return Err(failed.join("; ").into());
        }
        Ok(())
    }
}

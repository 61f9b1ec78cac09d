//! `MountController` (Talos's `block.MountController`): carries out every `MountRequest` of a
//! ready volume and records each as a `MountStatus` (same id), taking mounts down when their
//! request or volume goes. What a mount is depends on the volume: a filesystem mounted with
//! the request's flags (`secure`: nosuid and nodev; `noExec`; read-only; no access times) and
//! the mount point's mode set; a directory made under its parent's mount (and bind-mounted
//! onto itself when the volume says, so the flags apply); a swap area enabled with
//! `swapon(2)`. The filesystem's module comes through the kernel's own `request_module`
//! (`fs-xfs`), answered by the node's `modprobe`.
//!
//! A mount with a parent (`parentMountID`: `/var/mnt/data` under `/var/mnt`, under EPHEMERAL's
//! `/var`) waits for the parent's `MountStatus`, goes at the parent's target joined with its
//! own path, and is taken down before the parent is: a parent on its way out takes its
//! children with it, children first, and stays while a child cannot be unmounted. Each
//! mounted volume's request and status are held with this controller's finalizer until it is
//! unmounted, so neither is gone while the mount is there. At power-down every service has
//! stopped before the unmount of the rest.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::mount::MountFlags;

use crate::cosi::{Context, Controller, Input, Output, ReconcileError, Resource};
use crate::kernel::mount::{self as km, MountSpec};
use crate::kernel::swap;
use crate::resources::block::{
    FilesystemType, MountRequest, MountStatus, NAMESPACE, VolumePhase, VolumeStatus, VolumeType,
};

/// What the controller does in one pass, by mount id, in the order to do it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Mounts to take down, children before parents.
    pub unmount: Vec<String>,
    /// Mounts that stay (their flags may change).
    pub keep: Vec<String>,
    /// Mounts to make, parents before children.
    pub mount: Vec<String>,
    /// Mounts that wait for their parent's, with the parent's id.
    pub waiting: Vec<(String, String)>,
}

/// Plans a pass from the mounts wanted (id → parent id, `""` for none: those whose request
/// and volume are ready) and those made (id → parent id).
pub fn plan(wanted: &BTreeMap<String, String>, active: &BTreeMap<String, String>) -> Plan {
    // Going: made but not wanted, and everything under something going.
    let mut going: Vec<String> = active.keys().filter(|id| !wanted.contains_key(*id)).cloned().collect();
    loop {
        let more: Vec<String> = active
            .iter()
            .filter(|(id, parent)| !going.contains(id) && going.contains(parent))
            .map(|(id, _)| id.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        going.extend(more);
    }
    // Children first: a mount goes once nothing still mounted hangs under it.
    let mut unmount = Vec::new();
    let mut left = going.clone();
    while !left.is_empty() {
        let (free, held): (Vec<String>, Vec<String>) = left.into_iter().partition(|id| {
            !active.iter().any(|(child, parent)| parent == id && child != id && !unmount.contains(child))
        });
        if free.is_empty() {
            // A cycle of parents; nothing can be taken first.
            unmount.extend(held);
            break;
        }
        unmount.extend(free);
        left = held;
    }
    let keep: Vec<String> = active.keys().filter(|id| !going.contains(id)).cloned().collect();
    // Parents first: a mount is made once its parent is (or stays) mounted.
    let mut up: Vec<String> = keep.clone();
    let mut mount = Vec::new();
    let mut pending: Vec<(&String, &String)> =
        wanted.iter().filter(|(id, _)| !active.contains_key(*id) || going.contains(id)).collect();
    loop {
        let (ready, rest): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .partition(|(id, parent)| !going.contains(id) && (parent.is_empty() || up.contains(parent)));
        if ready.is_empty() {
            pending = rest;
            break;
        }
        for (id, _) in ready {
            up.push(id.clone());
            mount.push(id.clone());
        }
        pending = rest;
    }
    let waiting = pending.into_iter().map(|(id, parent)| (id.clone(), parent.clone())).collect();
    Plan { unmount, keep, mount, waiting }
}

/// A mount made.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Active {
    parent: String,
    /// The target as the node sees it (`/var/mnt/data`).
    target: String,
    /// The target on this machine (under the controller's root).
    path: PathBuf,
    what: Made,
    flags: MountFlags,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Made {
    Filesystem,
    /// A directory, bind-mounted onto `Some(path)`.
    Directory(Option<PathBuf>),
    Swap(PathBuf),
}

pub struct MountController {
    active: BTreeMap<String, Active>,
    /// Mount targets are made relative to this root (tests); `/` on a node.
    root: PathBuf,
}

impl Default for MountController {
    fn default() -> Self {
        Self::new()
    }
}

impl MountController {
    pub fn new() -> Self {
        Self::under(PathBuf::from("/"))
    }

    pub fn under(root: PathBuf) -> Self {
        MountController { active: BTreeMap::new(), root }
    }

    fn on_host(&self, target: &str) -> PathBuf {
        self.root.join(target.trim_start_matches('/'))
    }
}

fn flags(request: &MountRequest, status: &VolumeStatus) -> MountFlags {
    let mut f = MountFlags::empty();
    if request.secure || status.mount_spec.secure {
        f |= MountFlags::NOSUID | MountFlags::NODEV;
    }
    if request.no_exec || status.mount_spec.no_exec {
        f |= MountFlags::NOEXEC;
    }
    if request.read_only {
        f |= MountFlags::RDONLY;
    }
    if request.disable_access_time {
        f |= MountFlags::NOATIME;
    }
    f
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    if mode == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("setting mode {mode:o} on {}: {e}", path.display()))
}

/// Makes a directory, and the directories between it and its parent mount (a `machine.disks`
/// mount point may be several levels below `/var`), or takes the one there.
fn make_dir(path: &Path, mode: u32) -> Result<(), String> {
    if let Some(parent) = path.parent()
        && !parent.exists()
    {
        std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    match std::fs::create_dir(path) {
        Ok(()) => set_mode(path, mode),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if path.is_dir() {
                Ok(())
            } else {
                Err(format!("{} is there and is not a directory", path.display()))
            }
        }
        Err(e) => Err(format!("creating {}: {e}", path.display())),
    }
}

/// What to mount, gathered for the blocking task.
struct Job {
    kind: VolumeType,
    filesystem: FilesystemType,
    source: String,
    path: PathBuf,
    parent_path: PathBuf,
    bind_target: Option<String>,
    mode: u32,
    flags: MountFlags,
    read_only: bool,
    project_quota: bool,
}

/// Mounts `job`; with what was done beyond the mount (a filesystem grown), to be said.
fn mount_job(job: &Job) -> Result<(Made, Option<String>), String> {
    match job.kind {
        VolumeType::Directory => {
            make_dir(&job.path, job.mode)?;
            let bind = match &job.bind_target {
                Some(to) => {
                    let to = job.parent_path.join(to);
                    km::bind(&job.path, &to, job.flags).map_err(|e| e.to_string())?;
                    Some(to)
                }
                None => None,
            };
            if !job.read_only {
                set_mode(&job.path, job.mode)?;
            }
            Ok((Made::Directory(bind), None))
        }
        VolumeType::Partition | VolumeType::Disk if job.filesystem == FilesystemType::Swap => {
            let device = PathBuf::from(&job.source);
            swap::on(&device, swap::DISCARD_ONCE).map_err(|e| e.to_string())?;
            Ok((Made::Swap(device), None))
        }
        VolumeType::Partition | VolumeType::Disk | VolumeType::External => {
            let fstype = job.filesystem.fstype();
            if fstype.is_empty() {
                return Err(format!("{} holds no filesystem to mount", job.source));
            }
            let data = (job.project_quota && job.filesystem == FilesystemType::Xfs).then_some(c"prjquota");
            km::mount_spec(&MountSpec { fstype, source: &job.source, target: &job.path, flags: job.flags, data })
                .map_err(|e| e.to_string())?;
            // A share's root belongs to the host that shares it; a read-only mount cannot change.
            if !job.read_only && job.kind != VolumeType::External {
                set_mode(&job.path, job.mode)?;
            }
            Ok((Made::Filesystem, if job.read_only { None } else { grow_filesystem(job) }))
        }
        other => Err(format!("mounting a {other:?} volume is not supported")),
    }
}

/// A filesystem just mounted grows into the rest of its device (a partition the volume
/// manager grew, a disk made larger): xfs and ext4, online, as `xfs_growfs` would. What it
/// did, or why it could not, for the console; a filesystem that cannot grow stays mounted.
fn grow_filesystem(job: &Job) -> Option<String> {
    use std::io::{Seek, SeekFrom};
    let grow = match job.filesystem {
        FilesystemType::Xfs => crate::kernel::growfs::xfs,
        FilesystemType::Ext4 => crate::kernel::growfs::ext4,
        _ => return None,
    };
    let size = match std::fs::File::open(&job.source).and_then(|mut f| f.seek(SeekFrom::End(0))) {
        Ok(size) => size,
        Err(e) => return Some(format!("not grown: sizing {}: {e}", job.source)),
    };
    match grow(&job.path, size) {
        Ok(g) if g.after > g.before => Some(format!(
            "filesystem grown from {} to {}",
            crate::resources::block::pretty_size(g.before),
            crate::resources::block::pretty_size(g.after)
        )),
        Ok(_) => None,
        Err(e) => Some(format!("not grown: {e}")),
    }
}

fn unmount_job(active: &Active) -> Result<(), String> {
    match &active.what {
        Made::Filesystem => km::unmount(&active.path).map_err(|e| e.to_string()),
        Made::Directory(Some(bind)) => km::unmount(bind).map_err(|e| e.to_string()),
        Made::Directory(None) => Ok(()),
        Made::Swap(device) => swap::off(device).map_err(|e| e.to_string()),
    }
}

fn remount_job(active: &Active, flags: MountFlags) -> Result<(), String> {
    match &active.what {
        Made::Filesystem => km::remount(&active.path, flags, false).map_err(|e| e.to_string()),
        Made::Directory(Some(bind)) => km::remount(bind, flags, true).map_err(|e| e.to_string()),
        Made::Directory(None) | Made::Swap(_) => Ok(()),
    }
}

#[async_trait::async_trait]
impl Controller for MountController {
    fn name(&self) -> String {
        "MountController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::strong::<MountRequest>(NAMESPACE), Input::strong::<VolumeStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<MountStatus>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let requests: BTreeMap<String, Resource<MountRequest>> =
            ctx.list::<MountRequest>(NAMESPACE)?.into_iter().map(|r| (r.metadata().id.clone(), r)).collect();
        let statuses: BTreeMap<String, Resource<VolumeStatus>> =
            ctx.list::<VolumeStatus>(NAMESPACE)?.into_iter().map(|r| (r.metadata().id.clone(), r)).collect();
        let volume_of = |request: &Resource<MountRequest>| statuses.get(&request.spec().volume_id);
        let wanted: BTreeMap<String, String> = requests
            .iter()
            .filter(|(_, r)| r.is_running())
            .filter(|(_, r)| volume_of(r).is_some_and(|v| v.is_running() && v.spec().phase == VolumePhase::Ready))
            .map(|(id, r)| (id.clone(), r.spec().parent_mount_id.clone()))
            .collect();
        let active: BTreeMap<String, String> =
            self.active.iter().map(|(id, a)| (id.clone(), a.parent.clone())).collect();
        let plan = plan(&wanted, &active);
        let mut failed = Vec::new();

        let mut stuck: Vec<String> = Vec::new();
        for id in &plan.unmount {
            let Some(a) = self.active.get(id).cloned() else { continue };
            // A parent stays while a child could not be taken down.
            if stuck.iter().any(|child| self.active.get(child).is_some_and(|c| &c.parent == id)) {
                stuck.push(id.clone());
                continue;
            }
            let job = a.clone();
            match ctx.blocking("unmounting a volume", move || unmount_job(&job)).await? {
                Ok(()) => {
                    let line = match &a.what {
                        Made::Swap(device) => format!("volume {id}: swap disabled on {}", device.display()),
                        _ => format!("volume {id}: unmounted {}", a.target),
                    };
                    crate::kernel::console::line(&line);
                    self.active.remove(id);
                    ctx.remove::<MountStatus>(NAMESPACE, id)?;
                    if let Some(r) = requests.get(id) {
                        ctx.release(r)?;
                        if let Some(v) = volume_of(r) {
                            ctx.release(v)?;
                        }
                    }
                }
                Err(e) => {
                    failed.push(format!("volume {id}: {e}"));
                    stuck.push(id.clone());
                }
            }
        }

        for id in plan.keep.iter().chain(&plan.mount) {
            let (Some(request), Some(volume)) = (requests.get(id), requests.get(id).and_then(volume_of)) else {
                continue;
            };
            let (r, v) = (request.spec(), volume.spec());
            let parent = &r.parent_mount_id;
            let parent_target = if parent.is_empty() {
                None
            } else {
                match self.active.get(parent) {
                    Some(p) => Some(p.target.clone()),
                    // The parent failed to mount in this pass.
                    None => continue,
                }
            };
            let target = match &parent_target {
                Some(p) => Path::new(p).join(&v.mount_spec.target_path).display().to_string(),
                None if v.mount_spec.target_path.is_empty() => "/".to_string(),
                None => v.mount_spec.target_path.clone(),
            };
            let wanted_flags = flags(r, v);
            match self.active.get(id).cloned() {
                Some(a) if a.flags != wanted_flags => {
                    let job = a.clone();
                    match ctx.blocking("remounting a volume", move || remount_job(&job, wanted_flags)).await? {
                        Ok(()) => {
                            crate::kernel::console::line(&format!("volume {id}: remounted {}", a.target));
                            if let Some(a) = self.active.get_mut(id) {
                                a.flags = wanted_flags;
                            }
                        }
                        Err(e) => failed.push(format!("volume {id}: {e}")),
                    }
                }
                Some(_) => {}
                None => {
                    ctx.hold(request)?;
                    ctx.hold(volume)?;
                    let path = self.on_host(&target);
                    let job = Job {
                        kind: v.kind,
                        filesystem: v.filesystem,
                        source: v.mount_location.clone(),
                        parent_path: parent_target
                            .as_deref()
                            .map(|p| self.on_host(p))
                            .unwrap_or_else(|| self.root.clone()),
                        path: path.clone(),
                        bind_target: v.mount_spec.bind_target.clone(),
                        mode: v.mount_spec.file_mode,
                        flags: wanted_flags,
                        read_only: r.read_only,
                        project_quota: v.mount_spec.project_quota_support,
                    };
                    match ctx.blocking("mounting a volume", move || mount_job(&job)).await? {
                        Ok((what, grown)) => {
                            let line = match &what {
                                Made::Swap(device) => format!("volume {id}: swap enabled on {}", device.display()),
                                Made::Directory(_) => format!("volume {id}: directory {target} made"),
                                Made::Filesystem => match &grown {
                                    None => format!("volume {id}: mounted {} on {target}", v.mount_location),
                                    Some(g) => format!("volume {id}: mounted {} on {target}; {g}", v.mount_location),
                                },
                            };
                            crate::kernel::console::line(&line);
                            let a = Active {
                                parent: parent.clone(),
                                target: target.clone(),
                                path,
                                what,
                                flags: wanted_flags,
                            };
                            self.active.insert(id.clone(), a);
                        }
                        Err(e) => {
                            failed.push(format!("volume {id}: {e}"));
                            continue;
                        }
                    }
                }
            }
            ctx.apply(
                NAMESPACE,
                id,
                MountStatus {
                    spec: r.clone(),
                    source: v.mount_location.clone(),
                    target,
                    filesystem: v.filesystem,
                    volume_id: r.volume_id.clone(),
                    read_only: r.read_only,
                    project_quota_support: v.mount_spec.project_quota_support,
                },
            )?;
        }
        if !failed.is_empty() {
            return Err(failed.join("; ").into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn parents_mount_first_and_go_last() {
        let all = [
            ("STATE", ""),
            ("EPHEMERAL", ""),
            ("/var/mnt", "EPHEMERAL"),
            ("u-data", "/var/mnt"),
            ("e-old", "/var/mnt"),
        ];
        type Case = (&'static str, Vec<(&'static str, &'static str)>, Vec<(&'static str, &'static str)>, Plan);
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: Vec<Case> = vec![
            (
                "from nothing: parents before children, in one pass",
                all.to_vec(),
                vec![],
                Plan { mount: s(&["EPHEMERAL", "STATE", "/var/mnt", "e-old", "u-data"]), ..Plan::default() },
            ),
            (
                "a user volume waits for /var/mnt, which waits for EPHEMERAL",
                vec![("STATE", ""), ("/var/mnt", "EPHEMERAL"), ("u-data", "/var/mnt")],
                vec![],
                Plan {
                    mount: s(&["STATE"]),
                    waiting: vec![("/var/mnt".into(), "EPHEMERAL".into()), ("u-data".into(), "/var/mnt".into())],
                    ..Plan::default()
                },
            ),
            (
                "a parent made earlier holds its late child",
                vec![("EPHEMERAL", ""), ("/var/mnt", "EPHEMERAL"), ("u-data", "/var/mnt")],
                vec![("EPHEMERAL", ""), ("/var/mnt", "EPHEMERAL")],
                Plan { keep: s(&["/var/mnt", "EPHEMERAL"]), mount: s(&["u-data"]), ..Plan::default() },
            ),
            (
                "a document removed: only its mount goes",
                vec![("EPHEMERAL", ""), ("/var/mnt", "EPHEMERAL"), ("e-old", "/var/mnt")],
                vec![("EPHEMERAL", ""), ("/var/mnt", "EPHEMERAL"), ("e-old", "/var/mnt"), ("u-data", "/var/mnt")],
                Plan { unmount: s(&["u-data"]), keep: s(&["/var/mnt", "EPHEMERAL", "e-old"]), ..Plan::default() },
            ),
            (
                "EPHEMERAL going takes its children, children first, and they wait for it",
                vec![("STATE", ""), ("/var/mnt", "EPHEMERAL"), ("u-data", "/var/mnt")],
                all.to_vec(),
                Plan {
                    unmount: s(&["e-old", "u-data", "/var/mnt", "EPHEMERAL"]),
                    keep: s(&["STATE"]),
                    waiting: vec![("/var/mnt".into(), "EPHEMERAL".into()), ("u-data".into(), "/var/mnt".into())],
                    ..Plan::default()
                },
            ),
            ("nothing wanted, nothing made", vec![], vec![], Plan::default()),
        ];
        for (name, wanted, active, want) in cases {
            assert_eq!(plan(&map(&wanted), &map(&active)), want, "{name}");
        }
    }

    #[test]
    fn flags_follow_the_request_and_the_volume() {
        let v = |secure, no_exec| VolumeStatus {
            mount_spec: crate::resources::block::MountSpec { secure, no_exec, ..Default::default() },
            ..Default::default()
        };
        let r = |f: fn(&mut MountRequest)| {
            let mut r = MountRequest::default();
            f(&mut r);
            r
        };
        let cases = [
            ("nothing asked", r(|_| {}), v(false, false), MountFlags::empty()),
            (
                "STATE: the volume's own",
                r(|_| {}),
                v(true, true),
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            ),
            (
                "a user volume: the request's",
                r(|r| {
                    r.secure = true;
                    r.no_exec = true;
                }),
                v(false, false),
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            ),
            ("read-only", r(|r| r.read_only = true), v(false, false), MountFlags::RDONLY),
            ("no access times", r(|r| r.disable_access_time = true), v(false, false), MountFlags::NOATIME),
        ];
        for (name, request, status, want) in cases {
            assert_eq!(flags(&request, &status), want, "{name}");
        }
    }
}

//! The node's boot disk over its life (see [`crate::boot`] for its layout): an upgrade writes
//! a new version into the slot not booted and has GRUB boot it once; the next boot is that
//! slot's trial, confirmed as the default once the node reaches running, or given up on —
//! the node reboots, and GRUB's default (the old slot) boots. A kernel that panics reboots
//! by itself (`panic=10`) into the same fallback. A rollback makes the other slot the default
//! and reboots. While a slot is on trial, META keeps the slot to fall back to (Talos's
//! `Upgrade` key), so the old slot, booted again, knows the new one failed.
//!
//! One operation at a time; BOOT is mounted only for the moment it is written. Nothing here
//! writes the slot booted now.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::boot::artifacts::{self, Artifacts, ArtifactsError};
use crate::boot::install::InstallError;
use crate::boot::slots::{Boot, Slot, SlotError};
use crate::config::Config;
use crate::cosi::{Resource, State};
use crate::kernel::console;
use crate::kernel::power::PowerAction;
use crate::resources::block::{DiscoveredVolume, NAMESPACE as BLOCK, SystemDisk, VolumePhase, VolumeStatus};
use crate::resources::runtime::{BootSlot, BootStatus, MachineStage, NAMESPACE as RUNTIME};
use crate::services::Reaper;

/// Where BOOT is mounted while it is written.
pub const BOOT_MOUNT: &str = "/run/talosbox/boot";
/// Talos's META key `Upgrade`: the slot to fall back to while a new one is on trial.
pub const UPGRADE_TAG: u8 = 6;
/// How long a new slot has to bring the node to running before it is given up on.
pub const TRIAL_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the node waits for META at boot before it reports without it.
const META_WAIT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(
        "the node did not boot from an installed disk (it booted a UKI or a kernel directly): there is no slot to {0}; install it first (machine.install)"
    )]
    NotInstalled(&'static str),
    #[error("there is no system disk (no META partition)")]
    NoSystemDisk,
    #[error("the system disk {0} has no BOOT partition")]
    NoBoot(String),
    #[error("slot {0} holds no version to roll back to")]
    NothingToRollBack(Slot),
    #[error(transparent)]
    Artifacts(#[from] ArtifactsError),
    #[error(transparent)]
    Slot(#[from] SlotError),
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error("META: {0}")]
    Meta(#[from] crate::block::meta::MetaError),
    #[error("{what}: {why}")]
    Step { what: String, why: String },
}

impl LifecycleError {
    pub fn step(what: impl Into<String>, why: impl std::fmt::Display) -> Self {
        LifecycleError::Step { what: what.into(), why: why.to_string() }
    }

    /// The gRPC status a caller gets.
    pub fn to_status(&self) -> tonic::Status {
        use tonic::Status;
        match self {
            LifecycleError::NotInstalled(_)
            | LifecycleError::NoSystemDisk
            | LifecycleError::NoBoot(_)
            | LifecycleError::NothingToRollBack(_) => Status::failed_precondition(self.to_string()),
            LifecycleError::Artifacts(ArtifactsError::Fetch { .. }) => Status::unavailable(self.to_string()),
            LifecycleError::Artifacts(_) => Status::invalid_argument(self.to_string()),
            _ => Status::internal(self.to_string()),
        }
    }
}

/// Where an upgrade's artifacts come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An http(s) URL of an imager output directory.
    Url(String),
    /// A directory on the node (an upload).
    Dir(PathBuf),
}

pub struct Lifecycle {
    pub(crate) state: State,
    pub(crate) meta: Arc<crate::block::meta::MetaStore>,
    pub(crate) reaper: Arc<Reaper>,
    pub(crate) power: mpsc::UnboundedSender<PowerAction>,
    /// The slot GRUB booted; `None` for a UKI or direct boot.
    pub(crate) booted: Option<Slot>,
    /// Where artifacts are fetched and uploads are kept (a tmpfs).
    pub(crate) scratch: PathBuf,
    lock: tokio::sync::Mutex<()>,
}

impl Lifecycle {
    pub fn new(
        state: State,
        meta: Arc<crate::block::meta::MetaStore>,
        reaper: Arc<Reaper>,
        power: mpsc::UnboundedSender<PowerAction>,
        booted: Option<Slot>,
        scratch: PathBuf,
    ) -> Self {
        Lifecycle { state, meta, reaper, power, booted, scratch, lock: tokio::sync::Mutex::new(()) }
    }

    pub fn booted(&self) -> Option<Slot> {
        self.booted
    }

    /// One operation on the boot disk at a time.
    pub(crate) async fn hold(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }

    /// The BOOT partition of the system disk.
    fn boot_partition(&self) -> Result<String, LifecycleError> {
        let disk = self
            .state
            .find::<SystemDisk>(BLOCK, SystemDisk::ID)
            .ok()
            .flatten()
            .map(|d| d.spec().dev_path.clone())
            .ok_or(LifecycleError::NoSystemDisk)?;
        self.state
            .list::<DiscoveredVolume>(BLOCK)
            .iter()
            .map(|v| v.spec())
            .find(|v| v.parent_dev_path == disk && v.partition_label == crate::boot::BOOT_LABEL)
            .map(|v| v.dev_path.clone())
            .ok_or(LifecycleError::NoBoot(disk))
    }

    /// META's partition, when its volume is ready.
    fn meta_path(&self) -> Option<PathBuf> {
        let status = self.state.find::<VolumeStatus>(BLOCK, "META").ok().flatten()?;
        let s = status.spec();
        (s.phase == VolumePhase::Ready && !s.location.is_empty()).then(|| PathBuf::from(&s.location))
    }

    /// Runs `f` on BOOT, mounted read-write for as long as it takes.
    pub(crate) async fn with_boot<T, F>(&self, f: F) -> Result<T, LifecycleError>
    where
        T: Send + 'static,
        F: FnOnce(&Boot) -> Result<T, LifecycleError> + Send + 'static,
    {
        let device = self.boot_partition()?;
        tokio::task::spawn_blocking(move || on_mounted(&device, Path::new(BOOT_MOUNT), f))
            .await
            .map_err(|e| LifecycleError::step("writing BOOT", e))?
    }

    async fn set_fallback(&self, fallback: Option<Slot>) -> Result<(), LifecycleError> {
        let path = self.meta_path().ok_or(LifecycleError::NoSystemDisk)?;
        self.meta
            .update(path, move |m| match fallback {
                Some(slot) => m.set(UPGRADE_TAG, slot.to_string()),
                None => {
                    m.delete(UPGRADE_TAG);
                    Ok(())
                }
            })
            .await?;
        Ok(())
    }

    fn fallback(&self) -> Option<Slot> {
        let path = self.meta_path()?;
        let meta = crate::block::meta::load(&path).ok()?;
        meta.get(UPGRADE_TAG).and_then(|v| Slot::parse(&String::from_utf8_lossy(v)))
    }

    /// The CAs an https image server must chain to: the image's roots and `config`'s
    /// `TrustedRootsConfig` certificates, as the rendered `/etc/ssl/certs/ca-certificates.crt`
    /// holds them. The caller names the configuration it acts on: an install starts as soon as
    /// the store holds a configuration, before the file (or the `MachineConfig` resource) is
    /// rendered from it.
    fn trusted_roots(&self, config: Option<&Config>) -> Result<PathBuf, LifecycleError> {
        let bundle = crate::controllers::files::trusted_roots_bundle(
            Path::new(crate::controllers::files::IMAGE_TRUSTED_ROOTS),
            config,
        );
        // A node image without a bundle of its own (a process in a test) keeps the system's.
        if bundle.is_empty() {
            return Ok(PathBuf::from(artifacts::SYSTEM_ROOTS));
        }
        let path = self.scratch.join("trusted-roots.pem");
        std::fs::create_dir_all(&self.scratch).map_err(|e| LifecycleError::step("writing the trusted roots", e))?;
        std::fs::write(&path, bundle).map_err(|e| LifecycleError::step("writing the trusted roots", e))?;
        Ok(path)
    }

    /// The artifacts `source` names, checked, in the scratch directory; an https URL must be
    /// served with a certificate the image's roots or `config`'s trusted roots vouch for.
    pub(crate) async fn artifacts(
        &self,
        source: Source,
        config: Option<&Config>,
        progress: &mut (dyn FnMut(String) + Send),
    ) -> Result<Artifacts, LifecycleError> {
        match source {
            Source::Url(url) => {
                let dir = self.scratch.join("fetched");
                let _ = std::fs::remove_dir_all(&dir);
                progress(format!("fetching {url} (SHA256SUMS first; every file is checked against it)"));
                let roots = self.trusted_roots(config)?;
                Ok(artifacts::fetch(&url, &dir, &roots, progress).await?)
            }
            Source::Dir(dir) => {
                progress("checking the uploaded files against their SHA256SUMS".into());
                tokio::task::spawn_blocking(move || Artifacts::verified(&dir))
                    .await
                    .map_err(|e| LifecycleError::step("checking the upload", e))?
                    .map_err(LifecycleError::from)
            }
        }
    }

    /// Writes `source`'s version into the slot not booted, has GRUB boot it once at the next
    /// boot, and keeps the booted slot as the fallback; `progress` gets a line per step. The
    /// caller reboots (or not: a staged upgrade boots the new slot whenever the node reboots).
    pub async fn upgrade(
        &self,
        source: Source,
        progress: &mut (dyn FnMut(String) + Send),
    ) -> Result<Slot, LifecycleError> {
        let booted = self.booted.ok_or(LifecycleError::NotInstalled("upgrade"))?;
        let _held = self.hold().await;
        let config = crate::resources::config::MachineConfig::active(&self.state);
        let artifacts = self.artifacts(source, config.as_ref(), progress).await?;
        let target = booted.other();
        progress(format!(
            "verified talosbox {} ({}, vmlinuz, cmdline {:?})",
            artifacts.version,
            artifacts.initramfs_name(),
            artifacts.cmdline
        ));
        progress(format!("writing slot {target} (slot {booted} is booted and stays as it is)"));
        let a = artifacts.clone();
        self.with_boot(move |boot| {
            boot.write_slot(target, Some(booted), &a)?;
            boot.write_config()?;
            Ok(())
        })
        .await?;
        // The fallback first: a trial never runs without it.
        self.set_fallback(Some(booted)).await?;
        self.with_boot(move |boot| Ok(boot.boot_once(target)?)).await?;
        let line = format!(
            "upgrade: slot {target} holds talosbox {}; it boots once at the next boot, and becomes the default when the node runs",
            artifacts.version
        );
        console::line(&line);
        progress(line);
        self.publish(Some(format!("staged: slot {target} boots once at the next boot"))).await;
        Ok(target)
    }

    /// Makes the other slot the default and reboots into it.
    pub async fn rollback(&self) -> Result<Slot, LifecycleError> {
        let booted = self.booted.ok_or(LifecycleError::NotInstalled("roll back to"))?;
        let _held = self.hold().await;
        let target = booted.other();
        let version = self
            .with_boot(move |boot| {
                let info = boot.slot(target).ok_or(LifecycleError::NothingToRollBack(target))?;
                boot.make_default(target)?;
                Ok(info.version)
            })
            .await?;
        self.set_fallback(None).await?;
        console::line(&format!("rollback: slot {target} (talosbox {version}) is the default; rebooting into it"));
        let _ = self.power.send(PowerAction::Reboot);
        Ok(target)
    }

    /// Publishes what BOOT holds and `upgrade` (kept as it was when `None`).
    async fn publish(&self, upgrade: Option<String>) {
        let slots = self.with_boot(|boot| Ok((boot.slots(), boot.default_slot()))).await;
        let existing = self.state.find::<BootStatus>(RUNTIME, BootStatus::ID).ok().flatten();
        let mut spec = existing.as_ref().map(|r| r.spec().clone()).unwrap_or_default();
        spec.slot = self.booted.map(|s| s.to_string()).unwrap_or_default();
        spec.version = format!("v{}", crate::version::os_version());
        match slots {
            Ok((slots, default)) => {
                spec.slots =
                    slots.into_iter().map(|s| BootSlot { slot: s.slot.to_string(), version: s.version }).collect();
                spec.default_slot = default.map(|s| s.to_string()).unwrap_or_default();
            }
            Err(e) if self.booted.is_some() => console::line(&format!("upgrade: reading the slots on BOOT: {e}")),
            Err(_) => {}
        }
        if let Some(u) = upgrade {
            spec.upgrade = u;
        }
        let result = match existing {
            Some(current) => self.state.update(current.with_spec(spec), "").map(drop),
            None => self.state.create(Resource::new(RUNTIME, BootStatus::ID, spec), "").map(drop),
        };
        if let Err(e) = result {
            console::line(&format!("machined: publishing the boot status: {e}"));
        }
    }

    /// At boot: says how the node booted and settles a trial. A slot booted on trial (META
    /// names another slot to fall back to) becomes the default once the node is running, or
    /// the node reboots into the fallback after [`TRIAL_TIMEOUT`]; the fallback booted again
    /// says the new slot failed.
    pub async fn watch_boot(self: Arc<Self>, mut stage: watch::Receiver<MachineStage>, cancel: CancellationToken) {
        let Some(booted) = self.booted else {
            self.publish(Some(String::new())).await;
            return;
        };
        let deadline = tokio::time::Instant::now() + META_WAIT;
        while self.meta_path().is_none() || self.boot_partition().is_err() {
            if tokio::time::Instant::now() >= deadline || cancel.is_cancelled() {
                console::line("upgrade: META or BOOT not found; the boot slot is not checked");
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        match self.fallback() {
            None => self.publish(Some(String::new())).await,
            Some(fallback) if fallback == booted => {
                let failed = booted.other();
                let line = format!(
                    "upgrade: slot {failed} did not come up; GRUB booted slot {booted} (talosbox v{}) again",
                    crate::version::os_version()
                );
                console::line(&line);
                if let Err(e) = self.set_fallback(None).await {
                    console::line(&format!("upgrade: clearing META's fallback: {e}"));
                }
                self.publish(Some(format!("rolled back: slot {failed} did not come up"))).await;
            }
            Some(fallback) => {
                console::line(&format!(
                    "upgrade: slot {booted} is on trial; it becomes the default once the node runs (slot {fallback} otherwise, in {} s)",
                    TRIAL_TIMEOUT.as_secs()
                ));
                self.publish(Some(format!("trial: slot {fallback} is the fallback"))).await;
                let running = async move { stage.wait_for(|s| *s == MachineStage::Running).await.is_ok() };
                let outcome = tokio::select! {
                    () = cancel.cancelled() => return,
                    r = tokio::time::timeout(TRIAL_TIMEOUT, running) => r,
                };
                match outcome {
                    Ok(true) => {
                        let _held = self.hold().await;
                        let done = self.with_boot(move |boot| Ok(boot.make_default(booted)?)).await;
                        match done.and(self.set_fallback(None).await) {
                            Ok(()) => {
                                console::line(&format!(
                                    "upgrade: slot {booted} (talosbox v{}) is running and is now the default",
                                    crate::version::os_version()
                                ));
                                drop(_held);
                                self.publish(Some(format!("confirmed: slot {booted}"))).await;
                            }
                            Err(e) => console::line(&format!("upgrade: confirming slot {booted}: {e}")),
                        }
                    }
                    Ok(false) => {}
                    Err(_) => {
                        console::line(&format!(
                            "upgrade: slot {booted} did not reach running in {} s; rebooting into slot {fallback}",
                            TRIAL_TIMEOUT.as_secs()
                        ));
                        let _ = self.power.send(PowerAction::Reboot);
                    }
                }
            }
        }
    }
}

/// Mounts the xfs at `device` on `target`, runs `f` on it, unmounts (also when `f` failed).
pub(crate) fn on_mounted<T>(
    device: &str,
    target: &Path,
    f: impl FnOnce(&Boot) -> Result<T, LifecycleError>,
) -> Result<T, LifecycleError> {
    use crate::kernel::mount;
    // Loaded here, not left to the kernel's own request: one made while another thread loads
    // the module finds no filesystem yet ("request_module fs-xfs succeeded, but still no fs").
    if let Ok(loader) = crate::kernel::modules::Loader::shared() {
        let _ = loader.load("xfs");
    }
    let spec = mount::MountSpec {
        fstype: "xfs",
        source: device,
        target,
        flags: rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV | rustix::mount::MountFlags::NOEXEC,
        data: None,
    };
    // A module still coming up (listed, not registered yet) fails the first tries.
    let mut tries = 0;
    while let Err(e) = mount::mount_spec(&spec) {
        tries += 1;
        if tries == 10 {
            return Err(LifecycleError::step(format!("mounting BOOT ({device})"), e));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let out = f(&Boot::at(target));
    let synced = std::fs::File::open(target).and_then(|d| rustix::fs::syncfs(&d).map_err(Into::into));
    // A service started in these moments holds copies of our descriptors from its fork until
    // its exec closes them, which makes the mount busy for a while: try again, briefly.
    let mut unmounted = mount::unmount(target);
    for _ in 0..50 {
        match &unmounted {
            Err(mount::MountError::Unmount { source, .. })
                if source.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) =>
            {
                std::thread::sleep(Duration::from_millis(100));
                unmounted = mount::unmount(target);
            }
            _ => break,
        }
    }
    let unmounted = unmounted.map_err(|e| LifecycleError::step("unmounting BOOT", e));
    let out = out?;
    synced.map_err(|e| LifecycleError::step("syncing BOOT", e))?;
    unmounted?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot::artifacts::tests::{serve_https, write_set};

    /// An install starts as soon as the store holds a configuration, before the
    /// `MachineConfig` resource (and the rendered bundle) follow it: the https fetch must trust
    /// the `TrustedRootsConfig` of the configuration it is handed, not wait for the resource.
    #[tokio::test]
    async fn a_fetch_trusts_the_roots_of_the_configuration_it_is_handed() {
        let tmp = tempfile::tempdir().unwrap();
        let served = tmp.path().join("www");
        write_set(&served, "0.5.0");
        let (addr, ca) = serve_https(served).await;
        let indented: String = ca.lines().map(|l| format!("  {l}\n")).collect();
        let text = format!(
            "version: v1alpha1\nmachine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: TrustedRootsConfig\n\
             name: images\ncertificates: |\n{indented}"
        );
        let config = crate::config::load(&text).unwrap().config;
        let (power, _rx) = mpsc::unbounded_channel();
        // The state holds no MachineConfig, as in the moment after the store took the text.
        let lc = Lifecycle::new(
            State::in_memory(),
            crate::block::meta::MetaStore::new(),
            Reaper::new(crate::services::ReapMode::Own),
            power,
            None,
            tmp.path().join("scratch"),
        );
        let url = format!("https://{addr}/img/");
        let got = lc.artifacts(Source::Url(url.clone()), Some(&config), &mut |_| {}).await.unwrap();
        assert_eq!(got.version, "0.5.0");
        // Without the configuration's roots the image server is not trusted.
        let err = lc.artifacts(Source::Url(url), None, &mut |_| {}).await.unwrap_err();
        assert!(err.to_string().contains("TLS"), "{err}");
    }
}

//! A node that installs itself: when it booted from a UKI or a kernel given directly (no
//! `talosbox.slot=` on its command line) and its configuration names an install disk
//! (`machine.install` or `UnattendedInstallConfig`), it writes Talos's boot layout there
//! (GPT, GRUB for BIOS and UEFI, the ESP, slot A on BOOT, META), waits for the volume manager
//! to make STATE on the new system disk and for the configuration to be stored on it, and
//! reboots into the disk. A disk that already holds an install keeps its STATE and EPHEMERAL
//! (the volume manager locates them again), unless `wipe: true`.
//!
//! The artifacts come from `machine.install.image` when it is an http(s) URL of an imager
//! output directory, else from what the node booted: the UKI on a vfat volume. Progress and
//! failures are in the `InstallStatus` resource and on the console; a failed install is
//! tried again 30 s later, or at once when the configuration changes. Never writes to a disk
//! the selector did not pick, to the disk holding the artifacts it installs from, or to a
//! read-only disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::config_store::ConfigStore;
use super::lifecycle::{BOOT_MOUNT, Lifecycle, LifecycleError, Source, on_mounted};
use crate::block::selector::{Env, Expression, Vars};
use crate::boot::artifacts::{self, Artifacts};
use crate::boot::install::{GrubImages, Planned};
use crate::boot::slots::Slot;
use crate::config::Config;
use crate::config::install::InstallView;
use crate::cosi::Resource;
use crate::kernel::blockdev::BlockDevice;
use crate::kernel::console;
use crate::kernel::power::PowerAction;
use crate::resources::block::{DiscoveredVolume, Disk, MountStatus, NAMESPACE as BLOCK, SystemDisk};
use crate::resources::runtime::{InstallDiskMatch, InstallStatus, NAMESPACE as RUNTIME};

/// Where a vfat volume is mounted while the UKI on it is read.
const MEDIA_MOUNT: &str = "/run/talosbox/media";
/// How long the install waits for STATE to hold the configuration before it gives up.
const STATE_WAIT: Duration = Duration::from_secs(600);
/// How often a selector that matches no disk yet is tried again.
const RETRY: Duration = Duration::from_secs(5);
/// When a failed install (an image server not reachable yet, a write that failed) is tried
/// again, if the configuration has not changed before.
const FAILED_RETRY: Duration = Duration::from_secs(30);

/// Follows the configuration and installs when it asks for it (see the module's text).
pub async fn run(lc: Arc<Lifecycle>, store: Arc<ConfigStore>, cancel: CancellationToken) {
    let mut configs = store.subscribe();
    let mut attempted: Option<String> = None;
    let mut failed = false;
    loop {
        let active = configs.borrow_and_update().active.clone();
        let text = active.as_deref().map(str::to_string);
        let config = active.as_ref().and_then(|a| a.parsed()).map(|p| &p.config);
        let view = config.and_then(|c| c.install().ok().flatten());
        match (&view, lc.booted()) {
            (None, _) => failed = false,
            (Some(_), Some(slot)) => {
                publish(&lc, |s| {
                    s.phase = "skipped".into();
                    s.message = format!("booted from slot {slot} of an installed disk");
                });
            }
            (Some(view), None) if attempted.as_deref() != text.as_deref() => {
                attempted = text.clone();
                let outcome = tokio::select! {
                    () = cancel.cancelled() => return,
                    r = install(&lc, &store, view, config, &cancel) => r,
                };
                match outcome {
                    Ok(()) => return,
                    Err(e) => {
                        console::line(&format!(
                            "install: {e}; tried again in {} s or when the configuration changes",
                            FAILED_RETRY.as_secs()
                        ));
                        publish(&lc, |s| {
                            s.phase = "failed".into();
                            s.message = e.to_string();
                        });
                        failed = true;
                    }
                }
            }
            (Some(_), None) => {}
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            r = configs.changed() => if r.is_err() { return },
            () = tokio::time::sleep(FAILED_RETRY), if failed => attempted = None,
        }
    }
}

fn publish(lc: &Lifecycle, change: impl FnOnce(&mut InstallStatus)) {
    let current = lc.state.find::<InstallStatus>(RUNTIME, InstallStatus::ID).ok().flatten();
    let mut spec = current.as_ref().map(|r| r.spec().clone()).unwrap_or_default();
    change(&mut spec);
    let result = match current {
        Some(r) if r.spec() == &spec => Ok(()),
        Some(r) => lc.state.update(r.with_spec(spec), "").map(drop),
        None => lc.state.create(Resource::new(RUNTIME, InstallStatus::ID, spec), "").map(drop),
    };
    if let Err(e) = result {
        console::line(&format!("install: publishing its status: {e}"));
    }
}

/// The one disk `selector` picks among `disks` (by id, with whether each is the system
/// disk), and why each other was or was not picked.
pub fn choose(
    selector: &str,
    disks: &[(String, Disk, bool)],
    excluded: &[(String, String)],
) -> Result<(Disk, Vec<InstallDiskMatch>), (String, Vec<InstallDiskMatch>)> {
    let matcher = match Expression::compile(selector, Env::DiskLocator) {
        Ok(m) => m,
        Err(e) => return Err((format!("the selector {selector:?}: {e}"), Vec::new())),
    };
    let mut lines = Vec::new();
    let mut picked: Vec<&Disk> = Vec::new();
    for (id, disk, system) in disks {
        let hit = Vars::new().with_disk(disk).and_then(|v| matcher.matches(&v.with_system_disk(*system)));
        let (matched, reason) = match hit {
            Err(e) => (false, format!("selector error: {e}")),
            Ok(false) => (false, "selector does not match".to_string()),
            Ok(true) if disk.readonly || disk.cdrom => (false, "selector matches, but the disk is read-only".into()),
            Ok(true) => match excluded.iter().find(|(path, _)| *path == disk.dev_path) {
                Some((_, why)) => (false, format!("selector matches, but {why}")),
                None => (true, "selector matches".to_string()),
            },
        };
        if matched {
            picked.push(disk);
        }
        lines.push(InstallDiskMatch { disk: id.clone(), matched, reason });
    }
    match picked.as_slice() {
        [one] => Ok(((*one).clone(), lines)),
        [] => Err(("no disk matches the install selector (see diskMatches)".into(), lines)),
        many => {
            let names: Vec<&str> = many.iter().map(|d| d.dev_path.as_str()).collect();
            Err((
                format!("more than one disk matches the install selector: {}; it must pick one", names.join(", ")),
                lines,
            ))
        }
    }
}

async fn install(
    lc: &Arc<Lifecycle>,
    store: &ConfigStore,
    view: &InstallView,
    config: Option<&Config>,
    cancel: &CancellationToken,
) -> Result<(), LifecycleError> {
    let _held = lc.hold().await;
    publish(lc, |s| {
        *s = InstallStatus {
            phase: "waiting".into(),
            message: "looking for the install disk".into(),
            ..Default::default()
        };
    });
    // The media the node booted from is never installed over; the disk must have been seen.
    let (disk, media) = loop {
        let media = if view.image_url().is_some() { None } else { find_uki(lc).await };
        let system =
            lc.state.find::<SystemDisk>(BLOCK, SystemDisk::ID).ok().flatten().map(|d| d.spec().disk_id.clone());
        let mut disks: Vec<(String, Disk, bool)> = lc
            .state
            .list::<Disk>(BLOCK)
            .iter()
            .map(|r| (r.id().to_string(), r.spec().clone(), system.as_deref() == Some(r.id())))
            .collect();
        disks.sort_by(|a, b| a.0.cmp(&b.0));
        let excluded: Vec<(String, String)> = media
            .as_ref()
            .map(|(_, on)| vec![(on.clone(), "the node booted from it (the artifacts to install are on it)".into())])
            .unwrap_or_default();
        match choose(&view.selector, &disks, &excluded) {
            Ok((disk, lines)) => {
                publish(lc, |s| s.disk_matches = lines);
                break (disk, media);
            }
            Err((why, lines)) => {
                publish(lc, |s| {
                    s.phase = "waiting".into();
                    s.message = why.clone();
                    s.disk_matches = lines;
                });
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return Err(LifecycleError::step("install", "stopped")),
            () = tokio::time::sleep(RETRY) => {}
        }
    };
    let target = disk.dev_path.clone();
    publish(lc, |s| {
        s.phase = "installing".into();
        s.disk = target.clone();
        s.message = "getting the artifacts".into();
    });
    let mut progress = |line: String| console::line(&format!("install: {line}"));
    let (artifacts, source) = match (view.image_url(), media) {
        (Some(url), _) => (lc.artifacts(Source::Url(url.to_string()), config, &mut progress).await?, url.to_string()),
        (None, Some((uki, on))) => (uki, format!("the UKI on {on}")),
        (None, None) => {
            return Err(LifecycleError::step(
                "install",
                "nothing to install from: no UKI on a vfat volume here, and machine.install.image is not an http(s) URL of an imager output",
            ));
        }
    };
    let mut artifacts = artifacts;
    if !view.extra_kernel_args.is_empty() {
        artifacts.cmdline = format!("{} {}", artifacts.cmdline, view.extra_kernel_args.join(" "));
    }
    publish(lc, |s| {
        s.source = source.clone();
        s.message = format!("writing talosbox {} to {target}", artifacts.version);
    });
    console::line(&format!(
        "install: talosbox {} from {source} onto {target}{}",
        artifacts.version,
        if view.wipe { " (wiped first)" } else { "" }
    ));

    let (path, wipe) = (PathBuf::from(&target), view.wipe);
    let (planned, boot_dev) = tokio::task::spawn_blocking(move || write_disk(&path, wipe))
        .await
        .map_err(|e| LifecycleError::step("writing the disk", e))??;
    console::line(&format!(
        "install: {} boot partitions on {target}{}",
        if planned.kept { "rewrote the" } else { "made the" },
        if planned.kept { " (an earlier install: its table, META, STATE and EPHEMERAL are kept)" } else { "" }
    ));
    wait_for_node(Path::new(&boot_dev)).await?;
    let size = planned.boot().map(|p| p.size).unwrap_or_default();
    let cmd = crate::block::format::mkfs("/", crate::resources::block::FilesystemType::Xfs, &boot_dev, "BOOT", size)
        .map_err(|e| LifecycleError::step("formatting BOOT", e))?
        .over_unfinished(crate::resources::block::FilesystemType::Xfs);
    lc.reaper
        .run_to_end(&cmd.program, &cmd.args, &cmd.env)
        .await
        .map_err(|e| LifecycleError::step("formatting BOOT", e))?;
    let a = artifacts.clone();
    let dev = boot_dev.clone();
    tokio::task::spawn_blocking(move || {
        on_mounted(&dev, Path::new(BOOT_MOUNT), |boot| {
            boot.write_slot(Slot::A, None, &a)?;
            boot.write_config()?;
            boot.create_env(Slot::A)?;
            Ok(())
        })
    })
    .await
    .map_err(|e| LifecycleError::step("writing BOOT", e))??;
    // Discovery probes the disk again: META makes it the system disk, and the volume manager
    // makes (or finds) STATE and EPHEMERAL on it.
    announce(&target);
    publish(lc, |s| {
        s.message =
            format!("talosbox {} is on {target}; waiting for STATE to hold the configuration", artifacts.version);
    });
    console::line(&format!("install: slot A of {target} holds talosbox {}; waiting for STATE", artifacts.version));
    let deadline = tokio::time::Instant::now() + STATE_WAIT;
    loop {
        let mounted = lc.state.get::<MountStatus>(BLOCK, "STATE").is_ok();
        let active = store.snapshot().active.map(|a| a.to_string());
        let stored = std::fs::read_to_string(store.path()).ok();
        if mounted && active.is_some() && stored == active {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(LifecycleError::step(
                "install",
                format!("STATE did not hold the configuration within {} s", STATE_WAIT.as_secs()),
            ));
        }
        tokio::select! {
            () = cancel.cancelled() => return Err(LifecycleError::step("install", "stopped")),
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    publish(lc, |s| {
        s.phase = "installed".into();
        s.message = format!("talosbox {} on {target}; rebooting into it", artifacts.version);
    });
    console::line(&format!("install: done; rebooting into {target}"));
    let _ = lc.power.send(PowerAction::Reboot);
    Ok(())
}

/// Writes the boot partitions to the disk at `path` under its lock (after wiping it, when
/// asked) and has the kernel know them; the table written, and BOOT's device.
fn write_disk(path: &Path, wipe: bool) -> Result<(Planned, String), LifecycleError> {
    let name = path.display().to_string();
    let dev = BlockDevice::open_locked(path, Duration::from_secs(10)).map_err(|e| LifecycleError::step(&name, e))?;
    let partitions = kernel_partitions(path);
    if wipe {
        crate::block::wipe::fast_wipe(path).map_err(|e| LifecycleError::step(format!("wiping {name}"), e))?;
    }
    let size = dev.size_bytes().map_err(|e| LifecycleError::step(&name, e))?;
    let sector = dev.logical_sector_size().map_err(|e| LifecycleError::step(&name, e))?;
    let existing = crate::block::gpt::Table::read_with_sector_size(dev.file(), size, sector)
        .map_err(|e| LifecycleError::step(format!("reading {name}'s partition table"), e))?;
    if existing.is_none() && !wipe && whole_disk_holds_something(path) {
        return Err(LifecycleError::step(
            format!("installing to {name}"),
            "it holds a file system or other data and no partition table; it is not installed over without `wipe: true`",
        ));
    }
    let seed = format!("{name} {:?}", std::time::SystemTime::now());
    let planned = crate::boot::install::plan(&name, existing.as_ref(), size, sector, &Default::default(), &seed)?;
    let images = GrubImages::read(Path::new(crate::boot::GRUB_IMAGES_DIR))?;
    let volume_id = u32::from_le_bytes(
        crate::block::gpt::Guid::derived(seed.as_bytes()).to_disk()[..4].try_into().unwrap_or([0; 4]),
    );
    crate::boot::install::write_boot_area(dev.file(), path, &planned, &images, volume_id)?;
    if !planned.kept {
        for number in partitions {
            dev.delete_partition(number).map_err(|e| LifecycleError::step(&name, e))?;
        }
        for p in planned.table.partitions() {
            dev.add_partition(p.number, p.offset, p.size).map_err(|e| LifecycleError::step(&name, e))?;
        }
    }
    let boot = planned.boot().ok_or_else(|| LifecycleError::step(&name, "no BOOT partition was planned"))?;
    let disk_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let boot_dev =
        path.with_file_name(crate::controllers::block::volume_manager::partition_name(&disk_name, boot.number));
    Ok((planned, boot_dev.display().to_string()))
}

/// The kernel's partition numbers of the disk at `path`.
fn kernel_partitions(path: &Path) -> Vec<u32> {
    let Some(name) = path.file_name() else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(Path::new("/sys/class/block").join(name)) else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("partition")).ok())
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// Whether the first MiB of the disk holds anything but zeros.
fn whole_disk_holds_something(path: &Path) -> bool {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 20];
    std::fs::File::open(path).and_then(|mut f| f.read(&mut buf)).is_ok_and(|n| buf[..n].iter().any(|b| *b != 0))
}

/// Has the kernel announce the disk again, so discovery probes it.
fn announce(dev_path: &str) {
    if let Some(name) = Path::new(dev_path).file_name() {
        let _ = std::fs::write(Path::new("/sys/class/block").join(name).join("uevent"), "change");
    }
}

async fn wait_for_node(path: &Path) -> Result<(), LifecycleError> {
    for _ in 0..50 {
        if path.exists() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(LifecycleError::step("install", format!("{} did not appear", path.display())))
}

/// The UKI the node booted, if one is on a vfat volume: its artifacts (written to the scratch
/// directory) and the disk it is on.
async fn find_uki(lc: &Lifecycle) -> Option<(Artifacts, String)> {
    let candidates: Vec<DiscoveredVolume> = lc
        .state
        .list::<DiscoveredVolume>(BLOCK)
        .iter()
        .map(|v| v.spec().clone())
        .filter(|v| v.name == "vfat")
        .collect();
    let dir = lc.scratch.join("media");
    tokio::task::spawn_blocking(move || {
        for module in ["vfat", "nls_cp437", "nls_utf8"] {
            if let Ok(loader) = crate::kernel::modules::Loader::shared() {
                let _ = loader.load(module);
            }
        }
        candidates.into_iter().find_map(|v| {
            let disk = if v.parent_dev_path.is_empty() { v.dev_path.clone() } else { v.parent_dev_path.clone() };
            read_uki(&v.dev_path).and_then(|pe| artifacts::from_uki(&pe, &dir).ok()).map(|a| (a, disk))
        })
    })
    .await
    .ok()
    .flatten()
}

/// The bytes of `EFI/BOOT/BOOTX64.EFI` on the vfat at `device`, when it is a UKI.
fn read_uki(device: &str) -> Option<Vec<u8>> {
    use crate::kernel::mount;
    let target = Path::new(MEDIA_MOUNT);
    mount::mount_spec(&mount::MountSpec {
        fstype: "vfat",
        source: device,
        target,
        flags: rustix::mount::MountFlags::RDONLY | rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
        data: None,
    })
    .ok()?;
    let bytes = std::fs::read(target.join(crate::boot::ESP_LOADER)).ok();
    let _ = mount::unmount(target);
    let bytes = bytes?;
    let sections = crate::boot::uki::sections(&bytes).ok()?;
    let is_uki = [".linux", ".initrd"].iter().all(|s| sections.iter().any(|(n, _)| n == s));
    is_uki.then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(dev: &str, serial: &str) -> Disk {
        Disk { dev_path: dev.into(), serial: serial.into(), transport: "virtio".into(), ..Disk::default() }
    }

    #[test]
    fn the_selector_must_pick_one_disk_and_says_why_for_each() {
        let disks = vec![
            ("vda".to_string(), disk("/dev/vda", "talosbox-esp"), false),
            ("vdb".to_string(), disk("/dev/vdb", "talosbox-system"), false),
            ("vdc".to_string(), Disk { readonly: true, ..disk("/dev/vdc", "talosbox-system") }, false),
        ];
        let (got, lines) = choose("disk.serial == 'talosbox-system'", &disks, &[]).unwrap();
        assert_eq!(got.dev_path, "/dev/vdb");
        assert_eq!(lines[0].reason, "selector does not match");
        assert_eq!(lines[2].reason, "selector matches, but the disk is read-only");

        let (why, lines) = choose("disk.transport == 'virtio' && !disk.readonly", &disks, &[]).unwrap_err();
        assert!(why.contains("/dev/vda, /dev/vdb"), "{why}");
        assert_eq!(lines.iter().filter(|l| l.matched).count(), 2);

        let media = vec![("/dev/vda".to_string(), "the node booted from it".to_string())];
        let (got, lines) = choose("disk.transport == 'virtio' && !disk.readonly", &disks, &media).unwrap();
        assert_eq!(got.dev_path, "/dev/vdb");
        assert_eq!(lines[0].reason, "selector matches, but the node booted from it");

        let (why, _) = choose("disk.size > 1000u * TiB", &disks, &[]).unwrap_err();
        assert!(why.starts_with("no disk matches"), "{why}");
        let (why, _) = choose("disk.size >", &disks, &[]).unwrap_err();
        assert!(why.contains("the selector"), "{why}");
    }
}

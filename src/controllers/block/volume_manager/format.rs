//! Formatting volumes (Talos's `internal/volumes/format.go`): the prepared device (the
//! partition, or its opened dm-crypt mapping) gets the filesystem its config asks for, made by
//! the mkfs programs the rootfs carries, or a swap header written here. What is done is
//! [`plan`]'s: a filesystem is made only where the probe found nothing (or an old swap area,
//! or the wanted filesystem left unfinished by its mkfs); anything else is kept or refused,
//! never formatted over.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::step::advance;
use super::{Found, StepError, VolumeManagerController, probe_name};
use crate::block::format as mkfs;
use crate::block::probe;
use crate::cosi::Context;
use crate::resources::block::{FilesystemType, VolumeConfig, VolumePhase, VolumeStatus};
use crate::services::Reaper;

/// What a volume the node does not format (an existing or raw one) holds, from the probe's
/// name (Talos's `Format` with no filesystem wanted): one to be mounted must hold a
/// filesystem, and not a LUKS container the config says nothing of.
fn found_filesystem(found: &str, mounted: bool, device: &str) -> Result<FilesystemType, String> {
    match found {
        "" if mounted => Err(format!("filesystem not found on {device}")),
        "luks" if mounted => Err("volume is encrypted, but no encryption config provided".to_string()),
        other => Ok(FilesystemType::from_probe_name(other)),
    }
}

/// What to do about a volume's filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FormatDecision {
    /// The wanted filesystem is there (or none is wanted): ready as it is.
    Keep,
    /// Nothing is on the volume: make the filesystem.
    Make,
    /// The wanted filesystem's formatter stopped before it finished (a power cut during
    /// mkfs): nothing can be on it, so it is made again, over the half-made one.
    Remake,
    /// Something else is on it: refuse, keeping the data.
    Refuse(String),
}

/// Decides from what the probe found (`""`: nothing recognized) on the volume, and whether
/// the probe saw it unfinished. A swap area is made afresh every time, as Talos does: what it
/// held is gone with the boot that wrote it.
fn format_decision(wanted: FilesystemType, found: &str, unfinished: bool) -> FormatDecision {
    match (wanted, found) {
        (FilesystemType::None, _) => FormatDecision::Keep,
        (FilesystemType::Swap, "swap") => FormatDecision::Make,
        (w, f) if f == w.probe_name() && unfinished => FormatDecision::Remake,
        (w, f) if f == w.probe_name() => FormatDecision::Keep,
        (_, "") => FormatDecision::Make,
        (w, f) => FormatDecision::Refuse(format!(
            "the volume holds {f}, not {}; it is left as it is (wipe it to have it formatted)",
            w.fstype()
        )),
    }
}

/// What is done with a prepared volume's device.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Plan {
    /// Ready as it is; with the filesystem it holds when the node does not format it.
    Ready(Option<FilesystemType>),
    /// Write a swap header.
    Swap,
    /// Run mkfs; `over_unfinished`: over the wanted filesystem its mkfs left unfinished.
    Mkfs { over_unfinished: bool },
}

/// What to do with a device holding `found` when the config wants `wanted` (`mounted`: the
/// volume is mounted somewhere, so one the node does not format must hold a filesystem).
fn plan(wanted: FilesystemType, found: &Found, mounted: bool, device: &str) -> Result<Plan, StepError> {
    if wanted == FilesystemType::None {
        // Raw and existing volumes: never formatted; an existing one is mounted with what it
        // holds.
        let filesystem = found_filesystem(&found.name, mounted, device).map_err(StepError::failed)?;
        return Ok(Plan::Ready(Some(filesystem)));
    }
    match format_decision(wanted, &found.name, found.unfinished) {
        FormatDecision::Keep => Ok(Plan::Ready(None)),
        FormatDecision::Refuse(why) => Err(StepError::failed(why)),
        FormatDecision::Make if wanted == FilesystemType::Swap => Ok(Plan::Swap),
        FormatDecision::Make => Ok(Plan::Mkfs { over_unfinished: false }),
        FormatDecision::Remake => Ok(Plan::Mkfs { over_unfinished: true }),
    }
}

impl VolumeManagerController {
    pub(super) async fn format(
        &mut self,
        ctx: &Context,
        id: &str,
        config: &VolumeConfig,
        status: &VolumeStatus,
    ) -> Result<VolumeStatus, StepError> {
        let device = PathBuf::from(&status.mount_location);
        let wanted = config.provisioning.filesystem_spec.kind;
        if !device.exists() {
            return Err(StepError::again(format!("waiting for {} to appear", device.display())));
        }
        let probe_at = device.clone();
        let found = ctx
            .blocking("probing a volume", move || probe_name(&probe_at))
            .await?
            .map_err(|e| StepError::failed(format!("probing {}: {e}", device.display())))?;
        let mounted = !config.mount.target_path.is_empty();
        // The label Talos gives: the system volumes' own, none for the documents' volumes.
        let label = config.provisioning.filesystem_spec.label.clone();
        let made = match plan(wanted, &found, mounted, &status.mount_location)? {
            Plan::Ready(None) => Made::Nothing(None),
            Plan::Ready(Some(filesystem)) => Made::Nothing(Some(filesystem)),
            Plan::Swap => {
                let (at, size, name) = (device.clone(), status.size, label.clone());
                ctx.blocking("writing a swap header", move || write_swap(&at, size, &name))
                    .await?
                    .map_err(|e| StepError::failed(format!("making swap on {}: {e}", device.display())))?;
                crate::kernel::console::line(&format!("volume {id}: made a swap area on {}", status.mount_location));
                self.refresh += 1;
                Made::Filesystem
            }
            Plan::Mkfs { over_unfinished } => {
                // The size of what is formatted: an opened LUKS2 volume is its partition less
                // the header (16 MiB), which can cross mkfs.xfs's 300 MB floor.
                let size = device_size(&device).unwrap_or(status.size);
                let mut cmd = mkfs::mkfs(&self.root, wanted, &status.mount_location, &label, size)
                    .map_err(|e| StepError::failed(e.to_string()))?;
                if over_unfinished {
                    crate::kernel::console::line(&format!(
                        "volume {id}: the {} on {} was left unfinished by its mkfs; it is made again",
                        wanted.fstype(),
                        status.mount_location
                    ));
                    cmd = cmd.over_unfinished(wanted);
                }
                crate::kernel::console::line(&format!(
                    "volume {id}: formatting {} as {}",
                    status.mount_location,
                    wanted.fstype()
                ));
                run(self.reaper.clone(), &cmd).await.map_err(StepError::failed)?;
                self.refresh += 1;
                Made::Filesystem
            }
        };
        // The uuid discovery will find at the next boot, now: what the located device holds
        // (the filesystem, or the LUKS container around it). A probe that fails is retried;
        // the retry finds the filesystem made and keeps it.
        let probed = if made.needs_probe(status) {
            let at = PathBuf::from(&status.location);
            let found = ctx.blocking("probing a formatted volume", move || probe::probe_path(&at, 512)).await?;
            let found =
                found.map_err(|e| StepError::again(format!("probing {} after formatting: {e}", status.location)))?;
            found.and_then(|f| f.uuid)
        } else {
            None
        };
        Ok(ready(status, &made, probed))
    }
}

/// What the format step did to a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Made {
    /// Nothing: it is kept as it is; with the filesystem found when the node does not format it.
    Nothing(Option<FilesystemType>),
    /// A filesystem or swap area, fresh.
    Filesystem,
}

impl Made {
    /// Whether the uuid must be read again: a fresh filesystem has a new one, and a kept one
    /// whose status has none (its first probe failed after the format) has it read now.
    fn needs_probe(&self, status: &VolumeStatus) -> bool {
        *self == Made::Filesystem || status.uuid.is_empty()
    }
}

/// The status a volume is ready with: a fresh filesystem's uuid is `probed`, a kept one keeps
/// the uuid it was located with unless it had none.
fn ready(status: &VolumeStatus, made: &Made, probed: Option<String>) -> VolumeStatus {
    let uuid = match made {
        Made::Filesystem => probed.unwrap_or_default(),
        Made::Nothing(_) if status.uuid.is_empty() => probed.unwrap_or_default(),
        Made::Nothing(_) => status.uuid.clone(),
    };
    let ready = VolumeStatus { uuid, ..advance(status, VolumePhase::Ready) };
    match made {
        Made::Nothing(Some(filesystem)) => VolumeStatus { filesystem: *filesystem, ..ready },
        _ => ready,
    }
}

/// Runs a formatter to its end; its stderr, if it fails, is the error.
async fn run(reaper: Arc<Reaper>, cmd: &mkfs::MkfsCommand) -> Result<(), String> {
    reaper.run_to_end(&cmd.program, &cmd.args, &cmd.env).await
}

/// The size of a block device (or file) in bytes.
fn device_size(device: &Path) -> Option<u64> {
    use std::io::{Seek, SeekFrom};
    std::fs::File::open(device).and_then(|mut f| f.seek(SeekFrom::End(0))).ok()
}

/// Writes a swap header over the start of `device` (of `size` bytes) with a fresh random UUID.
fn write_swap(device: &Path, size: u64, label: &str) -> Result<(), String> {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let mut uuid = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut uuid))
        .map_err(|e| format!("reading /dev/urandom: {e}"))?;
    // An RFC 4122 version 4 UUID, as mkswap and Talos make.
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    let page = crate::block::swap::header(rustix::param::page_size(), size, uuid, label).map_err(|e| e.to_string())?;
    let file = std::fs::OpenOptions::new().write(true).open(device).map_err(|e| e.to_string())?;
    file.write_all_at(&page, 0).and_then(|()| file.sync_all()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use FilesystemType as F;

    fn located(uuid: &str) -> VolumeStatus {
        VolumeStatus {
            phase: VolumePhase::Located,
            uuid: uuid.into(),
            location: "/dev/vdb1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_formatted_volume_is_ready_with_its_new_uuid() {
        let fresh = Some("5b1e6a4c-0000-4000-8000-000000000001".to_string());
        // (what the step did, the uuid located, the uuid probed after it, the uuid ready)
        let cases = [
            (Made::Filesystem, "", fresh.clone(), fresh.as_deref().unwrap_or_default()),
            (Made::Filesystem, "0ld5-wap0", fresh.clone(), fresh.as_deref().unwrap_or_default()),
            (Made::Filesystem, "0ld5-wap0", None, ""),
            (Made::Nothing(None), "kept-uuid", fresh.clone(), "kept-uuid"),
            (Made::Nothing(None), "", fresh.clone(), fresh.as_deref().unwrap_or_default()),
            (Made::Nothing(Some(F::Xfs)), "kept-uuid", None, "kept-uuid"),
        ];
        for (made, was, probed, want) in cases {
            let got = ready(&located(was), &made, probed.clone());
            assert_eq!(
                (got.phase, got.uuid.as_str()),
                (VolumePhase::Ready, want),
                "{made:?} located {was:?}, probed {probed:?}"
            );
        }
        assert_eq!(ready(&located("u"), &Made::Nothing(Some(F::Xfs)), None).filesystem, F::Xfs);
        assert!(Made::Filesystem.needs_probe(&located("old")));
        assert!(Made::Nothing(None).needs_probe(&located("")));
        assert!(!Made::Nothing(None).needs_probe(&located("kept")));
    }

    /// What blkid says `image`'s UUID is.
    fn blkid_uuid(image: &Path) -> String {
        let out =
            std::process::Command::new("blkid").args(["-p", "-o", "value", "-s", "UUID"]).arg(image).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn the_uuid_probed_after_a_format_is_blkids() {
        let dir = tempfile::tempdir().unwrap();
        for fs in [F::Xfs, F::Ext4, F::Swap] {
            let image = dir.path().join(format!("{}.img", fs.fstype()));
            let size = 64 << 20;
            std::fs::File::create(&image).unwrap().set_len(size).unwrap();
            if fs == F::Swap {
                write_swap(&image, size, "s-swap").unwrap();
            } else {
                let cmd = mkfs::mkfs("", fs, &image.display().to_string(), "", size).unwrap();
                let out = std::process::Command::new(&cmd.program)
                    .args(&cmd.args)
                    .envs(cmd.env.iter().map(|(k, v)| (k, v)))
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
            }
            let probed = probe::probe_path(&image, 512).unwrap().and_then(|f| f.uuid);
            let status = ready(&located(""), &Made::Filesystem, probed);
            let want = blkid_uuid(&image);
            assert!(!want.is_empty(), "blkid found no UUID on the {fs:?} image");
            assert_eq!(status.uuid, want, "{fs:?}");
        }
    }

    fn found(name: &str, unfinished: bool) -> Found {
        Found { name: name.into(), unfinished }
    }

    #[test]
    fn a_prepared_volume_is_kept_made_or_refused() {
        let cases = [
            ("an existing xfs is mounted as xfs", F::None, found("xfs", false), true, Ok(Plan::Ready(Some(F::Xfs)))),
            ("a raw volume holds nothing", F::None, found("", false), false, Ok(Plan::Ready(Some(F::None)))),
            (
                "an existing volume to mount holds nothing",
                F::None,
                found("", false),
                true,
                Err(StepError::failed("filesystem not found on /dev/vdb1")),
            ),
            (
                "EPHEMERAL made on a blank volume",
                F::Xfs,
                found("", false),
                true,
                Ok(Plan::Mkfs { over_unfinished: false }),
            ),
            ("EPHEMERAL found again", F::Xfs, found("xfs", false), true, Ok(Plan::Ready(None))),
            (
                "an unfinished mkfs is run again",
                F::Xfs,
                found("xfs", true),
                true,
                Ok(Plan::Mkfs { over_unfinished: true }),
            ),
            ("swap on a blank volume", F::Swap, found("", false), false, Ok(Plan::Swap)),
            ("an old swap area is made again", F::Swap, found("swap", false), false, Ok(Plan::Swap)),
            (
                "another filesystem is never formatted over",
                F::Xfs,
                found("ext4", false),
                true,
                Err(StepError::failed(
                    "the volume holds ext4, not xfs; it is left as it is (wipe it to have it formatted)",
                )),
            ),
        ];
        for (name, wanted, f, mounted, want) in cases {
            assert_eq!(plan(wanted, &f, mounted, "/dev/vdb1"), want, "{name}");
        }
    }

    #[test]
    fn an_unformatted_volume_is_what_the_probe_found() {
        use FilesystemType as F;
        let cases: [(&str, bool, Result<F, String>); 7] = [
            ("xfs", true, Ok(F::Xfs)),
            ("extfs", true, Ok(F::Ext4)),
            ("vfat", true, Ok(F::Vfat)),
            ("", false, Ok(F::None)),
            ("luks", false, Ok(F::None)),
            ("", true, Err("filesystem not found on /dev/vdb1".into())),
            ("luks", true, Err("volume is encrypted, but no encryption config provided".into())),
        ];
        for (found, mounted, want) in cases {
            assert_eq!(found_filesystem(found, mounted, "/dev/vdb1"), want, "{found:?} mounted={mounted}");
        }
    }

    #[test]
    fn a_filesystem_is_made_only_on_an_empty_volume() {
        use FilesystemType as F;
        let cases = [
            (F::Xfs, "", FormatDecision::Make),
            (F::Xfs, "xfs", FormatDecision::Keep),
            (F::Ext4, "extfs", FormatDecision::Keep),
            (F::None, "", FormatDecision::Keep),
            (F::None, "xfs", FormatDecision::Keep),
            (F::Swap, "", FormatDecision::Make),
            (F::Swap, "swap", FormatDecision::Make),
            (
                F::Swap,
                "xfs",
                FormatDecision::Refuse(
                    "the volume holds xfs, not swap; it is left as it is (wipe it to have it formatted)".into(),
                ),
            ),
            (
                F::Xfs,
                "ext4",
                FormatDecision::Refuse(
                    "the volume holds ext4, not xfs; it is left as it is (wipe it to have it formatted)".into(),
                ),
            ),
            (
                F::Xfs,
                "luks",
                FormatDecision::Refuse(
                    "the volume holds luks, not xfs; it is left as it is (wipe it to have it formatted)".into(),
                ),
            ),
        ];
        for (wanted, found, want) in cases {
            assert_eq!(format_decision(wanted, found, false), want, "{wanted:?} over {found:?}");
        }
        // Unfinished: the wanted filesystem half-made is made again; anything else unfinished
        // is still refused, and nothing wanted still keeps what is there.
        let unfinished = [
            (F::Xfs, "xfs", FormatDecision::Remake),
            (F::Ext4, "extfs", FormatDecision::Remake),
            (F::None, "xfs", FormatDecision::Keep),
        ];
        for (wanted, found, want) in unfinished {
            assert_eq!(format_decision(wanted, found, true), want, "{wanted:?} over an unfinished {found:?}");
        }
        assert!(matches!(format_decision(F::Ext4, "xfs", true), FormatDecision::Refuse(_)));
    }
}

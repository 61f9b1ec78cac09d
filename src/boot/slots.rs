//! The A/B slots on BOOT: each a directory (`/A`, `/B`) holding a version's kernel
//! (`vmlinuz`), initramfs, kernel command line (`cmdline`) and version (`version`). GRUB boots
//! one of them (see [`super::grub`]); the kernel command line says which (`talosbox.slot=`).
//!
//! What changes a boot is written so an interrupted write never leaves a slot GRUB boots half
//! written: a slot's files go first (synced), grub.cfg is replaced by rename, and only then
//! does the environment block name the slot. The slot booted now is never written.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::artifacts::Artifacts;
use super::grub;
use super::grubenv;

/// The kernel argument GRUB's entries carry: which slot booted.
pub const CMDLINE_KEY: &str = "talosbox.slot";
/// grub.cfg and grubenv, under BOOT.
pub const GRUB_DIR: &str = "grub";
/// How long GRUB shows its menu when the configuration does not say.
const DEFAULT_TIMEOUT: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum Slot {
    A,
    B,
}

impl Slot {
    pub const ALL: [Slot; 2] = [Slot::A, Slot::B];

    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    pub fn parse(s: &str) -> Option<Slot> {
        match s.trim() {
            "A" => Some(Slot::A),
            "B" => Some(Slot::B),
            _ => None,
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Slot::A => "A",
            Slot::B => "B",
        })
    }
}

/// The slot a kernel command line says booted; `None` for a boot that did not come from a
/// slot (a UKI, a direct kernel boot).
pub fn booted(cmdline: &str) -> Option<Slot> {
    cmdline
        .split_whitespace()
        .filter_map(|arg| arg.strip_prefix(CMDLINE_KEY).and_then(|v| v.strip_prefix('=')))
        .next_back()
        .and_then(Slot::parse)
}

#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: io::Error },
    #[error(transparent)]
    Env(#[from] grubenv::GrubEnvError),
    #[error("slot {0} is the one booted now; it is never written")]
    Booted(Slot),
    #[error("slot {0} holds no version to boot")]
    Empty(Slot),
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SlotError + 'a {
    move |source| SlotError::Io { what, path: path.to_path_buf(), source }
}

/// What a slot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    pub slot: Slot,
    pub version: String,
    pub cmdline: String,
    pub initramfs: String,
}

/// BOOT, mounted at `root`.
#[derive(Debug, Clone)]
pub struct Boot {
    root: PathBuf,
}

impl Boot {
    pub fn at(root: impl Into<PathBuf>) -> Boot {
        Boot { root: root.into() }
    }

    fn dir(&self, slot: Slot) -> PathBuf {
        self.root.join(slot.to_string())
    }

    pub fn grub_cfg(&self) -> PathBuf {
        self.root.join(GRUB_DIR).join("grub.cfg")
    }

    pub fn grubenv(&self) -> PathBuf {
        self.root.join(GRUB_DIR).join("grubenv")
    }

    /// What `slot` holds, when it holds a kernel and an initramfs.
    pub fn slot(&self, slot: Slot) -> Option<SlotInfo> {
        let dir = self.dir(slot);
        if !dir.join("vmlinuz").is_file() {
            return None;
        }
        let initramfs = super::initramfs::find_initramfs(&dir)?.file_name()?.to_string_lossy().into_owned();
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).map(|s| s.trim().to_string()).ok();
        Some(SlotInfo {
            slot,
            version: read("version").unwrap_or_else(|| "unknown".into()),
            cmdline: read("cmdline").unwrap_or_default(),
            initramfs,
        })
    }

    /// The slots that hold a version, A first.
    pub fn slots(&self) -> Vec<SlotInfo> {
        Slot::ALL.iter().filter_map(|s| self.slot(*s)).collect()
    }

    /// Writes `artifacts` into `slot` (never the one `booted`): what was there goes, the new
    /// files are synced. GRUB does not boot it until [`Boot::write_config`] and the
    /// environment say so.
    pub fn write_slot(&self, slot: Slot, booted: Option<Slot>, artifacts: &Artifacts) -> Result<(), SlotError> {
        if booted == Some(slot) {
            return Err(SlotError::Booted(slot));
        }
        let dir = self.dir(slot);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io_err("clearing", &dir))?;
        }
        std::fs::create_dir_all(&dir).map_err(io_err("making", &dir))?;
        let copy = |from: &Path, name: &str| -> Result<(), SlotError> {
            let to = dir.join(name);
            std::fs::copy(from, &to).map_err(io_err("writing", &to))?;
            Ok(())
        };
        copy(&artifacts.vmlinuz, "vmlinuz")?;
        copy(&artifacts.initramfs, &artifacts.initramfs_name())?;
        for (name, text) in [("cmdline", &artifacts.cmdline), ("version", &artifacts.version)] {
            let to = dir.join(name);
            std::fs::write(&to, format!("{}\n", text.trim())).map_err(io_err("writing", &to))?;
        }
        sync_dir_tree(&dir)?;
        Ok(())
    }

    /// Writes grub.cfg for the slots that hold a version (by rename: GRUB reads the old one or
    /// the new one, never half of one), keeping the menu timeout it had.
    pub fn write_config(&self) -> Result<(), SlotError> {
        let path = self.grub_cfg();
        let timeout = std::fs::read_to_string(&path)
            .ok()
            .and_then(|old| {
                old.lines().find_map(|l| l.trim().strip_prefix("set timeout=").and_then(|t| t.trim().parse().ok()))
            })
            .unwrap_or(DEFAULT_TIMEOUT);
        let entries: Vec<grub::Entry> = self
            .slots()
            .into_iter()
            .map(|s| grub::Entry { slot: s.slot, version: s.version, cmdline: s.cmdline, initramfs: s.initramfs })
            .collect();
        let dir = self.root.join(GRUB_DIR);
        std::fs::create_dir_all(&dir).map_err(io_err("making", &dir))?;
        let tmp = dir.join("grub.cfg.new");
        std::fs::write(&tmp, grub::config(timeout, &entries)).map_err(io_err("writing", &tmp))?;
        std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(io_err("syncing", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err("renaming", &path))?;
        std::fs::File::open(&dir).and_then(|f| f.sync_all()).map_err(io_err("syncing", &dir))
    }

    /// The environment block's variables.
    pub fn env(&self) -> Result<BTreeMap<String, String>, SlotError> {
        Ok(grubenv::read(&self.grubenv())?)
    }

    /// Creates the environment block with `default` as the slot booted by default.
    pub fn create_env(&self, default: Slot) -> Result<(), SlotError> {
        let vars = BTreeMap::from([("saved_entry".to_string(), default.to_string())]);
        Ok(grubenv::create(&self.grubenv(), &vars)?)
    }

    /// Boots `slot` once at the next boot; the default stays.
    pub fn boot_once(&self, slot: Slot) -> Result<(), SlotError> {
        self.slot(slot).ok_or(SlotError::Empty(slot))?;
        grubenv::update(&self.grubenv(), |v| {
            v.insert("next_entry".into(), slot.to_string());
        })?;
        Ok(())
    }

    /// Makes `slot` the default, and drops any one-shot boot.
    pub fn make_default(&self, slot: Slot) -> Result<(), SlotError> {
        self.slot(slot).ok_or(SlotError::Empty(slot))?;
        grubenv::update(&self.grubenv(), |v| {
            v.insert("saved_entry".into(), slot.to_string());
            v.remove("next_entry");
        })?;
        Ok(())
    }

    /// The slot GRUB boots by default.
    pub fn default_slot(&self) -> Option<Slot> {
        self.env()
            .ok()?
            .get("saved_entry")
            .and_then(|s| Slot::parse(s))
            .or_else(|| self.slots().first().map(|s| s.slot))
    }
}

/// fsync of every file under `dir` and of `dir` itself.
fn sync_dir_tree(dir: &Path) -> Result<(), SlotError> {
    for entry in std::fs::read_dir(dir).map_err(io_err("reading", dir))? {
        let path = entry.map_err(io_err("reading", dir))?.path();
        std::fs::File::open(&path).and_then(|f| f.sync_all()).map_err(io_err("syncing", &path))?;
    }
    std::fs::File::open(dir).and_then(|f| f.sync_all()).map_err(io_err("syncing", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_says_which_slot_booted() {
        assert_eq!(booted("console=ttyS0 talosbox.slot=B panic=10"), Some(Slot::B));
        assert_eq!(booted("talosbox.slot=A talosbox.slot=B"), Some(Slot::B), "the last one counts, as the kernel's");
        assert_eq!(booted("console=ttyS0 talos.platform=metal"), None);
        assert_eq!(booted("talosbox.slot=C"), None);
        assert_eq!(booted("talosbox.slotty=A"), None);
    }

    fn artifacts(dir: &Path, version: &str) -> Artifacts {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("vmlinuz"), format!("kernel {version}")).unwrap();
        // An lz4 legacy frame's magic: what tells the initramfs's name.
        std::fs::write(dir.join("initramfs.lz4"), [0x02, 0x21, 0x4c, 0x18, 1, 2, 3]).unwrap();
        Artifacts {
            dir: dir.to_path_buf(),
            vmlinuz: dir.join("vmlinuz"),
            initramfs: dir.join("initramfs.lz4"),
            cmdline: "console=ttyS0 panic=10".into(),
            version: version.into(),
        }
    }

    #[test]
    fn a_new_slot_boots_once_then_becomes_the_default() {
        let tmp = tempfile::tempdir().unwrap();
        let boot = Boot::at(tmp.path().join("boot"));
        let a = artifacts(&tmp.path().join("a"), "0.1.0");
        boot.write_slot(Slot::A, None, &a).unwrap();
        boot.write_config().unwrap();
        boot.create_env(Slot::A).unwrap();
        assert_eq!(boot.default_slot(), Some(Slot::A));
        let cfg = std::fs::read_to_string(boot.grub_cfg()).unwrap();
        assert!(cfg.contains("menuentry \"A - talosbox 0.1.0\" --id A") && !cfg.contains("--id B"), "{cfg}");

        let b = artifacts(&tmp.path().join("b"), "0.2.0");
        assert!(matches!(boot.write_slot(Slot::A, Some(Slot::A), &b), Err(SlotError::Booted(Slot::A))));
        assert!(matches!(boot.boot_once(Slot::B), Err(SlotError::Empty(Slot::B))));
        boot.write_slot(Slot::B, Some(Slot::A), &b).unwrap();
        boot.write_config().unwrap();
        boot.boot_once(Slot::B).unwrap();
        let env = boot.env().unwrap();
        assert_eq!((env["saved_entry"].as_str(), env["next_entry"].as_str()), ("A", "B"));
        let info = boot.slot(Slot::B).unwrap();
        assert_eq!((info.version.as_str(), info.initramfs.as_str()), ("0.2.0", "initramfs.lz4"));
        assert_eq!(std::fs::read(tmp.path().join("boot/B/vmlinuz")).unwrap(), b"kernel 0.2.0");
        let cfg = std::fs::read_to_string(boot.grub_cfg()).unwrap();
        assert!(cfg.contains("linux /B/vmlinuz console=ttyS0 panic=10 talosbox.slot=B"), "{cfg}");

        boot.make_default(Slot::B).unwrap();
        let env = boot.env().unwrap();
        assert_eq!(env.get("saved_entry").map(String::as_str), Some("B"));
        assert!(!env.contains_key("next_entry"));
    }
}

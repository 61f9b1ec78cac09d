//! Writing Talos's boot layout onto a disk: the GPT with EFI, BIOS, BOOT and META (STATE and
//! EPHEMERAL come after them from the volume manager), GRUB's BIOS code in the MBR and the
//! BIOS boot partition, the ESP as FAT32 holding GRUB's EFI application, and — once BOOT is
//! formatted and mounted by the caller — slot A, grub.cfg and the environment block on BOOT.
//!
//! A disk that already holds this layout (an earlier install: the four partitions where they
//! belong) keeps its table, its META and everything after the boot partitions, STATE and
//! EPHEMERAL included: only EFI, BIOS and BOOT are written again. A disk holding anything else
//! is refused, naming what is there, unless the caller wiped it first (`wipe: true`). The
//! caller holds the disk's lock; nothing here writes outside the boot partitions and the
//! table, and nothing is written before every check passed.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::artifacts::Artifacts;
use super::slots::{Boot, Slot, SlotError};
use super::{BIOS_LABEL, BOOT_LABEL, EFI_LABEL, META_LABEL, Sizes, grub};
use crate::block::fat_write::{self, FatWriteError, Tree};
use crate::block::gpt::{self, Guid, Placed, Table};

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: io::Error },
    #[error(transparent)]
    Gpt(#[from] gpt::GptError),
    #[error(transparent)]
    Grub(#[from] grub::GrubError),
    #[error("the ESP: {0}")]
    Esp(#[from] FatWriteError),
    #[error(transparent)]
    Slot(#[from] SlotError),
    #[error(
        "{disk} holds partitions where the boot partitions go ({found}); it is not installed over without `wipe: true`"
    )]
    Occupied { disk: String, found: String },
    #[error("{disk} is {size} bytes; the boot partitions alone need {need}")]
    TooSmall { disk: String, size: u64, need: u64 },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> InstallError + 'a {
    move |source| InstallError::Io { what, path: path.to_path_buf(), source }
}

/// GRUB's images, as the imager built them.
#[derive(Debug, Clone)]
pub struct GrubImages {
    pub efi: Vec<u8>,
    pub core: Vec<u8>,
    pub boot: Vec<u8>,
}

impl GrubImages {
    /// Reads them from `dir` ([`super::GRUB_IMAGES_DIR`] on a node).
    pub fn read(dir: &Path) -> Result<GrubImages, InstallError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(io_err("reading GRUB's image", &path))
        };
        Ok(GrubImages {
            efi: read(super::GRUB_EFI_IMAGE)?,
            core: read(super::GRUB_CORE_IMAGE)?,
            boot: read(super::GRUB_BOOT_IMAGE)?,
        })
    }
}

/// The table an install writes, and whether it is the disk's own (an earlier install, kept).
#[derive(Debug, Clone)]
pub struct Planned {
    pub table: Table,
    pub kept: bool,
}

impl Planned {
    fn part(&self, label: &str) -> Option<Placed> {
        self.table.partitions().into_iter().find(|p| p.partition.name == label)
    }

    pub fn boot(&self) -> Option<Placed> {
        self.part(BOOT_LABEL)
    }

    pub fn meta(&self) -> Option<Placed> {
        self.part(META_LABEL)
    }
}

/// The boot partitions' places on a disk of `size` bytes, given what the disk holds now
/// (`existing`, after any wipe): a new table, or the existing one when it already has the
/// four boot partitions exactly where they go.
pub fn plan(
    disk: &str,
    existing: Option<&Table>,
    size: u64,
    sector: u64,
    sizes: &Sizes,
    seed: &str,
) -> Result<Planned, InstallError> {
    let specs = super::partition_specs(sizes, |label| Guid::derived(format!("{seed} partition {label}").as_bytes()))?;
    let layout = gpt::plan(Guid::derived(format!("{seed} disk").as_bytes()), &specs)?;
    let want = layout.partitions();
    if let Some(existing) = existing {
        let have = existing.partitions();
        let same = want.iter().all(|w| {
            have.iter().any(|h| {
                h.number == w.number
                    && h.partition.name == w.partition.name
                    && h.offset == w.offset
                    && h.size == w.size
                    && h.partition.type_guid == w.partition.type_guid
            })
        });
        if same {
            return Ok(Planned { table: existing.clone(), kept: true });
        }
        if !have.is_empty() {
            let found: Vec<String> = have.iter().map(|p| format!("{} {:?}", p.number, p.partition.name)).collect();
            return Err(InstallError::Occupied { disk: disk.to_string(), found: found.join(", ") });
        }
    }
    let need = layout.size_bytes();
    if size < need {
        return Err(InstallError::TooSmall { disk: disk.to_string(), size, need });
    }
    let guid = Guid::derived(format!("{seed} disk").as_bytes());
    let mut table =
        if sector == 512 { Table::new(guid, size)? } else { Table::new_with_sector_size(guid, size, sector)? };
    for p in &want {
        let mut partition = p.partition.clone();
        // The plan counts 512-byte sectors; a disk of another sector size takes the same bytes.
        partition.first_lba = p.offset / sector;
        partition.last_lba = (p.offset + p.size) / sector - 1;
        table.set_partition(p.number, partition)?;
    }
    Ok(Planned { table, kept: false })
}

/// A byte range of a file, seen as a device of its own.
struct Window<'a> {
    file: &'a File,
    start: u64,
    len: u64,
    pos: u64,
}

impl Write for Window<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.len.saturating_sub(self.pos);
        if room == 0 && !buf.is_empty() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "past the end of the partition"));
        }
        let n = buf.len().min(room as usize);
        self.file.write_all_at(&buf[..n], self.start + self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for Window<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let next = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = next.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek outside the partition"))?;
        Ok(self.pos)
    }
}

/// Writes the table (when new), GRUB's BIOS code, and the ESP to `dev` (the disk `path`),
/// then syncs. A new table also gets a zeroed META. BOOT is left for the caller to format.
pub fn write_boot_area(
    dev: &File,
    path: &Path,
    planned: &Planned,
    images: &GrubImages,
    esp_volume_id: u32,
) -> Result<(), InstallError> {
    let part = |label: &str| {
        planned.part(label).ok_or_else(|| InstallError::Occupied {
            disk: path.display().to_string(),
            found: format!("no {label} partition in the table"),
        })
    };
    let (efi, bios) = (part(EFI_LABEL)?, part(BIOS_LABEL)?);
    // Everything checked before anything is written: GRUB's code must fit its places.
    let mut core = images.core.clone();
    let core_lba = bios.offset / 512;
    grub::patch_core(&mut core, core_lba, bios.size)?;
    if !planned.kept {
        planned.table.write(dev)?;
    }
    let mut mbr = [0u8; 512];
    dev.read_exact_at(&mut mbr, 0).map_err(io_err("reading the MBR of", path))?;
    grub::patch_mbr(&mut mbr, &images.boot, core_lba)?;
    dev.write_all_at(&mbr, 0).map_err(io_err("writing the MBR of", path))?;
    dev.write_all_at(&vec![0u8; bios.size as usize], bios.offset).map_err(io_err("clearing BIOS on", path))?;
    dev.write_all_at(&core, bios.offset).map_err(io_err("writing GRUB's core image to", path))?;
    let mut window = Window { file: dev, start: efi.offset, len: efi.size, pos: 0 };
    fat_write::format(
        &mut window,
        efi.size,
        EFI_LABEL,
        esp_volume_id,
        Tree::new().file(super::ESP_LOADER, images.efi.clone()),
    )?;
    if !planned.kept
        && let Some(meta) = planned.meta()
    {
        dev.write_all_at(&vec![0u8; meta.size as usize], meta.offset).map_err(io_err("clearing META on", path))?;
    }
    dev.sync_all().map_err(io_err("syncing", path))
}

/// Fills a freshly formatted BOOT, mounted at `root`: `artifacts` in slot A, grub.cfg, and an
/// environment block booting A.
pub fn populate_boot(root: &Path, artifacts: &Artifacts) -> Result<(), InstallError> {
    let boot = Boot::at(root);
    boot.write_slot(Slot::A, None, artifacts)?;
    boot.write_config()?;
    boot.create_env(Slot::A)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_blank_disk_gets_new_partitions_and_an_install_is_kept() {
        let sizes = Sizes::default();
        let new = plan("/dev/vdb", None, 6 << 30, 512, &sizes, "seed").unwrap();
        assert!(!new.kept);
        let names: Vec<String> = new.table.partitions().iter().map(|p| p.partition.name.clone()).collect();
        assert_eq!(names, ["EFI", "BIOS", "BOOT", "META"]);
        assert_eq!(new.boot().unwrap().size, 1000 * MIB);
        assert_eq!(new.table.partitions()[0].offset, MIB, "aligned to 1 MiB");

        // An earlier install, with STATE after it: kept as it is.
        let mut installed = new.table.clone();
        let linux = Guid::parse(super::super::LINUX_DATA_TYPE).unwrap();
        installed.add_partition("STATE", linux, Guid::derived(b"s"), 100 * MIB, 100 * MIB, false).unwrap();
        let again = plan("/dev/vdb", Some(&installed), 6 << 30, 512, &sizes, "other seed").unwrap();
        assert!(again.kept);
        assert_eq!(again.table.partitions().len(), 5);

        // Anything else is refused by name.
        let mut foreign = Table::new(Guid::derived(b"f"), 6 << 30).unwrap();
        foreign.add_partition("data", linux, Guid::derived(b"d"), 500 * MIB, 500 * MIB, false).unwrap();
        let err = plan("/dev/vdb", Some(&foreign), 6 << 30, 512, &sizes, "seed").unwrap_err();
        assert!(err.to_string().contains("1 \"data\"") && err.to_string().contains("wipe: true"), "{err}");
        assert!(matches!(plan("/dev/vdb", None, 512 * MIB, 512, &sizes, "s"), Err(InstallError::TooSmall { .. })));
    }

    #[test]
    fn a_window_stays_inside_its_partition() {
        let tmp = tempfile::tempfile().unwrap();
        tmp.set_len(4096).unwrap();
        let mut w = Window { file: &tmp, start: 1024, len: 1024, pos: 0 };
        w.write_all(&[1u8; 1024]).unwrap();
        assert!(w.write_all(&[2u8]).is_err());
        let mut all = vec![0u8; 4096];
        tmp.read_exact_at(&mut all, 0).unwrap();
        assert!(all[..1024].iter().all(|b| *b == 0) && all[1024..2048].iter().all(|b| *b == 1));
        assert!(all[2048..].iter().all(|b| *b == 0));
    }
}

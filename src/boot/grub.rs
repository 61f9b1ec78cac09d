//! GRUB on a boot disk: its configuration text (one menu entry per A/B slot, the default and
//! a one-shot next boot taken from the environment block, see [`super::grubenv`]), and its BIOS
//! boot code put in place without grub-install (boot.img into the MBR, core.img into the BIOS
//! boot partition, with the sector pointers patched).
//!
//! Rendering and patching are pure; `grub-mkimage` builds the images (at image build time).
//! It must never write outside the MBR's code area and the BIOS boot partition.

use super::slots::Slot;

/// Modules built into both GRUB images (nothing is loaded from disk later). `loadenv` reads
/// and writes the environment block that says which slot boots.
pub const COMMON_MODULES: &[&str] = &[
    "part_gpt",
    "xfs",
    "ext2",
    "fat",
    "normal",
    "linux",
    "search",
    "search_label",
    "configfile",
    "echo",
    "serial",
    "terminal",
    "test",
    "gzio",
    "xzio",
    "loadenv",
];
pub const PC_MODULES: &[&str] = &["biosdisk"];
pub const EFI_MODULES: &[&str] = &["efi_gop", "all_video"];

/// Embedded in the GRUB images: find the BOOT filesystem and read its grub.cfg.
pub fn early_config(boot_label: &str) -> String {
    format!(
        "search --no-floppy --label {boot_label} --set=root\n\
         set prefix=($root)/grub\n\
         configfile ($root)/grub/grub.cfg\n"
    )
}

/// One slot's menu entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub slot: Slot,
    /// The version the slot holds, shown in the menu.
    pub version: String,
    /// The kernel command line; the slot's own `talosbox.slot=` is appended.
    pub cmdline: String,
    /// The initramfs's file name in the slot's directory.
    pub initramfs: String,
}

/// The grub.cfg on BOOT: one entry per slot (`--id` the slot's name, files under `/<slot>/`).
/// The default is the environment block's `saved_entry` (else the first entry); a
/// `next_entry` there boots once and is cleared by GRUB itself before the kernel starts, so a
/// new slot that fails to come up is not booted again.
pub fn config(timeout: u32, entries: &[Entry]) -> String {
    let first = entries.first().map_or("A".to_string(), |e| e.slot.to_string());
    let mut s = format!(
        "set default={first}\n\
         set timeout={timeout}\n\
         if [ -s $prefix/grubenv ]; then\n\
         \x20 load_env\n\
         fi\n\
         if [ -n \"${{saved_entry}}\" ]; then\n\
         \x20 set default=\"${{saved_entry}}\"\n\
         fi\n\
         if [ -n \"${{next_entry}}\" ]; then\n\
         \x20 set default=\"${{next_entry}}\"\n\
         \x20 set next_entry=\n\
         \x20 save_env next_entry\n\
         fi\n\
         if [ \"${{grub_platform}}\" = \"pc\" ]; then\n\
         \x20 serial --unit=0 --speed=115200\n\
         \x20 terminal_input console serial\n\
         \x20 terminal_output console serial\n\
         fi\n"
    );
    for e in entries {
        let slot = e.slot;
        s.push_str(&format!(
            "menuentry \"{slot} - talosbox {}\" --id {slot} {{\n\
             \x20 set gfxpayload=text\n\
             \x20 linux /{slot}/vmlinuz {} {}={slot}\n\
             \x20 initrd /{slot}/{}\n\
             }}\n",
            e.version,
            e.cmdline.trim(),
            super::slots::CMDLINE_KEY,
            e.initramfs
        ));
    }
    s
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrubError {
    #[error("boot.img is {0} bytes, expected 512")]
    BootImg(usize),
    #[error("core.img is {size} bytes; the BIOS boot partition holds {room}")]
    CoreTooBig { size: usize, room: u64 },
    #[error("core.img is {0} bytes, shorter than its first sector")]
    CoreTooSmall(usize),
}

// Offsets in boot.img and in core.img's first sector (diskboot.img), from GRUB's pc boot
// layout: the BPB GRUB leaves alone, the core.img sector pointer, the floppy check, and the
// start of the MBR's disk signature/partition table.
const BPB_START: usize = 0x03;
const BPB_END: usize = 0x5a;
const KERNEL_SECTOR: usize = 0x5c;
const DRIVE_CHECK: usize = 0x66;
const TABLE_START: usize = 0x1b8;
const BLOCKLIST: usize = 0x1f4;

/// Writes boot.img's code over `mbr` (keeping the BPB, disk signature and partition table)
/// pointing at core.img at `core_lba`.
pub fn patch_mbr(mbr: &mut [u8; 512], boot_img: &[u8], core_lba: u64) -> Result<(), GrubError> {
    if boot_img.len() != 512 {
        return Err(GrubError::BootImg(boot_img.len()));
    }
    mbr[..BPB_START].copy_from_slice(&boot_img[..BPB_START]);
    mbr[BPB_END..TABLE_START].copy_from_slice(&boot_img[BPB_END..TABLE_START]);
    mbr[KERNEL_SECTOR..KERNEL_SECTOR + 8].copy_from_slice(&core_lba.to_le_bytes());
    // Booting from a hard disk: skip boot.img's floppy probe (two NOPs over its jump).
    mbr[DRIVE_CHECK..DRIVE_CHECK + 2].copy_from_slice(&[0x90, 0x90]);
    Ok(())
}

/// Patches core.img's first blocklist so diskboot loads the rest of it from `core_lba + 1`.
pub fn patch_core(core: &mut [u8], core_lba: u64, room_bytes: u64) -> Result<(), GrubError> {
    if core.len() < 512 {
        return Err(GrubError::CoreTooSmall(core.len()));
    }
    if core.len() as u64 > room_bytes {
        return Err(GrubError::CoreTooBig { size: core.len(), room: room_bytes });
    }
    let sectors = core.len().div_ceil(512) as u16;
    core[BLOCKLIST..BLOCKLIST + 8].copy_from_slice(&(core_lba + 1).to_le_bytes());
    core[BLOCKLIST + 8..BLOCKLIST + 10].copy_from_slice(&(sectors - 1).to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mbr_patch_keeps_table_and_bpb() {
        let mut mbr = [0xaau8; 512];
        let boot: Vec<u8> = (0..512).map(|i| i as u8).collect();
        patch_mbr(&mut mbr, &boot, 206848).unwrap();
        assert_eq!(&mbr[..3], &boot[..3]);
        assert!(mbr[BPB_START..BPB_END].iter().all(|b| *b == 0xaa));
        assert!(mbr[TABLE_START..].iter().all(|b| *b == 0xaa));
        assert_eq!(u64::from_le_bytes(mbr[0x5c..0x64].try_into().unwrap()), 206848);
        assert_eq!(&mbr[0x66..0x68], &[0x90, 0x90]);
        assert_eq!(mbr[0x64], boot[0x64]);
        assert_eq!(patch_mbr(&mut mbr, &[0; 10], 1), Err(GrubError::BootImg(10)));
    }

    #[test]
    fn core_blocklist_table() {
        // (core size, lba, expected start, expected length)
        for (size, lba, start, len) in [(1024usize, 2048u64, 2049u64, 1u16), (30_000, 206848, 206849, 58)] {
            let mut core = vec![0u8; size];
            patch_core(&mut core, lba, 1 << 20).unwrap();
            assert_eq!(u64::from_le_bytes(core[0x1f4..0x1fc].try_into().unwrap()), start);
            assert_eq!(u16::from_le_bytes(core[0x1fc..0x1fe].try_into().unwrap()), len);
        }
        let mut big = vec![0u8; 2048];
        assert_eq!(patch_core(&mut big, 0, 1024), Err(GrubError::CoreTooBig { size: 2048, room: 1024 }));
    }

    #[test]
    fn config_golden() {
        let entry = |slot, version: &str| Entry {
            slot,
            version: version.into(),
            cmdline: "console=ttyS0 panic=10".into(),
            initramfs: "initramfs.lz4".into(),
        };
        let cfg = config(1, &[entry(Slot::A, "0.1.0"), entry(Slot::B, "0.2.0")]);
        let want = "set default=A
set timeout=1
if [ -s $prefix/grubenv ]; then
  load_env
fi
if [ -n \"${saved_entry}\" ]; then
  set default=\"${saved_entry}\"
fi
if [ -n \"${next_entry}\" ]; then
  set default=\"${next_entry}\"
  set next_entry=
  save_env next_entry
fi
if [ \"${grub_platform}\" = \"pc\" ]; then
  serial --unit=0 --speed=115200
  terminal_input console serial
  terminal_output console serial
fi
menuentry \"A - talosbox 0.1.0\" --id A {
  set gfxpayload=text
  linux /A/vmlinuz console=ttyS0 panic=10 talosbox.slot=A
  initrd /A/initramfs.lz4
}
menuentry \"B - talosbox 0.2.0\" --id B {
  set gfxpayload=text
  linux /B/vmlinuz console=ttyS0 panic=10 talosbox.slot=B
  initrd /B/initramfs.lz4
}
";
        assert_eq!(cfg, want);
        assert!(config(1, &[entry(Slot::B, "0.2.0")]).starts_with("set default=B\n"));
    }
}

//! The GPT code against sgdisk, on regular files (no root needed): tables written here pass
//! `sgdisk -v` and read back through `sgdisk -p`/`-i` as written; tables sgdisk made read here
//! as sgdisk reports them and encode back to sgdisk's bytes; an image enlarged with truncate
//! reads, relocates its backup and grows a partition; a damaged primary falls back to the backup.
//! sgdisk comes from gdisk (in tests/run's package list).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use talosbox::block::gpt::{self, GptError, Guid, Partition, Source, Table};

const MIB: u64 = 1 << 20;
const LINUX: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
const EFI: &str = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";

/// A scratch file removed on drop.
struct Image(PathBuf);

impl Image {
    fn new(name: &str, size: u64) -> Self {
        let path = std::env::temp_dir().join(format!("talosbox-gpt-{name}-{}.img", std::process::id()));
        let f = File::create(&path).expect("creating the image");
        f.set_len(size).expect("sizing the image");
        Image(path)
    }

    fn open(&self) -> File {
        OpenOptions::new().read(true).write(true).open(&self.0).expect("opening the image")
    }

    fn size(&self) -> u64 {
        std::fs::metadata(&self.0).expect("stat the image").len()
    }

    fn read(&self) -> Table {
        Table::read(&self.open(), self.size()).expect("reading the GPT").expect("a GPT is there")
    }

    fn bytes(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.open().read_exact_at(&mut b, offset).expect("reading the image");
        b
    }

    fn poke(&self, offset: u64, bytes: &[u8]) {
        self.open().write_all_at(bytes, offset).expect("writing the image");
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn sgdisk(args: &[&str], image: &Path) -> String {
    let out = Command::new("sgdisk").args(args).arg(image).output().expect("running sgdisk (apt-get install gdisk)");
    assert!(
        out.status.success(),
        "sgdisk {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `sgdisk -v` output, which exits 0 even when it finds problems.
fn verify(image: &Image) -> String {
    sgdisk(&["-v"], &image.0)
}

/// sgdisk repairs a damaged copy in memory and then reports "No problems found", after a caution.
fn clean(v: &str) -> bool {
    v.contains("No problems found") && !v.contains("corrupt") && !v.contains("Caution")
}

fn assert_valid(image: &Image) {
    let v = verify(image);
    assert!(clean(&v), "sgdisk -v:\n{v}");
}

/// What `sgdisk -i N` says about a partition: (type GUID, unique GUID, first, last, attributes, name).
fn sgdisk_info(image: &Image, number: u32) -> (String, String, u64, u64, String, String) {
    let out = sgdisk(&["-i", &number.to_string()], &image.0);
    let field = |label: &str| -> String {
        out.lines()
            .find_map(|l| l.strip_prefix(label))
            .unwrap_or_else(|| panic!("sgdisk -i {number} lacks {label:?}:\n{out}"))
            .trim()
            .to_string()
    };
    let type_guid = field("Partition GUID code:").split(' ').next().unwrap_or_default().to_string();
    let sector = |label: &str| field(label).split(' ').next().unwrap_or_default().parse::<u64>().unwrap();
    let name = field("Partition name:").trim_matches('\'').to_string();
    (
        type_guid,
        field("Partition unique GUID:"),
        sector("First sector:"),
        sector("Last sector:"),
        field("Attribute flags:"),
        name,
    )
}

fn assert_sgdisk_sees(image: &Image, table: &Table) {
    let print = sgdisk(&["-p"], &image.0);
    let disk_guid = table.disk_guid().to_string().to_uppercase();
    assert!(print.contains(&format!("Disk identifier (GUID): {disk_guid}")), "{print}");
    let usable =
        format!("First usable sector is {}, last usable sector is {}", table.first_usable(), table.last_usable());
    assert!(print.contains(&usable), "{usable}:\n{print}");
    let listed = print.lines().skip_while(|l| !l.starts_with("Number")).skip(1).count();
    assert_eq!(listed, table.partitions().len(), "{print}");
    for placed in table.partitions() {
        let p = &placed.partition;
        let want = (
            p.type_guid.to_string().to_uppercase(),
            p.guid.to_string().to_uppercase(),
            p.first_lba,
            p.last_lba,
            format!("{:016X}", p.attributes),
            p.name.clone(),
        );
        assert_eq!(sgdisk_info(image, placed.number), want, "partition {}", placed.number);
    }
}

fn guid(s: &str) -> Guid {
    Guid::parse(s).unwrap()
}

/// Talos's system disk as the volume manager leaves it: META and STATE at fixed sizes,
/// EPHEMERAL grown over the rest.
fn talos_table(size: u64) -> Table {
    let mut t = Table::new(Guid::derived(b"disk"), size).unwrap();
    let efi = Partition {
        name: "EFI".into(),
        type_guid: guid(EFI),
        guid: Guid::derived(b"EFI"),
        first_lba: 2048,
        last_lba: 4095,
        attributes: gpt::ATTR_LEGACY_BIOS_BOOTABLE,
    };
    t.set_partition(1, efi).unwrap();
    t.add_partition("META", guid(LINUX), Guid::derived(b"META"), MIB, MIB, false).unwrap();
    t.add_partition("STATE", guid(LINUX), Guid::derived(b"STATE"), 16 * MIB, 16 * MIB, false).unwrap();
    t.add_partition("EPHEMERAL", guid(LINUX), Guid::derived(b"EPHEMERAL"), 8 * MIB, 0, true).unwrap();
    t
}

#[test]
fn a_table_written_here_passes_sgdisk_and_reads_back() {
    let image = Image::new("ours", 64 * MIB);
    // Boot code in an MBR already there (GRUB's, on a system disk) must survive the write.
    let mut mbr = [0u8; 512];
    mbr[..440].fill(0xab);
    mbr[510..].copy_from_slice(&[0x55, 0xaa]);
    image.poke(0, &mbr);

    let t = talos_table(64 * MIB);
    let layout: Vec<_> =
        t.partitions().iter().map(|p| (p.number, p.partition.first_lba, p.partition.last_lba)).collect();
    assert_eq!(layout, [(1, 2048, 4095), (2, 4096, 6143), (3, 6144, 38911), (4, 38912, 129023)]);
    t.write(&image.open()).unwrap();

    assert_valid(&image);
    assert_sgdisk_sees(&image, &t);
    assert_eq!(image.bytes(0, 440), vec![0xab; 440], "boot code kept");
    assert_eq!(image.bytes(0x1c2, 1), [0xee]);

    let back = image.read();
    assert_eq!((back.source(), back.backup_misplaced(), back.needs_repair()), (Source::Primary, false, false));
    assert_eq!(back.partitions(), t.partitions());
    assert_eq!(back.encode(), t.encode());
}

#[test]
fn a_table_sgdisk_made_reads_as_sgdisk_reports_it() {
    let image = Image::new("theirs", 64 * MIB);
    sgdisk(
        &[
            "-o",
            "-U",
            "11111111-2222-4333-8444-555555555555",
            "-n",
            "1:2048:+10M",
            "-t",
            "1:8300",
            "-c",
            "1:STATE",
            "-u",
            "1:AAAAAAAA-2222-4333-8444-555555555555",
            // Entry 2 stays unused; 3 and 5 have odd sizes, a non-ASCII name and an attribute.
            "-n",
            "3:0:+5000K",
            "-t",
            "3:EF00",
            "-c",
            "3:ÉFI ütf",
            "-A",
            "3:set:2",
            "-n",
            "5:0:0",
            "-c",
            "5:u-data",
        ],
        &image.0,
    );
    let t = image.read();
    assert_eq!((t.source(), t.backup_misplaced(), t.needs_repair()), (Source::Primary, false, false));
    assert_eq!(t.disk_guid().to_string(), "11111111-2222-4333-8444-555555555555");
    assert_eq!(t.partition(2), None);
    assert_eq!(t.partitions().iter().map(|p| p.number).collect::<Vec<_>>(), [1, 3, 5]);
    assert_sgdisk_sees(&image, &t);
    let efi = t.partition(3).unwrap();
    assert_eq!((efi.partition.name.as_str(), efi.partition.attributes), ("ÉFI ütf", 4));
    assert_eq!((efi.offset, efi.size), (22528 * 512, 5000 * 1024));

    // Encoded again, the headers and entries are sgdisk's bytes exactly.
    for (offset, bytes) in t.encode().regions {
        assert_eq!(image.bytes(offset, bytes.len()), bytes, "region at byte {offset}");
    }
}

#[test]
fn an_enlarged_image_reads_relocates_and_grows() {
    let image = Image::new("grown", 64 * MIB);
    let t = talos_table(64 * MIB);
    t.write(&image.open()).unwrap();
    let old_backup = t.backup_lba();
    image.open().set_len(128 * MIB).unwrap();
    let v = verify(&image);
    assert!(!clean(&v), "sgdisk should see the misplaced backup:\n{v}");

    let mut t = image.read();
    assert_eq!((t.source(), t.backup_misplaced(), t.needs_repair()), (Source::Primary, true, false));
    assert_eq!((t.backup_lba(), t.total_sectors()), (old_backup, 128 * MIB / 512));
    let ephemeral = t.partitions().into_iter().find(|p| p.partition.name == "EPHEMERAL").unwrap();
    assert_eq!(t.grow_partition(ephemeral.number, 0).unwrap(), None, "no room before relocating");

    // Relocated and written before growing into the new space, the old backup header is erased.
    assert!(t.relocate_backup(128 * MIB).unwrap());
    t.write(&image.open()).unwrap();
    assert_valid(&image);
    assert_eq!(image.bytes(old_backup * 512, 512), vec![0u8; 512], "the old backup header is gone");
    let grown = t.grow_partition(ephemeral.number, 0).unwrap().expect("room after relocating");
    assert_eq!((grown.partition.first_lba, grown.partition.last_lba), (38912, 260095));
    t.write(&image.open()).unwrap();

    assert_valid(&image);
    assert_sgdisk_sees(&image, &t);
    let back = image.read();
    assert!(!back.backup_misplaced() && !back.needs_repair());
    assert_eq!(back.partition(ephemeral.number), Some(grown));
}

#[test]
fn a_damaged_copy_falls_back_and_is_repaired() {
    let size = 64 * MIB;
    let last = size / 512 - 1;
    // (what is damaged, byte to flip, which copy read() should use)
    let cases: &[(&str, u64, Source)] = &[
        ("primary header disk GUID", 512 + 60, Source::Backup),
        ("primary header signature", 512, Source::Backup),
        ("primary entry array (STATE's name)", 1024 + 2 * 128 + 56, Source::Backup),
        ("backup header", last * 512 + 60, Source::Primary),
        ("backup entry array", (last - 32) * 512 + 200, Source::Primary),
    ];
    for &(what, offset, source) in cases {
        let image = Image::new("damaged", size);
        let t = talos_table(size);
        t.write(&image.open()).unwrap();
        let mut byte = image.bytes(offset, 1);
        byte[0] ^= 0xff;
        image.poke(offset, &byte);
        let v = verify(&image);
        assert!(!clean(&v), "{what}: sgdisk should see the damage:\n{v}");

        let back = image.read();
        assert_eq!((back.source(), back.needs_repair()), (source, true), "{what}");
        assert_eq!(back.partitions(), t.partitions(), "{what}");
        back.write(&image.open()).unwrap();
        assert_valid(&image);
        let repaired = image.read();
        assert_eq!((repaired.source(), repaired.needs_repair()), (Source::Primary, false), "{what}");
        assert_eq!(repaired.encode(), t.encode(), "{what}");
    }
}

#[test]
fn blank_and_ruined_disks() {
    let image = Image::new("blank", 64 * MIB);
    assert!(Table::read(&image.open(), image.size()).unwrap().is_none(), "a blank disk has no GPT");

    talos_table(64 * MIB).write(&image.open()).unwrap();
    image.poke(512 + 60, &[0xff]);
    image.poke((64 * MIB / 512 - 1) * 512 + 60, &[0xff]);
    let err = Table::read(&image.open(), image.size()).unwrap_err();
    assert!(matches!(err, GptError::Damaged { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "GPT damaged beyond use: primary header: header CRC mismatch; backup header at LBA 131071: header CRC mismatch"
    );

    // A disk that shrank under its table: the primary points past the end and there is no backup.
    let image = Image::new("shrunk", 64 * MIB);
    talos_table(64 * MIB).write(&image.open()).unwrap();
    image.open().set_len(32 * MIB).unwrap();
    let err = Table::read(&image.open(), image.size()).unwrap_err();
    assert!(err.to_string().contains("do not fit a disk of 65536 sectors"), "{err}");
}

#[test]
fn four_k_sectors_round_trip() {
    let image = Image::new("4k", 64 * MIB);
    let mut t = Table::new_with_sector_size(Guid::derived(b"4k"), 64 * MIB, 4096).unwrap();
    let state = t.add_partition("STATE", guid(LINUX), Guid::derived(b"s"), 16 * MIB, 16 * MIB, false).unwrap();
    assert_eq!((state.partition.first_lba, state.partition.last_lba, state.offset), (256, 4351, MIB));
    t.add_partition("EPHEMERAL", guid(LINUX), Guid::derived(b"e"), MIB, 0, true).unwrap();
    t.write(&image.open()).unwrap();

    let back = Table::read_with_sector_size(&image.open(), 64 * MIB, 4096).unwrap().unwrap();
    assert_eq!((back.source(), back.needs_repair(), back.backup_misplaced()), (Source::Primary, false, false));
    assert_eq!(back.partitions(), t.partitions());
    assert_eq!((back.first_usable(), back.last_usable(), back.backup_lba()), (6, 16378, 16383));
    // Read with 512-byte sectors, the headers are not where they would be.
    assert!(Table::read(&image.open(), 64 * MIB).unwrap().is_none());
}

//! Loop devices and squashfs mounts on this host's kernel: attach a squashfs image read-only,
//! mount it, read it, and check autoclear releases the device; partition a read-write loop
//! device with our GPT and tell the kernel through BLKPG, as the volume manager does a disk.
//! Needs root (CI runs as root); without it the tests fail loudly rather than pass.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use talosbox::kernel::{loopdev, mount};

fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "kernel_loop tests need root (loop devices, mount); run them as root as CI does"
    );
}

/// A scratch directory removed on drop, unmounting anything mounted inside first.
struct Scratch {
    dir: PathBuf,
    mounts: Vec<PathBuf>,
}

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("talosbox-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating scratch dir");
        Scratch { dir, mounts: Vec::new() }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            let _ = rustix::mount::unmount(m, rustix::mount::UnmountFlags::DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn make_squashfs(scratch: &Scratch) -> PathBuf {
    let src = scratch.dir.join("src");
    std::fs::create_dir_all(src.join("sbin")).expect("mkdir src");
    std::fs::write(src.join("sbin/hello"), b"hello from squashfs\n").expect("write file");
    let image = scratch.dir.join("rootfs.sqsh");
    let out = Command::new("mksquashfs")
        .arg(&src)
        .arg(&image)
        .args(["-noappend", "-quiet", "-no-progress", "-all-root"])
        .output()
        .expect("running mksquashfs (apt-get install squashfs-tools)");
    assert!(out.status.success(), "mksquashfs failed: {}", String::from_utf8_lossy(&out.stderr));
    image
}

fn wait_detached(number: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !loopdev::is_attached(number) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn squashfs_on_loop_mounts_read_only_and_autoclears() {
    mount_read_and_release(loopdev::AttachMethod::Configure, "loop");
}

#[test]
fn legacy_attach_path_works_too() {
    mount_read_and_release(loopdev::AttachMethod::Legacy, "loop-legacy");
}

#[test]
fn closing_the_handle_before_mounting_detaches() {
    // The autoclear trap, shown on purpose: this is why LoopDevice keeps its fd open.
    require_root();
    let scratch = Scratch::new("loop-trap");
    let image = make_squashfs(&scratch);
    let device = loopdev::attach_read_only(&image, Path::new("/dev")).expect("attaching the image");
    let number = device.number();
    assert!(loopdev::is_attached(number));
    drop(device);
    assert!(wait_detached(number), "loop{number} stayed attached without autoclear");
}

fn mount_read_and_release(method: loopdev::AttachMethod, name: &str) {
    require_root();
    let mut scratch = Scratch::new(name);
    let image = make_squashfs(&scratch);
    let target = scratch.dir.join("mnt");

    let device = loopdev::attach_read_only_using(&image, Path::new("/dev"), method).expect("attaching the image");
    let number = device.number();
    assert!(loopdev::is_attached(number), "{} should be attached", device.path().display());
    let ro = std::fs::read_to_string(format!("/sys/block/loop{number}/ro")).expect("reading ro flag");
    assert_eq!(ro.trim(), "1", "loop device must be read-only");
    let backing = std::fs::read_to_string(format!("/sys/block/loop{number}/loop/backing_file")).expect("backing");
    assert_eq!(Path::new(backing.trim()), image.as_path());

    let dev_name = device.path().display().to_string();
    scratch.mounts.push(target.clone());
    mount::mount_spec(&mount::squashfs_ro(&dev_name, &target)).expect("mounting squashfs");
    // The mount now holds the device: dropping our fd must not detach it (the autoclear trap).
    drop(device);
    assert!(loopdev::is_attached(number), "device detached while still mounted");
    assert!(mount::is_mount_point(&target));

    let text = std::fs::read_to_string(target.join("sbin/hello")).expect("reading a file from the mount");
    assert_eq!(text, "hello from squashfs\n");
    let write = std::fs::write(target.join("new"), b"x").expect_err("writing to a read-only mount must fail");
    assert_eq!(write.raw_os_error(), Some(rustix::io::Errno::ROFS.raw_os_error()), "{write}");

    unmount_retrying_busy(&target);
    scratch.mounts.clear();
    assert!(wait_detached(number), "loop{number} still attached after unmount: autoclear did not release it");
}

/// Unmount, retrying EBUSY for a few seconds. Another test thread spawning a program can hold a
/// duplicate of a file descriptor opened inside the mount for the instant between its fork and exec
/// (O_CLOEXEC closes it only at exec), and the host's own probers may open the loop device's files;
/// either makes a plain umount fail once. Any other error, or EBUSY that lasts, fails the test.
fn unmount_retrying_busy(target: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match rustix::mount::unmount(target, rustix::mount::UnmountFlags::empty()) {
            Ok(()) => return,
            Err(rustix::io::Errno::BUSY) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("unmounting {}: {e}", target.display()),
        }
    }
}

#[test]
fn mount_errors_name_fs_type_and_target() {
    require_root();
    let mut scratch = Scratch::new("loop-bad");
    let image = scratch.dir.join("not-squashfs.img");
    std::fs::write(&image, vec![0u8; 64 * 1024]).expect("writing junk image");
    let target = scratch.dir.join("mnt");
    let device = loopdev::attach_read_only(&image, Path::new("/dev")).expect("attaching junk image");
    let number = device.number();
    let dev_name = device.path().display().to_string();
    scratch.mounts.push(target.clone());
    let err = mount::mount_spec(&mount::squashfs_ro(&dev_name, &target)).expect_err("junk must not mount");
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("mounting squashfs {dev_name} on {}: ", target.display())), "{msg}");
    drop(device);
    assert!(wait_detached(number), "loop{number} not released after a failed mount");
}

#[test]
fn attach_errors_name_the_file() {
    require_root();
    let missing = Path::new("/nonexistent/rootfs.sqsh");
    let err = loopdev::attach_read_only(missing, Path::new("/dev")).expect_err("missing file");
    assert!(err.to_string().starts_with("opening /nonexistent/rootfs.sqsh: "), "{err}");
}

/// A nocloud seed on a real block device: a cidata ISO made by genisoimage, attached to a loop
/// device, is found among this host's block devices (`/sys/class/block`, `/dev`) by its label
/// and its files are read from the device without mounting it.
#[test]
fn a_cidata_iso_on_a_loop_device_is_found_and_read() {
    use talosbox::kernel::cmdline::Cmdline;
    use talosbox::platform::nocloud::{self, Paths, Source};
    require_root();
    let scratch = Scratch::new("cidata");
    let files = scratch.dir.join("seed");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("meta-data"), "instance-id: loop-test\nlocal-hostname: loop-1\n").unwrap();
    std::fs::write(files.join("network-config"), "version: 2\nethernets: {}\n").unwrap();
    let iso = scratch.dir.join("seed.iso");
    let out = Command::new("genisoimage")
        .args(["-quiet", "-volid", "cidata", "-joliet", "-rock", "-o"])
        .arg(&iso)
        .arg(&files)
        .output()
        .expect("running genisoimage (apt-get install genisoimage)");
    assert!(out.status.success(), "genisoimage: {}", String::from_utf8_lossy(&out.stderr));
    let device = loopdev::attach_read_only(&iso, Path::new("/dev")).expect("attaching the seed image");

    let devices = talosbox::block::block_devices(Path::new("/sys/class/block"), Path::new("/dev")).unwrap();
    assert!(devices.contains(&device.path().to_path_buf()), "{} among {devices:?}", device.path().display());
    let seed = nocloud::locate(&Cmdline::parse("talos.platform=nocloud"), &Paths::node()).expect("the seed is found");
    let Source::Disk { path, filesystem } = &seed.source else { panic!("a disk seed: {seed:?}") };
    assert_eq!(filesystem, &"iso9660");
    assert_eq!(path, device.path(), "another cidata device on this host sorts before the test's");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let meta = rt.block_on(seed.read(nocloud::META_DATA)).unwrap().unwrap();
    assert_eq!(meta, "instance-id: loop-test\nlocal-hostname: loop-1\n");
    assert_eq!(rt.block_on(seed.read(nocloud::USER_DATA)).unwrap(), None);
}

/// A partition of `disk` as the kernel shows it: (start, size) in 512-byte sectors.
fn kernel_partition(disk: &str, number: u32) -> Option<(u64, u64)> {
    let dir = format!("/sys/class/block/{disk}p{number}");
    let read = |file: &str| std::fs::read_to_string(format!("{dir}/{file}")).ok()?.trim().parse::<u64>().ok();
    Some((read("start")?, read("size")?))
}

/// Whether this kernel parses GPTs itself (CONFIG_EFI_PARTITION); assumed when it does not
/// publish its config, and then the assertions that depend on it say otherwise loudly.
fn kernel_parses_gpt() -> bool {
    let Ok(out) = Command::new("zcat").arg("/proc/config.gz").output() else { return true };
    if !out.status.success() {
        return true;
    }
    String::from_utf8_lossy(&out.stdout).lines().any(|l| l == "CONFIG_EFI_PARTITION=y")
}

fn wait_for(path: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The volume manager's path on a real block device: a blank disk gets a GPT and partitions,
/// the kernel learns them through BLKPG (and its own GPT parser, BLKRRPART, agrees); the disk
/// grows, the table follows, a partition grows and the kernel learns the new size.
#[test]
fn gpt_partitions_reach_the_kernel_through_blkpg() {
    use std::os::unix::fs::FileExt;
    use talosbox::block::gpt::{Guid, Table};
    use talosbox::kernel::blockdev::BlockDevice;
    const MIB: u64 = 1 << 20;
    require_root();
    let scratch = Scratch::new("gpt-loop");
    let image = scratch.dir.join("disk.img");
    std::fs::File::create(&image).and_then(|f| f.set_len(64 * MIB)).expect("creating the disk image");

    // Autoclear: once `device` and `disk` are dropped (also on a failed assertion) the kernel
    // detaches the device and its partitions go with it.
    let device = loopdev::attach_for_partitioning(&image, Path::new("/dev")).expect("attaching the disk image");
    let number = device.number();
    let name = format!("loop{number}");
    let disk = BlockDevice::open(device.path()).expect("opening the loop device");
    assert_eq!(std::fs::read_to_string(format!("/sys/block/{name}/ro")).unwrap().trim(), "0");
    assert_eq!(disk.size_bytes().unwrap(), 64 * MIB);
    assert_eq!(disk.logical_sector_size().unwrap(), 512);
    assert!(Table::read(disk.file(), 64 * MIB).unwrap().is_none(), "a blank disk has no GPT");

    let linux = Guid::parse("0FC63DAF-8483-4772-8E79-3D69D8477DE4").unwrap();
    let mut table = Table::new(Guid::derived(b"loop disk"), 64 * MIB).unwrap();
    let state = table.add_partition("STATE", linux, Guid::derived(b"STATE"), 16 * MIB, 16 * MIB, false).unwrap();
    let ephemeral = table.add_partition("EPHEMERAL", linux, Guid::derived(b"EPHEMERAL"), 8 * MIB, 0, true).unwrap();
    table.write(disk.file()).expect("writing the GPT");
    assert_eq!(kernel_partition(&name, 1), None, "the kernel learns of partitions only when told");

    for p in [&state, &ephemeral] {
        disk.add_partition(p.number, p.offset, p.size).expect("BLKPG_ADD_PARTITION");
    }
    assert_eq!(kernel_partition(&name, 1), Some((2048, 32768)));
    assert_eq!(kernel_partition(&name, 2), Some((ephemeral.offset / 512, ephemeral.size / 512)));
    assert_eq!(kernel_partition(&name, 2), Some((34816, 94208)));
    let err = disk.add_partition(state.number, state.offset, state.size).expect_err("adding it twice");
    assert_eq!(err.errno(), Some(rustix::io::Errno::BUSY.raw_os_error()), "{err}");
    assert!(
        err.to_string().starts_with(&format!("adding partition 1 on /dev/{name} (bytes 1048576+16777216): ")),
        "{err}"
    );

    // Bytes written through the partition's device land where the table says it starts.
    let part = PathBuf::from(format!("/dev/{name}p2"));
    assert!(wait_for(&part), "{} did not appear", part.display());
    let marker = b"written through the partition device";
    let f = std::fs::OpenOptions::new().write(true).open(&part).expect("opening the partition");
    f.write_all_at(marker, 0).and_then(|_| f.sync_all()).expect("writing the partition");
    drop(f);
    let mut back = vec![0u8; marker.len()];
    disk.file().read_exact_at(&mut back, ephemeral.offset).unwrap();
    assert_eq!(back, marker);

    // Deleted, the partition is gone from the kernel's view; deleting it again says so.
    disk.delete_partition(2).expect("BLKPG_DEL_PARTITION");
    assert_eq!(kernel_partition(&name, 2), None);
    let err = disk.delete_partition(2).expect_err("deleting it twice");
    assert_eq!(err.errno(), Some(rustix::io::Errno::NXIO.raw_os_error()), "{err}");
    disk.add_partition(ephemeral.number, ephemeral.offset, ephemeral.size).expect("adding it back");

    // The disk grows: the kernel takes the new size, the table follows and EPHEMERAL grows
    // while its device is open (BLKPG resizes partitions in use).
    std::fs::OpenOptions::new().write(true).open(&image).and_then(|f| f.set_len(96 * MIB)).unwrap();
    device.set_capacity().expect("LOOP_SET_CAPACITY");
    assert_eq!(disk.size_bytes().unwrap(), 96 * MIB);
    let mut table = Table::read(disk.file(), 96 * MIB).unwrap().expect("the GPT is there");
    assert!(table.backup_misplaced());
    assert!(table.relocate_backup(96 * MIB).unwrap());
    let grown = table.grow_partition(ephemeral.number, 0).unwrap().expect("room to grow");
    assert_eq!((grown.offset, grown.size), (ephemeral.offset, ephemeral.size + 32 * MIB));
    table.write(disk.file()).expect("writing the grown GPT");
    assert!(wait_for(&part), "{} did not come back", part.display());
    let busy = std::fs::File::open(&part).expect("holding the partition open");
    disk.resize_partition(grown.number, grown.offset, grown.size).expect("BLKPG_RESIZE_PARTITION");
    assert_eq!(kernel_partition(&name, 2), Some((34816, 94208 + 65536)));
    drop(busy);

    let verify = Command::new("sgdisk").arg("-v").arg(&image).output().expect("running sgdisk (apt-get install gdisk)");
    let verify = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.contains("No problems found") && !verify.contains("Caution"), "sgdisk -v:\n{verify}");

    // BLKRRPART replaces the kernel's view with what its own partition parsers find on the
    // disk: our partitions where the kernel has a GPT parser, none where it has not (this
    // host's kernel, built without CONFIG_EFI_PARTITION, is why the node uses BLKPG).
    disk.reread_partitions().expect("BLKRRPART");
    let expected = kernel_parses_gpt().then_some((34816, 94208 + 65536));
    assert_eq!(kernel_partition(&name, 1), expected.map(|_| (2048, 32768)));
    assert_eq!(kernel_partition(&name, 2), expected);

    drop(disk);
    drop(device);
    assert!(wait_detached(number), "{name} still attached after its last user closed it");
    assert_eq!(kernel_partition(&name, 1), None, "partitions gone with the device");
}

/// A swap header written by `block::swap` on a loop device is what blkid reads, what the
/// kernel takes with `swapon(2)` through `kernel::swap`, and what util-linux's swapon takes.
#[test]
fn a_swap_area_we_write_is_enabled_by_the_kernel() {
    use talosbox::kernel::swap;
    const MIB: u64 = 1 << 20;
    require_root();
    let scratch = Scratch::new("swap-loop");
    let image = scratch.dir.join("swap.img");
    std::fs::File::create(&image).and_then(|f| f.set_len(32 * MIB)).expect("creating the image");
    let device = loopdev::attach_for_partitioning(&image, Path::new("/dev")).expect("attaching the image");
    let path = device.path().to_path_buf();
    // Whatever happens below, the area is not left enabled.
    struct Off(PathBuf);
    impl Drop for Off {
        fn drop(&mut self) {
            if swap::is_active(&self.0) {
                let _ = swap::off(&self.0);
            }
        }
    }
    let _off = Off(path.clone());

    let page_size = rustix::param::page_size();
    let uuid = *b"\x5b\x1e\x8c\x0d\x4e\x2a\x4f\x10\x9a\x77\x13\x5c\x60\x2e\x81\xf4";
    let page = talosbox::block::swap::header(page_size, 32 * MIB, uuid, "s-test").unwrap();
    {
        use std::os::unix::fs::FileExt;
        let dev = std::fs::OpenOptions::new().write(true).open(&path).expect("opening the loop device");
        dev.write_all_at(&page, 0).and_then(|()| dev.sync_all()).expect("writing the header");
    }
    let out = Command::new("blkid").args(["-p", "-o", "export"]).arg(&path).output().expect("running blkid");
    let ids = String::from_utf8_lossy(&out.stdout);
    for want in ["TYPE=swap", "LABEL=s-test", "UUID=5b1e8c0d-4e2a-4f10-9a77-135c602e81f4", "VERSION=1"] {
        assert!(ids.lines().any(|l| l == want), "{want} in\n{ids}");
    }

    swap::on(&path, swap::DISCARD_ONCE).expect("swapon");
    assert!(swap::is_active(&path));
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap();
    let line = swaps.lines().find(|l| l.starts_with(&path.display().to_string())).expect("in /proc/swaps");
    let fields: Vec<&str> = line.split_whitespace().collect();
    // All pages but the header's, in KiB.
    let kib = (32 * MIB / page_size as u64 - 1) * page_size as u64 / 1024;
    assert_eq!((fields[1], fields[2]), ("partition", kib.to_string().as_str()), "{line}");
    let again = swap::on(&path, 0).expect_err("enabling it twice");
    assert!(again.to_string().starts_with(&format!("enabling swap on {}: ", path.display())), "{again}");
    swap::off(&path).expect("swapoff");
    assert!(!swap::is_active(&path));

    // util-linux takes the same area.
    let on = Command::new("swapon").arg(&path).output().expect("running swapon");
    assert!(on.status.success(), "swapon: {}", String::from_utf8_lossy(&on.stderr));
    assert!(swap::is_active(&path));
    let off = Command::new("swapoff").arg(&path).output().expect("running swapoff");
    assert!(off.status.success(), "swapoff: {}", String::from_utf8_lossy(&off.stderr));
    assert!(!swap::is_active(&path));
}

/// A filesystem on a device that grew (the image enlarged, the loop device told) grows online
/// to the new size through the filesystems' ioctls, as the mount controller grows a volume
/// whose partition was grown; a device no larger leaves it. Checked by xfs_info and dumpe2fs.
#[test]
fn mounted_xfs_and_ext4_grow_into_a_larger_device() {
    use talosbox::kernel::growfs;
    const MIB: u64 = 1 << 20;
    require_root();
    for (fs, mkfs) in [("xfs", &["mkfs.xfs", "-q", "-f"][..]), ("ext4", &["mkfs.ext4", "-q", "-F"][..])] {
        let mut scratch = Scratch::new(&format!("grow-{fs}"));
        let image = scratch.dir.join("fs.img");
        std::fs::File::create(&image).and_then(|f| f.set_len(320 * MIB)).expect("creating the image");
        let device = loopdev::attach_for_partitioning(&image, Path::new("/dev")).expect("attaching the image");
        let dev = device.path().to_path_buf();
        // The xfs test-suite variables let mkfs.xfs make a filesystem under 300 MB (BUILD.md).
        let out = Command::new(mkfs[0])
            .args(&mkfs[1..])
            .arg(&dev)
            .envs([("TEST_DIR", "1"), ("TEST_DEV", "1"), ("QA_CHECK_FS", "1")])
            .output()
            .expect("running mkfs");
        assert!(out.status.success(), "{}: {}", mkfs[0], String::from_utf8_lossy(&out.stderr));
        let target = scratch.dir.join("mnt");
        std::fs::create_dir_all(&target).unwrap();
        mount::mount_spec(&mount::MountSpec {
            fstype: fs,
            source: &dev.display().to_string(),
            target: &target,
            flags: rustix::mount::MountFlags::empty(),
            data: None,
        })
        .expect("mounting");
        scratch.mounts.push(target.clone());
        let grow = |size: u64| if fs == "xfs" { growfs::xfs(&target, size) } else { growfs::ext4(&target, size) };

        // Same device: nothing to do.
        let same = grow(320 * MIB).expect("growing to the same size");
        assert_eq!(same.before, same.after, "{fs}");
        assert!(same.before > 250 * MIB && same.before <= 320 * MIB, "{fs}: {same:?}");

        // The image doubles; the loop device is told; the filesystem follows.
        std::fs::OpenOptions::new().write(true).open(&image).and_then(|f| f.set_len(640 * MIB)).unwrap();
        device.set_capacity().expect("LOOP_SET_CAPACITY");
        // ext4's online resize needs CAP_SYS_RESOURCE, which a node's machined has and some
        // sandboxes' root does not: there the refusal must name the ioctl, and nothing changes.
        if fs == "ext4" && !has_cap_sys_resource() {
            let e = grow(640 * MIB).expect_err("EXT4_IOC_RESIZE_FS without CAP_SYS_RESOURCE");
            assert!(e.to_string().starts_with("EXT4_IOC_RESIZE_FS on "), "{e}");
            eprintln!(
                "ext4: this process lacks CAP_SYS_RESOURCE; the kernel's refusal was checked instead of a resize"
            );
            unmount_retrying_busy(&target);
            scratch.mounts.clear();
            continue;
        }
        let grown = grow(640 * MIB).expect("growing");
        assert!(grown.after > 600 * MIB && grown.after <= 640 * MIB, "{fs}: {grown:?}");
        assert_eq!(grown.before, same.before, "{fs}");

        // The peers agree: xfs_info's data blocks, dumpe2fs's block count.
        let (prog, args): (&str, Vec<std::ffi::OsString>) = if fs == "xfs" {
            ("xfs_info", vec![target.clone().into()])
        } else {
            ("dumpe2fs", vec!["-h".into(), dev.clone().into()])
        };
        let out = Command::new(prog).args(&args).output().expect("running the peer");
        let text = String::from_utf8_lossy(&out.stdout);
        let blocks: u64 = if fs == "xfs" {
            let data = text.lines().find(|l| l.starts_with("data")).expect("xfs_info's data line");
            let bsize: u64 =
                data.split("bsize=").nth(1).and_then(|v| v.split_whitespace().next()).unwrap().parse().unwrap();
            let n: u64 = data.split("blocks=").nth(1).and_then(|v| v.split(',').next()).unwrap().parse().unwrap();
            n * bsize
        } else {
            let field = |name: &str| -> u64 {
                text.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().parse().unwrap()).unwrap()
            };
            field("Block count:") * field("Block size:")
        };
        assert!(blocks > 600 * MIB, "{prog} says {blocks} bytes:\n{text}");
        if fs == "xfs" {
            assert_eq!(blocks, grown.after, "xfs_info and the geometry agree");
        }
        unmount_retrying_busy(&target);
        scratch.mounts.clear();
        drop(device);
    }
}

/// Whether this process holds CAP_SYS_RESOURCE (bit 24 of CapEff).
fn has_cap_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

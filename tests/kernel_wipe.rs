//! machined's wipe of a block device (what `BlockDeviceWipe` runs after its checks) on a loop
//! disk with two partitions: a mounted partition is refused and left as it was; a free one is
//! zeroed and dropped, and the kernel forgets it (its node goes) while sgdisk reads a valid
//! table with the other partition in place; a fast wipe leaves nothing for blkid.
//!
//! Needs root (loop devices, mount); without it the test fails loudly. The mount is taken down
//! and the scratch directory removed at the end, also when an assertion fails; the loop device
//! detaches itself once its last user is gone (autoclear).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use talosbox::api::node::BlockDeviceWipe;
use talosbox::block::wipe::Method;
use talosbox::kernel::loopdev;
use talosbox::machined::node::wipe_block_device;

struct Scratch {
    dir: PathBuf,
    mounted: Option<PathBuf>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(m) = self.mounted.take() {
            let _ = rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn blkid_type(device: &Path) -> String {
    let out = Command::new("blkid").args(["-p", "-o", "value", "-s", "TYPE"]).arg(device).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Waits up to 5 s for `path` to exist (or, with `gone`, to stop existing).
fn wait(path: &Path, gone: bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if path.exists() != gone {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_mounted_partition_is_refused_and_a_free_one_is_zeroed_and_dropped() {
    assert!(rustix::process::geteuid().is_root(), "kernel_wipe needs root (loop devices, mount)");
    let dir = std::env::temp_dir().join(format!("talosbox-wipe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("mnt")).unwrap();
    let mut scratch = Scratch { dir, mounted: None };
    let image = scratch.dir.join("disk.img");
    std::fs::File::create(&image).unwrap().set_len(64 << 20).unwrap();
    run(Command::new("sgdisk")
        .args(["-o", "-n", "1:2048:+16M", "-c", "1:u-data", "-n", "2:0:+16M", "-c", "2:r-raw"])
        .arg(&image));

    let device = loopdev::attach_for_partitioning(&image, Path::new("/dev")).expect("attaching the disk image");
    let disk = format!("loop{}", device.number());
    let part = |n: u32| PathBuf::from(format!("/dev/{disk}p{n}"));
    // This host's kernel does not scan a loop disk's GPT itself: tell it of each partition,
    // as the volume manager does after writing a table.
    let whole = talosbox::kernel::blockdev::BlockDevice::open(device.path()).expect("opening the loop disk");
    let table = talosbox::block::gpt::Table::read(whole.file(), 64 << 20).unwrap().expect("sgdisk's table");
    for p in table.partitions() {
        whole.add_partition(p.number, p.offset, p.size).expect("BLKPG_ADD_PARTITION");
    }
    drop(whole);
    assert!(wait(&part(1), false) && wait(&part(2), false), "the kernel did not scan the partitions");
    for n in [1, 2] {
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(part(n)));
    }
    let (dev, sys) = (Path::new("/dev"), Path::new("/sys/class/block"));

    // Mounted: the exclusive open fails, nothing is written.
    let mnt = scratch.dir.join("mnt");
    rustix::mount::mount(part(1).as_path(), &mnt, "ext4", rustix::mount::MountFlags::empty(), None::<&std::ffi::CStr>)
        .expect("mounting partition 1");
    scratch.mounted = Some(mnt.clone());
    let busy = BlockDeviceWipe { device: format!("{disk}p1"), method: Method::Fast, drop_partition: None };
    let e = wipe_block_device(&busy, dev, sys).unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{}", e.message());
    assert!(e.message().contains("mounted or in use"), "{}", e.message());
    assert_eq!(blkid_type(&part(1)), "ext4");
    rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::empty()).unwrap();
    scratch.mounted = None;

    // Free: zeroed whole, then dropped from the table and from the kernel.
    let dropped = BlockDeviceWipe {
        device: format!("{disk}p2"),
        method: Method::Zeroes,
        drop_partition: Some((disk.clone(), 2)),
    };
    let p2 = part(2);
    let mut before = vec![0u8; 4096];
    {
        use std::os::unix::fs::FileExt;
        std::fs::File::open(&p2).unwrap().read_exact_at(&mut before, 0).unwrap();
    }
    assert!(before.iter().any(|b| *b != 0), "mkfs left something to wipe");
    wipe_block_device(&dropped, dev, sys).expect("wiping and dropping partition 2");
    assert!(wait(&p2, true), "{} is still there", p2.display());
    assert!(!Path::new(&format!("/sys/class/block/{disk}p2")).exists());
    let table = run(Command::new("sgdisk").arg("-p").arg(&image));
    assert!(table.contains("u-data") && !table.contains("r-raw"), "{table}");
    assert!(run(Command::new("sgdisk").arg("-v").arg(&image)).contains("No problems found"));
    // The zeroes reached the partition's whole range on the disk (sectors 34816..67583).
    let bytes = std::fs::read(&image).unwrap();
    assert!(bytes[34816 * 512..67584 * 512].iter().all(|b| *b == 0), "partition 2's range was not zeroed");

    // Partition 1, now free: a fast wipe leaves no signature.
    wipe_block_device(&busy, dev, sys).expect("wiping partition 1");
    assert_eq!(blkid_type(&part(1)), "");
    drop(device);
}

//! Loop devices and squashfs mounts on this host's kernel: attach a squashfs image read-only,
//! mount it, read it, and check autoclear releases the device. Needs root (CI runs as root);
//! without it the tests fail loudly rather than pass.

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

    rustix::mount::unmount(&target, rustix::mount::UnmountFlags::empty()).expect("unmounting");
    scratch.mounts.clear();
    assert!(wait_detached(number), "loop{number} still attached after unmount: autoclear did not release it");
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

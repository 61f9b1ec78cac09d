//! `/init` booted for real: a static talosbox binary, a hand-assembled initramfs (modules with
//! their kmod indexes, the fixed module list, a squashfs root) and Debian's cloud kernel under
//! QEMU TCG, asserting on the serial console. This is not the imager: it builds only what init
//! reads, with host tools (mksquashfs, depmod, cpio, xz), to test init on its own. The same
//! kernel also shows that its own module requests reach the `modprobe` applet.
//!
//! Needs the kernel tree unpacked at `$TALOSBOX_KERNEL_ROOT` (default
//! `/var/cache/talosbox/kernel-dev/root`, i.e. `dpkg -x` of the package `apt-cache depends
//! linux-image-cloud-amd64` names); without it the tests print `skipped:` and say how to get it.
//! Serial logs stay in the target directory for reading after a failure.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use talosbox::kernel::modules::ModuleIndex;

/// Modules a QEMU node needs (BUILD.md), all shipped in the initramfs with their dependencies.
const SHIPPED: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "virtio_net",
    "virtio_scsi",
    "virtio_console",
    "virtio-rng",
    "squashfs",
    "overlay",
    "loop",
    "dm-mod",
    "dm-crypt",
    "vfat",
    "nls_cp437",
    "nls_iso8859-1",
    "nls_utf8",
    "nls_ascii",
    "xfs",
    "efivarfs",
];
/// The fixed list: no virtio drivers, so those must be found through device modaliases.
const FIXED: &[&str] = &[
    "squashfs",
    "loop",
    "overlay",
    "dm-mod",
    "dm-crypt",
    "vfat",
    "nls_cp437",
    "nls_iso8859-1",
    "nls_utf8",
    "nls_ascii",
    "xfs",
    "efivarfs",
];
const BOOT_TIMEOUT: Duration = Duration::from_secs(180);
/// init's last line before it execs the rootfs's /sbin/init.
const EXEC_LINE: &str = " init switch_root done, exec /sbin/init as machined";

struct Kernel {
    root: PathBuf,
    version: String,
    vmlinuz: PathBuf,
}

fn kernel() -> Option<Kernel> {
    let root = std::env::var_os("TALOSBOX_KERNEL_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/talosbox/kernel-dev/root"));
    let version = std::fs::read_dir(root.join("lib/modules")).ok()?.flatten().next()?.file_name();
    let version = version.to_string_lossy().into_owned();
    let vmlinuz = root.join(format!("boot/vmlinuz-{version}"));
    vmlinuz.exists().then_some(Kernel { root, version, vmlinuz })
}

fn skip_reason() -> Option<String> {
    if kernel().is_none() {
        return Some(
            "no kernel tree at $TALOSBOX_KERNEL_ROOT or /var/cache/talosbox/kernel-dev/root \
             (apt-get download the package `apt-cache depends linux-image-cloud-amd64` names, dpkg -x it there)"
                .into(),
        );
    }
    for tool in ["qemu-system-x86_64", "mksquashfs", "depmod", "cpio", "xz", "gcc"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Some(format!("host tool {tool} missing (qemu-system-x86, squashfs-tools, kmod, cpio, xz-utils)"));
        }
    }
    None
}

/// Says `skipped: <reason>` straight to stderr (past the test harness's capture, so it shows
/// even when the test passes) and returns true when the boot cannot run here.
fn skipped() -> bool {
    let Some(reason) = skip_reason() else { return false };
    let _ = writeln!(std::io::stderr(), "skipped: {reason}");
    true
}

fn target_dir() -> PathBuf {
    // .../<target>/debug/talosbox → <target>
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_talosbox"));
    exe.parent().and_then(Path::parent).expect("binary lives in <target>/<profile>/").to_path_buf()
}

/// The static binary the image would carry: `$TALOSBOX_STATIC_BIN` when tests/run has built it
/// already, else built once per test run in its own target dir.
fn static_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(prebuilt) = std::env::var_os("TALOSBOX_STATIC_BIN") {
            return PathBuf::from(prebuilt);
        }
        let dir = target_dir().join("init-boot-static");
        let status = Command::new(env!("CARGO"))
            .args(["build", "--locked", "--release", "--target", "x86_64-unknown-linux-gnu", "--bin", "talosbox"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("CARGO_TARGET_DIR", &dir)
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .status()
            .expect("running cargo build for the static binary");
        assert!(status.success(), "building the static binary failed");
        dir.join("x86_64-unknown-linux-gnu/release/talosbox")
    })
    .clone()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

#[derive(Clone, Copy, PartialEq)]
enum Rootfs {
    Good,
    Corrupt,
    /// Good, with every module xz-compressed (`.ko.xz`, as nixpkgs ships them).
    XzModules,
}

/// Assembles `<work>/initramfs.xz` and returns its path.
fn build_initramfs(work: &Path, rootfs: Rootfs) -> PathBuf {
    let k = kernel().expect("kernel present (checked by skip_reason)");
    let bin = static_binary();
    let _ = std::fs::remove_dir_all(work);
    let (root, ird) = (work.join("rootfs"), work.join("initramfs"));
    for d in ["sbin", "etc", "proc", "sys", "dev", "run", "tmp", "var", "system", "usr", "lib"] {
        std::fs::create_dir_all(root.join(d)).expect("rootfs skeleton");
    }
    std::fs::copy(&bin, root.join("sbin/init")).expect("copying binary into rootfs");
    for name in ["machined", "apid", "trustd"] {
        std::os::unix::fs::symlink("init", root.join("sbin").join(name)).expect("applet symlink");
    }
    std::fs::write(root.join("etc/os-release"), "NAME=\"talosbox\"\nID=talosbox\n").expect("os-release");

    let src_mods = k.root.join("lib/modules").join(&k.version);
    if !src_mods.join("modules.dep").exists() {
        run(Command::new("depmod").arg("-b").arg(&k.root).arg(&k.version));
    }
    let index = ModuleIndex::load(&src_mods).expect("reading the kernel's module index");
    let wanted: Vec<String> = SHIPPED.iter().map(|s| s.to_string()).collect();
    let closure = index.closure(&wanted).expect("resolving shipped modules");
    let dst_mods = ird.join("lib/modules").join(&k.version);
    for entry in &closure {
        let dst = dst_mods.join(&entry.path);
        std::fs::create_dir_all(dst.parent().expect("module path has a parent")).expect("module dir");
        std::fs::copy(src_mods.join(&entry.path), &dst).expect("copying module");
    }
    for f in ["modules.order", "modules.builtin", "modules.builtin.modinfo"] {
        std::fs::copy(src_mods.join(f), dst_mods.join(f)).expect("copying module metadata");
    }
    if rootfs == Rootfs::XzModules {
        // xz replaces each .ko with .ko.xz; depmod then indexes the compressed names.
        let script = format!("find '{}' -name '*.ko' -exec xz --check=crc32 {{}} +", dst_mods.display());
        run(Command::new("sh").args(["-c", &script]));
    }
    run(Command::new("depmod").arg("-b").arg(&ird).arg(&k.version));
    std::fs::create_dir_all(ird.join("etc/talosbox")).expect("etc/talosbox");
    std::fs::write(ird.join("etc/talosbox/modules"), FIXED.join("\n") + "\n").expect("fixed list");
    std::fs::copy(&bin, ird.join("init")).expect("copying /init");
    match rootfs {
        Rootfs::Good | Rootfs::XzModules => run(Command::new("mksquashfs")
            .arg(&root)
            .arg(ird.join("rootfs.sqsh"))
            .args(["-noappend", "-all-root", "-quiet", "-no-progress"])),
        Rootfs::Corrupt => std::fs::write(ird.join("rootfs.sqsh"), vec![0x5a; 64 * 1024]).expect("junk rootfs"),
    }
    let out = work.join("initramfs.xz");
    let script = format!(
        "cd '{}' && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --reproducible -R 0:0 --quiet | \
         xz --check=crc32 -T1 > '{}'",
        ird.display(),
        out.display()
    );
    run(Command::new("sh").args(["-c", &script]));
    out
}

/// Boots and returns the serial log and whether QEMU exited by itself (power-off or reboot).
/// With `until`, QEMU is stopped a moment after that text shows on the console (what runs after
/// init, machined, is not expected to stop by itself).
fn boot(work: &Path, initramfs: &Path, until: Option<&str>) -> (String, bool, Duration) {
    let k = kernel().expect("kernel present");
    let log_path = work.join("serial.log");
    let log = std::fs::File::create(&log_path).expect("serial log");
    let started = Instant::now();
    let mut child = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-m", "1024", "-smp", "2", "-nographic", "-no-reboot", "-kernel"])
        .arg(&k.vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        // panic=-1: if whatever runs after init exits, reboot (and so exit QEMU) instead of hanging.
        .args(["-append", "console=ttyS0 panic=-1"])
        .args(["-device", "virtio-net-pci,netdev=n0,romfile=", "-netdev", "user,id=n0,restrict=on"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .spawn()
        .expect("starting qemu-system-x86_64");
    let mut seen_at: Option<Instant> = None;
    let exited = loop {
        if child.try_wait().expect("waiting for qemu").is_some() {
            break true;
        }
        if let Some(text) = until
            && seen_at.is_none()
            && std::fs::read(&log_path).is_ok_and(|b| String::from_utf8_lossy(&b).contains(text))
        {
            seen_at = Some(Instant::now());
        }
        let grace_over = seen_at.is_some_and(|t| t.elapsed() > Duration::from_secs(2));
        if started.elapsed() > BOOT_TIMEOUT || grace_over {
            let _ = child.kill();
            let _ = child.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let elapsed = started.elapsed();
    let mut text = String::new();
    let mut bytes = Vec::new();
    std::fs::File::open(&log_path).and_then(|mut f| f.read_to_end(&mut bytes)).expect("reading serial log");
    text.push_str(&String::from_utf8_lossy(&bytes));
    (text, exited, elapsed)
}

fn assert_lines_in_order(log: &str, wanted: &[&str], log_path: &Path) {
    let mut rest = log;
    for w in wanted {
        match rest.find(w) {
            Some(i) => rest = &rest[i + w.len()..],
            None => panic!("serial log lacks {w:?} (in order); see {}", log_path.display()),
        }
    }
}

#[test]
fn init_loads_modules_mounts_rootfs_and_execs_machined() {
    if skipped() {
        return;
    }
    let work = target_dir().join("init-boot/good");
    let initramfs = build_initramfs(&work, Rootfs::Good);
    let (log, _, elapsed) = boot(&work, &initramfs, Some(EXEC_LINE));
    let log_path = work.join("serial.log");
    println!("boot took {elapsed:?}, log {}", log_path.display());
    assert_lines_in_order(
        &log,
        &[
            "Run /init as init process",
            "[talosbox] uptime ",
            " init start",
            "[talosbox] init: module squashfs loaded",
            "[talosbox] init: module loop loaded",
            "[talosbox] init: module efivarfs skipped: ",
            "[talosbox] init: module virtio_pci loaded",
            "[talosbox] init: module virtio_net loaded",
            " init modules: ",
            " init rootfs mounted: /rootfs.sqsh read-only via /dev/loop",
            EXEC_LINE,
        ],
        &log_path,
    );
    assert!(!log.contains("init: FAILED"), "init failed; see {}", log_path.display());
}

/// The same boot from a module tree compressed as nixpkgs ships it (`.ko.xz`, a kernel
/// without in-kernel decompression): init decompresses each module itself.
#[test]
fn init_loads_xz_compressed_modules() {
    if skipped() {
        return;
    }
    let work = target_dir().join("init-boot/xz-modules");
    let initramfs = build_initramfs(&work, Rootfs::XzModules);
    let listing = std::fs::read_to_string(
        work.join("initramfs/lib/modules").join(kernel().expect("kernel").version).join("modules.dep"),
    )
    .expect("modules.dep");
    assert!(listing.contains("squashfs.ko.xz:"), "the tree is not compressed:\n{listing}");
    let (log, _, elapsed) = boot(&work, &initramfs, Some(EXEC_LINE));
    let log_path = work.join("serial.log");
    println!("boot took {elapsed:?}, log {}", log_path.display());
    assert_lines_in_order(
        &log,
        &[
            " init start",
            "[talosbox] init: module squashfs loaded",
            "[talosbox] init: module loop loaded",
            "[talosbox] init: module virtio_net loaded",
            " init rootfs mounted: /rootfs.sqsh read-only via /dev/loop",
            EXEC_LINE,
        ],
        &log_path,
    );
    assert!(!log.contains("init: FAILED"), "init failed; see {}", log_path.display());
}

#[test]
fn init_failure_prints_the_step_and_powers_off() {
    if skipped() {
        return;
    }
    let work = target_dir().join("init-boot/corrupt");
    let initramfs = build_initramfs(&work, Rootfs::Corrupt);
    let (log, exited, elapsed) = boot(&work, &initramfs, None);
    let log_path = work.join("serial.log");
    println!("boot took {elapsed:?}, log {}", log_path.display());
    assert_lines_in_order(
        &log,
        &[
            " init start",
            "[talosbox] init: FAILED: mount rootfs: mounting squashfs /dev/loop0 on /newroot: ",
            "reboot: Power down",
        ],
        &log_path,
    );
    assert!(!log.contains("Kernel panic"), "init's failure panicked the kernel; see {}", log_path.display());
    assert!(exited, "QEMU did not power off within {BOOT_TIMEOUT:?}; see {}", log_path.display());
}

#[test]
fn init_refuses_to_run_outside_pid_1() {
    let out = Command::new(env!("CARGO_BIN_EXE_talosbox")).arg("init").output().expect("running talosbox init");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("init: runs only as PID 1"), "{err}");
}

/// The kernel asks for a module by itself (an xfs mount makes it request `fs-xfs`): with
/// `/proc/sys/kernel/modprobe` pointing at the binary under the name `modprobe`, the request
/// resolves through `modules.alias` and loads xfs with its dependency.
#[test]
fn the_kernels_module_requests_reach_modprobe() {
    if skipped() {
        return;
    }
    let k = kernel().expect("kernel present");
    let work = target_dir().join("init-boot/modprobe");
    let _ = std::fs::remove_dir_all(&work);
    let ird = work.join("initramfs");
    std::fs::create_dir_all(ird.join("sbin")).expect("sbin");
    for d in ["proc", "sys", "dev"] {
        std::fs::create_dir_all(ird.join(d)).expect("mount point");
    }
    std::fs::copy(static_binary(), ird.join("sbin/modprobe")).expect("the binary as modprobe");
    let init_c = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/modprobe-init/init.c");
    run(Command::new("gcc").args(["-static", "-O2", "-o"]).arg(ird.join("init")).arg(&init_c));
    let src_mods = k.root.join("lib/modules").join(&k.version);
    let index = ModuleIndex::load(&src_mods).expect("reading the kernel's module index");
    let dst_mods = ird.join("lib/modules").join(&k.version);
    for entry in index.closure(&["xfs".to_string()]).expect("xfs resolves") {
        let dst = dst_mods.join(&entry.path);
        std::fs::create_dir_all(dst.parent().expect("module path has a parent")).expect("module dir");
        std::fs::copy(src_mods.join(&entry.path), &dst).expect("copying module");
    }
    run(Command::new("depmod").arg("-b").arg(&ird).arg(&k.version));
    let out = work.join("initramfs.cpio");
    let script = format!(
        "cd '{}' && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --reproducible -R 0:0 --quiet > '{}'",
        ird.display(),
        out.display()
    );
    run(Command::new("sh").args(["-c", &script]));
    let (log, exited, elapsed) = boot(&work, &out, None);
    let log_path = work.join("serial.log");
    println!("boot took {elapsed:?}, log {}", log_path.display());
    assert!(exited, "the test init did not power off; see {}", log_path.display());
    assert!(!log.contains("[modprobe-test] FAILED"), "see {}", log_path.display());
    assert_lines_in_order(
        &log,
        &["[modprobe-test] xfs loaded by the kernel's request", "[modprobe-test] its dependency libcrc32c loaded"],
        &log_path,
    );
}

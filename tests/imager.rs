//! The imager end to end, with the real Debian cloud kernel: builds the image set twice in
//! two directories and checks that every artifact is bit-identical, inspects the artifacts
//! with independent tools (sgdisk, xfs_repair, fsck.fat, unsquashfs, cpio, lz4, objdump),
//! runs the mkfs programs the rootfs carries in a chroot of it (as root) and checks what they
//! made with the host's xfs_repair and fsck.ext4, and builds once more from a kernel and module
//! tree given by path with a dynamic binary.
//! Booting each path is `tests/vm/boot-paths`'s job, on the same artifacts.
//!
//! The images are built by the release static binary `tests/run` makes
//! (`$TALOSBOX_STATIC_BIN`), as a user builds them; without it, by this test's own binary.
//! Needs the host packages from BUILD.md and network access to the Debian mirror on first
//! run (the kernel is cached in /var/cache/talosbox/kernel afterwards). Missing tools fail
//! the test with the imager's "apt-get install ..." message; nothing is skipped silently.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const ARTIFACTS: &[&str] = &[
    "cmdline",
    "disk.raw",
    "initramfs.lz4",
    "kernel-version",
    "rootfs-packages",
    "rootfs.sqsh",
    "talosbox.efi",
    "version",
    "vmlinuz",
];

/// The programs images/qemu.yaml carries, as the node runs them, and the file each one is.
const PROGRAMS: &[(&str, &str)] =
    &[("/usr/sbin/mkfs.xfs", "/usr/sbin/mkfs.xfs"), ("/usr/sbin/mkfs.ext4", "/usr/sbin/mke2fs")];

fn talosbox() -> PathBuf {
    std::env::var_os("TALOSBOX_STATIC_BIN").map(PathBuf::from).unwrap_or_else(|| env!("CARGO_BIN_EXE_talosbox").into())
}

fn profile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("images/qemu.yaml")
}

fn build(out: &Path, extra: &[&str]) {
    let started = Instant::now();
    let status = Command::new(talosbox())
        .args(["imager", "--profile"])
        .arg(profile())
        .arg("--output")
        .arg(out)
        .args(extra)
        .status()
        .expect("starting talosbox imager");
    assert!(status.success(), "talosbox imager --output {} {extra:?} failed: {status}", out.display());
    println!("imager --output {} {extra:?}: {:.1} s", out.display(), started.elapsed().as_secs_f64());
}

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().expect("running sh");
    assert!(out.status.success(), "`{cmd}` failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sums(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("SHA256SUMS")).expect("reading SHA256SUMS")
}

#[test]
fn imager_builds_reproducible_bootable_artifacts() {
    let base = std::env::temp_dir().join(format!("talosbox-imager-test-{}", std::process::id()));
    let (a, b) = (base.join("first"), base.join("second/nested"));
    build(&a, &[]);
    build(&b, &[]);

    // Reproducibility: both builds list every artifact, with equal digests, that match the files.
    let (sa, sb) = (sums(&a), sums(&b));
    for name in ARTIFACTS {
        assert!(sa.lines().any(|l| l.ends_with(&format!("  {name}"))), "SHA256SUMS lacks {name}:\n{sa}");
    }
    assert_eq!(sa, sb, "artifacts differ between {} and {}", a.display(), b.display());
    sh(&format!("cd {} && sha256sum --quiet -c SHA256SUMS", a.display()));
    print!("SHA256SUMS (identical in both builds):\n{sa}");

    // kernel-version names the Debian package and the release.
    let kv = std::fs::read_to_string(a.join("kernel-version")).unwrap();
    assert!(kv.contains("package: linux-image-") && kv.contains("release: "), "{kv}");
    let release = kv.lines().find_map(|l| l.strip_prefix("release: ")).unwrap().to_string();

    // The GPT is valid by sgdisk's own checks and carries Talos's partitions.
    let disk = a.join("disk.raw");
    let verify = sh(&format!("sgdisk -v {}", disk.display()));
    assert!(verify.contains("No problems found"), "sgdisk -v:\n{verify}");
    let table = sh(&format!("sgdisk -p {}", disk.display()));
    for (n, code, name) in [(1, "EF00", "EFI"), (2, "EF02", "BIOS"), (3, "8300", "BOOT"), (4, "8300", "META")] {
        let line = table.lines().find(|l| l.trim_start().starts_with(&format!("{n} "))).unwrap_or_default();
        assert!(line.contains(code) && line.trim_end().ends_with(name), "partition {n}: {line:?}\n{table}");
    }

    // The filesystems pass their own checkers (partitions cut out by their GPT offsets).
    let efi = base.join("efi.part");
    let boot = base.join("boot.part");
    sh(&format!("dd if={} of={} bs=1M skip=1 count=100 status=none", disk.display(), efi.display()));
    sh(&format!("dd if={} of={} bs=1M skip=102 count=1000 conv=sparse status=none", disk.display(), boot.display()));
    let fat = sh(&format!("fsck.fat -n {}", efi.display()));
    assert!(!fat.contains("differences") && !fat.contains("Dirty"), "fsck.fat -n:\n{fat}");
    sh(&format!("mdir -i {} ::/EFI/BOOT | grep -q BOOTX64", efi.display()));
    sh(&format!("xfs_repair -n -f {}", boot.display()));
    let label = sh(&format!("xfs_admin -l {}", boot.display()));
    assert!(label.contains("\"BOOT\""), "xfs label: {label}");
    // BOOT holds slot A (the kernel, initramfs, command line and version of these artifacts),
    // grub.cfg with A's entry, and GRUB's environment block booting A, as grub-editenv reads it.
    let boot_mnt = base.join("boot-mnt");
    std::fs::create_dir_all(&boot_mnt).unwrap();
    sh(&format!("mount -o loop,ro {} {}", boot.display(), boot_mnt.display()));
    let read_boot = |p: &str| std::fs::read(boot_mnt.join(p));
    let slot_a = (read_boot("A/vmlinuz"), read_boot("A/initramfs.lz4"), read_boot("A/cmdline"), read_boot("A/version"));
    let cfg = std::fs::read_to_string(boot_mnt.join("grub/grub.cfg")).unwrap_or_default();
    let env = sh(&format!("grub-editenv {} list", boot_mnt.join("grub/grubenv").display()));
    sh(&format!("umount {}", boot_mnt.display()));
    assert_eq!(slot_a.0.ok(), std::fs::read(a.join("vmlinuz")).ok(), "A/vmlinuz is the kernel");
    assert_eq!(slot_a.1.ok(), std::fs::read(a.join("initramfs.lz4")).ok(), "A/initramfs.lz4 is the initramfs");
    assert_eq!(slot_a.2.ok(), std::fs::read(a.join("cmdline")).ok(), "A/cmdline");
    assert_eq!(slot_a.3.ok(), std::fs::read(a.join("version")).ok(), "A/version");
    assert!(
        cfg.contains("--id A {") && cfg.contains("talosbox.slot=A") && cfg.contains("save_env next_entry"),
        "{cfg}"
    );
    assert!(cfg.contains("set timeout=1\n"), "the profile's timeout: {cfg}");
    assert_eq!(env, "saved_entry=A\n");
    let cmdline = std::fs::read_to_string(a.join("cmdline")).unwrap();
    assert!(cmdline.contains("panic=10"), "a node that panics reboots (and falls back): {cmdline}");

    // The rootfs (a zstd squashfs) holds the binary under its names, os-release, and the
    // module tree machined and the kernel's requests load from, with the start list.
    let rootfs = a.join("rootfs.sqsh");
    let super_block = sh(&format!("unsquashfs -s {}", rootfs.display()));
    assert!(super_block.contains("Compression zstd"), "unsquashfs -s:\n{super_block}");
    let listing = sh(&format!("unsquashfs -l {}", rootfs.display()));
    for path in [
        "squashfs-root/sbin/init".to_string(),
        "squashfs-root/sbin/machined".to_string(),
        "squashfs-root/sbin/modprobe".to_string(),
        "squashfs-root/etc/os-release".to_string(),
        "squashfs-root/etc/talosbox/modules".to_string(),
        "squashfs-root/usr/lib/talosbox/grub/BOOTX64.EFI".to_string(),
        "squashfs-root/usr/lib/talosbox/grub/core.img".to_string(),
        "squashfs-root/usr/lib/talosbox/grub/boot.img".to_string(),
        format!("squashfs-root/lib/modules/{release}/modules.dep"),
        format!("squashfs-root/lib/modules/{release}/modules.alias"),
        format!("squashfs-root/lib/modules/{release}/kernel/fs/xfs/xfs.ko"),
        format!("squashfs-root/lib/modules/{release}/kernel/drivers/net/virtio_net.ko"),
    ] {
        assert!(listing.lines().any(|l| l == path), "unsquashfs -l lacks {path}:\n{listing}");
    }
    // The /etc files machined renders are links into its tmpfs.
    let long = sh(&format!("unsquashfs -ll {}", rootfs.display()));
    for name in ["hosts", "resolv.conf", "hostname"] {
        let want = format!("squashfs-root/etc/{name} -> /system/etc/{name}");
        assert!(long.lines().any(|l| l.ends_with(&want)), "unsquashfs -ll lacks {want}:\n{long}");
    }
    let start_list = sh(&format!("unsquashfs -cat {} etc/talosbox/modules", rootfs.display()));
    assert_eq!(start_list, "virtio-rng\nbutton\nevdev\n");

    carried_programs(&base, &rootfs, &std::fs::read_to_string(a.join("rootfs-packages")).unwrap());

    // The initramfs (lz4, the legacy frame the kernel reads) holds /init, the rootfs, and only the
    // modules that mount it.
    let entries = sh(&format!("lz4 -dc {} | cpio -t --quiet", a.join("initramfs.lz4").display()));
    for path in [
        "init".to_string(),
        "rootfs.sqsh".to_string(),
        "dev/console".to_string(),
        "etc/talosbox/modules".to_string(),
        format!("lib/modules/{release}/modules.dep"),
        format!("lib/modules/{release}/kernel/fs/squashfs/squashfs.ko"),
        format!("lib/modules/{release}/kernel/drivers/block/loop.ko"),
    ] {
        assert!(entries.lines().any(|l| l == path), "cpio -t lacks {path}:\n{entries}");
    }
    let ko: Vec<&str> = entries.lines().filter(|l| l.ends_with(".ko")).collect();
    assert_eq!(ko.len(), 2, "the initramfs carries more than the boot modules: {ko:?}");

    // The UKI has the stub's sections plus ours.
    let sections = sh(&format!("objdump -h {}", a.join("talosbox.efi").display()));
    for s in [".osrel", ".cmdline", ".linux", ".initrd"] {
        assert!(sections.split_whitespace().any(|w| w == s), "objdump -h lacks {s}:\n{sections}");
    }

    // A kernel and module tree by path (no modules.dep: the imager runs depmod on a copy), and
    // a dynamic binary whose shared libraries must travel with it.
    let cache = Path::new("/var/cache/talosbox/kernel");
    let field = |k: &str| kv.lines().find_map(|l| l.strip_prefix(k)).unwrap().to_string();
    let unpacked = cache.join(format!("{}_{}", field("package: "), field("version: ")));
    let tree = base.join(format!("tree/{release}"));
    std::fs::create_dir_all(base.join("tree")).unwrap();
    sh(&format!("cp -r {}/lib/modules/{release} {}", unpacked.display(), tree.display()));
    sh(&format!("rm {}/modules.dep {}/modules.dep.bin", tree.display(), tree.display()));
    // Some modules compressed as nixpkgs ships them: the imager carries them as they are.
    sh(&format!(
        "cd {} && xz --check=crc32 kernel/fs/squashfs/squashfs.ko kernel/drivers/block/loop.ko kernel/fs/xfs/xfs.ko",
        tree.display()
    ));
    let c = base.join("by-path");
    let vmlinuz = unpacked.join(format!("boot/vmlinuz-{release}"));
    build(&c, &["--kernel", vmlinuz.to_str().unwrap(), "--modules", tree.to_str().unwrap(), "--binary", "/bin/true"]);
    assert!(!tree.join("modules.dep").exists(), "the given module tree was modified");
    let kv_c = std::fs::read_to_string(c.join("kernel-version")).unwrap();
    // kernel-version identifies a kernel by path through its content, never its location.
    let vmlinuz_sha = sh(&format!("sha256sum {}", vmlinuz.display()));
    let vmlinuz_sha = vmlinuz_sha.split_whitespace().next().unwrap();
    let lines: Vec<&str> = kv_c.lines().collect();
    assert_eq!(lines.len(), 3, "{kv_c}");
    assert_eq!(lines[0], format!("release: {release}"), "{kv_c}");
    assert_eq!(lines[1], format!("kernel-sha256: {vmlinuz_sha}"), "{kv_c}");
    let modules_sha = lines[2].strip_prefix("modules-sha256: ").unwrap_or_default();
    assert!(modules_sha.len() == 64 && modules_sha.bytes().all(|b| b.is_ascii_hexdigit()), "{kv_c}");
    assert!(!kv_c.contains(base.to_str().unwrap()) && !kv_c.contains("/var/cache"), "{kv_c}");
    let libc_in_rootfs = sh(&format!("unsquashfs -l {} | grep -c 'libc.so.6$'", c.join("rootfs.sqsh").display()));
    assert_eq!(libc_in_rootfs.trim(), "1", "dynamic binary's libc missing from the rootfs");
    let entries_c = sh(&format!("lz4 -dc {} | cpio -t --quiet", c.join("initramfs.lz4").display()));
    assert!(entries_c.lines().any(|l| l.ends_with("libc.so.6")), "libc missing from the initramfs");
    assert!(entries_c.lines().any(|l| l == format!("lib/modules/{release}/modules.dep")));
    assert!(
        entries_c.lines().any(|l| l == format!("lib/modules/{release}/kernel/fs/squashfs/squashfs.ko.xz")),
        "the compressed boot module is missing from the initramfs"
    );
    let rootfs_c = sh(&format!("unsquashfs -l {}", c.join("rootfs.sqsh").display()));
    assert!(
        rootfs_c.lines().any(|l| l == format!("squashfs-root/lib/modules/{release}/kernel/fs/xfs/xfs.ko.xz")),
        "the compressed xfs module is missing from the rootfs"
    );
    let dep_c = sh(&format!("unsquashfs -cat {} lib/modules/{release}/modules.dep", c.join("rootfs.sqsh").display()));
    assert!(dep_c.contains("kernel/fs/xfs/xfs.ko.xz: kernel/lib/libcrc32c.ko"), "depmod did not index it:\n{dep_c}");

    std::fs::remove_dir_all(&base).unwrap();
}

/// The mkfs programs the rootfs carries: there with their mke2fs.conf, every library the host's
/// loader resolves for them (`ldd`, an independent reading) and the loader; their packages in
/// rootfs-packages at the host's versions; and, in a chroot of the extracted rootfs (so nothing
/// of the host's can be loaded), they run and make filesystems the host's checkers accept.
fn carried_programs(base: &Path, rootfs: &Path, manifest: &str) {
    let listing = sh(&format!("unsquashfs -l {}", rootfs.display()));
    let has = |path: &str| listing.lines().any(|l| l == format!("squashfs-root{path}"));
    for path in ["/lib64/ld-linux-x86-64.so.2", "/etc/mke2fs.conf"] {
        assert!(has(path), "unsquashfs -l lacks {path}:\n{listing}");
    }
    for (program, file) in PROGRAMS {
        assert!(has(program) && has(file), "unsquashfs -l lacks {program} or {file}:\n{listing}");
        let ldd = sh(&format!("ldd {file}"));
        let sonames: Vec<&str> =
            ldd.lines().filter_map(|l| l.split_once(" => ").map(|(soname, _)| soname.trim())).collect();
        assert!(sonames.contains(&"libc.so.6"), "ldd {file}:\n{ldd}");
        for soname in sonames {
            let found =
                ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"].iter().any(|d| has(&format!("{d}/{soname}")));
            assert!(found, "{file} needs {soname}, which the rootfs lacks:\n{listing}");
        }
    }
    let long = sh(&format!("unsquashfs -ll {}", rootfs.display()));
    assert!(long.lines().any(|l| l.ends_with("squashfs-root/usr/sbin/mkfs.ext4 -> mke2fs")), "{long}");

    for package in ["xfsprogs", "e2fsprogs", "libc6"] {
        let version = sh(&format!("dpkg-query -W -f '${{Version}}' {package}"));
        let want = [format!("package: {package} {version}"), format!("package: {package}:amd64 {version}")];
        assert!(manifest.lines().any(|l| want.iter().any(|w| l == w)), "rootfs-packages lacks {want:?}:\n{manifest}");
    }
    for (program, _) in PROGRAMS {
        assert!(
            manifest.lines().any(|l| l.contains(&format!(" {program} "))),
            "rootfs-packages lacks {program}:\n{manifest}"
        );
    }

    assert!(
        rustix::process::geteuid().is_root(),
        "running the carried programs needs root (chroot); run the imager tests as root as CI does"
    );
    let root = base.join("rootfs-root");
    sh(&format!("unsquashfs -q -d {} {}", root.display(), rootfs.display()));
    for name in ["xfs.img", "ext4.img"] {
        sh(&format!("truncate -s 300M {}/tmp/{name}", root.display()));
    }
    // In a mount namespace of its own (gone with the process, even on failure), with /proc
    // mounted as on a node, and an empty environment: nothing of the host's reaches them.
    let script = format!(
        "set -e; mount -t proc proc {r}/proc; c=$(command -v chroot); \
         env -i $c {r} /usr/sbin/mkfs.xfs -V; \
         env -i $c {r} /usr/sbin/mkfs.xfs -q -f -L XFSTEST /tmp/xfs.img; \
         env -i $c {r} /usr/sbin/mkfs.ext4 -q -F -L EXT4TEST /tmp/ext4.img",
        r = root.display()
    );
    let version = sh(&format!("unshare --mount --fork sh -c '{script}'"));
    assert!(version.starts_with("mkfs.xfs version "), "mkfs.xfs -V in the chroot: {version:?}");
    println!("in a chroot of the rootfs: {}", version.trim());
    let (xfs, ext4) = (root.join("tmp/xfs.img"), root.join("tmp/ext4.img"));
    sh(&format!("xfs_repair -n -f {}", xfs.display()));
    let fsck = sh(&format!("fsck.ext4 -n -f {}", ext4.display()));
    assert!(fsck.contains("Pass 5"), "fsck.ext4 -n did not check the whole filesystem:\n{fsck}");
    for (img, kind, label) in [(&xfs, "xfs", "XFSTEST"), (&ext4, "ext4", "EXT4TEST")] {
        let probe = sh(&format!("blkid -o export {}", img.display()));
        assert!(probe.lines().any(|l| l == format!("TYPE={kind}")), "blkid {}:\n{probe}", img.display());
        assert!(probe.lines().any(|l| l == format!("LABEL={label}")), "blkid {}:\n{probe}", img.display());
    }
    // mke2fs made ext4 by its name, with the features mke2fs.conf gives ext4.
    let features = sh(&format!("dumpe2fs -h {} 2>/dev/null | grep '^Filesystem features:'", ext4.display()));
    for f in ["has_journal", "extent", "metadata_csum", "64bit"] {
        assert!(features.split_whitespace().any(|w| w == f), "ext4 lacks {f}: {features}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

//! The imager end to end, with the real Debian cloud kernel: builds the image set twice in
//! two directories and checks that every artifact is bit-identical, then inspects the
//! artifacts with independent tools (sgdisk, unsquashfs, cpio, objdump).
//!
//! Needs the host packages from BUILD.md and network access to the Debian mirror on first
//! run (the kernel is cached in /var/cache/talosbox/kernel afterwards). Missing tools fail
//! the test with the imager's "apt-get install ..." message; nothing is skipped silently.

use std::path::{Path, PathBuf};
use std::process::Command;

const ARTIFACTS: &[&str] = &["disk.raw", "initramfs.xz", "kernel-version", "rootfs.sqsh", "talosbox.efi", "vmlinuz"];

fn talosbox() -> &'static str {
    env!("CARGO_BIN_EXE_talosbox")
}

fn profile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("images/qemu.yaml")
}

fn build(out: &Path) {
    let status = Command::new(talosbox())
        .args(["imager", "--profile"])
        .arg(profile())
        .arg("--output")
        .arg(out)
        .status()
        .expect("starting talosbox imager");
    assert!(status.success(), "talosbox imager --output {} failed: {status}", out.display());
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
    build(&a);
    build(&b);

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

    // The rootfs holds the binary and os-release.
    let listing = sh(&format!("unsquashfs -l {}", a.join("rootfs.sqsh").display()));
    for path in ["squashfs-root/sbin/init", "squashfs-root/etc/os-release", "squashfs-root/sbin/machined"] {
        assert!(listing.lines().any(|l| l == path), "unsquashfs -l lacks {path}:\n{listing}");
    }

    // The initramfs holds /init, the rootfs, module data and the load list.
    let entries = sh(&format!("xz -dc {} | cpio -t --quiet", a.join("initramfs.xz").display()));
    for path in [
        "init".to_string(),
        "rootfs.sqsh".to_string(),
        "dev/console".to_string(),
        "etc/talosbox/modules".to_string(),
        format!("lib/modules/{release}/modules.dep"),
        format!("lib/modules/{release}/modules.alias"),
        format!("lib/modules/{release}/kernel/fs/squashfs/squashfs.ko"),
    ] {
        assert!(entries.lines().any(|l| l == path), "cpio -t lacks {path}:\n{entries}");
    }

    // The UKI has the stub's sections plus ours.
    let sections = sh(&format!("objdump -h {}", a.join("talosbox.efi").display()));
    for s in [".osrel", ".cmdline", ".linux", ".initrd"] {
        assert!(sections.split_whitespace().any(|w| w == s), "objdump -h lacks {s}:\n{sections}");
    }

    std::fs::remove_dir_all(&base).unwrap();
}

//! The imager end to end, with the real Debian cloud kernel: builds the image set twice in
//! two directories and checks that every artifact is bit-identical, inspects the artifacts
//! with independent tools (sgdisk, xfs_repair, fsck.fat, unsquashfs, cpio, objdump), boots
//! each path under QEMU (TCG) until the kernel hands over to `/init`, and builds once more
//! from a kernel and module tree given by path with a dynamic binary.
//!
//! Needs the host packages from BUILD.md and network access to the Debian mirror on first
//! run (the kernel is cached in /var/cache/talosbox/kernel afterwards). Missing tools fail
//! the test with the imager's "apt-get install ..." message; nothing is skipped silently.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ARTIFACTS: &[&str] = &["disk.raw", "initramfs.xz", "kernel-version", "rootfs.sqsh", "talosbox.efi", "vmlinuz"];

fn talosbox() -> &'static str {
    env!("CARGO_BIN_EXE_talosbox")
}

fn profile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("images/qemu.yaml")
}

fn build(out: &Path, extra: &[&str]) {
    let status = Command::new(talosbox())
        .args(["imager", "--profile"])
        .arg(profile())
        .arg("--output")
        .arg(out)
        .args(extra)
        .status()
        .expect("starting talosbox imager");
    assert!(status.success(), "talosbox imager --output {} {extra:?} failed: {status}", out.display());
}

const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

/// Boots QEMU (TCG) with `args` until the kernel runs `/init` and the binary prints a line
/// naming itself; the serial log is kept in `log` (left behind on failure).
fn boot_reaches_init(log: &Path, args: &[String]) {
    let mut child = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-m", "1024", "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting qemu-system-x86_64 (apt-get install qemu-system-x86)");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            if tx.send(String::from_utf8_lossy(&line).into_owned()).is_err() {
                break;
            }
        }
    });
    let mut file = std::fs::File::create(log).unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    let (mut ran_init, mut ok) = (false, false);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else { break };
        writeln!(file, "{line}").unwrap();
        if line.contains("Run /init as init process") {
            ran_init = true;
        } else if ran_init && line.contains("talosbox") {
            ok = true;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(ok, "boot did not reach /init (ran_init={ran_init}); serial log: {}", log.display());
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

    // Every boot path hands over to /init: kernel+initramfs, UKI under OVMF, the GRUB disk
    // under SeaBIOS and under OVMF.
    let art = |n: &str| a.join(n).display().to_string();
    let vars = |n: &str| {
        let p = base.join(n);
        std::fs::copy(OVMF_VARS, &p).expect("copying OVMF vars (apt-get install ovmf)");
        p.display().to_string()
    };
    let pflash = |vars: String| {
        vec![
            "-drive".to_string(),
            format!("if=pflash,format=raw,readonly=on,file={OVMF_CODE}"),
            "-drive".to_string(),
            format!("if=pflash,format=raw,file={vars}"),
        ]
    };
    let disk_drive = vec!["-drive".to_string(), format!("file={},format=raw,if=virtio,snapshot=on", art("disk.raw"))];
    let direct = vec![
        "-kernel".to_string(),
        art("vmlinuz"),
        "-initrd".to_string(),
        art("initramfs.xz"),
        "-append".to_string(),
        "console=ttyS0".to_string(),
    ];
    let uki = [pflash(vars("uki.vars")), vec!["-kernel".to_string(), art("talosbox.efi")]].concat();
    let grub_uefi = [pflash(vars("grub.vars")), disk_drive.clone()].concat();
    for (name, args) in [("direct", direct), ("uki-ovmf", uki), ("grub-bios", disk_drive), ("grub-ovmf", grub_uefi)] {
        let started = Instant::now();
        boot_reaches_init(&base.join(format!("{name}.log")), &args);
        println!("boot {name}: reached /init in {:.1}s", started.elapsed().as_secs_f64());
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
    let entries_c = sh(&format!("xz -dc {} | cpio -t --quiet", c.join("initramfs.xz").display()));
    assert!(entries_c.lines().any(|l| l.ends_with("libc.so.6")), "libc missing from the initramfs");
    assert!(entries_c.lines().any(|l| l == format!("lib/modules/{release}/modules.dep")));

    std::fs::remove_dir_all(&base).unwrap();
}

//! The binary's dispatch by name: symlinks, `talosbox <applet>`, unknown names, links.

use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_talosbox"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("talosbox-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn talosctl_symlink_shows_talosctl_help() {
    let dir = scratch("symlink");
    let link = dir.join("talosctl");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let out = Command::new(&link).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let help = text(&out);
    assert!(help.contains("Usage: talosctl"), "{help}");
    assert!(help.contains("version"), "{help}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn talosbox_talosctl_version_equals_symlinked_talosctl_version() {
    let via_arg = Command::new(bin()).args(["talosctl", "version", "--client"]).output().unwrap();
    let dir = scratch("version");
    let link = dir.join("talosctl");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let via_link = Command::new(&link).args(["version", "--client"]).output().unwrap();
    assert!(via_arg.status.success() && via_link.status.success());
    assert_eq!(via_arg.stdout, via_link.stdout);
    assert!(text(&via_arg).contains(concat!("Tag:         v", env!("CARGO_PKG_VERSION"))), "{}", text(&via_arg));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unknown_name_lists_valid_ones_and_exits_2() {
    let out = Command::new(bin()).arg("nosuch").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let msg = text(&out);
    for name in ["init", "machined", "apid", "trustd", "talosctl", "imager", "operator"] {
        assert!(msg.contains(name), "{name} missing from {msg}");
    }
}

#[test]
fn version_flag_prints_version_and_commit() {
    let out = Command::new(bin()).arg("--version").output().unwrap();
    assert!(out.status.success());
    let msg = text(&out);
    assert!(msg.starts_with(concat!("talosbox v", env!("CARGO_PKG_VERSION"), " (commit ")), "{msg}");
}

#[test]
fn install_links_makes_working_symlinks() {
    let dir = scratch("links");
    let out = Command::new(bin()).arg("install-links").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let talosctl = dir.join("talosctl");
    for node_only in ["init", "machined", "reboot", "poweroff", "shutdown"] {
        assert!(!dir.join(node_only).exists(), "{node_only} would shadow the workstation's own command");
    }
    assert_eq!(std::fs::read_link(&talosctl).unwrap(), bin().canonicalize().unwrap());
    // Running it twice replaces the links rather than failing.
    let again = Command::new(bin()).arg("install-links").arg(&dir).output().unwrap();
    assert!(again.status.success(), "{}", text(&again));
    let out = Command::new(&talosctl).args(["version", "--short"]).output().unwrap();
    assert!(text(&out).contains("Client v"), "{}", text(&out));
    let missing = Command::new(bin()).arg("install-links").output().unwrap();
    assert_eq!(missing.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn machined_prints_the_controller_graph_of_each_mode() {
    for set in ["node", "container"] {
        let out = Command::new(bin()).args(["machined", "--dependency-graph", set]).output().unwrap();
        assert!(out.status.success(), "{set}: {}", text(&out));
        let dot = String::from_utf8_lossy(&out.stdout);
        assert!(dot.starts_with("digraph controllers {"), "{set}: {dot}");
        for controller in ["KernelCmdlineController", "MachineStatusController", "ServiceController"] {
            assert!(dot.contains(&format!("\"{controller}\" [shape=box]")), "{set}: {controller} missing from {dot}");
        }
        assert!(dot.contains("\"MachineStatuses.runtime.talos.dev\" [shape=ellipse]"), "{dot}");
    }
}

#[test]
fn talosctl_validate_checks_a_config_with_volume_documents() {
    let dir = scratch("validate");
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/config/testdata/talos/v1.15/base-worker.yaml"
    ))
    .unwrap();
    let volumes = "---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n  diskSelector:\n    match: '!system_disk'\n  minSize: 10GiB\n  maxSize: 90%\nencryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      nodeID: {}\n\
                   ---\napiVersion: v1alpha1\nkind: RawVolumeConfig\nname: raw\nprovisioning:\n  diskSelector:\n    match: 'true'\n  maxSize: -1GiB\n\
                   ---\napiVersion: v1alpha1\nkind: SwapVolumeConfig\nname: swap\nprovisioning:\n  diskSelector:\n    match: system_disk\n  maxSize: 2GiB\n";
    let good = dir.join("good.yaml");
    std::fs::write(&good, format!("{base}{volumes}")).unwrap();
    let run = |file: &std::path::Path, extra: &[&str]| {
        Command::new(bin()).args(["talosctl", "validate", "-m", "metal", "-c"]).arg(file).args(extra).output().unwrap()
    };
    let out = run(&good, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{} is valid for metal mode\n", good.display()));

    // A warning passes, unless --strict.
    let cache = dir.join("cache.yaml");
    std::fs::write(&cache, format!("{base}---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: IMAGECACHE\n")).unwrap();
    let out = run(&cache, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("WARNING: VolumeConfig IMAGECACHE: accepted and kept, not acted on"), "{}", text(&out));
    let out = run(&cache, &["--strict"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, format!("{base}---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n  diskSelector:\n    match: 'true'\n  minSize: 10 parsecs\n")).unwrap();
    let out = run(&bad, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("UserVolumeConfig data: provisioning.minSize: \"10 parsecs\" is not a size"),
        "{}",
        text(&out)
    );
    // A selector that does not compile is refused with the document and the field.
    let cel = dir.join("cel.yaml");
    std::fs::write(&cel, format!("{base}---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n  diskSelector:\n    match: disk.size > 10\n  minSize: 1GiB\n")).unwrap();
    let out = run(&cel, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out)
            .contains("UserVolumeConfig data: provisioning.diskSelector.match: CEL expression \"disk.size > 10\""),
        "{}",
        text(&out)
    );
    let out = Command::new(bin()).args(["talosctl", "validate", "-m", "moon", "-c"]).arg(&good).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("unknown runtime mode: \"moon\""), "{}", text(&out));
    let _ = std::fs::remove_dir_all(dir);
}

fn talosbox_talosctl(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("talosctl")
        .args(args)
        .current_dir(dir)
        .env("TALOSCONFIG", dir.join("talosconfig"))
        .output()
        .unwrap()
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn gen_secrets_force_over_a_0644_file_leaves_it_0600() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("gen-secrets-mode");
    let path = dir.join("secrets.yaml");
    std::fs::write(&path, "old: text\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = talosbox_talosctl(&dir, &["gen", "secrets", "-o", "secrets.yaml", "--force"]);
    assert!(out.status.success(), "{}", text(&out));
    println!("secrets.yaml: 0644 before, {:o} after gen secrets --force", mode(&path));
    assert_eq!(mode(&path), 0o600);
    assert!(std::fs::read_to_string(&path).unwrap().contains("certs:"));
    // So does every file gen config --force writes over.
    for name in ["controlplane.yaml", "worker.yaml", "talosconfig"] {
        std::fs::write(dir.join(name), "old\n").unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let out = talosbox_talosctl(
        &dir,
        &["gen", "config", "c", "https://10.5.0.2:6443", "--with-secrets", "secrets.yaml", "--force"],
    );
    assert!(out.status.success(), "{}", text(&out));
    for name in ["controlplane.yaml", "worker.yaml", "talosconfig"] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn gen_config_refuses_a_dangling_symlink_and_writes_nothing() {
    let dir = scratch("gen-config-symlink");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let target = dir.join("stolen.yaml");
    let link = out_dir.join("controlplane.yaml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for force in [false, true] {
        let mut args = vec!["gen", "config", "c", "https://10.5.0.2:6443", "-o", "out"];
        if force {
            args.push("--force");
        }
        let out = talosbox_talosctl(&dir, &args);
        let said = text(&out);
        println!("gen config -o out{}: {}", if force { " --force" } else { "" }, said.trim());
        assert!(!out.status.success(), "{said}");
        assert!(said.contains(&link.display().to_string()) || said.contains("out/controlplane.yaml"), "{said}");
        assert!(said.contains("symbolic link"), "{said}");
        assert!(!target.exists(), "the link's target was written");
        for name in ["worker.yaml", "talosconfig"] {
            assert!(!out_dir.join(name).exists(), "{name} was written");
        }
    }
    // gen secrets too, dangling or not.
    let out = talosbox_talosctl(&dir, &["gen", "secrets", "-o", "out/controlplane.yaml", "--force"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    assert!(!target.exists());
    let _ = std::fs::remove_dir_all(dir);
}

//! The volume controllers over a real disk: a loop device carrying what an installer leaves
//! (a GPT with META, and an old ext4 partition), and a machine configuration with a user
//! volume of each type, a raw volume, a swap volume and an existing volume. The controllers
//! (devices, disks, discovery, system disk, volume config, volume manager, mount request,
//! mount) run as on a node, seeing only this loop device, and mount under a scratch root.
//! Checked against real peers: sgdisk for the partitions, blkid for what is on them, the
//! kernel's mount table and `/proc/swaps` for the mounts. Then documents are removed and put
//! back: mounts go, partitions and data stay.
//!
//! Needs root (loop devices, mount, swapon); without it the test fails loudly. Everything is
//! unmounted, swapped off and detached at the end, also when an assertion fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use talosbox::block::gpt::{Guid, Table};
use talosbox::block::tpm_key::NodeTpm;
use talosbox::client::kms::GrpcKms;
use talosbox::controllers::block::{
    DevicesController, DiscoveryController, DisksController, MountController, MountRequestController,
    MountStatusController, SystemDiskController, VolumeConfigController, VolumeManagerController,
};
use talosbox::controllers::config::machine_config::parse;
use talosbox::cosi::{Controller, Harness, Resource};
use talosbox::kernel::blockdev::BlockDevice;
use talosbox::kernel::{loopdev, mount, swap};
use talosbox::resources::block::{
    FilesystemType, MountStatus, NAMESPACE, VolumeConfig, VolumeLifecycle, VolumeMountStatus, VolumePhase,
    VolumeStatus, VolumeType,
};
use talosbox::resources::config::{self as cfg, MachineConfig};
use talosbox::services::{ReapMode, Reaper};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const LINUX: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";

fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "kernel_volumes tests need root (loop devices, mount, swapon); run them as root as CI does"
    );
}

/// The test's directory, disk and mounts; undone on drop, even after a failed assertion:
/// swap off, every mount under the root taken down (deepest first), the directory removed.
/// The loop device detaches itself once its last user is gone (autoclear).
struct Scratch {
    dir: PathBuf,
    disk: String,
}

impl Scratch {
    /// A fresh directory `talosbox-<name>-<pid>` under the temporary directory.
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("talosbox-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the scratch directory");
        Scratch { dir, disk: String::new() }
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.undo();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Scratch {
    fn undo(&self) {
        if !self.disk.is_empty() {
            let prefix = format!("/dev/{}p", self.disk);
            let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
            for device in swap::parse_swaps(&swaps) {
                if device.to_string_lossy().starts_with(&prefix) {
                    let _ = swap::off(&device);
                }
            }
        }
        let mut mounted: Vec<PathBuf> =
            mounts().into_iter().map(|m| m.target).filter(|t| t.starts_with(&self.dir)).collect();
        mounted.sort_by_key(|t| std::cmp::Reverse(t.components().count()));
        for t in mounted {
            let _ = rustix::mount::unmount(&t, rustix::mount::UnmountFlags::DETACH);
        }
    }
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone)]
struct Mount {
    /// The path inside the mounted filesystem that is mounted (a bind mount's source).
    root: String,
    target: PathBuf,
    options: Vec<String>,
    source: String,
    fstype: String,
}

fn mounts() -> Vec<Mount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("reading mountinfo");
    let unescape = |s: &str| s.replace("\\040", " ");
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            Some(Mount {
                root: unescape(f.get(3)?),
                target: PathBuf::from(unescape(f.get(4)?)),
                options: f.get(5)?.split(',').map(str::to_string).collect(),
                fstype: r.first()?.to_string(),
                source: r.get(1)?.to_string(),
            })
        })
        .collect()
}

fn mount_at(target: &Path) -> Option<Mount> {
    mounts().into_iter().rev().find(|m| m.target == target)
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

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// blkid's low-level probe of a device, as `KEY=value` pairs (empty: nothing found).
fn blkid(device: &str) -> BTreeMap<String, String> {
    let out = Command::new("blkid").args(["-p", "-o", "export", device]).output().expect("running blkid");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// sgdisk's view of partition `n`: (name, type GUID, unique GUID).
fn sgdisk_partition(image: &Path, n: u32) -> (String, String, String) {
    let info = run(Command::new("sgdisk").arg(format!("-i{n}")).arg(image));
    let field = |key: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {key:?} in sgdisk -i{n}:\n{info}"))
    };
    let type_guid = field("Partition GUID code:").split_whitespace().next().unwrap_or_default().to_string();
    (field("Partition name:").trim_matches('\'').to_string(), type_guid, field("Partition unique GUID:"))
}

const MACHINE: &str = "version: v1alpha1\nmachine:\n  type: worker\n";

fn doc(kind: &str, body: &str) -> String {
    format!("---\napiVersion: v1alpha1\nkind: {kind}\n{body}")
}

fn config(docs: &[String]) -> MachineConfig {
    parse(&format!("{MACHINE}{}", docs.concat())).unwrap()
}

fn ready(r: Option<&Resource<VolumeStatus>>) -> bool {
    r.is_some_and(|r| r.spec().phase == VolumePhase::Ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_documents_become_partitions_mounts_and_swap_on_a_loop_disk() {
    require_root();
    let mut scratch = Scratch::new("volumes");
    let image = scratch.dir.join("disk.img");
    std::fs::File::create(&image).and_then(|f| f.set_len(3 * GIB)).expect("creating the disk image");

    // What an installer leaves: META, and here an older data partition with a file on it.
    let device = loopdev::attach_for_partitioning(&image, Path::new("/dev")).expect("attaching the disk image");
    let name = format!("loop{}", device.number());
    scratch.disk = name.clone();
    let part = |n: u32| format!("/dev/{name}p{n}");
    let disk = BlockDevice::open(device.path()).expect("opening the loop device");
    let linux = Guid::parse(LINUX).unwrap();
    let mut table = Table::new(Guid::derived(b"kernel_volumes disk"), 3 * GIB).unwrap();
    let meta = table.add_partition("META", linux, Guid::derived(b"META"), MIB, MIB, false).unwrap();
    let old = table.add_partition("old-data", linux, Guid::derived(b"old-data"), 64 * MIB, 64 * MIB, false).unwrap();
    table.write(disk.file()).expect("writing the GPT");
    for p in [&meta, &old] {
        disk.add_partition(p.number, p.offset, p.size).expect("BLKPG_ADD_PARTITION");
    }
    assert!(wait_for(Path::new(&part(2))), "{} did not appear", part(2));
    run(Command::new("mkfs.ext4").args(["-q", "-L", "OLD"]).arg(part(2)));
    let old_uuid = blkid(&part(2)).get("UUID").cloned().expect("the old volume's UUID");
    let staging = scratch.dir.join("staging");
    mount::mount_spec(&mount::MountSpec {
        fstype: "ext4",
        source: &part(2),
        target: &staging,
        flags: rustix::mount::MountFlags::empty(),
        data: None,
    })
    .expect("mounting the old volume to fill it");
    std::fs::write(staging.join("hello"), "kept from before\n").unwrap();
    mount::unmount(&staging).expect("unmounting the old volume");

    // A second, blank disk for a whole-disk user volume.
    let blank = scratch.dir.join("blank.img");
    std::fs::File::create(&blank).and_then(|f| f.set_len(256 * MIB)).expect("creating the blank disk image");
    let blank_device = loopdev::attach_for_partitioning(&blank, Path::new("/dev")).expect("attaching the blank disk");
    let blank_name = format!("loop{}", blank_device.number());
    let blank_path = format!("/dev/{blank_name}");

    let reaper = Reaper::new(ReapMode::Own);
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(reaper.clone().run(cancel.clone()));
    let root = scratch.root();
    let controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(DevicesController::new().only([name.clone(), blank_name.clone()])),
        Box::new(DisksController::new()),
        Box::new(DiscoveryController::new()),
        Box::new(SystemDiskController),
        Box::new(VolumeConfigController),
        Box::new(VolumeManagerController::new(reaper, Arc::new(GrpcKms), Arc::new(NodeTpm))),
        Box::new(MountRequestController),
        Box::new(MountController::under(root.clone())),
        Box::new(MountStatusController),
    ];
    let h = Harness::start(controllers).unwrap().with_timeout(Duration::from_secs(240));
    let h = &h;
    // What machined makes at boot: volumes stay open while it stands.
    h.seed(NAMESPACE, VolumeLifecycle::ID, VolumeLifecycle::default()).unwrap();

    // Without a configuration only META and STATE, and STATE is only looked for: it is made
    // once a configuration says how (it may encrypt it).
    h.assert_eventually::<VolumeStatus, _>(NAMESPACE, "META", "META ready", ready).await;
    h.assert_eventually::<VolumeStatus, _>(NAMESPACE, "STATE", "STATE missing", |r| {
        r.is_some_and(|r| r.spec().phase == VolumePhase::Missing)
    })
    .await;
    assert!(h.state().get::<VolumeConfig>(NAMESPACE, "EPHEMERAL").is_err(), "no EPHEMERAL before a configuration");

    let ephemeral = doc("VolumeConfig", "name: EPHEMERAL\nprovisioning:\n  minSize: 2GiB\n  grow: false\n");
    let data = doc(
        "UserVolumeConfig",
        "name: data\nprovisioning:\n  diskSelector:\n    match: system_disk\n  minSize: 400MiB\n  maxSize: 400MiB\n",
    );
    let logs = doc(
        "UserVolumeConfig",
        "name: logs\nprovisioning:\n  diskSelector:\n    match: system_disk && disk.size > 2u * GiB\n  minSize: 100MiB\nfilesystem:\n  type: ext4\nmount:\n  disableAccessTime: true\n",
    );
    let scratch_dir = doc("UserVolumeConfig", "name: scratch\nvolumeType: directory\n");
    let whole = doc(
        "UserVolumeConfig",
        &format!(
            "name: whole\nvolumeType: disk\nprovisioning:\n  diskSelector:\n    match: disk.dev_path == '{blank_path}'\n"
        ),
    );
    let raw = doc(
        "RawVolumeConfig",
        "name: raw\nprovisioning:\n  diskSelector:\n    match: system_disk\n  minSize: 64MiB\n  maxSize: 64MiB\n",
    );
    let swap_doc = doc(
        "SwapVolumeConfig",
        "name: swap\nprovisioning:\n  diskSelector:\n    match: system_disk\n  minSize: 64MiB\n  maxSize: 64MiB\n",
    );
    let existing = |read_only: bool| {
        doc(
            "ExistingVolumeConfig",
            &format!(
                "name: old\ndiscovery:\n  volumeSelector:\n    match: volume.partition_label == \"old-data\"\nmount:\n  readOnly: {read_only}\n"
            ),
        )
    };
    let all = [
        ephemeral.clone(),
        data.clone(),
        logs.clone(),
        scratch_dir.clone(),
        whole.clone(),
        raw.clone(),
        swap_doc.clone(),
        existing(true),
    ];
    h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, config(&all)).unwrap();

    for id in [
        "META",
        "STATE",
        "EPHEMERAL",
        "/var/mnt",
        "u-data",
        "u-logs",
        "u-scratch",
        "u-whole",
        "r-raw",
        "s-swap",
        "e-old",
    ] {
        h.assert_eventually::<VolumeStatus, _>(NAMESPACE, id, &format!("{id} ready"), ready).await;
    }
    let mounted = [
        ("STATE", "/system/state"),
        ("EPHEMERAL", "/var"),
        ("/var/mnt", "/var/mnt"),
        ("u-data", "/var/mnt/data"),
        ("u-logs", "/var/mnt/logs"),
        ("u-scratch", "/var/mnt/scratch"),
        ("u-whole", "/var/mnt/whole"),
        ("e-old", "/var/mnt/old"),
        ("s-swap", "/"),
    ];
    for (id, target) in mounted {
        let m = h
            .assert_eventually::<MountStatus, _>(NAMESPACE, id, &format!("{id} at {target}"), |r| {
                r.is_some_and(|r| r.spec().target == target)
            })
            .await
            .unwrap();
        assert_eq!(m.spec().volume_id, id);
    }
    assert!(h.state().get::<MountStatus>(NAMESPACE, "r-raw").is_err(), "a raw volume is not mounted");
    assert!(h.state().get::<MountStatus>(NAMESPACE, "META").is_err());

    // The partitions, as sgdisk reads the table: the installer's two, then the node's in
    // Talos's order (wave -1 before 0; fixed sizes, smaller first, before those without).
    let table_check = run(Command::new("sgdisk").arg("-v").arg(&image));
    assert!(table_check.contains("No problems found"), "sgdisk -v:\n{table_check}");
    let swap_type = "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F";
    let want = [
        (1, "META", LINUX),
        (2, "old-data", LINUX),
        (3, "STATE", LINUX),
        (4, "EPHEMERAL", LINUX),
        (5, "r-raw", LINUX),
        (6, "s-swap", swap_type),
        (7, "u-data", LINUX),
        (8, "u-logs", LINUX),
    ];
    let mut part_guids = BTreeMap::new();
    for (n, label, type_guid) in want {
        let (got_label, got_type, unique) = sgdisk_partition(&image, n);
        assert_eq!((got_label.as_str(), got_type.as_str()), (label, type_guid), "partition {n}");
        part_guids.insert(label, unique);
    }
    let table = Table::read(disk.file(), 3 * GIB).unwrap().expect("the GPT");
    let size_of = |label: &str| table.partitions().into_iter().find(|p| p.partition.name == label).map(|p| p.size);
    assert_eq!(size_of("EPHEMERAL"), Some(2 * GIB), "EPHEMERAL as its VolumeConfig says: 2 GiB, not grown");
    assert_eq!(size_of("u-data"), Some(400 * MIB));
    assert_eq!(size_of("u-logs"), Some(100 * MIB), "Talos's minimum for a user volume");
    assert_eq!((size_of("r-raw"), size_of("s-swap")), (Some(64 * MIB), Some(64 * MIB)));

    // What is on them, as blkid reads it.
    let on = |n: u32| blkid(&part(n));
    assert_eq!(on(3).get("LABEL").map(String::as_str), Some("STATE"));
    assert_eq!(on(4).get("TYPE").map(String::as_str), Some("xfs"));
    assert_eq!(on(5).get("TYPE"), None, "the raw volume holds nothing: {:?}", on(5));
    assert_eq!(on(5).get("PART_ENTRY_NAME").map(String::as_str), Some("r-raw"));
    assert_eq!(on(6).get("TYPE").map(String::as_str), Some("swap"));
    assert_eq!(on(6).get("VERSION").map(String::as_str), Some("1"));
    let data_ids = on(7);
    assert_eq!(data_ids.get("TYPE").map(String::as_str), Some("xfs"));
    assert_eq!(data_ids.get("LABEL"), None, "Talos gives a user volume's filesystem no label");
    assert_eq!(data_ids.get("PART_ENTRY_NAME").map(String::as_str), Some("u-data"));
    assert_eq!(on(8).get("TYPE").map(String::as_str), Some("ext4"));
    assert_eq!(on(2).get("UUID"), Some(&old_uuid), "the existing volume is never formatted");
    // A volume formatted at this boot reports its filesystem's UUID at once, as blkid reads
    // it, not only after a reboot's discovery; the existing one the UUID it was found with.
    for (id, n) in [("STATE", 3), ("EPHEMERAL", 4), ("s-swap", 6), ("u-data", 7), ("u-logs", 8), ("e-old", 2)] {
        let status = h.state().get::<VolumeStatus>(NAMESPACE, id).unwrap();
        let want = on(n).get("UUID").cloned().unwrap_or_else(|| panic!("{id}: blkid found no UUID on {}", part(n)));
        assert_eq!(status.spec().uuid, want, "{id}'s VolumeStatus uuid");
    }

    // The mounts, as the kernel has them.
    let var = root.join("var");
    let m = mount_at(&root.join("system/state")).expect("STATE in the mount table");
    assert!(["nosuid", "nodev", "noexec"].iter().all(|o| m.options.iter().any(|x| x == o)), "{m:?}");
    let m = mount_at(&var).expect("EPHEMERAL in the mount table");
    assert_eq!((m.source.as_str(), m.fstype.as_str()), (part(4).as_str(), "xfs"));
    assert!(m.options.iter().any(|o| o == "nosuid") && !m.options.iter().any(|o| o == "noexec"), "{m:?}");
    let data_path = var.join("mnt/data");
    let m = mount_at(&data_path).expect("u-data in the mount table");
    assert_eq!((m.source.as_str(), m.fstype.as_str()), (part(7).as_str(), "xfs"));
    assert!(["rw", "nosuid", "nodev", "noexec"].iter().all(|o| m.options.iter().any(|x| x == o)), "{m:?}");
    let m = mount_at(&var.join("mnt/logs")).expect("u-logs in the mount table");
    assert_eq!(m.fstype, "ext4");
    assert!(m.options.iter().any(|o| o == "noatime"), "disableAccessTime: {m:?}");
    let m = mount_at(&var.join("mnt/scratch")).expect("the directory volume, bound onto itself");
    assert_eq!((m.root.as_str(), m.source.as_str()), ("/mnt/scratch", part(4).as_str()), "{m:?}");
    assert!(m.options.iter().any(|o| o == "noexec"), "{m:?}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(var.join("mnt/scratch")).unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(std::fs::metadata(&data_path).unwrap().permissions().mode() & 0o777, 0o755);
    let whole_ids = blkid(&blank_path);
    assert_eq!(whole_ids.get("TYPE").map(String::as_str), Some("xfs"), "the whole disk formatted: {whole_ids:?}");
    assert_eq!(whole_ids.get("PTTYPE"), None, "and not partitioned");
    let m = mount_at(&var.join("mnt/whole")).expect("the whole-disk volume in the mount table");
    assert_eq!((m.source.as_str(), m.fstype.as_str()), (blank_path.as_str(), "xfs"));
    let old_path = var.join("mnt/old");
    let m = mount_at(&old_path).expect("the existing volume in the mount table");
    assert_eq!((m.source.as_str(), m.fstype.as_str()), (part(2).as_str(), "ext4"));
    assert!(m.options.iter().any(|o| o == "ro"), "readOnly: {m:?}");
    assert_eq!(std::fs::read_to_string(old_path.join("hello")).unwrap(), "kept from before\n");
    let refused = std::fs::write(old_path.join("new"), "x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(rustix::io::Errno::ROFS.raw_os_error()), "{refused}");
    let e_old = h.state().get::<MountStatus>(NAMESPACE, "e-old").unwrap();
    assert!(e_old.spec().read_only && e_old.spec().filesystem == FilesystemType::Ext4, "{:?}", e_old.spec());
    assert!(
        swap::is_active(Path::new(&part(6))),
        "swap on {}: {}",
        part(6),
        std::fs::read_to_string("/proc/swaps").unwrap()
    );
    let statuses = h.state().list::<VolumeStatus>(NAMESPACE);
    let kind_of = |id: &str| statuses.iter().find(|r| r.id() == id).map(|r| r.spec().kind);
    assert_eq!(kind_of("u-scratch"), Some(VolumeType::Directory));
    std::fs::write(data_path.join("file"), "written on u-data\n").unwrap();

    // Documents taken away: their volumes are unmounted (swap off) and their configs go; the
    // existing volume stays, and is remounted read-write as its document now says.
    h.seed(
        cfg::NAMESPACE,
        MachineConfig::ACTIVE_ID,
        config(&[ephemeral.clone(), logs.clone(), raw.clone(), existing(false)]),
    )
    .unwrap();
    for id in ["u-data", "u-scratch", "u-whole", "s-swap"] {
        h.assert_absent::<VolumeConfig>(NAMESPACE, id).await;
        h.assert_absent::<VolumeStatus>(NAMESPACE, id).await;
        h.assert_absent::<MountStatus>(NAMESPACE, id).await;
    }
    assert!(mount_at(&data_path).is_none(), "u-data still mounted");
    assert!(mount_at(&var.join("mnt/scratch")).is_none(), "the directory still bound");
    assert!(var.join("mnt/scratch").is_dir(), "the directory itself stays");
    assert!(!swap::is_active(Path::new(&part(6))), "swap still on");
    h.assert_eventually::<MountStatus, _>(NAMESPACE, "e-old", "e-old read-write", |r| {
        r.is_some_and(|r| !r.spec().read_only)
    })
    .await;
    let m = mount_at(&old_path).expect("the existing volume still mounted");
    assert!(m.options.iter().any(|o| o == "rw"), "remounted read-write: {m:?}");
    std::fs::write(old_path.join("new"), "x").expect("writing to the existing volume once read-write");
    assert!(mount_at(&var.join("mnt/logs")).is_some(), "u-logs untouched");
    // Nothing destroyed on the disk.
    for (n, label) in [(6, "s-swap"), (7, "u-data")] {
        let (got, _, unique) = sgdisk_partition(&image, n);
        assert_eq!((got.as_str(), &unique), (label, &part_guids[label]), "partition {n} kept");
    }
    assert_eq!(blkid(&part(7)).get("TYPE").map(String::as_str), Some("xfs"));
    assert_eq!(blkid(&blank_path).get("UUID"), whole_ids.get("UUID"), "the whole disk's filesystem kept");
    assert!(mount_at(&var.join("mnt/whole")).is_none(), "the whole disk unmounted");

    // Put back: the same partition is found again, with what was written on it.
    h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, config(&[ephemeral, logs, raw, existing(false), data])).unwrap();
    h.assert_eventually::<MountStatus, _>(NAMESPACE, "u-data", "u-data mounted again", |r| r.is_some()).await;
    let again = h.state().get::<VolumeStatus>(NAMESPACE, "u-data").unwrap();
    assert_eq!(again.spec().location, part(7));
    assert_eq!(std::fs::read_to_string(data_path.join("file")).unwrap(), "written on u-data\n");
    let table = Table::read(disk.file(), 3 * GIB).unwrap().expect("the GPT");
    assert_eq!(table.partitions().len(), 8, "no partition was made again");

    // Each requester sees its mount.
    let seen = h
        .assert_eventually::<VolumeMountStatus, _>(NAMESPACE, "u-data", "u-data's mount status", |r| r.is_some())
        .await
        .unwrap();
    assert_eq!((seen.spec().volume_id.as_str(), seen.spec().target.as_str()), ("u-data", "/var/mnt/data"));
    assert!(seen.spec().secure, "{:?}", seen.spec());
    let lifecycle = h.state().get::<VolumeLifecycle>(NAMESPACE, VolumeLifecycle::ID).unwrap();
    assert!(lifecycle.metadata().finalizers.contains("VolumeManagerController"), "held while open");

    // Shutdown: the lifecycle torn down closes every volume but META, children unmounted
    // before their parents, and is let go once nothing is mounted.
    h.state().teardown::<VolumeLifecycle>(NAMESPACE, VolumeLifecycle::ID, "").unwrap();
    h.assert_eventually::<VolumeLifecycle, _>(NAMESPACE, VolumeLifecycle::ID, "the lifecycle let go", |r| {
        r.is_some_and(|r| r.metadata().finalizers.is_empty())
    })
    .await;
    for r in h.state().list::<VolumeStatus>(NAMESPACE) {
        let want = if r.id() == "META" { VolumePhase::Ready } else { VolumePhase::Closed };
        assert_eq!(r.spec().phase, want, "{}", r.id());
    }
    let left: Vec<PathBuf> = mounts().into_iter().map(|m| m.target).filter(|t| t.starts_with(&root)).collect();
    assert!(left.is_empty(), "still mounted after the close: {left:?}");
    assert!(h.state().list::<MountStatus>(NAMESPACE).is_empty(), "mount statuses left");
    assert!(h.state().list::<VolumeMountStatus>(NAMESPACE).is_empty(), "volume mount statuses left");
    assert_eq!(std::fs::read_to_string(data_path.join("file")).ok(), None, "u-data's file is off the tree");

    cancel.cancel();
    drop(disk);
    drop(device);
    drop(blank_device);
}

/// A disk that already holds STATE (a node's second boot), looked at without a configuration:
/// STATE is found and mounted, and never called missing on the way, whatever order the
/// kernel's partitions reach discovery in (a missing STATE sends the node to maintenance).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_state_is_found_without_a_configuration_and_never_called_missing() {
    use talosbox::cosi::Event;
    require_root();
    let mut scratch = Scratch::new("state-found");
    let image = scratch.dir.join("disk.img");
    std::fs::File::create(&image).and_then(|f| f.set_len(GIB)).expect("creating the disk image");
    {
        let device = loopdev::attach_for_partitioning(&image, Path::new("/dev")).expect("attaching the disk image");
        let disk = BlockDevice::open(device.path()).expect("opening the loop device");
        let linux = Guid::parse(LINUX).unwrap();
        let mut table = Table::new(Guid::derived(b"state-found disk"), GIB).unwrap();
        let meta = table.add_partition("META", linux, Guid::derived(b"META"), MIB, MIB, false).unwrap();
        let state = table.add_partition("STATE", linux, Guid::derived(b"STATE"), 100 * MIB, 100 * MIB, false).unwrap();
        table.write(disk.file()).expect("writing the GPT");
        for p in [&meta, &state] {
            disk.add_partition(p.number, p.offset, p.size).expect("BLKPG_ADD_PARTITION");
        }
        let part = format!("{}p{}", device.path().display(), state.number);
        assert!(wait_for(Path::new(&part)), "{part} did not appear");
        run(Command::new("mkfs.xfs").args(["-q", "-f", "-L", "STATE"]).arg(&part).envs([
            ("TEST_DIR", "1"),
            ("TEST_DEV", "1"),
            ("QA_CHECK_FS", "1"),
        ]));
    }
    // Attached again, as at a boot: the kernel finds both partitions at once.
    let mut device = None;
    for _ in 0..50 {
        match loopdev::attach_for_partitioning(&image, Path::new("/dev")) {
            Ok(d) => {
                device = Some(d);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let device = device.expect("attaching the disk image again");
    // This host's kernel may not read a GPT itself (a node's does): the partitions are told
    // through BLKPG, before any controller runs, as a boot's kernel would have them.
    {
        let disk = BlockDevice::open(device.path()).expect("opening the loop device");
        let table = Table::read(disk.file(), GIB).expect("reading the GPT").expect("a GPT");
        for p in table.partitions() {
            let _ = disk.add_partition(p.number, p.offset, p.size);
        }
    }
    let name = format!("loop{}", device.number());
    scratch.disk = name.clone();

    let reaper = Reaper::new(ReapMode::Own);
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(reaper.clone().run(cancel.clone()));
    let state = talosbox::cosi::State::in_memory();
    let mut watch = state.watch_kind::<VolumeStatus>(NAMESPACE);
    let controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(DevicesController::new().only([name.clone()])),
        Box::new(DisksController::new()),
        Box::new(DiscoveryController::new()),
        Box::new(SystemDiskController),
        Box::new(VolumeConfigController),
        Box::new(VolumeManagerController::new(reaper, Arc::new(GrpcKms), Arc::new(NodeTpm))),
        Box::new(MountRequestController),
        Box::new(MountController::under(scratch.root())),
    ];
    let h = Harness::start_on(state, controllers).unwrap().with_timeout(Duration::from_secs(120));
    let mut seen: Vec<(VolumePhase, String)> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.last().map(|s| s.0) != Some(VolumePhase::Ready) {
        let Ok(event) = tokio::time::timeout_at(deadline, watch.next()).await else {
            let found: Vec<(String, String)> = h
                .state()
                .list::<talosbox::resources::block::DiscoveredVolume>(NAMESPACE)
                .iter()
                .map(|v| (v.spec().dev_path.clone(), v.spec().partition_label.clone()))
                .collect();
            let meta = h.state().get::<VolumeStatus>(NAMESPACE, "META").map(|v| v.spec().phase);
            panic!("STATE not ready in time; it went through {seen:?}; discovered {found:?}; META {meta:?}");
        };
        if let Event::Created(r) | Event::Updated { new: r, .. } = event.unwrap()
            && let Some(v) = Resource::<VolumeStatus>::from_any(&r)
            && v.metadata().id == "STATE"
        {
            let now = (v.spec().phase, v.spec().error_message.clone());
            if seen.last() != Some(&now) {
                seen.push(now);
            }
        }
    }
    assert!(!seen.iter().any(|s| s.0 == VolumePhase::Missing), "STATE went through {seen:?}");
    h.assert_eventually::<MountStatus, _>(NAMESPACE, "STATE", "STATE mounted", |r| r.is_some()).await;
    drop(h);
    cancel.cancel();
}

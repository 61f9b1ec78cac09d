//! Provisioning a node's STATE and EPHEMERAL on a loop device, beside systemd-repart (Debian's
//! `systemd` package) laying out the same partitions and filesystems on the same disk.
//!
//! Each run makes a fresh 3 GiB sparse disk image holding what an installer leaves (a GPT with
//! META at 1 MiB), attaches it to a loop device, and times:
//! - **talosbox**: the block controllers as on a node (devices, disks, discovery, system disk,
//!   volume config, volume manager), started with a machine configuration, until STATE (100
//!   MiB, xfs) and EPHEMERAL (the rest, grown, xfs) are both Ready: discovery, GPT writes,
//!   both mkfs.xfs and the probes that confirm them;
//! - **systemd-repart**: `systemd-repart --dry-run=no` with two definitions (STATE 100 MiB xfs,
//!   EPHEMERAL at least 2 GiB growing over the rest, xfs) on the same kind of disk, until it
//!   exits. It formats with the same mkfs.xfs (its own options; STATE under 300 MB needs the
//!   same xfsprogs test-suite variables the node sets).
//!
//! Then both layouts are checked (sgdisk -v, blkid labels and types): a run that did not lay
//! the volumes out fails the bench. Medians of RUNS (default 5) runs of each, interleaved.
//!
//! Needs root (loop devices). `cargo bench --bench storage --features test-harness`; tests/bench
//! puts its `ROW` line in the headline table.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use talosbox::block::gpt::{Guid, Table};
use talosbox::block::tpm_key::NodeTpm;
use talosbox::client::kms::GrpcKms;
use talosbox::controllers::block::{
    DevicesController, DiscoveryController, DisksController, SystemDiskController, VolumeConfigController,
    VolumeManagerController,
};
use talosbox::controllers::config::machine_config::parse;
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::blockdev::BlockDevice;
use talosbox::kernel::loopdev;
use talosbox::resources::block::{NAMESPACE, VolumePhase, VolumeStatus};
use talosbox::resources::config::{self as cfg, MachineConfig};
use talosbox::services::{ReapMode, Reaper};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// META's type here: "Linux reserved", not Linux data, since systemd-repart takes an existing
/// partition of a definition's type as that definition's (it would grow META into STATE); the
/// volume manager finds META by label and size, not type.
const META_TYPE: &str = "8DA63339-0007-60C0-C436-083AC8230908";

fn die(msg: &str) -> ! {
    eprintln!("storage bench: {msg}");
    std::process::exit(1);
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| die(&format!("{cmd:?}: {e}")));
    if !out.status.success() {
        die(&format!("{cmd:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh disk image with META, attached with partition scanning.
fn disk(dir: &Path, name: &str) -> (PathBuf, loopdev::LoopDevice) {
    let image = dir.join(name);
    let _ = std::fs::remove_file(&image);
    std::fs::File::create(&image).and_then(|f| f.set_len(3 * GIB)).unwrap_or_else(|e| die(&format!("image: {e}")));
    let device =
        loopdev::attach_for_partitioning(&image, Path::new("/dev")).unwrap_or_else(|e| die(&format!("loop: {e}")));
    let bd = BlockDevice::open(device.path()).unwrap_or_else(|e| die(&format!("opening the loop device: {e}")));
    let mut table = Table::new(Guid::derived(b"storage bench disk"), 3 * GIB).unwrap_or_else(|e| die(&e.to_string()));
    let meta_type = Guid::parse(META_TYPE).unwrap_or_else(|e| die(&e.to_string()));
    let meta = table
        .add_partition("META", meta_type, Guid::derived(b"META"), MIB, MIB, false)
        .unwrap_or_else(|e| die(&e.to_string()));
    table.write(bd.file()).unwrap_or_else(|e| die(&format!("writing the GPT: {e}")));
    bd.add_partition(meta.number, meta.offset, meta.size).unwrap_or_else(|e| die(&format!("BLKPG: {e}")));
    (image, device)
}

/// The partitions as sgdisk and blkid see them: `(name, blkid TYPE, blkid LABEL)` from 2 on.
fn layout(image: &Path, dev: &str) -> Vec<(String, String, String)> {
    let verify = run(Command::new("sgdisk").arg("-v").arg(image));
    if !verify.contains("No problems found") {
        die(&format!("sgdisk -v {}:\n{verify}", image.display()));
    }
    (2..=3)
        .map(|n| {
            let info = run(Command::new("sgdisk").arg(format!("-i{n}")).arg(image));
            let name = info
                .lines()
                .find_map(|l| l.strip_prefix("Partition name:"))
                .map(|v| v.trim().trim_matches('\'').to_string())
                .unwrap_or_default();
            let probe = probe(&format!("{dev}p{n}"));
            let key =
                |k: &str| probe.lines().find_map(|l| l.strip_prefix(&format!("{k}="))).unwrap_or_default().to_string();
            (name, key("TYPE"), key("LABEL"))
        })
        .collect()
}

/// `blkid -p` of a partition just made: its node may take a moment to appear.
fn probe(part: &str) -> String {
    let mut last = String::new();
    for _ in 0..50 {
        let out = Command::new("blkid").args(["-p", "-o", "export", part]).output();
        match out {
            Ok(o) if o.status.success() => return String::from_utf8_lossy(&o.stdout).into_owned(),
            Ok(o) => {
                last = format!(
                    "{} (exit {:?}, node there: {}){}",
                    String::from_utf8_lossy(&o.stderr).trim(),
                    o.status.code(),
                    Path::new(part).exists(),
                    String::from_utf8_lossy(&o.stdout)
                )
            }
            Err(e) => die(&format!("blkid: {e}")),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let partitions = std::fs::read_to_string("/proc/partitions").unwrap_or_default();
    die(&format!("blkid -p {part}: {last}\n/proc/partitions:\n{partitions}"))
}

fn expect_layout(who: &str, got: &[(String, String, String)]) {
    let want = [("STATE", "xfs", "STATE"), ("EPHEMERAL", "xfs", "EPHEMERAL")];
    let ok = got.len() == 2 && got.iter().zip(want).all(|(g, w)| g.0 == w.0 && g.1 == w.1 && g.2 == w.2);
    if !ok {
        die(&format!("{who} left {got:?}, not STATE and EPHEMERAL in xfs"));
    }
}

fn ours(rt: &tokio::runtime::Runtime, dir: &Path) -> Duration {
    let (image, device) = disk(dir, "ours.img");
    let name = format!("loop{}", device.number());
    let took = rt.block_on(async {
        let reaper = Reaper::new(ReapMode::Own);
        let cancel = tokio_util::sync::CancellationToken::new();
        tokio::spawn(reaper.clone().run(cancel.clone()));
        let start = Instant::now();
        let controllers: Vec<Box<dyn Controller>> = vec![
            Box::new(DevicesController::new().only([name.clone()])),
            Box::new(DisksController::new()),
            Box::new(DiscoveryController::new()),
            Box::new(SystemDiskController),
            Box::new(VolumeConfigController),
            Box::new(VolumeManagerController::new(reaper, std::sync::Arc::new(GrpcKms), std::sync::Arc::new(NodeTpm))),
        ];
        let h = Harness::start(controllers)
            .unwrap_or_else(|e| die(&format!("starting the controllers: {e}")))
            .with_timeout(Duration::from_secs(300));
        let config = parse("version: v1alpha1\nmachine:\n  type: worker\n").unwrap_or_else(|e| die(&e.to_string()));
        h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, config).unwrap_or_else(|e| die(&e.to_string()));
        for id in ["STATE", "EPHEMERAL"] {
            h.assert_eventually::<VolumeStatus, _>(NAMESPACE, id, &format!("{id} ready"), |r| {
                r.is_some_and(|r| r.spec().phase == VolumePhase::Ready)
            })
            .await;
        }
        let took = start.elapsed();
        drop(h);
        cancel.cancel();
        took
    });
    expect_layout("talosbox", &layout(&image, &format!("/dev/{name}")));
    drop(device);
    let _ = std::fs::remove_file(&image);
    took
}

fn repart(dir: &Path, definitions: &Path) -> Duration {
    let (image, device) = disk(dir, "repart.img");
    let dev = device.path().to_string_lossy().into_owned();
    let start = Instant::now();
    run(Command::new("systemd-repart")
        .args(["--dry-run=no", "--no-pager", "--pretty=no"])
        .arg(format!("--definitions={}", definitions.display()))
        .arg(&dev)
        .envs(["TEST_DIR", "TEST_DEV", "QA_CHECK_FS"].map(|k| (k, "1"))));
    let took = start.elapsed();
    // repart writes the table; the kernel learns the new partitions when asked.
    run(Command::new("partx").args(["-u"]).arg(&dev));
    expect_layout("systemd-repart", &layout(&image, &dev));
    drop(device);
    let _ = std::fs::remove_file(&image);
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        die("needs root (loop devices); run it as root");
    }
    for tool in ["systemd-repart", "sgdisk", "blkid", "partx", "mkfs.xfs"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool} >/dev/null")])
            .status()
            .map_or(true, |s| !s.success())
        {
            die(&format!("{tool} is not installed"));
        }
    }
    let runs: usize = std::env::var("RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(5).max(1);
    let dir = std::env::temp_dir().join(format!("talosbox-storage-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| die(&e.to_string()));
    let definitions = dir.join("repart.d");
    std::fs::create_dir_all(&definitions).unwrap_or_else(|e| die(&e.to_string()));
    let write = |name: &str, text: &str| {
        std::fs::write(definitions.join(name), text).unwrap_or_else(|e| die(&e.to_string()));
    };
    write(
        "20-state.conf",
        "[Partition]\nType=linux-generic\nLabel=STATE\nSizeMinBytes=100M\nSizeMaxBytes=100M\nFormat=xfs\n",
    );
    write("30-ephemeral.conf", "[Partition]\nType=linux-generic\nLabel=EPHEMERAL\nSizeMinBytes=2G\nFormat=xfs\n");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| die(&e.to_string()));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..runs {
        a.push(ours(&rt, &dir));
        b.push(repart(&dir, &definitions));
        eprintln!("run {}/{runs}: talosbox {}, systemd-repart {}", i + 1, ms(a[i]), ms(b[i]));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (ma, mb) = (median(a), median(b));
    println!("provision STATE (100 MiB xfs) + EPHEMERAL (grown, xfs) on a 3 GiB loop disk, median of {runs}:");
    println!("  talosbox volume manager   {}", ms(ma));
    println!("  systemd-repart 252        {}", ms(mb));
    println!("  ratio talosbox/repart     {:.2}", ma.as_secs_f64() / mb.as_secs_f64());
    // For tests/bench's table.
    println!(
        "ROW\tprovision STATE + EPHEMERAL (xfs) on a 3 GiB loop disk\t{:.0}\t{:.0}\tms",
        ma.as_secs_f64() * 1000.0,
        mb.as_secs_f64() * 1000.0
    );
}

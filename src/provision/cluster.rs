//! Creating, waiting for and destroying a cluster: the effects around the pure plan. `create`
//! writes the record first, then starts one launcher per node (see [`super::launch`]), which
//! starts the node's swtpm and QEMU and keeps them running across reboots; if any start fails it
//! stops whatever it already started and removes the directory, so a failed create leaves
//! nothing. `destroy` stops each node's launcher before its QEMU, so nothing is restarted
//! while it is being stopped.
//!
//! Never removes a directory that holds no cluster record, and never leaves a process running
//! that the record does not name.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::alloc::{self, Nic};
use super::argv::{self, Media, NodeLaunch, SwtpmLaunch};
use super::boot::{self, BootPlan, BootRequest};
use super::disks::{self, DiskRole};
use super::host::{self, Tool};
use super::launch::{self, LaunchConfig};
use super::serve;
use super::state::{self, ClusterRecord, NodeRecord};
use super::{ProvisionError, io_err};
use crate::kernel::console;
use crate::resources::runtime::MachineStage;

/// The serial-console line that says machined reached maintenance: the node is up.
pub fn ready_marker() -> String {
    console::stage_line(&MachineStage::Maintenance.to_string())
}

/// The line of a node that had its configuration from the start (`talos.config=`): it may
/// never show maintenance.
fn running_marker() -> String {
    console::stage_line(&MachineStage::Running.to_string())
}

/// Serial-console lines that say the node will not get there.
pub fn failure_markers() -> [String; 3] {
    [format!("{} {}", console::PREFIX, console::INIT_FAILED), "Kernel panic".into(), "end Kernel panic".into()]
}

/// `talosctl cluster create`'s options, flags already parsed.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub name: String,
    /// Parent of the cluster directory; `None` is `~/.talos/clusters`.
    pub state_root: Option<PathBuf>,
    pub boot: BootRequest,
    pub controlplanes: usize,
    pub workers: usize,
    pub memory_mib: u32,
    pub cpus: u32,
    pub with_tpm: bool,
    pub accel: String,
    /// Each node's system disk and extra disks.
    pub disks: super::disks::DiskRequest,
    /// OVMF's code image and variable-store template, for UEFI boots.
    pub ovmf: Firmware,
    /// Generate the cluster's configuration before the nodes boot (`None`: `--skip-config`,
    /// the nodes stay in maintenance). A directly booted node is served its own over
    /// `talos.config=`; the others get theirs from [`super::configure::deliver`].
    pub config: Option<super::configure::ConfigureOptions>,
    /// Serve the cluster a KMS (for `kms` disk encryption keys) at
    /// [`super::serve::kms_endpoint`], with a key made for the cluster.
    pub with_kms: bool,
}

/// The UEFI firmware: code (read-only) and the variable-store template each node copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firmware {
    pub code: PathBuf,
    pub vars: PathBuf,
}

impl Default for Firmware {
    /// Debian's `ovmf` package.
    fn default() -> Self {
        Firmware { code: argv::OVMF_CODE.into(), vars: argv::OVMF_VARS.into() }
    }
}

/// What `create` made.
#[derive(Debug, Clone)]
pub struct Created {
    pub dir: PathBuf,
    pub plan: BootPlan,
    pub record: ClusterRecord,
    /// What was generated, when `config` asked for it.
    pub generated: Option<super::configure::Generated>,
}

/// `talosctl cluster destroy`'s options.
#[derive(Debug, Clone)]
pub struct DestroyOptions {
    pub name: String,
    pub state_root: Option<PathBuf>,
    /// Press every node's ACPI power button first and give the nodes this long to shut down
    /// by themselves before QEMU is told to quit.
    pub graceful: Option<Duration>,
}

/// How long `--wait` waits.
#[derive(Debug, Clone)]
pub struct WaitOptions {
    pub timeout: Duration,
}

fn cluster_dir(name: &str, root: Option<&Path>) -> Result<PathBuf, ProvisionError> {
    alloc::validate_name(name)?;
    let root = match root {
        Some(r) => r.to_path_buf(),
        None => state::default_root()?,
    };
    let root = std::path::absolute(&root).map_err(io_err("resolving", &root))?;
    Ok(root.join(name))
}

fn absolute(p: &Path) -> Result<PathBuf, ProvisionError> {
    // QEMU chdirs to / when it daemonizes: every path it gets must be absolute.
    let abs = std::path::absolute(p).map_err(io_err("resolving", p))?;
    if abs.to_str().is_none() {
        return Err(ProvisionError::NonUtf8Path { path: abs });
    }
    Ok(abs)
}

fn check_socket(path: &Path) -> Result<(), ProvisionError> {
    let len = path.as_os_str().len();
    if len > 107 {
        return Err(ProvisionError::SocketPathTooLong { path: path.to_path_buf(), len });
    }
    Ok(())
}

fn absolute_plan(plan: BootPlan) -> Result<BootPlan, ProvisionError> {
    Ok(match plan {
        BootPlan::Direct { kernel, initrd, cmdline, uefi } => {
            BootPlan::Direct { kernel: absolute(&kernel)?, initrd: absolute(&initrd)?, cmdline, uefi }
        }
        BootPlan::Uki { uki } => BootPlan::Uki { uki: absolute(&uki)? },
        BootPlan::Disk { image, uefi } => BootPlan::Disk { image: absolute(&image)?, uefi },
    })
}

/// Boots the cluster's nodes detached and returns once every QEMU is running (not yet booted:
/// see [`wait_ready`]). `step` receives one line per step.
pub fn create(opts: &CreateOptions, step: &mut dyn FnMut(String)) -> Result<Created, ProvisionError> {
    let dir = cluster_dir(&opts.name, opts.state_root.as_deref())?;
    let names = alloc::node_names(&opts.name, opts.controlplanes, opts.workers)?;
    let plan = absolute_plan(boot::resolve(&opts.boot, &|p: &Path| p.is_file())?)?;
    let image = match boot::system_image(&plan, &opts.boot.artifacts, &|p: &Path| p.is_file(), opts.disks.blank)? {
        Some(p) => Some(absolute(&p)?),
        None => None,
    };
    let image_len = match &image {
        Some(p) => Some(std::fs::metadata(p).map_err(io_err("reading disk image", p))?.len()),
        None => None,
    };
    disks::check(&opts.disks, image.as_deref().zip(image_len))?;

    let mut tools: Vec<Tool> = vec![host::QEMU];
    if opts.with_tpm {
        tools.push(host::SWTPM);
    }
    if matches!(plan, BootPlan::Uki { .. }) {
        tools.extend([host::MKFS_FAT, host::MMD, host::MCOPY]);
    }
    let (code, vars) = (opts.ovmf.code.to_string_lossy(), opts.ovmf.vars.to_string_lossy());
    let firmware: Vec<(&str, &'static str)> =
        if plan.uefi() { vec![(code.as_ref(), "ovmf"), (vars.as_ref(), "ovmf")] } else { Vec::new() };
    host::check_tools(&tools, &firmware)?;

    if dir.to_str().is_none() {
        return Err(ProvisionError::NonUtf8Path { path: dir });
    }
    let root = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let lan = alloc::mcast(&opts.name, &state::taken_lans(&root));
    let ports = alloc::api_ports(&opts.name, names.len(), alloc::ephemeral_range()?, &mut alloc::port_is_free)?;
    let mut launches = Vec::new();
    let mut nodes = Vec::new();
    let kms_key = opts.with_kms.then(|| dir.join(KMS_KEY_FILE));
    let media = match &plan {
        BootPlan::Direct { kernel, initrd, cmdline, .. } => {
            Media::Direct { kernel: kernel.clone(), initrd: initrd.clone(), cmdline: cmdline.clone() }
        }
        BootPlan::Uki { .. } => Media::Esp { image: dir.join("esp.img") },
        BootPlan::Disk { .. } => Media::SystemDisk,
    };
    for (i, ((name, role), port)) in names.iter().zip(&ports).enumerate() {
        // Unix sockets live under short names (the directory already names the cluster): their
        // paths must fit in 107 bytes.
        let short = name.strip_prefix(&format!("{}-", opts.name)).unwrap_or(name);
        let tpm = opts.with_tpm.then(|| {
            let d = dir.join(format!("{short}.tpm"));
            SwtpmLaunch {
                socket: d.join("swtpm.sock"),
                pid_file: d.join("swtpm.pid"),
                log: d.join("swtpm.log"),
                state_dir: d,
            }
        });
        // A directly booted node is addressed on the command line; a UKI or disk boot has its
        // command line built in and must get its addresses by DHCP.
        let lan_address = matches!(media, Media::Direct { .. }).then(|| alloc::lan_address(i));
        // Such a node can also be told where its configuration is.
        let served_config =
            (opts.config.is_some() && lan_address.is_some()).then(|| super::configure::node_config_path(&dir, name));
        let node_media = match (&media, lan_address) {
            (Media::Direct { kernel, initrd, cmdline }, Some(lan)) => Media::Direct {
                kernel: kernel.clone(),
                initrd: initrd.clone(),
                cmdline: match &served_config {
                    Some(_) => {
                        format!("{cmdline} {} talos.config={}", argv::node_ip_args(name, lan), serve::config_url())
                    }
                    None => format!("{cmdline} {}", argv::node_ip_args(name, lan)),
                },
            },
            (other, _) => other.clone(),
        };
        // Every node is served the cluster's images; a node with a served config its config.
        let serve_command = serve::command(&exe()?, served_config.as_deref(), &dir.join(serve::IMAGES_DIR));
        let serve_tls_command = serve::tls_command(
            &exe()?,
            served_config.as_deref(),
            &dir.join(serve::IMAGES_DIR),
            &dir.join(serve::TLS_DIR),
        );
        let kms_command = match &kms_key {
            Some(file) => Some(serve::kms_command(&exe()?, file)),
            None => None,
        };
        let launch = NodeLaunch {
            name: name.clone(),
            uuid: alloc::machine_uuid(&opts.name, i),
            accel: opts.accel.clone(),
            memory_mib: opts.memory_mib,
            cpus: opts.cpus,
            media: node_media,
            ovmf: plan.uefi().then(|| (opts.ovmf.code.clone(), dir.join(format!("{name}.vars.fd")))),
            api_port: *port,
            api_mac: alloc::mac(&opts.name, Nic::Api, i),
            lan,
            lan_mac: alloc::mac(&opts.name, Nic::Lan, i),
            tpm_socket: tpm.as_ref().map(|t| t.socket.clone()),
            disks: disks::plan(&dir, name, &opts.disks, image.as_deref()),
            serial_log: dir.join(format!("{name}.log")),
            pid_file: dir.join(format!("{name}.pid")),
            qmp_socket: dir.join(format!("{short}.qmp")),
            events_socket: dir.join(format!("{short}.events")),
            serve_command: Some(serve_command),
            serve_tls_command: Some(serve_tls_command),
            kms_command,
        };
        check_socket(&launch.qmp_socket)?;
        check_socket(&launch.events_socket)?;
        if let Some(t) = &tpm {
            check_socket(&t.socket)?;
        }
        nodes.push(NodeRecord {
            name: name.clone(),
            role: *role,
            uuid: launch.uuid.clone(),
            api_port: *port,
            lan_address,
            api_mac: launch.api_mac.to_string(),
            lan_mac: launch.lan_mac.to_string(),
            serial_log: launch.serial_log.clone(),
            pid_file: launch.pid_file.clone(),
            qmp_socket: launch.qmp_socket.clone(),
            swtpm_pid_file: tpm.as_ref().map(|t| t.pid_file.clone()),
            disks: launch.disks.clone(),
            served_config,
            launch_file: Some(launch::launch_file(&dir, name)),
            launcher_pid_file: Some(launch::pid_file(&dir, name)),
            boots_from: Some(launch.media.kind()),
        });
        launches.push(LaunchConfig {
            cluster_dir: dir.clone(),
            log: launch::log_file(&dir, name),
            qemu_stderr: dir.join(format!("{name}.qemu.err")),
            qemu: launch,
            swtpm: tpm,
            // Decided once the disk is made (start_all).
            switch_when_installed: false,
        });
    }
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let record = ClusterRecord { name: opts.name.clone(), created, boot: plan.to_string(), lan, nodes };
    // Everything that can be checked without effects has been: only now does the directory appear.
    // Creating it is also the check that no other cluster of this name exists: of two creates of
    // one name racing, exactly one makes the directory, and the other stops here.
    std::fs::create_dir_all(&root).map_err(io_err("creating state root", &root))?;
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ProvisionError::AlreadyExists { name: opts.name.clone(), dir });
        }
        Err(e) => return Err(io_err("creating state directory", &dir)(e)),
    }
    step(format!("state directory {}", dir.display()));
    if let Err(e) = record.write(&dir) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }

    if let Some(file) = &kms_key
        && let Err(e) = write_kms_key(file)
    {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    let images_ca = match serve::write_tls(&dir.join(serve::TLS_DIR)) {
        Ok(ca) => ca,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(ProvisionError::Configure(format!(
                "cluster {:?}: the image server's certificate: {e}",
                opts.name
            )));
        }
    };
    let generated = match &opts.config {
        None => None,
        Some(c) => match super::configure::generate_files(&record, &dir, c, &images_ca, step) {
            Ok(g) => Some(g),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        },
    };
    let started = start_all(&dir, opts, &plan, &launches, step);
    if let Err(e) = started {
        step("start failed: stopping what was started and removing the state directory".to_string());
        let survivors = stop_record(&record, &STOPPING, &mut |_| {});
        if survivors.is_empty() {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            let state = opts.state_root.as_ref().map(|s| format!(" --state {}", s.display())).unwrap_or_default();
            step(format!(
                "kept {}: {} would not stop (destroy with: talosctl cluster destroy --name {}{state})",
                dir.display(),
                list_survivors(&survivors),
                opts.name
            ));
        }
        return Err(e);
    }
    Ok(Created { dir, plan, record, generated })
}

/// The cluster's KMS key (base64 of 32 random bytes), in its state directory.
pub const KMS_KEY_FILE: &str = "kms.key";

fn write_kms_key(path: &Path) -> Result<(), ProvisionError> {
    use base64::Engine as _;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut key = zeroize::Zeroizing::new([0u8; 32]);
    getrandom::fill(&mut *key).map_err(|e| io_err("making the KMS key", path)(std::io::Error::other(e)))?;
    let text = zeroize::Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(*key));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(io_err("writing the KMS key", path))
}

/// This program, for QEMU to run as the configuration server and to run the launchers.
fn exe() -> Result<PathBuf, ProvisionError> {
    std::env::current_exe().map_err(io_err("finding this program", "/proc/self/exe"))
}

fn start_all(
    dir: &Path,
    opts: &CreateOptions,
    plan: &BootPlan,
    launches: &[LaunchConfig],
    step: &mut dyn FnMut(String),
) -> Result<(), ProvisionError> {
    if let BootPlan::Uki { uki } = plan {
        let esp = dir.join("esp.img");
        step(format!("building the ESP {} holding {} (mkfs.fat, mtools)", esp.display(), uki.display()));
        host::build_esp(uki, &esp)?;
    }
    link_images(dir, &opts.boot.artifacts, step)?;
    let exe = exe()?;
    for config in launches {
        let node = &config.qemu;
        if let Some((_, vars)) = &node.ovmf {
            std::fs::copy(&opts.ovmf.vars, vars).map_err(io_err("copying the OVMF variable store to", vars))?;
        }
        for disk in &node.disks {
            // Sparse: the host spends space only for what the image holds and the node writes.
            let written = disks::make(disk)?;
            let what = match (disk.role, &disk.source) {
                (DiskRole::System, Some(image)) => {
                    format!("system disk, {} MiB of {} copied", written.div_ceil(disks::MIB), image.display())
                }
                (DiskRole::System, None) if opts.disks.blank => {
                    "system disk, blank (--blank-disk: for the node to install itself onto)".to_string()
                }
                (DiskRole::System, None) => "system disk, blank (no disk.raw among the artifacts)".to_string(),
                (DiskRole::Extra, _) => "extra disk, blank".to_string(),
            };
            step(format!(
                "{}: {} ({} MiB, serial {}): {what}",
                node.name,
                disk.path.display(),
                disk.size_mib,
                disk.serial
            ));
        }
        // A node booting other media onto a disk with no installed layout yet (--blank-disk) is
        // moved to its disk once it installs itself there; one on a copy of disk.raw, which has
        // that layout from the start, keeps its media.
        let mut config = config.clone();
        if let Some(system) = node.disks.iter().find(|d| d.role == DiskRole::System)
            && node.media != Media::SystemDisk
            && !disks::holds_installed_layout(&system.path)?
        {
            config.switch_when_installed = true;
            step(format!(
                "{}: boots {} until it installs itself onto its system disk, then from that disk",
                node.name,
                node.media.kind()
            ));
        }
        let file = launch::launch_file(dir, &node.name);
        config.write(&file)?;
        let started = launch::spawn(&exe, &file, &config, &launch::pid_file(dir, &node.name))?;
        if let Some(t) = &config.swtpm {
            step(format!("{}: swtpm started ({})", node.name, t.socket.display()));
        }
        step(format!(
            "{}: launcher (pid {}) started QEMU (pid {}), booting from {}; API forwarded to 127.0.0.1:{}",
            node.name,
            started.launcher_pid,
            started.qemu_pid,
            node.media.kind(),
            node.api_port
        ));
    }
    Ok(())
}

/// Makes the cluster's `images/` (served to every node at `http://10.0.2.100/images/`) with
/// `images/boot` linking to the artifacts directory the cluster booted from, when there is one.
fn link_images(dir: &Path, artifacts: &Path, step: &mut dyn FnMut(String)) -> Result<(), ProvisionError> {
    let images = dir.join(serve::IMAGES_DIR);
    std::fs::create_dir(&images).map_err(io_err("creating", &images))?;
    if !artifacts.is_dir() {
        step(format!("no artifacts directory {}: nothing linked at {}", artifacts.display(), serve::images_url("")));
        return Ok(());
    }
    let target = std::path::absolute(artifacts).map_err(io_err("resolving", artifacts))?;
    let link = images.join(serve::BOOT_IMAGES);
    std::os::unix::fs::symlink(&target, &link).map_err(io_err("linking the artifacts at", &link))?;
    step(format!(
        "serving {} to the nodes at {}",
        target.display(),
        serve::images_url(&format!("{}/", serve::BOOT_IMAGES))
    ));
    Ok(())
}

/// How `stop_record` goes about stopping: how long it waits after QMP `quit` and after SIGTERM,
/// and how it sends signals.
#[derive(Debug, Clone, Copy)]
struct Stopping {
    quit: Duration,
    qemu_grace: Duration,
    swtpm_grace: Duration,
    /// A launcher told to stop in the middle of starting QEMU finishes the start first.
    launcher_grace: Duration,
    send: host::Signaller,
}

const STOPPING: Stopping = Stopping {
    quit: Duration::from_secs(5),
    qemu_grace: Duration::from_secs(5),
    swtpm_grace: Duration::from_secs(3),
    launcher_grace: Duration::from_secs(15),
    send: host::signal,
};

/// A node's launcher, if its pid file names a live one of ours.
fn running_launcher(node: &NodeRecord) -> Option<(rustix::process::Pid, host::Ours)> {
    let (launch_file, pid_file) = (node.launch_file.as_deref()?, node.launcher_pid_file.as_deref()?);
    let ours = host::Ours::launcher(launch_file);
    host::read_pid(pid_file).filter(|p| host::is_ours(*p, &ours)).map(|p| (p, ours))
}

/// A node's QEMU, if its pid file names a live one of ours.
fn running_qemu(node: &NodeRecord) -> Option<(rustix::process::Pid, host::Ours)> {
    let ours = host::Ours::qemu(&node.pid_file);
    host::read_pid(&node.pid_file).filter(|p| host::is_ours(*p, &ours)).map(|p| (p, ours))
}

/// A process `stop_record` could not stop.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Survivor {
    node: String,
    program: &'static str,
    pid: i32,
}

fn list_survivors(survivors: &[Survivor]) -> String {
    let list: Vec<String> =
        survivors.iter().map(|s| format!("{} (node {}, pid {})", s.program, s.node, s.pid)).collect();
    list.join(", ")
}

/// Stops every process the record names, per node: the launcher with SIGTERM (first, so it
/// restarts nothing), QEMU through QMP `quit` (then SIGTERM/SIGKILL if it lingers), swtpm with
/// SIGTERM. `step` gets a line per process. Returns the processes that are still running
/// afterwards.
fn stop_record(record: &ClusterRecord, how: &Stopping, step: &mut dyn FnMut(String)) -> Vec<Survivor> {
    let mut survivors = Vec::new();
    let mut report = |node: &str, program: &'static str, pid: rustix::process::Pid, gone: bool| {
        let pid = pid.as_raw_nonzero().get();
        step(format!("{node}: {program} (pid {pid}) {}", if gone { "stopped" } else { "would not stop" }));
        if !gone {
            survivors.push(Survivor { node: node.to_string(), program, pid });
        }
    };
    for node in &record.nodes {
        if let Some((pid, launcher)) = running_launcher(node) {
            let gone = host::terminate_with(pid, &launcher, how.launcher_grace, how.send);
            report(&node.name, "launcher", pid, gone);
        }
        if let Some((pid, qemu)) = running_qemu(node) {
            let asked = host::qmp(&node.qmp_socket, "quit").is_ok();
            let gone = (asked && host::wait_gone(pid, &qemu, how.quit))
                || host::terminate_with(pid, &qemu, how.qemu_grace, how.send);
            report(&node.name, "QEMU", pid, gone);
        }
        if let Some(pid_file) = node.swtpm_pid_file.as_deref() {
            // swtpm --terminate usually leaves with QEMU; stop it if it did not.
            let swtpm = host::Ours::swtpm(pid_file);
            if let Some(pid) = host::read_pid(pid_file).filter(|p| host::is_ours(*p, &swtpm)) {
                let gone = host::terminate_with(pid, &swtpm, how.swtpm_grace, how.send);
                report(&node.name, "swtpm", pid, gone);
            }
        }
    }
    survivors
}

/// Reads a cluster's record and, per node, a line saying whether its QEMU runs and the last
/// `[talosbox]` line on its console.
pub fn show(name: &str, root: Option<&Path>) -> Result<(ClusterRecord, Vec<(String, String)>), ProvisionError> {
    let dir = cluster_dir(name, root)?;
    if !dir.join(state::RECORD).is_file() {
        return Err(ProvisionError::NoSuchCluster { name: name.to_string(), dir });
    }
    let record = ClusterRecord::read(&dir)?;
    let status = record
        .nodes
        .iter()
        .map(|n| {
            let running = match (running_qemu(n), running_launcher(n)) {
                (Some((q, _)), Some((l, _))) => {
                    format!("running (QEMU pid {}, launcher pid {})", q.as_raw_nonzero(), l.as_raw_nonzero())
                }
                (Some((q, _)), None) => {
                    format!("running (QEMU pid {}; no launcher: a reboot ends it)", q.as_raw_nonzero())
                }
                (None, Some((l, _))) => format!("restarting (launcher pid {}, no QEMU yet)", l.as_raw_nonzero()),
                (None, None) => "not running".to_string(),
            };
            let running = match n.boots_from {
                Some(media) => format!("{running}; boots from {media}"),
                None => running,
            };
            let log = String::from_utf8_lossy(&std::fs::read(&n.serial_log).unwrap_or_default()).replace('\r', "");
            let console = match judge_log(&log) {
                NodeProgress::Ready(_) => ready_marker(),
                NodeProgress::Failed(why) => format!("failed: {why}"),
                NodeProgress::Booting(Some(last)) => last,
                NodeProgress::Booting(None) => "no talosbox output yet".to_string(),
            };
            (n.name.clone(), format!("{running}; console: {console}"))
        })
        .collect();
    Ok((record, status))
}

/// How often the power button is pressed again while a node stays up: a press that comes
/// before the guest's button driver is loaded is lost, as on real hardware.
const PRESS_EVERY: Duration = Duration::from_secs(2);

/// Presses every running node's power button (QMP `system_powerdown`), again every
/// [`PRESS_EVERY`] while it runs, and waits until each QEMU has exited by itself, or `timeout`.
/// Nodes still running afterwards are left to `stop_record`.
fn power_down(record: &ClusterRecord, timeout: Duration, step: &mut dyn FnMut(String)) {
    let start = Instant::now();
    let mut pending = Vec::new();
    for node in &record.nodes {
        let qemu = host::Ours::qemu(&node.pid_file);
        let Some(pid) = host::read_pid(&node.pid_file).filter(|p| host::is_ours(*p, &qemu)) else { continue };
        match host::qmp(&node.qmp_socket, "system_powerdown") {
            Ok(_) => pending.push((node, pid, qemu)),
            Err(e) => step(format!("{}: pressing the power button over QMP failed: {e}", node.name)),
        }
    }
    while !pending.is_empty() {
        let left = timeout.saturating_sub(start.elapsed());
        let mut still = Vec::new();
        for (node, pid, qemu) in pending {
            if host::wait_gone(pid, &qemu, PRESS_EVERY.min(left)) {
                step(format!("{}: powered off by itself after {:.1} s", node.name, start.elapsed().as_secs_f64()));
            } else if start.elapsed() >= timeout {
                step(format!(
                    "{}: still running {:.0} s after the power button; stopping it",
                    node.name,
                    timeout.as_secs_f64()
                ));
            } else {
                // Pressed too early, or missed: press again.
                let _ = host::qmp(&node.qmp_socket, "system_powerdown");
                still.push((node, pid, qemu));
            }
        }
        pending = still;
    }
}

/// Stops a cluster and removes its state directory. When a process the record names will not
/// stop, the directory (and so the record naming it) stays and the error names the process.
pub fn destroy(opts: &DestroyOptions, step: &mut dyn FnMut(String)) -> Result<PathBuf, ProvisionError> {
    destroy_with(opts, &STOPPING, step)
}

fn destroy_with(
    opts: &DestroyOptions,
    how: &Stopping,
    step: &mut dyn FnMut(String),
) -> Result<PathBuf, ProvisionError> {
    let dir = cluster_dir(&opts.name, opts.state_root.as_deref())?;
    if !dir.join(state::RECORD).is_file() {
        return Err(ProvisionError::NoSuchCluster { name: opts.name.clone(), dir });
    }
    let record = ClusterRecord::read(&dir)?;
    if let Some(timeout) = opts.graceful {
        power_down(&record, timeout, step);
    }
    let survivors = stop_record(&record, how, step);
    if !survivors.is_empty() {
        return Err(ProvisionError::StillRunning {
            name: opts.name.clone(),
            dir,
            survivors: list_survivors(&survivors),
        });
    }
    std::fs::remove_dir_all(&dir).map_err(io_err("removing state directory", &dir))?;
    Ok(dir)
}

/// One node's progress while waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeProgress {
    /// Still booting; the last `[talosbox]` line seen, if any.
    Booting(Option<String>),
    /// Reached maintenance after this long (from the start of the wait).
    Ready(Duration),
    /// Will not get there: why.
    Failed(String),
}

/// What a serial log says about a node. Pure, so it is tested on text.
pub fn judge_log(log: &str) -> NodeProgress {
    if log.contains(&ready_marker()) || log.contains(&running_marker()) {
        return NodeProgress::Ready(Duration::ZERO);
    }
    if let Some(line) = log.lines().find(|l| failure_markers().iter().any(|m| l.contains(m.as_str()))) {
        return NodeProgress::Failed(line.trim().to_string());
    }
    let last = log.lines().rev().find(|l| l.contains(console::PREFIX)).map(|l| l.trim().to_string());
    NodeProgress::Booting(last)
}

/// The last `n` lines of a text.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Each node's name and progress, in record order.
pub type Progress = [(String, NodeProgress)];

/// Polls every node's serial log until each shows [`ready_marker`]; fails early when a node's
/// QEMU exits or its console shows a failure, and at the timeout. `tick` sees the progress of
/// every node about four times a second. The error carries the tail of each unready node's log.
pub fn wait_ready(
    record: &ClusterRecord,
    opts: &WaitOptions,
    tick: &mut dyn FnMut(Duration, &Progress),
) -> Result<Vec<(String, Duration)>, ProvisionError> {
    let start = Instant::now();
    let mut progress: Vec<(String, NodeProgress)> =
        record.nodes.iter().map(|n| (n.name.clone(), NodeProgress::Booting(None))).collect();
    loop {
        let elapsed = start.elapsed();
        for (node, (_, p)) in record.nodes.iter().zip(progress.iter_mut()) {
            if matches!(p, NodeProgress::Ready(_)) {
                continue;
            }
            let log = String::from_utf8_lossy(&std::fs::read(&node.serial_log).unwrap_or_default()).replace('\r', "");
            *p = match judge_log(&log) {
                NodeProgress::Ready(_) => NodeProgress::Ready(elapsed),
                NodeProgress::Booting(last) => {
                    // Between two QEMUs of a rebooting node only its launcher runs.
                    let alive = running_qemu(node).is_some() || running_launcher(node).is_some();
                    if alive { NodeProgress::Booting(last) } else { NodeProgress::Failed("QEMU exited".to_string()) }
                }
                failed => failed,
            };
        }
        tick(elapsed, &progress);
        let failed = progress.iter().any(|(_, p)| matches!(p, NodeProgress::Failed(_)));
        let timed_out = elapsed >= opts.timeout;
        if failed || timed_out {
            return Err(ProvisionError::NotReady(not_ready_report(record, &progress, elapsed, timed_out)));
        }
        if progress.iter().all(|(_, p)| matches!(p, NodeProgress::Ready(_))) {
            return Ok(progress
                .into_iter()
                .filter_map(|(n, p)| match p {
                    NodeProgress::Ready(d) => Some((n, d)),
                    _ => None,
                })
                .collect());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn not_ready_report(
    record: &ClusterRecord,
    progress: &[(String, NodeProgress)],
    elapsed: Duration,
    timed_out: bool,
) -> String {
    let mut out = if timed_out {
        format!("timed out after {:.0} s waiting for {:?}", elapsed.as_secs_f64(), ready_marker())
    } else {
        format!("a node failed to boot after {:.0} s", elapsed.as_secs_f64())
    };
    for (node, (_, p)) in record.nodes.iter().zip(progress) {
        let why = match p {
            NodeProgress::Ready(_) => continue,
            NodeProgress::Failed(why) => why.clone(),
            NodeProgress::Booting(_) => "still booting".to_string(),
        };
        let log = String::from_utf8_lossy(&std::fs::read(&node.serial_log).unwrap_or_default()).replace('\r', "");
        out.push_str(&format!(
            "\n\n{}: {why}\nserial log: {}\n--- last lines ---\n{}\n---",
            node.name,
            node.serial_log.display(),
            tail(&log, 30)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn judge_reads_the_console() {
        assert_eq!(judge_log(""), NodeProgress::Booting(None));
        let booting = "SeaBIOS\n[talosbox] uptime 1.20 init start\n[talosbox] stage: booting\nsome kernel line\n";
        assert_eq!(judge_log(booting), NodeProgress::Booting(Some("[talosbox] stage: booting".into())));
        assert_eq!(
            judge_log(&format!("{booting}[talosbox] stage: maintenance\n")),
            NodeProgress::Ready(Duration::ZERO)
        );
        let failed = "[talosbox] init: FAILED: mount rootfs: EIO\n";
        assert_eq!(judge_log(failed), NodeProgress::Failed(failed.trim().into()));
        let panic = "[    1.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n";
        assert!(matches!(judge_log(panic), NodeProgress::Failed(_)));
    }

    /// A process destroy cannot stop (here: one whose signals are dropped) keeps the state
    /// directory and its record, and the error names the node and pid; once it is gone, destroy
    /// finishes.
    #[test]
    fn destroy_keeps_the_record_of_a_process_that_will_not_stop() {
        use std::os::unix::process::CommandExt;
        let root = std::env::temp_dir().join(format!("talosbox-stuck-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("stuck");
        std::fs::create_dir_all(&dir).unwrap();
        let node = "stuck-controlplane-1";
        let pid_file = dir.join(format!("{node}.pid"));
        std::fs::write(&pid_file, "").unwrap();
        // A real process with a node QEMU's command line: argv[0] names qemu, the pid file is an
        // argument. It has no QMP socket, so only signals could stop it.
        let mut child = Command::new("tail")
            .arg0("qemu-system-x86_64")
            .args(["-f", &pid_file.to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let _stray = host::tests::Stray(
            rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap(),
            host::Ours::qemu(&pid_file),
        );
        std::fs::write(&pid_file, format!("{pid}\n")).unwrap();
        let start = Instant::now();
        while !host::read_pid(&pid_file).is_some_and(|p| host::is_ours(p, &host::Ours::qemu(&pid_file))) {
            assert!(start.elapsed() < Duration::from_secs(5), "child never exec'd");
            std::thread::sleep(Duration::from_millis(10));
        }
        let record = ClusterRecord {
            name: "stuck".into(),
            created: 0,
            boot: "test".into(),
            lan: alloc::mcast("stuck", &[]),
            nodes: vec![NodeRecord {
                name: node.into(),
                role: alloc::Role::Controlplane,
                uuid: alloc::machine_uuid("stuck", 0),
                api_port: 10000,
                lan_address: None,
                api_mac: alloc::mac("stuck", Nic::Api, 0).to_string(),
                lan_mac: alloc::mac("stuck", Nic::Lan, 0).to_string(),
                serial_log: dir.join(format!("{node}.log")),
                pid_file: pid_file.clone(),
                qmp_socket: dir.join("controlplane-1.qmp"),
                swtpm_pid_file: None,
                disks: Vec::new(),
                served_config: None,
                launch_file: None,
                launcher_pid_file: None,
                boots_from: None,
            }],
        };
        record.write(&dir).unwrap();
        let opts = DestroyOptions { name: "stuck".into(), state_root: Some(root.clone()), graceful: None };
        let deaf = Stopping {
            quit: Duration::ZERO,
            qemu_grace: Duration::from_millis(100),
            swtpm_grace: Duration::from_millis(100),
            launcher_grace: Duration::from_millis(100),
            send: |_, _| {},
        };
        let mut lines = Vec::new();
        let err = destroy_with(&opts, &deaf, &mut |l| lines.push(l)).unwrap_err().to_string();
        assert!(err.contains(&format!("QEMU (node {node}, pid {pid}) would not stop")), "{err}");
        assert!(err.contains(&dir.display().to_string()), "{err}");
        assert!(lines.iter().any(|l| l == &format!("{node}: QEMU (pid {pid}) would not stop")), "{lines:?}");
        assert_eq!(ClusterRecord::read(&dir).unwrap(), record, "the record of a running process must stay");

        let reaper = std::thread::spawn(move || child.wait());
        let out = destroy(&opts, &mut |_| {});
        reaper.join().unwrap().unwrap();
        assert_eq!(out.unwrap(), dir);
        assert!(!dir.exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}

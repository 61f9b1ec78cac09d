//! `talosctl cluster`: local clusters under QEMU.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Boot a local cluster under QEMU from the built artifacts.
    Create(Box<CreateArgs>),
    /// Show a local cluster's nodes: how to reach them, their serial logs, whether they run.
    Show {
        /// The cluster's name.
        #[arg(long, default_value = "talosbox")]
        name: String,
        /// Directory holding the clusters' state (default ~/.talos/clusters).
        #[arg(long)]
        state: Option<PathBuf>,
    },
    /// Stop a local cluster's VMs (and swtpm) and remove its state directory.
    Destroy {
        /// The cluster's name.
        #[arg(long, default_value = "talosbox")]
        name: String,
        /// Directory holding the clusters' state (default ~/.talos/clusters).
        #[arg(long)]
        state: Option<PathBuf>,
        /// Press each node's ACPI power button and let it shut down cleanly before stopping QEMU.
        #[arg(long)]
        graceful: bool,
        /// How long --graceful waits for the nodes to power off (seconds, or with an s/m suffix).
        #[arg(long, default_value = "60s", value_parser = super::parse_duration)]
        graceful_timeout: Duration,
    },
    /// Answers one HTTP request of a node on stdin/stdout: its `talos.config=` fetch or a file
    /// under the cluster's images/ (QEMU runs it per connection).
    #[command(hide = true)]
    ServeConfig {
        /// The node's configuration file (without it, /config.yaml is 404).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The cluster's images directory, served under /images/.
        #[arg(long)]
        images: Option<PathBuf>,
        /// Answer over TLS with the certificate and key in this directory (tls.crt, tls.key).
        #[arg(long, value_name = "DIR")]
        tls: Option<PathBuf>,
    },
    /// Runs one node's QEMU (and swtpm) from its launch file, restarting it when the node
    /// reboots; `cluster create` starts one per node.
    #[command(hide = true)]
    LaunchNode {
        /// The node's launch file (`<node>.launch.json` in the cluster directory).
        #[arg(long)]
        launch: PathBuf,
    },
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The cluster's name (prefixes node names, names the state directory).
    #[arg(long, default_value = "talosbox")]
    name: String,
    /// Directory holding the clusters' state (default ~/.talos/clusters).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Directory with the imager's output (vmlinuz, initramfs.zst, talosbox.efi, disk.raw).
    #[arg(long, default_value = "_out")]
    artifacts: PathBuf,
    /// Boot this kernel directly (default: the artifacts' vmlinuz).
    #[arg(long)]
    kernel: Option<PathBuf>,
    /// The initramfs for direct boot (default: the artifacts' initramfs.zst, or .lz4, .xz, .gz, .cpio).
    #[arg(long)]
    initrd: Option<PathBuf>,
    /// Boot a UKI from a FAT ESP under OVMF (implies --with-uefi): this file, or without a
    /// value the artifacts' talosbox.efi.
    #[arg(long, num_args = 0..=1, value_name = "UKI")]
    uki: Option<Option<PathBuf>>,
    /// Boot this GRUB disk image (BIOS unless --with-uefi): each node boots its own persistent
    /// copy, its system disk; the image stays as built.
    #[arg(long)]
    disk_image: Option<PathBuf>,
    /// Boot with OVMF (UEFI) instead of SeaBIOS.
    #[arg(long)]
    with_uefi: bool,
    /// OVMF's code image for UEFI boots.
    #[arg(long, default_value = crate::provision::argv::OVMF_CODE)]
    ovmf_code: PathBuf,
    /// OVMF's variable-store template for UEFI boots (each node gets a copy).
    #[arg(long, default_value = crate::provision::argv::OVMF_VARS)]
    ovmf_vars: PathBuf,
    /// Give every node a TPM 2.0 (one swtpm per node).
    #[arg(long)]
    with_tpm: bool,
    /// Encrypt every node's EPHEMERAL volume (LUKS2), one key slot per --disk-encryption-key-types.
    #[arg(long)]
    encrypt_ephemeral: bool,
    /// Encrypt every node's STATE volume (LUKS2), one key slot per --disk-encryption-key-types;
    /// the node keeps how in META, to open STATE at the next boot before its config is read.
    #[arg(long)]
    encrypt_state: bool,
    /// Key types for disk encryption, in slot order: uuid (nodeID), kms (the launcher serves
    /// the cluster a KMS, at grpc://10.0.2.101:4050 inside each node, whenever kms is listed),
    /// tpm (sealed by the node's TPM: needs --with-tpm).
    #[arg(long, value_delimiter = ',', default_value = "uuid")]
    disk_encryption_key_types: Vec<crate::provision::configure::DiskKeyType>,
    /// Appended to the kernel command line (direct boot only).
    #[arg(long)]
    extra_kernel_args: Option<String>,
    /// Number of control plane nodes.
    #[arg(long, default_value_t = 1)]
    controlplanes: usize,
    /// Number of worker nodes.
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Memory per node, MiB.
    #[arg(long, default_value_t = 1024)]
    memory: u32,
    /// Size of each node's system disk, MiB: a persistent copy of the image's disk.raw (the
    /// --disk-image, else the artifacts' disk.raw; blank without one), grown to this size.
    #[arg(long, visible_alias = "disk", default_value_t = crate::provision::disks::DEFAULT_SYSTEM_MIB)]
    disk_size: u64,
    /// Start every node's system disk blank (not a copy of disk.raw), for a node that installs
    /// itself onto it; its launcher restarts it from that disk once it did. Not with --disk-image.
    #[arg(long)]
    blank_disk: bool,
    /// Number of blank extra disks per node (virtio, serials talosbox-extra-1, -2, ...).
    #[arg(long, default_value_t = 0)]
    extra_disks: usize,
    /// Size of each extra disk, MiB.
    #[arg(long, default_value_t = crate::provision::disks::DEFAULT_EXTRA_MIB)]
    extra_disks_size: u64,
    /// CPUs per node.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// QEMU accelerator (KVM is not usable on every host; TCG always works).
    #[arg(long, default_value = "tcg")]
    accel: String,
    /// Wait until every node's console shows it reached maintenance.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (seconds, or with an s/m suffix).
    #[arg(long, default_value = "300s", value_parser = super::parse_duration)]
    wait_timeout: Duration,
    /// Leave the nodes in maintenance: generate no configuration and apply none.
    #[arg(long)]
    skip_config: bool,
    #[command(flatten)]
    patches: super::generate::ConfigPatchArgs,
    /// The Kubernetes version written into the (inert) cluster section.
    #[arg(long, default_value = super::generate::DEFAULT_KUBERNETES_VERSION)]
    kubernetes_version: String,
}

impl ClusterCommand {
    pub fn run(self, cli: &super::Cli) -> ExitCode {
        match self {
            ClusterCommand::Create(args) => cluster_create(cli, *args),
            ClusterCommand::Show { name, state } => cluster_show(name, state),
            ClusterCommand::Destroy { name, state, graceful, graceful_timeout } => {
                cluster_destroy(name, state, graceful.then_some(graceful_timeout))
            }
            ClusterCommand::ServeConfig { file, images, tls } => {
                let served = crate::provision::serve::Served { config: file.as_deref(), images: images.as_deref() };
                let answered = match &tls {
                    Some(dir) => crate::provision::serve::answer_tls(dir, &served),
                    None => {
                        let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
                        crate::provision::serve::answer(&mut stdin.lock(), &mut stdout.lock(), &served)
                    }
                };
                match answered {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("talosctl cluster serve-config: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
            ClusterCommand::LaunchNode { launch } => match crate::provision::launch::run(&launch) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("talosctl cluster launch-node: {e}");
                    ExitCode::FAILURE
                }
            },
        }
    }
}

fn cluster_create(cli: &super::Cli, a: CreateArgs) -> ExitCode {
    use crate::provision::{CreateOptions, WaitOptions};
    let state = a.state.clone();
    let config = if a.skip_config {
        None
    } else {
        match configure_options(&a) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("talosctl cluster create: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let opts = CreateOptions {
        name: a.name.clone(),
        state_root: a.state.clone(),
        boot: crate::provision::boot::BootRequest {
            artifacts: a.artifacts.clone(),
            kernel: a.kernel.clone(),
            initrd: a.initrd.clone(),
            uki: a.uki.clone().map(|uki| uki.unwrap_or_else(|| a.artifacts.join(crate::provision::boot::UKI))),
            disk_image: a.disk_image.clone(),
            with_uefi: a.with_uefi,
            extra_kernel_args: a.extra_kernel_args.clone(),
        },
        controlplanes: a.controlplanes,
        workers: a.workers,
        memory_mib: a.memory,
        cpus: a.cpus,
        with_tpm: a.with_tpm,
        accel: a.accel.clone(),
        disks: crate::provision::disks::DiskRequest {
            system_mib: a.disk_size,
            extra: a.extra_disks,
            extra_mib: a.extra_disks_size,
            blank: a.blank_disk,
        },
        ovmf: crate::provision::cluster::Firmware { code: a.ovmf_code.clone(), vars: a.ovmf_vars.clone() },
        config,
        with_kms: a.disk_encryption_key_types.contains(&crate::provision::configure::DiskKeyType::Kms),
    };
    let created = match crate::provision::create(&opts, &mut |line| println!("  {line}")) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("talosctl cluster create: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = &created.record;
    print!("{}", r.summary(state.as_deref()));
    // Applying a configuration needs the nodes up, so it implies waiting.
    if !a.wait && a.skip_config {
        return ExitCode::SUCCESS;
    }
    let tty = std::io::stderr().is_terminal();
    let mut shown = std::collections::HashSet::new();
    let mut last_line = Duration::ZERO;
    let frames = ['|', '/', '-', '\\'];
    let mut frame = 0usize;
    let waited = crate::provision::wait_ready(r, &WaitOptions { timeout: a.wait_timeout }, &mut |elapsed, nodes| {
        use crate::provision::cluster::NodeProgress;
        let ready = nodes.iter().filter(|(_, p)| matches!(p, NodeProgress::Ready(_))).count();
        for (name, p) in nodes {
            if let NodeProgress::Ready(d) = p
                && shown.insert(name.clone())
            {
                if tty {
                    eprint!("\r\x1b[K");
                }
                eprintln!("  {name}: maintenance after {:.1} s", d.as_secs_f64());
            }
        }
        if ready == nodes.len() {
            return;
        }
        let latest = nodes.iter().find_map(|(n, p)| match p {
            NodeProgress::Booting(Some(l)) => Some(format!("{n}: {l}")),
            _ => None,
        });
        let status = format!(
            "waiting for {}/{} nodes to reach maintenance ({:.0} s){}",
            nodes.len() - ready,
            nodes.len(),
            elapsed.as_secs_f64(),
            latest.map(|l| format!(" — {l}")).unwrap_or_default()
        );
        if tty {
            frame = (frame + 1) % frames.len();
            eprint!("\r\x1b[K{} {status}", frames[frame]);
            let _ = std::io::stderr().flush();
        } else if elapsed >= last_line + Duration::from_secs(10) {
            last_line = elapsed;
            eprintln!("  {status}");
        }
    });
    if tty {
        eprint!("\r\x1b[K");
    }
    match waited {
        Ok(ready) => {
            let slowest = ready.iter().map(|(_, d)| *d).max().unwrap_or_default();
            println!("all {} node(s) reached maintenance in {:.1} s", ready.len(), slowest.as_secs_f64());
            let Some(generated) = &created.generated else { return ExitCode::SUCCESS };
            match deliver_generated(cli, &a, &created.record, generated) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("talosctl cluster create: {e}");
                    let state = state.map(|s| format!(" --state {}", s.display())).unwrap_or_default();
                    eprintln!(
                        "the cluster is still running; destroy with: talosctl cluster destroy --name {}{state}",
                        r.name
                    );
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("talosctl cluster create: {e}");
            let state = state.map(|s| format!(" --state {}", s.display())).unwrap_or_default();
            eprintln!("the cluster is still running; destroy with: talosctl cluster destroy --name {}{state}", r.name);
            ExitCode::FAILURE
        }
    }
}

fn cluster_show(name: String, state: Option<PathBuf>) -> ExitCode {
    match crate::provision::show(&name, state.as_deref()) {
        Ok((record, status)) => {
            print!("{}", record.summary(state.as_deref()));
            for (node, line) in status {
                println!("{node}: {line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("talosctl cluster show: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cluster_destroy(name: String, state: Option<PathBuf>, graceful: Option<Duration>) -> ExitCode {
    let opts = crate::provision::DestroyOptions { name: name.clone(), state_root: state, graceful };
    match crate::provision::destroy(&opts, &mut |line| println!("  {line}")) {
        Ok(dir) => {
            println!("cluster {name:?} destroyed; removed {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("talosctl cluster destroy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The configuration `create` generates: the flags' patches, read now so a bad one stops
/// the create before anything boots.
fn configure_options(a: &CreateArgs) -> Result<crate::provision::configure::ConfigureOptions, String> {
    let read = |patches: &[String]| -> Result<Vec<_>, String> {
        patches.iter().map(|p| super::generate::read_patch(p)).collect()
    };
    let mut patches = Vec::new();
    if (a.encrypt_ephemeral || a.encrypt_state)
        && a.disk_encryption_key_types.contains(&crate::provision::configure::DiskKeyType::Tpm)
        && !a.with_tpm
    {
        return Err("--disk-encryption-key-types tpm needs --with-tpm: the nodes have no TPM otherwise".into());
    }
    if a.encrypt_state {
        patches.push(crate::provision::configure::state_encryption_patch(&a.disk_encryption_key_types)?);
    }
    if a.encrypt_ephemeral {
        patches.push(crate::provision::configure::ephemeral_encryption_patch(&a.disk_encryption_key_types)?);
    }
    patches.extend(read(&a.patches.config_patch)?);
    Ok(crate::provision::configure::ConfigureOptions {
        timeout: a.wait_timeout,
        kubernetes_version: a.kubernetes_version.clone(),
        patches,
        controlplane_patches: read(&a.patches.config_patch_control_plane)?,
        worker_patches: read(&a.patches.config_patch_worker)?,
    })
}

/// Gets every node its generated configuration and waits for mutual TLS, then merges the
/// cluster's talosconfig into the user's (`--talosconfig`, else `$TALOSCONFIG`, else
/// `~/.talos/config`), its context current, so `talosctl version` works next.
fn deliver_generated(
    cli: &super::Cli,
    a: &CreateArgs,
    record: &crate::provision::state::ClusterRecord,
    generated: &crate::provision::configure::Generated,
) -> Result<(), String> {
    crate::provision::configure::deliver(record, generated, a.wait_timeout, &mut |line| println!("  {line}"))
        .map_err(|e| e.to_string())?;
    let (mut config, target) = super::configcmd::open(cli)?;
    for rename in config.merge(generated.talosconfig.clone()) {
        eprintln!("renamed talosconfig context {:?} -> {:?}", rename.from, rename.to);
    }
    config.save_to(&target).map_err(|e| e.to_string())?;
    println!(
        "merged the cluster's talosconfig into {} (context {:?}); it is also at {}",
        target.path.display(),
        config.context,
        generated.talosconfig_path.display()
    );
    Ok(())
}

//! The command lines the provisioner runs: one QEMU per node, run in the foreground of the
//! node's launcher (see [`super::launch`]), and one swtpm per node with a TPM. Pure functions of
//! a [`NodeLaunch`]; golden files under `golden/` pin every argument.
//!
//! Never decides anything about the host here (paths, ports and addresses come in resolved).

use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::alloc::{Mac, Mcast};
use super::disks::{DiskRole, ESP_SERIAL, NodeDisk};

/// The OVMF firmware Debian's `ovmf` package installs: code (read-only) and the variable-store
/// template each node gets its own copy of.
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

/// How the node finds its kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Media {
    /// QEMU loads kernel and initramfs itself (`-kernel -initrd -append`).
    Direct { kernel: PathBuf, initrd: PathBuf, cmdline: String },
    /// The UKI's FAT ESP, one image for the whole cluster: attached first with `snapshot=on`, so
    /// writes go to a temporary overlay and the image stays as built, and booted first.
    Esp { image: PathBuf },
    /// The node's system disk (its copy of the GRUB disk, or the disk it installed itself
    /// onto) is also its boot disk.
    SystemDisk,
}

impl Media {
    /// Which kind of media this is, for the cluster record.
    pub fn kind(&self) -> BootMedia {
        match self {
            Media::Direct { .. } => BootMedia::Direct,
            Media::Esp { .. } => BootMedia::Esp,
            Media::SystemDisk => BootMedia::SystemDisk,
        }
    }
}

/// What a node boots from, as the cluster record keeps it: the launcher moves a node from
/// `direct` or `esp` to `system-disk` once the node installed itself onto its system disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BootMedia {
    Direct,
    Esp,
    SystemDisk,
}

impl fmt::Display for BootMedia {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BootMedia::Direct => "the kernel and initramfs (direct)",
            BootMedia::Esp => "the UKI's ESP",
            BootMedia::SystemDisk => "its system disk",
        })
    }
}

/// Everything one node's QEMU needs, already allocated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLaunch {
    pub name: String,
    /// The SMBIOS system UUID (`-uuid`), the node's machine UUID.
    pub uuid: String,
    pub accel: String,
    pub memory_mib: u32,
    pub cpus: u32,
    pub media: Media,
    /// OVMF's code image (read-only) and the node's own copy of its variable store; `None`
    /// boots SeaBIOS.
    pub ovmf: Option<(PathBuf, PathBuf)>,
    pub api_port: u16,
    pub api_mac: Mac,
    pub lan: Mcast,
    pub lan_mac: Mac,
    /// swtpm's control socket, when the node has a TPM.
    pub tpm_socket: Option<PathBuf>,
    /// The node's own disks (raw, sparse, written in place), the system disk first.
    pub disks: Vec<NodeDisk>,
    /// The serial console, appended to across the node's QEMU restarts (one log of all boots).
    pub serial_log: PathBuf,
    pub pid_file: PathBuf,
    /// QMP for `cluster destroy` and tests (QEMU listens).
    pub qmp_socket: PathBuf,
    /// The launcher's own QMP connection: the launcher listens here and QEMU connects, so no
    /// event (above all `SHUTDOWN` and its reason) is missed between QEMU's start and a client's.
    pub events_socket: PathBuf,
    /// The command that answers the node's HTTP requests (its `talos.config=` fetch and
    /// `/images/...`, see [`super::serve`]): QEMU runs it for each connection to
    /// [`super::serve::CONFIG_ADDR`] port 80.
    pub serve_command: Option<String>,
    /// The same answers over TLS, for connections to port [`super::serve::HTTPS_PORT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_tls_command: Option<String>,
    /// The command that answers the node's KMS connections (see [`super::serve::KMS_ADDR`]).
    pub kms_command: Option<String>,
}

/// The API port inside the node that the forward reaches.
pub const NODE_API_PORT: u16 = 50000;

/// Paths inside a QEMU option list: a comma would end the value, and QEMU escapes it by doubling.
fn opt(p: &Path) -> String {
    p.to_string_lossy().replace(',', ",,")
}

/// The argument after QEMU's `-pidfile`: only this node's QEMU has it, so it tells that process
/// apart from every other QEMU (see `host::Ours`).
pub fn qemu_pid_arg(pid_file: &Path) -> String {
    pid_file.to_string_lossy().into_owned()
}

/// The argument after swtpm's `--pid`: only this node's swtpm has it.
pub fn swtpm_pid_arg(pid_file: &Path) -> String {
    format!("file={}", opt(pid_file))
}

/// The kernel `ip=` argument a directly booted node gets: a static address on the LAN NIC
/// (`eth1`, the second NIC [`qemu_argv`] adds) and its hostname, so its peers reach it without a
/// DHCP server there. The user-network NIC (`eth0`) gets its address from QEMU's DHCP server,
/// by the node's default DHCP.
pub fn node_ip_args(hostname: &str, lan: Ipv4Addr) -> String {
    use super::alloc::LAN_PREFIX_LEN;
    let mask = Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(LAN_PREFIX_LEN)).unwrap_or(0));
    format!("ip={lan}:::{mask}:{hostname}:eth1:off")
}

/// QEMU's arguments (without the program name) for one node, run in the foreground of its
/// launcher.
pub fn qemu_argv(n: &NodeLaunch) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    push(&["-name", &n.name]);
    push(&["-uuid", &n.uuid]);
    push(&["-accel", &n.accel]);
    push(&["-m", &n.memory_mib.to_string(), "-smp", &n.cpus.to_string()]);
    // No display, no monitor on stdio: the serial console goes to the log file, QMP to a socket
    // `cluster destroy` uses.
    push(&["-display", "none", "-monitor", "none", "-parallel", "none"]);
    // A guest reboot ends QEMU (SHUTDOWN, reason guest-reset) instead of resetting the machine
    // in place: the launcher starts it again, from the disk the node installed itself onto.
    push(&["-no-reboot"]);
    // Appended, so the log holds every boot of the node, across QEMU restarts.
    push(&["-chardev", &format!("file,id=serial0,path={},append=on", opt(&n.serial_log))]);
    push(&["-serial", "chardev:serial0"]);
    push(&["-qmp", &format!("unix:{},server=on,wait=off", opt(&n.qmp_socket))]);
    // The launcher's monitor: QEMU connects to the launcher's socket at start (and fails to
    // start without it).
    push(&["-chardev", &format!("socket,id=events,path={},server=off", opt(&n.events_socket))]);
    push(&["-mon", "chardev=events,mode=control"]);
    push(&["-pidfile", &qemu_pid_arg(&n.pid_file)]);
    if let Some((code, vars)) = &n.ovmf {
        push(&["-drive", &format!("if=pflash,format=raw,unit=0,readonly=on,file={}", opt(code))]);
        push(&["-drive", &format!("if=pflash,format=raw,unit=1,file={}", opt(vars))]);
    }
    if let Media::Direct { kernel, initrd, cmdline } = &n.media {
        push(&["-kernel", &kernel.to_string_lossy(), "-initrd", &initrd.to_string_lossy()]);
        push(&["-append", cmdline]);
    }
    // NIC 1: user-mode network, the node's default route and DHCP; the only way in is the API
    // forward, and restrict=on keeps the node off the host's networks.
    // A guestfwd (allowed under restrict=on) serves the node its configuration and images.
    // A command's commas are doubled: QEMU's option syntax splits on single ones.
    let forward = |cmd: &Option<String>, addr: &str, port: u16| {
        cmd.as_ref().map(|c| format!(",guestfwd=tcp:{addr}:{port}-cmd:{}", c.replace(',', ",,"))).unwrap_or_default()
    };
    use super::serve::{CONFIG_ADDR, HTTPS_PORT, KMS_ADDR, KMS_PORT};
    let config = forward(&n.serve_command, CONFIG_ADDR, 80);
    let https = forward(&n.serve_tls_command, CONFIG_ADDR, HTTPS_PORT);
    let kms = forward(&n.kms_command, KMS_ADDR, KMS_PORT);
    push(&[
        "-netdev",
        &format!("user,id=api,restrict=on,hostfwd=tcp:127.0.0.1:{}-:{NODE_API_PORT}{config}{https}{kms}", n.api_port),
    ]);
    // romfile= skips the iPXE option ROM: nodes never network-boot and it costs seconds under TCG.
    push(&["-device", &format!("virtio-net-pci,netdev=api,mac={},romfile=", n.api_mac)]);
    // NIC 2: the cluster's LAN, one multicast group shared by every node's QEMU over loopback.
    push(&["-netdev", &format!("socket,id=lan,mcast={},localaddr=127.0.0.1", n.lan)]);
    push(&["-device", &format!("virtio-net-pci,netdev=lan,mac={},romfile=", n.lan_mac)]);
    if let Some(sock) = &n.tpm_socket {
        push(&["-chardev", &format!("socket,id=tpmchr,path={}", opt(sock))]);
        push(&["-tpmdev", "emulator,id=tpm0,chardev=tpmchr", "-device", "tpm-tis,tpmdev=tpm0"]);
    }
    push(&["-device", "virtio-rng-pci"]);
    // Disks last: their PCI slots follow the NICs', as they did when they were `-drive
    // if=virtio`. Each is a drive and a virtio-blk device, which carries the serial the guest's
    // /dev/disk/by-id names come from and the boot index.
    let mut disk = |id: &str, file: &Path, serial: &str, extra: &str, boot: bool| {
        push(&["-drive", &format!("if=none,id={id}-drive,format=raw{extra},file={}", opt(file))]);
        let bootindex = if boot { ",bootindex=0" } else { "" };
        push(&["-device", &format!("virtio-blk-pci,id={id},drive={id}-drive,serial={serial}{bootindex}")]);
    };
    if let Media::Esp { image } = &n.media {
        disk("esp", image, ESP_SERIAL, ",snapshot=on", true);
    }
    let mut extra = 0;
    for d in &n.disks {
        let id = match d.role {
            DiskRole::System => "system".to_string(),
            DiskRole::Extra => {
                extra += 1;
                format!("extra-{extra}")
            }
        };
        // discard=unmap: what the guest trims becomes a hole in the file again.
        let boot = d.role == DiskRole::System && n.media == Media::SystemDisk;
        disk(&id, &d.path, &d.serial, ",discard=unmap", boot);
    }
    a
}

/// Where one node's swtpm keeps its state, socket, pid and log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwtpmLaunch {
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    pub pid_file: PathBuf,
    pub log: PathBuf,
}

/// swtpm's arguments: a TPM 2.0 behind a unix control socket, detached, ending itself when QEMU
/// closes the connection (the launcher starts it again, on the same state, before each QEMU).
pub fn swtpm_argv(t: &SwtpmLaunch) -> Vec<String> {
    vec![
        "socket".into(),
        "--tpm2".into(),
        "--tpmstate".into(),
        format!("dir={}", opt(&t.state_dir)),
        "--ctrl".into(),
        format!("type=unixio,path={}", opt(&t.socket)),
        "--flags".into(),
        "startup-clear".into(),
        "--pid".into(),
        swtpm_pid_arg(&t.pid_file),
        "--log".into(),
        format!("file={},level=1", opt(&t.log)),
        "--terminate".into(),
        "--daemon".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::alloc::{Nic, mac, mcast};
    use crate::provision::disks::{self, DiskRequest};

    fn node(media: Media, uefi: bool, tpm: bool) -> NodeLaunch {
        let dir = PathBuf::from("/home/u/.talos/clusters/dev");
        let image = matches!(media, Media::SystemDisk).then(|| Path::new("/src/_out/disk.raw"));
        NodeLaunch {
            name: "dev-controlplane-1".into(),
            uuid: crate::provision::alloc::machine_uuid("dev", 0),
            accel: "tcg".into(),
            memory_mib: 1024,
            cpus: 2,
            media,
            ovmf: uefi.then(|| (PathBuf::from(OVMF_CODE), dir.join("dev-controlplane-1.vars.fd"))),
            api_port: 40123,
            api_mac: mac("dev", Nic::Api, 0),
            lan: mcast("dev", &[]),
            lan_mac: mac("dev", Nic::Lan, 0),
            tpm_socket: tpm.then(|| dir.join("controlplane-1.tpm/swtpm.sock")),
            disks: disks::plan(&dir, "dev-controlplane-1", &DiskRequest::default(), image),
            serial_log: dir.join("dev-controlplane-1.log"),
            pid_file: dir.join("dev-controlplane-1.pid"),
            qmp_socket: dir.join("controlplane-1.qmp"),
            events_socket: dir.join("controlplane-1.events"),
            serve_command: None,
            serve_tls_command: None,
            kms_command: None,
        }
    }

    fn serve_command(config: bool) -> String {
        let state = Path::new("/home/u/.talos/clusters/dev");
        let config = config.then(|| state.join("dev-controlplane-1.config.yaml"));
        super::super::serve::command(Path::new("/usr/bin/talosbox"), config.as_deref(), &state.join("images"))
    }

    #[test]
    fn node_ip_args_address_the_lan_nic_in_kernel_syntax() {
        use crate::network::cmdline;
        let args = node_ip_args("dev-controlplane-1", crate::provision::alloc::lan_address(0));
        assert_eq!(args, "ip=10.5.0.2:::255.255.255.0:dev-controlplane-1:eth1:off");
        // The node's own parser reads it back: the LAN address on eth1, and the hostname.
        let parsed = cmdline::parse(&crate::kernel::cmdline::Cmdline::parse(&args), &cmdline::LinkResolver::new())
            .expect("the node parses what the launcher writes");
        let addresses: Vec<String> = parsed
            .link_configs
            .iter()
            .map(|c| format!("{}={}", c.link_name, c.address.map(|a| a.to_string()).unwrap_or_default()))
            .collect();
        assert_eq!(addresses, ["eth1=10.5.0.2/24"]);
        assert_eq!(parsed.hostname.map(|h| h.hostname), Some("dev-controlplane-1".to_string()));
    }

    fn direct() -> Media {
        Media::Direct {
            kernel: "/src/_out/vmlinuz".into(),
            initrd: "/src/_out/initramfs.zst".into(),
            cmdline: crate::provision::boot::DEFAULT_CMDLINE.into(),
        }
    }

    /// Compares with a golden file (one argument per line); `UPDATE_GOLDEN=1` rewrites it.
    fn golden(name: &str, argv: &[String]) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/provision/golden").join(name);
        let got = argv.join("\n") + "\n";
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &got).unwrap();
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(got, want, "golden {} differs (UPDATE_GOLDEN=1 rewrites it)", path.display());
    }

    #[test]
    fn golden_direct_bios() {
        golden("direct-bios.argv", &qemu_argv(&node(direct(), false, false)));
    }

    #[test]
    fn golden_uki_uefi_tpm() {
        let esp = Media::Esp { image: "/home/u/.talos/clusters/dev/esp.img".into() };
        golden("uki-uefi-tpm.argv", &qemu_argv(&node(esp, true, true)));
    }

    #[test]
    fn golden_disk_bios_and_uefi() {
        golden("disk-bios.argv", &qemu_argv(&node(Media::SystemDisk, false, false)));
        golden("disk-uefi.argv", &qemu_argv(&node(Media::SystemDisk, true, false)));
    }

    #[test]
    fn golden_direct_uefi_with_extra_disks() {
        let mut n = node(direct(), true, false);
        let req = DiskRequest { extra: 2, ..DiskRequest::default() };
        n.disks = disks::plan(Path::new("/home/u/.talos/clusters/dev"), &n.name, &req, None);
        golden("direct-uefi-extra-disks.argv", &qemu_argv(&n));
    }

    /// Every disk a node has is written in place; only the UKI's shared ESP is a snapshot. The
    /// boot disk, and only it, has a boot index.
    #[test]
    fn only_the_esp_is_a_snapshot_and_only_the_boot_disk_has_a_boot_index() {
        let with = |argv: &[String], what: &str| argv.iter().filter(|a| a.contains(what)).cloned().collect::<Vec<_>>();
        let esp = qemu_argv(&node(Media::Esp { image: "/c/esp.img".into() }, true, false));
        assert_eq!(with(&esp, "snapshot=on"), ["if=none,id=esp-drive,format=raw,snapshot=on,file=/c/esp.img"]);
        assert_eq!(with(&esp, "bootindex"), ["virtio-blk-pci,id=esp,drive=esp-drive,serial=talosbox-esp,bootindex=0"]);
        let disk = qemu_argv(&node(Media::SystemDisk, false, false));
        assert!(with(&disk, "snapshot").is_empty(), "{disk:?}");
        assert_eq!(
            with(&disk, "bootindex"),
            ["virtio-blk-pci,id=system,drive=system-drive,serial=talosbox-system,bootindex=0"]
        );
        let direct = qemu_argv(&node(direct(), false, false));
        assert!(with(&direct, "snapshot").is_empty() && with(&direct, "bootindex").is_empty(), "{direct:?}");
        assert_eq!(with(&direct, "serial=talosbox-system").len(), 1);
        assert_eq!(
            direct.iter().position(|a| a == "-uuid").map(|i| direct[i + 1].clone()),
            Some(crate::provision::alloc::machine_uuid("dev", 0))
        );
    }

    #[test]
    fn golden_direct_served_config() {
        let cmdline =
            format!("{} talos.config={}", crate::provision::boot::DEFAULT_CMDLINE, super::super::serve::config_url());
        let mut n = node(
            Media::Direct { kernel: "/src/_out/vmlinuz".into(), initrd: "/src/_out/initramfs.zst".into(), cmdline },
            false,
            false,
        );
        n.serve_command = Some(serve_command(true));
        golden("direct-served-config.argv", &qemu_argv(&n));
    }

    /// A UKI node with a TPM after it installed itself: its launcher moved it to its system disk
    /// (no ESP any more, the system disk boots), everything else as before.
    #[test]
    fn golden_installed_uefi_tpm() {
        let mut n = node(Media::Esp { image: "/home/u/.talos/clusters/dev/esp.img".into() }, true, true);
        n.serve_command = Some(serve_command(false));
        n.media = Media::SystemDisk;
        golden("installed-uefi-tpm.argv", &qemu_argv(&n));
    }

    /// What the launcher changes when a node installed itself, and only that: a directly booted
    /// node loses -kernel/-initrd/-append, a UKI node its ESP, and the system disk gets boot
    /// index 0. Every other argument stays as it was, in order.
    #[test]
    fn switching_to_the_system_disk_drops_the_boot_media_and_nothing_else() {
        for before in [direct(), Media::Esp { image: "/c/esp.img".into() }] {
            let mut n = node(before.clone(), true, false);
            n.serve_command = Some(serve_command(true));
            let mut want = qemu_argv(&n);
            n.media = Media::SystemDisk;
            let got = qemu_argv(&n);
            match before {
                Media::Direct { .. } => {
                    let i = want.iter().position(|a| a == "-kernel").unwrap();
                    let gone: Vec<String> = want.drain(i..i + 6).collect();
                    assert_eq!(gone[2], "-initrd");
                    assert_eq!(gone[4], "-append");
                }
                _ => {
                    let i = want.iter().position(|a| a.contains("id=esp-drive")).unwrap() - 1;
                    let gone: Vec<String> = want.drain(i..i + 4).collect();
                    assert_eq!((gone[0].as_str(), gone[2].as_str()), ("-drive", "-device"));
                }
            }
            let system = want.iter_mut().find(|a| a.starts_with("virtio-blk-pci,id=system,")).unwrap();
            system.push_str(",bootindex=0");
            assert_eq!(got, want);
        }
    }

    /// A launch file carries a node's launch through JSON unchanged.
    #[test]
    fn a_node_launch_round_trips_through_json() {
        for media in [direct(), Media::Esp { image: "/c/esp.img".into() }, Media::SystemDisk] {
            let mut n = node(media, true, true);
            n.serve_command = Some(serve_command(true));
            let text = serde_json::to_string(&n).unwrap();
            assert_eq!(serde_json::from_str::<NodeLaunch>(&text).unwrap(), n, "{text}");
        }
    }

    /// Every node has the serving guestfwd; only one with a served config has `--file`.
    #[test]
    fn every_node_is_served_images_and_only_its_own_config() {
        let mut n = node(Media::SystemDisk, false, false);
        n.serve_command = Some(serve_command(false));
        let argv = qemu_argv(&n);
        let netdev = argv.iter().find(|a| a.starts_with("user,id=api,")).unwrap();
        assert!(
            netdev.ends_with(
                ",guestfwd=tcp:10.0.2.100:80-cmd:'/usr/bin/talosbox' talosctl cluster serve-config \
                 --images '/home/u/.talos/clusters/dev/images'"
            ),
            "{netdev}"
        );
    }

    #[test]
    fn the_kms_forward_runs_kms_launch_per_connection() {
        let mut n = node(Media::SystemDisk, false, false);
        let state = Path::new("/home/u/.talos/clusters/dev");
        n.kms_command = Some(super::super::serve::kms_command(Path::new("/usr/bin/talosbox"), &state.join("kms.key")));
        let argv = qemu_argv(&n);
        let netdev = argv.iter().find(|a| a.starts_with("user,id=api,")).unwrap();
        assert!(
            netdev.ends_with(
                ",guestfwd=tcp:10.0.2.101:4050-cmd:'/usr/bin/talosbox' talosctl kms-launch --stdio \
                 --kms-key-file '/home/u/.talos/clusters/dev/kms.key'"
            ),
            "{netdev}"
        );
    }

    #[test]
    fn golden_swtpm() {
        let d = PathBuf::from("/home/u/.talos/clusters/dev/controlplane-1.tpm");
        let t = SwtpmLaunch {
            state_dir: d.clone(),
            socket: d.join("swtpm.sock"),
            pid_file: d.join("swtpm.pid"),
            log: d.join("swtpm.log"),
        };
        golden("swtpm.argv", &swtpm_argv(&t));
    }

    #[test]
    fn commas_in_paths_are_escaped() {
        let mut n = node(Media::Esp { image: "/tmp/a,b/esp.img".into() }, false, false);
        n.disks[0].path = "/tmp/a,b/n.system.raw".into();
        n.qmp_socket = "/tmp/a,b/q".into();
        let argv = qemu_argv(&n);
        assert!(argv.contains(&"if=none,id=esp-drive,format=raw,snapshot=on,file=/tmp/a,,b/esp.img".to_string()));
        assert!(
            argv.contains(&"if=none,id=system-drive,format=raw,discard=unmap,file=/tmp/a,,b/n.system.raw".to_string())
        );
        assert!(argv.contains(&"unix:/tmp/a,,b/q,server=on,wait=off".to_string()));
    }
}

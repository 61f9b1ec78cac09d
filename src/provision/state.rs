//! A cluster's state directory and its record (`cluster.json`): which nodes exist, their ports,
//! MACs, machine UUIDs, disks, what each boots from, and the files holding their pids, sockets,
//! launch files and serial logs. `destroy` works from the record alone, so it is written before
//! the first process starts. Afterwards only the nodes' launchers change it (a node that
//! installed itself boots from its disk), each under the record's lock ([`update_node`]).
//!
//! Never stores anything secret, and never deletes outside the cluster's own directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::alloc::{Mcast, Role};
use super::argv::BootMedia;
use super::disks::{DiskRole, NodeDisk};
use super::{ProvisionError, io_err};

/// The record's file name inside the cluster directory.
pub const RECORD: &str = "cluster.json";

/// `~/.talos/clusters`, where Talos keeps its clusters' state too.
pub fn default_root() -> Result<PathBuf, ProvisionError> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or(ProvisionError::NoHome)?;
    Ok(PathBuf::from(home).join(".talos").join("clusters"))
}

/// One node's entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeRecord {
    pub name: String,
    pub role: Role,
    /// The SMBIOS system UUID QEMU gives the node (empty in records from before it had one).
    #[serde(default)]
    pub uuid: String,
    /// 127.0.0.1:<api_port> reaches the node's port 50000.
    pub api_port: u16,
    /// The node's address on the cluster LAN, when the launcher gave it one (`ip=` on a direct
    /// boot); `None` when the node must get it by DHCP.
    #[serde(default)]
    pub lan_address: Option<std::net::Ipv4Addr>,
    pub api_mac: String,
    pub lan_mac: String,
    pub serial_log: PathBuf,
    pub pid_file: PathBuf,
    pub qmp_socket: PathBuf,
    /// swtpm's pid file, when the node has a TPM.
    pub swtpm_pid_file: Option<PathBuf>,
    /// The node's disks, system disk first; files in the cluster directory.
    #[serde(default)]
    pub disks: Vec<NodeDisk>,
    /// The configuration file the launcher serves the node over `talos.config=` (a direct
    /// boot whose configuration `create` generated); `None` when it gets it over the API.
    #[serde(default)]
    pub served_config: Option<PathBuf>,
    /// The node's launcher (`talosctl cluster launch-node --launch <file>`): its launch file,
    /// which tells it apart from every other process, and its pid file. `None` in records from
    /// before nodes had launchers.
    #[serde(default)]
    pub launch_file: Option<PathBuf>,
    #[serde(default)]
    pub launcher_pid_file: Option<PathBuf>,
    /// What the node boots from now.
    #[serde(default)]
    pub boots_from: Option<BootMedia>,
}

/// The whole cluster.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClusterRecord {
    pub name: String,
    /// Seconds since the epoch when `create` started.
    pub created: u64,
    /// A human description of the boot path.
    pub boot: String,
    pub lan: Mcast,
    pub nodes: Vec<NodeRecord>,
}

impl ClusterRecord {
    pub fn write(&self, dir: &Path) -> Result<(), ProvisionError> {
        let path = dir.join(RECORD);
        let tmp = dir.join(format!("{RECORD}.tmp"));
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|source| ProvisionError::Record { path: path.clone(), source })?;
        text.push('\n');
        std::fs::write(&tmp, text).map_err(io_err("writing", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err("renaming into place", &path))
    }

    pub fn read(dir: &Path) -> Result<Self, ProvisionError> {
        let path = dir.join(RECORD);
        let text = std::fs::read_to_string(&path).map_err(io_err("reading", &path))?;
        serde_json::from_str(&text).map_err(|source| ProvisionError::Record { path, source })
    }
}

impl ClusterRecord {
    /// What `create` and `show` print: the boot path, the LAN, how to reach each node (API on
    /// 127.0.0.1), where its serial log is, and how to destroy the cluster. `state` is the
    /// `--state` the user gave, repeated in the destroy hint.
    pub fn summary(&self, state: Option<&Path>) -> String {
        let mut out = format!("cluster {:?}: {} node(s), {}\n", self.name, self.nodes.len(), self.boot);
        out += &format!("node LAN: multicast {} (QEMU socket netdev on 127.0.0.1)\n", self.lan);
        if let Some(first) = self.nodes.first() {
            out += &disks_line(&first.disks);
        }
        out += &format!("{:<32} {:<13} {:<18} {:<18} SERIAL LOG\n", "NODE", "ROLE", "API (:50000)", "LAN MAC");
        for n in &self.nodes {
            let api = format!("127.0.0.1:{}", n.api_port);
            out += &format!(
                "{:<32} {:<13} {:<18} {:<18} {}\n",
                n.name,
                n.role.to_string(),
                api,
                n.lan_mac,
                n.serial_log.display()
            );
        }
        let state = state.map(|s| format!(" --state {}", s.display())).unwrap_or_default();
        out += &format!("destroy with: talosctl cluster destroy --name {}{state}\n", self.name);
        out
    }
}

/// The disks every node has (the same for all of a cluster's nodes), in one line.
fn disks_line(disks: &[NodeDisk]) -> String {
    let mut parts = Vec::new();
    for d in disks.iter().filter(|d| d.role == DiskRole::System) {
        let from = match &d.source {
            Some(image) => format!("a copy of {}", image.display()),
            None => "blank".to_string(),
        };
        parts.push(format!("system {} MiB ({from}, serial {})", d.size_mib, d.serial));
    }
    let extras: Vec<&NodeDisk> = disks.iter().filter(|d| d.role == DiskRole::Extra).collect();
    if let (Some(first), Some(last)) = (extras.first(), extras.last()) {
        let serials =
            if extras.len() == 1 { first.serial.clone() } else { format!("{} .. {}", first.serial, last.serial) };
        parts.push(format!("{} extra of {} MiB (blank, serial {serials})", extras.len(), first.size_mib));
    }
    if parts.is_empty() { String::new() } else { format!("disks per node: {}\n", parts.join(", ")) }
}

/// The lock file beside the record that serialises its updates.
pub const RECORD_LOCK: &str = "cluster.json.lock";

/// Changes one node's entry in the record in `dir`: read, `change`, write back, all under an
/// exclusive lock on [`RECORD_LOCK`], so the launchers of several nodes never lose each other's
/// updates.
pub fn update_node(dir: &Path, node: &str, change: impl FnOnce(&mut NodeRecord)) -> Result<(), ProvisionError> {
    use rustix::fs::{FlockOperation, flock};
    let lock_path = dir.join(RECORD_LOCK);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_err("opening the record's lock", &lock_path))?;
    flock(&lock, FlockOperation::LockExclusive)
        .map_err(|e| io_err("locking the record", &lock_path)(std::io::Error::from(e)))?;
    let mut record = ClusterRecord::read(dir)?;
    let Some(entry) = record.nodes.iter_mut().find(|n| n.name == node) else {
        return Err(ProvisionError::Conflict(format!("the record in {} has no node {node:?}", dir.display())));
    };
    change(entry);
    record.write(dir)
    // The lock goes with `lock`.
}

/// The LAN groups held by the other clusters under `root`, so a new cluster picks another.
pub fn taken_lans(root: &Path) -> Vec<Mcast> {
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    entries.flatten().filter_map(|e| ClusterRecord::read(&e.path()).ok()).map(|r| r.lan).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record written before nodes had UUIDs and a disk list (one optional blank data disk)
    /// still reads, so such a cluster can be shown and destroyed.
    #[test]
    fn an_older_record_still_reads() {
        let text = r#"{"name":"old","created":1,"boot":"direct","lan":"230.1.2.3:20001","nodes":[
            {"name":"old-controlplane-1","role":"controlplane","api_port":40000,"api_mac":"52:54:00:00:00:01",
             "lan_mac":"52:54:00:00:01:01","serial_log":"/x/l","pid_file":"/x/p","qmp_socket":"/x/q",
             "swtpm_pid_file":null,"data_disk":"/x/old-controlplane-1.disk"}]}"#;
        let rec: ClusterRecord = serde_json::from_str(text).unwrap();
        assert_eq!(rec.nodes[0].uuid, "");
        assert!(rec.nodes[0].disks.is_empty());
        assert_eq!((&rec.nodes[0].launch_file, rec.nodes[0].boots_from), (&None, None), "no launcher then");
        assert_eq!(rec.summary(None).lines().filter(|l| l.starts_with("disks")).count(), 0);
    }

    #[test]
    fn record_round_trips_through_disk() {
        let dir = std::env::temp_dir().join(format!("talosbox-state-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("c1")).unwrap();
        let rec = ClusterRecord {
            name: "c1".into(),
            created: 1,
            boot: "direct".into(),
            lan: "230.1.2.3:20001".parse().unwrap(),
            nodes: vec![NodeRecord {
                name: "c1-controlplane-1".into(),
                role: Role::Controlplane,
                uuid: crate::provision::alloc::machine_uuid("c1", 0),
                api_port: 40000,
                lan_address: Some("10.5.0.2".parse().unwrap()),
                api_mac: "52:54:00:00:00:01".into(),
                lan_mac: "52:54:00:00:01:01".into(),
                serial_log: "/x/c1-controlplane-1.log".into(),
                pid_file: "/x/c1-controlplane-1.pid".into(),
                qmp_socket: "/x/c1-controlplane-1.qmp".into(),
                swtpm_pid_file: None,
                disks: crate::provision::disks::plan(
                    Path::new("/x"),
                    "c1-controlplane-1",
                    &crate::provision::disks::DiskRequest { extra: 2, ..Default::default() },
                    Some(Path::new("/src/_out/disk.raw")),
                ),
                served_config: None,
                launch_file: Some("/x/c1-controlplane-1.launch.json".into()),
                launcher_pid_file: Some("/x/c1-controlplane-1.launcher.pid".into()),
                boots_from: Some(BootMedia::Direct),
            }],
        };
        rec.write(&dir.join("c1")).unwrap();
        assert_eq!(ClusterRecord::read(&dir.join("c1")).unwrap(), rec);
        let text = std::fs::read_to_string(dir.join("c1").join(RECORD)).unwrap();
        assert!(text.contains("\"lan\": \"230.1.2.3:20001\""), "{text}");
        assert!(text.contains("\"role\": \"controlplane\""), "{text}");
        assert!(text.contains("\"path\": \"/x/c1-controlplane-1.extra-2.raw\""), "{text}");
        assert!(text.contains(&format!("\"uuid\": \"{}\"", rec.nodes[0].uuid)), "{text}");
        assert_eq!(taken_lans(&dir), vec![rec.lan]);
        let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/provision/golden/summary.txt");
        let got = rec.summary(Some(Path::new("/tmp/s")));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden, &got).unwrap();
        }
        assert_eq!(got, std::fs::read_to_string(&golden).unwrap_or_default(), "golden {}", golden.display());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Launchers of several nodes change their entries at once: no update is lost.
    #[test]
    fn concurrent_node_updates_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let node = |i: usize| NodeRecord {
            name: format!("c-worker-{i}"),
            role: Role::Worker,
            uuid: String::new(),
            api_port: 40000,
            lan_address: None,
            api_mac: String::new(),
            lan_mac: String::new(),
            serial_log: PathBuf::new(),
            pid_file: PathBuf::new(),
            qmp_socket: PathBuf::new(),
            swtpm_pid_file: None,
            disks: Vec::new(),
            served_config: None,
            launch_file: None,
            launcher_pid_file: None,
            boots_from: Some(BootMedia::Esp),
        };
        let rec = ClusterRecord {
            name: "c".into(),
            created: 0,
            boot: "test".into(),
            lan: "230.1.2.3:20001".parse().unwrap(),
            nodes: (0..8).map(node).collect(),
        };
        rec.write(dir.path()).unwrap();
        std::thread::scope(|s| {
            for i in 0..8 {
                let dir = dir.path();
                s.spawn(move || {
                    for _ in 0..20 {
                        update_node(dir, &format!("c-worker-{i}"), |n| n.api_port += 1).unwrap();
                    }
                    update_node(dir, &format!("c-worker-{i}"), |n| n.boots_from = Some(BootMedia::SystemDisk)).unwrap();
                });
            }
        });
        let after = ClusterRecord::read(dir.path()).unwrap();
        for n in &after.nodes {
            assert_eq!((n.api_port, n.boots_from), (40020, Some(BootMedia::SystemDisk)), "{}", n.name);
        }
        let err = update_node(dir.path(), "c-worker-99", |_| {}).unwrap_err().to_string();
        assert!(err.contains("no node \"c-worker-99\""), "{err}");
    }
}

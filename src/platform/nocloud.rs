//! Cloud-init's NoCloud seed, found where Talos's nocloud platform looks for it:
//!
//! 1. `ds=nocloud;s=<URL>` (or `ds=nocloud-net;…`) on the kernel command line, else in the
//!    SMBIOS system serial number (QEMU's `-smbios type=1,serial=ds=nocloud;s=…`, Proxmox's
//!    `smbios1`): `meta-data`, `network-config` and `user-data` are fetched from under the
//!    URL. Keys `s`/`seedfrom`, `h`/`local-hostname` and `i`/`instance-id`, as cloud-init.
//! 2. Otherwise a block device whose vfat or ISO 9660 file system is labelled `cidata` or
//!    `CIDATA`: the same three files from its root directory, read without mounting.
//!
//! `network-config` becomes platform-layer network candidates ([`crate::network::nocloud`]),
//! `meta-data` the hostname and the PlatformMetadata, `user-data` the machine configuration
//! when it is one (a `#cloud-config` document is not).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{FetchError, fetch};
use crate::block;
use crate::kernel::cmdline::Cmdline;

/// The labels a seed file system may have.
pub const LABELS: &[&str] = &["cidata", "CIDATA"];
pub const META_DATA: &str = "meta-data";
pub const NETWORK_CONFIG: &str = "network-config";
pub const USER_DATA: &str = "user-data";
/// The largest seed file read.
pub const MAX_FILE: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("ds={0}: not a nocloud data source (nocloud or nocloud-net)")]
    NotNocloud(String),
    #[error("ds=…;s={0}: only an http:// seed is read (not https, file or a local path)")]
    Seedfrom(String),
    #[error(
        "no nocloud seed yet: no ds= on the kernel command line or in the SMBIOS serial number, and no block device with a vfat or iso9660 file system labelled cidata or CIDATA"
    )]
    NotFound,
    #[error("nocloud seed {path}: {source}")]
    Disk { path: String, source: std::io::Error },
    #[error("nocloud seed: {0}")]
    Fetch(FetchError),
    #[error("nocloud seed {seed}: {name} is not UTF-8 text")]
    NotText { seed: String, name: &'static str },
    #[error("nocloud seed {seed}: meta-data: {reason}")]
    MetaData { seed: String, reason: String },
}

/// What `ds=` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataSource {
    pub seedfrom: Option<String>,
    pub hostname: Option<String>,
    pub instance_id: Option<String>,
}

impl DataSource {
    /// Parses a `ds=` value: `nocloud` or `nocloud-net`, then `;key=value` pairs. Keys cloud-init
    /// does not define are passed over.
    pub fn parse(value: &str) -> Result<DataSource, SeedError> {
        let mut parts = value.split(';');
        let name = parts.next().unwrap_or_default();
        if name != "nocloud" && name != "nocloud-net" {
            return Err(SeedError::NotNocloud(value.to_string()));
        }
        let mut ds = DataSource::default();
        for part in parts {
            let Some((key, v)) = part.split_once('=') else { continue };
            let v = Some(v.to_string()).filter(|v| !v.is_empty());
            match key {
                "s" | "seedfrom" => ds.seedfrom = v,
                "h" | "local-hostname" => ds.hostname = v,
                "i" | "instance-id" => ds.instance_id = v,
                _ => {}
            }
        }
        Ok(ds)
    }
}

/// Where a node looks: sysfs and the device nodes (so tests can point elsewhere).
#[derive(Debug, Clone)]
pub struct Paths {
    pub sys_class_block: PathBuf,
    pub dev: PathBuf,
    /// `/sys/class/dmi/id`: the SMBIOS strings.
    pub dmi: PathBuf,
}

impl Paths {
    pub fn node() -> Paths {
        Paths { sys_class_block: "/sys/class/block".into(), dev: "/dev".into(), dmi: "/sys/class/dmi/id".into() }
    }
}

/// Where the seed's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A base URL ending in `/`.
    Url(String),
    /// A block device with a seed file system.
    Disk { path: PathBuf, filesystem: &'static str },
}

/// A located seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    pub source: Source,
    pub ds: DataSource,
}

/// The `ds=` in force: the kernel command line's, else the SMBIOS serial number's.
fn data_source(cmdline: &Cmdline, paths: &Paths) -> Result<Option<DataSource>, SeedError> {
    if let Some(ds) = cmdline.get("ds") {
        return DataSource::parse(ds).map(Some);
    }
    let serial = std::fs::read_to_string(paths.dmi.join("product_serial")).unwrap_or_default();
    match serial.trim().strip_prefix("ds=") {
        Some(ds) => DataSource::parse(ds).map(Some),
        None => Ok(None),
    }
}

/// Finds the seed (blocking: it may read every block device's first sectors). A seed that is
/// not there yet ([`SeedError::NotFound`]) may appear later: a disk whose driver is still
/// loading.
pub fn locate(cmdline: &Cmdline, paths: &Paths) -> Result<Seed, SeedError> {
    let ds = data_source(cmdline, paths)?.unwrap_or_default();
    if let Some(s) = &ds.seedfrom {
        if !s.starts_with("http://") {
            return Err(SeedError::Seedfrom(s.clone()));
        }
        let base = if s.ends_with('/') { s.clone() } else { format!("{s}/") };
        return Ok(Seed { source: Source::Url(base), ds });
    }
    let devices = block::block_devices(&paths.sys_class_block, &paths.dev)
        .map_err(|source| SeedError::Disk { path: paths.sys_class_block.display().to_string(), source })?;
    match block::find_by_label(&devices, LABELS) {
        Some((path, fs)) => Ok(Seed { source: Source::Disk { path, filesystem: fs.kind() }, ds }),
        None => Err(SeedError::NotFound),
    }
}

fn read_disk(path: &Path, name: &str) -> Result<Option<Vec<u8>>, std::io::Error> {
    let mut fs = block::probe_path(path)?.ok_or_else(|| block::invalid("no longer a vfat or iso9660 file system"))?;
    if !LABELS.contains(&fs.label()?.as_str()) {
        return Err(block::invalid("no longer labelled cidata"));
    }
    fs.read_root_file(name, MAX_FILE)
}

impl Seed {
    /// How the seed is named in messages: its URL, or its device and file system.
    pub fn describe(&self) -> String {
        match &self.source {
            Source::Url(base) => base.clone(),
            Source::Disk { path, filesystem } => format!("{} ({filesystem})", path.display()),
        }
    }

    /// The seed's file `name` (one of [`META_DATA`], [`NETWORK_CONFIG`], [`USER_DATA`]);
    /// `Ok(None)` when the seed has no such file.
    pub async fn read(&self, name: &'static str) -> Result<Option<String>, SeedError> {
        let bytes = match &self.source {
            Source::Url(base) => match fetch(&format!("{base}{name}"), MAX_FILE).await {
                Ok(text) => return Ok(Some(text)),
                Err(FetchError::NotFound(_)) => return Ok(None),
                Err(e) => return Err(SeedError::Fetch(e)),
            },
            Source::Disk { path, .. } => {
                let path = path.clone();
                let disk = |source| SeedError::Disk { path: path.display().to_string(), source };
                let read = {
                    let path = path.clone();
                    tokio::task::spawn_blocking(move || read_disk(&path, name)).await
                };
                read.map_err(|e| disk(std::io::Error::other(e.to_string())))?.map_err(disk)?
            }
        };
        match bytes {
            None => Ok(None),
            Some(bytes) => {
                String::from_utf8(bytes).map(Some).map_err(|_| SeedError::NotText { seed: self.describe(), name })
            }
        }
    }
}

/// The `meta-data` keys Talos's nocloud platform reads; the rest (cloud-init has many) are
/// passed over.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct MetaData {
    pub hostname: Option<String>,
    #[serde(rename = "local-hostname")]
    pub local_hostname: Option<String>,
    #[serde(rename = "public-hostname")]
    pub public_hostname: Option<String>,
    #[serde(rename = "instance-id")]
    pub instance_id: Option<String>,
    #[serde(rename = "instance-type")]
    pub instance_type: Option<String>,
    #[serde(rename = "provider-id")]
    pub provider_id: Option<String>,
    pub region: Option<String>,
    pub zone: Option<String>,
}

impl MetaData {
    /// Reads `meta-data` (YAML, or JSON); blank is empty.
    pub fn parse(text: &str) -> Result<MetaData, String> {
        if text.trim().is_empty() {
            return Ok(MetaData::default());
        }
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }

    /// The node's hostname: `ds=…;h=` first, then `hostname`, then `local-hostname`.
    pub fn hostname(&self, ds: &DataSource) -> Option<String> {
        ds.hostname.clone().or_else(|| self.hostname.clone()).or_else(|| self.local_hostname.clone())
    }
}

/// Whether `user-data` is a machine configuration: not blank and not a cloud-config (or any
/// other `#`-introduced cloud-init format), which a Talos node does not act on.
pub fn is_machine_config(user_data: &str) -> bool {
    let first = user_data.lines().map(str::trim).find(|l| !l.is_empty());
    first.is_some_and(|l| !l.starts_with("#cloud-") && !l.starts_with("#!") && !l.starts_with("#include"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(s: &str) -> Result<DataSource, String> {
        DataSource::parse(s).map_err(|e| e.to_string())
    }

    #[test]
    fn ds_values_as_cloud_init_documents_them() {
        let seed = |s: &str, h: &str, i: &str| DataSource {
            seedfrom: Some(s.to_string()).filter(|s| !s.is_empty()),
            hostname: Some(h.to_string()).filter(|s| !s.is_empty()),
            instance_id: Some(i.to_string()).filter(|s| !s.is_empty()),
        };
        assert_eq!(
            ds("nocloud-net;s=http://10.10.0.1/configs/;h=node1"),
            Ok(seed("http://10.10.0.1/configs/", "node1", ""))
        );
        assert_eq!(
            ds("nocloud;seedfrom=http://h/;local-hostname=n;instance-id=i-9"),
            Ok(seed("http://h/", "n", "i-9"))
        );
        assert_eq!(ds("nocloud;i=abc;x=unknown"), Ok(seed("", "", "abc")));
        assert_eq!(ds("nocloud"), Ok(DataSource::default()));
        assert_eq!(
            ds("ec2;s=http://x/"),
            Err("ds=ec2;s=http://x/: not a nocloud data source (nocloud or nocloud-net)".into())
        );
    }

    fn paths(dir: &Path) -> Paths {
        let p = Paths { sys_class_block: dir.join("block"), dev: dir.join("dev"), dmi: dir.join("dmi") };
        for d in [&p.sys_class_block, &p.dev, &p.dmi] {
            std::fs::create_dir_all(d).unwrap();
        }
        p
    }

    #[test]
    fn the_command_line_then_the_smbios_serial_then_a_disk() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let none = Cmdline::parse("talos.platform=nocloud");
        assert!(matches!(locate(&none, &p), Err(SeedError::NotFound)));

        // A seed disk appears: a vfat image standing in for /dev/vdb.
        std::fs::create_dir(p.sys_class_block.join("vdb")).unwrap();
        std::fs::write(p.sys_class_block.join("vdb/size"), "2880\n").unwrap();
        crate::block::testing::vfat(&p.dev.join("vdb"), None, 1440, "cidata", &[]);
        let seed = locate(&none, &p).unwrap();
        assert_eq!(seed.source, Source::Disk { path: p.dev.join("vdb"), filesystem: "vfat" });
        assert!(seed.describe().ends_with("/dev/vdb (vfat)"), "{}", seed.describe());

        // The SMBIOS serial wins over the disk, the command line over both.
        std::fs::write(p.dmi.join("product_serial"), "ds=nocloud-net;s=http://10.0.2.2:8080/seed\n").unwrap();
        let seed = locate(&none, &p).unwrap();
        assert_eq!(seed.source, Source::Url("http://10.0.2.2:8080/seed/".into()));
        let cmdline = Cmdline::parse("talos.platform=nocloud ds=nocloud;s=http://192.0.2.1/;h=n1");
        let seed = locate(&cmdline, &p).unwrap();
        assert_eq!(seed.source, Source::Url("http://192.0.2.1/".into()));
        assert_eq!(seed.ds.hostname.as_deref(), Some("n1"));

        let err = locate(&Cmdline::parse("ds=nocloud;s=file:///seed/"), &p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ds=…;s=file:///seed/: only an http:// seed is read (not https, file or a local path)"
        );
    }

    #[test]
    fn meta_data_and_the_hostname() {
        let md = MetaData::parse(
            "instance-id: iid-1\nlocal-hostname: node-1\nregion: r1\nnetwork-interfaces: |\n  auto eth0\n",
        )
        .unwrap();
        assert_eq!(md.instance_id.as_deref(), Some("iid-1"));
        assert_eq!(md.region.as_deref(), Some("r1"));
        assert_eq!(md.hostname(&DataSource::default()).as_deref(), Some("node-1"));
        let both = MetaData::parse("{\"hostname\": \"a.example.com\", \"local-hostname\": \"b\"}").unwrap();
        assert_eq!(both.hostname(&DataSource::default()).as_deref(), Some("a.example.com"));
        let h = DataSource { hostname: Some("c".into()), ..DataSource::default() };
        assert_eq!(both.hostname(&h).as_deref(), Some("c"));
        assert_eq!(MetaData::parse("\n").unwrap(), MetaData::default());
        assert!(MetaData::parse("[1, 2]").is_err());
    }

    #[test]
    fn user_data_that_is_a_machine_configuration() {
        assert!(is_machine_config("version: v1alpha1\nmachine:\n  type: worker\n"));
        assert!(is_machine_config("\n# a comment\nversion: v1alpha1\n"));
        assert!(!is_machine_config("#cloud-config\npackages: [vim]\n"));
        assert!(!is_machine_config("#!/bin/sh\necho hi\n"));
        assert!(!is_machine_config("  \n"));
    }

    /// A seed server on 127.0.0.1: `files` by path, 404 for the rest.
    async fn serve(files: &'static [(&'static str, &'static str)]) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else { return };
                let mut head = vec![0u8; 4096];
                let n = conn.read(&mut head).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&head[..n]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or_default().to_string();
                let reply = match files.iter().find(|(p, _)| *p == path) {
                    Some((_, body)) => {
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
                    }
                    None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
                };
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        format!("http://{addr}/seed/")
    }

    #[tokio::test]
    async fn a_seed_url_is_read_over_http_and_a_missing_file_is_none() {
        let base =
            serve(&[("/seed/meta-data", "local-hostname: web-1\n"), ("/seed/user-data", "version: v1alpha1\n")]).await;
        let dir = tempfile::tempdir().unwrap();
        let cmdline =
            Cmdline::parse(&format!("talos.platform=nocloud ds=nocloud-net;s={}", base.trim_end_matches('/')));
        let seed = locate(&cmdline, &paths(dir.path())).unwrap();
        assert_eq!(seed.describe(), base);
        assert_eq!(seed.read(META_DATA).await.unwrap().as_deref(), Some("local-hostname: web-1\n"));
        assert_eq!(seed.read(USER_DATA).await.unwrap().as_deref(), Some("version: v1alpha1\n"));
        assert_eq!(seed.read(NETWORK_CONFIG).await.unwrap(), None);
        let gone = Seed { source: Source::Url("http://127.0.0.1:1/".into()), ds: DataSource::default() };
        let err = gone.read(META_DATA).await.unwrap_err().to_string();
        assert!(err.starts_with("nocloud seed: http://127.0.0.1:1/meta-data: connecting:"), "{err}");
    }
}

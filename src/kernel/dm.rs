//! Device-mapper mappings through the kernel's ioctls on `/dev/mapper/control` (the
//! `devicemapper` crate, which speaks them without libdevmapper): the `crypt` mappings a LUKS2
//! volume opens as. There is no udevd on a node, so the `/dev/mapper/<name>` node that udev
//! would make is made here; the kernel's own node is `/dev/dm-<minor>` in devtmpfs.

use std::path::{Path, PathBuf};

use devicemapper::{DM, DevId, DmFlags, DmName, DmOptions, DmUuid};

/// Where the named nodes go, as udev's rules put them.
pub const MAPPER_DIR: &str = "/dev/mapper";

#[derive(Debug, thiserror::Error)]
pub enum DmError {
    #[error("device-mapper: {what} {name:?}: {reason}")]
    Ioctl { what: &'static str, name: String, reason: String },
    #[error("device-mapper: {what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// A live mapping: its name and the kernel's device number and node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub name: String,
    pub major: u32,
    pub minor: u32,
}

impl Mapping {
    /// `/dev/dm-<minor>`, the node devtmpfs makes (what Talos reports, once it resolves
    /// `/dev/mapper/<name>`).
    pub fn dev_path(&self) -> PathBuf {
        PathBuf::from(format!("/dev/dm-{}", self.minor))
    }

    /// `/dev/mapper/<name>`.
    pub fn mapper_path(&self) -> PathBuf {
        Path::new(MAPPER_DIR).join(&self.name)
    }
}

/// One target line: start and length in 512-byte sectors, the target type and its parameters.
pub struct Target<'a> {
    pub start: u64,
    pub length: u64,
    pub kind: &'a str,
    pub params: &'a str,
}

fn control(name: &str) -> Result<DM, DmError> {
    DM::new().map_err(|e| DmError::Ioctl {
        what: "opening /dev/mapper/control for",
        name: name.into(),
        reason: e.to_string(),
    })
}

fn dm_name(name: &str) -> Result<&DmName, DmError> {
    DmName::new(name).map_err(|e| DmError::Ioctl { what: "naming", name: name.into(), reason: e.to_string() })
}

/// The mapping called `name`, if the kernel has one.
pub fn find(name: &str) -> Result<Option<Mapping>, DmError> {
    let dm = control(name)?;
    let listed = dm.list_devices().map_err(|e| DmError::Ioctl {
        what: "listing mappings for",
        name: name.into(),
        reason: e.to_string(),
    })?;
    Ok(listed.into_iter().find(|(n, _, _)| n.to_string() == name).map(|(_, dev, _)| Mapping {
        name: name.into(),
        major: dev.major,
        minor: dev.minor,
    }))
}

/// Every mapping the kernel has, by name.
pub fn list() -> Result<Vec<Mapping>, DmError> {
    let dm = control("*")?;
    let listed =
        dm.list_devices().map_err(|e| DmError::Ioctl { what: "listing", name: "*".into(), reason: e.to_string() })?;
    Ok(listed
        .into_iter()
        .map(|(n, dev, _)| Mapping { name: n.to_string(), major: dev.major, minor: dev.minor })
        .collect())
}

/// Creates mapping `name` (with `uuid`), loads `table` and resumes it, then makes its
/// `/dev/mapper` node. A failure after the create removes the half-made mapping. The table
/// is loaded with the kernel's secure-data flag: it wipes its copy of the ioctl buffer (a
/// crypt table holds the volume key).
pub fn create(name: &str, uuid: &str, table: &[Target<'_>], read_only: bool) -> Result<Mapping, DmError> {
    let dm = control(name)?;
    let dname = dm_name(name)?;
    let duuid =
        DmUuid::new(uuid).map_err(|e| DmError::Ioctl { what: "naming", name: uuid.into(), reason: e.to_string() })?;
    let flags = if read_only { DmFlags::DM_READONLY } else { DmFlags::empty() };
    let info = dm
        .device_create(dname, Some(duuid), DmOptions::default().set_flags(flags))
        .map_err(|e| DmError::Ioctl { what: "creating", name: name.into(), reason: e.to_string() })?;
    let id = DevId::Name(dname);
    let loaded = (|| {
        let targets: Vec<(u64, u64, String, String)> =
            table.iter().map(|t| (t.start, t.length, t.kind.to_string(), t.params.to_string())).collect();
        let loaded = dm.table_load(&id, &targets, DmOptions::default().set_flags(flags | DmFlags::DM_SECURE_DATA));
        // The crate's copy of the parameters holds the key too.
        drop(zeroize::Zeroizing::new(targets.into_iter().map(|t| t.3).collect::<Vec<String>>()));
        loaded.map_err(|e| DmError::Ioctl {
            what: "loading the table of",
            name: name.into(),
            reason: e.to_string(),
        })?;
        dm.device_suspend(&id, DmOptions::default()).map_err(|e| DmError::Ioctl {
            what: "resuming",
            name: name.into(),
            reason: e.to_string(),
        })
    })();
    if let Err(e) = loaded {
        let _ = dm.device_remove(&id, DmOptions::default());
        return Err(e);
    }
    let dev = info.device();
    let mapping = Mapping { name: name.into(), major: dev.major, minor: dev.minor };
    make_node(&mapping)?;
    Ok(mapping)
}

/// Removes mapping `name` and its `/dev/mapper` node; `false` when there was none. A mapping
/// still open (mounted) is refused by the kernel with EBUSY.
pub fn remove(name: &str) -> Result<bool, DmError> {
    if find(name)?.is_none() {
        return Ok(false);
    }
    let dm = control(name)?;
    dm.device_remove(&DevId::Name(dm_name(name)?), DmOptions::default()).map_err(|e| DmError::Ioctl {
        what: "removing",
        name: name.into(),
        reason: e.to_string(),
    })?;
    let _ = std::fs::remove_file(Path::new(MAPPER_DIR).join(name));
    Ok(true)
}

/// Removes every mapping whose name starts with `prefix`, as a node going down closes its
/// encrypted volumes once they are unmounted; returns what was closed and what failed. With
/// no device-mapper in the kernel (no control node), there is nothing to close.
pub fn close_all(prefix: &str) -> (Vec<String>, Vec<DmError>) {
    if !Path::new(MAPPER_DIR).join("control").exists() {
        return (Vec::new(), Vec::new());
    }
    let (mut closed, mut failed) = (Vec::new(), Vec::new());
    match list() {
        Ok(all) => {
            for m in all.into_iter().filter(|m| m.name.starts_with(prefix)) {
                match remove(&m.name) {
                    Ok(_) => closed.push(m.name),
                    Err(e) => failed.push(e),
                }
            }
        }
        Err(e) => failed.push(e),
    }
    (closed, failed)
}

/// `/dev/mapper/<name>` as a block node of the mapping's number (replacing a stale one).
fn make_node(m: &Mapping) -> Result<(), DmError> {
    let io = |what: String| move |source| DmError::Io { what, source };
    std::fs::create_dir_all(MAPPER_DIR).map_err(io(format!("creating {MAPPER_DIR}")))?;
    let path = m.mapper_path();
    let _ = std::fs::remove_file(&path);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &path,
        rustix::fs::FileType::BlockDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(m.major, m.minor),
    )
    .map_err(|e| DmError::Io { what: format!("making {}", path.display()), source: e.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_named_as_udev_and_devtmpfs_name_them() {
        let m = Mapping { name: "luks2-EPHEMERAL".into(), major: 253, minor: 2 };
        assert_eq!(m.dev_path(), PathBuf::from("/dev/dm-2"));
        assert_eq!(m.mapper_path(), PathBuf::from("/dev/mapper/luks2-EPHEMERAL"));
    }
}

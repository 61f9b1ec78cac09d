//! Device-mapper mappings through the kernel's ioctls on `/dev/mapper/control`
//! (linux/dm-ioctl.h, interface 4): the `crypt` mappings a LUKS2 volume opens as. Six
//! commands are all a node needs (list, create, load a table, resume, remove, and the version
//! handshake each carries), so they are spoken here rather than through libdevmapper or a crate
//! whose build needs its headers. There is no udevd on a node, so the `/dev/mapper/<name>` node
//! udev would make is made here; the kernel's own node is `/dev/dm-<minor>` in devtmpfs.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use zeroize::Zeroize;

/// Where the named nodes go, as udev's rules put them.
pub const MAPPER_DIR: &str = "/dev/mapper";
const CONTROL: &str = "/dev/mapper/control";

// linux/dm-ioctl.h: `struct dm_ioctl` is 312 bytes; the payload starts after it (8-aligned).
const HEADER_LEN: usize = 312;
const NAME_LEN: usize = 128;
const UUID_LEN: usize = 129;
const TARGET_SPEC_LEN: usize = 40;
const TARGET_TYPE_LEN: usize = 16;
const OFF_DATA_SIZE: usize = 12;
const OFF_DATA_START: usize = 16;
const OFF_TARGET_COUNT: usize = 20;
const OFF_FLAGS: usize = 28;
const OFF_DEV: usize = 40;
const OFF_NAME: usize = 48;
const OFF_UUID: usize = OFF_NAME + NAME_LEN;
/// The interface version asked for: major 4, any minor the kernel has.
const VERSION: [u32; 3] = [4, 0, 0];

const CMD_LIST_DEVICES: u8 = 2;
const CMD_DEV_CREATE: u8 = 3;
const CMD_DEV_REMOVE: u8 = 4;
const CMD_DEV_SUSPEND: u8 = 6;
const CMD_TABLE_LOAD: u8 = 9;

const FLAG_READONLY: u32 = 1 << 0;
const FLAG_BUFFER_FULL: u32 = 1 << 8;
/// The kernel wipes its copy of the ioctl buffer afterwards (a crypt table holds the key).
const FLAG_SECURE_DATA: u32 = 1 << 15;

/// `_IOWR(0xfd, cmd, struct dm_ioctl)`.
const fn request(cmd: u8) -> u64 {
    (3 << 30) | ((HEADER_LEN as u64) << 16) | (0xfd << 8) | cmd as u64
}

#[derive(Debug, thiserror::Error)]
pub enum DmError {
    #[error("device-mapper: {what} {name:?}: {reason}")]
    Ioctl { what: &'static str, name: String, reason: String },
    #[error("device-mapper: {what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// A live mapping: its name and the kernel's device number.
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

/// The kernel's `huge_encode_dev` number, decoded.
fn decode_dev(dev: u64) -> (u32, u32) {
    let major = ((dev & 0xfff00) >> 8) as u32;
    let minor = ((dev & 0xff) | ((dev >> 12) & 0xfff00)) as u32;
    (major, minor)
}

/// An ioctl buffer: the header, then `payload_room` bytes for what goes in or comes back.
/// Wiped when dropped (a table load carries a key).
struct Buffer(Vec<u8>);

impl Drop for Buffer {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl Buffer {
    fn new(name: &str, payload: &[u8], payload_room: usize) -> Result<Buffer, DmError> {
        check_name(name)?;
        let size = HEADER_LEN + payload_room.max(payload.len());
        let mut b = vec![0u8; size];
        for (i, v) in VERSION.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
        }
        b[OFF_DATA_SIZE..OFF_DATA_SIZE + 4].copy_from_slice(&(size as u32).to_ne_bytes());
        b[OFF_DATA_START..OFF_DATA_START + 4].copy_from_slice(&(HEADER_LEN as u32).to_ne_bytes());
        b[OFF_NAME..OFF_NAME + name.len()].copy_from_slice(name.as_bytes());
        b[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
        Ok(Buffer(b))
    }

    fn u32_at(&self, off: usize) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&self.0[off..off + 4]);
        u32::from_ne_bytes(w)
    }

    fn set_u32(&mut self, off: usize, v: u32) {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn dev(&self) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.0[OFF_DEV..OFF_DEV + 8]);
        u64::from_ne_bytes(w)
    }
}

fn check_name(name: &str) -> Result<(), DmError> {
    if name.is_empty() || name.len() >= NAME_LEN || name.contains('/') || name.contains('\0') {
        return Err(DmError::Ioctl {
            what: "naming",
            name: name.into(),
            reason: format!("a mapping's name is 1 to {} bytes, without '/' or NUL", NAME_LEN - 1),
        });
    }
    Ok(())
}

fn control() -> Result<File, DmError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(CONTROL)
        .map_err(|source| DmError::Io { what: format!("opening {CONTROL} (is dm-mod loaded?)"), source })
}

fn call(ctl: &File, cmd: u8, buf: &mut Buffer, what: &'static str, name: &str) -> Result<(), DmError> {
    // SAFETY: every dm ioctl reads and writes at most `data_size` bytes of the buffer it is
    // given, and `data_size` is the buffer's own length (set in Buffer::new).
    let rc = unsafe { libc::ioctl(ctl.as_raw_fd(), request(cmd) as libc::c_ulong, buf.0.as_mut_ptr()) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        return Err(DmError::Ioctl { what, name: name.into(), reason: e.to_string() });
    }
    Ok(())
}

/// The `dm_name_list` records of a LIST_DEVICES reply: `dev` (u64), `next` (u32, the offset
/// of the next record from this one; 0 on the last), the NUL-ended name. A `dev` of 0 in the
/// first record means there are none.
fn parse_name_list(data: &[u8]) -> Vec<Mapping> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 12 <= data.len() {
        let mut d = [0u8; 8];
        d.copy_from_slice(&data[at..at + 8]);
        let dev = u64::from_ne_bytes(d);
        let mut n = [0u8; 4];
        n.copy_from_slice(&data[at + 8..at + 12]);
        let next = u32::from_ne_bytes(n) as usize;
        if dev == 0 && out.is_empty() {
            break;
        }
        let name_bytes = &data[at + 12..];
        let end = name_bytes.iter().position(|&c| c == 0).unwrap_or(name_bytes.len());
        let (major, minor) = decode_dev(dev);
        out.push(Mapping { name: String::from_utf8_lossy(&name_bytes[..end]).into_owned(), major, minor });
        if next == 0 {
            break;
        }
        at += next;
    }
    out
}

/// Every mapping the kernel has.
pub fn list() -> Result<Vec<Mapping>, DmError> {
    let ctl = control()?;
    let mut room = 16 << 10;
    loop {
        let mut buf = Buffer::unnamed(room);
        call(&ctl, CMD_LIST_DEVICES, &mut buf, "listing", "*")?;
        if buf.u32_at(OFF_FLAGS) & FLAG_BUFFER_FULL != 0 && room < (4 << 20) {
            room *= 4;
            continue;
        }
        let start = buf.u32_at(OFF_DATA_START) as usize;
        let end = (buf.u32_at(OFF_DATA_SIZE) as usize).min(buf.0.len());
        return Ok(if start < end { parse_name_list(&buf.0[start..end]) } else { Vec::new() });
    }
}

impl Buffer {
    /// A buffer for a command that names no device (LIST_DEVICES).
    fn unnamed(room: usize) -> Buffer {
        let mut b = Buffer(vec![0u8; HEADER_LEN + room]);
        for (i, v) in VERSION.iter().enumerate() {
            b.set_u32(i * 4, *v);
        }
        b.set_u32(OFF_DATA_SIZE, (HEADER_LEN + room) as u32);
        b.set_u32(OFF_DATA_START, HEADER_LEN as u32);
        b
    }
}

/// The mapping called `name`, if the kernel has one.
pub fn find(name: &str) -> Result<Option<Mapping>, DmError> {
    Ok(list()?.into_iter().find(|m| m.name == name))
}

/// The DM_TABLE_LOAD payload: each `dm_target_spec` (start, length, status, next, type)
/// followed by its NUL-ended parameters, padded to 8 bytes.
fn table_payload(table: &[Target<'_>]) -> Result<Vec<u8>, DmError> {
    let mut out = Vec::new();
    for t in table {
        if t.kind.is_empty() || t.kind.len() >= TARGET_TYPE_LEN {
            return Err(DmError::Ioctl {
                what: "loading a target of type",
                name: t.kind.into(),
                reason: "bad type name".into(),
            });
        }
        let params_len = (t.params.len() + 1).next_multiple_of(8);
        let mut spec = [0u8; TARGET_SPEC_LEN];
        spec[0..8].copy_from_slice(&t.start.to_ne_bytes());
        spec[8..16].copy_from_slice(&t.length.to_ne_bytes());
        spec[20..24].copy_from_slice(&((TARGET_SPEC_LEN + params_len) as u32).to_ne_bytes());
        spec[24..24 + t.kind.len()].copy_from_slice(t.kind.as_bytes());
        out.extend_from_slice(&spec);
        let at = out.len();
        out.resize(at + params_len, 0);
        out[at..at + t.params.len()].copy_from_slice(t.params.as_bytes());
    }
    Ok(out)
}

/// Creates mapping `name` (with `uuid`), loads `table` and resumes it, then makes its
/// `/dev/mapper` node. A failure after the create removes the half-made mapping.
pub fn create(name: &str, uuid: &str, table: &[Target<'_>], read_only: bool) -> Result<Mapping, DmError> {
    if uuid.len() >= UUID_LEN {
        return Err(DmError::Ioctl {
            what: "naming",
            name: uuid.into(),
            reason: format!("a uuid is under {UUID_LEN} bytes"),
        });
    }
    let ctl = control()?;
    let ro = if read_only { FLAG_READONLY } else { 0 };
    let mut buf = Buffer::new(name, &[], 0)?;
    buf.0[OFF_UUID..OFF_UUID + uuid.len()].copy_from_slice(uuid.as_bytes());
    buf.set_u32(OFF_FLAGS, ro);
    call(&ctl, CMD_DEV_CREATE, &mut buf, "creating", name)?;
    let (major, minor) = decode_dev(buf.dev());
    let live = (|| {
        let mut payload = zeroize::Zeroizing::new(table_payload(table)?);
        let mut load = Buffer::new(name, &payload, 0)?;
        payload.zeroize();
        load.set_u32(OFF_TARGET_COUNT, table.len() as u32);
        load.set_u32(OFF_FLAGS, ro | FLAG_SECURE_DATA);
        call(&ctl, CMD_TABLE_LOAD, &mut load, "loading the table of", name)?;
        // DEV_SUSPEND without the suspend flag resumes: the loaded table goes live.
        let mut resume = Buffer::new(name, &[], 0)?;
        call(&ctl, CMD_DEV_SUSPEND, &mut resume, "resuming", name)
    })();
    if let Err(e) = live {
        let mut rm = Buffer::new(name, &[], 0)?;
        let _ = call(&ctl, CMD_DEV_REMOVE, &mut rm, "removing", name);
        return Err(e);
    }
    let mapping = Mapping { name: name.into(), major, minor };
    make_node(&mapping)?;
    Ok(mapping)
}

/// Removes mapping `name` and its `/dev/mapper` node; `false` when there was none. A mapping
/// still open (mounted) is refused by the kernel with EBUSY.
pub fn remove(name: &str) -> Result<bool, DmError> {
    if find(name)?.is_none() {
        return Ok(false);
    }
    let ctl = control()?;
    let mut buf = Buffer::new(name, &[], 0)?;
    call(&ctl, CMD_DEV_REMOVE, &mut buf, "removing", name)?;
    let _ = std::fs::remove_file(Path::new(MAPPER_DIR).join(name));
    Ok(true)
}

/// Removes every mapping whose name starts with `prefix`, as a node going down closes its
/// encrypted volumes once they are unmounted; returns what was closed and what failed. With
/// no device-mapper in the kernel (no control node), there is nothing to close.
pub fn close_all(prefix: &str) -> (Vec<String>, Vec<DmError>) {
    if !Path::new(CONTROL).exists() {
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
    std::fs::create_dir_all(MAPPER_DIR)
        .map_err(|source| DmError::Io { what: format!("creating {MAPPER_DIR}"), source })?;
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

    #[test]
    fn request_numbers_are_the_kernels() {
        // DM_DEV_CREATE and DM_TABLE_LOAD as strace prints them for cryptsetup.
        assert_eq!(request(CMD_DEV_CREATE), 0xc138fd03);
        assert_eq!(request(CMD_TABLE_LOAD), 0xc138fd09);
        assert_eq!(request(CMD_LIST_DEVICES), 0xc138fd02);
    }

    #[test]
    fn device_numbers_decode_as_the_kernel_encodes_them() {
        assert_eq!(decode_dev((253 << 8) | 2), (253, 2));
        // A minor above 255 keeps its high bits above the major's.
        let minor: u64 = 0x1234;
        assert_eq!(decode_dev((minor & 0xff) | (253 << 8) | ((minor & !0xff) << 12)), (253, 0x1234));
    }

    #[test]
    fn a_table_payload_is_spec_then_padded_params() {
        let p = table_payload(&[Target {
            start: 0,
            length: 2048,
            kind: "crypt",
            params: "aes-xts-plain64 00 0 8:1 32768",
        }])
        .unwrap();
        assert_eq!(p.len(), 40 + 32);
        assert_eq!(&p[8..16], &2048u64.to_ne_bytes());
        assert_eq!(u32::from_ne_bytes(p[20..24].try_into().unwrap()), 72);
        assert_eq!(&p[24..29], b"crypt");
        assert_eq!(&p[40..70], b"aes-xts-plain64 00 0 8:1 32768");
        assert!(p[70..].iter().all(|&b| b == 0));
        assert!(table_payload(&[Target { start: 0, length: 1, kind: "", params: "" }]).is_err());
    }

    #[test]
    fn a_name_list_is_read_to_its_last_record() {
        let mut data = Vec::new();
        for (i, (dev, name)) in [(253u64 << 8, "luks2-a"), ((253 << 8) | 1, "luks2-b")].iter().enumerate() {
            let start = data.len();
            data.extend_from_slice(&dev.to_ne_bytes());
            data.extend_from_slice(&0u32.to_ne_bytes());
            data.extend_from_slice(name.as_bytes());
            data.push(0);
            data.resize(data.len().next_multiple_of(8) + 8, 0);
            if i == 0 {
                let next = (data.len() - start) as u32;
                data[start + 8..start + 12].copy_from_slice(&next.to_ne_bytes());
            }
        }
        let got = parse_name_list(&data);
        assert_eq!(
            got.iter().map(|m| (m.name.as_str(), m.minor)).collect::<Vec<_>>(),
            vec![("luks2-a", 0), ("luks2-b", 1)]
        );
        assert!(parse_name_list(&[0u8; 16]).is_empty(), "dev 0 in the first record: no mappings");
        assert!(Buffer::new("a/b", &[], 0).err().map(|e| e.to_string()).unwrap_or_default().contains("without '/'"));
    }
}

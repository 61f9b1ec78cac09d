//! The block devices the kernel lists in sysfs, and what it says of each disk: the facts the
//! `BlockDevice` and `Disk` resources carry. There is no udev on a node, so the names udev
//! would give a disk under `/dev/disk/by-id` and `/dev/disk/by-path` are worked out here from
//! the serial, the WWID and the bus path, the way udev's rules make them. Reads sysfs only;
//! never opens a device.

use std::path::{Path, PathBuf};

use super::types::{BlockDevice, Disk, pretty_size};

/// A device as sysfs lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub device: BlockDevice,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// A sysfs attribute as a number.
pub(crate) fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.parse().ok()
}

/// Every block device under `sys_class_block` (`/sys/class/block`), by kernel name.
pub fn list(sys_class_block: &Path) -> Vec<Listed> {
    let Ok(entries) = std::fs::read_dir(sys_class_block) else { return Vec::new() };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let dir = sys_class_block.join(&name);
        let Some((major, minor)) = read(&dir.join("dev")).and_then(|d| {
            let (a, b) = d.split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        }) else {
            continue;
        };
        let real = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        let uevent = read(&dir.join("uevent")).unwrap_or_default();
        let var = |k: &str| uevent.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix('=')).map(str::to_string);
        let partition_number = read_u64(&dir.join("partition")).unwrap_or(0) as u32;
        let is_partition = partition_number > 0 || var("DEVTYPE").as_deref() == Some("partition");
        let parent = if is_partition {
            real.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().to_string()).unwrap_or_default()
        } else {
            String::new()
        };
        let mut secondaries: Vec<String> = std::fs::read_dir(dir.join("slaves"))
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().to_string()).collect())
            .unwrap_or_default();
        secondaries.sort();
        out.push(Listed {
            name,
            device: BlockDevice {
                kind: if is_partition { "partition" } else { "disk" }.to_string(),
                major,
                minor,
                partition_name: var("PARTNAME").unwrap_or_default(),
                partition_number,
                device_path: real.display().to_string(),
                generation: 0,
                parent,
                secondaries,
            },
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The transport udev and Talos would name from a disk's sysfs device path.
pub fn transport(device_path: &str, name: &str) -> &'static str {
    if name.starts_with("nvme") || device_path.contains("/nvme/") {
        "nvme"
    } else if name.starts_with("vd") || device_path.contains("/virtio") {
        "virtio"
    } else if device_path.contains("/usb") {
        "usb"
    } else if device_path.contains("/ata") {
        "sata"
    } else if device_path.contains("/host") && device_path.contains("/target") {
        "scsi"
    } else if name.starts_with("mmcblk") {
        "mmc"
    } else {
        // loop, ram, zram and whatever else has no bus.
        ""
    }
}

/// The bus path of a disk: its sysfs device path below `/sys/devices`, up to the block
/// directory (`/pci0000:00/0000:00:05.0/virtio2`).
pub fn bus_path(device_path: &str) -> String {
    let rel = device_path.strip_prefix("/sys/devices").unwrap_or(device_path);
    match rel.find("/block/") {
        Some(i) => rel[..i].to_string(),
        None => rel.to_string(),
    }
}

/// The PCI address nearest to the disk on its bus path (`0000:00:05.0`).
fn pci_address(bus_path: &str) -> Option<&str> {
    bus_path.split('/').rfind(|c| {
        let b = c.as_bytes();
        c.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
    })
}

/// Replaces what udev's `replace_whitespace`/`replace_chars` would: whitespace by `_`, and
/// anything outside `[0-9A-Za-z#+-.:=@_]` dropped.
fn udev_safe(s: &str) -> String {
    s.trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_ascii_whitespace() => Some('_'),
            c if c.is_ascii_alphanumeric() || "#+-.:=@_".contains(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// The `/dev/disk/by-id` and `/dev/disk/by-path` names udev's rules give a disk.
pub fn symlinks(disk: &Disk, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    match disk.transport.as_str() {
        "virtio" if !disk.serial.is_empty() => out.push(format!("/dev/disk/by-id/virtio-{}", udev_safe(&disk.serial))),
        "nvme" if !disk.model.is_empty() && !disk.serial.is_empty() => {
            out.push(format!("/dev/disk/by-id/nvme-{}_{}", udev_safe(&disk.model), udev_safe(&disk.serial)))
        }
        "sata" | "scsi" | "usb" if !disk.serial.is_empty() => {
            let bus = if disk.transport == "sata" { "ata" } else { &disk.transport };
            let model = udev_safe(&disk.model);
            let serial = udev_safe(&disk.serial);
            out.push(if model.is_empty() {
                format!("/dev/disk/by-id/{bus}-{serial}")
            } else {
                format!("/dev/disk/by-id/{bus}-{model}_{serial}")
            });
        }
        _ => {}
    }
    if let Some(wwid) = disk.wwid.strip_prefix("naa.").or_else(|| disk.wwid.strip_prefix("eui.")) {
        out.push(format!("/dev/disk/by-id/wwn-0x{}", udev_safe(wwid).to_lowercase()));
    }
    if let Some(pci) = pci_address(&disk.bus_path) {
        let suffix = if name.starts_with("nvme") { "-nvme-1" } else { "" };
        out.push(format!("/dev/disk/by-path/pci-{pci}{suffix}"));
    }
    out
}

/// What sysfs says of the disk `name` (`/sys/block/<name>`); `None` when it is not a disk
/// there or has no size (an unused loop device).
pub fn disk(sys_block: &Path, dev: &Path, name: &str) -> Option<Disk> {
    let dir = sys_block.join(name);
    let sectors = read_u64(&dir.join("size"))?;
    if sectors == 0 {
        return None;
    }
    let real: PathBuf = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
    let device_path = real.display().to_string();
    let queue = dir.join("queue");
    let dev_attr = |n: &str| read(&dir.join("device").join(n));
    let sector_size = read_u64(&queue.join("logical_block_size")).unwrap_or(512) as u32;
    let io_size = read_u64(&queue.join("minimum_io_size")).unwrap_or(sector_size as u64) as u32;
    let capability = read(&dir.join("capability")).and_then(|c| u64::from_str_radix(&c, 16).ok()).unwrap_or(0);
    let scsi_type = dev_attr("type");
    let cdrom = name.starts_with("sr") || scsi_type.as_deref() == Some("5") || capability & 0x8 != 0;
    let mut d = Disk {
        dev_path: dev.join(name).display().to_string(),
        size: sectors * 512,
        io_size,
        sector_size,
        readonly: read(&dir.join("ro")).as_deref() == Some("1"),
        cdrom,
        model: dev_attr("model").unwrap_or_default(),
        serial: read(&dir.join("serial")).or_else(|| dev_attr("serial")).unwrap_or_default(),
        modalias: dev_attr("modalias").unwrap_or_default(),
        wwid: read(&dir.join("wwid")).or_else(|| dev_attr("wwid")).unwrap_or_default(),
        uuid: read(&dir.join("uuid")).unwrap_or_default(),
        bus_path: bus_path(&device_path),
        sub_system: "/sys/class/block".to_string(),
        transport: transport(&device_path, name).to_string(),
        rotational: read(&queue.join("rotational")).as_deref() == Some("1"),
        ..Disk::default()
    };
    d.pretty_size = pretty_size(d.size);
    let mut secondaries: Vec<String> = std::fs::read_dir(dir.join("slaves"))
        .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().to_string()).collect())
        .unwrap_or_default();
    secondaries.sort();
    d.secondary_disks = secondaries;
    d.symlinks = symlinks(&d, name);
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A sysfs tree shaped as the kernel makes it for a virtio disk with one partition.
    fn virtio_tree(root: &Path) {
        let dev = "devices/pci0000:00/0000:00:05.0/virtio2/block/vda";
        put(root, &format!("{dev}/dev"), "254:0\n");
        put(root, &format!("{dev}/size"), "12582912\n");
        put(root, &format!("{dev}/ro"), "0\n");
        put(root, &format!("{dev}/serial"), "talos disk 1\n");
        put(root, &format!("{dev}/queue/logical_block_size"), "512\n");
        put(root, &format!("{dev}/queue/minimum_io_size"), "512\n");
        put(root, &format!("{dev}/queue/rotational"), "1\n");
        put(root, &format!("{dev}/uevent"), "MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n");
        put(root, &format!("{dev}/device/modalias"), "virtio:d00000002v00001AF4\n");
        put(root, &format!("{dev}/vda4/dev"), "254:4\n");
        put(root, &format!("{dev}/vda4/partition"), "4\n");
        put(
            root,
            &format!("{dev}/vda4/uevent"),
            "MAJOR=254\nMINOR=4\nDEVNAME=vda4\nDEVTYPE=partition\nPARTN=4\nPARTNAME=META\n",
        );
        std::fs::create_dir_all(root.join("class/block")).unwrap();
        std::fs::create_dir_all(root.join("block")).unwrap();
        std::os::unix::fs::symlink(root.join(dev), root.join("class/block/vda")).unwrap();
        std::os::unix::fs::symlink(root.join(format!("{dev}/vda4")), root.join("class/block/vda4")).unwrap();
        std::os::unix::fs::symlink(root.join(dev), root.join("block/vda")).unwrap();
    }

    #[test]
    fn a_virtio_disk_and_its_partition() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        virtio_tree(&root);
        let listed = list(&root.join("class/block"));
        let names: Vec<_> = listed.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["vda", "vda4"]);
        assert_eq!((listed[0].device.kind.as_str(), listed[0].device.major, listed[0].device.minor), ("disk", 254, 0));
        let p = &listed[1].device;
        assert_eq!(
            (p.kind.as_str(), p.partition_number, p.partition_name.as_str(), p.parent.as_str()),
            ("partition", 4, "META", "vda")
        );

        let d = disk(&root.join("block"), Path::new("/dev"), "vda").unwrap();
        assert_eq!(d.dev_path, "/dev/vda");
        assert_eq!(d.size, 6 << 30);
        assert_eq!(d.pretty_size, "6.4 GB");
        assert_eq!(d.transport, "virtio");
        assert!(d.rotational && !d.readonly && !d.cdrom);
        assert_eq!(d.serial, "talos disk 1");
        assert_eq!(d.modalias, "virtio:d00000002v00001AF4");
        assert!(d.bus_path.ends_with("/pci0000:00/0000:00:05.0/virtio2"), "{}", d.bus_path);
        assert_eq!(d.symlinks, ["/dev/disk/by-id/virtio-talos_disk_1", "/dev/disk/by-path/pci-0000:00:05.0"]);
    }

    #[test]
    fn udev_names_for_other_transports() {
        let nvme = Disk {
            transport: "nvme".into(),
            model: "Samsung SSD 970".into(),
            serial: "S1234".into(),
            wwid: "eui.0025385B71B0C0AF".into(),
            bus_path: "/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0".into(),
            ..Disk::default()
        };
        assert_eq!(
            symlinks(&nvme, "nvme0n1"),
            [
                "/dev/disk/by-id/nvme-Samsung_SSD_970_S1234",
                "/dev/disk/by-id/wwn-0x0025385b71b0c0af",
                "/dev/disk/by-path/pci-0000:3d:00.0-nvme-1",
            ]
        );
        let loop_disk = Disk::default();
        assert!(symlinks(&loop_disk, "loop0").is_empty());
        assert_eq!(transport("/sys/devices/virtual/block/loop0", "loop0"), "");
        assert_eq!(
            transport("/sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda", "sda"),
            "sata"
        );
    }
}

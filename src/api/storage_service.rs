//! `storage.StorageService`: the node's disks (`Disks`, from its `Disk` resources) and the wipe
//! of block devices no volume uses (`BlockDeviceWipe`), as Talos's storaged serves them.
//!
//! Every device of a request is checked before any is wiped, against what the node's state
//! says now ([`check`], a pure function of an [`Inventory`]): it is a disk or a partition the
//! node has, its disk is neither read-only nor a CD-ROM, no other device is built on it, and
//! no volume sits on it, on its disk, or (for a disk) on one of its partitions. The wipe itself
//! is the node's ([`Node::wipe_block_devices`]), which opens each device exclusively, so a
//! mounted one is refused there too. Who may call is the authorization table's decision
//! (admin; a reader in maintenance mode). This module never touches a device or writes state.

use std::path::Path;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::node::{BlockDeviceWipe, Node};
use crate::block::wipe::Method;
use crate::cosi::State;
use crate::proto::storage::{self as s, storage_service_server::StorageService};
use crate::resources::block::{BlockDevice, Disk, NAMESPACE, SystemDisk, VolumeStatus};

pub struct StorageApi {
    node: Arc<dyn Node>,
    state: State,
}

impl StorageApi {
    pub fn new(node: Arc<dyn Node>, state: State) -> Self {
        StorageApi { node, state }
    }

    /// A node run as a process has no block devices of its own to list or wipe.
    fn has_disks(&self) -> Result<(), Status> {
        if self.node.platform().1 == "container" {
            return Err(Status::failed_precondition(
                "this node runs as a process (container mode): it has no block devices of its own",
            ));
        }
        Ok(())
    }
}

/// What the checks look at: the node's block devices, disks and volumes, by id.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    pub devices: Vec<(String, BlockDevice)>,
    pub disks: Vec<(String, Disk)>,
    pub volumes: Vec<(String, VolumeStatus)>,
}

impl Inventory {
    pub fn read(state: &State) -> Inventory {
        Inventory {
            devices: state
                .list::<BlockDevice>(NAMESPACE)
                .iter()
                .map(|r| (r.metadata().id.clone(), r.spec().clone()))
                .collect(),
            disks: state.list::<Disk>(NAMESPACE).iter().map(|r| (r.metadata().id.clone(), r.spec().clone())).collect(),
            volumes: state
                .list::<VolumeStatus>(NAMESPACE)
                .iter()
                .map(|r| (r.metadata().id.clone(), r.spec().clone()))
                .collect(),
        }
    }

    fn device(&self, name: &str) -> Option<&BlockDevice> {
        self.devices.iter().find(|(id, _)| id == name).map(|(_, d)| d)
    }

    fn disk(&self, name: &str) -> Option<&Disk> {
        self.disks.iter().find(|(id, _)| id == name).map(|(_, d)| d)
    }
}

/// The kernel name at the end of a device path (`/dev/vdb2` → `vdb2`); `""` for none.
fn base(path: &str) -> &str {
    Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Whether `descriptor` may be wiped on a node with `inventory`, and what to do if so: Talos's
/// checks and codes (NotFound for an unknown device, InvalidArgument for another kind of device
/// or method, FailedPrecondition for one in use).
pub fn check(inventory: &Inventory, descriptor: &s::BlockDeviceWipeDescriptor) -> Result<BlockDeviceWipe, Status> {
    let name = descriptor.device.as_str();
    let method = match s::block_device_wipe_descriptor::Method::try_from(descriptor.method) {
        Ok(s::block_device_wipe_descriptor::Method::Fast) => Method::Fast,
        Ok(s::block_device_wipe_descriptor::Method::Zeroes) => Method::Zeroes,
        Err(_) => return Err(Status::invalid_argument(format!("unsupported wipe method {}", descriptor.method))),
    };
    if name.is_empty() || name.contains('/') {
        let hint = if name.starts_with("/dev/") { " (give the name without /dev/)" } else { "" };
        return Err(Status::invalid_argument(format!("blockdevice {name:?} is not a kernel device name{hint}")));
    }
    let Some(device) = inventory.device(name) else {
        return Err(Status::not_found(format!("blockdevice {name:?} not found")));
    };
    let parent = match device.kind.as_str() {
        "disk" => None,
        "partition" => Some(device.parent.as_str()).filter(|p| !p.is_empty()),
        other => {
            return Err(Status::invalid_argument(format!("blockdevice {name:?} is of unsupported type {other:?}")));
        }
    };
    let disk_name = parent.unwrap_or(name);
    let Some(disk) = inventory.disk(disk_name) else {
        return Err(Status::failed_precondition(format!(
            "blockdevice {name:?}: the node has no disk {disk_name:?} for it (not discovered yet?)"
        )));
    };
    if disk.readonly {
        return Err(Status::failed_precondition(format!("blockdevice {name:?} is read-only")));
    }
    if disk.cdrom {
        return Err(Status::failed_precondition(format!("blockdevice {name:?} is a CD-ROM")));
    }
    if !descriptor.skip_secondary_check {
        let user = match parent {
            // A disk: any disk built on it (RAID, device-mapper) names it.
            None => inventory.disks.iter().find(|(_, d)| d.secondary_disks.iter().any(|s| s == name)).map(|(id, _)| id),
            // A partition: only a device built on this very partition counts.
            Some(_) => {
                inventory.devices.iter().find(|(_, d)| d.secondaries.iter().any(|s| s == name)).map(|(id, _)| id)
            }
        };
        if let Some(user) = user {
            let what = if parent.is_none() { "disk" } else { "blockdevice" };
            return Err(Status::failed_precondition(format!("blockdevice {name:?} is in use by {what} {user:?}")));
        }
    }
    if !descriptor.skip_volume_check {
        for (id, volume) in &inventory.volumes {
            let on = [base(&volume.location), base(&volume.mount_location)];
            for dev in [Some(name), parent].into_iter().flatten() {
                if on.contains(&dev) {
                    return Err(Status::failed_precondition(format!("blockdevice {dev:?} is in use by volume {id:?}")));
                }
            }
            if base(&volume.parent_location) == name {
                return Err(Status::failed_precondition(format!("blockdevice {name:?} is in use by volume {id:?}")));
            }
        }
    }
    // As in Talos, dropping applies to partitions only and is ignored for a disk.
    let drop_partition = match parent {
        Some(disk) if descriptor.drop_partition && device.partition_number != 0 => {
            Some((disk.to_string(), device.partition_number))
        }
        _ => None,
    };
    Ok(BlockDeviceWipe { device: name.to_string(), method, drop_partition })
}

/// Talos's disk type, from what the `Disk` says.
fn disk_type(d: &Disk) -> s::disk::DiskType {
    use s::disk::DiskType;
    match () {
        _ if d.cdrom => DiskType::Cd,
        _ if d.transport == "nvme" => DiskType::Nvme,
        _ if d.transport == "mmc" => DiskType::Sd,
        _ if d.rotational => DiskType::Hdd,
        _ if !d.transport.is_empty() => DiskType::Ssd,
        _ => DiskType::Unknown,
    }
}

/// One `Disk` on the wire; `system_disk` names the disk the node booted from.
fn disk_message(id: &str, d: &Disk, system_disk: Option<&str>) -> s::Disk {
    let device_name = format!("/dev/{id}");
    s::Disk {
        size: d.size,
        model: d.model.clone(),
        system_disk: system_disk == Some(id),
        device_name,
        name: String::new(),
        serial: d.serial.clone(),
        modalias: d.modalias.clone(),
        uuid: d.uuid.clone(),
        wwid: d.wwid.clone(),
        r#type: disk_type(d) as i32,
        bus_path: d.bus_path.clone(),
        subsystem: d.sub_system.clone(),
        readonly: d.readonly,
    }
}

#[tonic::async_trait]
impl StorageService for StorageApi {
    async fn disks(&self, _: Request<()>) -> Result<Response<s::DisksResponse>, Status> {
        self.has_disks()?;
        let system = self.state.get::<SystemDisk>(NAMESPACE, SystemDisk::ID).ok().map(|r| r.spec().disk_id.clone());
        let disks = self
            .state
            .list::<Disk>(NAMESPACE)
            .iter()
            .map(|r| disk_message(&r.metadata().id, r.spec(), system.as_deref()))
            .collect();
        Ok(Response::new(s::DisksResponse { messages: vec![s::Disks { metadata: None, disks }] }))
    }

    async fn block_device_wipe(
        &self,
        request: Request<s::BlockDeviceWipeRequest>,
    ) -> Result<Response<s::BlockDeviceWipeResponse>, Status> {
        self.has_disks()?;
        let inventory = Inventory::read(&self.state);
        let wipes = request.into_inner().devices.iter().map(|d| check(&inventory, d)).collect::<Result<Vec<_>, _>>()?;
        if !wipes.is_empty() {
            self.node.wipe_block_devices(wipes).await?;
        }
        Ok(Response::new(s::BlockDeviceWipeResponse { messages: vec![s::BlockDeviceWipe { metadata: None }] }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn device(kind: &str, parent: &str, number: u32) -> BlockDevice {
        BlockDevice { kind: kind.into(), parent: parent.into(), partition_number: number, ..Default::default() }
    }

    fn volume(location: &str, parent: &str) -> VolumeStatus {
        VolumeStatus { location: location.into(), parent_location: parent.into(), ..Default::default() }
    }

    /// vda the system disk with META and EPHEMERAL on partitions; vdb with a user volume on
    /// vdb1 and vdb2 free; vdc whole as a volume; vdd free; sr0 a CD; vde read-only; vdf under
    /// an md array; vdg3 under a device-mapper device.
    fn node() -> Inventory {
        let devices = [
            ("vda", device("disk", "", 0)),
            ("vda4", device("partition", "vda", 4)),
            ("vda6", device("partition", "vda", 6)),
            ("vdb", device("disk", "", 0)),
            ("vdb1", device("partition", "vdb", 1)),
            ("vdb2", device("partition", "vdb", 2)),
            ("vdc", device("disk", "", 0)),
            ("vdd", device("disk", "", 0)),
            ("sr0", device("disk", "", 0)),
            ("vde", device("disk", "", 0)),
            ("vdf", device("disk", "", 0)),
            ("md0", BlockDevice { secondaries: vec!["vdf".into()], ..device("disk", "", 0) }),
            ("vdg", device("disk", "", 0)),
            ("vdg3", device("partition", "vdg", 3)),
            ("dm-0", BlockDevice { secondaries: vec!["vdg3".into()], ..device("disk", "", 0) }),
            ("loop0", device("loop", "", 0)),
        ];
        let disks = [
            ("vda", Disk::default()),
            ("vdb", Disk::default()),
            ("vdc", Disk::default()),
            ("vdd", Disk::default()),
            ("sr0", Disk { cdrom: true, ..Default::default() }),
            ("vde", Disk { readonly: true, ..Default::default() }),
            ("vdf", Disk::default()),
            ("md0", Disk { secondary_disks: vec!["vdf".into()], ..Default::default() }),
            ("vdg", Disk::default()),
            ("dm-0", Disk::default()),
        ];
        let volumes = [
            ("META", volume("/dev/vda4", "/dev/vda")),
            ("EPHEMERAL", volume("/dev/vda6", "/dev/vda")),
            ("u-data", volume("/dev/vdb1", "/dev/vdb")),
            ("x-whole", volume("/dev/vdc", "")),
            ("/var/lib", volume("", "")),
        ];
        fn own<T: Clone>(v: &[(&str, T)]) -> Vec<(String, T)> {
            v.iter().map(|(id, x)| (id.to_string(), x.clone())).collect()
        }
        Inventory { devices: own(&devices), disks: own(&disks), volumes: own(&volumes) }
    }

    fn wipe(device: &str) -> s::BlockDeviceWipeDescriptor {
        s::BlockDeviceWipeDescriptor { device: device.into(), ..Default::default() }
    }

    #[test]
    fn checks_follow_talos() {
        type Adjust = fn(&mut s::BlockDeviceWipeDescriptor);
        type Want = Result<(Method, Option<(&'static str, u32)>), (Code, &'static str)>;
        type Case = (&'static str, Adjust, Want);
        let none: Adjust = |_| {};
        let skip_volume: Adjust = |d| d.skip_volume_check = true;
        let skip_secondary: Adjust = |d| d.skip_secondary_check = true;
        let drop: Adjust = |d| d.drop_partition = true;
        let zeroes_drop: Adjust = |d| {
            d.drop_partition = true;
            d.method = s::block_device_wipe_descriptor::Method::Zeroes as i32;
        };
        let bad_method: Adjust = |d| d.method = 7;
        let cases: &[Case] = &[
            ("vdz", none, Err((Code::NotFound, "blockdevice \"vdz\" not found"))),
            ("/dev/vdb2", none, Err((Code::InvalidArgument, "without /dev/"))),
            ("", none, Err((Code::InvalidArgument, "not a kernel device name"))),
            ("loop0", none, Err((Code::InvalidArgument, "unsupported type \"loop\""))),
            ("vdb2", bad_method, Err((Code::InvalidArgument, "unsupported wipe method 7"))),
            // A partition that is a volume; its disk, which holds the volume; the system disk.
            ("vdb1", none, Err((Code::FailedPrecondition, "\"vdb1\" is in use by volume \"u-data\""))),
            ("vdb", none, Err((Code::FailedPrecondition, "\"vdb\" is in use by volume \"u-data\""))),
            ("vda", none, Err((Code::FailedPrecondition, "in use by volume \"META\""))),
            // A partition of a disk that is a volume whole.
            ("vdc", none, Err((Code::FailedPrecondition, "\"vdc\" is in use by volume \"x-whole\""))),
            ("vdb1", skip_volume, Ok((Method::Fast, None))),
            ("vdb", skip_volume, Ok((Method::Fast, None))),
            ("sr0", none, Err((Code::FailedPrecondition, "is a CD-ROM"))),
            ("vde", none, Err((Code::FailedPrecondition, "is read-only"))),
            ("vdf", none, Err((Code::FailedPrecondition, "\"vdf\" is in use by disk \"md0\""))),
            ("vdf", skip_secondary, Ok((Method::Fast, None))),
            ("vdg3", none, Err((Code::FailedPrecondition, "\"vdg3\" is in use by blockdevice \"dm-0\""))),
            ("vdg3", skip_secondary, Ok((Method::Fast, None))),
            // The disk under vdg3 is not itself anyone's secondary.
            ("vdg", none, Ok((Method::Fast, None))),
            ("vdb2", none, Ok((Method::Fast, None))),
            ("vdb2", drop, Ok((Method::Fast, Some(("vdb", 2))))),
            ("vdb2", zeroes_drop, Ok((Method::Zeroes, Some(("vdb", 2))))),
            // Dropping is for partitions: on a disk it is ignored, as in Talos.
            ("vdd", drop, Ok((Method::Fast, None))),
            ("vdd", zeroes_drop, Ok((Method::Zeroes, None))),
        ];
        let inventory = node();
        for (name, adjust, want) in cases {
            let mut d = wipe(name);
            adjust(&mut d);
            match (check(&inventory, &d), want) {
                (Ok(got), Ok((method, drop))) => {
                    assert_eq!(got.device, *name);
                    assert_eq!(got.method, *method, "{name}");
                    assert_eq!(got.drop_partition, drop.map(|(disk, n)| (disk.to_string(), n)), "{name}");
                }
                (Err(e), Err((code, text))) => {
                    assert_eq!(e.code(), *code, "{name}: {}", e.message());
                    assert!(e.message().contains(text), "{name}: {:?} lacks {text:?}", e.message());
                }
                (got, want) => panic!("{name} ({d:?}): got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_partition_with_no_disk_resource_waits_for_discovery() {
        let mut inventory = node();
        inventory.devices.push(("vdh1".into(), device("partition", "vdh", 1)));
        let e = check(&inventory, &wipe("vdh1")).unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition);
        assert!(e.message().contains("no disk \"vdh\""), "{}", e.message());
    }

    #[test]
    fn disks_carry_talos_types_and_the_system_disk() {
        use s::disk::DiskType;
        let cases = [
            (Disk { cdrom: true, transport: "nvme".into(), ..Default::default() }, DiskType::Cd),
            (Disk { transport: "nvme".into(), ..Default::default() }, DiskType::Nvme),
            (Disk { transport: "mmc".into(), ..Default::default() }, DiskType::Sd),
            (Disk { transport: "sata".into(), rotational: true, ..Default::default() }, DiskType::Hdd),
            (Disk { transport: "virtio".into(), ..Default::default() }, DiskType::Ssd),
            (Disk::default(), DiskType::Unknown),
        ];
        for (d, want) in cases {
            assert_eq!(disk_type(&d), want, "{d:?}");
        }
        let d =
            Disk { size: 10 << 30, model: "QEMU".into(), serial: "s1".into(), readonly: true, ..Default::default() };
        let m = disk_message("vda", &d, Some("vda"));
        assert_eq!(
            (m.device_name.as_str(), m.size, m.model.as_str(), m.serial.as_str()),
            ("/dev/vda", 10 << 30, "QEMU", "s1")
        );
        assert!(m.system_disk && m.readonly);
        assert!(!disk_message("vdb", &d, Some("vda")).system_disk);
        assert!(!disk_message("vdb", &d, None).system_disk);
    }
}

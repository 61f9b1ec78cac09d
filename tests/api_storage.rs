//! `storage.StorageService` end to end below apid: a gRPC client on machined's machine socket
//! (the uid check, the role table in the node's mode, the handlers) over a node whose block
//! devices, disks and volumes are seeded resources, and whose devices are image files the
//! node wipes with `block::wipe`. The roles arrive as apid asserts them (`talos-role`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use talosbox::api::node::{BlockDeviceWipe, Node, NodeMode};
use talosbox::api::sockets::{self, SocketPaths, Uids};
use talosbox::block::wipe;
use talosbox::cosi::{Harness, State};
use talosbox::proto::storage::block_device_wipe_descriptor::Method;
use talosbox::proto::storage::storage_service_client::StorageServiceClient;
use talosbox::proto::storage::{BlockDeviceWipeDescriptor, BlockDeviceWipeRequest, disk::DiskType};
use talosbox::resources::block::{self as blk, BlockDevice, Disk, SystemDisk, VolumeStatus};
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Channel;

#[path = "common/node.rs"]
mod node;
use node::TestNode;

struct Rig {
    _harness: Harness,
    /// A node whose block devices are files in `dev`; it wipes them as machined does.
    node: Arc<TestNode>,
    dev: PathBuf,
    client: StorageServiceClient<Channel>,
    _dir: tempfile::TempDir,
    cancel: CancellationToken,
}

const SIZE: u64 = 4 << 20;

impl Rig {
    async fn start() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        for name in ["vda", "vdb", "vdb1", "vdb2"] {
            std::fs::write(dev.join(name), vec![0xA5u8; SIZE as usize]).unwrap();
        }
        let state = State::in_memory();
        let harness = Harness::start_on(state.clone(), vec![]).unwrap().with_timeout(Duration::from_secs(10));
        let device = |kind: &str, parent: &str, number: u32| BlockDevice {
            kind: kind.into(),
            parent: parent.into(),
            partition_number: number,
            ..Default::default()
        };
        for (id, d) in [
            ("vda", device("disk", "", 0)),
            ("vdb", device("disk", "", 0)),
            ("vdb1", device("partition", "vdb", 1)),
            ("vdb2", device("partition", "vdb", 2)),
        ] {
            harness.seed(blk::NAMESPACE, id, d).unwrap();
        }
        let disk = |model: &str, transport: &str| Disk {
            dev_path: String::new(),
            size: 10 << 30,
            model: model.into(),
            transport: transport.into(),
            ..Default::default()
        };
        harness.seed(blk::NAMESPACE, "vda", disk("system", "virtio")).unwrap();
        harness.seed(blk::NAMESPACE, "vdb", disk("extra", "nvme")).unwrap();
        harness
            .seed(blk::NAMESPACE, SystemDisk::ID, SystemDisk { disk_id: "vda".into(), dev_path: "/dev/vda".into() })
            .unwrap();
        let volume = |location: &str, parent: &str| VolumeStatus {
            location: location.into(),
            parent_location: parent.into(),
            ..Default::default()
        };
        harness.seed(blk::NAMESPACE, "u-data", volume("/dev/vdb1", "/dev/vdb")).unwrap();

        let files = dev.clone();
        let node =
            Arc::new(TestNode::new("storage-test").with_wipe(move |w| {
                wipe::wipe(&files.join(&w.device), w.method).map(|_| ()).map_err(|e| e.to_string())
            }));
        let own = rustix::process::geteuid().as_raw();
        let uids = Uids { machined: own, apid: own, trustd: own };
        let paths = SocketPaths::under(dir.path());
        let cancel = CancellationToken::new();
        let registry = Arc::new(talosbox::resources::registry().unwrap());
        {
            let (node, paths, cancel) = (node.clone() as Arc<dyn Node>, paths.clone(), cancel.clone());
            tokio::spawn(async move { sockets::serve(node, state, registry, &paths, uids, cancel).await.unwrap() });
        }
        while !paths.machine.exists() {
            tokio::task::yield_now().await;
        }
        let client = StorageServiceClient::new(talosbox::client::conn::unix(&paths.machine).unwrap());
        Rig { _harness: harness, node, dev, client, _dir: dir, cancel }
    }

    async fn wipe(&self, roles: &str, devices: Vec<BlockDeviceWipeDescriptor>) -> (Code, String) {
        let mut request = tonic::Request::new(BlockDeviceWipeRequest { devices });
        request.metadata_mut().insert("talos-role", roles.parse().unwrap());
        match self.client.clone().block_device_wipe(request).await {
            Ok(reply) => {
                assert_eq!(reply.into_inner().messages.len(), 1, "one message per node");
                (Code::Ok, String::new())
            }
            Err(s) => (s.code(), s.message().to_string()),
        }
    }

    fn untouched(&self, name: &str) -> bool {
        std::fs::read(self.dev.join(name)).unwrap().iter().all(|b| *b == 0xA5)
    }

    fn asked(&self) -> Vec<BlockDeviceWipe> {
        std::mem::take(&mut *self.node.wiped.lock().unwrap())
    }
}

fn descriptor(device: &str) -> BlockDeviceWipeDescriptor {
    BlockDeviceWipeDescriptor { device: device.into(), ..Default::default() }
}

const ADMIN: &str = "os:admin";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_devices_are_wiped_and_volumes_are_refused() {
    let rig = Rig::start().await;

    // Configured: only admin.
    for roles in ["os:reader", "os:operator", "os:operator,os:reader"] {
        let (c, m) = rig.wipe(roles, vec![descriptor("vdb2")]).await;
        assert_eq!(c, Code::PermissionDenied, "{roles}: {m}");
    }
    // A volume's partition, its disk, and a device the node does not have.
    let (c, m) = rig.wipe(ADMIN, vec![descriptor("vdb1")]).await;
    assert_eq!((c, m.as_str()), (Code::FailedPrecondition, "blockdevice \"vdb1\" is in use by volume \"u-data\""));
    let (c, m) = rig.wipe(ADMIN, vec![descriptor("vdb")]).await;
    assert_eq!(c, Code::FailedPrecondition, "{m}");
    let (c, m) = rig.wipe(ADMIN, vec![descriptor("vdz")]).await;
    assert_eq!((c, m.as_str()), (Code::NotFound, "blockdevice \"vdz\" not found"));
    // One bad device in a request: none of them is wiped.
    let (c, m) = rig.wipe(ADMIN, vec![descriptor("vdb2"), descriptor("vdb1")]).await;
    assert_eq!(c, Code::FailedPrecondition, "{m}");
    assert!(rig.asked().is_empty());
    for name in ["vda", "vdb", "vdb1", "vdb2"] {
        assert!(rig.untouched(name), "{name} was written by a refused call");
    }

    // The free partition, by zeroes, dropped afterwards.
    let zeroes =
        BlockDeviceWipeDescriptor { method: Method::Zeroes as i32, drop_partition: true, ..descriptor("vdb2") };
    assert_eq!(rig.wipe(ADMIN, vec![zeroes]).await, (Code::Ok, String::new()));
    assert_eq!(
        rig.asked(),
        [BlockDeviceWipe {
            device: "vdb2".into(),
            method: wipe::Method::Zeroes,
            drop_partition: Some(("vdb".into(), 2))
        }]
    );
    assert!(std::fs::read(rig.dev.join("vdb2")).unwrap().iter().all(|b| *b == 0));
    assert!(rig.untouched("vdb1"));

    // The volume's own partition, when told to skip the check; fast by default.
    let skip = BlockDeviceWipeDescriptor { skip_volume_check: true, ..descriptor("vdb1") };
    assert_eq!(rig.wipe(ADMIN, vec![skip]).await, (Code::Ok, String::new()));
    let asked = rig.asked();
    assert_eq!((asked[0].method, &asked[0].drop_partition), (wipe::Method::Fast, &None));
    let bytes = std::fs::read(rig.dev.join("vdb1")).unwrap();
    assert!(bytes[..1 << 20].iter().all(|b| *b == 0) && bytes[(2 << 20)..(2 << 20) + 16].iter().all(|b| *b == 0xA5));

    rig.cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_lets_a_reader_wipe_and_container_mode_has_no_disks() {
    let rig = Rig::start().await;
    *rig.node.mode.lock().unwrap() = NodeMode::Maintenance;
    assert_eq!(rig.wipe("os:reader", vec![descriptor("vdb2")]).await, (Code::Ok, String::new()));
    assert_eq!(rig.asked().len(), 1);

    *rig.node.mode.lock().unwrap() = NodeMode::Configured;
    let mut client = rig.client.clone();
    let mut request = tonic::Request::new(());
    request.metadata_mut().insert("talos-role", "os:reader".parse().unwrap());
    let disks = client.disks(request).await.unwrap().into_inner();
    assert_eq!(disks.messages.len(), 1);
    let mut got: Vec<_> = disks.messages[0]
        .disks
        .iter()
        .map(|d| (d.device_name.clone(), d.model.clone(), d.r#type, d.system_disk))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("/dev/vda".to_string(), "system".to_string(), DiskType::Ssd as i32, true),
            ("/dev/vdb".to_string(), "extra".to_string(), DiskType::Nvme as i32, false),
        ]
    );

    *rig.node.platform.lock().unwrap() = "container";
    let (c, m) = rig.wipe(ADMIN, vec![descriptor("vdb2")]).await;
    assert_eq!(c, Code::FailedPrecondition, "{m}");
    assert!(m.contains("container mode"), "{m}");
    assert!(rig.asked().is_empty());
    rig.cancel.cancel();
}

//! MetaWrite and MetaDelete end to end below apid: a gRPC client on machined's machine socket
//! (the uid check, the role table in the node's mode, the handlers), a 1 MiB file standing in
//! for the META partition as a `VolumeStatus` names it, and `MetaLoadController` turning what
//! lands on it into `MetaKey` resources. The roles arrive as apid asserts them (`talos-role`).

use std::sync::Arc;
use std::time::Duration;

use talosbox::api::node::{Node, NodeMode};
use talosbox::api::sockets::{self, SocketPaths, Uids};
use talosbox::block::meta::{self, Meta, MetaStore, tag};
use talosbox::controllers::runtime::MetaLoadController;
use talosbox::cosi::{Harness, State};
use talosbox::proto::cosi::resource as wire;
use talosbox::proto::machine::machine_service_client::MachineServiceClient;
use talosbox::proto::machine::{MetaDeleteRequest, MetaWriteRequest};
use talosbox::resources::block::{self as blk, VolumePhase, VolumeStatus};
use talosbox::resources::runtime::{MetaKey, NAMESPACE};
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Channel;

#[path = "common/node.rs"]
mod node;
use node::TestNode;

struct Rig {
    harness: Harness,
    /// A node that has nothing but META (and a mode).
    node: Arc<TestNode>,
    partition: tempfile::NamedTempFile,
    client: MachineServiceClient<Channel>,
    channel: Channel,
    _dir: tempfile::TempDir,
    cancel: CancellationToken,
}

impl Rig {
    async fn start() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let partition = tempfile::NamedTempFile::new().unwrap();
        partition.as_file().set_len(meta::PARTITION_SIZE).unwrap();
        let store = MetaStore::new();
        let state = State::in_memory();
        let harness = Harness::start_on(state.clone(), vec![Box::new(MetaLoadController::new(store.subscribe()))])
            .unwrap()
            .with_timeout(Duration::from_secs(10));
        let node = Arc::new(TestNode::new("meta-test").with_meta(store));
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
        let channel = talosbox::client::conn::unix(&paths.machine).unwrap();
        let client = MachineServiceClient::new(channel.clone());
        Rig { harness, node, partition, client, channel, _dir: dir, cancel }
    }

    fn volume(&self, phase: VolumePhase) {
        let status =
            VolumeStatus { phase, location: self.partition.path().display().to_string(), ..VolumeStatus::default() };
        self.harness.seed(blk::NAMESPACE, "META", status).unwrap();
    }

    fn on_disk(&self) -> Meta {
        meta::load(self.partition.path()).unwrap()
    }

    async fn write(&self, roles: &str, key: u32, value: &[u8]) -> Result<(), tonic::Status> {
        let mut request = tonic::Request::new(MetaWriteRequest { key, value: value.to_vec() });
        request.metadata_mut().insert("talos-role", roles.parse().unwrap());
        let reply = self.client.clone().meta_write(request).await?.into_inner();
        assert_eq!(reply.messages.len(), 1, "one message per node");
        Ok(())
    }

    /// The spec (its YAML) of MetaKey `id` through the State API, as `roles` reads it.
    async fn get_meta_key(&self, roles: &str, id: &str) -> Result<String, tonic::Status> {
        let mut request = tonic::Request::new(wire::GetRequest {
            namespace: NAMESPACE.into(),
            r#type: "MetaKeys.runtime.talos.dev".into(),
            id: id.into(),
            options: None,
        });
        request.metadata_mut().insert("talos-role", roles.parse().unwrap());
        let got = wire::state_client::StateClient::new(self.channel.clone()).get(request).await?.into_inner();
        Ok(got.resource.and_then(|r| r.spec).map(|s| s.yaml_spec).unwrap_or_default())
    }

    /// Every MetaKey `roles` is shown by a State List: ids and the YAML of their specs.
    async fn list_meta_keys(&self, roles: &str) -> Vec<(String, String)> {
        let mut request = tonic::Request::new(wire::ListRequest {
            namespace: NAMESPACE.into(),
            r#type: "MetaKeys.runtime.talos.dev".into(),
            options: None,
        });
        request.metadata_mut().insert("talos-role", roles.parse().unwrap());
        let mut stream =
            wire::state_client::StateClient::new(self.channel.clone()).list(request).await.unwrap().into_inner();
        let mut out = Vec::new();
        while let Some(item) = stream.message().await.unwrap() {
            let r = item.resource.unwrap();
            out.push((r.metadata.unwrap().id, r.spec.map(|s| s.yaml_spec).unwrap_or_default()));
        }
        out
    }

    async fn delete(&self, roles: &str, key: u32) -> Result<(), tonic::Status> {
        let mut request = tonic::Request::new(MetaDeleteRequest { key });
        request.metadata_mut().insert("talos-role", roles.parse().unwrap());
        let reply = self.client.clone().meta_delete(request).await?.into_inner();
        assert_eq!(reply.messages.len(), 1, "one message per node");
        Ok(())
    }
}

fn code(r: Result<(), tonic::Status>) -> (Code, String) {
    match r {
        Ok(()) => (Code::Ok, String::new()),
        Err(s) => (s.code(), s.message().to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_keys_are_written_read_back_and_deleted_through_the_api() {
    let rig = Rig::start().await;
    const WRITER: &str = "os:meta:writer";

    // No META volume at all (a node run as a process): refused before anything is opened.
    let (c, m) = code(rig.write(WRITER, 10, b"x").await);
    assert_eq!(c, Code::FailedPrecondition, "{m}");
    assert!(m.contains("no META partition"), "{m}");
    // Located but not ready.
    rig.volume(VolumePhase::Located);
    let (c, m) = code(rig.delete("os:admin", 10).await);
    assert_eq!((c, m.as_str()), (Code::FailedPrecondition, "the META volume is located, not ready"));
    assert!(rig.partition.as_file().metadata().unwrap().len() == meta::PARTITION_SIZE);
    assert!(rig.on_disk().iter().next().is_none(), "nothing written");

    rig.volume(VolumePhase::Ready);
    // Roles: only admin and os:meta:writer may write or delete.
    for roles in ["os:reader", "os:operator", "os:etcd:backup", "os:reader,os:operator"] {
        let (c, m) = code(rig.write(roles, 10, b"x").await);
        assert_eq!(c, Code::PermissionDenied, "{roles}: {m}");
        let (c, m) = code(rig.delete(roles, 10).await);
        assert_eq!(c, Code::PermissionDenied, "{roles}: {m}");
    }
    assert!(rig.on_disk().iter().next().is_none(), "refused calls wrote nothing");

    let network = b"addresses:\n  - address: 10.0.0.5/24\n";
    rig.write(WRITER, u32::from(tag::METAL_NETWORK_PLATFORM_CONFIG), network).await.unwrap();
    rig.write("os:admin", u32::from(tag::USER_RESERVED1), b"first").await.unwrap();
    rig.write("os:reader,os:meta:writer", u32::from(tag::USER_RESERVED1), b"second").await.unwrap();
    let disk = rig.on_disk();
    assert_eq!(disk.origin(), &meta::Origin::First);
    assert_eq!(disk.get(tag::METAL_NETWORK_PLATFORM_CONFIG), Some(&network[..]));
    assert_eq!(disk.get(tag::USER_RESERVED1), Some(&b"second"[..]));
    // Talos's layout on the file: magic1, then the lowest tag's entry.
    let bytes = std::fs::read(rig.partition.path()).unwrap();
    assert_eq!(&bytes[..12], &[0x5a, 0x4b, 0x3c, 0x2d, 0, 0, 0, 10, 0, 0, 0, network.len() as u8]);
    assert_eq!(&bytes[..262_144], &bytes[262_144..524_288], "both copies written");

    let h = &rig.harness;
    h.assert_spec(NAMESPACE, "0x0a", &MetaKey { value: String::from_utf8(network.to_vec()).unwrap() }).await;
    h.assert_spec(NAMESPACE, "0x0c", &MetaKey { value: "second".into() }).await;

    // Keys whose tags may hold secrets (STATE's encryption, the user-reserved ones) are for
    // admins only; the others every role reads.
    let state_encryption =
        br#"{"keys":[{"slot":0,"kms":{"endpoint":"https://kms.example:4443?token=s3cret"}}],"provider":"luks2"}"#;
    rig.write("os:admin", u32::from(tag::STATE_ENCRYPTION_CONFIG), state_encryption).await.unwrap();
    h.assert_spec(NAMESPACE, "0x09", &MetaKey { value: String::from_utf8(state_encryption.to_vec()).unwrap() }).await;
    for roles in ["os:reader", "os:operator", "os:reader,os:meta:writer"] {
        let e = rig.get_meta_key(roles, "0x09").await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{roles}: {e:?}");
        assert!(e.message().contains("MetaKeys.runtime.talos.dev 0x09 is sensitive"), "{}", e.message());
        let e = rig.get_meta_key(roles, "0x0c").await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{roles}: {e:?}");
        assert!(rig.get_meta_key(roles, "0x0a").await.unwrap().contains("10.0.0.5/24"), "{roles}");
        let listed = rig.list_meta_keys(roles).await;
        assert_eq!(listed.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["0x0a"], "{roles}");
        assert!(!listed.iter().any(|(_, v)| v.contains("s3cret")), "{roles}: {listed:?}");
    }
    assert!(rig.get_meta_key("os:admin", "0x09").await.unwrap().contains("s3cret"));
    let listed = rig.list_meta_keys("os:admin").await;
    assert_eq!(listed.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["0x09", "0x0a", "0x0c"]);
    rig.delete("os:admin", u32::from(tag::STATE_ENCRYPTION_CONFIG)).await.unwrap();
    h.assert_absent::<MetaKey>(NAMESPACE, "0x09").await;

    // Keys the format cannot hold, and values that do not fit.
    for key in [0, 256, 0x1_0000] {
        let (c, m) = code(rig.write(WRITER, key, b"x").await);
        assert_eq!(c, Code::InvalidArgument, "{key}: {m}");
    }
    let (c, m) = code(rig.write(WRITER, 13, &vec![0u8; meta::DATA_LENGTH]).await);
    assert_eq!(c, Code::ResourceExhausted, "{m}");
    assert!(m.starts_with("META key 0x0d: a value of 262104 bytes does not fit"), "{m}");

    // Delete: the key goes from the partition and its resource; a second delete finds nothing.
    rig.delete(WRITER, 10).await.unwrap();
    assert_eq!(rig.on_disk().get(10), None);
    h.assert_absent::<MetaKey>(NAMESPACE, "0x0a").await;
    let (c, m) = code(rig.delete(WRITER, 10).await);
    assert_eq!((c, m.as_str()), (Code::NotFound, "META key 0x0a is not set"));

    // Concurrent writes wait for each other: none is refused and none is lost.
    let values: Vec<(u32, String)> = (100..120u32).map(|k| (k, format!("v{k}"))).collect();
    let writes: Vec<_> = values.iter().map(|(k, v)| rig.write(WRITER, *k, v.as_bytes())).collect();
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    let disk = rig.on_disk();
    assert_eq!(disk.iter().count(), 21);
    h.assert_list::<MetaKey, _>(NAMESPACE, "21 keys", |l| l.len() == 21).await;
    h.assert_spec(NAMESPACE, "0x77", &MetaKey { value: "v119".into() }).await;

    // A partition damaged in both copies is reported as such, and left alone.
    let f = std::fs::OpenOptions::new().write(true).open(rig.partition.path()).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xff], 0).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xff], 262_144).unwrap();
    let damaged = std::fs::read(rig.partition.path()).unwrap();
    let (c, m) = code(rig.write(WRITER, 12, b"x").await);
    assert_eq!(c, Code::DataLoss, "{m}");
    assert!(m.contains("META is damaged: copy 1 (at byte 0): magic1 is 0xff4b3c2d"), "{m}");
    assert!(std::fs::read(rig.partition.path()).unwrap() == damaged, "not written over");

    // In maintenance mode the machine API serves only the maintenance methods.
    *rig.node.mode.lock().unwrap() = NodeMode::Maintenance;
    let (c, _) = code(rig.write(WRITER, 12, b"x").await);
    assert_eq!(c, Code::Unimplemented);

    rig.cancel.cancel();
}

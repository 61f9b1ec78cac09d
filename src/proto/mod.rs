//! Talos's wire API as Rust types, at the bottom of the crate: the prost messages and tonic
//! clients and servers generated at build time from `src/proto/<package>/*.proto` (see
//! `src/proto/build.rs`), the constants both ends of a call must agree on (metadata keys, the
//! message size limit, the ports), dialling an endpoint ([`conn`]) and the talosconfig file
//! that GenerateClientConfiguration hands out and clients read ([`talosconfig`]). The servers
//! in `api` and the client library both point down to this module, never at each other.
//!
//! The generated module tree mirrors the protobuf packages, because the generated code names
//! types in other packages by relative paths (`super::common::Metadata`). Nothing generated may
//! be edited by hand or renamed: package, message and field names and numbers are the wire
//! contract with Talos. Nothing here may import a module above the bottom layer (the
//! talosconfig uses `pki` and `yaml`): behaviour belongs to the servers and clients that use
//! these types.

pub mod conn;
pub mod talosconfig;

use prost::Message as _;

/// `google.rpc`: only the `Status` that `common.Metadata` carries.
pub mod google {
    pub mod rpc {
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

/// `common`: the per-node reply header, byte-stream chunks and shared enums.
pub mod common {
    include!(concat!(env!("OUT_DIR"), "/common.rs"));
}

/// `machine`: `MachineService`, which machined serves behind apid.
pub mod machine {
    include!(concat!(env!("OUT_DIR"), "/machine.rs"));
}

/// `securityapi`: trustd's `SecurityService`.
pub mod securityapi {
    include!(concat!(env!("OUT_DIR"), "/securityapi.rs"));
}

/// `time`: `TimeService`, the node's clock against a time server.
pub mod time {
    include!(concat!(env!("OUT_DIR"), "/time.rs"));
}

/// `storage`: `StorageService`, the node's disks and the wipe of unused block devices.
pub mod storage {
    include!(concat!(env!("OUT_DIR"), "/storage.rs"));
}

/// `talosbox.volume` and `talosbox.lifecycle`: talosbox's own `VolumeService` (the unlock of
/// an encrypted volume) and `ArtifactService` (an upgrade's files uploaded), for
/// what Talos has no RPC for. Not a Talos package.
pub mod talosbox {
    pub mod volume {
        include!(concat!(env!("OUT_DIR"), "/talosbox.volume.rs"));
    }
    pub mod lifecycle {
        include!(concat!(env!("OUT_DIR"), "/talosbox.lifecycle.rs"));
    }
    /// trustd's record of each certificate request it decided on, sent to machined on its
    /// private state socket. Not part of the API (outside [`FILE_DESCRIPTOR_SET`]).
    pub mod trustd {
        include!(concat!(env!("OUT_DIR"), "/talosbox.trustd.rs"));
    }
}

/// `cosi.resource`: the resource wire format and the read-only `State` service.
pub mod cosi {
    pub mod resource {
        include!(concat!(env!("OUT_DIR"), "/cosi.resource.rs"));
    }
}

/// `sidero.kms`: the KMS protocol of `kms` disk encryption keys. Not part of the API (it is
/// outside [`FILE_DESCRIPTOR_SET`]): the node is a client, `talosctl kms-launch` a server.
pub mod sidero {
    pub mod kms {
        include!(concat!(env!("OUT_DIR"), "/sidero.kms.rs"));
    }
}

/// The gRPC metadata keys apid reads and writes (Talos's names): a client addresses a call
/// with `node` or `nodes`, apid marks what it forwarded with `proxyfrom` and tells machined the
/// caller's roles in `talos-role`.
pub mod keys {
    pub const NODE: &str = "node";
    pub const NODES: &str = "nodes";
    pub const PROXY_FROM: &str = "proxyfrom";
    pub const ROLE: &str = "talos-role";
}

/// Talos's gRPC message size limit (32 MiB), for requests relayed through apid and the
/// client's channels alike.
pub const MAX_MESSAGE_SIZE: u64 = 32 << 20;
/// apid's port: where a `node` or an endpoint without a port is dialled.
pub const APID_PORT: u16 = 50000;

/// The encoded `google.protobuf.FileDescriptorSet` of every API file above, with the well-known
/// types they import and their comments: for reflection and for checking the wire contract.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/talosbox_api_descriptor_set.bin"));

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("decoding the built-in API descriptor set: {source}")]
    DescriptorSet {
        #[source]
        source: prost::DecodeError,
    },
}

/// One RPC as it appears on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcMethod {
    /// The HTTP/2 path gRPC calls it by: `/machine.MachineService/Version`.
    pub path: String,
    pub client_streaming: bool,
    pub server_streaming: bool,
}

/// The decoded [`FILE_DESCRIPTOR_SET`].
pub fn file_descriptor_set() -> Result<prost_types::FileDescriptorSet, ProtoError> {
    prost_types::FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).map_err(|source| ProtoError::DescriptorSet { source })
}

/// Every method of every service declared here, in declaration order. The authorization table
/// and apid's list of streaming methods are checked against this list, so a new RPC cannot be
/// added without deciding who may call it.
pub fn rpc_methods() -> Result<Vec<RpcMethod>, ProtoError> {
    let set = file_descriptor_set()?;
    let mut methods = Vec::new();
    for file in &set.file {
        for service in &file.service {
            let qualified = match file.package() {
                "" => service.name().to_string(),
                package => format!("{package}.{}", service.name()),
            };
            for method in &service.method {
                methods.push(RpcMethod {
                    path: format!("/{qualified}/{}", method.name()),
                    client_streaming: method.client_streaming(),
                    server_streaming: method.server_streaming(),
                });
            }
        }
    }
    Ok(methods)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The RPCs talosbox serves: (path, client streaming, server streaming). Keep in step with
    /// the .proto files; the authorization table must cover exactly these.
    const EXPECTED_METHODS: &[(&str, bool, bool)] = &[
        ("/machine.MachineService/ApplyConfiguration", false, false),
        ("/machine.MachineService/Dmesg", false, true),
        ("/machine.MachineService/Events", false, true),
        ("/machine.MachineService/Hostname", false, false),
        ("/machine.MachineService/List", false, true),
        ("/machine.MachineService/Logs", false, true),
        ("/machine.MachineService/Memory", false, false),
        ("/machine.MachineService/MetaWrite", false, false),
        ("/machine.MachineService/MetaDelete", false, false),
        ("/machine.MachineService/Mounts", false, false),
        ("/machine.MachineService/Processes", false, false),
        ("/machine.MachineService/Read", false, true),
        ("/machine.MachineService/Reboot", false, false),
        ("/machine.MachineService/Reset", false, false),
        ("/machine.MachineService/ServiceList", false, false),
        ("/machine.MachineService/ServiceRestart", false, false),
        ("/machine.MachineService/ServiceStart", false, false),
        ("/machine.MachineService/ServiceStop", false, false),
        ("/machine.MachineService/Shutdown", false, false),
        ("/machine.MachineService/Version", false, false),
        ("/machine.MachineService/Upgrade", false, false),
        ("/machine.MachineService/Rollback", false, false),
        ("/machine.LifecycleService/Install", false, true),
        ("/machine.LifecycleService/Upgrade", false, true),
        ("/machine.MachineService/GenerateClientConfiguration", false, false),
        ("/securityapi.SecurityService/Certificate", false, false),
        ("/time.TimeService/Time", false, false),
        ("/time.TimeService/TimeCheck", false, false),
        ("/storage.StorageService/Disks", false, false),
        ("/storage.StorageService/BlockDeviceWipe", false, false),
        ("/talosbox.volume.VolumeService/Unlock", false, false),
        ("/talosbox.lifecycle.ArtifactService/Upload", true, false),
        ("/cosi.resource.State/Get", false, false),
        ("/cosi.resource.State/List", false, true),
        ("/cosi.resource.State/Watch", false, true),
    ];

    #[test]
    fn methods_match_the_table() {
        let mut got: Vec<(String, bool, bool)> =
            rpc_methods().unwrap().into_iter().map(|m| (m.path, m.client_streaming, m.server_streaming)).collect();
        let mut want: Vec<(String, bool, bool)> =
            EXPECTED_METHODS.iter().map(|&(p, c, s)| (p.to_string(), c, s)).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn descriptor_set_is_self_contained() {
        let set = file_descriptor_set().unwrap();
        let names: Vec<&str> = set.file.iter().map(|f| f.name()).collect();
        for file in &set.file {
            for dependency in &file.dependency {
                assert!(
                    names.contains(&dependency.as_str()),
                    "{} imports {dependency}, which is not in the set",
                    file.name()
                );
            }
        }
        for ours in
            ["machine/machine.proto", "common/common.proto", "securityapi/security.proto", "cosi/resource/state.proto"]
        {
            assert!(names.contains(&ours), "{ours} missing from {names:?}");
        }
    }

    /// Bytes worked out by hand from Talos's field numbers, so a renumbering here cannot pass
    /// by round-tripping through itself.
    #[test]
    fn apply_configuration_request_encodes_with_talos_numbers() {
        let request = machine::ApplyConfigurationRequest {
            data: b"x".to_vec(),
            mode: machine::apply_configuration_request::Mode::Try as i32,
            dry_run: true,
            try_mode_timeout: Some(prost_types::Duration { seconds: 60, nanos: 0 }),
        };
        let bytes = request.encode_to_vec();
        // 1: data "x"; 4: mode TRY (4); 5: dry_run; 6: Duration { 1: 60 }.
        assert_eq!(bytes, [0x0a, 0x01, b'x', 0x20, 0x04, 0x28, 0x01, 0x32, 0x02, 0x08, 60]);
        assert_eq!(machine::ApplyConfigurationRequest::decode(bytes.as_slice()).unwrap(), request);
    }

    /// Talos's MetaWriteRequest { uint32 key = 1; bytes value = 2; } and MetaDeleteRequest
    /// { uint32 key = 1; }, by hand.
    #[test]
    fn meta_requests_encode_with_talos_numbers() {
        let write = machine::MetaWriteRequest { key: 10, value: b"ab".to_vec() };
        assert_eq!(write.encode_to_vec(), [0x08, 0x0a, 0x12, 0x02, b'a', b'b']);
        // A key past a byte still travels (the node refuses it, as Talos's does).
        assert_eq!(machine::MetaDeleteRequest { key: 300 }.encode_to_vec(), [0x08, 0xac, 0x02]);
    }

    /// Talos's BlockDeviceWipeDescriptor { device = 1; method = 2; skip_volume_check = 3;
    /// drop_partition = 4; skip_secondary_check = 5 }, by hand (5 is declared before 4 in the
    /// proto; the encoding goes by number).
    #[test]
    fn wipe_descriptor_encodes_with_talos_numbers() {
        let descriptor = storage::BlockDeviceWipeDescriptor {
            device: "vdb2".into(),
            method: storage::block_device_wipe_descriptor::Method::Zeroes as i32,
            skip_volume_check: true,
            skip_secondary_check: true,
            drop_partition: true,
        };
        let bytes = descriptor.encode_to_vec();
        assert_eq!(bytes, [0x0a, 0x04, b'v', b'd', b'b', b'2', 0x10, 0x01, 0x18, 0x01, 0x20, 0x01, 0x28, 0x01]);
        let request = storage::BlockDeviceWipeRequest { devices: vec![descriptor] };
        assert_eq!(request.encode_to_vec()[..2], [0x0a, 14]);
        // FAST is 0 and travels as nothing.
        let fast = storage::BlockDeviceWipeDescriptor { device: "vdb".into(), ..Default::default() };
        assert_eq!(fast.encode_to_vec(), [0x0a, 0x03, b'v', b'd', b'b']);
    }

    /// The talosbox extension is field 1001 and a Talos-shaped reader, which has only fields
    /// 1-4, still decodes the rest.
    #[test]
    fn diff_json_is_skipped_by_a_talos_reader() {
        #[derive(Clone, PartialEq, prost::Message)]
        struct TalosApplyConfiguration {
            #[prost(string, repeated, tag = "2")]
            warnings: Vec<String>,
            #[prost(int32, tag = "3")]
            mode: i32,
            #[prost(string, tag = "4")]
            mode_details: String,
        }

        let ours = machine::ApplyConfiguration {
            metadata: None,
            warnings: vec!["w".into()],
            mode: machine::apply_configuration_request::Mode::NoReboot as i32,
            mode_details: "Dry run summary".into(),
            diff_json: r#"{"changes":[]}"#.into(),
        };
        let bytes = ours.encode_to_vec();
        // Tag for field 1001, length-delimited: (1001 << 3) | 2 as a varint.
        assert!(bytes.windows(2).any(|w| w == [0xca, 0x3e]), "{bytes:02x?}");

        let theirs = TalosApplyConfiguration::decode(bytes.as_slice()).unwrap();
        assert_eq!(theirs.warnings, ours.warnings);
        assert_eq!(theirs.mode, ours.mode);
        assert_eq!(theirs.mode_details, ours.mode_details);
        assert_eq!(machine::ApplyConfiguration::decode(bytes.as_slice()).unwrap(), ours);
    }

    #[test]
    fn event_with_any_payload_round_trips() {
        let payload = machine::ServiceStateEvent {
            service: "apid".into(),
            action: machine::service_state_event::Action::Running as i32,
            message: "Health check successful".into(),
            health: Some(machine::ServiceHealth { unknown: false, healthy: true, ..Default::default() }),
        };
        let event = machine::Event {
            metadata: None,
            data: Some(prost_types::Any {
                type_url: "talos/runtime/machine.ServiceStateEvent".into(),
                value: payload.encode_to_vec(),
            }),
            id: "d1b2".into(),
            actor_id: String::new(),
        };
        let decoded = machine::Event::decode(event.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded, event);
        let any = decoded.data.unwrap();
        assert_eq!(machine::ServiceStateEvent::decode(any.value.as_slice()).unwrap(), payload);
    }

    #[test]
    fn cosi_watch_request_round_trips_with_optional_fields() {
        let request = cosi::resource::WatchRequest {
            namespace: "network".into(),
            r#type: "AddressStatuses.net.talos.dev".into(),
            id: None,
            options: Some(cosi::resource::WatchOptions {
                bootstrap_contents: true,
                tail_events: 0,
                label_query: vec![cosi::resource::LabelQuery {
                    terms: vec![cosi::resource::LabelTerm {
                        key: "talos.dev/owner".into(),
                        op: cosi::resource::label_term::Operation::Equal as i32,
                        value: vec!["x".into()],
                        invert: true,
                    }],
                }],
                id_query: None,
                aggregated: true,
                start_from_bookmark: Some(vec![1, 2, 3]),
                bootstrap_bookmark: false,
            }),
            api_version: 1,
        };
        let decoded = cosi::resource::WatchRequest::decode(request.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded, request);

        // proto3 `optional`: an ID of "" is present and distinct from none.
        let one = cosi::resource::WatchRequest { id: Some(String::new()), ..Default::default() };
        assert_eq!(
            cosi::resource::WatchRequest::decode(one.encode_to_vec().as_slice()).unwrap().id,
            Some(String::new())
        );
    }

    #[test]
    fn resource_metadata_round_trips() {
        let resource = cosi::resource::Resource {
            metadata: Some(cosi::resource::Metadata {
                namespace: "network".into(),
                r#type: "HostnameStatuses.net.talos.dev".into(),
                id: "hostname".into(),
                version: "3".into(),
                owner: "network.HostnameSpecController".into(),
                phase: "running".into(),
                created: Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 5 }),
                updated: None,
                finalizers: vec!["a".into()],
                labels: [("k".to_string(), "v".to_string())].into(),
                annotations: Default::default(),
            }),
            spec: Some(cosi::resource::Spec { proto_spec: vec![], yaml_spec: "hostname: talos\n".into() }),
        };
        assert_eq!(cosi::resource::Resource::decode(resource.encode_to_vec().as_slice()).unwrap(), resource);
    }

    #[test]
    fn certificate_request_round_trips() {
        let request = securityapi::CertificateRequest { csr: b"-----BEGIN CERTIFICATE REQUEST-----".to_vec() };
        assert_eq!(request.encode_to_vec()[0], 0x0a, "csr is field 1, length-delimited");
        assert_eq!(securityapi::CertificateRequest::decode(request.encode_to_vec().as_slice()).unwrap(), request);
    }

    /// A cosi `State` served by the generated server and called through the generated client
    /// over real HTTP/2 on loopback: the stubs fit together, a streaming List arrives message by
    /// message, and methods not declared here are answered Unimplemented.
    #[tokio::test]
    async fn generated_state_server_and_client_talk() {
        use cosi::resource::state_client::StateClient;
        use cosi::resource::state_server::{State, StateServer};
        use std::pin::Pin;
        use tonic::{Code, Request, Response, Status};

        type Stream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

        fn resource(id: &str) -> cosi::resource::Resource {
            cosi::resource::Resource {
                metadata: Some(cosi::resource::Metadata { id: id.into(), ..Default::default() }),
                spec: None,
            }
        }

        struct Fixed;

        #[tonic::async_trait]
        impl State for Fixed {
            type ListStream = Stream<cosi::resource::ListResponse>;
            type WatchStream = Stream<cosi::resource::WatchResponse>;

            async fn get(
                &self,
                request: Request<cosi::resource::GetRequest>,
            ) -> Result<Response<cosi::resource::GetResponse>, Status> {
                match request.into_inner().id.as_str() {
                    "a" => Ok(Response::new(cosi::resource::GetResponse { resource: Some(resource("a")) })),
                    other => Err(Status::not_found(format!("{other} not found"))),
                }
            }

            async fn list(
                &self,
                _: Request<cosi::resource::ListRequest>,
            ) -> Result<Response<Self::ListStream>, Status> {
                let items = ["a", "b", "c"].map(|id| Ok(cosi::resource::ListResponse { resource: Some(resource(id)) }));
                Ok(Response::new(Box::pin(futures::stream::iter(items))))
            }

            async fn watch(
                &self,
                _: Request<cosi::resource::WatchRequest>,
            ) -> Result<Response<Self::WatchStream>, Status> {
                Err(Status::unimplemented("not in this test"))
            }
        }

        let incoming = tonic::transport::server::TcpIncoming::bind(([127, 0, 0, 1], 0).into()).unwrap();
        let addr = incoming.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(
            tonic::transport::Server::builder().add_service(StateServer::new(Fixed)).serve_with_incoming_shutdown(
                incoming,
                async {
                    let _ = stopped.await;
                },
            ),
        );

        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
        let mut client = StateClient::new(channel.clone());

        let got = client.get(cosi::resource::GetRequest { id: "a".into(), ..Default::default() }).await.unwrap();
        assert_eq!(got.into_inner().resource, Some(resource("a")));
        let missing =
            client.get(cosi::resource::GetRequest { id: "z".into(), ..Default::default() }).await.unwrap_err();
        assert_eq!(missing.code(), Code::NotFound);

        let mut stream = client.list(cosi::resource::ListRequest::default()).await.unwrap().into_inner();
        let mut ids = Vec::new();
        while let Some(item) = stream.message().await.unwrap() {
            ids.push(item.resource.and_then(|r| r.metadata).map(|m| m.id).unwrap_or_default());
        }
        assert_eq!(ids, ["a", "b", "c"]);

        // A State write, which this API does not declare, and a whole service not served here.
        let mut raw = tonic::client::Grpc::new(channel.clone());
        raw.ready().await.unwrap();
        let create = raw
            .unary::<_, cosi::resource::GetResponse, _>(
                Request::new(cosi::resource::GetRequest::default()),
                "/cosi.resource.State/Create".parse().unwrap(),
                tonic_prost::ProstCodec::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(create.code(), Code::Unimplemented);
        let version =
            machine::machine_service_client::MachineServiceClient::new(channel).version(()).await.unwrap_err();
        assert_eq!(version.code(), Code::Unimplemented);

        let _ = stop.send(());
        server.await.unwrap().unwrap();
    }

    /// Writes [`FILE_DESCRIPTOR_SET`] to the file named by `API_DESCRIPTOR_SET_OUT`, for the
    /// compatibility check in `tests/api-compat/check_fields.py`:
    /// `API_DESCRIPTOR_SET_OUT=/tmp/api.bin cargo test --lib proto::tests::write_descriptor_set -- --ignored --exact`
    #[test]
    #[ignore = "writes a file; run on purpose for tests/api-compat"]
    fn write_descriptor_set() {
        let Some(path) = std::env::var_os("API_DESCRIPTOR_SET_OUT") else {
            panic!("set API_DESCRIPTOR_SET_OUT to the file to write the descriptor set to");
        };
        std::fs::write(&path, FILE_DESCRIPTOR_SET).unwrap();
    }
}

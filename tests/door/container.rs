//! Container mode isolation: every node's apid on one host runs as uid 50, so machine.sock
//! admits only this node's own apid process, not any process of its uid. A uid-50 process
//! (this test binary, re-run as uid 50 as a tiny client) against node B's machine.sock is
//! refused, for Version and for GenerateClientConfiguration with an admin role asserted; B's
//! own apid still answers. Addresses 127.0.11.x.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use talosbox::proto::machine::{GenerateClientConfigurationRequest, machine_service_client::MachineServiceClient};

use crate::harness::{Cluster, text};

const PROBE_SOCKET: &str = "TALOSBOX_DOOR_PROBE_SOCKET";

/// Run by `a_uid_50_process_is_nothing_on_another_nodes_socket` as uid 50: calls the socket
/// named in the environment as apid would, asserting os:admin, and prints what it got.
#[test]
#[ignore = "run as uid 50 by the container test"]
fn probe_machine_socket() {
    let Some(socket) = std::env::var_os(PROBE_SOCKET) else { return };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    fn admin<T>(msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut().insert("talos-role", "os:admin".parse().unwrap());
        r
    }
    rt.block_on(async {
        let channel = talosbox::proto::conn::unix(std::path::Path::new(&socket)).unwrap();
        let mut client = MachineServiceClient::new(channel);
        match client.version(admin(())).await {
            Ok(_) => println!("PROBE version: answered"),
            Err(s) => println!("PROBE version: {:?} {}", s.code(), s.message()),
        }
        let request = GenerateClientConfigurationRequest {
            roles: vec!["os:admin".into()],
            crt_ttl: Some(prost_types::Duration { seconds: 3600, nanos: 0 }),
        };
        match client.generate_client_configuration(admin(request)).await {
            Ok(_) => println!("PROBE generate: answered"),
            Err(s) => println!("PROBE generate: {:?} {}", s.code(), s.message()),
        }
    });
}

#[test]
fn a_uid_50_process_is_nothing_on_another_nodes_socket() {
    assert!(rustix::process::geteuid().is_root(), "the container test runs as root (services get uids of their own)");
    let a = Cluster::up("container-a", "127.0.11.1", &[]);
    let b = Cluster::up("container-b", "127.0.11.2", &[]);
    for c in [&a, &b] {
        c.ctl.eventually(&["-n", &c.cp.address, "version"], Duration::from_secs(60));
    }
    let apid_a = a.cp.service_pid("apid");
    let socket = b.ctl.dir.join("cp/run/machined/machine.sock");
    assert!(socket.exists(), "no machine socket at {}", socket.display());

    // The test binary is the client; as uid 50, like every apid on this host.
    let probe = Command::new(std::env::current_exe().unwrap())
        .args(["container::probe_machine_socket", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(PROBE_SOCKET, &socket)
        .uid(talosbox::services::APID_USER_ID)
        .gid(talosbox::services::APID_USER_ID)
        .output()
        .unwrap();
    let out = text(&probe);
    println!("uid-50 process (beside node A's apid, pid {apid_a}) on node B's machine.sock:\n{out}");
    for call in ["version", "generate"] {
        let line =
            out.lines().find_map(|l| l.split_once(&format!("PROBE {call}:")).map(|(_, r)| r)).unwrap_or_else(|| {
                panic!("the probe did not call {call}:\n{out}");
            });
        assert!(line.contains("PermissionDenied") && line.contains("only this node's own service"), "{line}");
    }

    // B's own apid still reaches its machined, and A's is unaffected.
    b.ctl.ok(&["-n", "127.0.11.2", "version"]);
    a.ctl.ok(&["-n", "127.0.11.1", "version"]);
}

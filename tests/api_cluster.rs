//! The API door end to end, with real processes and real TLS on loopback addresses: three
//! container-mode nodes (a control plane and two workers) configured and driven with talosctl
//! alone. Maintenance-mode applies, workers getting their API certificates from the control
//! plane's trustd, calls proxied by the control plane's apid, client-side fan-out, role-limited
//! client configs minted offline, rejected configs leaving the running one untouched, dry-run
//! diffs that show no secret, and a reboot through the API.
//!
//! One cluster carries every check (booting it is the slow part).

use std::time::{Duration, Instant};

#[path = "door/harness.rs"]
mod harness;

use harness::{Ctl, Node, text};

const CP: &str = "127.0.2.1";
const W1: &str = "127.0.2.2";
const W2: &str = "127.0.2.3";

#[test]
fn three_nodes_are_configured_and_driven_through_the_api() {
    let ctl = Ctl::in_scratch("cluster");
    let dir = ctl.dir.clone();

    // Secrets and configs, offline.
    ctl.ok(&["gen", "secrets", "-o", "secrets.yaml"]);
    let again = ctl.fails(&["gen", "secrets", "-o", "secrets.yaml"]);
    assert!(again.contains("already exists, use --force"), "{again}");
    ctl.ok(&["gen", "config", "demo", &format!("https://{CP}:6443"), "--with-secrets", "secrets.yaml"]);
    for f in ["controlplane.yaml", "worker.yaml", "talosconfig"] {
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.join(f)).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600, "{f} holds keys: owner-only");
    }
    ctl.ok(&["config", "endpoint", CP]);
    let contexts = ctl.ok(&["config", "contexts"]);
    assert!(contexts.contains("*         demo"), "{contexts}");

    let cp = Node::start(&dir, "cp", CP);
    let w1 = Node::start(&dir, "w1", W1);
    let mut w2 = Node::start(&dir, "w2", W2);
    for n in [&cp, &w1, &w2] {
        n.wait_line("stage: maintenance");
    }

    // Maintenance: server TLS only, so --insecure; the talosconfig's client certificate is
    // not asked for. Without --insecure the node's maintenance certificate is not trusted.
    let v = ctl.eventually(&["-e", CP, "version", "--insecure", "--short"], Duration::from_secs(20));
    assert!(v.contains(&format!("Server {CP}: v")), "{v}");
    let refused = ctl.fails(&["-e", CP, "version"]);
    assert!(refused.contains(CP), "errors name the endpoint: {refused}");
    assert_eq!(refused.trim().lines().count(), 1, "one line: {refused}");
    // Not in maintenance's allowed set.
    let denied = ctl.fails(&["-e", CP, "service", "--insecure"]);
    assert!(denied.contains("PermissionDenied") || denied.contains("Unimplemented"), "{denied}");

    // A config with a field Talos does not have is refused with its path; nothing changes.
    std::fs::write(dir.join("typo.yaml"), "version: v1alpha1\nmachine:\n  type: controlplane\n  tpye: x\n").unwrap();
    let typo = ctl.fails(&["-e", CP, "apply-config", "--insecure", "-f", "typo.yaml"]);
    assert!(typo.contains("machine.tpye"), "{typo}");
    let dry = ctl.ok(&["-e", CP, "apply-config", "--insecure", "-f", "controlplane.yaml", "--dry-run"]);
    assert!(dry.contains("Dry run summary:"), "{dry}");
    assert!(dry.contains("token: (redacted)"), "{dry}");
    let secrets = std::fs::read_to_string(dir.join("secrets.yaml")).unwrap();
    let token = secrets.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap();
    assert!(!dry.contains(token), "the dry run shows no secret");
    assert!(cp.log().contains("stage: maintenance") && !cp.log().contains("stage: running"));

    let applied = ctl.run(&["-e", CP, "apply-config", "--insecure", "-f", "controlplane.yaml"]);
    assert!(applied.status.success(), "{}", text(&applied));
    let warnings = String::from_utf8_lossy(&applied.stderr);
    assert!(warnings.contains("WARNING") && warnings.contains("cluster"), "inert sections are listed: {warnings}");
    cp.wait_line("stage: running");
    cp.wait_line("service trustd: Running");

    // Running: mTLS with the admin talosconfig.
    let v = ctl.eventually(&["version"], Duration::from_secs(20));
    assert!(v.contains(&format!("NODE:        {CP}")) && v.contains("Enabled:     RBAC"), "{v}");
    assert!(ctl.fails(&["version", "--insecure"]).contains(CP));
    let status = ctl.ok(&["get", "machinestatus"]);
    assert!(status.contains("running"), "{status}");
    let yaml = ctl.ok(&["get", "machinestatuses", "-o", "yaml"]);
    // Two types share the abbreviation `ms` (MachineStatuses, MountStatuses): it names neither.
    let ambiguous = ctl.fails(&["get", "ms"]);
    assert!(ambiguous.contains("MachineStatuses") && ambiguous.contains("MountStatuses"), "{ambiguous}");
    assert!(yaml.contains("type: MachineStatuses.runtime.talos.dev") && yaml.contains("stage: running"), "{yaml}");
    let rd = ctl.ok(&["get", "rd"]);
    assert!(rd.contains("machinestatuses.runtime.talos.dev"), "{rd}");
    let mc = ctl.ok(&["get", "machineconfig", "v1alpha1", "-o", "yaml"]);
    assert!(mc.contains("type: controlplane"), "{mc}");
    let services = ctl.ok(&["service"]);
    assert!(services.contains("apid") && services.contains("trustd"), "{services}");
    assert!(ctl.ok(&["logs", "machined"]).contains("stage: running"));
    assert!(!ctl.ok(&["processes"]).is_empty());
    assert!(ctl.ok(&["memory"]).contains("TOTAL"));
    assert!(ctl.ok(&["read", "/proc/self/status"]).contains("Name:"));
    let listing = ctl.ok(&["list", "-l", dir.to_str().unwrap()]);
    assert!(listing.contains("secrets.yaml") && listing.contains("-rw-------"), "{listing}");
    let unknown = ctl.fails(&["get", "nosuchtype"]);
    assert!(unknown.contains("nosuchtype"), "{unknown}");
    // META: a node run as a process has none, said through apid by the handler (past the
    // role table); a key that does not fit a byte never leaves talosctl.
    let meta = ctl.fails(&["meta", "write", "0x0c", "x"]);
    assert!(meta.contains("FailedPrecondition") && meta.contains("no META partition"), "{meta}");
    let meta = ctl.fails(&["meta", "delete", "256"]);
    assert!(meta.contains("out of range"), "{meta}");

    // A rejected apply on a running node leaves the config in force untouched.
    let before = ctl.ok(&["get", "mc", "v1alpha1"]);
    let typo = ctl.fails(&["apply-config", "-f", "typo.yaml"]);
    assert!(typo.contains("machine.tpye"), "{typo}");
    assert_eq!(ctl.ok(&["get", "mc", "v1alpha1"]), before);
    // So does one whose volume selector does not compile: refused with its document and field.
    let mut selector = std::fs::read_to_string(dir.join("controlplane.yaml")).unwrap();
    selector.push_str("---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n  diskSelector:\n    match: disk.size >\n  minSize: 1GiB\n");
    std::fs::write(dir.join("selector.yaml"), selector).unwrap();
    let refused = ctl.fails(&["apply-config", "-f", "selector.yaml"]);
    assert!(refused.contains("UserVolumeConfig data: provisioning.diskSelector.match: CEL expression"), "{refused}");
    assert_eq!(ctl.ok(&["get", "mc", "v1alpha1"]), before);
    // A patch: dry run first (a diff, nothing applied), then for real.
    let patch = r#"{"machine": {"network": {"hostname": "cp-one"}}}"#;
    let dry = ctl.ok(&["patch", "machineconfig", "-p", patch, "--dry-run"]);
    assert!(dry.contains("+        hostname: cp-one") || dry.contains("hostname: cp-one"), "{dry}");
    assert_eq!(ctl.ok(&["get", "mc", "v1alpha1"]), before);
    ctl.ok(&["patch", "mc", "-p", patch]);
    let after = ctl.ok(&["get", "mc", "v1alpha1", "-o", "yaml"]);
    assert!(after.contains("hostname: cp-one"), "{after}");
    // edit: $EDITOR changes the text, the result is applied; an editor that changes nothing
    // applies nothing.
    let edited = ctl.run_with(&["edit", "machineconfig"], &[("EDITOR", "sed -i s/cp-one/cp-two/")]);
    assert!(edited.status.success(), "{}", text(&edited));
    assert!(ctl.ok(&["get", "mc", "v1alpha1", "-o", "yaml"]).contains("hostname: cp-two"));
    let same = ctl.run_with(&["edit", "mc"], &[("EDITOR", "true")]);
    assert!(text(&same).contains("no changes detected"), "{}", text(&same));
    // try: in force for its timeout, then the stored config is back by itself.
    let trial = r#"{"machine": {"network": {"hostname": "cp-trial"}}}"#;
    let tried = ctl.ok(&["patch", "mc", "-p", trial, "--mode", "try", "--timeout", "2s"]);
    assert!(tried.contains("2s"), "the reply says when it falls back: {tried}");
    assert!(ctl.ok(&["get", "mc", "v1alpha1", "-o", "yaml"]).contains("hostname: cp-trial"));
    assert!(ctl.ok(&["get", "mc", "persistent", "-o", "yaml"]).contains("hostname: cp-two"), "a try is not stored");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ctl.ok(&["get", "mc", "v1alpha1", "-o", "yaml"]).contains("hostname: cp-two") {
        assert!(Instant::now() < deadline, "the try did not fall back");
        std::thread::sleep(Duration::from_millis(200));
    }
    // staged: stored for the next boot, the config in force unchanged.
    let staged =
        ctl.ok(&["patch", "mc", "-p", r#"{"machine": {"network": {"hostname": "cp-next"}}}"#, "--mode", "staged"]);
    assert!(staged.contains("Staged configuration"), "{staged}");
    assert!(ctl.ok(&["get", "mc", "persistent", "-o", "yaml"]).contains("hostname: cp-next"));
    assert!(ctl.ok(&["get", "mc", "v1alpha1", "-o", "yaml"]).contains("hostname: cp-two"));

    // Workers: configured in maintenance, they fetch their API certificates from the control
    // plane's trustd with the cluster token.
    for w in [W1, W2] {
        ctl.ok(&["-e", w, "apply-config", "--insecure", "-f", "worker.yaml"]);
    }
    w1.wait_line("stage: running");
    w2.wait_line("stage: running");
    // Through the control plane: its apid forwards to each worker's apid with its own client
    // certificate; the caller's roles go along.
    let v = ctl.eventually(&["-n", W1, "version", "--short"], Duration::from_secs(60));
    assert!(v.contains(&format!("Server {W1}: v")), "{v}");
    let all = ctl.eventually(&["-n", &format!("{CP},{W1},{W2}"), "version", "--short"], Duration::from_secs(60));
    for n in [CP, W1, W2] {
        assert!(all.contains(&format!("Server {n}: v")), "fan-out tags each reply by node: {all}");
    }
    let table = ctl.ok(&["-n", &format!("{W1},{W2}"), "get", "machinetype"]);
    assert!(table.contains(W1) && table.contains(W2), "{table}");
    let yaml = ctl.ok(&["-n", &format!("{W1},{W2}"), "get", "machinetype", "-o", "yaml"]);
    assert_eq!(yaml.matches("worker").count(), 2, "{yaml}");
    assert_eq!(yaml.matches("\n---\n").count(), 1, "{yaml}");
    // A worker cannot forward (it holds no client certificate).
    let hop = ctl.fails(&["-e", W1, "-n", W2, "version"]);
    assert!(hop.contains(W2), "{hop}");
    // One node down is one error line, the others still answer.
    let some = ctl.run(&["-n", &format!("{W1},127.0.2.9"), "version", "--short"]);
    assert!(!some.status.success());
    assert!(String::from_utf8_lossy(&some.stdout).contains(&format!("Server {W1}")), "{}", text(&some));
    assert!(String::from_utf8_lossy(&some.stderr).contains("127.0.2.9"), "{}", text(&some));

    // A role-limited talosconfig, minted offline from the bundle.
    ctl.ok(&["config", "new", "reader.yaml", "--roles", "os:reader", "--secrets", "secrets.yaml", "-e", CP]);
    let reader = |args: &[&str]| {
        let mut full = vec!["--talosconfig", "reader.yaml"];
        full.extend_from_slice(args);
        ctl.run(&full)
    };
    let info = reader(&["config", "info"]);
    assert!(text(&info).contains("os:reader"), "{}", text(&info));
    assert!(reader(&["version"]).status.success());
    assert!(reader(&["-n", W1, "get", "machinestatus"]).status.success(), "roles travel with the proxied call");
    for denied in [
        reader(&["get", "machineconfig"]),
        reader(&["-n", W1, "get", "machineconfig"]),
        reader(&["apply-config", "-f", "controlplane.yaml"]),
        reader(&["-n", W2, "reboot"]),
        reader(&["read", "/proc/self/status"]),
    ] {
        assert!(!denied.status.success(), "{}", text(&denied));
        assert!(text(&denied).contains("PermissionDenied"), "{}", text(&denied));
    }
    // From the node: a talosconfig generated by the control plane.
    ctl.ok(&["config", "new", "operator.yaml", "--roles", "os:operator"]);
    let op = std::fs::read_to_string(dir.join("operator.yaml")).unwrap();
    assert!(op.contains("operator@demo"), "{op}");

    // Health: running, services up, and the time (a process keeps the host's clock: sync
    // disabled counts as in sync).
    let health = ctl.ok(&["health", "--wait-timeout", "30s"]);
    assert!(health.contains(": OK"), "{health}");
    let status = ctl.ok(&["get", "timestatus", "-o", "yaml"]);
    assert!(status.contains("synced: true") && status.contains("syncDisabled: true"), "{status}");

    // `time`: the node asks an SNTP server itself. This one runs 3 s ahead of the host.
    let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((len, peer)) = server.recv_from(&mut buf) {
            let ahead = std::time::SystemTime::now() + Duration::from_secs(3);
            if let Some(reply) =
                talosbox::network::sntp::serve(&buf[..len], talosbox::network::sntp::Timestamp::from_system(ahead))
            {
                let _ = server.send_to(&reply, peer);
            }
        }
    });
    let check = format!("127.0.0.1:{port}");
    for args in [vec!["time", "--check", &check], vec!["-n", W1, "time", "-c", &check]] {
        let out = ctl.ok(&args);
        let row = out.lines().find(|l| l.contains(&check)).unwrap_or_else(|| panic!("no row for {check}: {out}"));
        let offset: f64 = row.split_whitespace().last().unwrap().trim_end_matches('s').parse().unwrap();
        assert!((2.5..3.5).contains(&offset), "a server 3 s ahead: {row}");
    }
    // Without --check: the node's own servers, which a process node does not have.
    let none = ctl.fails(&["time"]);
    assert!(none.contains("FailedPrecondition") && none.contains("--check"), "{none}");
    let nobody = ctl.fails(&["time", "--check", "127.0.0.1:1"]);
    assert!(nobody.contains("127.0.0.1:1"), "the error names the server: {nobody}");

    // Events carry the stage changes.
    let events = ctl.ok(&["events", "--tail", "50", "--duration", "2s"]);
    assert!(events.contains("machine.MachineStatusEvent"), "{events}");

    // A reset forgets the configuration: the worker comes back in maintenance.
    let mut w1 = w1;
    let r = ctl.ok(&["-n", W1, "reset", "--reboot"]);
    assert!(r.contains("reset requested"), "{r}");
    assert!(w1.wait_exit().success(), "{}", w1.log());
    let w1 = Node::start(&dir, "w1", W1);
    w1.wait_line("stage: maintenance");
    assert!(!w1.log().contains("stage: running"), "{}", w1.log());

    // A reboot through the API (container mode: machined goes down cleanly and exits).
    let r = ctl.ok(&["-n", W2, "reboot"]);
    assert!(r.contains("reboot requested"), "{r}");
    assert!(w2.wait_exit().success(), "{}", w2.log());
    assert!(w2.log().contains("stage: rebooting"), "{}", w2.log());

    // A reboot of the node apid runs on: machined stops that apid, and the answer still
    // reaches the caller first.
    let mut cp = cp;
    let r = ctl.ok(&["reboot"]);
    assert!(r.contains("reboot requested"), "{r}");
    assert!(cp.wait_exit().success(), "{}", cp.log());

    drop(w1);
    let _ = std::fs::remove_dir_all(dir);
}

mod security {
    //! The security matrix against a live control plane and worker: every refusal with its
    //! gRPC code, using certificates minted here from the cluster's own bundle (and others).

    use std::time::{Duration, SystemTime};

    use talosbox::pki::{self, CertAndKey, CertificateAuthority, ExtKeyUsage, Role, RoleSet, SecretsBundle, Validity};
    use talosbox::proto::machine::machine_service_client::MachineServiceClient;
    use talosbox::proto::machine::{HostnameResponse, RebootRequest};
    use talosbox::proto::securityapi::{CertificateRequest, security_service_client::SecurityServiceClient};
    use tonic::Code;
    use tonic::metadata::MetadataValue;

    use super::harness::chain;
    use super::*;

    const CP: &str = "127.0.5.1";
    const W1: &str = "127.0.5.2";

    fn client_cert(ca: &CertificateAuthority, roles: &[Role], validity: Validity) -> CertAndKey {
        pki::issue_client(ca, None, &RoleSet::from_iter(roles.iter().copied()), validity).unwrap()
    }

    fn fresh() -> Validity {
        Validity::starting(SystemTime::now() - Duration::from_secs(60), Duration::from_secs(3600))
    }

    /// The code a Version call ends with (dial failures count as Unavailable, as gRPC has it).
    async fn version_code(
        endpoint: &str,
        ca_pem: &str,
        identity: Option<&CertAndKey>,
        metadata: &[(&'static str, &str)],
    ) -> Code {
        version_call(endpoint, ca_pem, identity, metadata).await.0
    }

    /// A Version call refused during the TLS handshake: the server's alert reaches the client
    /// as a transport failure (Unavailable before the connection is up, Unknown once HTTP/2
    /// started on a TLS 1.3 connection whose client certificate the server then refused).
    /// The client sees only that the connection failed; why is in apid's log, checked after.
    async fn refused_by_tls(endpoint: &str, ca_pem: &str, identity: Option<&CertAndKey>, what: &str) {
        let (code, message) = version_call(endpoint, ca_pem, identity, &[]).await;
        assert!(matches!(code, Code::Unavailable | Code::Unknown | Code::Cancelled), "{what}: {code:?}: {message}");
    }

    async fn version_call(
        endpoint: &str,
        ca_pem: &str,
        identity: Option<&CertAndKey>,
        metadata: &[(&'static str, &str)],
    ) -> (Code, String) {
        let tls = pki::tls::client_config(&[ca_pem], identity).unwrap();
        let channel = match talosbox::client::conn::dial(endpoint, 50000, tls).await {
            Ok(c) => c,
            Err(e) => return (Code::Unavailable, chain(&e)),
        };
        let mut request = tonic::Request::new(());
        for (k, v) in metadata {
            request.metadata_mut().append(*k, MetadataValue::try_from(*v).unwrap());
        }
        match MachineServiceClient::new(channel).version(request).await {
            Ok(_) => (Code::Ok, String::new()),
            Err(status) => (status.code(), chain(&status)),
        }
    }

    /// A unary call of `path` with `message`, decoding the reply as `R`.
    async fn call<M: prost::Message + 'static, R: prost::Message + Default + 'static>(
        endpoint: &str,
        ca_pem: &str,
        identity: &CertAndKey,
        path: &'static str,
        message: M,
        metadata: &[(&'static str, &str)],
    ) -> Result<R, tonic::Status> {
        let tls = pki::tls::client_config(&[ca_pem], Some(identity)).unwrap();
        let channel = talosbox::client::conn::dial(endpoint, 50000, tls).await.unwrap();
        let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(64 << 20);
        grpc.ready().await.unwrap();
        let mut request = tonic::Request::new(message);
        for (k, v) in metadata {
            request.metadata_mut().append(*k, MetadataValue::try_from(*v).unwrap());
        }
        let codec = tonic_prost::ProstCodec::<M, R>::default();
        grpc.unary(request, http::uri::PathAndQuery::from_static(path), codec).await.map(|r| r.into_inner())
    }

    /// machined's log lines from every node in `nodes`, as (hostname, bytes) per message.
    async fn logs_from(endpoint: &str, ca_pem: &str, identity: &CertAndKey, nodes: &str) -> Vec<(String, Vec<u8>)> {
        use talosbox::proto::common::Data;
        use talosbox::proto::machine::LogsRequest;
        let tls = pki::tls::client_config(&[ca_pem], Some(identity)).unwrap();
        let channel = talosbox::client::conn::dial(endpoint, 50000, tls).await.unwrap();
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.unwrap();
        let mut request = tonic::Request::new(LogsRequest {
            namespace: "system".into(),
            id: "machined".into(),
            driver: 0,
            follow: false,
            tail_lines: 3,
        });
        request.metadata_mut().insert("nodes", MetadataValue::try_from(nodes).unwrap());
        let codec = tonic_prost::ProstCodec::<LogsRequest, Data>::default();
        let path = http::uri::PathAndQuery::from_static("/machine.MachineService/Logs");
        let mut stream = grpc.server_streaming(request, path, codec).await.unwrap().into_inner();
        let mut out = Vec::new();
        while let Some(d) = stream.message().await.unwrap() {
            #[allow(deprecated)]
            out.push((d.metadata.map(|m| m.hostname).unwrap_or_default(), d.bytes));
        }
        out
    }

    /// The code a refused call ended with.
    fn code<R>(r: Result<R, tonic::Status>) -> Code {
        match r {
            Ok(_) => Code::Ok,
            Err(s) => s.code(),
        }
    }

    #[test]
    fn every_refusal_has_its_code() {
        let ctl = Ctl::in_scratch("security");
        let dir = ctl.dir.clone();
        ctl.ok(&["gen", "secrets", "-o", "secrets.yaml"]);
        ctl.ok(&["gen", "config", "sec", &format!("https://{CP}:6443"), "--with-secrets", "secrets.yaml"]);
        ctl.ok(&["config", "endpoint", CP]);
        let bundle = SecretsBundle::from_yaml(&std::fs::read_to_string(dir.join("secrets.yaml")).unwrap()).unwrap();
        let ca = bundle.os_ca().unwrap();
        let ca_pem = bundle.certs.os.crt_pem.clone();

        let cp = Node::start(&dir, "cp", CP);
        let w1 = Node::start(&dir, "w1", W1);
        cp.wait_line("stage: maintenance");
        w1.wait_line("stage: maintenance");
        ctl.eventually(&["-e", CP, "--insecure", "apply-config", "-f", "controlplane.yaml"], Duration::from_secs(20));
        ctl.eventually(&["-e", W1, "--insecure", "apply-config", "-f", "worker.yaml"], Duration::from_secs(20));
        ctl.eventually(&["-n", W1, "version"], Duration::from_secs(60));

        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let admin = client_cert(&ca, &[Role::Admin], fresh());
            let reader = client_cert(&ca, &[Role::Reader], fresh());
            assert_eq!(version_code(CP, &ca_pem, Some(&admin), &[]).await, Code::Ok);

            // Transport: no certificate, another CA's, an expired one.
            refused_by_tls(CP, &ca_pem, None, "no client certificate").await;
            let other = CertificateAuthority::generate_os(SystemTime::now()).unwrap();
            let foreign = client_cert(&other, &[Role::Admin], fresh());
            refused_by_tls(CP, &ca_pem, Some(&foreign), "another CA").await;
            let old = Validity::starting(SystemTime::now() - Duration::from_secs(7200), Duration::from_secs(3600));
            let expired = client_cert(&ca, &[Role::Admin], old);
            refused_by_tls(CP, &ca_pem, Some(&expired), "expired").await;

            // trustd: a CSR asking for O=os:admin comes back a server certificate with no
            // Organization; presented as a client it is refused.
            let csr = pki::generate_csr("sneaky", &[], &[], Some("os:admin")).unwrap();
            let tls = pki::tls::client_config(&[&ca_pem], None).unwrap();
            let channel = talosbox::client::conn::dial(CP, 50001, tls).await.unwrap();
            let mut trustd = SecurityServiceClient::new(channel);
            let mut request = tonic::Request::new(CertificateRequest { csr: csr.csr_pem.clone().into_bytes() });
            request.metadata_mut().insert("token", MetadataValue::try_from(bundle.trustd_info.token.as_str()).unwrap());
            let signed = trustd.certificate(request).await.unwrap().into_inner();
            let crt_pem = String::from_utf8(signed.crt).unwrap();
            let info = pki::inspect_pem(&crt_pem).unwrap();
            assert!(info.organizations.is_empty(), "{:?}", info.organizations);
            assert_eq!(info.extended_key_usages.iter().cloned().collect::<Vec<_>>(), vec![ExtKeyUsage::ServerAuth]);
            let as_client = CertAndKey { crt_pem, key_pem: csr.key_pem.clone() };
            refused_by_tls(CP, &ca_pem, Some(&as_client), "a server certificate as a client").await;
            // A wrong token is refused by trustd.
            let mut request = tonic::Request::new(CertificateRequest { csr: csr.csr_pem.into_bytes() });
            request.metadata_mut().insert("token", MetadataValue::from_static("abcdef.0123456789abcdef"));
            assert_eq!(trustd.certificate(request).await.unwrap_err().code(), Code::Unauthenticated);

            // Roles: a reader calling an admin RPC, smuggling talos-role, listing a secret.
            let denied =
                call::<_, ()>(CP, &ca_pem, &reader, "/machine.MachineService/Reboot", RebootRequest::default(), &[])
                    .await;
            assert_eq!(code(denied), Code::PermissionDenied, "reader calling Reboot");
            let smuggled = call::<_, ()>(
                CP,
                &ca_pem,
                &reader,
                "/machine.MachineService/Reboot",
                RebootRequest::default(),
                &[("talos-role", "os:admin")],
            )
            .await;
            assert_eq!(code(smuggled), Code::PermissionDenied, "reader smuggling talos-role");
            let proxied_smuggle = call::<_, ()>(
                CP,
                &ca_pem,
                &reader,
                "/machine.MachineService/Reboot",
                RebootRequest::default(),
                &[("talos-role", "os:admin"), ("node", W1)],
            )
            .await;
            assert_eq!(code(proxied_smuggle), Code::PermissionDenied, "smuggling through the proxy");
            let secret = talosbox::proto::cosi::resource::GetRequest {
                namespace: "secrets".into(),
                r#type: "OSRootSecrets.secrets.talos.dev".into(),
                id: "os".into(),
                options: None,
            };
            let listed = call::<_, ()>(CP, &ca_pem, &reader, "/cosi.resource.State/Get", secret.clone(), &[]).await;
            assert_eq!(code(listed), Code::PermissionDenied, "reader reading a sensitive type");
            let got = call::<_, ()>(CP, &ca_pem, &admin, "/cosi.resource.State/Get", secret, &[]).await;
            assert_eq!(code(got), Code::Ok, "admin may");

            // No rule: admin only (and then simply not implemented).
            let none = call::<_, ()>(CP, &ca_pem, &reader, "/machine.MachineService/NoSuchMethod", (), &[]).await;
            assert_eq!(code(none), Code::PermissionDenied, "unlisted method, reader");
            let none = call::<_, ()>(CP, &ca_pem, &admin, "/machine.MachineService/NoSuchMethod", (), &[]).await;
            assert_eq!(code(none), Code::Unimplemented, "unlisted method, admin");

            // Routing: two node values; the loop guard answers locally.
            let two = version_code(CP, &ca_pem, Some(&admin), &[("node", W1), ("node", CP)]).await;
            assert_eq!(two, Code::InvalidArgument, "two node values");
            let hostname = |r: HostnameResponse| r.messages[0].hostname.clone();
            let path = "/machine.MachineService/Hostname";
            let direct = hostname(call(CP, &ca_pem, &admin, path, (), &[]).await.unwrap());
            let looped = call(CP, &ca_pem, &admin, path, (), &[("node", W1), ("proxyfrom", CP)]).await;
            assert_eq!(hostname(looped.unwrap()), direct, "proxyfrom: answered here, not forwarded again");
            let forwarded = call(CP, &ca_pem, &admin, path, (), &[("node", W1)]).await;
            assert_ne!(hostname(forwarded.unwrap()), direct, "node: answered by the worker");

            // nodes (older talosctl's one-to-many form): one reply, each message tagged by node,
            // an unreachable node a message of its own with the error.
            let many = format!("{CP},{W1},127.0.5.9");
            let reply: talosbox::proto::machine::VersionResponse =
                call(CP, &ca_pem, &admin, "/machine.MachineService/Version", (), &[("nodes", many.as_str())])
                    .await
                    .unwrap();
            #[allow(deprecated)]
            let tagged: Vec<(String, bool, bool)> = reply
                .messages
                .iter()
                .map(|m| {
                    let md = m.metadata.clone().unwrap_or_default();
                    (md.hostname, m.version.is_some(), !md.error.is_empty())
                })
                .collect();
            assert_eq!(
                tagged,
                [(CP.to_string(), true, false), (W1.to_string(), true, false), ("127.0.5.9".to_string(), false, true)]
            );
            let streamed = logs_from(CP, &ca_pem, &admin, &format!("{CP},{W1}")).await;
            for node in [CP, W1] {
                assert!(
                    streamed.iter().any(|(h, bytes)| h == node && !bytes.is_empty()),
                    "no log lines tagged {node}: {streamed:?}"
                );
            }
            let state = call::<_, ()>(
                CP,
                &ca_pem,
                &admin,
                "/cosi.resource.State/Get",
                talosbox::proto::cosi::resource::GetRequest::default(),
                &[("nodes", W1)],
            )
            .await;
            assert_eq!(code(state), Code::InvalidArgument, "nodes is for MachineService only");

            // A request over the limit is refused, not buffered.
            let huge = talosbox::proto::machine::ApplyConfigurationRequest {
                data: vec![b'#'; 33 << 20],
                dry_run: true,
                ..Default::default()
            };
            let big = call::<_, ()>(CP, &ca_pem, &admin, "/machine.MachineService/ApplyConfiguration", huge, &[]).await;
            assert_eq!(code(big), Code::ResourceExhausted, "33 MiB request");
        });

        // Why each TLS refusal happened, from apid's own log (through the API).
        let apid_log = ctl.ok(&["logs", "apid"]);
        for why in [
            "peer sent no certificates",
            "invalid peer certificate: BadSignature",
            "certificate expired",
            "invalid peer certificate: InvalidPurpose",
        ] {
            assert!(apid_log.contains(why), "apid's log lacks {why:?}:\n{apid_log}");
        }
        // machined's API socket admits apid's uid only: root (or anyone else) is refused.
        let socket = dir.join("cp/run/machined/machine.sock");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let channel = talosbox::client::conn::unix(&socket).unwrap();
            let refused = MachineServiceClient::new(channel).version(()).await.unwrap_err();
            assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
            assert!(refused.message().contains("uid"), "{}", refused.message());
        });
        drop(w1);
        drop(cp);
        let _ = std::fs::remove_dir_all(dir);
    }
}

//! trustd issues only what the peer is: with a worker's token, a CSR for the control plane's
//! address (or its name) is refused and the refusal logged; a CSR for the address it comes
//! from is signed with exactly that SAN, logged with its serial and recorded in the control
//! plane's event log. The legitimate worker enrols as before (the harness reaches it through
//! the control plane, which checks its certificate's IP). Addresses 127.0.10.x.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use talosbox::pki;
use talosbox::proto::securityapi::{CertificateRequest, security_service_client::SecurityServiceClient};
use tonic::Code;

use crate::harness::Cluster;

const CP: &str = "127.0.10.1";
const WORKER: &str = "127.0.10.2";
/// Where the impostor sends from: no node's address.
const IMPOSTOR: &str = "127.0.10.3";

/// A CSR for `ips` and `names` sent to the control plane's trustd from `source`, with `token`.
async fn ask(
    cluster: &Cluster,
    source: &str,
    token: &str,
    ips: &[&str],
    names: &[&str],
) -> (pki::NodeCsr, Result<String, tonic::Status>) {
    let ips: Vec<IpAddr> = ips.iter().map(|s| s.parse().unwrap()).collect();
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let csr = pki::generate_csr("impostor", &ips, &names, None).unwrap();
    let tls = pki::tls::client_config(&[cluster.ca_pem.as_str()], None).unwrap();
    let channel = talosbox::client::conn::dial_from(CP, 50001, tls, Some(source.parse().unwrap())).await.unwrap();
    let mut request = tonic::Request::new(CertificateRequest { csr: csr.csr_pem.clone().into_bytes() });
    request.metadata_mut().insert("token", token.parse().unwrap());
    let reply = SecurityServiceClient::new(channel).certificate(request).await;
    (csr, reply.map(|r| String::from_utf8(r.into_inner().crt).unwrap()))
}

/// Waits for a console line of the control plane holding every one of `parts`.
fn wait_log(cluster: &Cluster, parts: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = cluster.cp.log();
        if let Some(line) = log.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            return line.to_string();
        }
        assert!(Instant::now() < deadline, "no line with {parts:?} on the control plane; log:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_worker_token_gets_only_the_address_it_comes_from() {
    let cluster = Cluster::up("trustd", CP, &[WORKER]);
    let token = cluster.bundle.trustd_info.token.clone();
    // The legitimate worker's certificate came from trustd: its enrolment is on record.
    let enrolled = wait_log(&cluster, &["trustd: signed serial", &format!("for peer {WORKER}:")]);
    assert!(enrolled.contains(&format!("SANs [{WORKER}")), "the worker's address is its IP SAN: {enrolled}");

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        // The control plane's IP, from another address: refused, naming the SAN and the peer.
        let (_, refused) = ask(&cluster, IMPOSTOR, &token, &[CP], &[]).await;
        let status = refused.expect_err("a certificate for the control plane's IP");
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
        assert!(
            status.message().starts_with(&format!("SAN {CP} refused for peer {IMPOSTOR}:")),
            "{}",
            status.message()
        );
        let line = wait_log(&cluster, &["trustd: refused peer", IMPOSTOR, &format!("asked for [{CP}]")]);
        println!("refused: {line}");

        // The worker's own address from the impostor's: refused the same way.
        let (_, refused) = ask(&cluster, IMPOSTOR, &token, &[WORKER], &[]).await;
        assert_eq!(refused.unwrap_err().code(), Code::PermissionDenied);

        // The control plane's hostname as a DNS name: refused.
        let cp_name = format!("talosbox-{}", CP.replace('.', "-"));
        let (_, refused) = ask(&cluster, IMPOSTOR, &token, &[IMPOSTOR], &[&cp_name]).await;
        let status = refused.expect_err("a certificate for the control plane's name");
        assert_eq!(status.code(), Code::PermissionDenied);
        assert!(status.message().contains(&format!("SAN DNS:{cp_name} refused")), "{}", status.message());

        // Without the token nothing is signed (and nothing recorded).
        let (_, refused) = ask(&cluster, IMPOSTOR, "abcdef.0123456789abcdef", &[IMPOSTOR], &[]).await;
        assert_eq!(refused.unwrap_err().code(), Code::Unauthenticated);

        // Its own address: signed, with exactly that SAN.
        let (_, signed) = ask(&cluster, IMPOSTOR, &token, &[IMPOSTOR], &[]).await;
        let crt = signed.expect("a certificate for the address the request comes from");
        let info = pki::inspect_pem(&crt).unwrap();
        let ip: IpAddr = IMPOSTOR.parse().unwrap();
        assert_eq!((info.ip_addresses.as_slice(), info.dns_names.len()), (&[ip][..], 0));
        let (_, parsed) = x509_parser::parse_x509_certificate(&info.der).unwrap();
        let cert: String = parsed.raw_serial().iter().map(|b| format!("{b:02x}")).collect();
        let line =
            wait_log(&cluster, &[&format!("trustd: signed serial {cert} for peer {IMPOSTOR}:"), "SANs [127.0.10.3]"]);
        println!("signed: {line}");

        // And in the event log, as the Events RPC gives it.
        let events = cluster.ctl.ok(&["-n", CP, "events", "--tail=-1", "--duration", "3s"]);
        let ours: Vec<&str> = events.lines().filter(|l| l.contains("talosbox.trustd.CertificateEvent")).collect();
        assert!(ours.iter().any(|l| l.contains(&format!("signed serial {cert} for peer {IMPOSTOR}:"))), "{events}");
        assert!(ours.iter().any(|l| l.contains(&format!("SAN {CP} refused for peer {IMPOSTOR}"))), "{events}");
        assert!(ours.iter().any(|l| l.contains(&format!("for peer {WORKER}:"))), "the worker's enrolment: {events}");
        let impostor = ours.iter().filter(|l| l.contains(&format!("peer {IMPOSTOR}:"))).count();
        assert_eq!(impostor, 4, "three refusals and one signature; no event without the token:\n{events}");
    });
}

//! rustls configurations for the Talos API door (ALPN `h2`, the ring provider passed explicitly
//! every time: a second provider in the process would panic at run time).
//!
//! The server side reads its certificate and its client-CA set from shared state on every
//! handshake, so a renewed certificate or a rotated CA takes effect on the next connection
//! without rebuilding the listener. In [`ClientAuth::Required`] mode a client must present a
//! certificate whose ExtKeyUsage is exactly ClientAuth (a server certificate, one with no
//! ExtKeyUsage, or one with both, is refused: that keeps trustd-issued server certificates out
//! as client identities) that chains to a current CA and is valid now. [`ClientAuth::None`] is
//! maintenance mode: server-side TLS only.
//!
//! The client side trusts the given CAs and checks the server's name, IP addresses included; the
//! `insecure` variant (talosctl `--insecure`, for maintenance mode) checks no certificate at all
//! and must never be used with credentials worth protecting.

use std::sync::{Arc, RwLock, RwLockReadGuard};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, CommonState, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};

use super::inspect::{ExtKeyUsage, inspect_der};
use super::issue::CertAndKey;
use super::key::PrivateKey;
use super::role::RoleSet;
use super::{PkiError, pem};

/// The one application protocol the API speaks.
pub const ALPN_H2: &[u8] = b"h2";

/// Whether the server asks for client certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// mTLS: a ClientAuth-only certificate chained to a current CA.
    Required,
    /// Maintenance mode: no client certificate is requested.
    None,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> PkiError {
    PkiError::Tls { what: what.to_owned(), detail: e.to_string() }
}

/// What the server presents and whom it accepts; swapped as a whole piece by piece.
struct ServerState {
    identity: Arc<CertifiedKey>,
    /// `None` while there is no CA to accept: every client is refused.
    clients: Option<Arc<dyn ClientCertVerifier>>,
}

/// The server side of the door.
pub struct ServerTls {
    state: Arc<RwLock<ServerState>>,
    config: Arc<ServerConfig>,
    provider: Arc<CryptoProvider>,
}

impl ServerTls {
    /// `client_cas`: PEM texts, each holding one or more CA certificates (current and
    /// previous CAs during a rotation). Ignored in [`ClientAuth::None`] mode.
    pub fn new<S: AsRef<str>>(identity: &CertAndKey, client_cas: &[S], mode: ClientAuth) -> Result<Self, PkiError> {
        let provider = provider();
        let state = Arc::new(RwLock::new(ServerState {
            identity: certified_key(identity, &provider)?,
            clients: client_verifier(client_cas, &provider)?,
        }));
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err("server", e))?;
        let builder = match mode {
            ClientAuth::Required => builder.with_client_cert_verifier(Arc::new(SharedClientVerifier {
                state: state.clone(),
                algorithms: provider.signature_verification_algorithms,
            })),
            ClientAuth::None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(SharedIdentity(state.clone())));
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        Ok(ServerTls { state, config: Arc::new(config), provider })
    }

    /// The configuration to build the listener with, once.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// Presents `identity` from the next handshake on.
    pub fn set_identity(&self, identity: &CertAndKey) -> Result<(), PkiError> {
        let identity = certified_key(identity, &self.provider)?;
        write(&self.state).identity = identity;
        Ok(())
    }

    /// Accepts clients of these CAs from the next handshake on.
    pub fn set_client_cas<S: AsRef<str>>(&self, client_cas: &[S]) -> Result<(), PkiError> {
        let clients = client_verifier(client_cas, &self.provider)?;
        write(&self.state).clients = clients;
        Ok(())
    }
}

// A poisoned lock only means a writer panicked between two plain assignments; the state is
// still whole, so it is used rather than taking the door down.
fn read(state: &RwLock<ServerState>) -> RwLockReadGuard<'_, ServerState> {
    state.read().unwrap_or_else(|e| e.into_inner())
}

fn write(state: &RwLock<ServerState>) -> std::sync::RwLockWriteGuard<'_, ServerState> {
    state.write().unwrap_or_else(|e| e.into_inner())
}

fn certified_key(identity: &CertAndKey, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, PkiError> {
    let chain = pem::decode_certificates(&identity.crt_pem, "the server certificate")?
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    let key = PrivateKey::from_pem(&identity.key_pem, "the server key")?;
    let certified =
        CertifiedKey::from_der(chain, key.to_rustls(), provider).map_err(|e| tls_err("server certificate", e))?;
    Ok(Arc::new(certified))
}

fn roots<S: AsRef<str>>(cas: &[S]) -> Result<RootCertStore, PkiError> {
    let mut store = RootCertStore::empty();
    for (i, ca) in cas.iter().enumerate() {
        let what = format!("CA certificate #{}", i + 1);
        for der in pem::decode_certificates(ca.as_ref(), &what)? {
            store.add(CertificateDer::from(der)).map_err(|e| tls_err(&what, e))?;
        }
    }
    Ok(store)
}

fn client_verifier<S: AsRef<str>>(
    cas: &[S],
    provider: &Arc<CryptoProvider>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, PkiError> {
    let store = roots(cas)?;
    if store.is_empty() {
        return Ok(None);
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider.clone())
        .build()
        .map_err(|e| tls_err("client verifier", e))?;
    Ok(Some(verifier))
}

#[derive(Debug)]
struct SharedIdentity(Arc<RwLock<ServerState>>);

impl std::fmt::Debug for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("ServerState").field("accepts_clients", &self.clients.is_some()).finish_non_exhaustive()
    }
}

impl ResolvesServerCert for SharedIdentity {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(read(&self.0).identity.clone())
    }
}

#[derive(Debug)]
struct SharedClientVerifier {
    state: Arc<RwLock<ServerState>>,
    algorithms: WebPkiSupportedAlgorithms,
}

/// The handshake-signature half of a certificate verifier, the same for the client and the
/// server side: checked with the provider's algorithms in `self.algorithms`. Both verifier
/// traits declare these three methods alike, so they are written once.
macro_rules! handshake_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(message, cert, dss, &self.algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.algorithms.supported_schemes()
        }
    };
}

impl ClientCertVerifier for SharedClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    // The hints would have to borrow from state that a rotation replaces. Sending none is
    // allowed, and clients with one certificate (talosctl, Go's crypto/tls) present it anyway.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let info =
            inspect_der(end_entity).map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if info.extended_key_usages.len() != 1 || !info.extended_key_usages.contains(&ExtKeyUsage::ClientAuth) {
            return Err(rustls::Error::InvalidCertificate(CertificateError::InvalidPurpose));
        }
        let verifier = read(&self.state).clients.clone();
        match verifier {
            Some(v) => v.verify_client_cert(end_entity, intermediates, now),
            None => Err(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)),
        }
    }

    handshake_signatures!();
}

/// The roles of the verified client certificate on a server connection (its Subject
/// Organizations), and the names that are not roles.
pub fn peer_roles(conn: &CommonState) -> Result<(RoleSet, Vec<String>), PkiError> {
    let leaf = conn.peer_certificates().and_then(|chain| chain.first()).ok_or(PkiError::NoPeerCertificate)?;
    Ok(inspect_der(leaf)?.roles())
}

/// A client trusting `cas` (PEM texts), presenting `identity` when given.
pub fn client_config<S: AsRef<str>>(cas: &[S], identity: Option<&CertAndKey>) -> Result<Arc<ClientConfig>, PkiError> {
    let store = roots(cas)?;
    if store.is_empty() {
        return Err(tls_err("client", "no CA certificate to trust"));
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("client", e))?
        .with_root_certificates(store);
    finish_client(builder, identity)
}

/// A client that accepts any server certificate (handshake signatures are still checked):
/// talosctl `--insecure`, for nodes in maintenance mode that have no CA yet.
pub fn insecure_client_config(identity: Option<&CertAndKey>) -> Result<Arc<ClientConfig>, PkiError> {
    let provider = provider();
    let verifier = Arc::new(AnyServer { algorithms: provider.signature_verification_algorithms });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("client", e))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    finish_client(builder, identity)
}

fn finish_client(
    builder: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>,
    identity: Option<&CertAndKey>,
) -> Result<Arc<ClientConfig>, PkiError> {
    let mut config = match identity {
        Some(id) => {
            let chain = pem::decode_certificates(&id.crt_pem, "the client certificate")?
                .into_iter()
                .map(CertificateDer::from)
                .collect();
            let key = PrivateKey::from_pem(&id.key_pem, "the client key")?;
            builder.with_client_auth_cert(chain, key.to_rustls()).map_err(|e| tls_err("client certificate", e))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Arc::new(config))
}

#[derive(Debug)]
struct AnyServer {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    handshake_signatures!();
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::time::{Duration, SystemTime};

    use rcgen::ExtendedKeyUsagePurpose as Eku;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    use super::*;
    use crate::pki::ca::CertificateAuthority;
    use crate::pki::fixtures::{TALOS_OS_CRT, TALOS_OS_KEY};
    use crate::pki::issue::{NODE_CERT_VALIDITY, Validity, issue_client, issue_server, issue_with_ekus};
    use crate::pki::role::Role;

    const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn now() -> SystemTime {
        SystemTime::now()
    }

    fn valid() -> Validity {
        Validity::starting(now() - Duration::from_secs(60), NODE_CERT_VALIDITY)
    }

    fn server_cert(ca: &CertificateAuthority) -> CertAndKey {
        issue_server(ca, "cp-1", &[LOCALHOST], &["cp-1".into()], valid()).unwrap()
    }

    fn client_cert(ca: &CertificateAuthority, roles: &[Role]) -> CertAndKey {
        issue_client(ca, None, &roles.iter().copied().collect(), valid()).unwrap()
    }

    /// A listener built once from `tls`; each accepted connection is answered with the
    /// caller's roles (or why there are none) and closed.
    async fn serve(tls: &ServerTls) -> SocketAddr {
        let acceptor = TlsAcceptor::from(tls.config());
        let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut stream) = acceptor.accept(sock).await else { return };
                    let answer = match peer_roles(stream.get_ref().1) {
                        Ok((roles, _)) => format!("roles={roles}"),
                        Err(e) => format!("anonymous: {e}"),
                    };
                    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(ALPN_H2));
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        addr
    }

    /// The server's answer, or the handshake's failure. Under TLS 1.3 a refused client
    /// certificate shows up on the first read, so the answer is read in full.
    async fn dial(addr: SocketAddr, config: Arc<ClientConfig>) -> Result<String, String> {
        let attempt = async {
            let sock = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            let connector = TlsConnector::from(config);
            let mut stream =
                connector.connect(ServerName::IpAddress(LOCALHOST.into()), sock).await.map_err(|e| e.to_string())?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.map_err(|e| e.to_string())?;
            if answer.is_empty() { Err("closed without an answer".to_owned()) } else { Ok(answer) }
        };
        tokio::time::timeout(Duration::from_secs(20), attempt).await.unwrap_or_else(|_| Err("timed out".into()))
    }

    fn client(ca: &CertificateAuthority, identity: Option<&CertAndKey>) -> Arc<ClientConfig> {
        client_config(&[ca.crt_pem()], identity).unwrap()
    }

    #[tokio::test]
    async fn mtls_handshake_matrix() {
        let ca = CertificateAuthority::from_pem(TALOS_OS_CRT, TALOS_OS_KEY).unwrap();
        let other = CertificateAuthority::generate_os(now()).unwrap();
        let server = ServerTls::new(&server_cert(&ca), &[ca.crt_pem()], ClientAuth::Required).unwrap();
        let addr = serve(&server).await;

        let reader = client_cert(&ca, &[Role::Reader]);
        assert_eq!(dial(addr, client(&ca, Some(&reader))).await.as_deref(), Ok("roles=os:reader"));
        let several = client_cert(&ca, &[Role::Operator, Role::EtcdBackup]);
        assert_eq!(dial(addr, client(&ca, Some(&several))).await.as_deref(), Ok("roles=os:etcd:backup,os:operator"));

        // The alert says why: another CA, out of date, or the wrong purposes.
        let admin = RoleSet::from([Role::Admin]);
        let expired =
            Validity { not_before: now() - Duration::from_secs(7200), not_after: now() - Duration::from_secs(3600) };
        let refused: Vec<(&str, CertAndKey, &str)> = vec![
            ("a client certificate of another CA", client_cert(&other, &[Role::Admin]), "UnknownCA"),
            ("an expired client certificate", issue_client(&ca, None, &admin, expired).unwrap(), "CertificateExpired"),
            ("a server certificate as a client", server_cert(&ca), "UnsupportedCertificate"),
            (
                "a certificate for both server and client",
                issue_with_ekus(&ca, &admin, vec![Eku::ServerAuth, Eku::ClientAuth], valid()).unwrap(),
                "UnsupportedCertificate",
            ),
            (
                "a certificate without ExtKeyUsage",
                issue_with_ekus(&ca, &admin, vec![], valid()).unwrap(),
                "UnsupportedCertificate",
            ),
            (
                "a certificate for any purpose",
                issue_with_ekus(&ca, &admin, vec![Eku::Any, Eku::ClientAuth], valid()).unwrap(),
                "UnsupportedCertificate",
            ),
        ];
        for (case, identity, alert) in &refused {
            match dial(addr, client(&ca, Some(identity))).await {
                Ok(answer) => panic!("{case} was accepted: {answer}"),
                Err(e) => assert!(e.contains(alert), "{case}: want {alert}, got {e}"),
            }
        }
        let got = dial(addr, client(&ca, None)).await;
        assert!(got.is_err(), "no client certificate was accepted: {got:?}");
    }

    #[tokio::test]
    async fn the_client_verifies_the_server_by_ip() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let other = CertificateAuthority::generate_os(now()).unwrap();
        let me = client_cert(&ca, &[Role::Admin]);

        let by_ip = ServerTls::new(&server_cert(&ca), &[ca.crt_pem()], ClientAuth::Required).unwrap();
        let addr = serve(&by_ip).await;
        assert_eq!(dial(addr, client(&ca, Some(&me))).await.as_deref(), Ok("roles=os:admin"));
        // Both CAs are named O=talos: the other one is found by name and fails the signature.
        let err = dial(addr, client(&other, Some(&me))).await.unwrap_err();
        assert!(err.contains("BadSignature") || err.contains("UnknownIssuer"), "{err}");

        // The same CA, but the certificate does not name 127.0.0.1.
        let dns_only = issue_server(&ca, "cp-1", &[], &["cp-1".into()], valid()).unwrap();
        let wrong_name = ServerTls::new(&dns_only, &[ca.crt_pem()], ClientAuth::Required).unwrap();
        let addr = serve(&wrong_name).await;
        let err = dial(addr, client(&ca, Some(&me))).await.unwrap_err();
        assert!(err.contains("NotValidForName") || err.contains("name"), "{err}");
    }

    #[tokio::test]
    async fn rotation_takes_effect_on_the_next_handshake() {
        let old = CertificateAuthority::generate_os(now()).unwrap();
        let new = CertificateAuthority::generate_os(now()).unwrap();
        let server = ServerTls::new(&server_cert(&old), &[old.crt_pem()], ClientAuth::Required).unwrap();
        let addr = serve(&server).await;
        let old_admin = client_cert(&old, &[Role::Admin]);
        let new_admin = client_cert(&new, &[Role::Admin]);
        assert!(dial(addr, client(&old, Some(&old_admin))).await.is_ok());
        assert!(dial(addr, client(&new, Some(&new_admin))).await.is_err());

        // Both CAs accepted while clients move over; the server already presents the new one.
        server.set_identity(&server_cert(&new)).unwrap();
        server.set_client_cas(&[format!("{}{}", new.crt_pem(), old.crt_pem())]).unwrap();
        assert!(dial(addr, client(&old, Some(&old_admin))).await.is_err(), "the old CA no longer verifies the server");
        let mixed = client_config(&[new.crt_pem()], Some(&old_admin)).unwrap();
        assert_eq!(dial(addr, mixed).await.as_deref(), Ok("roles=os:admin"));
        assert!(dial(addr, client(&new, Some(&new_admin))).await.is_ok());

        // The old CA is dropped.
        server.set_client_cas(&[new.crt_pem()]).unwrap();
        let mixed = client_config(&[new.crt_pem()], Some(&old_admin)).unwrap();
        assert!(dial(addr, mixed).await.is_err());
        assert!(dial(addr, client(&new, Some(&new_admin))).await.is_ok());

        // No CA at all refuses everyone.
        server.set_client_cas::<&str>(&[]).unwrap();
        assert!(dial(addr, client(&new, Some(&new_admin))).await.is_err());
    }

    #[tokio::test]
    async fn maintenance_mode_is_server_side_tls_only() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let server = ServerTls::new::<&str>(&server_cert(&ca), &[], ClientAuth::None).unwrap();
        let addr = serve(&server).await;
        let got = dial(addr, insecure_client_config(None).unwrap()).await.unwrap();
        assert!(got.starts_with("anonymous: the peer presented no certificate"), "{got}");
        // A client that does check still can, against the node's CA.
        assert!(dial(addr, client(&ca, None)).await.is_ok());
    }

    #[test]
    fn bad_inputs_are_errors_naming_them() {
        let ca = CertificateAuthority::generate_os(now()).unwrap();
        let other = CertificateAuthority::generate_os(now()).unwrap();
        let mut mismatched = server_cert(&ca);
        mismatched.key_pem = server_cert(&other).key_pem;
        let err = ServerTls::new(&mismatched, &[ca.crt_pem()], ClientAuth::Required).err().unwrap().to_string();
        assert!(err.contains("server certificate"), "{err}");
        let err = client_config(&["not pem"], None).unwrap_err().to_string();
        assert!(err.contains("CA certificate #1"), "{err}");
        let err = client_config::<&str>(&[], None).unwrap_err().to_string();
        assert!(err.contains("no CA certificate"), "{err}");
    }
}

//! The artifacts a slot is written from: a kernel (`vmlinuz`), an initramfs, the kernel
//! command line (`cmdline`) and the version (`version`), as the imager writes them beside its
//! `SHA256SUMS`. They come from a directory (an upload, or the imager's output), from an
//! http(s) URL of such a directory, or from the UKI a node booted (its `.linux`, `.initrd`,
//! `.cmdline` and `.osrel` sections).
//!
//! Nothing is used before it is checked: every file taken from a directory or a URL must be
//! listed in `SHA256SUMS` and match its hash there; a file the list does not name, or that
//! differs from it, is an error naming the file. Fetches are bounded in size and time.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};

pub const SUMS: &str = "SHA256SUMS";
pub const CMDLINE: &str = "cmdline";
pub const VERSION: &str = "version";
/// The largest file fetched or uploaded (a kernel or an initramfs).
pub const MAX_FILE: u64 = 512 << 20;
const MAX_SUMS: usize = 64 << 10;
/// Where programs find the trusted roots for https: on a node, a link to the bundle machined
/// renders (the image's roots and the configuration's `TrustedRootsConfig` certificates).
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

#[derive(Debug, thiserror::Error)]
pub enum ArtifactsError {
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: io::Error },
    #[error("SHA256SUMS line {line}: {text:?} is not '<sha256>  <file name>'")]
    SumsLine { line: usize, text: String },
    #[error("{0}: not listed in SHA256SUMS; nothing unlisted is used")]
    Unlisted(String),
    #[error("{name}: SHA256 {got} differs from SHA256SUMS' {want}")]
    Mismatch { name: String, got: String, want: String },
    #[error("the artifacts have no {0} (an imager output directory has vmlinuz, an initramfs, cmdline and version)")]
    Missing(String),
    #[error("{0} is not a file name (no directories, no '..')")]
    Name(String),
    #[error("{url}: {why}")]
    Fetch { url: String, why: String },
    #[error("the UKI: {0}")]
    Uki(String),
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ArtifactsError + 'a {
    move |source| ArtifactsError::Io { what, path: path.to_path_buf(), source }
}

/// A checked set of artifacts, in `dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifacts {
    pub dir: PathBuf,
    pub vmlinuz: PathBuf,
    pub initramfs: PathBuf,
    pub cmdline: String,
    pub version: String,
}

impl Artifacts {
    /// The initramfs's file name (its compression: `initramfs.lz4` …).
    pub fn initramfs_name(&self) -> String {
        self.initramfs.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "initramfs".into())
    }

    /// The artifacts in `dir`, each checked against `dir/SHA256SUMS`.
    pub fn verified(dir: &Path) -> Result<Artifacts, ArtifactsError> {
        let sums_path = dir.join(SUMS);
        let text = std::fs::read_to_string(&sums_path).map_err(io_err("reading", &sums_path))?;
        let sums = parse_sums(&text)?;
        for name in wanted(&sums)? {
            let path = dir.join(&name);
            let got = sha256_file(&path)?;
            check(&sums, &name, &got)?;
        }
        Artifacts::unchecked(dir)
    }

    /// The artifacts in `dir` as they are (already checked, or made here from a UKI).
    fn unchecked(dir: &Path) -> Result<Artifacts, ArtifactsError> {
        let initramfs =
            super::initramfs::find_initramfs(dir).ok_or_else(|| ArtifactsError::Missing("initramfs".into()))?;
        let read = |name: &str| -> Result<String, ArtifactsError> {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map(|s| s.trim().to_string()).map_err(io_err("reading", &path))
        };
        let vmlinuz = dir.join("vmlinuz");
        if !vmlinuz.is_file() {
            return Err(ArtifactsError::Missing("vmlinuz".into()));
        }
        Ok(Artifacts { dir: dir.to_path_buf(), vmlinuz, initramfs, cmdline: read(CMDLINE)?, version: read(VERSION)? })
    }
}

/// `SHA256SUMS` as sha256sum writes it: `<64 hex digits>  <name>` (or ` *<name>`) per line.
pub fn parse_sums(text: &str) -> Result<BTreeMap<String, String>, ArtifactsError> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || ArtifactsError::SumsLine { line: i + 1, text: line.to_string() };
        let (hash, rest) = line.split_once(' ').ok_or_else(bad)?;
        let name = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('*')).ok_or_else(bad)?;
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        check_name(name)?;
        out.insert(name.to_string(), hash.to_ascii_lowercase());
    }
    Ok(out)
}

/// A bare file name: what may be joined to a directory.
pub fn check_name(name: &str) -> Result<(), ArtifactsError> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(ArtifactsError::Name(name.to_string()));
    }
    Ok(())
}

/// The names a slot needs from a listing: vmlinuz, the initramfs, cmdline, version.
pub fn wanted(sums: &BTreeMap<String, String>) -> Result<Vec<String>, ArtifactsError> {
    let initramfs = super::initramfs::INITRAMFS_NAMES
        .iter()
        .find(|n| sums.contains_key(**n))
        .ok_or_else(|| ArtifactsError::Missing("initramfs in SHA256SUMS".into()))?;
    let mut names = vec!["vmlinuz".to_string(), initramfs.to_string(), CMDLINE.into(), VERSION.into()];
    for n in &names {
        if !sums.contains_key(n) {
            return Err(ArtifactsError::Missing(format!("{n} in SHA256SUMS")));
        }
    }
    names.sort();
    Ok(names)
}

fn check(sums: &BTreeMap<String, String>, name: &str, got: &str) -> Result<(), ArtifactsError> {
    let want = sums.get(name).ok_or_else(|| ArtifactsError::Unlisted(name.to_string()))?;
    if want != got {
        return Err(ArtifactsError::Mismatch { name: name.to_string(), got: got.to_string(), want: want.clone() });
    }
    Ok(())
}

pub fn sha256_file(path: &Path) -> Result<String, ArtifactsError> {
    let mut f = std::fs::File::open(path).map_err(io_err("reading", path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(io_err("reading", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes a UKI's kernel, initramfs, command line and version into `dir`.
pub fn from_uki(pe: &[u8], dir: &Path) -> Result<Artifacts, ArtifactsError> {
    let sections = super::uki::sections(pe).map_err(|e| ArtifactsError::Uki(e.to_string()))?;
    let find = |name: &str| {
        sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| *d)
            .ok_or_else(|| ArtifactsError::Uki(format!("no {name} section")))
    };
    let (linux, initrd, cmdline) = (find(".linux")?, find(".initrd")?, find(".cmdline")?);
    let version = find(".osrel")
        .ok()
        .and_then(|osrel| {
            String::from_utf8_lossy(osrel)
                .lines()
                .find_map(|l| l.strip_prefix("VERSION_ID=").map(|v| v.trim_matches('"').to_string()))
        })
        .unwrap_or_else(|| "unknown".into());
    let initramfs_name = super::initramfs::initramfs_name_of(initrd)
        .ok_or_else(|| ArtifactsError::Uki("the .initrd section is not an initramfs this knows".into()))?;
    std::fs::create_dir_all(dir).map_err(io_err("making", dir))?;
    let cmdline = String::from_utf8_lossy(cmdline).trim_end_matches('\0').trim().to_string();
    for (name, data) in
        [("vmlinuz", linux), (initramfs_name, initrd), (CMDLINE, cmdline.as_bytes()), (VERSION, version.as_bytes())]
    {
        let path = dir.join(name);
        std::fs::write(&path, data).map_err(io_err("writing", &path))?;
    }
    Artifacts::unchecked(dir)
}

/// Fetches the artifacts of the imager output directory at `url` (http or https) into `dir`,
/// each checked against the `SHA256SUMS` fetched first; `progress` gets a line per file.
/// `roots` is a PEM bundle of the CAs an https server's certificate must chain to.
pub async fn fetch(
    url: &str,
    dir: &Path,
    roots: &Path,
    progress: &mut (dyn FnMut(String) + Send),
) -> Result<Artifacts, ArtifactsError> {
    let base = if url.ends_with('/') { url.to_string() } else { format!("{url}/") };
    std::fs::create_dir_all(dir).map_err(io_err("making", dir))?;
    let sums_url = format!("{base}{SUMS}");
    let mut sums_text = Vec::new();
    get(&sums_url, &mut sums_text, MAX_SUMS as u64, roots).await?;
    let text = String::from_utf8(sums_text)
        .map_err(|_| ArtifactsError::Fetch { url: sums_url.clone(), why: "not text".into() })?;
    let sums = parse_sums(&text)?;
    std::fs::write(dir.join(SUMS), &text).map_err(io_err("writing", &dir.join(SUMS)))?;
    for name in wanted(&sums)? {
        let path = dir.join(&name);
        let file_url = format!("{base}{name}");
        let mut file = std::fs::File::create(&path).map_err(io_err("creating", &path))?;
        let mut hashing = HashingWriter { inner: &mut file, hasher: Sha256::new(), written: 0 };
        get(&file_url, &mut hashing, MAX_FILE, roots).await?;
        let (got, size) = (hex(&hashing.hasher.finalize_reset()), hashing.written);
        check(&sums, &name, &got)?;
        file.sync_all().map_err(io_err("syncing", &path))?;
        progress(format!("fetched {name} ({size} bytes, sha256 {})", &got[..12]));
    }
    Artifacts::unchecked(dir)
}

struct HashingWriter<'a, W: Write> {
    inner: &'a mut W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> Write for HashingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// GETs `url` into `out`, at most `max` bytes.
async fn get(url: &str, out: &mut (dyn Write + Send), max: u64, roots: &Path) -> Result<(), ArtifactsError> {
    let fail = |why: String| ArtifactsError::Fetch { url: url.to_string(), why };
    let uri: http::Uri = url.parse().map_err(|e| fail(format!("not a URL: {e}")))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(fail("only http:// and https:// URLs are fetched".into())),
    };
    let host = uri.host().ok_or_else(|| fail("no host".into()))?.trim_matches(['[', ']']).to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = tokio::time::timeout(Duration::from_secs(10), tokio::net::TcpStream::connect((host.as_str(), port)))
        .await
        .map_err(|_| fail("connecting timed out".into()))?
        .map_err(|e| fail(format!("connecting: {e}")))?;
    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    let path = uri.path_and_query().map(|p| p.to_string()).unwrap_or_else(|| "/".into());
    let request = http::Request::get(path)
        .header(http::header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|e| fail(e.to_string()))?;
    let response = if tls {
        let config = https_config(roots).map_err(fail)?;
        let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| fail(e.to_string()))?;
        let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| fail(format!("TLS: {e}")))?;
        send(TokioIo::new(stream), request, url).await?
    } else {
        send(TokioIo::new(tcp), request, url).await?
    };
    if !response.status().is_success() {
        return Err(fail(format!("HTTP {}", response.status())));
    }
    let mut body = response.into_body();
    let mut total = 0u64;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(60), body.frame())
            .await
            .map_err(|_| fail("no data for 60 s".into()))?;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| fail(format!("reading: {e}")))?;
        if let Ok(data) = frame.into_data() {
            total += data.len() as u64;
            if total > max {
                return Err(fail(format!("larger than {max} bytes")));
            }
            out.write_all(&data).map_err(|e| fail(format!("writing: {e}")))?;
        }
    }
    Ok(())
}

async fn send<I>(
    io: I,
    request: http::Request<Empty<Bytes>>,
    url: &str,
) -> Result<http::Response<hyper::body::Incoming>, ArtifactsError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let fail = |why: String| ArtifactsError::Fetch { url: url.to_string(), why };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.map_err(|e| fail(e.to_string()))?;
    tokio::spawn(conn);
    tokio::time::timeout(Duration::from_secs(30), sender.send_request(request))
        .await
        .map_err(|_| fail("no answer in 30 s".into()))?
        .map_err(|e| fail(e.to_string()))
}

/// A TLS client trusting the CAs of the PEM bundle at `roots`, over the one crypto provider.
fn https_config(roots: &Path) -> Result<rustls::ClientConfig, String> {
    let pem = std::fs::read_to_string(roots)
        .map_err(|e| format!("https needs trusted roots, and {} cannot be read: {e}", roots.display()))?;
    let mut store = rustls::RootCertStore::empty();
    for der in crate::pki::pem::decode_certificates(&pem, "a trusted root").map_err(|e| e.to_string())? {
        // A bundle may hold certificates this verifier cannot use; the rest still count.
        let _ = store.add(rustls::pki_types::CertificateDer::from(der));
    }
    if store.is_empty() {
        return Err(format!("no usable CA certificate in {}", roots.display()));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn write_set(dir: &Path, version: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let files: [(&str, Vec<u8>); 4] = [
            ("vmlinuz", format!("kernel {version}").into_bytes()),
            ("initramfs.lz4", [&[0x02u8, 0x21, 0x4c, 0x18][..], version.as_bytes()].concat()),
            (CMDLINE, b"console=ttyS0 panic=10\n".to_vec()),
            (VERSION, format!("{version}\n").into_bytes()),
        ];
        let mut sums = String::new();
        for (name, data) in &files {
            std::fs::write(dir.join(name), data).unwrap();
            sums.push_str(&format!("{}  {name}\n", hex(&Sha256::digest(data))));
        }
        std::fs::write(dir.join(SUMS), sums).unwrap();
    }

    #[test]
    fn a_directory_is_used_only_as_sha256sums_lists_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("v2");
        write_set(&dir, "0.2.0");
        let a = Artifacts::verified(&dir).unwrap();
        assert_eq!((a.version.as_str(), a.cmdline.as_str()), ("0.2.0", "console=ttyS0 panic=10"));
        assert_eq!(a.initramfs_name(), "initramfs.lz4");

        std::fs::write(dir.join("vmlinuz"), "tampered").unwrap();
        let err = Artifacts::verified(&dir).unwrap_err();
        assert!(matches!(&err, ArtifactsError::Mismatch { name, .. } if name == "vmlinuz"), "{err}");

        write_set(&dir, "0.2.0");
        let sums = std::fs::read_to_string(dir.join(SUMS)).unwrap();
        std::fs::write(
            dir.join(SUMS),
            sums.lines().filter(|l| !l.ends_with(" version")).collect::<Vec<_>>().join("\n"),
        )
        .unwrap();
        assert!(matches!(Artifacts::verified(&dir), Err(ArtifactsError::Missing(_))));
    }

    #[test]
    fn sums_lines_are_sha256sums() {
        let h = "a".repeat(64);
        let got = parse_sums(&format!("{h}  vmlinuz\n{h} *cmdline\n\n")).unwrap();
        assert_eq!(got.len(), 2);
        for bad in [format!("{h} vmlinuz"), "abc  vmlinuz".into(), format!("{h}  ../etc/passwd"), format!("{h}  a/b")] {
            assert!(parse_sums(&bad).is_err(), "{bad}");
        }
    }

    /// Serves `root` on a loopback listener under `/img/`, over TLS when given an acceptor.
    async fn serve(root: PathBuf, tls: Option<tokio_rustls::TlsAcceptor>) -> std::net::SocketAddr {
        use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
        async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut sock: S, root: &Path) {
            let mut buf = vec![0u8; 4096];
            let n = sock.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let path = head.split_whitespace().nth(1).unwrap_or("/").trim_start_matches("/img/").to_string();
            let reply = match std::fs::read(root.join(&path)) {
                Ok(body) => [
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
                        .into_bytes(),
                    body,
                ]
                .concat(),
                Err(_) => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
            };
            let _ = sock.write_all(&reply).await;
            let _ = sock.shutdown().await;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else { return };
                let (root, tls) = (root.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(sock).await {
                                answer(stream, &root).await;
                            }
                        }
                        None => answer(sock, &root).await,
                    }
                });
            }
        });
        addr
    }

    /// A real HTTP server on loopback: the fetch checks each file against SHA256SUMS.
    #[tokio::test]
    async fn fetches_over_http_and_refuses_a_file_that_differs() {
        let tmp = tempfile::tempdir().unwrap();
        let served = tmp.path().join("www");
        write_set(&served, "0.3.0");
        let addr = serve(served.clone(), None).await;
        let url = format!("http://{addr}/img");
        let mut lines = Vec::new();
        let got = fetch(&url, &tmp.path().join("got"), Path::new(SYSTEM_ROOTS), &mut |l| lines.push(l)).await.unwrap();
        assert_eq!(got.version, "0.3.0");
        assert_eq!(std::fs::read(&got.vmlinuz).unwrap(), b"kernel 0.3.0");
        assert_eq!(lines.len(), 4, "{lines:?}");

        std::fs::write(served.join("initramfs.lz4"), [0x02u8, 0x21, 0x4c, 0x18, 9]).unwrap();
        let err = fetch(&url, &tmp.path().join("again"), Path::new(SYSTEM_ROOTS), &mut |_| {}).await.unwrap_err();
        assert!(matches!(&err, ArtifactsError::Mismatch { name, .. } if name == "initramfs.lz4"), "{err}");
        let err =
            fetch(&format!("http://{addr}/nothing"), &tmp.path().join("none"), Path::new(SYSTEM_ROOTS), &mut |_| {})
                .await
                .unwrap_err();
        assert!(err.to_string().contains("404"), "{err}");
        let err = fetch("ftp://x/", &tmp.path().join("ftp"), Path::new(SYSTEM_ROOTS), &mut |_| {}).await.unwrap_err();
        assert!(err.to_string().contains("only http:// and https://"), "{err}");
    }

    /// Serves `root` over https on loopback under `/img/`, with a certificate for 127.0.0.1
    /// issued by a new CA; returns the address and the CA's certificate (PEM).
    pub(crate) async fn serve_https(root: PathBuf) -> (std::net::SocketAddr, String) {
        use crate::pki::{ca::CertificateAuthority, issue};
        let now = std::time::SystemTime::now();
        let ca = CertificateAuthority::generate_os(now).unwrap();
        let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let leaf = issue::issue_server(
            &ca,
            "localhost",
            &[ip],
            &[],
            issue::Validity::starting(now, Duration::from_secs(3600)),
        )
        .unwrap();
        let chain = crate::pki::pem::decode_certificates(&leaf.crt_pem, "leaf")
            .unwrap()
            .into_iter()
            .map(rustls::pki_types::CertificateDer::from)
            .collect();
        let key = crate::pki::key::PrivateKey::from_pem(&leaf.key_pem, "key").unwrap().to_rustls();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let addr = serve(root, Some(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))).await;
        (addr, ca.crt_pem().to_string())
    }

    /// https: the server's certificate must chain to the roots given.
    #[tokio::test]
    async fn fetches_over_https_from_a_server_the_roots_trust() {
        let tmp = tempfile::tempdir().unwrap();
        let served = tmp.path().join("www");
        write_set(&served, "0.4.0");
        let (addr, ca) = serve_https(served).await;
        let roots = tmp.path().join("roots.pem");
        std::fs::write(&roots, ca).unwrap();
        let url = format!("https://{addr}/img/");
        let got = fetch(&url, &tmp.path().join("got"), &roots, &mut |_| {}).await.unwrap();
        assert_eq!(got.version, "0.4.0");
        // The system's roots do not trust this CA.
        let err = fetch(&url, &tmp.path().join("no"), Path::new(SYSTEM_ROOTS), &mut |_| {}).await.unwrap_err();
        assert!(err.to_string().contains("TLS"), "{err}");
    }
}

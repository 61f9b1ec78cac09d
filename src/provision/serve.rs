//! What a node's user network answers at [`CONFIG_ADDR`] port 80: QEMU runs `talosctl cluster
//! serve-config [--file F] --images DIR` for every TCP connection the node makes there (a
//! `guestfwd`), with the connection on its stdin and stdout. The command answers one HTTP/1.1
//! GET or HEAD and exits:
//!
//! - [`CONFIG_PATH`]: the node's own configuration, when `create` generated one for a directly
//!   booted node (its `talos.config=`); 404 for every other node.
//! - `/images/<path>`: a file below the cluster directory's `images/`, streamed with its length.
//!   `create` links `images/boot` to the artifacts directory the cluster booted from, so a node
//!   fetches `http://10.0.2.100/images/boot/SHA256SUMS`, `.../vmlinuz` and so on to install or
//!   upgrade itself; tests add links of their own there.
//!
//! The same answers come over https on port 443 ([`HTTPS_PORT`]): `create` makes the cluster
//! directory's [`TLS_DIR`] (a CA of its own and a certificate for [`CONFIG_ADDR`]), and a node
//! whose configuration names an image at `https://10.0.2.100/` is given that CA in a
//! `TrustedRootsConfig` document, so image URLs over https are tested as a user meets them.
//!
//! So a node fetches its configuration as a Talos node booted by Talos's QEMU provisioner does,
//! but no listener exists on the host: nothing outside that node's QEMU can ask (the
//! configuration holds the cluster's keys), and nothing keeps running after a request. A node
//! that reboots fetches it again.
//!
//! Never serves a file outside `images/`: a path with an empty, `.` or `..` component is refused
//! (after percent-decoding), and each entry of `images/` (a link the cluster's owner made, such
//! as `boot`) is a root nothing below it may resolve outside of, so a symlink among the artifacts
//! that leads elsewhere is refused too. Never serves the cluster directory's other files.

use std::fs::File;
use std::io::{BufRead, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The address inside the node's user network that the forward answers on.
pub const CONFIG_ADDR: &str = "10.0.2.100";
pub const CONFIG_PATH: &str = "/config.yaml";
/// Where the files below the cluster's `images/` directory are served.
pub const IMAGES_PATH: &str = "/images/";
/// The cluster directory's folder of served images.
pub const IMAGES_DIR: &str = "images";
/// The link in [`IMAGES_DIR`] to the artifacts directory the cluster booted from.
pub const BOOT_IMAGES: &str = "boot";

/// The port the https answers come on.
pub const HTTPS_PORT: u16 = 443;
/// The cluster directory's folder with the https server's CA (`ca.crt`), certificate
/// (`tls.crt`) and key (`tls.key`).
pub const TLS_DIR: &str = "images-tls";
/// The name of the `TrustedRootsConfig` document that carries [`TLS_DIR`]'s CA to a node.
pub const TRUSTED_ROOTS_NAME: &str = "cluster-images";

/// The node's `talos.config=` URL.
pub fn config_url() -> String {
    format!("http://{CONFIG_ADDR}{CONFIG_PATH}")
}

/// The URL a node fetches `images/<rel>` at, e.g. `images_url("boot/vmlinuz")`.
pub fn images_url(rel: &str) -> String {
    format!("http://{CONFIG_ADDR}{IMAGES_PATH}{rel}")
}

/// The https URL of `images/<rel>`.
pub fn images_https_url(rel: &str) -> String {
    format!("https://{CONFIG_ADDR}{IMAGES_PATH}{rel}")
}

/// Makes `dir` ([`TLS_DIR`] in a cluster directory): a CA for this cluster's image server and
/// a certificate for [`CONFIG_ADDR`] it signs. Returns the CA's PEM.
pub fn write_tls(dir: &Path) -> Result<String, String> {
    use crate::pki::ca::{CA_VALIDITY, CaOptions};
    use crate::pki::{CertificateAuthority, KeyAlgorithm, Validity};
    let now = std::time::SystemTime::now();
    let ca = CertificateAuthority::generate(&CaOptions {
        algorithm: KeyAlgorithm::Ed25519,
        organization: Some("talosctl cluster"),
        common_name: Some("image server CA"),
        validity: Validity::starting(now, CA_VALIDITY),
    })
    .map_err(|e| e.to_string())?;
    let addr: std::net::IpAddr = CONFIG_ADDR.parse().map_err(|e| format!("{CONFIG_ADDR}: {e}"))?;
    let leaf = crate::pki::issue_server(&ca, CONFIG_ADDR, &[addr], &[], Validity::starting(now, CA_VALIDITY))
        .map_err(|e| e.to_string())?;
    std::fs::create_dir(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (name, text) in
        [("ca.crt", ca.crt_pem()), ("tls.crt", leaf.crt_pem.as_str()), ("tls.key", leaf.key_pem.as_str())]
    {
        let path = dir.join(name);
        crate::pki::write_private(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(ca.crt_pem().to_string())
}

/// `config` with a `TrustedRootsConfig` for the cluster's image server CA appended when it
/// names an image at `https://10.0.2.100/`; unchanged otherwise.
pub fn trust_images_ca(config: &str, ca_pem: &str) -> String {
    if !config.contains(&format!("https://{CONFIG_ADDR}/")) {
        return config.to_string();
    }
    let mut out = config.trim_end().to_string();
    out.push_str(&format!(
        "\n---\napiVersion: v1alpha1\nkind: TrustedRootsConfig\nname: {TRUSTED_ROOTS_NAME}\ncertificates: |\n"
    ));
    for line in ca_pem.lines() {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

/// [`answer`] over TLS on stdin/stdout, with the certificate and key in `tls_dir`.
pub fn answer_tls(tls_dir: &Path, served: &Served) -> std::io::Result<()> {
    struct Stdio(std::io::Stdin, std::io::Stdout);
    impl Read for Stdio {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }
    impl Write for Stdio {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.1.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.1.flush()
        }
    }
    answer_tls_on(tls_dir, Stdio(std::io::stdin(), std::io::stdout()), served)
}

/// [`answer`] over TLS on `transport`, with the certificate and key in `tls_dir`.
pub fn answer_tls_on(tls_dir: &Path, transport: impl Read + Write, served: &Served) -> std::io::Result<()> {
    let read = |name: &str| {
        let path = tls_dir.join(name);
        std::fs::read_to_string(&path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("reading {}: {e}", path.display())))
    };
    let identity = crate::pki::CertAndKey { crt_pem: read("tls.crt")?, key_pem: read("tls.key")? };
    let tls = crate::pki::tls::ServerTls::new::<&str>(&identity, &[], crate::pki::tls::ClientAuth::None)
        .map_err(std::io::Error::other)?;
    // HTTP/1.1 only: the gRPC door's h2 ALPN does not apply here.
    let mut config = (*tls.config()).clone();
    config.alpn_protocols = Vec::new();
    let conn = rustls::ServerConnection::new(std::sync::Arc::new(config)).map_err(std::io::Error::other)?;
    // The request is read through a buffer; the answer goes to the stream beneath it.
    let mut stream = std::io::BufReader::new(rustls::StreamOwned::new(conn, transport));
    let request = read_request(&mut stream, served);
    let tls = stream.get_mut();
    respond(tls, request)?;
    tls.conn.send_close_notify();
    tls.flush()
}

/// The most a request head may take; a node's GET is a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;

/// What one node is served: its configuration (if any) and the cluster's images directory.
#[derive(Debug, Clone, Copy, Default)]
pub struct Served<'a> {
    pub config: Option<&'a Path>,
    pub images: Option<&'a Path>,
}

/// Why a path below `/images/` is not answered with a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed, or with an empty, `.` or `..` component (400).
    BadPath(String),
    /// Resolves outside the `images/` entry it names (403).
    Outside,
    /// Nothing there, or not a regular file (404).
    NotFound,
}

/// Resolves `rel` (the request path after `/images/`, still percent-encoded) below `images`:
/// the canonical path of a regular file inside the entry of `images` that `rel` starts with.
pub fn resolve_image(images: &Path, rel: &str) -> Result<PathBuf, Refusal> {
    let decoded = percent_decode(rel).ok_or_else(|| Refusal::BadPath(format!("bad percent-encoding in {rel:?}")))?;
    let mut parts = Vec::new();
    for part in decoded.split(|b| *b == b'/') {
        if part.is_empty() || part == b"." || part == b".." || part.contains(&0) {
            return Err(Refusal::BadPath(format!("{rel:?}: empty, '.', '..' and absolute paths are refused")));
        }
        parts.push(std::ffi::OsStr::from_bytes(part));
    }
    let Some(first) = parts.first() else { return Err(Refusal::BadPath("no file named".into())) };
    let root = images.join(first).canonicalize().map_err(|_| Refusal::NotFound)?;
    let full = parts.iter().fold(images.to_path_buf(), |p, part| p.join(part));
    let full = full.canonicalize().map_err(|_| Refusal::NotFound)?;
    if !full.starts_with(&root) {
        return Err(Refusal::Outside);
    }
    match std::fs::metadata(&full) {
        Ok(m) if m.is_file() => Ok(full),
        _ => Err(Refusal::NotFound),
    }
}

/// `%XX` escapes decoded to bytes; `None` for a broken escape.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

enum Body {
    Text(Vec<u8>),
    /// An open file and the length announced for it.
    File(File, u64),
}

struct Reply {
    status: &'static str,
    kind: &'static str,
    body: Body,
}

fn text(status: &'static str, message: String) -> Reply {
    Reply { status, kind: "text/plain", body: Body::Text(message.into_bytes()) }
}

fn route(method: &str, path: &str, served: &Served) -> Reply {
    if method != "GET" && method != "HEAD" {
        return text("405 Method Not Allowed", "only GET and HEAD\n".into());
    }
    let path = path.split('?').next().unwrap_or_default();
    if path == CONFIG_PATH {
        let Some(file) = served.config else {
            return text("404 Not Found", "no configuration is served to this node\n".into());
        };
        return match std::fs::read(file) {
            Ok(bytes) => Reply { status: "200 OK", kind: "application/yaml", body: Body::Text(bytes) },
            // The node retries until the file is there.
            Err(e) => text("503 Service Unavailable", format!("reading the configuration: {e}\n")),
        };
    }
    if let (Some(rel), Some(images)) = (path.strip_prefix(IMAGES_PATH), served.images) {
        return match resolve_image(images, rel) {
            Ok(full) => match File::open(&full).and_then(|f| Ok((f.metadata()?.len(), f))) {
                Ok((len, f)) => Reply { status: "200 OK", kind: "application/octet-stream", body: Body::File(f, len) },
                Err(e) => text("503 Service Unavailable", format!("opening {rel}: {e}\n")),
            },
            Err(Refusal::BadPath(why)) => text("400 Bad Request", format!("{why}\n")),
            Err(Refusal::Outside) => text("403 Forbidden", format!("{rel} resolves outside {IMAGES_PATH}\n")),
            Err(Refusal::NotFound) => text("404 Not Found", format!("no file {IMAGES_PATH}{rel}\n")),
        };
    }
    text("404 Not Found", format!("only {CONFIG_PATH} and {IMAGES_PATH}... are served\n"))
}

/// Reads one request head from `input` and writes the answer to `output`: the node's
/// configuration for `GET /config.yaml`, a file streamed for `GET /images/...`, their headers
/// alone for HEAD; 404 for anything else, 405 for another method, 400 for garbage.
pub fn answer(input: &mut impl BufRead, output: &mut impl Write, served: &Served) -> std::io::Result<()> {
    respond(output, read_request(input, served))
}

/// The reply to the request read from `input`, and whether it is for a HEAD.
fn read_request(input: &mut impl BufRead, served: &Served) -> (bool, Reply) {
    match read_head(input) {
        Err(why) => (false, text("400 Bad Request", why)),
        Ok((method, path)) => (method == "HEAD", route(&method, &path, served)),
    }
}

/// Writes `reply` to `output` (its head alone for a HEAD).
fn respond(output: &mut impl Write, (head_only, reply): (bool, Reply)) -> std::io::Result<()> {
    let len = match &reply.body {
        Body::Text(bytes) => bytes.len() as u64,
        Body::File(_, len) => *len,
    };
    write!(
        output,
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n",
        reply.status, reply.kind
    )?;
    if !head_only {
        match reply.body {
            Body::Text(bytes) => output.write_all(&bytes)?,
            Body::File(file, len) => {
                // Streamed: a kernel or disk image is tens of MB.
                let sent = std::io::copy(&mut file.take(len), output)?;
                if sent != len {
                    // The file shrank while it was sent: the client sees a short body.
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("the file shrank while it was sent: {sent} of {len} bytes"),
                    ));
                }
            }
        }
    }
    output.flush()
}

/// The method and path of a request head, read up to its blank line.
fn read_head(input: &mut impl BufRead) -> Result<(String, String), String> {
    let mut head = Vec::new();
    let mut limited = input.take(MAX_HEAD as u64);
    loop {
        let before = head.len();
        let n = limited.read_until(b'\n', &mut head).map_err(|e| format!("reading the request: {e}\n"))?;
        if n == 0 {
            return Err("the request ended before its blank line\n".into());
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head);
    let first = text.lines().next().unwrap_or_default();
    let mut parts = first.split(' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(path), Some(version)) if version.starts_with("HTTP/1.") && path.starts_with('/') => {
            Ok((method.to_string(), path.to_string()))
        }
        _ => Err(format!("not an HTTP/1 request line: {first:?}\n")),
    }
}

/// The shell command QEMU's `guestfwd=...-cmd:` runs (through `/bin/sh -c`): this program's
/// `talosctl cluster serve-config`, with the node's configuration `config` if it has one and
/// the cluster's `images` directory, single-quoted for the shell.
pub fn command(exe: &Path, config: Option<&Path>, images: &Path) -> String {
    let file = config.map(|f| format!(" --file {}", quote(f))).unwrap_or_default();
    format!("{} talosctl cluster serve-config{file} --images {}", quote(exe), quote(images))
}

/// [`command`] answering over TLS with the certificate in `tls_dir` (port [`HTTPS_PORT`]).
pub fn tls_command(exe: &Path, config: Option<&Path>, images: &Path, tls_dir: &Path) -> String {
    format!("{} --tls {}", command(exe, config, images), quote(tls_dir))
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.to_string_lossy().replace('\'', r"'\''"))
}

/// Where a node reaches the cluster's KMS (`kms` disk encryption keys): a second guestfwd,
/// which hands each connection to `talosctl kms-launch --stdio` with the cluster's key, so,
/// like the configuration, it is answered for that node alone and no listener is left on the
/// host. Talos's launcher serves its KMS on the bridge at port 4050.
pub const KMS_ADDR: &str = "10.0.2.101";
pub const KMS_PORT: u16 = 4050;

/// The `kms.endpoint` of the cluster's KMS, as the node sees it.
pub fn kms_endpoint() -> String {
    format!("grpc://{KMS_ADDR}:{KMS_PORT}")
}

/// The guestfwd command of the cluster's KMS, with its key in `key_file`.
pub fn kms_command(exe: &Path, key_file: &Path) -> String {
    format!("{} talosctl kms-launch --stdio --kms-key-file {}", quote(exe), quote(key_file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(request: &str, served: &Served) -> String {
        let mut out = Vec::new();
        answer(&mut request.as_bytes(), &mut out, served).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    fn config(file: &Path) -> Served<'_> {
        Served { config: Some(file), images: None }
    }

    #[test]
    fn serves_the_config_for_its_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.yaml");
        std::fs::write(&file, "version: v1alpha1\n").unwrap();
        let get = "GET /config.yaml HTTP/1.1\r\nHost: 10.0.2.100\r\n\r\n";
        let ok = ask(get, &config(&file));
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Length: 18\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nversion: v1alpha1\n"), "{ok}");
        assert!(ask("GET /config.yaml?x=1 HTTP/1.1\r\n\r\n", &config(&file)).starts_with("HTTP/1.1 200"));
        assert!(ask("GET /secrets.yaml HTTP/1.1\r\n\r\n", &config(&file)).starts_with("HTTP/1.1 404"));
        assert!(ask("POST /config.yaml HTTP/1.1\r\n\r\n", &config(&file)).starts_with("HTTP/1.1 405"));
        assert!(ask("hello\r\n\r\n", &config(&file)).starts_with("HTTP/1.1 400"));
        assert!(ask("GET /config.yaml HTTP/1.1\r\n", &config(&file)).starts_with("HTTP/1.1 400"), "no blank line");
        let head = ask("HEAD /config.yaml HTTP/1.1\r\n\r\n", &config(&file));
        assert!(head.ends_with("Content-Length: 18\r\nConnection: close\r\n\r\n"), "{head}");
        // A node without a served configuration is told so.
        let none = ask(get, &Served::default());
        assert!(none.starts_with("HTTP/1.1 404") && none.contains("no configuration"), "{none}");
        std::fs::remove_file(&file).unwrap();
        assert!(ask(get, &config(&file)).starts_with("HTTP/1.1 503"), "the node retries until the file is there");
    }

    /// A cluster directory as `create` lays it out: secrets beside `images/`, `images/boot` a
    /// link to an artifacts directory elsewhere, which holds a symlink leading out of it.
    struct Layout {
        _tmp: tempfile::TempDir,
        cluster: PathBuf,
        images: PathBuf,
    }

    fn layout() -> Layout {
        let tmp = tempfile::tempdir().unwrap();
        let (cluster, artifacts) = (tmp.path().join("c"), tmp.path().join("_out"));
        let images = cluster.join(IMAGES_DIR);
        std::fs::create_dir_all(&images).unwrap();
        std::fs::create_dir_all(artifacts.join("sub")).unwrap();
        std::fs::write(cluster.join("kms.key"), "secret").unwrap();
        std::fs::write(artifacts.join("SHA256SUMS"), "abc  vmlinuz\n").unwrap();
        std::fs::write(artifacts.join("sub/file name"), "spaced").unwrap();
        std::os::unix::fs::symlink(cluster.join("kms.key"), artifacts.join("escape")).unwrap();
        std::os::unix::fs::symlink("SHA256SUMS", artifacts.join("sums")).unwrap();
        std::os::unix::fs::symlink(&artifacts, images.join(BOOT_IMAGES)).unwrap();
        Layout { _tmp: tmp, cluster, images }
    }

    #[test]
    fn image_paths_resolve_inside_their_entry_only() {
        let l = layout();
        let ok = resolve_image(&l.images, "boot/SHA256SUMS").unwrap();
        assert!(ok.ends_with("_out/SHA256SUMS"), "{}", ok.display());
        assert!(resolve_image(&l.images, "boot/sums").unwrap().ends_with("_out/SHA256SUMS"), "a link inside is fine");
        assert!(resolve_image(&l.images, "boot/sub/file%20name").unwrap().ends_with("sub/file name"));
        for bad in [
            "",
            "../kms.key",
            "boot/../../kms.key",
            "boot/./SHA256SUMS",
            "/etc/passwd",
            "boot//SHA256SUMS",
            "boot/%2e%2e/%2e%2e/kms.key",
            "boot%2F..%2F..%2Fkms.key",
            "boot/%zz",
            "boot/%0",
            "boot/a%00b",
        ] {
            assert!(matches!(resolve_image(&l.images, bad), Err(Refusal::BadPath(_))), "{bad:?}");
        }
        assert_eq!(resolve_image(&l.images, "boot/escape"), Err(Refusal::Outside), "a link out of the artifacts");
        assert_eq!(resolve_image(&l.images, "boot/missing"), Err(Refusal::NotFound));
        assert_eq!(resolve_image(&l.images, "boot/sub"), Err(Refusal::NotFound), "a directory is not a file");
        assert_eq!(resolve_image(&l.images, "other/x"), Err(Refusal::NotFound));
        assert!(l.cluster.join("kms.key").exists());
    }

    #[test]
    fn images_are_answered_with_the_right_status() {
        let l = layout();
        let served = Served { config: None, images: Some(&l.images) };
        let ok = ask("GET /images/boot/SHA256SUMS HTTP/1.1\r\nHost: 10.0.2.100\r\n\r\n", &served);
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"), "{ok}");
        assert!(ok.contains("Content-Length: 13\r\n") && ok.ends_with("\r\n\r\nabc  vmlinuz\n"), "{ok}");
        let head = ask("HEAD /images/boot/SHA256SUMS HTTP/1.1\r\n\r\n", &served);
        assert!(head.ends_with("Content-Length: 13\r\nConnection: close\r\n\r\n"), "{head}");
        for (path, status) in [
            ("/images/boot/../../kms.key", "400"),
            ("/images/../kms.key", "400"),
            ("/images//etc/passwd", "400"),
            ("/images/boot/escape", "403"),
            ("/images/boot/nothing", "404"),
            ("/images/boot/sub", "404"),
            ("/kms.key", "404"),
            ("/images", "404"),
        ] {
            let got = ask(&format!("GET {path} HTTP/1.1\r\n\r\n"), &served);
            assert!(got.starts_with(&format!("HTTP/1.1 {status} ")), "{path}: {got}");
            assert!(!got.contains("secret"), "{path}: {got}");
        }
        // Without an images directory nothing below /images/ exists.
        let none = ask("GET /images/boot/SHA256SUMS HTTP/1.1\r\n\r\n", &Served::default());
        assert!(none.starts_with("HTTP/1.1 404"), "{none}");
    }

    /// A writer that checks what it is given against a file, chunk by chunk, and counts.
    struct Compare {
        file: File,
        at: u64,
        head: Vec<u8>,
        in_body: bool,
        largest_write: usize,
    }

    impl Write for Compare {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            use std::os::unix::fs::FileExt;
            if !self.in_body {
                self.head.extend_from_slice(buf);
                self.in_body = self.head.ends_with(b"\r\n\r\n");
                return Ok(buf.len());
            }
            self.largest_write = self.largest_write.max(buf.len());
            let mut want = vec![0u8; buf.len()];
            self.file.read_exact_at(&mut want, self.at)?;
            assert!(want == buf, "body differs from the file at byte {}", self.at);
            self.at += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A 48 MiB image goes out whole, in order, in pieces (never held in memory at once).
    #[test]
    fn a_large_image_is_streamed() {
        let l = layout();
        let big = l.cluster.join("disk.raw");
        let mut f = File::create(&big).unwrap();
        let block: Vec<u8> = (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for i in 0..48u8 {
            let mut b = block.clone();
            b[0] = i;
            f.write_all(&b).unwrap();
        }
        drop(f);
        std::os::unix::fs::symlink(&big, l.images.join("disk.raw")).unwrap();
        let served = Served { config: None, images: Some(&l.images) };
        let mut out =
            Compare { file: File::open(&big).unwrap(), at: 0, head: Vec::new(), in_body: false, largest_write: 0 };
        answer(&mut "GET /images/disk.raw HTTP/1.1\r\n\r\n".as_bytes(), &mut out, &served).unwrap();
        let head = String::from_utf8_lossy(&out.head);
        assert!(head.starts_with("HTTP/1.1 200 OK") && head.contains(&format!("Content-Length: {}\r\n", 48u64 << 20)));
        assert_eq!(out.at, 48 << 20, "the whole file");
        assert!(out.largest_write <= 1 << 20, "written in pieces of at most 1 MiB, not {}", out.largest_write);
    }

    /// https: a client that trusts the cluster's CA for 10.0.2.100 gets the file; the
    /// configuration naming such a URL gets the CA as a TrustedRootsConfig.
    #[test]
    fn images_are_answered_over_tls_to_a_client_trusting_the_cluster_ca() {
        let tmp = tempfile::tempdir().unwrap();
        let l = layout();
        let images = l.images.clone();
        let tls_dir = tmp.path().join(TLS_DIR);
        let ca = write_tls(&tls_dir).unwrap();
        assert!(write_tls(&tls_dir).is_err(), "never over an existing directory");

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (dir, imgs) = (tls_dir.clone(), images.clone());
        let server = std::thread::spawn(move || {
            let (sock, _) = listener.accept().unwrap();
            answer_tls_on(&dir, sock, &Served { config: None, images: Some(&imgs) })
        });
        let roots = crate::pki::tls::client_config(&[ca.as_str()], None).unwrap();
        let name = rustls::pki_types::ServerName::try_from(CONFIG_ADDR).unwrap();
        let conn = rustls::ClientConnection::new(roots, name).unwrap();
        let mut stream = rustls::StreamOwned::new(conn, std::net::TcpStream::connect(addr).unwrap());
        stream.write_all(b"GET /images/boot/SHA256SUMS HTTP/1.1\r\nHost: 10.0.2.100\r\n\r\n").unwrap();
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).unwrap();
        server.join().unwrap().unwrap();
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert!(reply.ends_with("\r\n\r\nabc  vmlinuz\n"), "{reply}");

        let plain = "version: v1alpha1\nmachine:\n  install:\n    image: http://10.0.2.100/images/boot/\n";
        assert_eq!(trust_images_ca(plain, &ca), plain, "an http URL needs no CA");
        let https = plain.replace("http:", "https:");
        let trusted = trust_images_ca(&https, &ca);
        let loaded = crate::config::load(&trusted).unwrap().config;
        let roots = crate::controllers::files::custom_roots(&loaded);
        assert_eq!(roots.len(), 1);
        assert_eq!(roots[0].0, TRUSTED_ROOTS_NAME);
        assert_eq!(roots[0].1.trim(), ca.trim());
        crate::pki::pem::decode_certificates(&roots[0].1, "the CA").unwrap();
    }

    #[test]
    fn the_command_survives_the_shell() {
        let cmd = command(
            Path::new("/opt/talos box/talosbox"),
            Some(Path::new("/s/it's/n.yaml")),
            Path::new("/s/it's/images"),
        );
        assert_eq!(
            cmd,
            r"'/opt/talos box/talosbox' talosctl cluster serve-config --file '/s/it'\''s/n.yaml' --images '/s/it'\''s/images'"
        );
        let out = std::process::Command::new("sh").args(["-c", &format!("printf '%s|' {cmd}")]).output().unwrap();
        let words =
            "/opt/talos box/talosbox|talosctl|cluster|serve-config|--file|/s/it's/n.yaml|--images|/s/it's/images|";
        assert_eq!(String::from_utf8_lossy(&out.stdout), words);
        let bare = command(Path::new("/t"), None, Path::new("/i"));
        assert_eq!(bare, "'/t' talosctl cluster serve-config --images '/i'");
    }
}

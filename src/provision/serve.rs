//! A directly booted node's configuration, served to it alone: QEMU's user network runs
//! `talosctl cluster serve-config --file F` for every TCP connection the node makes to
//! [`CONFIG_ADDR`] (a `guestfwd`), with the connection on its stdin and stdout. The command
//! answers one HTTP/1.1 GET of [`CONFIG_PATH`] with the file and exits.
//!
//! So the node fetches its configuration from `talos.config=` as a Talos node booted by
//! Talos's QEMU provisioner does, but no listener exists on the host: nothing outside that
//! node's QEMU can ask for the file (it holds the cluster's keys), and nothing keeps running
//! after `cluster create` returns. A node that reboots fetches it again.

use std::io::{BufRead, Read, Write};
use std::path::Path;

/// The address inside the node's user network that the forward answers on.
pub const CONFIG_ADDR: &str = "10.0.2.100";
pub const CONFIG_PATH: &str = "/config.yaml";

/// The node's `talos.config=` URL.
pub fn config_url() -> String {
    format!("http://{CONFIG_ADDR}{CONFIG_PATH}")
}

/// The most a request head may take; a node's GET is a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;

/// Reads one request head from `input` and writes the answer to `output`: the bytes of `file`
/// for `GET /config.yaml`, 404 for any other path, 405 for another method, 400 for garbage,
/// 503 while the file cannot be read (the node retries).
pub fn answer(input: &mut impl BufRead, output: &mut impl Write, file: &Path) -> std::io::Result<()> {
    let (status, body) = match read_head(input) {
        Err(why) => ("400 Bad Request", why.into_bytes()),
        Ok((method, path)) => {
            if method != "GET" && method != "HEAD" {
                ("405 Method Not Allowed", b"only GET\n".to_vec())
            } else if path.split('?').next() != Some(CONFIG_PATH) {
                ("404 Not Found", format!("only {CONFIG_PATH} is served\n").into_bytes())
            } else {
                match std::fs::read(file) {
                    Ok(bytes) => ("200 OK", if method == "HEAD" { Vec::new() } else { bytes }),
                    Err(e) => ("503 Service Unavailable", format!("reading the configuration: {e}\n").into_bytes()),
                }
            }
        }
    };
    let kind = if status.starts_with("200") { "application/yaml" } else { "text/plain" };
    write!(
        output,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    output.write_all(&body)?;
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
/// `talosctl cluster serve-config` for `file`, single-quoted for the shell.
pub fn command(exe: &Path, file: &Path) -> String {
    format!("{} talosctl cluster serve-config --file {}", quote(exe), quote(file))
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

    fn ask(request: &str, file: &Path) -> String {
        let mut out = Vec::new();
        answer(&mut request.as_bytes(), &mut out, file).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn serves_the_file_for_its_path_only() {
        let dir = std::env::temp_dir().join(format!("tb-serve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("node.yaml");
        std::fs::write(&file, "version: v1alpha1\n").unwrap();
        let get = "GET /config.yaml HTTP/1.1\r\nHost: 10.0.2.100\r\n\r\n";
        let ok = ask(get, &file);
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Length: 18\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nversion: v1alpha1\n"), "{ok}");
        assert!(ask("GET /config.yaml?x=1 HTTP/1.1\r\n\r\n", &file).starts_with("HTTP/1.1 200"));
        assert!(ask("GET /secrets.yaml HTTP/1.1\r\n\r\n", &file).starts_with("HTTP/1.1 404"));
        assert!(ask("POST /config.yaml HTTP/1.1\r\n\r\n", &file).starts_with("HTTP/1.1 405"));
        assert!(ask("hello\r\n\r\n", &file).starts_with("HTTP/1.1 400"));
        assert!(ask("GET /config.yaml HTTP/1.1\r\n", &file).starts_with("HTTP/1.1 400"), "no blank line");
        let head = ask("HEAD /config.yaml HTTP/1.1\r\n\r\n", &file);
        assert!(head.ends_with("Content-Length: 0\r\nConnection: close\r\n\r\n"), "{head}");
        std::fs::remove_file(&file).unwrap();
        assert!(ask(get, &file).starts_with("HTTP/1.1 503"), "the node retries until the file is there");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_command_survives_the_shell() {
        let cmd = command(Path::new("/opt/talos box/talosbox"), Path::new("/s/it's/n.yaml"));
        assert_eq!(cmd, r"'/opt/talos box/talosbox' talosctl cluster serve-config --file '/s/it'\''s/n.yaml'");
        let out = std::process::Command::new("sh").args(["-c", &format!("printf '%s|' {cmd}")]).output().unwrap();
        let words = "/opt/talos box/talosbox|talosctl|cluster|serve-config|--file|/s/it's/n.yaml|";
        assert_eq!(String::from_utf8_lossy(&out.stdout), words);
    }
}

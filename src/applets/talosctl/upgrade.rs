//! `talosctl upgrade --image DIR|URL [--stage] [--wait]` and `talosctl rollback`, on Talos's
//! wire: an http(s) URL of an imager output directory is handed to the node, which fetches
//! and checks it; a directory is uploaded first (`talosbox.lifecycle.ArtifactService`, its
//! SHA256SUMS and the files an upgrade takes). Then `LifecycleService.Upgrade` writes the new
//! version into the slot not booted, its progress printed as it comes, and — unless
//! `--stage` — the node reboots into it; with `--wait` (the default) talosctl waits for the
//! node to answer again and prints the version it runs.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use super::Cli;
use super::node::{per_node, st};
use crate::boot::artifacts;
use crate::client::api::{Session, Target};
use crate::proto::machine as m;
use crate::proto::talosbox::lifecycle as l;

/// The chunk size of an upload (apid takes messages up to 32 MiB).
const CHUNK: usize = 1 << 20;

#[derive(Debug, clap::Args)]
pub struct UpgradeArgs {
    /// The new version: an imager output directory (uploaded through the API), or an http(s)
    /// URL of one (fetched by the node). Every file is checked against its SHA256SUMS.
    #[arg(short = 'i', long)]
    image: String,
    /// Write the new version without rebooting: the node boots it at its next reboot.
    #[arg(short = 's', long)]
    stage: bool,
    /// Keep the node's data. Always the case: an upgrade never touches STATE or EPHEMERAL.
    #[arg(short = 'p', long)]
    preserve: bool,
    /// Accepted as in Talos; there is nothing to force.
    #[arg(short = 'f', long)]
    force: bool,
    /// Wait for the node to come back and print the version it runs.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    wait: bool,
    /// How long --wait waits (90s, 5m, 1h).
    #[arg(long, default_value = "15m", value_parser = super::parse_duration)]
    timeout: Duration,
}

pub fn upgrade(cli: &Cli, a: &UpgradeArgs) -> ExitCode {
    let local = !(a.image.starts_with("http://") || a.image.starts_with("https://"));
    if local && !Path::new(&a.image).is_dir() {
        eprintln!("talosctl upgrade: --image {:?}: not a directory, nor an http(s) URL of one", a.image);
        return ExitCode::from(2);
    }
    let files = if local {
        match upload_set(Path::new(&a.image)) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("talosctl upgrade: --image {}: {e}", a.image);
                return ExitCode::from(2);
            }
        }
    } else {
        Vec::new()
    };
    let files = std::rc::Rc::new(files);
    per_node(cli, "upgrade", |session, target| {
        let files = files.clone();
        async move {
            let label = target.label(&session).to_string();
            let image = if local {
                let (image, version) = upload(&session, &target, &files, &label).await?;
                println!("{label}: uploaded talosbox {version} as {image}");
                image
            } else {
                a.image.clone()
            };
            let request = m::LifecycleServiceUpgradeRequest {
                containerd: None,
                source: Some(m::InstallArtifactsSource { image_name: image }),
            };
            let mut client =
                crate::proto::machine::lifecycle_service_client::LifecycleServiceClient::new(session.channel());
            let mut stream = client.upgrade(session.request(&target, request)).await.map_err(st)?.into_inner();
            let mut exit = None;
            while let Some(reply) = stream.message().await.map_err(st)? {
                match reply.progress.and_then(|p| p.response) {
                    Some(m::lifecycle_service_install_progress::Response::Message(line)) => println!("{label}: {line}"),
                    Some(m::lifecycle_service_install_progress::Response::ExitCode(code)) => exit = Some(code),
                    None => {}
                }
            }
            match exit {
                Some(0) => {}
                Some(code) => return Err(format!("the upgrade failed (exit code {code})")),
                None => return Err("the node ended the upgrade without an exit code".into()),
            }
            if a.stage {
                println!("{label}: staged; the new version boots at the next reboot");
                return Ok(());
            }
            let before = boot_id(&session, &target).await;
            session.machine().reboot(session.request(&target, m::RebootRequest { mode: 0 })).await.map_err(st)?;
            println!("{label}: rebooting into the new version");
            if a.wait {
                let tag = wait_back(&session, &target, before, a.timeout).await?;
                println!("{label}: running {tag}");
            }
            Ok(())
        }
    })
}

pub fn rollback(cli: &Cli) -> ExitCode {
    per_node(cli, "rollback", |session, target| async move {
        session.machine().rollback(session.request(&target, m::RollbackRequest {})).await.map_err(st)?;
        println!("{}: rolling back: the other slot is the default; the node reboots into it", target.label(&session));
        Ok(())
    })
}

/// The files an upgrade takes from `dir`: SHA256SUMS first, then the ones it lists that a
/// slot needs (checked here too, so a broken directory is found before anything is sent).
fn upload_set(dir: &Path) -> Result<Vec<(String, std::path::PathBuf)>, String> {
    let sums_path = dir.join(artifacts::SUMS);
    let text = std::fs::read_to_string(&sums_path).map_err(|e| format!("{}: {e}", sums_path.display()))?;
    let sums = artifacts::parse_sums(&text).map_err(|e| e.to_string())?;
    let wanted = artifacts::wanted(&sums).map_err(|e| e.to_string())?;
    let mut files = vec![(artifacts::SUMS.to_string(), sums_path)];
    for name in wanted {
        let path = dir.join(&name);
        let got = artifacts::sha256_file(&path).map_err(|e| e.to_string())?;
        if sums.get(&name) != Some(&got) {
            return Err(format!("{name} differs from its SHA256SUMS line"));
        }
        files.push((name, path));
    }
    Ok(files)
}

/// Streams `files` to the node; the image name and version it answers.
async fn upload(
    session: &Session,
    target: &Target,
    files: &[(String, std::path::PathBuf)],
    label: &str,
) -> Result<(String, String), String> {
    let mut chunks: Vec<l::UploadRequest> = Vec::new();
    let mut total = 0usize;
    for (name, path) in files {
        let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        total += data.len();
        if data.is_empty() {
            chunks.push(l::UploadRequest { name: name.clone(), data: Vec::new() });
        }
        for piece in data.chunks(CHUNK) {
            chunks.push(l::UploadRequest { name: name.clone(), data: piece.to_vec() });
        }
    }
    eprintln!("{label}: uploading {} files, {} MiB", files.len(), total.div_ceil(1 << 20));
    let count = chunks.len();
    let label = label.to_string();
    let stream = futures::stream::iter(chunks.into_iter().enumerate().map(move |(i, c)| {
        // A line at each quarter: an upload of tens of MiB takes a while over a slow link.
        if (count >= 4 && (i + 1) % count.div_ceil(4) == 0) || i + 1 == count {
            eprintln!("{label}: uploaded {}%", (i + 1) * 100 / count);
        }
        c
    }));
    let mut client =
        crate::proto::talosbox::lifecycle::artifact_service_client::ArtifactServiceClient::new(session.channel())
            .max_encoding_message_size(2 * CHUNK);
    let mut request = tonic::Request::new(stream);
    if let Some(node) = &target.0
        && let Ok(value) = tonic::metadata::MetadataValue::try_from(node.as_str())
    {
        request.metadata_mut().insert(crate::api::router::keys::NODE, value);
    }
    let reply = client.upload(request).await.map_err(st)?.into_inner();
    let first = reply.messages.into_iter().next().ok_or("the node answered the upload with nothing")?;
    Ok((first.image_name, first.version))
}

/// Something that changes with every boot: the kernel's boot id.
async fn boot_id(session: &Session, target: &Target) -> Option<Vec<u8>> {
    let request = m::ReadRequest { path: "/proc/sys/kernel/random/boot_id".into() };
    let mut stream = session.machine().read(session.request(target, request)).await.ok()?.into_inner();
    let mut out = Vec::new();
    while let Ok(Some(chunk)) = stream.message().await {
        out.extend(chunk.bytes);
    }
    Some(out)
}

/// Waits until the node answers from a new boot; the version it then reports.
async fn wait_back(
    session: &Session,
    target: &Target,
    before: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<String, String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("the node did not come back within {} s", timeout.as_secs()));
        }
        let now = boot_id(session, target).await;
        if now.is_none() || now == before {
            continue;
        }
        if let Ok(reply) = session.machine().version(session.request(target, ())).await {
            let tag = reply.into_inner().messages.into_iter().next().and_then(|m| m.version).map(|v| v.tag);
            return Ok(tag.unwrap_or_default());
        }
    }
}

//! `machine.MachineService` as machined serves it on its API socket, behind apid.
//!
//! Reads come from `/proc`, the kernel log, the file system and the node's logs and events;
//! actions go through [`Node`]. Authorization has already happened (the socket's interceptor
//! applied the role table) by the time a handler runs; handlers check only what depends on
//! the request itself. Every reply carries one per-node element with no metadata, as Talos's
//! machined answers locally. Streams end when the client goes away.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use tokio::io::AsyncReadExt;
use tonic::{Request, Response, Status};

use super::events::{EventLog, Tail};
use super::node::{Node, PowerAction, ServiceAction};
use super::stream::{BoxStream, Gone, Sink, produce, produce_blocking};
use super::timestamp;
use crate::cosi::State;
use crate::proto::common;
use crate::proto::machine::{self as m, machine_service_server::MachineService};

pub struct MachineApi {
    pub(crate) node: Arc<dyn Node>,
    pub(crate) state: State,
}

impl MachineApi {
    pub fn new(node: Arc<dyn Node>, state: State) -> Self {
        MachineApi { node, state }
    }
}

fn data(bytes: Vec<u8>) -> common::Data {
    common::Data { metadata: None, bytes }
}

/// Talos's Go `fs.FileMode` bits for a file of this metadata (type flags high, permissions low).
pub fn go_file_mode(md: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::FileTypeExt;
    let ft = md.file_type();
    let mut mode = md.permissions().mode() & 0o777;
    let raw = md.mode();
    if raw & 0o4000 != 0 {
        mode |= 1 << 23;
    }
    if raw & 0o2000 != 0 {
        mode |= 1 << 22;
    }
    if raw & 0o1000 != 0 {
        mode |= 1 << 20;
    }
    if ft.is_dir() {
        mode |= 1 << 31;
    } else if ft.is_symlink() {
        mode |= 1 << 27;
    } else if ft.is_block_device() {
        mode |= 1 << 26;
    } else if ft.is_char_device() {
        mode |= (1 << 26) | (1 << 21);
    } else if ft.is_fifo() {
        mode |= 1 << 25;
    } else if ft.is_socket() {
        mode |= 1 << 24;
    }
    mode
}

fn file_info(path: &Path, root: &Path) -> m::FileInfo {
    let relative = path.strip_prefix(root).ok().filter(|p| !p.as_os_str().is_empty());
    let relative_name = relative.map_or_else(|| ".".to_string(), |p| p.display().to_string());
    let name = path.display().to_string();
    match std::fs::symlink_metadata(path) {
        Err(e) => m::FileInfo { name, relative_name, error: e.to_string(), ..Default::default() },
        Ok(md) => m::FileInfo {
            metadata: None,
            name,
            size: md.len() as i64,
            mode: go_file_mode(&md),
            modified: md
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs() as i64),
            is_dir: md.is_dir(),
            error: String::new(),
            link: if md.file_type().is_symlink() {
                std::fs::read_link(path).map(|l| l.display().to_string()).unwrap_or_default()
            } else {
                String::new()
            },
            relative_name,
            uid: md.uid(),
            gid: md.gid(),
            xattrs: Vec::new(),
        },
    }
}

/// Whether a listed entry passes the request's type filter.
fn wanted(info: &m::FileInfo, types: &[i32]) -> bool {
    use m::list_request::Type;
    if types.is_empty() {
        return true;
    }
    let kind = if info.is_dir {
        Type::Directory
    } else if info.mode & (1 << 27) != 0 {
        Type::Symlink
    } else {
        Type::Regular
    };
    types.contains(&(kind as i32))
}

/// Walks `root` to `depth` levels (0: no limit), root first, children sorted by name, until
/// `send` says the client is gone.
fn walk(root: &Path, depth: i32, types: &[i32], send: &mut dyn FnMut(m::FileInfo) -> Result<(), Gone>) {
    let mut stack: Vec<(PathBuf, i32)> = vec![(root.to_path_buf(), 0)];
    while let Some((path, level)) = stack.pop() {
        let info = file_info(&path, root);
        let is_dir = info.is_dir;
        if wanted(&info, types) && send(info).is_err() {
            return;
        }
        if !is_dir || (depth > 0 && level >= depth) {
            continue;
        }
        let mut children: Vec<PathBuf> = match std::fs::read_dir(&path) {
            Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(e) => {
                let err = m::FileInfo { name: path.display().to_string(), error: e.to_string(), ..Default::default() };
                if send(err).is_err() {
                    return;
                }
                continue;
            }
        };
        children.sort();
        for child in children.into_iter().rev() {
            stack.push((child, level + 1));
        }
    }
}

fn event_to_wire(e: &super::events::Event) -> m::Event {
    m::Event {
        metadata: None,
        data: Some(prost_types::Any { type_url: e.type_url.clone(), value: e.payload.clone() }),
        id: e.id.clone(),
        actor_id: e.actor_id.clone(),
    }
}

async fn follow_events(log: Arc<EventLog>, tail: Tail, actor: String, tx: Sink<m::Event>) {
    let mut changes = log.subscribe();
    let (first, mut next) = log.start(&tail);
    changes.borrow_and_update();
    let keep = |e: &super::events::Event| actor.is_empty() || e.actor_id == actor;
    for e in first.iter().filter(|e| keep(e)) {
        if tx.send(Ok(event_to_wire(e))).await.is_err() {
            return;
        }
    }
    loop {
        if changes.changed().await.is_err() {
            return;
        }
        let (events, after) = log.since(next);
        next = after;
        for e in events.iter().filter(|e| keep(e)) {
            if tx.send(Ok(event_to_wire(e))).await.is_err() {
                return;
            }
        }
    }
}

/// Sends log lines as one message (none if there are none); false once the client is gone.
async fn send_lines(tx: &Sink<common::Data>, lines: Vec<String>) -> bool {
    if lines.is_empty() {
        return true;
    }
    let mut bytes = lines.join("\n").into_bytes();
    bytes.push(b'\n');
    tx.send(Ok(data(bytes))).await.is_ok()
}

/// Go's names for the architectures talosbox builds for.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[tonic::async_trait]
impl MachineService for MachineApi {
    async fn apply_configuration(
        &self,
        request: Request<m::ApplyConfigurationRequest>,
    ) -> Result<Response<m::ApplyConfigurationResponse>, Status> {
        super::apply::apply(self, request.into_inner()).await.map(Response::new)
    }

    type DmesgStream = BoxStream<common::Data>;

    async fn dmesg(&self, request: Request<m::DmesgRequest>) -> Result<Response<Self::DmesgStream>, Status> {
        let r = request.into_inner();
        let mut reader = crate::kernel::kmsg::Reader::open(r.tail, r.follow)
            .map_err(|e| Status::internal(format!("opening /dev/kmsg: {e}")))?;
        let boot = crate::kernel::kmsg::boot_time();
        Ok(Response::new(produce(64, move |tx| async move {
            loop {
                let record = reader.next().await;
                let item = match record {
                    Ok(Some(rec)) => {
                        let at = crate::cosi::timestamp::format(rec.time(boot));
                        Ok(data(format!("{}\n", rec.format(&at)).into_bytes()))
                    }
                    Ok(None) => return,
                    Err(e) => Err(Status::internal(format!("reading /dev/kmsg: {e}"))),
                };
                let last = item.is_err();
                if tx.send(item).await.is_err() || last {
                    return;
                }
            }
        })))
    }

    type EventsStream = BoxStream<m::Event>;

    async fn events(&self, request: Request<m::EventsRequest>) -> Result<Response<Self::EventsStream>, Status> {
        let r = request.into_inner();
        let tail = Tail {
            events: r.tail_events,
            after_id: Some(r.tail_id).filter(|s| !s.is_empty()),
            seconds: r.tail_seconds,
        };
        let log = self.node.events();
        Ok(Response::new(produce(64, move |tx| follow_events(log, tail, r.with_actor_id, tx))))
    }

    async fn hostname(&self, _: Request<()>) -> Result<Response<m::HostnameResponse>, Status> {
        Ok(Response::new(m::HostnameResponse {
            messages: vec![m::Hostname { metadata: None, hostname: self.node.hostname() }],
        }))
    }

    type ListStream = BoxStream<m::FileInfo>;

    async fn list(&self, request: Request<m::ListRequest>) -> Result<Response<Self::ListStream>, Status> {
        let r = request.into_inner();
        let root = PathBuf::from(if r.root.is_empty() { "/" } else { r.root.as_str() });
        if let Err(e) = std::fs::symlink_metadata(&root) {
            return Err(Status::not_found(format!("listing {}: {e}", root.display())));
        }
        let depth = if !r.recurse { 1 } else { r.recursion_depth.max(0) };
        Ok(Response::new(produce_blocking(128, move |tx| {
            walk(&root, depth, &r.types, &mut |info| tx.blocking_send(Ok(info)))
        })))
    }

    type LogsStream = BoxStream<common::Data>;

    async fn logs(&self, request: Request<m::LogsRequest>) -> Result<Response<Self::LogsStream>, Status> {
        let r = request.into_inner();
        let source = self.node.logs(&r.id).ok_or_else(|| {
            let known: Vec<String> = self.node.services().into_iter().map(|s| s.id).collect();
            Status::not_found(format!("no log for {:?} (services: machined, {})", r.id, known.join(", ")))
        })?;
        let tail = usize::try_from(r.tail_lines).ok();
        let follow = r.follow;
        Ok(Response::new(produce(64, move |tx| async move {
            let mut changes = source.subscribe();
            changes.borrow_and_update();
            let (lines, mut next) = source.tail(tail);
            if !send_lines(&tx, lines).await || !follow {
                return;
            }
            loop {
                if changes.changed().await.is_err() {
                    return;
                }
                let (lines, after) = source.since(next);
                next = after;
                if !send_lines(&tx, lines).await {
                    return;
                }
            }
        })))
    }

    async fn memory(&self, _: Request<()>) -> Result<Response<m::MemoryResponse>, Status> {
        let mi =
            crate::kernel::procfs::meminfo().map_err(|e| Status::internal(format!("reading /proc/meminfo: {e}")))?;
        let f = |k: &str| mi.get(k).copied().unwrap_or(0);
        let meminfo = m::MemInfo {
            memtotal: f("MemTotal"),
            memfree: f("MemFree"),
            memavailable: f("MemAvailable"),
            buffers: f("Buffers"),
            cached: f("Cached"),
            swapcached: f("SwapCached"),
            active: f("Active"),
            inactive: f("Inactive"),
            activeanon: f("Active(anon)"),
            inactiveanon: f("Inactive(anon)"),
            activefile: f("Active(file)"),
            inactivefile: f("Inactive(file)"),
            unevictable: f("Unevictable"),
            mlocked: f("Mlocked"),
            swaptotal: f("SwapTotal"),
            swapfree: f("SwapFree"),
            dirty: f("Dirty"),
            writeback: f("Writeback"),
            anonpages: f("AnonPages"),
            mapped: f("Mapped"),
            shmem: f("Shmem"),
            slab: f("Slab"),
            sreclaimable: f("SReclaimable"),
            sunreclaim: f("SUnreclaim"),
            kernelstack: f("KernelStack"),
            pagetables: f("PageTables"),
            nfsunstable: f("NFS_Unstable"),
            bounce: f("Bounce"),
            writebacktmp: f("WritebackTmp"),
            commitlimit: f("CommitLimit"),
            committedas: f("Committed_AS"),
            vmalloctotal: f("VmallocTotal"),
            vmallocused: f("VmallocUsed"),
            vmallocchunk: f("VmallocChunk"),
            hardwarecorrupted: f("HardwareCorrupted"),
            anonhugepages: f("AnonHugePages"),
            shmemhugepages: f("ShmemHugePages"),
            shmempmdmapped: f("ShmemPmdMapped"),
            cmatotal: f("CmaTotal"),
            cmafree: f("CmaFree"),
            hugepagestotal: f("HugePages_Total"),
            hugepagesfree: f("HugePages_Free"),
            hugepagesrsvd: f("HugePages_Rsvd"),
            hugepagessurp: f("HugePages_Surp"),
            hugepagesize: f("Hugepagesize"),
            directmap4k: f("DirectMap4k"),
            directmap2m: f("DirectMap2M"),
            directmap1g: f("DirectMap1G"),
        };
        Ok(Response::new(m::MemoryResponse { messages: vec![m::Memory { metadata: None, meminfo: Some(meminfo) }] }))
    }

    async fn meta_write(
        &self,
        request: Request<m::MetaWriteRequest>,
    ) -> Result<Response<m::MetaWriteResponse>, Status> {
        super::meta::write(self, request.into_inner()).await.map(Response::new)
    }

    async fn meta_delete(
        &self,
        request: Request<m::MetaDeleteRequest>,
    ) -> Result<Response<m::MetaDeleteResponse>, Status> {
        super::meta::delete(self, request.into_inner()).await.map(Response::new)
    }

    async fn mounts(&self, _: Request<()>) -> Result<Response<m::MountsResponse>, Status> {
        let mounts = tokio::task::spawn_blocking(crate::kernel::procfs::mounts)
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(format!("reading /proc/mounts: {e}")))?;
        let stats = mounts
            .into_iter()
            .map(|s| m::MountStat {
                filesystem: s.filesystem,
                size: s.size,
                available: s.available,
                mounted_on: s.mounted_on,
            })
            .collect();
        Ok(Response::new(m::MountsResponse { messages: vec![m::Mounts { metadata: None, stats }] }))
    }

    async fn processes(&self, _: Request<()>) -> Result<Response<m::ProcessesResponse>, Status> {
        let procs = tokio::task::spawn_blocking(crate::kernel::procfs::processes)
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(format!("reading /proc: {e}")))?;
        let processes = procs
            .into_iter()
            .map(|p| m::ProcessInfo {
                pid: p.pid,
                ppid: p.ppid,
                state: p.state,
                threads: p.threads,
                cpu_time: p.cpu_time,
                virtual_memory: p.virtual_memory,
                resident_memory: p.resident_memory,
                command: p.command,
                executable: p.executable,
                args: p.args,
                label: String::new(),
            })
            .collect();
        Ok(Response::new(m::ProcessesResponse { messages: vec![m::Process { metadata: None, processes }] }))
    }

    type ReadStream = BoxStream<common::Data>;

    async fn read(&self, request: Request<m::ReadRequest>) -> Result<Response<Self::ReadStream>, Status> {
        let path = PathBuf::from(request.into_inner().path);
        let md = tokio::fs::metadata(&path).await.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Status::not_found(format!("reading {}: {e}", path.display())),
            _ => Status::internal(format!("reading {}: {e}", path.display())),
        })?;
        if md.is_dir() {
            return Err(Status::invalid_argument(format!("reading {}: is a directory", path.display())));
        }
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| Status::permission_denied(format!("reading {}: {e}", path.display())))?;
        Ok(Response::new(produce(8, move |tx| async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                let item = match file.read(&mut buf).await {
                    Ok(0) => return,
                    Ok(n) => Ok(data(buf[..n].to_vec())),
                    Err(e) => Err(Status::internal(format!("reading {}: {e}", path.display()))),
                };
                let last = item.is_err();
                if tx.send(item).await.is_err() || last {
                    return;
                }
            }
        })))
    }

    async fn reboot(&self, _: Request<m::RebootRequest>) -> Result<Response<m::RebootResponse>, Status> {
        let actor = self.node.events().new_id();
        self.node.power(PowerAction::Reboot)?;
        Ok(Response::new(m::RebootResponse { messages: vec![m::Reboot { metadata: None, actor_id: actor }] }))
    }

    async fn reset(&self, request: Request<m::ResetRequest>) -> Result<Response<m::ResetResponse>, Status> {
        let r = request.into_inner();
        let mode = crate::api::node::WipeMode::from_wire(r.mode)
            .ok_or_else(|| Status::invalid_argument(format!("reset: mode: unknown wipe mode {}", r.mode)))?;
        let request = crate::api::node::ResetRequest {
            reboot: r.reboot,
            mode,
            system_partitions: r.system_partitions_to_wipe.into_iter().map(|p| (p.label, p.wipe)).collect(),
            user_disks: r.user_disks_to_wipe,
        };
        let actor = self.node.events().new_id();
        self.node.reset(request).await?;
        Ok(Response::new(m::ResetResponse { messages: vec![m::Reset { metadata: None, actor_id: actor }] }))
    }

    async fn rollback(&self, _: Request<m::RollbackRequest>) -> Result<Response<m::RollbackResponse>, Status> {
        self.node.rollback().await?;
        Ok(Response::new(m::RollbackResponse { messages: vec![m::Rollback { metadata: None }] }))
    }

    async fn service_list(&self, _: Request<()>) -> Result<Response<m::ServiceListResponse>, Status> {
        let services = self
            .node
            .services()
            .into_iter()
            .map(|s| m::ServiceInfo {
                id: s.id,
                state: s.state,
                events: Some(m::ServiceEvents {
                    events: s
                        .events
                        .into_iter()
                        .map(|e| m::ServiceEvent { msg: e.message, state: e.state, ts: Some(timestamp(e.at)) })
                        .collect(),
                }),
                health: Some(m::ServiceHealth {
                    unknown: s.healthy.is_none(),
                    healthy: s.healthy.unwrap_or(false),
                    last_message: s.message,
                    last_change: s.last_change.map(timestamp),
                }),
            })
            .collect();
        Ok(Response::new(m::ServiceListResponse { messages: vec![m::ServiceList { metadata: None, services }] }))
    }

    async fn service_restart(
        &self,
        request: Request<m::ServiceRestartRequest>,
    ) -> Result<Response<m::ServiceRestartResponse>, Status> {
        let id = request.into_inner().id;
        self.node.service(&id, ServiceAction::Restart).await?;
        Ok(Response::new(m::ServiceRestartResponse {
            messages: vec![m::ServiceRestart { metadata: None, resp: format!("Service {id:?} restarted") }],
        }))
    }

    async fn service_start(
        &self,
        request: Request<m::ServiceStartRequest>,
    ) -> Result<Response<m::ServiceStartResponse>, Status> {
        let id = request.into_inner().id;
        self.node.service(&id, ServiceAction::Start).await?;
        Ok(Response::new(m::ServiceStartResponse {
            messages: vec![m::ServiceStart { metadata: None, resp: format!("Service {id:?} started") }],
        }))
    }

    async fn service_stop(
        &self,
        request: Request<m::ServiceStopRequest>,
    ) -> Result<Response<m::ServiceStopResponse>, Status> {
        let id = request.into_inner().id;
        self.node.service(&id, ServiceAction::Stop).await?;
        Ok(Response::new(m::ServiceStopResponse {
            messages: vec![m::ServiceStop { metadata: None, resp: format!("Service {id:?} stopped") }],
        }))
    }

    async fn shutdown(&self, _: Request<m::ShutdownRequest>) -> Result<Response<m::ShutdownResponse>, Status> {
        self.node.power(PowerAction::PowerOff)?;
        Ok(Response::new(m::ShutdownResponse {
            messages: vec![m::Shutdown { metadata: None, actor_id: String::new() }],
        }))
    }

    /// The legacy upgrade: the new version is written and checked before the answer (so a bad
    /// image is the caller's error, not a line on the console), then the node reboots into it
    /// unless `stage` (it boots it at its next reboot). `preserve` and `force` change nothing:
    /// an upgrade never touches STATE or EPHEMERAL.
    async fn upgrade(&self, request: Request<m::UpgradeRequest>) -> Result<Response<m::UpgradeResponse>, Status> {
        let r = request.into_inner();
        if r.image.is_empty() {
            return Err(Status::invalid_argument("image: the artifacts to upgrade to are required"));
        }
        let actor = self.node.events().new_id();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let log = tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                crate::kernel::console::line(&format!("upgrade: {line}"));
            }
        });
        let outcome = self.node.upgrade(&r.image, tx).await;
        let _ = log.await;
        outcome?;
        let ack = if r.stage {
            "Upgrade request received: staged, it boots at the next reboot".to_string()
        } else {
            self.node.power(PowerAction::Reboot)?;
            "Upgrade request received".to_string()
        };
        Ok(Response::new(m::UpgradeResponse { messages: vec![m::Upgrade { metadata: None, ack, actor_id: actor }] }))
    }

    async fn version(&self, _: Request<()>) -> Result<Response<m::VersionResponse>, Status> {
        let (name, mode) = self.node.platform();
        Ok(Response::new(m::VersionResponse {
            messages: vec![m::Version {
                metadata: None,
                version: Some(m::VersionInfo {
                    tag: format!("v{}", crate::version::os_version()),
                    sha: crate::version::GIT_COMMIT.to_string(),
                    built: String::new(),
                    go_version: String::new(),
                    os: std::env::consts::OS.to_string(),
                    arch: go_arch().to_string(),
                }),
                platform: Some(m::PlatformInfo { name, mode }),
                features: Some(m::FeaturesInfo { rbac: true }),
            }],
        }))
    }

    async fn generate_client_configuration(
        &self,
        request: Request<m::GenerateClientConfigurationRequest>,
    ) -> Result<Response<m::GenerateClientConfigurationResponse>, Status> {
        super::client_config::generate(self, request.into_inner()).map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_modes_are_gos() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
        let md = |p: &Path| std::fs::symlink_metadata(p).unwrap();
        assert_eq!(go_file_mode(&md(&f)), 0o640);
        assert_eq!(go_file_mode(&md(dir.path())) >> 31, 1);
        assert_eq!(go_file_mode(&md(&dir.path().join("l"))) & (1 << 27), 1 << 27);
        assert_eq!(go_file_mode(&md(Path::new("/dev/null"))) & ((1 << 26) | (1 << 21)), (1 << 26) | (1 << 21));
    }

    #[test]
    fn walks_root_first_to_the_depth_asked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/c"), "").unwrap();
        std::fs::write(dir.path().join("z"), "").unwrap();
        let run = |depth, types: &[i32]| {
            let mut out = Vec::new();
            walk(dir.path(), depth, types, &mut |i| {
                out.push(i.relative_name);
                Ok(())
            });
            out
        };
        assert_eq!(run(1, &[]), vec![".", "a", "z"]);
        assert_eq!(run(0, &[]), vec![".", "a", "a/b", "a/b/c", "z"]);
        assert_eq!(run(0, &[m::list_request::Type::Regular as i32]), vec!["a/b/c", "z"]);
    }
}

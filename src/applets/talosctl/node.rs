//! The talosctl commands that call `MachineService` (and `State` for health and patch): one
//! call per target node, replies printed with the node they came from.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use super::output::{Errors, Table, si_bytes};
use super::{Cli, Command};
use crate::client::api::{Session, Target, status_line};
use crate::proto::machine::{self as m, apply_configuration_request::Mode};

#[derive(Debug, clap::Args)]
pub struct VersionArgs {
    /// Print only the client's version.
    #[arg(long)]
    client: bool,
    /// Print the short form.
    #[arg(long)]
    short: bool,
}

/// How an apply goes: shared by apply-config, patch and edit.
#[derive(Debug, Clone, clap::Args)]
pub struct ApplyFlags {
    /// auto, no-reboot, reboot, staged or try.
    #[arg(short = 'm', long, default_value = "auto")]
    mode: String,
    /// Show what would change, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// How long a `--mode try` configuration stays before it is rolled back.
    #[arg(long, default_value = "1m", value_parser = super::parse_duration)]
    timeout: Duration,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The machine configuration file.
    #[arg(short = 'f', long)]
    file: std::path::PathBuf,
    /// Patches applied to the file first: `@file.yaml` or inline YAML/JSON (repeatable).
    #[arg(short = 'p', long)]
    config_patch: Vec<String>,
    #[command(flatten)]
    apply: ApplyFlags,
}

#[derive(Debug, clap::Args)]
pub struct PatchArgs {
    /// What to patch: `machineconfig` (or `mc`).
    resource: String,
    /// The patch: `@file.yaml` or inline YAML/JSON (repeatable).
    #[arg(short = 'p', long = "patch", required = true)]
    patches: Vec<String>,
    #[command(flatten)]
    apply: ApplyFlags,
}

#[derive(Debug, clap::Args)]
pub struct EditArgs {
    /// What to edit: `machineconfig` (or `mc`).
    resource: String,
    #[command(flatten)]
    apply: ApplyFlags,
}

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The service (`machined`, `apid`, `trustd`, …).
    service: String,
    /// Keep streaming new lines.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Only the last N lines (-1: all).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    tail: i32,
}

#[derive(Debug, clap::Args)]
pub struct DmesgArgs {
    /// Keep streaming new messages.
    #[arg(short = 'f', long)]
    follow: bool,
    /// With --follow: only new messages.
    #[arg(long)]
    tail: bool,
}

#[derive(Debug, clap::Args)]
pub struct ReadArgs {
    path: String,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The directory (default /).
    #[arg(default_value = "/")]
    path: String,
    /// Long listing: mode, owner, size, time.
    #[arg(short = 'l', long)]
    long: bool,
    /// Recurse.
    #[arg(short = 'r', long)]
    recurse: bool,
    /// Recursion depth (with -r; 0: unlimited).
    #[arg(short = 'd', long, default_value_t = 0)]
    depth: i32,
    /// Sizes in human units.
    #[arg(short = 'H', long)]
    humanize: bool,
}

#[derive(Debug, clap::Args)]
pub struct ProcessesArgs {
    /// Sort by `rss` or `cpu`.
    #[arg(short = 's', long, default_value = "rss")]
    sort: String,
}

#[derive(Debug, clap::Args)]
pub struct MemoryArgs {
    /// Every /proc/meminfo figure, not the summary.
    #[arg(short = 'v', long)]
    verbose: bool,
}

#[derive(Debug, clap::Args)]
pub struct ServiceArgs {
    /// The service (all of them when omitted).
    id: Option<String>,
    /// status (default), start, stop or restart.
    action: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RebootArgs {
    /// default or powercycle.
    #[arg(short = 'm', long, default_value = "default")]
    mode: String,
}

#[derive(Debug, clap::Args)]
pub struct ShutdownArgs {
    /// Skip stopping services gracefully.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, clap::Args)]
pub struct ResetArgs {
    /// Leave the cluster first (etcd; inert here).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    graceful: bool,
    /// Reboot afterwards instead of powering off.
    #[arg(long)]
    reboot: bool,
    /// Wipe only these system volumes (e.g. STATE,EPHEMERAL); without it the whole system
    /// disk is wiped (unless --wipe-mode user-disks).
    #[arg(long, value_delimiter = ',')]
    system_labels_to_wipe: Vec<String>,
    /// Also wipe these disks (device paths, e.g. /dev/vdb); never the system disk.
    #[arg(long, value_delimiter = ',')]
    user_disks_to_wipe: Vec<String>,
    /// What to wipe: all, system-disk or user-disks.
    #[arg(long, default_value = "all", value_parser = ["all", "system-disk", "user-disks"])]
    wipe_mode: String,
}

#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// Show the last N events first.
    #[arg(long, default_value_t = 0)]
    tail: i32,
    /// Start after this event id.
    #[arg(long)]
    since: Option<String>,
    /// Only events of this actor id.
    #[arg(long)]
    actor_id: Option<String>,
    /// Stop after this long (0: follow until interrupted).
    #[arg(long, default_value = "0s", value_parser = super::parse_duration)]
    duration: Duration,
}

#[derive(Debug, clap::Args)]
pub struct TimeArgs {
    /// Ask this time server (host or address, optional :port) instead of the node's first.
    #[arg(short = 'c', long)]
    check: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct HealthArgs {
    /// How long to wait for every node to be healthy.
    #[arg(long, default_value = "5m", value_parser = super::parse_duration)]
    wait_timeout: Duration,
}

pub fn run(cli: &Cli, command: Command) -> ExitCode {
    match command {
        Command::Version(a) => version(cli, &a),
        Command::Get(a) => super::get::run(cli, &a),
        Command::ApplyConfig(a) => apply_config(cli, &a),
        Command::Patch(a) => patch(cli, &a),
        Command::Edit(a) => edit(cli, &a),
        Command::Logs(a) => streams(cli, "logs", Stream::Logs(a)),
        Command::Dmesg(a) => streams(cli, "dmesg", Stream::Dmesg(a)),
        Command::Read(a) => streams(cli, "read", Stream::Read(a)),
        Command::List(a) => list(cli, &a),
        Command::Processes(a) => processes(cli, &a),
        Command::Memory(a) => memory(cli, &a),
        Command::Mounts => mounts(cli),
        Command::Service(a) => service(cli, &a),
        Command::Reboot(a) => power(cli, Power::Reboot(a)),
        Command::Shutdown(a) => power(cli, Power::Shutdown(a)),
        Command::Reset(a) => power(cli, Power::Reset(a)),
        Command::Events(a) => events(cli, &a),
        Command::Health(a) => health(cli, &a),
        Command::Time(a) => time(cli, &a),
        Command::Cluster { .. }
        | Command::Gen { .. }
        | Command::Config { .. }
        | Command::Validate(_)
        | Command::Meta { .. }
        | Command::Wipe { .. }
        | Command::Unlock(_)
        | Command::Upgrade(_)
        | Command::Rollback
        | Command::KmsLaunch(_)
        | Command::Completion { .. } => ExitCode::FAILURE,
    }
}

/// Opens the session and runs `each` for every target, reporting its errors by node.
pub(super) fn per_node<F, Fut>(cli: &Cli, command: &'static str, each: F) -> ExitCode
where
    F: Fn(std::rc::Rc<Session>, Target) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    super::block_on(async move {
        let mut errors = Errors::new(command);
        let session = match Session::open(&cli.session()).await {
            Ok(s) => std::rc::Rc::new(s),
            Err(e) => {
                errors.general(e);
                return errors.exit_code();
            }
        };
        for target in session.targets() {
            let label = target.label(&session).to_string();
            if let Err(e) = each(session.clone(), target).await {
                errors.node(&label, e);
            }
        }
        errors.exit_code()
    })
}

pub(super) fn st(s: tonic::Status) -> String {
    status_line(&s)
}

fn version(cli: &Cli, a: &VersionArgs) -> ExitCode {
    if a.short {
        println!("Client v{}", crate::version::VERSION);
    } else {
        println!("Client:");
        println!("\tTag:         v{}", crate::version::VERSION);
        println!("\tSHA:         {}", crate::version::GIT_COMMIT);
        println!("\tOS/Arch:     {}/{}", std::env::consts::OS, go_arch());
    }
    if a.client {
        return ExitCode::SUCCESS;
    }
    let short = a.short;
    per_node(cli, "version", |session, target| async move {
        let reply = session.machine().version(session.request(&target, ())).await.map_err(st)?.into_inner();
        for msg in reply.messages {
            let v = msg.version.unwrap_or_default();
            if short {
                println!("Server {}: {}", target.label(&session), v.tag);
                continue;
            }
            println!("Server:");
            println!("\tNODE:        {}", target.label(&session));
            println!("\tTag:         {}", v.tag);
            println!("\tSHA:         {}", v.sha);
            println!("\tBuilt:       {}", v.built);
            println!("\tGo version:  {}", v.go_version);
            println!("\tOS/Arch:     {}/{}", v.os, v.arch);
            if let Some(p) = msg.platform {
                println!("\tPlatform:    {}", p.name);
            }
            if msg.features.is_some_and(|f| f.rbac) {
                println!("\tEnabled:     RBAC");
            }
        }
        Ok(())
    })
}

fn apply_mode(mode: &str) -> Result<Mode, String> {
    Ok(match mode {
        "auto" => Mode::Auto,
        "no-reboot" => Mode::NoReboot,
        #[allow(deprecated)]
        "reboot" => Mode::Reboot,
        "staged" => Mode::Staged,
        "try" => Mode::Try,
        other => return Err(format!("--mode: unknown mode {other:?} (auto, no-reboot, reboot, staged, try)")),
    })
}

async fn apply_text(
    session: &Session,
    target: &Target,
    text: String,
    mode: Mode,
    dry_run: bool,
    timeout: Duration,
) -> Result<(), String> {
    let request = m::ApplyConfigurationRequest {
        data: text.into_bytes(),
        mode: mode as i32,
        dry_run,
        try_mode_timeout: (mode == Mode::Try).then(|| prost_types::Duration::try_from(timeout).unwrap_or_default()),
    };
    let reply = session.machine().apply_configuration(session.request(target, request)).await.map_err(st)?.into_inner();
    for msg in reply.messages {
        for w in &msg.warnings {
            eprintln!("WARNING: {}: {w}", target.label(session));
        }
        let details = msg.mode_details.trim_end();
        if !details.is_empty() {
            println!("{details}");
        }
    }
    Ok(())
}

fn apply_config(cli: &Cli, a: &ApplyArgs) -> ExitCode {
    let prepared = (|| {
        let mode = apply_mode(&a.apply.mode)?;
        let text = std::fs::read_to_string(&a.file).map_err(|e| format!("reading {}: {e}", a.file.display()))?;
        let text = super::generate::patched(&text, &a.config_patch, &a.file.display().to_string())?;
        Ok::<_, String>((mode, text))
    })();
    let (mode, text) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("talosctl apply-config: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (dry_run, timeout) = (a.apply.dry_run, a.apply.timeout);
    per_node(cli, "apply-config", |session, target| {
        let text = text.clone();
        async move { apply_text(&session, &target, text, mode, dry_run, timeout).await }
    })
}

fn patch(cli: &Cli, a: &PatchArgs) -> ExitCode {
    if !["machineconfig", "machineconfigs", "mc"].contains(&a.resource.to_lowercase().as_str()) {
        eprintln!("talosctl patch: only machineconfig can be patched, not {:?}", a.resource);
        return ExitCode::from(2);
    }
    let mode = match apply_mode(&a.apply.mode) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("talosctl patch: {e}");
            return ExitCode::FAILURE;
        }
    };
    let patches = a.patches.clone();
    let (dry_run, timeout) = (a.apply.dry_run, a.apply.timeout);
    per_node(cli, "patch", |session, target| {
        let patches = patches.clone();
        async move {
            let text = machine_config(&session, &target).await?;
            let patched = super::generate::patched(&text, &patches, "the node's machine configuration")?;
            apply_text(&session, &target, patched, mode, dry_run, timeout).await
        }
    })
}

/// The node's configuration in force, as text.
async fn machine_config(session: &Session, target: &Target) -> Result<String, String> {
    use crate::proto::cosi::resource as wire;
    let request = wire::GetRequest {
        namespace: "config".into(),
        r#type: "MachineConfigs.config.talos.dev".into(),
        id: "v1alpha1".into(),
        options: None,
    };
    let current = session.state().get(session.request(target, request)).await.map_err(st)?.into_inner();
    let text = current.resource.and_then(|r| r.spec).map(|s| s.yaml_spec).unwrap_or_default();
    if text.trim().is_empty() {
        return Err("the node has no machine configuration".into());
    }
    Ok(text)
}

const EDIT_HEADER: &str = "# Edit the machine configuration below; lines starting with '#' at the top are dropped.\n\
                           # Save and quit to apply it; quit without changes to leave it as it is.\n";

/// Runs `$VISUAL`, `$EDITOR` or `vi` on `path`, as a shell would (the variable may hold flags).
fn run_editor(path: &std::path::Path) -> Result<(), String> {
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|e| !e.is_empty())
        .or_else(|| std::env::var("EDITOR").ok().filter(|e| !e.is_empty()))
        .unwrap_or_else(|| "vi".to_string());
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("talosctl-edit")
        .arg(path)
        .status()
        .map_err(|e| format!("running the editor {editor:?}: {e}"))?;
    if !status.success() {
        return Err(format!("the editor {editor:?} failed ({status}); nothing applied"));
    }
    Ok(())
}

fn edit(cli: &Cli, a: &EditArgs) -> ExitCode {
    if !["machineconfig", "machineconfigs", "mc"].contains(&a.resource.to_lowercase().as_str()) {
        eprintln!("talosctl edit: only machineconfig can be edited, not {:?}", a.resource);
        return ExitCode::from(2);
    }
    let mode = match apply_mode(&a.apply.mode) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("talosctl edit: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (dry_run, timeout) = (a.apply.dry_run, a.apply.timeout);
    per_node(cli, "edit", |session, target| async move {
        let text = machine_config(&session, &target).await?;
        let file = tempfile_in_tmp(&target.label(&session).replace(['.', ':', '/'], "-"))?;
        super::generate::write_private(&file, &format!("{EDIT_HEADER}{text}"))?;
        run_editor(&file)?;
        let edited = std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
        let edited: String = {
            let mut lines = edited.lines().peekable();
            while lines.peek().is_some_and(|l| l.starts_with('#')) {
                lines.next();
            }
            lines.map(|l| format!("{l}\n")).collect()
        };
        if edited.trim() == text.trim() {
            let _ = std::fs::remove_file(&file);
            println!("{}: apply was skipped: no changes detected", target.label(&session));
            return Ok(());
        }
        match apply_text(&session, &target, edited, mode, dry_run, timeout).await {
            Ok(()) => {
                let _ = std::fs::remove_file(&file);
                Ok(())
            }
            Err(e) => Err(format!("{e} (your edit is kept in {})", file.display())),
        }
    })
}

/// A fresh file name under the temporary directory for one node's edit.
fn tempfile_in_tmp(label: &str) -> Result<std::path::PathBuf, String> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    Ok(std::env::temp_dir().join(format!("talosctl-edit-{label}-{}-{nanos}.yaml", std::process::id())))
}

enum Stream {
    Logs(LogsArgs),
    Dmesg(DmesgArgs),
    Read(ReadArgs),
}

/// Byte streams (logs, dmesg, read): printed as they come; with several nodes each line is
/// prefixed with its node.
fn streams(cli: &Cli, command: &'static str, what: Stream) -> ExitCode {
    let what = std::rc::Rc::new(what);
    let many = cli.nodes.len() > 1;
    per_node(cli, command, |session, target| {
        let what = what.clone();
        async move {
            let mut machine = session.machine();
            let mut stream = match &*what {
                Stream::Logs(a) => {
                    let request = m::LogsRequest {
                        namespace: "system".into(),
                        id: a.service.clone(),
                        driver: 0,
                        follow: a.follow,
                        tail_lines: a.tail,
                    };
                    machine.logs(session.request(&target, request)).await
                }
                Stream::Dmesg(a) => {
                    machine.dmesg(session.request(&target, m::DmesgRequest { follow: a.follow, tail: a.tail })).await
                }
                Stream::Read(a) => {
                    machine.read(session.request(&target, m::ReadRequest { path: a.path.clone() })).await
                }
            }
            .map_err(st)?
            .into_inner();
            let label = target.label(&session).to_string();
            let mut partial = Vec::new();
            let mut out = std::io::stdout().lock();
            while let Some(chunk) = stream.message().await.map_err(st)? {
                if !many {
                    let _ = out.write_all(&chunk.bytes);
                    let _ = out.flush();
                    continue;
                }
                partial.extend_from_slice(&chunk.bytes);
                while let Some(end) = partial.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = partial.drain(..=end).collect();
                    let _ = write!(out, "{label}: {}", String::from_utf8_lossy(&line));
                }
                let _ = out.flush();
            }
            if !partial.is_empty() {
                let _ = writeln!(out, "{label}: {}", String::from_utf8_lossy(&partial));
            }
            Ok(())
        }
    })
}

fn go_mode_string(mode: u32) -> String {
    // Go's fs.FileMode.String(): type letters, then rwx.
    const TYPES: &[(u32, char)] = &[
        (1 << 31, 'd'),
        (1 << 30, 'a'),
        (1 << 29, 'l'),
        (1 << 28, 'T'),
        (1 << 27, 'L'),
        (1 << 26, 'D'),
        (1 << 25, 'p'),
        (1 << 24, 'S'),
        (1 << 23, 'u'),
        (1 << 22, 'g'),
        (1 << 21, 'c'),
        (1 << 20, 't'),
        (1 << 19, '?'),
    ];
    let mut s: String = TYPES.iter().filter(|(bit, _)| mode & bit != 0).map(|(_, c)| *c).collect();
    if s.is_empty() {
        s.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    s
}

fn list(cli: &Cli, a: &ListArgs) -> ExitCode {
    let (root, recurse, depth, long, human) = (a.path.clone(), a.recurse, a.depth, a.long, a.humanize);
    per_node(cli, "list", |session, target| {
        let root = root.clone();
        async move {
            let request = m::ListRequest {
                root,
                recurse,
                recursion_depth: if recurse { depth } else { 1 },
                types: Vec::new(),
                report_xattrs: false,
            };
            let mut stream = session.machine().list(session.request(&target, request)).await.map_err(st)?.into_inner();
            let label = target.label(&session).to_string();
            let mut table = if long {
                Table::new(["NODE", "MODE", "UID", "GID", "SIZE(B)", "LASTMOD", "NAME"])
            } else {
                Table::new(["NODE", "NAME"])
            };
            while let Some(f) = stream.message().await.map_err(st)? {
                if !f.error.is_empty() {
                    eprintln!("talosctl list: {label}: {}: {}", f.name, f.error);
                    continue;
                }
                let mut name = if f.relative_name.is_empty() { f.name.clone() } else { f.relative_name.clone() };
                if !f.link.is_empty() {
                    name = format!("{name} -> {}", f.link);
                }
                if long {
                    let size = if human { si_bytes(f.size.max(0) as u64) } else { f.size.to_string() };
                    let when = std::time::UNIX_EPOCH + Duration::from_secs(f.modified.max(0) as u64);
                    table.row([
                        label.clone(),
                        go_mode_string(f.mode),
                        f.uid.to_string(),
                        f.gid.to_string(),
                        size,
                        crate::cosi::timestamp::format(when),
                        name,
                    ]);
                } else {
                    table.row([label.clone(), name]);
                }
            }
            table.print();
            Ok(())
        }
    })
}

fn processes(cli: &Cli, a: &ProcessesArgs) -> ExitCode {
    let by_cpu = match a.sort.as_str() {
        "rss" => false,
        "cpu" => true,
        other => {
            eprintln!("talosctl processes: --sort: {other:?} is not rss or cpu");
            return ExitCode::from(2);
        }
    };
    per_node(cli, "processes", |session, target| async move {
        let reply = session.machine().processes(session.request(&target, ())).await.map_err(st)?.into_inner();
        let mut table =
            Table::new(["NODE", "PID", "STATE", "THREADS", "CPU-TIME", "VIRTMEM", "RESMEM", "LABEL", "COMMAND"]);
        for msg in reply.messages {
            let mut procs = msg.processes;
            if by_cpu {
                procs.sort_by(|a, b| b.cpu_time.total_cmp(&a.cpu_time));
            } else {
                procs.sort_by_key(|p| std::cmp::Reverse(p.resident_memory));
            }
            for p in procs {
                let command = if p.args.is_empty() { p.command.clone() } else { p.args.clone() };
                table.row([
                    target.label(&session).to_string(),
                    p.pid.to_string(),
                    p.state,
                    p.threads.to_string(),
                    format!("{:.2}", p.cpu_time),
                    si_bytes(p.virtual_memory),
                    si_bytes(p.resident_memory),
                    p.label,
                    command,
                ]);
            }
        }
        table.print();
        Ok(())
    })
}

fn memory(cli: &Cli, a: &MemoryArgs) -> ExitCode {
    let verbose = a.verbose;
    per_node(cli, "memory", |session, target| async move {
        let reply = session.machine().memory(session.request(&target, ())).await.map_err(st)?.into_inner();
        let mib = |kib: u64| (kib / 1024).to_string();
        for msg in reply.messages {
            let mi = msg.meminfo.unwrap_or_default();
            if verbose {
                println!("NODE: {}", target.label(&session));
                println!("{mi:#?}");
                continue;
            }
            let mut table = Table::new(["NODE", "TOTAL", "USED", "FREE", "SHARED", "BUFFERS", "CACHE", "AVAILABLE"]);
            let used = mi.memtotal.saturating_sub(mi.memfree + mi.cached + mi.buffers);
            table.row([
                target.label(&session).to_string(),
                mib(mi.memtotal),
                mib(used),
                mib(mi.memfree),
                mib(mi.shmem),
                mib(mi.buffers),
                mib(mi.cached),
                mib(mi.memavailable),
            ]);
            table.print();
        }
        Ok(())
    })
}

fn mounts(cli: &Cli) -> ExitCode {
    per_node(cli, "mounts", |session, target| async move {
        let reply = session.machine().mounts(session.request(&target, ())).await.map_err(st)?.into_inner();
        let mut table =
            Table::new(["NODE", "FILESYSTEM", "SIZE(GB)", "USED(GB)", "AVAILABLE(GB)", "PERCENT USED", "MOUNTED ON"]);
        let gb = |b: u64| format!("{:.2}", b as f64 / 1e9);
        for msg in reply.messages {
            for s in msg.stats {
                let used = s.size.saturating_sub(s.available);
                let pct =
                    if s.size == 0 { "-".to_string() } else { format!("{:.2}%", used as f64 * 100.0 / s.size as f64) };
                table.row([
                    target.label(&session).to_string(),
                    s.filesystem,
                    gb(s.size),
                    gb(used),
                    gb(s.available),
                    pct,
                    s.mounted_on,
                ]);
            }
        }
        table.print();
        Ok(())
    })
}

fn ts(t: &Option<prost_types::Timestamp>) -> String {
    t.as_ref()
        .and_then(|t| std::time::SystemTime::try_from(*t).ok())
        .map(crate::cosi::timestamp::format)
        .unwrap_or_default()
}

fn health_text(h: &Option<m::ServiceHealth>) -> &'static str {
    match h {
        Some(h) if h.unknown => "?",
        Some(h) if h.healthy => "OK",
        Some(_) => "Fail",
        None => "?",
    }
}

fn service(cli: &Cli, a: &ServiceArgs) -> ExitCode {
    let action = a.action.clone().unwrap_or_else(|| "status".into());
    if !["status", "start", "stop", "restart"].contains(&action.as_str()) {
        eprintln!("talosctl service: unknown action {action:?} (status, start, stop, restart)");
        return ExitCode::from(2);
    }
    let id = a.id.clone();
    per_node(cli, "service", |session, target| {
        let (id, action) = (id.clone(), action.clone());
        async move {
            let mut machine = session.machine();
            let label = target.label(&session).to_string();
            match (id, action.as_str()) {
                (Some(id), "start") => {
                    let r = machine.service_start(session.request(&target, m::ServiceStartRequest { id })).await;
                    r.map_err(st)?.into_inner().messages.into_iter().for_each(|m| println!("{label}: {}", m.resp));
                }
                (Some(id), "stop") => {
                    let r = machine.service_stop(session.request(&target, m::ServiceStopRequest { id })).await;
                    r.map_err(st)?.into_inner().messages.into_iter().for_each(|m| println!("{label}: {}", m.resp));
                }
                (Some(id), "restart") => {
                    let r = machine.service_restart(session.request(&target, m::ServiceRestartRequest { id })).await;
                    r.map_err(st)?.into_inner().messages.into_iter().for_each(|m| println!("{label}: {}", m.resp));
                }
                (None, "status") => {
                    let reply = machine.service_list(session.request(&target, ())).await.map_err(st)?.into_inner();
                    let mut table = Table::new(["NODE", "SERVICE", "STATE", "HEALTH", "LAST CHANGE", "LAST EVENT"]);
                    for msg in reply.messages {
                        for s in msg.services {
                            let last = s.events.as_ref().and_then(|e| e.events.last()).cloned();
                            table.row([
                                label.clone(),
                                s.id.clone(),
                                s.state.clone(),
                                health_text(&s.health).to_string(),
                                last.as_ref().map(|e| ts(&e.ts)).unwrap_or_default(),
                                last.map(|e| e.msg).unwrap_or_default(),
                            ]);
                        }
                    }
                    table.print();
                }
                (Some(id), _) => {
                    let reply = machine.service_list(session.request(&target, ())).await.map_err(st)?.into_inner();
                    let service = reply.messages.into_iter().flat_map(|m| m.services).find(|s| s.id == id);
                    let Some(s) = service else { return Err(format!("service {id:?} not found")) };
                    println!("NODE     {label}");
                    println!("ID       {}", s.id);
                    println!("STATE    {}", s.state);
                    println!("HEALTH   {}", health_text(&s.health));
                    println!("EVENTS");
                    for e in s.events.map(|e| e.events).unwrap_or_default() {
                        println!("         [{}]: {} ({})", e.state, e.msg, ts(&e.ts));
                    }
                }
                (None, other) => return Err(format!("{other}: which service? (talosctl service ID {other})")),
            }
            Ok(())
        }
    })
}

enum Power {
    Reboot(RebootArgs),
    Shutdown(ShutdownArgs),
    Reset(ResetArgs),
}

fn power(cli: &Cli, what: Power) -> ExitCode {
    let command = match &what {
        Power::Reboot(_) => "reboot",
        Power::Shutdown(_) => "shutdown",
        Power::Reset(_) => "reset",
    };
    if let Power::Reboot(a) = &what
        && !["default", "powercycle"].contains(&a.mode.as_str())
    {
        eprintln!("talosctl reboot: --mode: {:?} is not default or powercycle", a.mode);
        return ExitCode::from(2);
    }
    let what = std::rc::Rc::new(what);
    per_node(cli, command, |session, target| {
        let what = what.clone();
        async move {
            let mut machine = session.machine();
            let label = target.label(&session).to_string();
            let actor = match &*what {
                Power::Reboot(a) => {
                    let mode = if a.mode == "powercycle" { 1 } else { 0 };
                    let r = machine.reboot(session.request(&target, m::RebootRequest { mode })).await.map_err(st)?;
                    r.into_inner().messages.into_iter().map(|m| m.actor_id).collect::<Vec<_>>()
                }
                Power::Shutdown(a) => {
                    let r = machine.shutdown(session.request(&target, m::ShutdownRequest { force: a.force }));
                    r.await.map_err(st)?.into_inner().messages.into_iter().map(|m| m.actor_id).collect()
                }
                Power::Reset(a) => {
                    let mode = match a.wipe_mode.as_str() {
                        "system-disk" => m::reset_request::WipeMode::SystemDisk,
                        "user-disks" => m::reset_request::WipeMode::UserDisks,
                        _ => m::reset_request::WipeMode::All,
                    };
                    let request = m::ResetRequest {
                        graceful: a.graceful,
                        reboot: a.reboot,
                        system_partitions_to_wipe: a
                            .system_labels_to_wipe
                            .iter()
                            .map(|label| m::ResetPartitionSpec { label: label.clone(), wipe: true })
                            .collect(),
                        user_disks_to_wipe: a.user_disks_to_wipe.clone(),
                        mode: mode as i32,
                    };
                    let r = machine.reset(session.request(&target, request)).await.map_err(st)?;
                    r.into_inner().messages.into_iter().map(|m| m.actor_id).collect()
                }
            };
            println!("{label}: {command} requested (actor id {})", actor.join(","));
            Ok(())
        }
    })
}

/// One event as a table row: its type and what it says.
fn describe(event: &m::Event) -> (String, String) {
    use prost::Message;
    let Some(any) = &event.data else { return (String::new(), String::new()) };
    let short = any.type_url.rsplit('/').next().unwrap_or(&any.type_url).to_string();
    let text = match short.as_str() {
        "machine.ServiceStateEvent" => m::ServiceStateEvent::decode(any.value.as_slice())
            .map(|e| {
                let action = m::service_state_event::Action::try_from(e.action)
                    .map(|a| a.as_str_name().to_string())
                    .unwrap_or_default();
                format!("{}: {action}: {}", e.service, e.message)
            })
            .unwrap_or_default(),
        "machine.MachineStatusEvent" => m::MachineStatusEvent::decode(any.value.as_slice())
            .map(|e| {
                let stage = m::machine_status_event::MachineStage::try_from(e.stage)
                    .map(|s| s.as_str_name().to_string())
                    .unwrap_or_default();
                let ready = e.status.is_some_and(|s| s.ready);
                format!("stage: {stage} ready: {ready}")
            })
            .unwrap_or_default(),
        "machine.SequenceEvent" => m::SequenceEvent::decode(any.value.as_slice())
            .map(|e| format!("{}: {:?}", e.sequence, e.action))
            .unwrap_or_default(),
        "machine.ConfigValidationErrorEvent" => {
            m::ConfigValidationErrorEvent::decode(any.value.as_slice()).map(|e| e.error).unwrap_or_default()
        }
        _ => String::new(),
    };
    (short, text)
}

fn events(cli: &Cli, a: &EventsArgs) -> ExitCode {
    let request = m::EventsRequest {
        tail_events: a.tail,
        tail_id: a.since.clone().unwrap_or_default(),
        tail_seconds: 0,
        with_actor_id: a.actor_id.clone().unwrap_or_default(),
    };
    let duration = a.duration;
    super::block_on(async move {
        let mut errors = Errors::new("events");
        let session = match Session::open(&cli.session()).await {
            Ok(s) => s,
            Err(e) => {
                errors.general(e);
                return errors.exit_code();
            }
        };
        let mut streams = futures::stream::SelectAll::new();
        for target in session.targets() {
            let label = target.label(&session).to_string();
            match session.machine().events(session.request(&target, request.clone())).await {
                Ok(s) => streams.push(futures::StreamExt::map(s.into_inner(), move |e| (label.clone(), e))),
                Err(status) => errors.node(&label, st(status)),
            }
        }
        println!("NODE   ID   EVENT   ACTOR   SOURCE   MESSAGE");
        let deadline = (!duration.is_zero()).then(|| tokio::time::Instant::now() + duration);
        loop {
            let next = futures::StreamExt::next(&mut streams);
            let item = match deadline {
                Some(d) => match tokio::time::timeout_at(d, next).await {
                    Ok(item) => item,
                    Err(_) => break,
                },
                None => next.await,
            };
            let Some((label, item)) = item else { break };
            match item {
                Ok(event) => {
                    let (kind, text) = describe(&event);
                    println!("{label}   {}   {kind}   {}   {label}   {text}", event.id, event.actor_id);
                    let _ = std::io::stdout().flush();
                }
                Err(status) => errors.node(&label, st(status)),
            }
        }
        errors.exit_code()
    })
}

fn generate_request(roles: &[&str], ttl: Duration) -> m::GenerateClientConfigurationRequest {
    m::GenerateClientConfigurationRequest {
        roles: roles.iter().map(|r| r.to_string()).collect(),
        crt_ttl: prost_types::Duration::try_from(ttl).ok(),
    }
}

/// `config new` without a bundle: a talosconfig minted by the (first) node.
pub fn generate_client_configuration(cli: &Cli, roles: &[&str], ttl: Duration) -> Result<String, String> {
    let request = generate_request(roles, ttl);
    let mut out = Err("no reply".to_string());
    let result = &mut out;
    let code = super::block_on(async {
        let session = match Session::open(&cli.session()).await {
            Ok(s) => s,
            Err(e) => {
                *result = Err(e.to_string());
                return ExitCode::FAILURE;
            }
        };
        let target = session.targets().remove(0);
        let reply = session.machine().generate_client_configuration(session.request(&target, request)).await;
        *result = match reply {
            Ok(r) => r
                .into_inner()
                .messages
                .into_iter()
                .next()
                .map(|m| String::from_utf8_lossy(&m.talosconfig).into_owned())
                .ok_or_else(|| "the node sent no configuration".to_string()),
            Err(s) => Err(format!("{}: {}", target.label(&session), st(s))),
        };
        ExitCode::SUCCESS
    });
    let _ = code;
    out
}

/// One health check of one node: what is not yet right, or nothing.
async fn unhealthy(session: &Session, target: &Target) -> Result<Vec<String>, String> {
    use crate::proto::cosi::resource as wire;
    session.machine().version(session.request(target, ())).await.map_err(st)?;
    let mut problems = Vec::new();
    let request = wire::GetRequest {
        namespace: "runtime".into(),
        r#type: "MachineStatuses.runtime.talos.dev".into(),
        id: "machine".into(),
        options: None,
    };
    let status = session.state().get(session.request(target, request)).await.map_err(st)?.into_inner();
    let yaml = status.resource.and_then(|r| r.spec).map(|s| s.yaml_spec).unwrap_or_default();
    let spec: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap_or_default();
    let stage = spec["stage"].as_str().unwrap_or("unknown");
    if stage != "running" {
        problems.push(format!("stage is {stage}, not running"));
    }
    if spec["status"]["ready"].as_bool() != Some(true) {
        let unmet: Vec<String> = spec["status"]["unmetConditions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| format!("{}: {}", c["name"].as_str().unwrap_or(""), c["reason"].as_str().unwrap_or("")))
                    .collect()
            })
            .unwrap_or_default();
        problems.push(format!("not ready ({})", unmet.join("; ")));
    }
    let request = wire::GetRequest {
        namespace: "runtime".into(),
        r#type: "TimeStatuses.v1alpha1.talos.dev".into(),
        id: "node".into(),
        options: None,
    };
    match session.state().get(session.request(target, request)).await {
        Ok(time) => {
            let yaml = time.into_inner().resource.and_then(|r| r.spec).map(|s| s.yaml_spec).unwrap_or_default();
            let spec: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap_or_default();
            if spec["synced"].as_bool() != Some(true) {
                problems.push("time is not in sync yet (TimeStatus)".to_string());
            }
        }
        Err(s) if s.code() == tonic::Code::NotFound => {
            problems.push("time sync has not reported yet (no TimeStatus)".to_string());
        }
        Err(s) => return Err(st(s)),
    }
    let services = session.machine().service_list(session.request(target, ())).await.map_err(st)?.into_inner();
    for s in services.messages.into_iter().flat_map(|m| m.services) {
        if s.state != "Running" && s.state != "Finished" {
            problems.push(format!("service {} is {}", s.id, s.state));
        } else if s.health.as_ref().is_some_and(|h| !h.unknown && !h.healthy) {
            problems.push(format!("service {} is unhealthy", s.id));
        }
    }
    Ok(problems)
}

fn health(cli: &Cli, a: &HealthArgs) -> ExitCode {
    let timeout = a.wait_timeout;
    super::block_on(async move {
        let mut errors = Errors::new("health");
        let deadline = tokio::time::Instant::now() + timeout;
        let session = loop {
            match Session::open(&cli.session()).await {
                Ok(s) => break s,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    errors.general(e);
                    return errors.exit_code();
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        };
        for target in session.targets() {
            let label = target.label(&session).to_string();
            println!("waiting for {label} to be running, its services up and its time in sync");
            loop {
                let last = match unhealthy(&session, &target).await {
                    Ok(p) if p.is_empty() => {
                        println!("{label}: OK");
                        break;
                    }
                    Ok(p) => p.join("; "),
                    Err(e) => e,
                };
                if tokio::time::Instant::now() >= deadline {
                    errors.node(&label, last);
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        errors.exit_code()
    })
}

fn time(cli: &Cli, a: &TimeArgs) -> ExitCode {
    use crate::proto::time::TimeRequest;
    let check = a.check.clone();
    per_node(cli, "time", |session, target| {
        let check = check.clone();
        async move {
            let reply = match check {
                Some(server) => session.time().time_check(session.request(&target, TimeRequest { server })).await,
                None => session.time().time(session.request(&target, ())).await,
            }
            .map_err(st)?
            .into_inner();
            let mut table = Table::new(["NODE", "NTP-SERVER", "NODE-TIME", "NTP-SERVER-TIME", "OFFSET"]);
            for msg in reply.messages {
                let (local, remote) = (msg.localtime.unwrap_or_default(), msg.remotetime.unwrap_or_default());
                table.row([
                    target.label(&session).to_string(),
                    msg.server,
                    rfc3339(&local),
                    rfc3339(&remote),
                    offset_text(&local, &remote),
                ]);
            }
            table.print();
            Ok(())
        }
    })
}

/// A protobuf timestamp as RFC 3339 UTC, to the millisecond.
fn rfc3339(t: &prost_types::Timestamp) -> String {
    let millis = u32::try_from(t.nanos).unwrap_or(0) / 1_000_000 * 1_000_000;
    let at = std::time::UNIX_EPOCH + Duration::new(u64::try_from(t.seconds).unwrap_or(0), millis);
    crate::cosi::timestamp::format(at)
}

/// The server's time minus the node's, signed, in seconds.
fn offset_text(local: &prost_types::Timestamp, remote: &prost_types::Timestamp) -> String {
    let nanos = |t: &prost_types::Timestamp| i128::from(t.seconds) * 1_000_000_000 + i128::from(t.nanos);
    let d = nanos(remote) - nanos(local);
    format!(
        "{}{}.{:06}s",
        if d < 0 { "-" } else { "+" },
        d.unsigned_abs() / 1_000_000_000,
        d.unsigned_abs() % 1_000_000_000 / 1000
    )
}

/// The machine's architecture in Go's naming, as Talos reports it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::go_mode_string;

    #[test]
    fn times_print_as_rfc3339_and_offsets_signed() {
        let t = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
        assert_eq!(super::rfc3339(&t(0, 0)), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(&t(1_795_000_000, 123_456_789)), "2026-11-18T11:06:40.123Z");
        assert_eq!(super::rfc3339(&t(951_782_400, 999_999)), "2000-02-29T00:00:00Z");
        assert_eq!(super::offset_text(&t(10, 0), &t(10, 12_345_678)), "+0.012345s");
        assert_eq!(super::offset_text(&t(10, 0), &t(8, 500_000_000)), "-1.500000s");
    }

    #[test]
    fn file_modes_print_as_go_does() {
        assert_eq!(go_mode_string(0o644), "-rw-r--r--");
        assert_eq!(go_mode_string((1 << 31) | 0o755), "drwxr-xr-x");
        assert_eq!(go_mode_string((1 << 29) | 0o777), "Lrwxrwxrwx".replacen('L', "l", 1));
    }
}

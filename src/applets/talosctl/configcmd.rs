//! `talosctl config`: the talosconfig's endpoints, nodes and contexts, and new client configs
//! (from a node with GenerateClientConfiguration, or offline from the secrets bundle).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Subcommand;

use super::Cli;
use super::output::Table;
use crate::client::config::{Config, ConfigPath, Context, Lookup};
use crate::pki::RoleSet;

/// How long a client certificate made by `config new` is valid unless told (Talos: one year).
const DEFAULT_CRT_TTL: &str = "8760h";

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Set the current context's endpoints.
    #[command(alias = "endpoints")]
    Endpoint { endpoints: Vec<String> },
    /// Set the current context's nodes.
    #[command(alias = "nodes")]
    Node { nodes: Vec<String> },
    /// Choose the current context.
    #[command(alias = "use-context")]
    Context { name: String },
    /// List the contexts.
    #[command(alias = "get-contexts")]
    Contexts,
    /// Merge another talosconfig into this one (clashing context names get a suffix).
    Merge { file: PathBuf },
    /// Show the current context.
    Info,
    /// Add a context from a CA, a client certificate and its key (PEM files).
    Add {
        name: String,
        #[arg(long)]
        ca: PathBuf,
        #[arg(long)]
        crt: PathBuf,
        #[arg(long)]
        key: PathBuf,
    },
    /// Remove a context.
    Remove { name: String },
    /// Write a new talosconfig with a client certificate for the roles given: minted by the
    /// node (GenerateClientConfiguration), or offline with --secrets.
    New {
        /// Where to write it.
        #[arg(default_value = "talosconfig")]
        path: PathBuf,
        /// The certificate's roles.
        #[arg(long, value_delimiter = ',', default_value = "os:admin")]
        roles: Vec<String>,
        /// The certificate's lifetime.
        #[arg(long, default_value = DEFAULT_CRT_TTL, value_parser = super::parse_duration)]
        crt_ttl: Duration,
        /// Mint offline from this secrets bundle instead of asking a node.
        #[arg(long)]
        secrets: Option<PathBuf>,
        /// The cluster's name, for the context (offline only).
        #[arg(long, default_value = "talos-default")]
        cluster: String,
    },
}

pub fn run(cli: &Cli, command: ConfigCommand) -> ExitCode {
    let result = match command {
        ConfigCommand::New { path, roles, crt_ttl, secrets, cluster } => {
            new(cli, &path, &roles, crt_ttl, secrets.as_deref(), &cluster)
        }
        other => edit(cli, other),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("talosctl config: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The talosconfig `--talosconfig` or the lookup names, empty when it does not exist yet, with
/// where it is saved.
pub(crate) fn open(cli: &Cli) -> Result<(Config, ConfigPath), String> {
    match &cli.talosconfig {
        Some(path) => {
            let config = if path.exists() { Config::load(path).map_err(|e| e.to_string())? } else { Config::default() };
            Ok((config, ConfigPath { path: path.clone(), writable: true }))
        }
        None => {
            let lookup = Lookup::from_env();
            match Config::load_default(&lookup) {
                Ok(found) => Ok(found),
                Err(crate::client::config::ClientConfigError::Read { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    Ok((Config::default(), lookup.find().map_err(|e| e.to_string())?))
                }
                Err(e) => Err(e.to_string()),
            }
        }
    }
}

fn edit(cli: &Cli, command: ConfigCommand) -> Result<(), String> {
    let (mut config, target) = open(cli)?;
    let save = |config: &Config| config.save_to(&target).map_err(|e| e.to_string());
    match command {
        ConfigCommand::Endpoint { endpoints } => {
            config.set_endpoints(endpoints).map_err(|e| e.to_string())?;
            save(&config)
        }
        ConfigCommand::Node { nodes } => {
            config.set_nodes(nodes).map_err(|e| e.to_string())?;
            save(&config)
        }
        ConfigCommand::Context { name } => {
            config.set_current(&name).map_err(|e| e.to_string())?;
            save(&config)
        }
        ConfigCommand::Contexts => {
            let mut table = Table::new(["CURRENT", "NAME", "ENDPOINTS", "NODES"]);
            for (name, ctx) in &config.contexts {
                let current = if *name == config.context { "*" } else { "" };
                table.row([current.to_string(), name.clone(), ctx.endpoints.join(","), ctx.nodes.join(",")]);
            }
            table.print();
            Ok(())
        }
        ConfigCommand::Merge { file } => {
            let other = Config::load(&file).map_err(|e| e.to_string())?;
            for rename in config.merge(other) {
                eprintln!("renamed talosconfig context {:?} -> {:?}", rename.from, rename.to);
            }
            save(&config)
        }
        ConfigCommand::Info => {
            let (name, ctx) = config.current().map_err(|e| e.to_string())?;
            let creds = config.credentials(name).map_err(|e| e.to_string())?;
            println!("Current context:     {name}");
            println!("Nodes:               {}", none_if_empty(&ctx.nodes));
            println!("Endpoints:           {}", none_if_empty(&ctx.endpoints));
            if let Some(identity) = creds.identity {
                let info = crate::pki::inspect_pem(&identity.crt_pem).map_err(|e| e.to_string())?;
                println!("Roles:               {}", none_if_empty(&info.organizations));
                println!("Certificate expires: {}", expiry(info.not_after));
            }
            Ok(())
        }
        ConfigCommand::Add { name, ca, crt, key } => {
            let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()));
            let b64 = |bytes: Vec<u8>| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes);
            let context =
                Context { ca: b64(read(&ca)?), crt: b64(read(&crt)?), key: b64(read(&key)?), ..Default::default() };
            config.contexts.insert(name.clone(), context);
            if config.context.is_empty() {
                config.context = name;
            }
            save(&config)
        }
        ConfigCommand::Remove { name } => {
            if config.contexts.remove(&name).is_none() {
                return Err(format!("context {name:?} not found"));
            }
            if config.context == name {
                config.context.clear();
            }
            save(&config)
        }
        ConfigCommand::New { .. } => Ok(()),
    }
}

fn none_if_empty<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        "not defined".to_string()
    } else {
        items.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(", ")
    }
}

fn expiry(not_after: SystemTime) -> String {
    let when = crate::cosi::timestamp::format(not_after);
    match not_after.duration_since(SystemTime::now()) {
        Ok(left) => format!("{} from now ({when})", rough(left)),
        Err(_) => format!("EXPIRED ({when})"),
    }
}

fn rough(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s} seconds"),
        120..7200 => format!("{} minutes", s / 60),
        7200..172_800 => format!("{} hours", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

fn new(
    cli: &Cli,
    path: &std::path::Path,
    roles: &[String],
    ttl: Duration,
    secrets: Option<&std::path::Path>,
    cluster: &str,
) -> Result<(), String> {
    let (set, unknown) = RoleSet::parse(roles);
    if !unknown.is_empty() {
        return Err(format!(
            "--roles: unknown role(s) {} (os:admin, os:operator, os:reader, os:etcd:backup)",
            unknown.join(", ")
        ));
    }
    if set.is_empty() {
        return Err("--roles: at least one role is needed".to_string());
    }
    let text = match secrets {
        Some(bundle) => {
            let bundle = super::generate::read_bundle(bundle)?;
            let endpoints = cli.endpoints.clone();
            let names = set.strings();
            let context = match names.as_slice() {
                [one] => format!("{}@{cluster}", one.trim_start_matches("os:")),
                _ => cluster.to_string(),
            };
            let mut config = Config::from_bundle(&bundle, &context, &set, &endpoints, ttl, SystemTime::now())
                .map_err(|e| e.to_string())?;
            if !cli.nodes.is_empty() {
                config.set_nodes(cli.nodes.clone()).map_err(|e| e.to_string())?;
            }
            config.to_yaml()
        }
        None => super::config_new::generate_client_configuration(cli, &set.strings(), ttl)?,
    };
    super::generate::write_private(path, &text)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

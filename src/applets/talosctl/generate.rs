//! `talosctl gen secrets` and `talosctl gen config`: offline, from a secrets bundle.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use clap::Subcommand;

use crate::config::generate::{GenerateOptions, generate};
use crate::pki::SecretsBundle;

/// The Kubernetes version `gen config` writes into the (inert) cluster section by default.
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.34.1";

#[derive(Debug, Subcommand)]
pub enum GenCommand {
    /// Generate a secrets bundle (the cluster's CAs and tokens).
    Secrets {
        /// Where to write it.
        #[arg(short = 'o', long, default_value = "secrets.yaml")]
        output_file: PathBuf,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Generate controlplane.yaml, worker.yaml and a talosconfig for a cluster.
    Config(Box<ConfigArgs>),
}

/// `--config-patch`, `--config-patch-control-plane`, `--config-patch-worker`: for `gen config`
/// and `cluster create`.
#[derive(Debug, clap::Args)]
pub struct ConfigPatchArgs {
    /// A patch for every machine config: `@file.yaml` or inline YAML/JSON (repeatable).
    #[arg(long)]
    pub config_patch: Vec<String>,
    /// A patch for the control planes' config only.
    #[arg(long)]
    pub config_patch_control_plane: Vec<String>,
    /// A patch for the workers' config only.
    #[arg(long)]
    pub config_patch_worker: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// The cluster's name.
    cluster_name: String,
    /// The cluster endpoint (`https://<address>:6443`).
    cluster_endpoint: String,
    /// Use this secrets bundle instead of generating one.
    #[arg(long)]
    with_secrets: Option<PathBuf>,
    /// Directory to write the files into.
    #[arg(short = 'o', long, default_value = ".")]
    output: PathBuf,
    /// Which files to write: controlplane, worker, talosconfig.
    #[arg(short = 't', long, value_delimiter = ',', default_value = "controlplane,worker,talosconfig")]
    output_types: Vec<String>,
    #[command(flatten)]
    patches: ConfigPatchArgs,
    /// The disk to install to.
    #[arg(long)]
    install_disk: Option<String>,
    /// The installer image.
    #[arg(long)]
    install_image: Option<String>,
    /// Extra names and addresses for the API certificates.
    #[arg(long, value_delimiter = ',')]
    additional_sans: Vec<String>,
    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    dns_domain: String,
    /// The Kubernetes version written into the (inert) cluster section.
    #[arg(long, default_value = DEFAULT_KUBERNETES_VERSION)]
    kubernetes_version: String,
    /// Overwrite existing files.
    #[arg(long)]
    force: bool,
}

impl GenCommand {
    pub fn run(self) -> ExitCode {
        let result = match self {
            GenCommand::Secrets { output_file, force } => gen_secrets(&output_file, force),
            GenCommand::Config(args) => gen_config(&args),
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("talosctl gen: {e}");
                ExitCode::FAILURE
            }
        }
    }
}

/// Refuses, before anything is written, a path that exists (unless `force`) or is a symbolic
/// link (always, dangling or not: a secret is never written through one).
fn refuse_existing(path: &Path, force: bool) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            Err(format!("{} is a symbolic link, which is never written through", path.display()))
        }
        Ok(_) if !force => Err(format!("{} already exists, use --force to overwrite", path.display())),
        _ => Ok(()),
    }
}

/// Writes `text` to `path`, mode 0600 whatever was there, never through a symbolic link (it
/// holds keys).
pub fn write_private(path: &Path, text: &str) -> Result<(), String> {
    crate::pki::write_private(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn gen_secrets(path: &Path, force: bool) -> Result<(), String> {
    refuse_existing(path, force)?;
    let bundle = SecretsBundle::generate(SystemTime::now()).map_err(|e| e.to_string())?;
    write_private(path, &bundle.to_yaml())?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Reads a secrets bundle file.
pub fn read_bundle(path: &Path) -> Result<SecretsBundle, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    SecretsBundle::from_yaml(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A `--config-patch` value: `@file` names a file, anything else is the patch itself.
pub fn read_patch(arg: &str) -> Result<crate::config::patch::Patch, String> {
    let (text, what) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|e| format!("--config-patch: reading {path}: {e}"))?,
            path.to_string(),
        ),
        None => (arg.to_string(), "--config-patch".to_string()),
    };
    crate::config::patch::Patch::parse(&text).map_err(|e| format!("{what}: {e}"))
}

/// `text` with `patches` applied, loaded and validated again.
pub fn patched(text: &str, patches: &[String], what: &str) -> Result<String, String> {
    if patches.is_empty() {
        return Ok(text.to_string());
    }
    let parsed = patches.iter().map(|p| read_patch(p)).collect::<Result<Vec<_>, _>>()?;
    let config = crate::config::load(text).map_err(|e| format!("{what}: {e}"))?.config;
    let config = crate::config::patch::apply(&config, &parsed).map_err(|e| format!("{what}: {e}"))?;
    crate::config::validate(&config).map_err(|e| format!("{what} after patching: {e}"))?;
    Ok(config.to_yaml())
}

fn gen_config(a: &ConfigArgs) -> Result<(), String> {
    for t in &a.output_types {
        if !["controlplane", "worker", "talosconfig"].contains(&t.as_str()) {
            return Err(format!("--output-types: unknown type {t:?} (controlplane, worker, talosconfig)"));
        }
    }
    let wants = |t: &str| a.output_types.iter().any(|o| o == t);
    let bundle = match &a.with_secrets {
        Some(path) => read_bundle(path)?,
        None => SecretsBundle::generate(SystemTime::now()).map_err(|e| e.to_string())?,
    };
    let mut options = GenerateOptions::new(&a.kubernetes_version);
    options.install_disk = a.install_disk.clone();
    options.install_image = a.install_image.clone();
    options.additional_sans = a.additional_sans.clone();
    options.dns_domain = a.dns_domain.clone();
    let generated = generate(&bundle, &a.cluster_name, &a.cluster_endpoint, &options, SystemTime::now())
        .map_err(|e| e.to_string())?;

    let files = [
        ("controlplane", "controlplane.yaml", &a.patches.config_patch_control_plane, &generated.controlplane),
        ("worker", "worker.yaml", &a.patches.config_patch_worker, &generated.worker),
    ];
    let mut outputs = Vec::new();
    for (kind, name, own, text) in files {
        if !wants(kind) {
            continue;
        }
        let patches: Vec<String> = a.patches.config_patch.iter().chain(own.iter()).cloned().collect();
        outputs.push((a.output.join(name), patched(text, &patches, name)?));
    }
    if wants("talosconfig") {
        outputs.push((a.output.join("talosconfig"), generated.talosconfig.to_yaml()));
    }
    for (path, _) in &outputs {
        refuse_existing(path, a.force)?;
    }
    std::fs::create_dir_all(&a.output).map_err(|e| format!("creating {}: {e}", a.output.display()))?;
    for (path, text) in outputs {
        write_private(&path, &text)?;
        eprintln!("generating {}", path.display());
    }
    Ok(())
}

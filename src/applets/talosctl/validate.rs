//! `talosctl validate`: checks a machine config file the way a node checks one it is given
//! (every document, volume documents included), without talking to any node.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// Talos's runtime modes; talosbox validates the same for all of them.
const MODES: &[&str] = &["cloud", "container", "metal", "metal-agent"];

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The path of the config file.
    #[arg(short = 'c', long = "config")]
    config: PathBuf,
    /// The mode to validate the config for (metal, cloud, container or metal-agent).
    #[arg(short = 'm', long = "mode")]
    mode: String,
    /// Treat validation warnings as errors.
    #[arg(long)]
    strict: bool,
}

pub fn run(args: &ValidateArgs) -> ExitCode {
    match validate(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn validate(args: &ValidateArgs) -> Result<(), String> {
    if !MODES.contains(&args.mode.as_str()) {
        return Err(format!("unknown runtime mode: {:?}", args.mode));
    }
    let path = args.config.display();
    let text = std::fs::read_to_string(&args.config).map_err(|e| format!("reading {path}: {e}"))?;
    let loaded = crate::config::load(&text).map_err(|e| format!("{path}: {e}"))?;
    let mut warnings = loaded.warnings;
    warnings.extend(crate::config::validate(&loaded.config).map_err(|e| format!("{path}: {e}"))?);
    if args.strict && !warnings.is_empty() {
        let all: Vec<String> = warnings.iter().map(|w| format!("warning: {w}")).collect();
        return Err(format!("{path}: {}", all.join("; ")));
    }
    for w in &warnings {
        eprintln!("WARNING: {w}");
    }
    println!("{path} is valid for {} mode", args.mode);
    Ok(())
}

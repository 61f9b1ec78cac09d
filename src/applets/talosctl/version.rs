//! `talosctl version [--client] [--short]`: the client's version, then each node's as its
//! MachineService reports it, in Talos's layout.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};

#[derive(Debug, clap::Args)]
pub struct VersionArgs {
    /// Print only the client's version.
    #[arg(long)]
    client: bool,
    /// Print the short form.
    #[arg(long)]
    short: bool,
}

pub fn run(cli: &Cli, a: &VersionArgs) -> ExitCode {
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

/// The machine's architecture in Go's naming, as Talos reports it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

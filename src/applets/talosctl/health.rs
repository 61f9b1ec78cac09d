//! `talosctl health [--wait-timeout D]`: waits until every node answers, is running and ready,
//! has its clock in sync and its services up, saying what is still wrong when time runs out.

use std::process::ExitCode;
use std::time::Duration;

use super::Cli;
use super::node::st;
use super::output::Errors;
use crate::client::api::{Session, Target};
use crate::client::health;

#[derive(Debug, clap::Args)]
pub struct HealthArgs {
    /// How long to wait for every node to be healthy.
    #[arg(long, default_value = "5m", value_parser = super::parse_duration)]
    wait_timeout: Duration,
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
    let spec = health::spec_of(status);
    problems.extend(health::stage_problem(&spec));
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
            let spec = health::spec_of(time.into_inner());
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
    problems.extend(health::service_problems(services));
    Ok(problems)
}

pub fn run(cli: &Cli, a: &HealthArgs) -> ExitCode {
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

//! `talosctl events [--tail N] [--since ID] [--actor-id ID] [--duration D]`: the nodes'
//! events, merged into one stream as they come, each described in one line.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use super::Cli;
use super::node::st;
use super::output::Errors;
use crate::client::api::Session;
use crate::proto::machine as m;

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
        "talosbox.trustd.CertificateEvent" => {
            crate::proto::talosbox::trustd::CertificateEvent::decode(any.value.as_slice())
                .map(|e| crate::api::audit::describe(&e))
                .unwrap_or_default()
        }
        _ => String::new(),
    };
    (short, text)
}

pub fn run(cli: &Cli, a: &EventsArgs) -> ExitCode {
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

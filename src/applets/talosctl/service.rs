//! `talosctl service [ID [start|stop|restart|status]]` (`services`): the nodes' services as a
//! table, one service's state and events, or a start, stop or restart of it.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};
use super::output::Table;
use crate::proto::machine as m;

#[derive(Debug, clap::Args)]
pub struct ServiceArgs {
    /// The service (all of them when omitted).
    id: Option<String>,
    /// status (default), start, stop or restart.
    action: Option<String>,
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

pub fn run(cli: &Cli, a: &ServiceArgs) -> ExitCode {
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

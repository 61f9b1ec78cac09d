//! The node's half of `talosctl config new`: without a secrets bundle, the first node mints
//! the talosconfig (MachineService.GenerateClientConfiguration) and sends it back.

use std::process::ExitCode;
use std::time::Duration;

use super::Cli;
use super::node::st;
use crate::client::api::Session;
use crate::proto::machine as m;

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

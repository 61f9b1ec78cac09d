//! What the commands that talk to nodes share: the loop that runs one call per target node and
//! reports its errors by node, the one-line form of a gRPC error, and the printer of the byte
//! streams (`logs`, `dmesg`, `read`). Each command lives in its own module; nothing here
//! knows one command from another.

use std::io::Write;
use std::process::ExitCode;

use super::Cli;
use super::output::Errors;
use crate::client::api::{Session, Target, status_line};
use crate::proto::common::Data;

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

/// Prints a byte stream (logs, dmesg, read) as it comes; with several nodes (`many`) each line
/// is prefixed with its node.
pub(super) async fn print_stream(
    session: &Session,
    target: &Target,
    many: bool,
    mut stream: tonic::Streaming<Data>,
) -> Result<(), String> {
    let label = target.label(session).to_string();
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

//! `talosctl unlock [--volume ID] [--passphrase-file FILE]`: hands a recovery passphrase to a
//! node for an encrypted volume no configured key opens — STATE, by default, whose failure
//! keeps the node in maintenance (then with `--insecure`). The passphrase is read from the
//! file, or from standard input (`-`, the default), never from the command line, where any
//! process could read it; one trailing newline is dropped. Prints the key slot that opened.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use zeroize::Zeroizing;

use super::Cli;
use super::node::{per_node, st};
use crate::proto::talosbox::volume as v;

#[derive(Debug, clap::Args)]
pub struct UnlockArgs {
    /// The volume to unlock.
    #[arg(long, default_value = "STATE")]
    volume: String,
    /// Where the passphrase is: a file, or - for standard input.
    #[arg(long, default_value = "-")]
    passphrase_file: PathBuf,
}

/// The passphrase in `text`, without one trailing newline (`\n` or `\r\n`).
fn trimmed(mut text: Zeroizing<Vec<u8>>) -> Zeroizing<Vec<u8>> {
    if text.ends_with(b"\n") {
        text.pop();
        if text.ends_with(b"\r") {
            text.pop();
        }
    }
    text
}

fn read_passphrase(path: &PathBuf) -> Result<Zeroizing<Vec<u8>>, String> {
    let mut text = Zeroizing::new(Vec::new());
    let read = if path.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut text)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut text))
    };
    read.map_err(|e| format!("reading the passphrase from {}: {e}", path.display()))?;
    let text = trimmed(text);
    if text.is_empty() {
        return Err(format!("--passphrase-file: {} holds no passphrase", path.display()));
    }
    Ok(text)
}

pub fn run(cli: &Cli, args: UnlockArgs) -> ExitCode {
    let passphrase = match read_passphrase(&args.passphrase_file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    per_node(cli, "unlock", |session, target| {
        let request = v::UnlockRequest { volume_id: args.volume.clone(), passphrase: passphrase.to_vec() };
        async move {
            let reply = session.volumes().unlock(session.request(&target, request)).await.map_err(st)?.into_inner();
            for m in reply.messages {
                println!("volume {} opened with key slot {}", m.volume_id, m.key_slot);
            }
            Ok(())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_trailing_newline_goes() {
        let t = |s: &[u8]| trimmed(Zeroizing::new(s.to_vec())).to_vec();
        assert_eq!(t(b"secret\n"), b"secret");
        assert_eq!(t(b"secret\r\n"), b"secret");
        assert_eq!(t(b"secret\n\n"), b"secret\n");
        assert_eq!(t(b" sp ace "), b" sp ace ");
    }
}

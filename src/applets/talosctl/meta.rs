//! `talosctl meta write <key> <value>` and `talosctl meta delete <key>`: set and remove keys of
//! the nodes' META partitions. Keys are read as Go reads integer literals (`0x0a`, `10`,
//! `012`, `0b1010`), as Talos's talosctl does; the value goes as the bytes given. Nothing is
//! printed on success, as in Talos.

use std::os::unix::ffi::OsStringExt;
use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};
use crate::proto::machine as m;

#[derive(Debug, clap::Subcommand)]
pub enum MetaCommand {
    /// Write a key-value pair to the META partition.
    Write {
        /// The key: 0x0a, 10, 012 or 0b1010 (0 to 255).
        #[arg(value_parser = parse_key)]
        key: u8,
        value: std::ffi::OsString,
    },
    /// Delete a key from the META partition.
    Delete {
        #[arg(value_parser = parse_key)]
        key: u8,
    },
}

pub fn run(cli: &Cli, command: MetaCommand) -> ExitCode {
    match command {
        MetaCommand::Write { key, value } => {
            let value = value.into_vec();
            per_node(cli, "meta write", |session, target| {
                let request = m::MetaWriteRequest { key: u32::from(key), value: value.clone() };
                async move {
                    session.machine().meta_write(session.request(&target, request)).await.map_err(st)?;
                    Ok(())
                }
            })
        }
        MetaCommand::Delete { key } => per_node(cli, "meta delete", |session, target| async move {
            let request = m::MetaDeleteRequest { key: u32::from(key) };
            session.machine().meta_delete(session.request(&target, request)).await.map_err(st)?;
            Ok(())
        }),
    }
}

/// A key as Go's `strconv.ParseUint(s, 0, 8)` reads it: a base prefix (`0x`, `0o`, `0b`, or
/// a bare leading `0` for octal), digits, and underscores only between digits.
pub fn parse_key(s: &str) -> Result<u8, String> {
    let bad = || format!("{s:?} is not a key: give 0 to 255, in decimal or as 0x0a, 0o12, 0b1010 or 012");
    let lower = s.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    // Go: an underscore must separate digits, the base prefix counting as one.
    let underscores_ok = !digits.ends_with('_') && !digits.contains("__") && (prefixed || !digits.starts_with('_'));
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if clean.is_empty() || !underscores_ok || !clean.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    let value = u64::from_str_radix(&clean, radix).map_err(|_| format!("{s:?} is out of range: keys are 0 to 255"))?;
    u8::try_from(value).map_err(|_| format!("{s:?} is out of range: keys are 0 to 255"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_as_go_parses_them() {
        let good = [
            ("0x0a", 10),
            ("0xA", 10),
            ("0X0a", 10),
            ("10", 10),
            ("012", 10),
            ("0o12", 10),
            ("0b1010", 10),
            ("0", 0),
            ("255", 255),
            ("0xff", 255),
            ("0x_f_f", 255),
            ("1_0", 10),
            ("0_12", 10),
        ];
        for (s, want) in good {
            assert_eq!(parse_key(s), Ok(want), "{s}");
        }
        for s in ["", "256", "0x100", "-1", "+1", "0x", "0b2", "09", "a", "10_", "1__0", "_10", "0x0a ", "1e1"] {
            assert!(parse_key(s).is_err(), "{s:?} should be refused");
        }
        assert_eq!(parse_key("256").unwrap_err(), "\"256\" is out of range: keys are 0 to 255");
    }
}

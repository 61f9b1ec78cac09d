//! The one binary. It becomes whichever applet its file name (or first argument) names.

use std::process::ExitCode;

fn main() -> ExitCode {
    talosbox::applets::main(std::env::args_os().collect())
}

//! `modprobe`: what the kernel runs for its own module requests (`/proc/sys/kernel/modprobe`
//! points here on a node), and what a user of the image reaches for. It loads a module, or the
//! modules an alias names (`fs-xfs`, `rtnl-link-bond`, `crypto-aes`), with their dependencies,
//! from the running kernel's tree in the rootfs. The kernel calls it as `modprobe -q -- NAME`.
//! Loading only: no removal, no parameters.

use std::ffi::OsString;
use std::process::ExitCode;

use crate::kernel::modules::Loader;

const USAGE: &str = "usage: modprobe [-q] [-v] [-b] [--] MODULE|ALIAS";

struct Args {
    quiet: bool,
    verbose: bool,
    request: String,
}

fn parse(args: &[OsString]) -> Result<Args, String> {
    let mut quiet = false;
    let mut verbose = false;
    let mut names = Vec::new();
    let mut options_done = false;
    for arg in args.iter().skip(1) {
        let arg = arg.to_string_lossy();
        match arg.as_ref() {
            "--" if !options_done => options_done = true,
            "-q" | "--quiet" if !options_done => quiet = true,
            "-v" | "--verbose" if !options_done => verbose = true,
            // Blacklists are not read here: there are none on a node.
            "-b" | "--use-blacklist" if !options_done => {}
            flag if flag.starts_with('-') && !options_done => return Err(format!("unsupported option {flag}")),
            name => names.push(name.to_string()),
        }
    }
    match names.as_slice() {
        [request] => Ok(Args { quiet, verbose, request: request.clone() }),
        [] => Err("no module named".into()),
        [_, param, ..] => Err(format!("module parameters ({param}) are not supported")),
    }
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let parsed = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("modprobe: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = Loader::running().and_then(|loader| loader.load(&parsed.request));
    match result {
        Ok(loaded) => {
            if parsed.verbose {
                for name in loaded {
                    println!("modprobe: loaded {name}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            if !parsed.quiet {
                eprintln!("modprobe: {}: {e}", parsed.request);
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        std::iter::once("modprobe").chain(words.iter().copied()).map(OsString::from).collect()
    }

    #[test]
    fn parses_what_the_kernel_passes() {
        let a = parse(&args(&["-q", "--", "fs-xfs"])).unwrap();
        assert!(a.quiet && !a.verbose);
        assert_eq!(a.request, "fs-xfs");
        assert_eq!(parse(&args(&["--", "-odd-name"])).unwrap().request, "-odd-name");
        let cases = [
            (&["-r", "xfs"][..], "unsupported option -r"),
            (&[][..], "no module named"),
            (&["xfs", "debug=1"][..], "module parameters (debug=1) are not supported"),
        ];
        for (words, want) in cases {
            assert_eq!(parse(&args(words)).err().as_deref(), Some(want), "{words:?}");
        }
    }
}

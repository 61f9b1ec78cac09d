//! The kernel command line (`/proc/cmdline`) as an ordered list of parameters.
//!
//! Parsing follows the kernel's own rules: parameters are separated by unquoted whitespace,
//! double quotes group spaces into one parameter and are dropped from around the value, a
//! parameter without `=` is a flag, a key may repeat, and everything after a lone `--` belongs to
//! init. Parsing is pure and never fails: an odd command line still yields what can be read, since
//! the node must boot with whatever the boot loader handed over.

use std::path::Path;

/// Where the running kernel shows its command line.
pub const PROC_CMDLINE: &str = "/proc/cmdline";

/// One `key[=value]` parameter; `value` is `None` for a bare flag and `Some("")` for `key=`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Param {
    pub key: String,
    pub value: Option<String>,
}

/// A parsed command line, in the order the parameters were given.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cmdline {
    pub params: Vec<Param>,
    /// Words after a lone `--`, which the kernel passes to init as arguments.
    pub init_args: Vec<String>,
}

/// Errors reading the command line file.
#[derive(Debug, thiserror::Error)]
pub enum CmdlineError {
    #[error("reading kernel command line {path}: {source}")]
    Read { path: String, source: std::io::Error },
}

impl Cmdline {
    /// Reads and parses `path` (normally [`PROC_CMDLINE`]).
    pub fn read(path: &Path) -> Result<Self, CmdlineError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| CmdlineError::Read { path: path.display().to_string(), source })?;
        Ok(Self::parse(&text))
    }

    /// Parses command line text; never fails.
    pub fn parse(text: &str) -> Self {
        let mut out = Cmdline::default();
        let mut words = split_words(text).into_iter();
        for word in words.by_ref() {
            if word == "--" {
                break;
            }
            out.params.push(param_of(&word));
        }
        out.init_args = words.map(|w| strip_quotes(&w).to_string()).collect();
        out
    }

    /// The value of the last occurrence of `key` (the kernel's own rule for repeats).
    /// A bare flag yields `Some("")`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.params.iter().rev().find(|p| p.key == key).map(|p| p.value.as_deref().unwrap_or(""))
    }

    /// Every value given for `key`, in order (for keys that accumulate, like `console=`).
    pub fn get_all(&self, key: &str) -> Vec<&str> {
        self.params.iter().filter(|p| p.key == key).map(|p| p.value.as_deref().unwrap_or("")).collect()
    }

    /// Whether `key` appears at all, with or without a value.
    pub fn has(&self, key: &str) -> bool {
        self.params.iter().any(|p| p.key == key)
    }
}

/// Splits on whitespace outside double quotes; quotes stay in the words for `param_of`.
fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_quote = false;
    for c in text.chars() {
        if c.is_whitespace() && !in_quote {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if c == '"' {
            in_quote = !in_quote;
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

fn param_of(word: &str) -> Param {
    // A word quoted as a whole ("key=a b") loses its outer quotes first, as in the kernel.
    let word = if word.starts_with('"') { strip_quotes(word) } else { word };
    match word.split_once('=') {
        Some((key, value)) => Param { key: key.to_string(), value: Some(strip_quotes(value).to_string()) },
        None => Param { key: word.to_string(), value: None },
    }
}

fn strip_quotes(s: &str) -> &str {
    let s = s.strip_prefix('"').unwrap_or(s);
    s.strip_suffix('"').unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(key: &str, value: Option<&str>) -> Param {
        Param { key: key.into(), value: value.map(Into::into) }
    }

    #[test]
    fn parse_table() {
        let cases: Vec<(&str, Vec<Param>, Vec<&str>)> = vec![
            ("", vec![], vec![]),
            ("   \n", vec![], vec![]),
            ("quiet", vec![p("quiet", None)], vec![]),
            ("console=ttyS0,115200 quiet\n", vec![p("console", Some("ttyS0,115200")), p("quiet", None)], vec![]),
            ("a= b", vec![p("a", Some("")), p("b", None)], vec![]),
            ("k=v=w", vec![p("k", Some("v=w"))], vec![]),
            (r#"x="a b  c" y"#, vec![p("x", Some("a b  c")), p("y", None)], vec![]),
            (r#""x=a b" y=1"#, vec![p("x", Some("a b")), p("y", Some("1"))], vec![]),
            ("c=1 c=2 c=3", vec![p("c", Some("1")), p("c", Some("2")), p("c", Some("3"))], vec![]),
            ("a=1 -- single 'x' \"two words\"", vec![p("a", Some("1"))], vec!["single", "'x'", "two words"]),
            ("a\tb", vec![p("a", None), p("b", None)], vec![]),
            // An unterminated quote runs to the end of the line rather than failing.
            (r#"x="open ended"#, vec![p("x", Some("open ended"))], vec![]),
            (
                "console=ttyS0,115200 printk.devkmsg=on talos.platform=metal",
                vec![
                    p("console", Some("ttyS0,115200")),
                    p("printk.devkmsg", Some("on")),
                    p("talos.platform", Some("metal")),
                ],
                vec![],
            ),
        ];
        for (input, params, init_args) in cases {
            let got = Cmdline::parse(input);
            assert_eq!(got.params, params, "input {input:?}");
            assert_eq!(got.init_args, init_args, "input {input:?}");
        }
    }

    #[test]
    fn lookups() {
        let c = Cmdline::parse("console=tty0 console=ttyS0 quiet talos.config=");
        assert_eq!(c.get("console"), Some("ttyS0"));
        assert_eq!(c.get_all("console"), vec!["tty0", "ttyS0"]);
        assert_eq!(c.get("quiet"), Some(""));
        assert!(c.has("quiet"));
        assert_eq!(c.get("talos.config"), Some(""));
        assert_eq!(c.get("missing"), None);
        assert!(!c.has("missing"));
    }

    #[test]
    fn reads_this_hosts_cmdline() {
        // /proc/cmdline exists wherever these tests run; the parse must at least not lose words.
        let c = Cmdline::read(Path::new(PROC_CMDLINE)).expect("reading /proc/cmdline");
        let text = std::fs::read_to_string(PROC_CMDLINE).expect("reading /proc/cmdline");
        if !text.contains('"') {
            assert_eq!(
                c.params.len() + c.init_args.len() + usize::from(text.contains(" -- ")),
                text.split_whitespace().count()
            );
        }
    }
}

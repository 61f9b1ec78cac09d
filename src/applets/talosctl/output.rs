//! What talosctl prints: tables aligned like Go's tabwriter (three spaces between columns, as
//! Talos's talosctl pads them), and the one-line errors.

/// A table: a header row and rows, printed with columns padded to their widest cell.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table { rows: vec![header.into_iter().map(Into::into).collect()] }
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0usize; columns];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < row.len() {
                    let pad = widths[i] - cell.chars().count() + 3;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    pub fn print(&self) {
        print!("{}", self.render());
    }
}

/// Prints `talosctl <command>: <node>: <what>` and counts it.
#[derive(Debug, Default)]
pub struct Errors {
    command: &'static str,
    count: usize,
}

impl Errors {
    pub fn new(command: &'static str) -> Errors {
        Errors { command, count: 0 }
    }

    pub fn node(&mut self, node: &str, what: impl std::fmt::Display) {
        self.count += 1;
        eprintln!("talosctl {}: {node}: {what}", self.command);
    }

    pub fn general(&mut self, what: impl std::fmt::Display) {
        self.count += 1;
        eprintln!("talosctl {}: {what}", self.command);
    }

    pub fn exit_code(&self) -> std::process::ExitCode {
        if self.count == 0 { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
    }
}

/// Bytes as Talos's `humanize.Bytes` shows them (SI units): `3.2 GB`, `512 MB`, `12 kB`.
pub fn si_bytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if n < 10 {
        return format!("{n} B");
    }
    let e = ((n as f64).ln() / 1000f64.ln()).floor() as usize;
    let e = e.min(UNITS.len() - 1);
    let v = n as f64 / 1000f64.powi(e as i32);
    if v < 10.0 { format!("{v:.1} {}", UNITS[e]) } else { format!("{v:.0} {}", UNITS[e]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns_by_three() {
        let mut t = Table::new(["NODE", "ID"]);
        t.row(["10.5.0.2", "apid"]);
        t.row(["n", ""]);
        assert_eq!(t.render(), "NODE       ID\n10.5.0.2   apid\nn\n");
    }

    #[test]
    fn bytes_in_si_units() {
        assert_eq!(si_bytes(0), "0 B");
        assert_eq!(si_bytes(999), "999 B");
        assert_eq!(si_bytes(1500), "1.5 kB");
        assert_eq!(si_bytes(52_428_800), "52 MB");
    }
}

//! Line diffs in the unified layout Talos returns from a dry-run apply (and that fleet tooling
//! parses): a `--- a` / `+++ b` header, then `@@ -l,s +l,s @@` hunks with three lines of
//! context, hunks whose changes are at most six lines apart joined, removals before additions
//! within a change, and nothing at all for equal texts. Text in, text out.

/// Talos gives up past this many lines in total, and says so in a one-line hunk.
const MAX_LINES: usize = 75_000;
const CONTEXT: usize = 3;
/// Edit distance beyond which the middle of the texts is shown as replaced wholesale, to bound
/// the work; far beyond any config change.
const MAX_EDITS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    Equal,
    Delete,
    Insert,
}

/// The unified diff of `a` and `b`, or an empty string when they are equal.
pub(crate) fn unified(a: &str, b: &str) -> String {
    if a == b {
        return String::new();
    }
    let (a_count, b_count) = (a.matches('\n').count(), b.matches('\n').count());
    if a_count + b_count > MAX_LINES {
        return format!("@@ -1,{a_count} +1,{b_count} @@ diff too large to display\n");
    }
    let a: Vec<&str> = lines(a);
    let b: Vec<&str> = lines(b);
    let script = edit_script(&a, &b);
    format(&script)
}

fn lines(s: &str) -> Vec<&str> {
    let trimmed = s.strip_suffix('\n').unwrap_or(s);
    if s.is_empty() { Vec::new() } else { trimmed.split('\n').collect() }
}

/// A shortest edit script, as (edit, line) pairs in order.
fn edit_script<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Edit, &'a str)> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (am, bm) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);

    let mut out: Vec<(Edit, &str)> = a[..prefix].iter().map(|l| (Edit::Equal, *l)).collect();
    let middle = myers(am, bm).unwrap_or_else(|| {
        am.iter().map(|l| (Edit::Delete, *l)).chain(bm.iter().map(|l| (Edit::Insert, *l))).collect()
    });
    out.extend(deletes_first(middle));
    out.extend(a[a.len() - suffix..].iter().map(|l| (Edit::Equal, *l)));
    out
}

/// Within every run of changes, removals come before additions.
fn deletes_first(script: Vec<(Edit, &str)>) -> Vec<(Edit, &str)> {
    let mut out = Vec::with_capacity(script.len());
    let mut inserts = Vec::new();
    for (edit, line) in script {
        match edit {
            Edit::Delete => out.push((edit, line)),
            Edit::Insert => inserts.push((edit, line)),
            Edit::Equal => {
                out.append(&mut inserts);
                out.push((edit, line));
            }
        }
    }
    out.append(&mut inserts);
    out
}

/// Myers' O(ND) greedy diff; `None` when more than `MAX_EDITS` edits are needed.
fn myers<'a>(a: &[&'a str], b: &[&'a str]) -> Option<Vec<(Edit, &'a str)>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max = (n + m).min(MAX_EDITS as isize);
    let offset = max + 1;
    let width = (2 * max + 3) as usize;
    let mut v = vec![0isize; width];
    let mut trace: Vec<Vec<isize>> = Vec::new();
    let at = |k: isize| (k + offset) as usize;
    let mut found = None;
    'search: for d in 0..=max {
        trace.push(v.clone());
        let mut k = -d;
        while k <= d {
            let mut x =
                if k == -d || (k != d && v[at(k - 1)] < v[at(k + 1)]) { v[at(k + 1)] } else { v[at(k - 1)] + 1 };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[at(k)] = x;
            if x >= n && y >= m {
                found = Some(d);
                break 'search;
            }
            k += 2;
        }
    }
    let total = found?;

    // Walk back from the end through the saved frontiers.
    let mut script = Vec::new();
    let (mut x, mut y) = (n, m);
    for d in (1..=total).rev() {
        let v = &trace[d as usize];
        let k = x - y;
        let down = k == -d || (k != d && v[at(k - 1)] < v[at(k + 1)]);
        let prev_k = if down { k + 1 } else { k - 1 };
        let prev_x = v[at(prev_k)];
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            x -= 1;
            y -= 1;
            script.push((Edit::Equal, a[x as usize]));
        }
        if down {
            y -= 1;
            script.push((Edit::Insert, b[y as usize]));
        } else {
            x -= 1;
            script.push((Edit::Delete, a[x as usize]));
        }
    }
    while x > 0 && y > 0 {
        x -= 1;
        y -= 1;
        script.push((Edit::Equal, a[x as usize]));
    }
    script.reverse();
    Some(script)
}

fn format(script: &[(Edit, &str)]) -> String {
    let changes: Vec<usize> =
        script.iter().enumerate().filter(|(_, (e, _))| *e != Edit::Equal).map(|(i, _)| i).collect();
    let mut out = String::from("--- a\n+++ b\n");
    let Some(&first) = changes.first() else { return out };

    // Group changes at most 2*CONTEXT apart, then widen each group by the context.
    let mut groups: Vec<(usize, usize)> = vec![(first, first)];
    for &i in &changes[1..] {
        match groups.last_mut() {
            Some(g) if i - g.1 <= 2 * CONTEXT => g.1 = i,
            _ => groups.push((i, i)),
        }
    }
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (lo, hi) in groups {
        let (start, end) = (lo.saturating_sub(CONTEXT), (hi + CONTEXT + 1).min(script.len()));
        match ranges.last_mut() {
            Some(r) if start < r.1 => r.1 = r.1.max(end),
            _ => ranges.push((start, end)),
        }
    }

    for (start, end) in ranges {
        let (mut a_line, mut b_line) = (1, 1);
        for (e, _) in &script[..start] {
            a_line += usize::from(*e != Edit::Insert);
            b_line += usize::from(*e != Edit::Delete);
        }
        let hunk = &script[start..end];
        let a_len = hunk.iter().filter(|(e, _)| *e != Edit::Insert).count();
        let b_len = hunk.iter().filter(|(e, _)| *e != Edit::Delete).count();
        // An empty side is numbered by the line before it.
        let a_start = if a_len == 0 { a_line - 1 } else { a_line };
        let b_start = if b_len == 0 { b_line - 1 } else { b_line };
        out.push_str(&format!("@@ -{a_start},{a_len} +{b_start},{b_len} @@\n"));
        for (e, line) in hunk {
            out.push(match e {
                Edit::Equal => ' ',
                Edit::Delete => '-',
                Edit::Insert => '+',
            });
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_talos() {
        assert_eq!(unified("", ""), "");
        assert_eq!(unified("a\nb\n", "a\nb\n"), "");
        assert_eq!(
            unified("line 1\nline 2\nline 3\n", "line A\nline B\nline C\n"),
            "--- a\n+++ b\n@@ -1,3 +1,3 @@\n-line 1\n-line 2\n-line 3\n+line A\n+line B\n+line C\n"
        );
        assert_eq!(
            unified("line 1\nline 3\n", "line 1\nline 2\nline 3\n"),
            "--- a\n+++ b\n@@ -1,2 +1,3 @@\n line 1\n+line 2\n line 3\n"
        );
        assert_eq!(unified("", "x\n"), "--- a\n+++ b\n@@ -0,0 +1,1 @@\n+x\n");
        assert_eq!(unified("x\n", ""), "--- a\n+++ b\n@@ -1,1 +0,0 @@\n-x\n");
    }

    /// Lines 1 to 20, with some lines replaced.
    fn numbers(changed: &[(usize, &str)]) -> String {
        (1..=20)
            .map(|i| match changed.iter().find(|(n, _)| *n == i) {
                Some((_, text)) => format!("{text}\n"),
                None => format!("{i}\n"),
            })
            .collect()
    }

    #[test]
    fn context_and_hunks() {
        let a = numbers(&[]);
        let b = numbers(&[(2, "two"), (18, "eighteen")]);
        assert_eq!(
            unified(&a, &b),
            "--- a\n+++ b\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"
        );
        // changes six lines apart share a hunk
        let c = numbers(&[(3, "three"), (9, "nine")]);
        assert_eq!(
            unified(&a, &c),
            "--- a\n+++ b\n@@ -1,12 +1,12 @@\n 1\n 2\n-3\n+three\n 4\n 5\n 6\n 7\n 8\n-9\n+nine\n 10\n 11\n 12\n"
        );
        // seven apart: two hunks that touch
        let d = numbers(&[(3, "three"), (10, "ten")]);
        assert_eq!(
            unified(&a, &d),
            "--- a\n+++ b\n@@ -1,6 +1,6 @@\n 1\n 2\n-3\n+three\n 4\n 5\n 6\n@@ -7,7 +7,7 @@\n 7\n 8\n 9\n-10\n+ten\n 11\n 12\n 13\n"
        );
    }

    #[test]
    fn huge_inputs_are_summarised() {
        let a = "x\n".repeat(40_000);
        let b = "y\n".repeat(40_000);
        assert_eq!(unified(&a, &b), "@@ -1,40000 +1,40000 @@ diff too large to display\n");
    }

    #[test]
    fn edit_scripts_are_shortest() {
        let a = ["a", "b", "c", "a", "b", "b", "a"];
        let b = ["c", "b", "a", "b", "a", "c"];
        let script = myers(&a, &b).unwrap();
        let edits = script.iter().filter(|(e, _)| *e != Edit::Equal).count();
        assert_eq!(edits, 5);
        let rebuilt: Vec<&str> = script.iter().filter(|(e, _)| *e != Edit::Delete).map(|(_, l)| *l).collect();
        assert_eq!(rebuilt, b);
    }
}

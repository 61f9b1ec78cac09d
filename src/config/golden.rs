//! Golden files for the config tests: rendered text compared with a file under
//! `src/config/testdata/`. Set `UPDATE_GOLDEN=1` to rewrite the files from the current output.

use std::path::PathBuf;

fn path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/config/testdata").join(rel)
}

/// A test data file's text.
pub(crate) fn read(rel: &str) -> String {
    std::fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// The names of the files in a test data directory, sorted.
pub(crate) fn files(rel: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path(rel))
        .unwrap_or_else(|e| panic!("listing {rel}: {e}"))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Asserts that `actual` is the golden file's text (or rewrites the file).
pub(crate) fn check(rel: &str, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path(rel), actual).unwrap_or_else(|e| panic!("writing {rel}: {e}"));
        return;
    }
    let want =
        std::fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e} (UPDATE_GOLDEN=1 writes it)"));
    assert!(want == actual, "{rel} differs from the output:\n--- want\n{want}\n--- got\n{actual}");
}

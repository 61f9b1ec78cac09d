//! Golden files for the tests: rendered text compared with a file under a module's
//! `testdata/` (the config module's own by default, `src/config/testdata/`). Set
//! `UPDATE_GOLDEN=1` to rewrite the files from the current output.

use std::path::PathBuf;

const CONFIG_TESTDATA: &str = "src/config/testdata";

fn path(rel: &str) -> PathBuf {
    path_in(CONFIG_TESTDATA, rel)
}

fn path_in(dir: &str, rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir).join(rel)
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
    check_in(CONFIG_TESTDATA, rel, actual)
}

/// [`check`] for a golden file under `dir` (relative to the package: `src/network/testdata`).
pub(crate) fn check_in(dir: &str, rel: &str, actual: &str) {
    let file = path_in(dir, rel);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&file, actual).unwrap_or_else(|e| panic!("writing {rel}: {e}"));
        return;
    }
    let want =
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {rel}: {e} (UPDATE_GOLDEN=1 writes it)"));
    assert!(want == actual, "{rel} differs from the output:\n--- want\n{want}\n--- got\n{actual}");
}

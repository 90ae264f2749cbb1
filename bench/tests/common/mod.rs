//! Helpers shared by the tests that run the `paper` binary.

#![allow(dead_code)] // each test crate uses its own part

use std::path::Path;
use std::process::Output;

/// Panics with the run's stderr unless it exited 0.
pub fn assert_success(o: &Output, tag: &str) {
    assert!(
        o.status.success(),
        "{tag}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The lines of an output file, sorted (outputs are compared as
/// multisets: instances interleave differently from run to run).
pub fn sorted_lines(path: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort_unstable();
    lines
}

/// The names in `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A fresh, empty directory in the temp dir for test `tag` of this
/// process (`tandem-signals-<tag>-<pid>`).
pub fn fresh(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-signals-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

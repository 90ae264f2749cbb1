//! The `standby` and `snapshot` benchmarks' flags: a nonsensical value is
//! refused before any work, with an error naming the flag and no panic,
//! and no run — refused, finished or failed — leaves a file behind in the
//! directory it writes in (`TMPDIR` for `standby`, `--dir` for `snapshot`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty directory for one test, removed when it ends. Under
/// Cargo's target temp dir: a disk, as `snapshot`'s `O_DIRECT` writes want.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("bench-flags-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// What the directory holds, sorted.
    fn listing(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs the `standby` benchmark with `TMPDIR` pointing at `tmp`.
fn standby(tmp: &Dir, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_standby"))
        .args(args)
        .env("TMPDIR", &tmp.0)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

/// Runs the `snapshot` benchmark.
fn snapshot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_snapshot"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

/// A refused run: failed, the flag named once in an `error:` line, no
/// panic.
fn assert_refused(o: &Output, flag: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "{flag}: {err}");
    assert!(err.starts_with("error: "), "{flag}: {err}");
    assert!(err.contains(flag), "{flag} named: {err}");
    assert!(!err.contains("panicked"), "{flag}: {err}");
    assert!(!err.contains("backtrace"), "{flag}: {err}");
}

#[test]
fn standby_refuses_zero_sizes_and_counts_naming_the_flag_and_leaves_no_file() {
    let tmp = Dir::new("standby-zero");
    for (args, flag) in [
        (&["--tuple-bytes", "0"][..], "--tuple-bytes"),
        (&["--samples", "0"], "--samples"),
        (&["--tuples", "0"], "--tuples"),
        (&["--messages", "0"], "--messages"),
        (&["--timeout-ms", "0"], "--timeout-ms"),
        (&["--log-entries", "0"], "--log-entries"),
        (&["--bq-memory", "100"], "--bq-memory"),
        (&["--tuple-bytes", "5000000"], "--tuple-bytes"),
    ] {
        let o = standby(&tmp, args);
        assert_refused(&o, flag);
        assert_eq!(tmp.listing(), Vec::<String>::new(), "{args:?} left files");
    }
    let o = standby(&tmp, &["--tuple-bytes", "0"]);
    assert!(
        stderr(&o).contains("--tuple-bytes must be at least 1"),
        "{}",
        stderr(&o)
    );
    let missing = tmp.0.join("no-such-dir");
    let o = standby(&tmp, &["--dir", missing.to_str().unwrap()]);
    assert_refused(&o, "--dir");
}

#[test]
fn standby_removes_its_files_after_a_finished_run() {
    let tmp = Dir::new("standby-run");
    let o = standby(
        &tmp,
        &[
            "--tuples",
            "20000",
            "--bq-memory",
            "1048576",
            "--messages",
            "20000",
            "--samples",
            "2",
            "--timeout-ms",
            "1",
            "--log-entries",
            "20000",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("buffer queue:"), "{out}");
    assert_eq!(tmp.listing(), Vec::<String>::new(), "files left in TMPDIR");
}

#[test]
fn snapshot_refuses_nonsensical_values_naming_the_flag() {
    let d = Dir::new("snapshot-flags");
    let dir = d.0.to_str().unwrap();
    for (args, flag) in [
        (&["--sizes-mb", "0"][..], "--sizes-mb"),
        (&["--sizes-mb", "1,0"], "--sizes-mb"),
        (&["--runs", "0"], "--runs"),
        (
            &["--small-sets", "2", "--small-files", "0"],
            "--small-files",
        ),
        (&["--sizes-mb", "1000000000000"], "--sizes-mb"),
    ] {
        let with_dir: Vec<&str> = args.iter().copied().chain(["--dir", dir]).collect();
        let o = snapshot(&with_dir);
        assert_refused(&o, flag);
        assert_eq!(d.listing(), Vec::<String>::new(), "{args:?} left files");
    }
    let o = snapshot(&["--dir", d.0.join("missing").to_str().unwrap()]);
    assert_refused(&o, "--dir");
    let o = snapshot(&["--report", d.0.join("missing/r.json").to_str().unwrap()]);
    assert_refused(&o, "--report");
}

#[test]
fn snapshot_leaves_its_dir_as_it_was_after_a_run() {
    let d = Dir::new("snapshot-run");
    std::fs::write(d.0.join("keep.txt"), b"the user's").unwrap();
    let before = d.listing();
    let o = snapshot(&[
        "--dir",
        d.0.to_str().unwrap(),
        "--sizes-mb",
        "1",
        "--runs",
        "1",
        "--small-sets",
        "2",
        "--small-files",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("small sets: 2 × 2 snapshots"), "{out}");
    assert_eq!(d.listing(), before, "--dir holds nothing new");
    assert_eq!(std::fs::read(d.0.join("keep.txt")).unwrap(), b"the user's");
}

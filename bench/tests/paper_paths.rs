//! `paper` checks every path before any work, refuses two flags that name
//! the same file (through symlinks and hard links too), and a failed run
//! removes the directories it created — `--run-dir`, `--checkpoint-dir`,
//! the temp checkpoint dir, the dead-letter dir — leaving what was there.

mod common;

use common::listing;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fresh(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-paths-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `paper` in `dir` with its temp dir `dir/tmp`.
fn paper(dir: &Path, args: &[&str]) -> Output {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap()
}

fn refused(o: &Output, want: &str, tag: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{tag}: {err}");
    assert!(err.contains(want), "{tag}: `{want}` not in\n{err}");
    // Before any work: no input was generated or read.
    assert!(
        !err.contains("generated") && !err.contains("read "),
        "{tag}: {err}"
    );
}

#[test]
fn a_report_into_a_missing_directory_is_refused_before_the_run() {
    let d = fresh("report");
    let o = paper(
        &d,
        &[
            "--records",
            "2000",
            "--output",
            "out.jsonl",
            "--report",
            "no/such/r.json",
        ],
    );
    refused(
        &o,
        "--report no/such/r.json: directory no/such does not exist",
        "report",
    );
    assert_eq!(listing(&d), ["tmp"]);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn two_flags_naming_one_file_are_refused_even_through_links() {
    let d = fresh("same");
    let input = "{\"seq\":0}\n";
    std::fs::write(d.join("in.jsonl"), input).unwrap();
    std::fs::hard_link(d.join("in.jsonl"), d.join("hard.jsonl")).unwrap();
    std::os::unix::fs::symlink("in.jsonl", d.join("soft.jsonl")).unwrap();
    std::os::unix::fs::symlink("later.json", d.join("dangling.json")).unwrap();
    let cases: &[&[&str]] = &[
        &["--input", "in.jsonl", "--output", "in.jsonl"],
        &["--input", "in.jsonl", "--report", "in.jsonl"],
        &["--input", "in.jsonl", "--output", "./hard.jsonl"],
        &["--input", "in.jsonl", "--report", "soft.jsonl"],
        &[
            "--records",
            "100",
            "--output",
            "o.jsonl",
            "--report",
            "o.jsonl",
        ],
        &[
            "--records",
            "100",
            "--output",
            "later.json",
            "--report",
            "dangling.json",
        ],
        &[
            "--records",
            "100",
            "--output",
            "o.jsonl",
            "--report",
            "o.jsonl.txn",
        ],
    ];
    for c in cases {
        let o = paper(&d, c);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{c:?}: {err}");
        assert!(
            err.contains("name the same file") || err.contains("stages --output"),
            "{c:?}: {err}"
        );
        assert_eq!(std::fs::read_to_string(d.join("in.jsonl")).unwrap(), input);
        assert_eq!(
            listing(&d),
            [
                "dangling.json",
                "hard.jsonl",
                "in.jsonl",
                "soft.jsonl",
                "tmp"
            ],
            "{c:?}"
        );
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_failed_run_removes_the_directories_it_created_and_keeps_the_others() {
    let d = fresh("created");
    // --run-dir a/b, created by the run: a goes. Dead letters were
    // written into it before the failure.
    let o = paper(
        &d,
        &[
            "--records",
            "3000",
            "--malformed-every",
            "7",
            "--run-dir",
            "a/b",
            "--fault",
            "panic@flatmap:2500",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(listing(&d), ["tmp"]);
    // Without a run dir: the dead letters' temp dir goes.
    let o = paper(
        &d,
        &[
            "--records",
            "3000",
            "--malformed-every",
            "7",
            "--fault",
            "panic@flatmap:2500",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        listing(&d.join("tmp")).is_empty(),
        "{:?}",
        listing(&d.join("tmp"))
    );
    // --checkpoint-dir c/d, created by the run, and the temp checkpoints
    // of a run without one.
    for cp in [&["--checkpoint-dir", "c/d"][..], &[]] {
        let mut args = vec![
            "--records",
            "200000",
            "--strategy",
            "restart-all",
            "--checkpoint-interval-ms",
            "5",
            "--restart",
            "none",
            "--fault",
            "panic@flatmap:150000",
        ];
        args.extend(cp);
        let o = paper(&d, &args);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(listing(&d), ["tmp"], "{cp:?}");
        assert!(listing(&d.join("tmp")).is_empty(), "{cp:?}");
    }
    // A run dir that existed stays, with what was in it.
    std::fs::create_dir_all(d.join("mine")).unwrap();
    std::fs::write(d.join("mine/keep"), b"x").unwrap();
    let o = paper(
        &d,
        &[
            "--records",
            "3000",
            "--run-dir",
            "mine",
            "--fault",
            "panic@flatmap:2500",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(listing(&d.join("mine")), ["keep"]);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_failed_start_from_a_savepoint_leaves_no_temp_checkpoint_dir() {
    let d = fresh("savepoint");
    // A savepoint of a run with parallelism 2 on the disk state backend,
    // stopped half way (so that its keyed state is not finished), restored
    // into one with 1: refused as the job starts (a keyed state on the
    // disk backend restores only at its parallelism).
    let o = paper(
        &d,
        &[
            "--records",
            "100000",
            "--rate",
            "100000",
            "--parallelism",
            "2",
            "--strategy",
            "restart-all",
            "--state-backend",
            "disk",
            "--checkpoint-dir",
            "cp",
            "--stop-with-savepoint-after-ms",
            "300",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sp = std::fs::read_dir(d.join("cp"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("sp-"))
        .expect("a savepoint");
    let o = paper(
        &d,
        &[
            "--records",
            "100000",
            "--parallelism",
            "1",
            "--strategy",
            "restart-all",
            "--state-backend",
            "disk",
            "--from-savepoint",
            sp.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("does not fit job"), "{err}");
    assert!(
        err.contains("`keyed`") && err.contains("disk backend"),
        "{err}"
    );
    assert!(
        listing(&d.join("tmp")).is_empty(),
        "{:?}",
        listing(&d.join("tmp"))
    );
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_savepoint_past_the_inputs_end_is_refused_before_work() {
    let d = fresh("past-end");
    let o = paper(
        &d,
        &[
            "--records",
            "200000",
            "--strategy",
            "restart-all",
            "--checkpoint-interval-ms",
            "5",
            "--checkpoint-dir",
            "cp",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = paper(
        &d,
        &[
            "--records",
            "10",
            "--strategy",
            "restart-all",
            "--from-savepoint",
            "cp",
            "--output",
            "o",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("this input has 10 records"), "{err}");
    assert!(!err.contains("started from checkpoint"), "{err}");
    assert_eq!(listing(&d), ["cp", "tmp"]);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_savepoint_taken_is_reported_and_one_not_taken_is_a_warning_never_an_error() {
    // The savepoint asked for as the job ends races its end: whichever
    // wins, the run succeeds with its output, and the report matches the
    // directory (stderr is not a terminal here: no progress bar to hide
    // the line).
    let d = fresh("savepoint-race");
    let (mut taken, mut missed) = (0, 0);
    for ms in [5, 20, 20, 40, 80] {
        let _ = std::fs::remove_dir_all(d.join("run"));
        let o = paper(
            &d,
            &[
                "--records",
                "150000",
                "--strategy",
                "restart-all",
                "--checkpoint-interval-ms",
                "10",
                "--run-dir",
                "run",
                "--savepoint-after-ms",
                &ms.to_string(),
                "--output",
                "out.jsonl",
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(d.join("out.jsonl").exists(), "{err}");
        let sps: Vec<String> = listing(&d.join("run/checkpoints"))
            .into_iter()
            .filter(|n| n.starts_with("sp-"))
            .collect();
        match sps.as_slice() {
            [] => {
                assert!(err.contains("warning: no savepoint was taken"), "{err}");
                missed += 1;
            }
            [sp] => {
                assert!(
                    err.contains(&format!("savepoint written to run/checkpoints/{sp}")),
                    "{sp} exists, unreported:\n{err}"
                );
                taken += 1;
            }
            more => panic!("{more:?}"),
        }
    }
    eprintln!("{taken} savepoints taken, {missed} missed as the job ended");
    std::fs::remove_dir_all(d).unwrap();
}

//! `paper` rescaled through a savepoint, as a user runs it: stopped with a
//! savepoint at parallelism 2, resumed at 1 and 3 — under restart-all with
//! panics, and with a standby in another process (whose child must build
//! the job with the source at the savepoint's 2 partitions) — the two
//! outputs together are one clean run's; a stateful operator in a child
//! process is refused (it would start without the savepoint's state).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fresh(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-rescale-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `paper` in `dir` on 100 k records at 100 k/s with `args`; it must
/// succeed.
fn paper(dir: &Path, args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "100000", "--rate", "100000"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "paper {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn sorted_lines(paths: &[PathBuf]) -> Vec<String> {
    let mut v: Vec<String> = paths
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn a_run_stopped_with_a_savepoint_resumes_at_other_parallelisms_exactly() {
    let d = fresh("paper");
    paper(&d, &["--parallelism", "2", "--output", "clean.jsonl"]);
    let clean = sorted_lines(&[d.join("clean.jsonl")]);
    paper(
        &d,
        &[
            "--parallelism",
            "2",
            "--strategy",
            "restart-all",
            "--checkpoint-interval-ms",
            "50",
            "--checkpoint-dir",
            "cp",
            "--stop-with-savepoint-after-ms",
            "500",
            "--output",
            "a.jsonl",
        ],
    );
    let sp = std::fs::read_dir(d.join("cp"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("sp-"))
        })
        .expect("a savepoint");
    let a = d.join("a.jsonl");
    let before = sorted_lines(std::slice::from_ref(&a)).len();
    assert!(
        before > 0 && before < clean.len(),
        "{before} lines before the stop"
    );
    let sp = sp.to_str().unwrap();
    let runs: [&[&str]; 3] = [
        &[
            "--parallelism",
            "1",
            "--strategy",
            "restart-all",
            "--fault",
            "panic@keyed:90000",
        ],
        &[
            "--parallelism",
            "3",
            "--strategy",
            "restart-all",
            "--fault",
            "panic@keyed:90000",
        ],
        &[
            "--parallelism",
            "3",
            "--strategy",
            "bqbs",
            "--standby",
            "flatmap",
            "--isolation",
            "process",
            "--fault",
            "panic@flatmap:90000",
        ],
    ];
    for (i, run) in runs.iter().enumerate() {
        let out = format!("b{i}.jsonl");
        let o = paper(
            &d,
            &[run, &["--from-savepoint", sp, "--output", &out][..]].concat(),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("the restore point has 2 source partitions"),
            "{run:?}: {err}"
        );
        let both = sorted_lines(&[a.clone(), d.join(&out)]);
        assert_eq!(both.len(), clean.len(), "{run:?}");
        assert!(
            both == clean,
            "{run:?}: the output differs from the clean run's"
        );
    }
    // A stateful operator in a child process would start without the
    // savepoint's state: refused, naming it (it used to write a silently
    // wrong output).
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args([
            "--records",
            "100000",
            "--parallelism",
            "2",
            "--strategy",
            "bqbs",
        ])
        .args(["--standby", "keyed", "--isolation", "process"])
        .args(["--from-savepoint", sp, "--output", "refused.jsonl"])
        .current_dir(&d)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("`keyed` has state there and runs in a child process"),
        "{err}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

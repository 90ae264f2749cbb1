//! `paper` refuses what cannot take effect before any work starts, naming
//! the flag or path; warns of what will not happen; and a failed run leaves
//! nothing behind and prints its error once, without a backtrace.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fresh(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-flags-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `paper` with `args` (2000 records unless they say otherwise) and
/// its temp dir in `tmp`.
fn paper(tmp: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_paper"));
    if !args.iter().any(|a| *a == "--records" || *a == "--input") {
        c.args(["--records", "2000"]);
    }
    c.args(args)
        .env("TMPDIR", tmp)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

fn is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn flags_that_cannot_take_effect_are_refused_naming_the_flag_and_nothing_is_left() {
    let tmp = fresh("refused");
    let file = tmp.join("a-file");
    let cases: Vec<(Vec<String>, &str)> = [
        (vec!["--fault", "panic@nope:5"], "no operator `nope`"),
        (vec!["--fault", "panic@FLATMAP:5"], "no operator `FLATMAP`"),
        (
            vec!["--fault-schedule", "panic@nope:3"],
            "no operator `nope`",
        ),
        (
            vec!["--fault", "boom@flatmap:5"],
            "unknown fault kind `boom`",
        ),
        (
            vec!["--strategy", "bqbs", "--standby-heartbeat-ms", "0"],
            "--standby-heartbeat-ms 0",
        ),
        (
            vec!["--strategy", "restart-all", "--heartbeat-timeout-ms", "0"],
            "--heartbeat-timeout-ms 0",
        ),
        (
            vec!["--strategy", "restart-all", "--checkpoint-timeout-ms", "0"],
            "--checkpoint-timeout-ms 0",
        ),
        (
            vec!["--strategy", "restart-all", "--adaptive-interval", "10s:1s"],
            "--adaptive-interval",
        ),
        (vec!["--ring-capacity", "0"], "--ring-capacity 0"),
        (
            vec!["--strategy", "bqbs", "--standby-queue-mib", "0"],
            "--standby-queue-mib 0",
        ),
        (
            vec!["--strategy", "bqbs", "--standby", "flatmap,flatmap"],
            "named twice",
        ),
        (
            vec!["--standby", "keyed"],
            "--standby needs --strategy bqbs",
        ),
        (
            vec!["--isolation", "process"],
            "--isolation needs --strategy bqbs",
        ),
        (
            vec!["--metrics-linger-s", "5"],
            "--metrics-linger-s needs --metrics-addr or --ui-addr",
        ),
        (
            vec!["--standby-queue-source"],
            "--standby-queue-source needs --strategy bqbs",
        ),
        (
            vec!["--standby-encoded-queue"],
            "--standby-encoded-queue needs --strategy bqbs",
        ),
        (
            vec!["--strategy", "restart-all", "--standby-follow"],
            "--standby-follow needs --strategy bqbs",
        ),
        (
            vec!["--standby-delta-ms", "5"],
            "--standby-delta-ms needs --strategy bqbs",
        ),
        (
            vec!["--strategy", "restart-all", "--standby", "keyed"],
            "--standby needs --strategy bqbs",
        ),
        (
            vec!["--standby-mode", "hot"],
            "--standby-mode needs --strategy bqbs",
        ),
        (vec!["--retain", "3"], "--retain needs checkpoints"),
        (
            vec![
                "--strategy",
                "bqbs",
                "--sink-mode",
                "transactional",
                "--output",
                "OUT",
            ],
            "--sink-mode transactional",
        ),
        (vec!["--output", "TMP"], "is a directory"),
        (vec!["--output", "/dev/full"], "is a character device"),
        (
            vec!["--output", "/nonexistent/dir/out.jsonl"],
            "does not exist",
        ),
        (vec!["--run-dir", "FILE"], "--run-dir"),
        (
            vec!["--from-savepoint", "/nonexistent/sp"],
            "--from-savepoint",
        ),
        (
            vec!["--fault", "stall@keyed:5:forever"],
            "nothing would detect a stall",
        ),
        (
            vec!["--fault", "crash@checkpoint:2"],
            "checkpoint faults need checkpoints",
        ),
        (
            vec!["--strategy", "bqbs", "--fault", "standby@keyed:5:before"],
            "need `keyed` to have a standby",
        ),
        (
            vec!["--strategy", "restart-all", "--fault", "commit@sink:2"],
            "transactional --output",
        ),
        (
            vec!["--input", "/nonexistent/in.jsonl"],
            "--input /nonexistent/in.jsonl",
        ),
        // Bounds and combinations that used to be accepted.
        (
            vec![
                "--strategy",
                "bqbs",
                "--standby-follow",
                "--standby-delta-ms",
                "0",
            ],
            "--standby-delta-ms 0",
        ),
        (
            vec![
                "--strategy",
                "bqbs",
                "--standby-follow",
                "--standby-delta-ms",
                "18446744073709551615",
            ],
            "--standby-delta-ms 18446744073709551615: at most",
        ),
        (
            vec!["--strategy", "bqbs", "--standby-delta-ms", "5"],
            "--standby-delta-ms is the interval of the points a following standby applies",
        ),
        (
            vec![
                "--strategy",
                "bqbs",
                "--standby-follow",
                "--standby-mode",
                "hot",
            ],
            "--standby-follow needs --standby-mode warm",
        ),
        // A negative number names its flag (clap took it for a flag `-5`).
        (vec!["--rate", "-5"], "--rate -5"),
        (vec!["--records", "-1"], "'--records <RECORDS>'"),
        // What a user typed is echoed with its control characters escaped.
        (
            vec!["--output", "/nonexistent/x\u{1b}[31m/out"],
            "/nonexistent/x\\u{1b}[31m/out",
        ),
    ]
    .into_iter()
    .map(|(a, w)| {
        let a = a
            .into_iter()
            .map(|x| match x {
                "OUT" => tmp.join("out.jsonl").display().to_string(),
                "TMP" => tmp.display().to_string(),
                "FILE" => file.display().to_string(),
                x => x.to_string(),
            })
            .collect();
        (a, w)
    })
    .collect();
    for (args, why) in cases {
        std::fs::write(&file, b"x").unwrap();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = paper(&tmp, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} was accepted:\n{err}");
        assert!(err.contains(why), "{args:?}: expected `{why}` in:\n{err}");
        assert!(!err.contains("panicked"), "{args:?}:\n{err}");
        assert!(
            !err.contains('\u{1b}'),
            "{args:?}: a raw escape in\n{err:?}"
        );
        assert!(!err.contains("stack backtrace"), "{args:?}:\n{err}");
        assert!(
            !err.contains("generated"),
            "{args:?} was refused only after generating the input:\n{err}"
        );
        std::fs::remove_file(&file).unwrap();
        assert!(
            is_empty(&tmp),
            "{args:?} left {:?}",
            std::fs::read_dir(&tmp).unwrap().collect::<Vec<_>>()
        );
    }
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
fn a_failed_run_removes_what_it_created_and_says_why_once() {
    let tmp = fresh("failed");
    let out = tmp.join("out.jsonl");
    let o = paper(
        &tmp,
        &[
            "--strategy",
            "restart-all",
            "--restart",
            "none",
            "--fault",
            "panic@keyed:1000",
            "--output",
            out.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(
        err.matches("injected fault panic@keyed:1000").count(),
        2,
        "the injected panic's line and the error's cause, once each:\n{err}"
    );
    assert!(err.contains("error: the job failed"), "{err}");
    assert!(!err.contains("stack backtrace"), "{err}");
    assert!(
        is_empty(&tmp),
        "left {:?}",
        std::fs::read_dir(&tmp).unwrap().collect::<Vec<_>>()
    );
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
fn what_will_not_happen_is_a_warning_and_the_run_goes_on() {
    let tmp = fresh("warn");
    for (args, why) in [
        (
            vec!["--fault", "panic@flatmap:50000"],
            "never fires: record 50000 is past the input's end",
        ),
        (
            vec![
                "--strategy",
                "restart-all",
                "--savepoint-after-ms",
                "600000",
            ],
            "no savepoint was taken",
        ),
        (vec!["--ring-capacity", "1000"], "rounded up to 1024"),
    ] {
        let o = paper(&tmp, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}:\n{err}");
        assert!(err.contains(why), "{args:?}: expected `{why}` in:\n{err}");
    }
    let o = paper(&tmp, &["--rate", "1", "--records", "1"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(
        !text.contains("throughput        0 records/s"),
        "one record at 1/s is not 0 records/s:\n{text}"
    );
    assert!(is_empty(&tmp));
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
fn starting_from_a_directory_whose_newest_checkpoint_is_damaged_says_which_it_skipped() {
    let tmp = fresh("savepoint");
    let cp = tmp.join("cp");
    let o = paper(
        &tmp,
        &[
            "--records",
            "60000",
            "--rate",
            "200000",
            "--strategy",
            "restart-all",
            "--checkpoint-interval-ms",
            "50",
            "--checkpoint-dir",
            cp.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut ids: Vec<u64> = tandem::checkpoint::list(&cp)
        .unwrap()
        .iter()
        .map(|l| l.id)
        .collect();
    ids.sort();
    assert!(ids.len() >= 2, "{ids:?}");
    let newest = ids[ids.len() - 1];
    let m =
        tandem::checkpoint::Manifest::load(&cp.join(format!("manifest-{newest}.json"))).unwrap();
    let f = m.files.iter().max_by_key(|f| f.payload_len).unwrap();
    let path = m.file_path(f);
    let mut bytes = std::fs::read(&path).unwrap();
    // A payload byte (past the 4 KiB header block): the checksum sees it.
    let at = 4096 + f.payload_len as usize / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let o = paper(
        &tmp,
        &[
            "--records",
            "60000",
            "--strategy",
            "restart-all",
            "--from-savepoint",
            cp.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("started from checkpoint {}", ids[ids.len() - 2]))
            && err.contains(&format!("checkpoint {newest}")),
        "{err}"
    );
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
fn a_standard_output_that_cannot_be_written_is_an_error_not_a_panic() {
    let tmp = fresh("dev-full");
    for (bin, args) in [
        (env!("CARGO_BIN_EXE_paper"), vec!["--records", "100"]),
        (
            env!("CARGO_BIN_EXE_chaos"),
            vec![
                "--schedules",
                "1",
                "--records",
                "200",
                "--strategies",
                "restart-all",
                "--quiet",
            ],
        ),
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = Command::new(bin)
            .args(&args)
            .env("TMPDIR", &tmp)
            .env("RUST_BACKTRACE", "1")
            .stdout(full)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            matches!(o.status.code(), Some(1 | 2)),
            "{bin}: {:?}\n{err}",
            o.status
        );
        assert!(
            err.contains("error: writing to standard output"),
            "{bin}: {err}"
        );
        assert!(
            !err.contains("panicked") && !err.contains("backtrace"),
            "{err}"
        );
        assert!(is_empty(&tmp), "{bin} left files behind");
    }
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
fn help_to_a_standard_output_that_cannot_be_written_is_an_error() {
    for bin in [
        env!("CARGO_BIN_EXE_paper"),
        env!("CARGO_BIN_EXE_chaos"),
        env!("CARGO_BIN_EXE_ring"),
        env!("CARGO_BIN_EXE_standby"),
        env!("CARGO_BIN_EXE_snapshot"),
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = Command::new(bin)
            .arg("--help")
            .stdout(full)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bin}: {err}");
        assert!(
            err.contains("error: writing to standard output"),
            "{bin}: {err}"
        );
    }
}

/// A savepoint of another job (here `nexmark`'s) is refused before the
/// input is made: the check needs the job's shape, not its records (it
/// used to come once the input was generated, 35 s into a 20 M-record
/// run).
#[test]
fn a_savepoint_of_another_job_is_refused_before_the_input_is_made() {
    let tmp = fresh("other-job");
    let o = Command::new(env!("CARGO_BIN_EXE_nexmark"))
        .args([
            "--query", "q5", "--events", "200000", "--rate", "100000", "--paced",
        ])
        .args([
            "--strategy",
            "restart-all",
            "--stop-with-savepoint-after-ms",
            "300",
        ])
        .arg("--checkpoint-dir")
        .arg(tmp.join("ck"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ck = tmp.join("ck");
    let o = paper(
        &tmp,
        &[
            "--records",
            "5000000",
            "--strategy",
            "restart-all",
            "--from-savepoint",
            ck.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("which the job lacks"), "{err}");
    assert!(
        !err.contains("generated"),
        "refused only after the input: {err}"
    );
    std::fs::remove_dir_all(tmp).unwrap();
}

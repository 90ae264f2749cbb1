//! `restore`: a small run recovers with every output checked, reports its
//! first output, and leaves nothing under `--dir` — by restart-all and by
//! a standby's takeover; absurd flags are refused before any work, naming
//! the flag.

use std::path::PathBuf;
use std::process::Command;

fn restore(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_restore"))
        .args(args)
        .output()
        .expect("run restore")
}

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-restore-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A small run (2 MB of state, one run, no page cache drop: the test may
/// not run as root, and must not disturb the machine's other work if it
/// does) with `extra` flags: it succeeds, says its first output, and
/// leaves nothing in `--dir`; its stdout and JSON report.
fn small_run(tag: &str, extra: &[&str]) -> (String, serde_json::Value) {
    let dir = fresh_dir(tag);
    let out = fresh_dir(&format!("{tag}-report"));
    let report = out.join("restore.json");
    let mut args = vec![
        "--state-mb",
        "2",
        "--runs",
        "1",
        "--cold",
        "false",
        "--outputs-after-restart",
        "2000",
        "--dir",
        dir.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = restore(&args);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains("first output") && stdout.contains("median of 1"),
        "{stdout}"
    );
    // The scratch directory (checkpoints and all) is gone.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in --dir: {left:?}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    (stdout, r)
}

#[test]
fn a_small_run_recovers_reports_its_first_output_and_leaves_dir_empty() {
    let (_, r) = small_run("run", &["--checkpoint-interval-ms", "200"]);
    let first = r["first_output_ms"].as_f64().unwrap();
    let restore = r["restore_ms"].as_f64().unwrap();
    assert!(first > 0.0 && restore > 0.0, "{r}");
    assert_eq!(r["cold"], false);
    let run = &r["per_run"][0];
    assert_eq!(run["first_output_ms"].as_f64(), Some(first));
    // 2 MB of (u64, (u64, u64)) entries, archived at 24 bytes a key: the
    // size is read from the store's manifest, not assumed.
    let keys = run["keys"].as_u64().unwrap();
    assert_eq!(keys, 2_000_000 / 24);
    let state = run["state_bytes"].as_u64().unwrap();
    assert!(
        state >= keys * 24 && state < keys * 24 * 3,
        "state {state} bytes for {keys} keys"
    );
    assert!(
        run["outputs_after_restart"].as_u64().unwrap() >= 2000,
        "{r}"
    );
}

#[test]
fn a_following_standby_takes_over_with_every_output_checked() {
    let (stdout, r) = small_run("bqbs", &["--strategy", "bqbs", "--standby-follow"]);
    assert!(stdout.contains("taken over by the standby"), "{stdout}");
    assert_eq!(r["strategy"], "bqbs");
    assert_eq!(r["standby_follow"], true);
    let run = &r["per_run"][0];
    // A takeover: no checkpoint restored, the outputs after the fault
    // checked in the same attempt.
    assert!(run["restored_checkpoint"].is_null(), "{r}");
    assert!(run["first_output_ms"].as_f64().unwrap() > 0.0, "{r}");
    assert!(
        run["outputs_after_restart"].as_u64().unwrap() >= 2000,
        "{r}"
    );
}

#[test]
fn absurd_flags_are_refused_naming_the_flag() {
    let dir = fresh_dir("flags");
    let d = dir.to_str().unwrap();
    for (args, flag) in [
        (vec!["--state-mb", "0"], "--state-mb"),
        (vec!["--state-mb", "99999999"], "--state-mb"),
        (vec!["--runs", "0"], "--runs"),
        (
            vec!["--checkpoint-interval-ms", "1"],
            "--checkpoint-interval-ms",
        ),
        (vec!["--rate", "0"], "--rate"),
        (
            vec!["--outputs-after-restart", "0"],
            "--outputs-after-restart",
        ),
        (vec!["--dir", "/nonexistent/restore"], "--dir"),
        (vec!["--cold", "maybe"], "--cold"),
        (vec!["--standby-follow"], "--standby-follow"),
        (
            vec!["--strategy", "bqbs", "--whole-checkpoints"],
            "--whole-checkpoints",
        ),
        (vec!["--strategy", "region"], "--strategy"),
        (
            vec!["--standby-heartbeat-ms", "5"],
            "--standby-heartbeat-ms",
        ),
        (
            vec!["--strategy", "bqbs", "--standby-heartbeat-ms", "0"],
            "--standby-heartbeat-ms",
        ),
    ] {
        let mut all = args.clone();
        if !args.contains(&"--dir") {
            all.extend(["--dir", d]);
        }
        let o = restore(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in --dir: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

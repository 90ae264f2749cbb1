//! `disk_state`: a small run on the disk backend with injected panics
//! commits what the in-memory backend's does, says so, and leaves nothing
//! under `--dir`; absurd flags are refused before any work, naming the
//! flag.

use std::path::PathBuf;
use std::process::Command;

fn disk_state(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_disk_state"))
        .args(args)
        .output()
        .expect("run disk_state")
}

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tandem-disk-state-test-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_small_faulted_run_on_disk_matches_the_memory_run_and_leaves_dir_empty() {
    let dir = fresh_dir("run");
    let out = fresh_dir("report");
    let report = out.join("r.json");
    // No memory limit: the test may not run as root, and a cgroup is the
    // machine's, not the test's.
    let o = disk_state(&[
        "--keys",
        "30000",
        "--memory-limit-mb",
        "0",
        "--cache-mb",
        "1",
        "--panics",
        "2",
        "--checkpoint-interval-ms",
        "50",
        "--dir",
        dir.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("output: identical (60000 and 60000 lines"),
        "{stdout}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["identical"], true, "{r}");
    let disk = &r["runs"][1];
    assert_eq!(disk["backend"], "disk", "{r}");
    assert_eq!(disk["panics_fired"], 2, "{r}");
    assert!(disk["restarts"].as_u64().unwrap() >= 2, "{r}");
    assert!(disk["records_per_sec"].as_f64().unwrap() > 0.0, "{r}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn absurd_flags_are_refused_naming_the_flag_before_any_work() {
    let dir = fresh_dir("flags");
    let d = dir.to_str().unwrap();
    for (args, flag) in [
        (vec!["--keys", "10"], "--keys"),
        (
            vec!["--keys", "1000000000", "--payload-bytes", "4096"],
            "--keys",
        ),
        (vec!["--payload-bytes", "5000"], "--payload-bytes"),
        (vec!["--memory-limit-mb", "5"], "--memory-limit-mb"),
        (vec!["--cache-mb", "0"], "--cache-mb"),
        (vec!["--panics", "1000"], "--panics"),
        (
            vec!["--checkpoint-interval-ms", "1"],
            "--checkpoint-interval-ms",
        ),
        (vec!["--cores", "0"], "--cores"),
        (vec!["--cores", "65"], "--cores"),
        (vec!["--report", "/nonexistent/r.json"], "--report"),
    ] {
        let mut all = args.clone();
        all.extend(["--dir", d]);
        let o = disk_state(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?} worked first: {:?}", o.stdout);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line: {err}");
        assert!(lines[0].contains(flag), "{args:?}: {err}");
    }
    // A --dir that is a file.
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let o = disk_state(&["--keys", "1000", "--dir", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--dir"));
    std::fs::remove_file(&file).unwrap();
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

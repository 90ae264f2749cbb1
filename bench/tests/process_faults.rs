//! `kill`, `abort` and `segv` faults end the process that runs the
//! operator, as the real deaths do: by the signal, with no unwinding and
//! no report. With every operator in one process, nothing can survive
//! them, so a run that asks a standby or a restart to is refused up front.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

/// `paper` with `args`, without a core file (one would land in the
/// working directory: the repository).
fn paper(args: &[&str]) -> Output {
    Command::new("/bin/sh")
        .arg("-c")
        .arg("ulimit -c 0; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "20000", "--seed", "7"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn each_process_fault_ends_the_process_with_its_signal_and_names_itself() {
    for (kind, signal) in [
        ("kill", libc::SIGKILL),
        ("abort", libc::SIGABRT),
        ("segv", libc::SIGSEGV),
    ] {
        let spec = format!("{kind}@flatmap:5000");
        let o = paper(&["--fault", &spec]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.signal(), Some(signal), "{spec}: {stderr}");
        assert!(
            stderr.contains(&format!("injected fault {spec}")),
            "the fault says what it was: {stderr}"
        );
    }
}

#[test]
fn a_process_fault_is_refused_where_a_recovery_would_be_expected() {
    for strategy in [&["--strategy", "restart-all"][..], &["--strategy", "bqbs"]] {
        let o = paper(&[strategy, &["--fault", "kill@flatmap:5000"]].concat());
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.signal(), None, "refused, not killed: {stderr}");
        assert!(!o.status.success());
        assert!(
            stderr.contains("neither a standby nor a restart would survive it"),
            "{stderr}"
        );
    }
}

/// The sorted lines of `path`.
fn sorted(path: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn under_process_isolation_a_standby_survives_its_primarys_process_dying() {
    let dir = std::env::temp_dir().join(format!("tandem-process-iso-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let clean = dir.join("clean");
    let o = paper(&["--strategy", "none", "--output", clean.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let expected = sorted(&clean);
    for (standby, mode, faults) in [
        ("flatmap", "warm", "kill@flatmap:3"),
        ("flatmap", "hot", "segv@flatmap:2"),
        ("keyed", "warm", "kill@keyed:2"),
        ("keyed", "warm", "abort@keyed:1"),
    ] {
        let out = dir.join(format!("{standby}-{mode}"));
        let run = dir.join(format!("run-{standby}-{mode}"));
        std::fs::create_dir_all(&run).unwrap();
        let o = paper(&[
            "--strategy",
            "bqbs",
            "--standby",
            standby,
            "--standby-mode",
            mode,
            "--isolation",
            "process",
            "--fault-schedule",
            faults,
            "--run-dir",
            run.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{standby} {mode} {faults}: {stderr}");
        assert!(
            stderr.contains("dies of"),
            "{faults}: a child process died: {stderr}"
        );
        assert_eq!(
            sorted(&out),
            expected,
            "{standby} {mode} {faults}: the output of a run whose primary's process died \
             equals the clean run's"
        );
        // No shared file (pipes, status, queues) is left in the run
        // directory.
        let left: Vec<_> = walk(&run);
        assert!(left.is_empty(), "left behind: {left:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            v.extend(walk(&p));
        } else {
            v.push(p);
        }
    }
    v
}

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

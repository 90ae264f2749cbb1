//! A standby run on a filesystem too small for its mapped files is an
//! error naming the space it needs — never a death by `SIGBUS` — and
//! leaves nothing behind.
//!
//! Each case runs `paper` in a mount namespace of its own (`unshare -m`)
//! with a small tmpfs mounted over `/dev/shm` or a run directory, as in a
//! container with Docker's default 64 MiB `/dev/shm`. Where the machine does
//! not let the test mount (not root, no `unshare`), the case says so and is
//! skipped; CI runs as root.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

/// Runs `script` under `sh` in a new mount namespace; `None` where this
/// machine cannot make one.
fn in_namespace(script: &str) -> Option<Output> {
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"])
        .output()
        .ok()?;
    if !probe.status.success() {
        eprintln!(
            "skipped: cannot mount a tmpfs in a mount namespace here ({})",
            String::from_utf8_lossy(&probe.stderr).trim()
        );
        return None;
    }
    Some(
        Command::new("unshare")
            .args(["-m", "sh", "-c", script])
            .env("PAPER", env!("CARGO_BIN_EXE_paper"))
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap(),
    )
}

/// The run's exit code and stderr; panics on a death by signal.
fn outcome(o: &Output, tag: &str) -> (i32, String) {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.signal().is_none(),
        "{tag}: killed by signal {:?}\n{err}",
        o.status.signal()
    );
    let code = o.status.code().unwrap();
    assert!(
        !matches!(code, 101 | 134 | 135 | 139),
        "{tag}: exit {code} (a panic or a signal)\n{err}"
    );
    (code, err)
}

#[test]
fn a_standby_run_in_a_32_mib_dev_shm_is_refused_before_work_naming_the_space_needed() {
    let Some(o) = in_namespace(
        "mount -t tmpfs -o size=32m tmpfs /dev/shm && \
         \"$PAPER\" --records 20000 --strategy bqbs --standby flatmap,keyed; \
         rc=$?; echo \"left: $(ls -A /dev/shm)\" >&2; exit $rc",
    ) else {
        return;
    };
    let (code, err) = outcome(&o, "32 MiB /dev/shm");
    assert_eq!(code, 1, "{err}");
    for want in [
        "need",
        "MiB",
        "free",
        "--standby-queue-mib",
        "--run-dir",
        "left: \n",
    ] {
        assert!(err.contains(want), "missing `{want}` in:\n{err}");
    }
    // Refused before any record was processed: no throughput printed.
    assert!(!err.contains("records/s"), "{err}");
}

#[test]
fn a_standby_run_in_a_1_mib_run_dir_is_refused_and_leaves_no_file() {
    let Some(o) = in_namespace(
        "mkdir -p /mnt/t && mount -t tmpfs -o size=1m tmpfs /mnt/t && \
         \"$PAPER\" --records 20000 --strategy bqbs --standby flatmap,keyed --run-dir /mnt/t/run; \
         rc=$?; echo \"left: $(find /mnt/t -mindepth 1)\" >&2; exit $rc",
    ) else {
        return;
    };
    let (code, err) = outcome(&o, "1 MiB run dir");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("1.0 MiB is free"), "{err}");
    assert!(err.contains("left: \n"), "files left behind:\n{err}");
}

#[test]
fn a_snapshot_exchange_that_outgrows_the_filesystem_is_an_error_not_a_sigbus() {
    // Room for the queues and logs (checked up front) but not for the
    // keyed state's exchanges, which grow while the job runs: the file
    // whose blocks cannot be reserved fails the job, naming it.
    let Some(o) = in_namespace(
        "mkdir -p /mnt/t && mount -t tmpfs -o size=6m tmpfs /mnt/t && \
         \"$PAPER\" --records 400000 --strategy bqbs --standby flatmap,keyed \
           --standby-queue-mib 1 --standby-snapshot-ms 5 --run-dir /mnt/t/run; \
         rc=$?; echo \"left: $(find /mnt/t/run -mindepth 1 2>/dev/null)\" >&2; exit $rc",
    ) else {
        return;
    };
    let (code, err) = outcome(&o, "6 MiB run dir");
    if code != 0 {
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(".sx: no space for this file"), "{err}");
    }
    assert!(err.contains("left: \n"), "files left behind:\n{err}");
}

#[test]
fn checkpoints_that_fill_their_filesystem_fail_the_run_and_leave_no_partial_checkpoint() {
    // The checkpoint directory exists: what is removed from it, the store
    // removed (a set that failed unpublished).
    let Some(o) = in_namespace(
        "mkdir -p /mnt/t && mount -t tmpfs -o size=300k tmpfs /mnt/t && mkdir /mnt/t/cp && \
         \"$PAPER\" --records 300000 --rate 500000 --strategy restart-all \
           --checkpoint-interval-ms 20 --tolerable-checkpoint-failures 1 \
           --checkpoint-dir /mnt/t/cp; \
         rc=$?; echo \"left: $(ls /mnt/t/cp | tr '\\n' ' ')\" >&2; exit $rc",
    ) else {
        return;
    };
    let (code, err) = outcome(&o, "300 KiB checkpoint dir");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    // What is left was published: each set with its manifest, nothing
    // staged.
    let left = err.rsplit("left: ").next().unwrap().trim();
    for name in left.split_whitespace() {
        match name.strip_prefix("chk-") {
            Some(id) => assert!(
                left.contains(&format!("manifest-{id}.json")),
                "an unpublished set is left: {left}"
            ),
            None => assert!(
                name.starts_with("manifest-") && name.ends_with(".json"),
                "{name} left: {left}"
            ),
        }
    }
}

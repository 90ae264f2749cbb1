//! Every benchmark binary takes SIGINT, SIGTERM and SIGHUP as `paper`
//! does (`signals.rs` has the runs of `paper`, `chaos`, `nexmark` and
//! `experiments` signalled at random moments and killed): stopped by
//! itself, with `128 + signal`, nothing left, no file it was to write
//! replaced, and no timeline or latency log written by an interrupted run.

mod common;

use common::{fresh, listing};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every binary in `bench/src/bin/` takes SIGINT, SIGTERM and SIGHUP the
/// way `paper` does: a signal one second into a run that would go on for
/// long stops it promptly — by the binary itself, not by the signal
/// thread's hard exit after its grace — with `128 + signal`, one line
/// saying so, nothing left in the temp dir, and the existing `--report`
/// (or `--out`) file it was to replace untouched. (`window`, `disk_state`
/// and `cep` used to run on: `window` to its end and exit 0, `disk_state`
/// replacing its report.)
#[test]
fn every_benchmark_binary_stops_on_a_signal_and_replaces_no_file() {
    // (binary, flags that make a run of many seconds, whether it takes
    // --report)
    let bins: &[(&str, &str, &[&str], bool)] = &[
        (
            "window",
            env!("CARGO_BIN_EXE_window"),
            &["--records", "500000000", "--runs", "1"],
            false,
        ),
        (
            "cep",
            env!("CARGO_BIN_EXE_cep"),
            &["--events", "5000000", "--runs", "20"],
            false,
        ),
        (
            "disk_state",
            env!("CARGO_BIN_EXE_disk_state"),
            &["--keys", "5000000", "--panics", "0"],
            true,
        ),
        (
            "restore",
            env!("CARGO_BIN_EXE_restore"),
            &["--runs", "20"],
            true,
        ),
        (
            "snapshot",
            env!("CARGO_BIN_EXE_snapshot"),
            &["--sizes-mb", "200", "--runs", "20"],
            true,
        ),
        (
            "ring",
            env!("CARGO_BIN_EXE_ring"),
            &["--messages", "10000000000", "--runs", "1"],
            true,
        ),
        (
            "standby",
            env!("CARGO_BIN_EXE_standby"),
            &["--tuples", "10000000000"],
            true,
        ),
        (
            "jitter",
            env!("CARGO_BIN_EXE_jitter"),
            &["--seconds", "60"],
            true,
        ),
        (
            "nexmark",
            env!("CARGO_BIN_EXE_nexmark"),
            &[
                "--query",
                "q5",
                "--events",
                "1000000000",
                "--rate",
                "1000000",
                "--paced",
            ],
            true,
        ),
        (
            "chaos",
            env!("CARGO_BIN_EXE_chaos"),
            &["--schedules", "1000", "--records", "200000"],
            true,
        ),
        (
            "paper",
            env!("CARGO_BIN_EXE_paper"),
            &["--records", "20000000", "--rate", "1000000"],
            true,
        ),
        // Its --out, a directory holding an earlier campaign's report:
        // neither it nor the directory changes.
        (
            "experiments",
            env!("CARGO_BIN_EXE_experiments"),
            &["--out", "campaign"],
            false,
        ),
    ];
    let signals = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    for (i, &(name, bin, flags, report)) in bins.iter().enumerate() {
        let sig = signals[i % signals.len()];
        let dir = fresh(&format!("every-{name}"));
        let tmp = fresh(&format!("every-tmp-{name}"));
        let precious = if name == "experiments" {
            std::fs::create_dir(dir.join("campaign")).unwrap();
            dir.join("campaign").join("results.json")
        } else {
            dir.join("report.json")
        };
        std::fs::write(&precious, "precious\n").unwrap();
        let mut args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        if report {
            args.extend(["--report".into(), precious.display().to_string()]);
        }
        let mut child = Command::new(bin)
            .args(&args)
            .current_dir(&dir)
            .env("TMPDIR", &tmp)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(1));
        assert!(
            child.try_wait().unwrap().is_none(),
            "{name}: ended within a second; give it a longer run"
        );
        // SAFETY: signalling a child we spawned and have not reaped.
        unsafe { libc::kill(child.id() as i32, sig) };
        let t = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("{name}: still running 30 s after signal {sig}");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let err = {
            use std::io::Read;
            let mut s = String::new();
            child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
            s
        };
        assert_eq!(status.code(), Some(128 + sig), "{name}: {status}\n{err}");
        let last = err.lines().rev().find(|l| l.contains("interrupted by"));
        assert!(
            last.is_some_and(|l| l.contains(": stopped;")),
            "{name}: stopped by itself, not by the signal thread's hard exit after the grace:\n{err}"
        );
        assert_eq!(
            std::fs::read_to_string(&precious).unwrap(),
            "precious\n",
            "{name}: replaced the file it was to write"
        );
        let left = listing(&tmp);
        assert!(left.is_empty(), "{name}: left in the temp dir: {left:?}");
        let beside: Vec<String> = listing(precious.parent().unwrap())
            .into_iter()
            .filter(|n| n != "report.json" && n != "results.json" && n != "campaign")
            .collect();
        assert!(beside.is_empty(), "{name}: left beside: {beside:?}");
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::remove_dir_all(tmp).unwrap();
    }
}

/// A run interrupted while it writes a timeline and an interval log
/// writes neither (the timeline used to be written, unannounced).
#[test]
fn an_interrupted_run_writes_no_timeline_and_no_latency_log() {
    let dir = fresh("timeline");
    let tmp = fresh("timeline-tmp");
    let mut child = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "2000000", "--rate", "400000"])
        .args(["--timeline", "t.json", "--hlog", "l.hlog"])
        .current_dir(&dir)
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let left = listing(&dir);
    assert!(left.is_empty(), "an interrupted run wrote {left:?}");
    assert!(listing(&tmp).is_empty(), "{:?}", listing(&tmp));
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(tmp).unwrap();
}

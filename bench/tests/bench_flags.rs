//! The `standby` and `snapshot` benchmarks' flags: a nonsensical value is
//! refused before any work, with an error naming the flag and no panic,
//! and no run — refused, finished or failed — leaves a file behind in the
//! directory it writes in (`TMPDIR` for `standby`, `--dir` for `snapshot`).
//!
//! And for `ring`, `standby`, `snapshot` and `restore` alike: a full
//! standard output is one error line, not a panic; a `--report` into a
//! missing directory is refused before any measurement, and a report is
//! written whole, nothing left beside it; `SIGINT` and `SIGTERM` stop a
//! long run at once with 128 + the signal, its directory as it was.
//! (Every numeric flag at any value: `bench_numbers.rs`; `restore`'s own
//! refusals and a whole run: `restore.rs`.)

use std::path::PathBuf;
use std::process::{Command, Output};

/// A fresh, empty directory for one test, removed when it ends. Under
/// Cargo's target temp dir: a disk, as `snapshot`'s `O_DIRECT` writes want.
struct Dir(
    PathBuf,
    // Held for its drop, which removes the directory.
    #[allow(dead_code)] tempfile::TempDir,
);

impl Dir {
    fn new(name: &str) -> Self {
        let t = tempfile::Builder::new()
            .prefix(&format!("bench-flags-{name}-"))
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        Dir(t.path().to_path_buf(), t)
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

/// The flags of a short `standby` run.
const STANDBY_SMALL: [&str; 12] = [
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
];

/// The flags of a short `snapshot` run.
const SNAPSHOT_SMALL: [&str; 8] = [
    "--sizes-mb",
    "1",
    "--runs",
    "1",
    "--small-sets",
    "1",
    "--small-files",
    "2",
];

/// The flags of a short `ring` run.
const RING_SMALL: [&str; 4] = ["--messages", "1000", "--runs", "1"];

/// The flags of a short `restore` run (a fraction of a second). The page
/// cache is left alone: the test may run as root, and must not disturb
/// the machine's other work.
const RESTORE_SMALL: [&str; 10] = [
    "--state-mb",
    "1",
    "--runs",
    "1",
    "--cold",
    "false",
    "--checkpoint-interval-ms",
    "100",
    "--outputs-after-restart",
    "100",
];

/// `exe` with `args`, in (and `--dir`, `TMPDIR` at) `dir` where it takes
/// one.
fn command(exe: &str, args: &[&str], dir: &Dir, dir_flag: bool) -> Command {
    let mut c = Command::new(exe);
    c.args(args)
        .current_dir(&dir.0)
        .env("TMPDIR", &dir.0)
        .env("RUST_BACKTRACE", "1");
    if dir_flag {
        c.arg("--dir").arg(&dir.0);
    }
    c
}

/// The four benchmarks, each with the flags of a short run and whether
/// it takes `--dir`.
fn benches() -> [(&'static str, &'static [&'static str], bool); 4] {
    [
        (env!("CARGO_BIN_EXE_ring"), &RING_SMALL, false),
        (env!("CARGO_BIN_EXE_standby"), &STANDBY_SMALL, true),
        (env!("CARGO_BIN_EXE_snapshot"), &SNAPSHOT_SMALL, true),
        (env!("CARGO_BIN_EXE_restore"), &RESTORE_SMALL, true),
    ]
}

#[test]
fn every_bench_fails_with_one_error_line_when_standard_output_is_full() {
    for (exe, args, dir_flag) in benches() {
        let d = Dir::new("full-stdout");
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = command(exe, args, &d, dir_flag)
            .stdout(full)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{exe}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{exe}: one line: {err}");
        assert!(
            lines[0].starts_with("error: writing to standard output: "),
            "{exe}: {err}"
        );
        assert_eq!(d.listing(), Vec::<String>::new(), "{exe} left files");
    }
}

#[test]
fn a_report_into_a_missing_directory_is_refused_before_any_measurement() {
    for (exe, args, dir_flag) in benches() {
        let d = Dir::new("report-missing");
        let report = d.0.join("missing/r.json");
        let o = command(exe, args, &d, dir_flag)
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap();
        assert_refused(&o, "--report");
        assert!(o.stdout.is_empty(), "{exe} measured first: {:?}", o.stdout);
        assert_eq!(d.listing(), Vec::<String>::new(), "{exe} left files");
    }
}

#[test]
fn every_bench_writes_its_report_whole_and_nothing_beside_it() {
    for (exe, args, dir_flag) in benches() {
        let d = Dir::new("report");
        let report = d.0.join("r.json");
        std::fs::write(&report, "an old report").unwrap();
        let o = command(exe, args, &d, dir_flag)
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap();
        assert!(o.status.success(), "{exe}: {}", stderr(&o));
        let text = std::fs::read_to_string(&report).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{exe}: the report is no JSON ({e}): {text}"));
        assert!(
            json.as_object().is_some_and(|o| !o.is_empty()),
            "{exe}: {text}"
        );
        assert_eq!(d.listing(), ["r.json"], "{exe}: only the report");
    }
}

/// Sends `sig` to `child` once `ready` holds (or after 5 s), and returns
/// its exit status, within 10 s of the signal.
fn signal_when(
    child: &mut std::process::Child,
    sig: i32,
    ready: impl Fn() -> bool,
) -> std::process::ExitStatus {
    let t = std::time::Instant::now();
    while !ready() && t.elapsed() < std::time::Duration::from_secs(5) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before the signal"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(ready(), "not under way after 5 s");
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: a signal to our own child, not yet waited for.
    unsafe { libc::kill(child.id() as i32, sig) };
    let t = std::time::Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            panic!("still running 10 s after the signal");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn sigint_and_sigterm_stop_a_running_bench_with_128_plus_the_signal_leaving_its_dir_as_it_was() {
    // Long runs: each would take minutes.
    let long: [(&str, &[&str], bool); 4] = [
        (
            env!("CARGO_BIN_EXE_ring"),
            &["--messages", "100000000000"],
            false,
        ),
        (
            env!("CARGO_BIN_EXE_standby"),
            &["--tuples", "100000000000", "--bq-memory", "1048576"],
            true,
        ),
        (
            env!("CARGO_BIN_EXE_snapshot"),
            &["--sizes-mb", "1", "--runs", "100", "--small-sets", "0"],
            true,
        ),
        (
            // About 2 s a run (the first checkpoint after the inserts
            // comes after the default 2 s interval).
            env!("CARGO_BIN_EXE_restore"),
            &["--state-mb", "1", "--runs", "100", "--cold", "false"],
            true,
        ),
    ];
    for (exe, args, dir_flag) in long {
        for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
            let d = Dir::new("signal");
            std::fs::write(d.0.join("keep.txt"), b"the user's").unwrap();
            let report = d.0.join("r.json");
            let mut child = command(exe, args, &d, dir_flag)
                .arg("--report")
                .arg(&report)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            // Under way: its scratch directory made (ring makes none).
            let status = signal_when(&mut child, sig, || !dir_flag || d.listing().len() > 1);
            let o = child.wait_with_output().unwrap();
            let err = stderr(&o);
            assert_eq!(
                status.code(),
                Some(128 + sig),
                "{exe} {name}: {status:?}: {err}"
            );
            assert!(
                err.contains(&format!("interrupted by {name}")),
                "{exe}: {err}"
            );
            assert!(!err.contains("panicked"), "{exe}: {err}");
            assert_eq!(d.listing(), ["keep.txt"], "{exe} {name}: left files");
        }
    }
}

#[test]
fn cep_prints_its_figures_and_refuses_bad_flags_naming_them() {
    let cep = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cep"))
            .args(args)
            .output()
            .unwrap()
    };
    let o = cep(&["--events", "20000", "--runs", "1", "--cores", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("ns/event with a pattern of 3 steps") && out.contains("events/s per core"),
        "{out}"
    );
    for (bad, flag) in [
        (&["--events", "0"][..], "--events"),
        (&["--runs", "0"][..], "--runs"),
        (&["--keys", "0"][..], "--keys"),
        (&["--cores", "100000"][..], "--cores"),
    ] {
        assert_refused(&cep(bad), flag);
    }
}

/// An error blames the flag that is wrong: a `--dir` no run can write in
/// (`/proc`) is named as such, not as a lack of space blamed on a size
/// flag (`restore --dir /proc` said "--state-mb 500: … which has 0 B
/// free"); `--cores` past the machine's is named (`window --cores 3` named
/// no flag).
#[test]
fn an_error_names_the_flag_that_is_wrong() {
    let bin = |name: &str| -> &'static str {
        match name {
            "restore" => env!("CARGO_BIN_EXE_restore"),
            "snapshot" => env!("CARGO_BIN_EXE_snapshot"),
            "standby" => env!("CARGO_BIN_EXE_standby"),
            "window" => env!("CARGO_BIN_EXE_window"),
            "cep" => env!("CARGO_BIN_EXE_cep"),
            _ => unreachable!(),
        }
    };
    let many = (tandem::sys::affinity::available_cores().len() + 1).to_string();
    for (name, args, flag) in [
        ("restore", vec!["--dir", "/proc"], "--dir /proc"),
        ("snapshot", vec!["--dir", "/proc"], "--dir /proc"),
        ("standby", vec!["--dir", "/proc"], "--dir /proc"),
        ("window", vec!["--cores", many.as_str()], "--cores"),
        ("cep", vec!["--cores", many.as_str()], "--cores"),
        ("window", vec!["--records", "-5"], "--records"),
    ] {
        let o = Command::new(bin(name))
            .args(&args)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        assert_refused(&o, flag);
        assert!(
            !stderr(&o).contains("free"),
            "{name} {args:?}: {}",
            stderr(&o)
        );
    }
}

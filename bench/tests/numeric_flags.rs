//! Every numeric flag of `paper` and `chaos` at 0, 1, its type's maximum
//! and random values: never a panic (101), an abort (134), a bus error
//! (135) or a segfault (139), never a death by signal; each run ends in
//! under 10 s or is refused up front; an error is printed once, without a
//! backtrace.
//!
//! The other flags stay small (2,000 records), so an accepted run is short.
//! `TANDEM_FLAG_RANDOM` sets the random values per flag (default 3; the
//! issue's bar is 10).

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(10);

fn random_values() -> usize {
    std::env::var("TANDEM_FLAG_RANDOM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 0, 1, the type's maximum (and u64's, and u32's) and random values,
/// uniform over u64.
fn values(max: &str, seed: u64) -> Vec<String> {
    let mut v: Vec<String> = ["0", "1", max, "18446744073709551615", "4294967295"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut s = seed;
    for _ in 0..random_values() {
        v.push(splitmix(&mut s).to_string());
    }
    v.dedup();
    v
}

struct Case {
    flag: &'static str,
    /// The largest value of its type.
    max: &'static str,
    /// Flags that make it take effect (and keep the run small).
    base: &'static [&'static str],
}

/// Runs `bin base… flag value` in a temp dir; returns a failure message,
/// or `None` when it ended as it should.
fn run(bin: &str, case: &Case, value: &str, tmp: &PathBuf) -> Option<String> {
    let mut cmd = Command::new(bin);
    cmd.args(case.base)
        .args([case.flag, value])
        .env("TMPDIR", tmp)
        .env("RUST_BACKTRACE", "1")
        .current_dir(tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let what = format!("{} {} {value}", case.base.join(" "), case.flag);
    let mut child = cmd.spawn().unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Some(format!("{what}: still running after {LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = {
        use std::io::Read;
        let mut s = String::new();
        child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
        s
    };
    if let Some(sig) = status.signal() {
        return Some(format!("{what}: killed by signal {sig}\n{err}"));
    }
    let code = status.code().unwrap();
    if matches!(code, 101 | 134 | 135 | 139) || err.contains("panicked at") {
        return Some(format!("{what}: exit {code}\n{err}"));
    }
    if err.contains("stack backtrace") || err.contains("Stack backtrace") {
        return Some(format!("{what}: printed a backtrace\n{err}"));
    }
    if code != 0 && err.matches("error:").count() != 1 {
        return Some(format!("{what}: exit {code}, not one error line\n{err}"));
    }
    None
}

/// Drives every case's values, two runs at a time (the CI machine's
/// cores); panics with every failure found.
fn drive(bin: &'static str, cases: &[Case], tag: &str) {
    let tmp_root =
        std::env::temp_dir().join(format!("tandem-numbers-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp_root);
    let mut jobs = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        for v in values(c.max, 0x007A_4DE3 + i as u64) {
            jobs.push((i, v));
        }
    }
    let jobs = std::sync::Mutex::new(jobs);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for w in 0..2 {
            let (jobs, failures, tmp_root) = (&jobs, &failures, &tmp_root);
            s.spawn(move || loop {
                let Some((i, v)) = jobs.lock().unwrap().pop() else {
                    return;
                };
                let tmp = tmp_root.join(format!("{w}"));
                let _ = std::fs::remove_dir_all(&tmp);
                std::fs::create_dir_all(&tmp).unwrap();
                if let Some(f) = run(bin, &cases[i], &v, &tmp) {
                    failures.lock().unwrap().push(f);
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&tmp_root);
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n---\n")
    );
}

const U64: &str = "18446744073709551615";
const U32: &str = "4294967295";

#[test]
fn every_numeric_flag_of_paper_is_refused_or_runs_briefly_never_a_crash() {
    const SMALL: &[&str] = &["--records", "2000"];
    const RESTART: &[&str] = &["--records", "2000", "--strategy", "restart-all"];
    const BQBS: &[&str] = &[
        "--records",
        "2000",
        "--strategy",
        "bqbs",
        "--standby",
        "keyed",
    ];
    let case = |flag, max, base| Case { flag, max, base };
    let cases = [
        case("--records", U64, &[]),
        case("--max-record-bytes", U64, SMALL),
        case("--rate", "1e308", &["--records", "5"]),
        case("--seed", U64, SMALL),
        case("--cores", U64, SMALL),
        case("--parallelism", U64, SMALL),
        case("--ring-capacity", U64, SMALL),
        case("--malformed-every", U64, SMALL),
        case("--idle-spin-us", U64, SMALL),
        case("--idle-yield-us", U64, SMALL),
        case("--standby-heartbeat-ms", U64, BQBS),
        case("--standby-snapshot-ms", U64, BQBS),
        case("--standby-queue-mib", U64, BQBS),
        case("--checkpoint-interval-ms", U64, RESTART),
        case("--checkpoint-timeout-ms", U64, RESTART),
        case("--tolerable-checkpoint-failures", U32, RESTART),
        case("--min-pause-ms", U64, RESTART),
        case("--retain", U64, RESTART),
        case("--heartbeat-timeout-ms", U64, RESTART),
        case("--savepoint-after-ms", U64, RESTART),
        case(
            "--metrics-linger-s",
            U64,
            &["--records", "2000", "--metrics-addr", "127.0.0.1:0"],
        ),
    ];
    drive(env!("CARGO_BIN_EXE_paper"), &cases, "paper");
}

#[test]
fn numbers_inside_paper_specs_are_refused_or_run_briefly_never_a_crash() {
    // Numbers inside the fault language, the restart strategy and the
    // adaptive interval: each case is a prefix the value completes.
    let mut failures = Vec::new();
    let tmp = std::env::temp_dir().join(format!("tandem-numbers-specs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let specs: &[(&str, &str, &str)] = &[
        ("--fault", "panic@flatmap:", ""),
        ("--fault", "panic@flatmap:~", ""),
        ("--fault", "panic@flatmap:%", ""),
        ("--fault", "panic@flatmap:5*", ""),
        ("--fault", "panic@flatmap:0/", ""),
        ("--fault", "panic@flatmap:+", "ms"),
        ("--fault", "stall@flatmap:5:", ""),
        ("--fault", "slow@flatmap:5:", "x10"),
        ("--fault", "slow@flatmap:5:10x", ""),
        ("--fault", "mute@flatmap:5:", ""),
        ("--fault", "commit@sink:", ""),
        ("--fault-schedule", "random:1:", ""),
        ("--fault-schedule", "random:", ":2"),
        ("--restart", "fixed:", ":0ms"),
        ("--restart", "fixed:3:", "s"),
        ("--restart", "exp:1ms:", "s:2:0.1:1s"),
        ("--restart", "rate:", ":1s:0ms"),
        ("--adaptive-interval", "1ms:", "s"),
    ];
    for (i, (flag, before, after)) in specs.iter().enumerate() {
        for v in values(U64, 0x5BEC + i as u64) {
            let value = format!("{before}{v}{after}");
            let leaked: &'static str = Box::leak(value.clone().into_boxed_str());
            let base: &'static [&'static str] = &[
                "--records",
                "2000",
                "--strategy",
                "restart-all",
                "--output",
                "out.jsonl",
            ];
            let c = Case {
                flag,
                max: "",
                base,
            };
            if let Some(f) = run(env!("CARGO_BIN_EXE_paper"), &c, leaked, &tmp) {
                failures.push(f);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n---\n")
    );
}

#[test]
fn every_numeric_flag_of_chaos_is_refused_or_runs_briefly_never_a_crash() {
    const BASE: &[&str] = &[
        "--schedules",
        "1",
        "--records",
        "2000",
        "--strategies",
        "restart-all",
        "--quiet",
    ];
    let case = |flag, max, base| Case { flag, max, base };
    let cases = [
        case(
            "--schedules",
            U64,
            &[
                "--records",
                "2000",
                "--strategies",
                "restart-all",
                "--quiet",
            ],
        ),
        case(
            "--records",
            U64,
            &["--schedules", "1", "--strategies", "restart-all", "--quiet"],
        ),
        case("--seed", U64, BASE),
        case("--max-faults", U64, BASE),
        case("--cores", U64, BASE),
        case("--timeout-s", U64, BASE),
        case(
            "--repeat",
            U64,
            &[
                "--records",
                "2000",
                "--strategies",
                "restart-all",
                "--only",
                "restart-all:0",
                "--quiet",
            ],
        ),
    ];
    drive(env!("CARGO_BIN_EXE_chaos"), &cases, "chaos");
}

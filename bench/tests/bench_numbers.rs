//! Every numeric flag of the `ring`, `standby`, `snapshot` and `restore`
//! benchmarks, at 0, 1, its documented maximum, one past it, its type's
//! maximum and seeded random values spread log-uniformly over the whole
//! `u64` range, the other flags small:
//!
//! - no run dies by a signal or exits 101, 134, 135 or 139 (a panic, an
//!   abort, `SIGBUS`, `SIGSEGV`), and every run ends within 10 s;
//! - a value outside the documented range is refused up front — nothing on
//!   standard output — with an error naming the flag; a value inside it is
//!   accepted, unless what this machine has (memory, disk, cores) refuses
//!   it, again naming the flag;
//! - an accepted run with a small value finishes on its own; one with a
//!   large value (a count of a million messages, a hundred runs) may run
//!   long, and is stopped with `SIGINT` after 2 s — it must then exit 130
//!   at once;
//! - no run, refused, finished or interrupted, leaves a file in the
//!   directory it writes in.
//!
//! The values of one flag run side by side (those that may each take much
//! memory or disk, one after another). The seed is fixed; set
//! `BENCH_NUMBERS_SEED` to draw other values, and `TANDEM_FLAG_RANDOM` for
//! more than 4 random values a flag (the bar is 10).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tandem_fault_inject::schedule::SplitMix64;

/// A run still going after this long with a large value is sent `SIGINT`.
const INTERRUPT_AT: Duration = Duration::from_secs(2);
/// Every run ends within this, or the test fails.
const DEADLINE: Duration = Duration::from_secs(10);
/// Random values drawn per flag (`TANDEM_FLAG_RANDOM` overrides).
fn random_values() -> usize {
    std::env::var("TANDEM_FLAG_RANDOM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// One numeric flag and what its help promises.
struct Flag {
    name: &'static str,
    /// The documented range.
    min: u64,
    max: u64,
    /// The largest value of the flag's type (beyond it, clap refuses).
    type_max: u64,
    /// Values up to this must finish on their own, in time.
    quick: u64,
    /// Whether a value in range may still be refused for what the machine
    /// has (memory, disk space, cores).
    machine_bound: bool,
    /// Whether values run one after another (each may take much memory or
    /// disk), not side by side.
    one_at_a_time: bool,
}

impl Flag {
    fn new(name: &'static str, min: u64, max: u64, type_max: u64, quick: u64) -> Self {
        Flag {
            name,
            min,
            max,
            type_max,
            quick,
            machine_bound: false,
            one_at_a_time: false,
        }
    }

    fn machine_bound(mut self) -> Self {
        self.machine_bound = true;
        self
    }

    fn one_at_a_time(mut self) -> Self {
        self.one_at_a_time = true;
        self
    }
}

/// A benchmark binary, the small flags every run gets, and its numeric
/// flags.
struct Bench {
    exe: &'static str,
    base: Vec<(&'static str, u64)>,
    /// Flags other than numbers every run gets.
    fixed: &'static [&'static str],
    /// Whether it takes `--dir` (else it runs in that directory).
    dir_flag: bool,
    flags: Vec<Flag>,
}

/// The values a flag is tried at.
fn values(exe: &str, flag: &Flag, seed: u64) -> Vec<u64> {
    let mut v = vec![0, 1, flag.max, flag.max.saturating_add(1), flag.type_max];
    let salt = exe
        .bytes()
        .chain(flag.name.bytes())
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mut rng = SplitMix64(seed ^ salt);
    for _ in 0..random_values() {
        // Log-uniform: a bit length 0..=64, then that many random bits.
        let bits = rng.below(65);
        v.push(match bits {
            0 => 0,
            b => (rng.next_u64() >> (64 - b)) | (1 << (b - 1)),
        });
    }
    v.sort_unstable();
    v.dedup();
    v
}

fn seed() -> u64 {
    std::env::var("BENCH_NUMBERS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2024)
}

/// A fresh, empty directory for one run: `dir` for it to write in,
/// beside its standard output and error.
struct Place {
    root: PathBuf,
}

impl Place {
    fn new(bench: &str, flag: &str, value: u64) -> Self {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "bench-numbers-{}/{bench}{flag}-{value}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("dir")).unwrap();
        Place { root }
    }

    fn dir(&self) -> PathBuf {
        self.root.join("dir")
    }

    fn read(&self, name: &str) -> String {
        String::from_utf8_lossy(&std::fs::read(self.root.join(name)).unwrap_or_default())
            .into_owned()
    }

    fn listing(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
        // The parent goes with the last run (it fails while others are in it).
        let _ = std::fs::remove_dir(self.root.parent().unwrap());
    }
}

/// One run under way.
struct Run {
    value: u64,
    place: Place,
    child: Child,
    started: Instant,
    interrupted: bool,
}

fn start(bench: &Bench, flag: &Flag, value: u64) -> Run {
    let place = Place::new(
        Path::new(bench.exe).file_name().unwrap().to_str().unwrap(),
        flag.name,
        value,
    );
    let mut cmd = Command::new(bench.exe);
    for (name, v) in &bench.base {
        if *name != flag.name {
            cmd.arg(name).arg(v.to_string());
        }
    }
    cmd.args(bench.fixed);
    cmd.arg(flag.name).arg(value.to_string());
    if bench.dir_flag {
        cmd.arg("--dir").arg(place.dir());
    }
    let out = std::fs::File::create(place.root.join("out")).unwrap();
    let err = std::fs::File::create(place.root.join("err")).unwrap();
    let child = cmd
        .current_dir(place.dir())
        .env("TMPDIR", place.dir())
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    Run {
        value,
        place,
        child,
        started: Instant::now(),
        interrupted: false,
    }
}

/// What is wrong with a run that ended (`None`: killed at the deadline).
fn judge(bench: &Bench, flag: &Flag, run: &Run, status: Option<ExitStatus>) -> Vec<String> {
    let v = run.value;
    let (out, err) = (run.place.read("out"), run.place.read("err"));
    let mut problems = Vec::new();
    let in_range = (flag.min..=flag.max).contains(&v);
    match status {
        None => problems.push(format!("still running after {DEADLINE:?}: killed")),
        Some(s) if s.signal().is_some() => {
            problems.push(format!("killed by signal {}", s.signal().unwrap()))
        }
        Some(s) => match s.code().unwrap() {
            0 if !in_range => {
                problems.push(format!("accepted, outside {}..={}", flag.min, flag.max))
            }
            0 => {}
            1 | 2 => {
                if !err.contains(flag.name) {
                    problems.push("refused without naming the flag".into());
                }
                if !out.is_empty() {
                    problems.push("refused after it had begun (standard output written)".into());
                }
                if in_range && !flag.machine_bound {
                    problems.push(format!("refused, inside {}..={}", flag.min, flag.max));
                }
            }
            130 if run.interrupted => {
                if !err.contains("interrupted by SIGINT") {
                    problems.push("exited 130 without saying it was interrupted".into());
                }
            }
            c => problems.push(format!("exit status {c}")),
        },
    }
    if err.contains("panicked") || err.contains("backtrace") {
        problems.push("a panic or a backtrace on standard error".into());
    }
    let left = run.place.listing();
    if !left.is_empty() {
        problems.push(format!("left {left:?} behind"));
    }
    let exe = Path::new(bench.exe).file_name().unwrap().to_string_lossy();
    problems
        .into_iter()
        .map(|p| {
            format!(
                "{exe} {} {v}: {p} ({:.1} s; stderr: {})",
                flag.name,
                run.started.elapsed().as_secs_f64(),
                err.trim_end()
            )
        })
        .collect()
}

/// Runs `values` of `flag` side by side; the problems found.
fn run_values(bench: &Bench, flag: &Flag, values: &[u64]) -> Vec<String> {
    let mut running: Vec<Run> = values.iter().map(|&v| start(bench, flag, v)).collect();
    let mut problems = Vec::new();
    while !running.is_empty() {
        std::thread::sleep(Duration::from_millis(20));
        let mut i = 0;
        while i < running.len() {
            let r = &mut running[i];
            let status = match r.child.try_wait().unwrap() {
                Some(s) => Some(Some(s)),
                None if r.started.elapsed() > DEADLINE => {
                    let _ = r.child.kill();
                    let _ = r.child.wait();
                    Some(None)
                }
                None => {
                    let long = r.value > flag.quick && (flag.min..=flag.max).contains(&r.value);
                    if long && !r.interrupted && r.started.elapsed() > INTERRUPT_AT {
                        // SAFETY: a signal to our own child, which has not
                        // been waited for (its pid is not reused).
                        unsafe { libc::kill(r.child.id() as i32, libc::SIGINT) };
                        r.interrupted = true;
                    }
                    None
                }
            };
            match status {
                Some(status) => {
                    let r = running.swap_remove(i);
                    problems.extend(judge(bench, flag, &r, status));
                }
                None => i += 1,
            }
        }
    }
    problems
}

fn check(bench: &Bench) {
    let seed = seed();
    let mut problems = Vec::new();
    for flag in &bench.flags {
        let exe = Path::new(bench.exe).file_name().unwrap().to_string_lossy();
        let vs = values(&exe, flag, seed);
        eprintln!("{exe} {}: {vs:?}", flag.name);
        if flag.one_at_a_time {
            for v in vs {
                problems.extend(run_values(bench, flag, &[v]));
            }
        } else {
            problems.extend(run_values(bench, flag, &vs));
        }
    }
    assert!(problems.is_empty(), "seed {seed}:\n{}", problems.join("\n"));
}

const U64: u64 = u64::MAX;
const USIZE: u64 = usize::MAX as u64;

#[test]
fn ring_takes_any_number_in_every_flag_without_crashing_or_hanging() {
    let cores = tandem::sys::affinity::available_cores();
    let last_core = *cores.last().unwrap() as u64;
    check(&Bench {
        exe: env!("CARGO_BIN_EXE_ring"),
        base: vec![
            ("--messages", 1000),
            ("--batch", 2),
            ("--capacity", 4096),
            ("--runs", 1),
        ],
        fixed: &[],
        dir_flag: false,
        flags: vec![
            Flag::new("--messages", 1, 100_000_000_000, U64, 100_000),
            Flag::new("--batch", 1, 4096, USIZE, 4096),
            Flag::new("--capacity", 2, 1 << 22, USIZE, USIZE).machine_bound(),
            Flag::new("--producer-core", 0, last_core, USIZE, USIZE).machine_bound(),
            Flag::new("--consumer-core", 0, last_core, USIZE, USIZE).machine_bound(),
            Flag::new("--runs", 1, 1000, USIZE, 20),
        ],
    });
}

#[test]
fn standby_takes_any_number_in_every_flag_without_crashing_or_hanging() {
    check(&Bench {
        exe: env!("CARGO_BIN_EXE_standby"),
        base: vec![
            ("--tuples", 1000),
            ("--tuple-bytes", 64),
            ("--bq-memory", 1 << 20),
            ("--messages", 1000),
            ("--samples", 1),
            ("--timeout-ms", 1),
            ("--log-entries", 1000),
        ],
        fixed: &[],
        dir_flag: true,
        flags: vec![
            Flag::new("--tuples", 1, 100_000_000_000, U64, 100_000),
            // At most a quarter of the queue's arena: less than its memory.
            Flag::new("--tuple-bytes", 1, 1 << 20, USIZE, USIZE).machine_bound(),
            Flag::new("--bq-memory", 1, 64 << 30, U64, U64)
                .machine_bound()
                .one_at_a_time(),
            Flag::new("--messages", 1, 100_000_000_000, U64, 100_000),
            Flag::new("--samples", 1, 100_000, USIZE, 100),
            Flag::new("--timeout-ms", 1, 1000, U64, U64),
            Flag::new("--log-entries", 1, 100_000_000_000, U64, 100_000),
        ],
    });
}

#[test]
fn snapshot_takes_any_number_in_every_flag_without_crashing_or_hanging() {
    check(&Bench {
        exe: env!("CARGO_BIN_EXE_snapshot"),
        base: vec![
            ("--sizes-mb", 1),
            ("--runs", 1),
            ("--small-sets", 1),
            ("--small-files", 1),
        ],
        fixed: &[],
        dir_flag: true,
        flags: vec![
            Flag::new("--sizes-mb", 1, 100_000, U64, 16)
                .machine_bound()
                .one_at_a_time(),
            Flag::new("--runs", 1, 100, USIZE, 2),
            Flag::new("--small-sets", 0, 1000, USIZE, 5),
            Flag::new("--small-files", 1, 1000, u64::from(u32::MAX), 100),
        ],
    });
}

#[test]
fn restore_takes_any_number_in_every_flag_without_crashing_or_hanging() {
    check(&Bench {
        exe: env!("CARGO_BIN_EXE_restore"),
        base: vec![
            ("--state-mb", 1),
            ("--runs", 1),
            ("--checkpoint-interval-ms", 100),
            ("--rate", 20_000),
            ("--outputs-after-restart", 100),
            ("--heartbeat-timeout-ms", 2000),
        ],
        // The page cache is left alone (the test may run as root).
        fixed: &["--cold", "false"],
        dir_flag: true,
        flags: vec![
            // Within the memory (6 times) and the disk (3 times) left.
            Flag::new("--state-mb", 1, 2000, U64, 16)
                .machine_bound()
                .one_at_a_time(),
            Flag::new("--runs", 1, 100, USIZE, 2),
            // A run waits for a checkpoint after its inserts.
            Flag::new("--checkpoint-interval-ms", 10, 600_000, U64, 1000),
            Flag::new("--rate", 100, 1_000_000, U64, U64),
            // 20 000 a second by default.
            Flag::new("--outputs-after-restart", 1, 10_000_000, U64, 20_000),
            Flag::new("--heartbeat-timeout-ms", 1, 600_000, U64, U64),
        ],
    });
}

//! Cold restore of a large keyed state under restart-all: fault → first
//! output, measured on a job that holds `--state-mb` of keyed state.
//!
//! The bar it measures: *a job with 500 MB of keyed state, killed and
//! restored from its checkpoint (restart-all), cold page cache: fault →
//! first output ≤ 200 ms.*
//!
//! **The job** (built with the public embedding API, as a user would):
//! one source partition → `key_by(key)` → `process("count")`, a
//! [`KeyedProcess`](tandem::KeyedProcess) whose per-key state is `(count, sum)` — a
//! `KeyedState<u64, (u64, u64)>`, about 24 bytes a key archived — → a
//! sink that checks every output. Every operator runs with parallelism 1,
//! so one instance of `count` holds the whole state and restores it alone.
//! The source first emits each key `0..K` once (K = state bytes / 24) as
//! fast as the job takes them, then *updates*: record `K + j` hits key
//! `(a·(j mod K) + b) mod K` (an affine permutation: pseudo-random, and
//! every key once per K updates), paced at `--rate` records a second on a
//! fixed schedule (the engine's `rate_limit` would pace the inserts too).
//! Each record emits `(seq, key, count, sum)`.
//!
//! **Exact output.** The count and sum of every output follow from its
//! sequence number alone ([`job::Plan::expect`]), so the sink checks each one;
//! it also checks that each attempt's outputs are consecutive, and that the
//! restarted attempt starts at the restored checkpoint's source position. A
//! wrong, lost or repeated output fails the run (exit status 1).
//!
//! **One run.** Checkpoints go to a fresh scratch directory under `--dir`
//! every `--checkpoint-interval-ms` (incremental, the engine's default;
//! `--whole-checkpoints` writes every one whole). Once a checkpoint whose
//! `count` snapshot covers every key is published (its manifest read from
//! the store directory), the main thread — with `--cold` — `sync`s and
//! writes `3` to `/proc/sys/vm/drop_caches`, and only then arms the fault:
//! the next record `count` takes panics (a probe, the engine's fault
//! injection seam; said in one line on standard error, `thread
//! 'tandem-w0': injected fault in `count` …`, no backtrace). Dropping the cache is thus not part of the measured
//! recovery; the few milliseconds between the drop and the fault are spent
//! running the job, which reads none of the checkpoint's files. After
//! `--outputs-after-restart` outputs of the restarted attempt, the source
//! ends, and the job's `JobReport` gives the restart-all recovery: detect
//! (fault → the supervisor noticed), restore (detection → every worker
//! built and restored) and first output (fault → the first record at a
//! sink after the restart).
//!
//! `--runs` runs; the medians of first output and restore are printed
//! with each run's line. Every flag is checked before any work (the error
//! names the flag): the state must fit the memory this process may still
//! take (about 6 times the state: the live hash table, a checkpoint's
//! archive, the restore's mapping and the restored table) and the free
//! space of `--dir` (3 times: the checkpoints a chain and retention keep).
//! Everything is written in `tandem-restore_bench-<pid>-…` under `--dir`
//! (default the system temp dir), removed at the end of each run — after
//! an error or a signal too (`SIGINT`/`SIGTERM` cancel the job; exit
//! 128 + the signal).
//!
//! ```text
//! cargo run -p tandem-bench --release --bin restore -- --state-mb 500 --runs 5 --report restore.json
//! ```

use std::{fs::OpenOptions, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use serde::Serialize;
use tandem::sys::{fs::human_bytes, scratch::ScratchDir};

mod job;
mod run;

use run::{one_run, RunResult};
use tandem_bench::cli::interrupted;
use tandem_bench::{cleanup, outln};

/// The largest state, in MB: one operator instance archives it in one
/// rkyv payload, which holds at most 2 GiB.
const MAX_STATE_MB: u64 = 2000;
/// The most runs: each builds the whole state again.
const MAX_RUNS: usize = 100;
/// Archived bytes a key of `KeyedState<u64, (u64, u64)>` takes: the key
/// and the two counters.
const ENTRY_BYTES: u64 = 24;
/// Memory the state takes, as a multiple of its archived bytes: the live
/// hash table (up to twice its entries and more while it grows), a
/// checkpoint's archive, the restore's mapping and the restored table.
const MEMORY_PER_BYTE: u64 = 6;
/// Disk the checkpoints take, as a multiple of the state: a chain reads at
/// most about twice the state, and retention keeps the sets it reads.
const DISK_PER_BYTE: u64 = 3;
/// The bar this binary measures against: fault → first output.
const BAR_MS: f64 = 200.0;
/// The keyed operator's name (the probe's target, the manifest's entry).
const KEYED: &str = "count";
/// How often the main thread looks at the job and the store.
const POLL: Duration = Duration::from_millis(2);
/// Longest wait for the armed fault to fire (the keyed operator takes a
/// record at least every 1/`--rate` seconds).
const FIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait, after the fault, for the restarted attempt's outputs.
const RESTART_TIMEOUT: Duration = Duration::from_secs(600);
/// Where the page cache is dropped.
const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// How the job recovers from the fault.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Strategy {
    /// Checkpoints every `--checkpoint-interval-ms`; the fault restarts
    /// every worker from the newest one.
    RestartAll,
    /// A warm standby of `count` on the other core (no checkpoints): the
    /// fault is a takeover from the newest recovery point.
    Bqbs,
}

/// Recovery of a large keyed state: fault → first output, restore time,
/// checkpoint size — under restart-all from a cold page cache, or by a
/// warm standby's takeover.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Keyed state in MB (10^6 bytes, 24 bytes a key), 1 to 2000, within
    /// the memory this process may still take (about 6 times the state)
    /// and the free space of --dir (3 times).
    #[arg(long, default_value_t = 500)]
    state_mb: u64,
    /// Runs, 1 to 100; the medians are reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Directory to write the checkpoints in (default: the system temp
    /// dir): in a fresh subdirectory, removed at the end of each run.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Time between two checkpoints' starts, in ms (10 to 600000).
    #[arg(long, default_value_t = 2000)]
    checkpoint_interval_ms: u64,
    /// Write every checkpoint whole (default: incremental, the engine's
    /// default: deltas over the last whole archive).
    #[arg(long)]
    whole_checkpoints: bool,
    /// How the job recovers: `restart-all` (checkpoints) or `bqbs` (a warm
    /// standby of `count`, no checkpoints; the fault arms once a recovery
    /// point published after the last insert is there).
    #[arg(long, value_enum, default_value_t = Strategy::RestartAll)]
    strategy: Strategy,
    /// With `--strategy bqbs`: the standby follows the recovery points'
    /// deltas, so a takeover restores nothing (`StandbyConfig::follow`).
    #[arg(long)]
    standby_follow: bool,
    /// Drop the page cache (sync, then 3 > /proc/sys/vm/drop_caches)
    /// right before the fault, so that the restore reads the checkpoint
    /// from disk: `true`, `false`, or by default `true` exactly when that
    /// file is writable (root). `--cold` alone is `--cold true`: an error
    /// if the file is not writable.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    cold: Option<bool>,
    /// Update records a second after the inserts (100 to 1000000): modest,
    /// so that the job does not race ahead of the measurement.
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// Outputs of the restarted attempt beyond those it replays (the
    /// records after the restored checkpoint that the failed attempt had
    /// output) to check before the source ends (1 to 10000000).
    #[arg(long, default_value_t = 5_000)]
    outputs_after_restart: u64,
    /// A worker without a heartbeat for this long has stalled, in ms
    /// (1 to 600000). Above the engine's default (100 ms): a poll of the
    /// job's one task takes longer with a large state (134 ms seen at 100
    /// MB as the inserts end), and a stall's restart would spoil the run.
    /// The injected panic is detected at once, whatever this is.
    #[arg(long, default_value_t = 2000)]
    heartbeat_timeout_ms: u64,
    /// Under `--strategy bqbs`: how long the primary may show no sign of
    /// life before its standby takes over, in ms (1 to 600000; the
    /// engine's default is 5). As --heartbeat-timeout-ms by default: a
    /// takeover for a stall would spoil the run as a restart would.
    #[arg(long)]
    standby_heartbeat_ms: Option<u64>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    report: Option<PathBuf>,
}

/// The checked flags: where to write, whether to drop the cache.
struct Setup {
    base: PathBuf,
    cold: bool,
    keys: u64,
}

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        let setup = check_args(&args)?;
        real_main(&args, &setup)?;
        Ok(ExitCode::SUCCESS)
    })
}

/// Checks every flag before any work starts (the error names the flag).
fn check_args(args: &Args) -> Result<Setup> {
    ensure!(
        (1..=MAX_STATE_MB).contains(&args.state_mb),
        "--state-mb {}: 1 to {MAX_STATE_MB} (one operator instance archives the state in one payload of at most 2 GiB)",
        args.state_mb
    );
    ensure!(
        (1..=MAX_RUNS).contains(&args.runs),
        "--runs {}: 1 to {MAX_RUNS}",
        args.runs
    );
    ensure!(
        (10..=600_000).contains(&args.checkpoint_interval_ms),
        "--checkpoint-interval-ms {}: 10 to 600000",
        args.checkpoint_interval_ms
    );
    ensure!(
        (100..=1_000_000).contains(&args.rate),
        "--rate {}: 100 to 1000000 records a second",
        args.rate
    );
    ensure!(
        (1..=10_000_000).contains(&args.outputs_after_restart),
        "--outputs-after-restart {}: 1 to 10000000",
        args.outputs_after_restart
    );
    ensure!(
        (1..=600_000).contains(&args.heartbeat_timeout_ms),
        "--heartbeat-timeout-ms {}: 1 to 600000",
        args.heartbeat_timeout_ms
    );
    if let Some(ms) = args.standby_heartbeat_ms {
        ensure!(
            (1..=600_000).contains(&ms),
            "--standby-heartbeat-ms {ms}: 1 to 600000"
        );
        ensure!(
            args.strategy == Strategy::Bqbs,
            "--standby-heartbeat-ms: only with --strategy bqbs"
        );
    }
    ensure!(
        !args.standby_follow || args.strategy == Strategy::Bqbs,
        "--standby-follow: only with --strategy bqbs (a standby follows the recovery points)"
    );
    ensure!(
        !args.whole_checkpoints || args.strategy == Strategy::RestartAll,
        "--whole-checkpoints: only with --strategy restart-all (bqbs takes no checkpoints)"
    );
    let base = tandem_bench::paths::work_dir("--dir", args.dir.as_deref())?;
    // At most 2·10^9 bytes: no overflow below.
    let bytes = args.state_mb * 1_000_000;
    if let Some(free) = tandem::sys::limits::available_memory() {
        ensure!(
            bytes * MEMORY_PER_BYTE <= free,
            "--state-mb {}: a keyed state of {} MB takes about {} of memory, more than the {} this process may still take",
            args.state_mb,
            args.state_mb,
            human_bytes(bytes * MEMORY_PER_BYTE),
            human_bytes(free)
        );
    }
    tandem_bench::paths::check_free(
        &format!("--state-mb {}", args.state_mb),
        bytes * DISK_PER_BYTE,
        &base,
        args.dir.is_some(),
    )?;
    let writable = drop_caches_writable();
    let cold = match (args.cold, &writable) {
        (Some(true), Err(why)) => bail!(
            "--cold: cannot drop the page cache: {DROP_CACHES} is not writable ({why}); \
             run as root, or pass --cold false"
        ),
        (Some(c), _) => c,
        (None, w) => w.is_ok(),
    };
    if let Some(r) = &args.report {
        tandem_bench::paths::output_file("--report", r)?;
    }
    Ok(Setup {
        base,
        cold,
        keys: bytes / ENTRY_BYTES,
    })
}

/// Whether this process may write `/proc/sys/vm/drop_caches` (opened for
/// writing, nothing written).
fn drop_caches_writable() -> std::io::Result<()> {
    OpenOptions::new().write(true).open(DROP_CACHES).map(drop)
}

#[derive(Serialize)]
struct Report {
    state_mb: u64,
    keys: u64,
    strategy: Strategy,
    standby_follow: bool,
    runs: usize,
    cold: bool,
    checkpoint_interval_ms: u64,
    incremental: bool,
    rate: u64,
    dir: String,
    /// Medians over the runs.
    first_output_ms: f64,
    restore_ms: f64,
    detect_ms: f64,
    /// Median fault → caught up, over the runs that measured it.
    caught_up_ms: Option<f64>,
    state_bytes: Option<u64>,
    bar_ms: f64,
    per_run: Vec<RunResult>,
}

fn real_main(args: &Args, setup: &Setup) -> Result<()> {
    // The injected fault is a panic. Before the first job starts (the
    // engine's hook chains to the one installed before it): a hook that
    // says it in one line on the worker — `thread 'tandem-w0': injected
    // fault …` — without a backtrace, whatever `RUST_BACKTRACE` says. The
    // fault's backtrace says nothing (it is this binary's probe), and
    // resolving its symbols would read the binary's debug info while the
    // restore runs — from disk, right after the page cache was dropped.
    // Nor is a successful run's standard error to read as a crash.
    tandem_fault_inject::quiet_injected_panics();
    // Directories of killed runs (their lock free) go first.
    tandem::sys::scratch::sweep(&setup.base);
    let recovery = match args.strategy {
        Strategy::RestartAll => format!(
            "restart-all, checkpoints every {} ms ({})",
            args.checkpoint_interval_ms,
            if args.whole_checkpoints {
                "whole"
            } else {
                "incremental"
            }
        ),
        Strategy::Bqbs if args.standby_follow => {
            "a warm standby of `count` that follows the recovery points' deltas".to_string()
        }
        Strategy::Bqbs => "a warm standby of `count` (restores the newest recovery point)".into(),
    };
    outln!(
        "restore: {} MB of keyed state ({} keys, one `{KEYED}` instance holds it all), {recovery}, updates at {} records/s; cold page cache: {}",
        args.state_mb,
        setup.keys,
        args.rate,
        if setup.cold {
            "yes (sync + drop_caches in the main thread, before the fault is armed: not counted)"
        } else {
            "no"
        }
    )?;
    let mut runs = Vec::with_capacity(args.runs);
    for n in 1..=args.runs {
        ensure!(!interrupted(), "interrupted");
        let r = {
            let scratch = ScratchDir::unique(&setup.base, "restore_bench")
                .with_context(|| format!("creating a directory in {}", setup.base.display()))?;
            cleanup::add(scratch.path());
            let r = one_run(args, setup, n, scratch.path())?;
            scratch.remove()?;
            r
        };
        let restored = match (
            r.restored_checkpoint,
            r.state_bytes,
            r.state_files,
            r.whole_bytes,
            r.file_bytes,
        ) {
            (Some(id), Some(state), Some(files), Some(whole), Some(disk)) => format!(
                "restored checkpoint {id} — `{KEYED}` state {} in {files} file{} ({} whole), {} on disk",
                fmt_mb(state),
                if files == 1 { "" } else { "s" },
                fmt_mb(whole),
                fmt_mb(disk),
            ),
            _ => "taken over by the standby".to_string(),
        };
        outln!(
            "run {n}: first output {:.1} ms (fault → first output), restore {:.1} ms, detect {:.2} ms, caught up {}; \
             {restored}; {} replayed, {} outputs after the fault checked; inserts {:.1} s, run {:.1} s{}",
            r.first_output_ms,
            r.restore_ms,
            r.detect_ms,
            r.caught_up_ms.map_or("-".into(), |c| format!("{c:.1} ms")),
            r.replayed,
            r.outputs_after_restart,
            r.insert_s,
            r.run_s,
            if r.cold {
                format!(
                    "; page cache dropped (sync {:.0} ms, drop {:.0} ms)",
                    r.sync_ms, r.drop_ms
                )
            } else {
                String::new()
            }
        )?;
        runs.push(r);
    }
    let med = |f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    let (first, restore, detect) = (
        med(|r| r.first_output_ms),
        med(|r| r.restore_ms),
        med(|r| r.detect_ms),
    );
    let states: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.state_bytes.map(|b| b as f64))
        .collect();
    let state = (!states.is_empty()).then(|| median(states) as u64);
    let caught: Vec<f64> = runs.iter().filter_map(|r| r.caught_up_ms).collect();
    let caught_up = (!caught.is_empty()).then(|| median(caught));
    let range = |f: fn(&RunResult) -> f64| {
        let v: Vec<f64> = runs.iter().map(f).collect();
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    };
    let (fmin, fmax) = range(|r| r.first_output_ms);
    let (rmin, rmax) = range(|r| r.restore_ms);
    outln!(
        "median of {}: first output {first:.1} ms (min {fmin:.1}, max {fmax:.1}), restore {restore:.1} ms (min {rmin:.1}, max {rmax:.1}), detect {detect:.2} ms, caught up {}; \
         {}; {} page cache; bar: first output ≤ {BAR_MS:.0} ms — {}",
        args.runs,
        caught_up.map_or("-".into(), |c| format!("{c:.1} ms")),
        state.map_or("taken over by the standby".into(), |s| format!(
            "state {} read by the restore",
            fmt_mb(s)
        )),
        if setup.cold { "cold" } else { "warm" },
        if first <= BAR_MS { "met" } else { "missed" }
    )?;
    if let Some(path) = &args.report {
        let report = Report {
            state_mb: args.state_mb,
            keys: setup.keys,
            strategy: args.strategy,
            standby_follow: args.standby_follow,
            runs: args.runs,
            cold: setup.cold,
            checkpoint_interval_ms: args.checkpoint_interval_ms,
            incremental: !args.whole_checkpoints,
            rate: args.rate,
            dir: setup.base.display().to_string(),
            first_output_ms: first,
            restore_ms: restore,
            detect_ms: detect,
            caught_up_ms: caught_up,
            state_bytes: state,
            bar_ms: BAR_MS,
            per_run: runs,
        };
        tandem_bench::report::write_json("--report", path, &report)?;
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn fmt_mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

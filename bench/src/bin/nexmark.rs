//! Nexmark on Tandem: one query over the generated events, its events/s
//! (per core, the generator included: it runs on the job's cores) and
//! latency — optionally with checkpoints and restarts or an active standby,
//! and injected faults.
//!
//! ```text
//! cargo run -p tandem-bench --release --bin nexmark -- --query q5 --events 10000000
//! ```
//!
//! Prints the events/s, the events/s per core, the results and the
//! latency percentiles (source release to sink); `--report FILE` writes
//! them as JSON, `--output FILE` the results (one JSON object per line,
//! sorted), `--dump-input FILE` the events.

use anyhow::{bail, ensure, Context};
use clap::Parser;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tandem::{CheckpointConfig, RestartStrategy, RuntimeConfig, StandbyConfig, StandbyMode};
use tandem_bench::nexmark;
use tandem_bench::nexmark::gen::{GenConfig, Tables, DEFAULT_BASE_TIME_MS, DEFAULT_RATE};
use tandem_bench::nexmark::queries::{self, event_json, Options, Query};
use tandem_bench::report::{fmt_bytes, fmt_ns, write_json, LatencyNs};
use tandem_bench::{cleanup, errln, outln, paths};

/// What recovers from a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Strategy {
    /// None: a fault fails the run.
    None,
    /// Checkpoints (`--checkpoint-interval-ms`); a failure restarts every
    /// operator from the last one.
    RestartAll,
    /// Checkpoints; a failure restarts only the failed task's failover
    /// region from the last one (a query whose exchanges join every
    /// instance is one region, and restarts whole).
    Region,
    /// An active standby on the `--standby` operator takes over.
    Bqbs,
    /// Both: the standby takes over its operator's failures; checkpoints
    /// and a restart recover the rest.
    Both,
}

/// `--standby-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Snapshots at an interval; a takeover restores one and replays.
    Warm,
    /// Follows the input; a takeover replays a few chunks.
    Hot,
}

#[derive(Parser, Debug)]
#[command(about = "Nexmark queries on Tandem: events/s per core and latency")]
struct Args {
    /// The query.
    #[arg(long, value_enum)]
    query: Query,
    /// Events to generate (1 to 10,000,000,000).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Events per second of event time (the times the events carry,
    /// whether or not the run is `--paced`).
    #[arg(long, default_value_t = DEFAULT_RATE)]
    rate: f64,
    /// Paces the sources to `--rate` (default: as fast as they go).
    #[arg(long)]
    paced: bool,
    /// Seeds the generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Event 0's time, ms since the epoch.
    #[arg(long, default_value_t = DEFAULT_BASE_TIME_MS)]
    base_time_ms: u64,
    /// Worker cores (default: every available one); the source and every
    /// operator run one instance per core.
    #[arg(long)]
    cores: Option<usize>,
    /// What recovers from a failure.
    #[arg(long, value_enum, default_value_t = Strategy::None)]
    strategy: Strategy,
    /// The operator with an active standby (`--strategy bqbs`; default:
    /// the query's first operator): `window`, `join`, … (see README).
    #[arg(long)]
    standby: Option<String>,
    /// The standby's mode: `warm` (restores the primary's latest snapshot
    /// and replays from it) or `hot` (follows the primary's input into
    /// its own state; no snapshots — for large state).
    #[arg(long, value_enum, default_value_t = Mode::Warm)]
    standby_mode: Mode,
    /// How long a primary may show no sign of life (while its thread is
    /// busy, not merely descheduled) before its standby takes over; the
    /// standby waits up to 8 × this on a machine it sees to be noisy.
    #[arg(long, default_value_t = 5)]
    heartbeat_timeout_ms: u64,
    /// A warm standby follows the recovery points: each point after the
    /// first is a delta it applies to its own copy, and a takeover
    /// restores nothing (see the README for its limit).
    #[arg(long)]
    standby_follow: bool,
    /// Recovery point interval while a warm standby follows the points
    /// (each point a delta it applies); the engine's default when not
    /// given.
    #[arg(long)]
    standby_delta_ms: Option<u64>,
    /// MiB of each buffer queue of the standby (one per upstream instance
    /// and operator instance, in /dev/shm or the work directory). The
    /// primary takes a recovery point at the latest when a queue is full
    /// of entries no point covers; at 10 M events/s a 16 MiB queue fills
    /// in about 50 ms, and each point archives the operator's whole state.
    /// Default: 1 GiB over the cores² queues, 16 to 128 MiB each (128 on
    /// 2 cores, 16 from 8 cores on, where each queue carries less).
    #[arg(long)]
    queue_mb: Option<u64>,
    /// Checkpoint interval of `--strategy restart-all`, `region` and `both`.
    #[arg(long, default_value_t = 1000)]
    checkpoint_interval_ms: u64,
    /// Where the checkpoints go, kept after the run (default: the run's
    /// scratch directory, removed at its end).
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Stop the job with a savepoint this long after its start (Flink's
    /// stop-with-savepoint): the output holds what the savepoint covers,
    /// and `--from-savepoint DIR/sp-N`, on any number of cores, writes the
    /// rest. Needs `--strategy restart-all`, `region` or `both` and
    /// `--checkpoint-dir`.
    #[arg(long)]
    stop_with_savepoint_after_ms: Option<u64>,
    /// Start from a savepoint or checkpoint (an sp-N directory, a manifest
    /// or a checkpoint directory) of this query and input, on any number
    /// of cores: the keyed state, windows included, is redistributed by
    /// key, and the source keeps the partitions it had.
    #[arg(long)]
    from_savepoint: Option<PathBuf>,
    /// Every checkpoint writes every state whole (by default a keyed
    /// state's checkpoint is a delta over the previous one, whole again
    /// once the deltas since add up to the last whole archive's size).
    #[arg(long)]
    whole_checkpoints: bool,
    /// Faults to inject, in the fault language (e.g. `panic@window:~10`,
    /// `random:7:5`); record `i` is the `i`-th event of the kind the
    /// operator reads (README).
    #[arg(long)]
    fault: Option<String>,
    /// Writes the results, one JSON object per line, sorted.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Writes the generated events, one JSON object per line.
    #[arg(long)]
    dump_input: Option<PathBuf>,
    /// Writes the figures as JSON.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Where the run's scratch files go — checkpoints, the output's
    /// staging, and the standby's files (default: the temp directory, and
    /// `/dev/shm` for the standby's).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Serve live metrics while the job runs, in the Prometheus text
    /// format at http://ADDR/metrics (e.g. 127.0.0.1:9464; port 0: any
    /// free port, printed). Off by default.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Serve a live view of the job in the browser at http://ADDR/; port
    /// 0: any free port, printed. Off by default.
    #[arg(long, value_name = "ADDR")]
    ui_addr: Option<std::net::SocketAddr>,
    /// With --metrics-addr or --ui-addr: keep serving the final figures
    /// this many seconds after the job ended (a last scrape or look), or
    /// until Ctrl-C; at most a day.
    #[arg(long, value_name = "S", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    metrics_linger_s: u64,
    /// Write end-to-end latency as an HdrHistogram interval log (.hlog),
    /// one interval a second, values in nanoseconds.
    #[arg(long, value_name = "FILE")]
    hlog: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    query: &'static str,
    events: u64,
    events_per_sec: f64,
    events_per_sec_per_core: f64,
    /// CPU time of the whole process (user + system) while the job ran.
    cpu_seconds: f64,
    /// Events per CPU-second: the per-core figure of a run whose cores
    /// were not all busy, or were shared.
    events_per_cpu_second: f64,
    /// Event time the events span, seconds (`events / rate`).
    event_time_s: f64,
    /// Per window operator, the results it fired (one per key and window;
    /// `max` of q5 one per window), every attempt counted.
    windows_fired: std::collections::BTreeMap<String, u64>,
    cores: usize,
    latency_ns: LatencyNs,
    records_out: u64,
    late_records: u64,
    elapsed_ms: f64,
    strategy: String,
    standby: Option<String>,
    faults_fired: u64,
    recoveries: usize,
    /// Recoveries of injected faults.
    injected_recoveries: usize,
    /// Recoveries no fault and no failure explains (stall verdicts).
    unprovoked_recoveries: usize,
    /// Every recovery, in order, with its cause.
    /// Checkpoints completed, and those with a delta among their files.
    checkpoints_completed: u64,
    checkpoints_incremental: u64,
    /// Payload bytes the first completed checkpoint wrote, and all the
    /// others together.
    checkpoint_bytes_first: u64,
    checkpoint_bytes_after_first: u64,
    /// The newest checkpoint's last full materialization of the state,
    /// and what a restore of it reads.
    state_bytes_final: u64,
    restore_bytes_final: u64,
    /// Each completed checkpoint's bytes, whole or a delta.
    checkpoint_sizes: Vec<tandem::metrics::CheckpointSize>,
    recovery: Vec<RecoveryJson>,
}

/// One recovery in the JSON report.
#[derive(Serialize)]
struct RecoveryJson {
    kind: &'static str,
    operator: String,
    instance: usize,
    tuple_id: Option<String>,
    /// `injected`, `panic`, `process died`, `stuck-kill`, `stall`, `other`.
    reason: &'static str,
    unprovoked: bool,
    cause: String,
    evidence: Option<String>,
    detect_us: u64,
    first_output_us: Option<u64>,
}

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        run(&args)
    })
}

/// What the flags resolve to, checked before any work.
struct Checked {
    cores: usize,
    /// The source's partitions: the cores, or the restore point's.
    partitions: usize,
    /// The faults, parsed and checked against the query.
    injector: Option<(
        tandem_fault_inject::FaultInjector,
        tandem_fault_inject::Schedule,
    )>,
}

/// The longest timeout: a year.
const YEAR_MS: u64 = 365 * 24 * 3600 * 1000;

/// The largest buffer queue: 1 TiB.
const MAX_QUEUE_MB: u64 = 1 << 20;

/// Checks every flag before any work (the error names the flag): numbers
/// in bounds, faults this run survives, and every path by the output
/// discipline (`tandem_bench::paths`) — no two naming one file; the work
/// dir is created only once all have passed.
fn check(args: &Args) -> anyhow::Result<Checked> {
    ensure!(
        (1..=10_000_000_000).contains(&args.events),
        "--events must be between 1 and 10,000,000,000"
    );
    ensure!(
        args.rate.is_finite() && (1.0..=1e12).contains(&args.rate),
        "--rate must be between 1 and 10^12 events/s"
    );
    ensure!(
        args.base_time_ms <= 1 << 52,
        "--base-time-ms must be at most 2^52"
    );
    ensure!(
        args.metrics_linger_s == 0 || args.metrics_addr.is_some() || args.ui_addr.is_some(),
        "--metrics-linger-s needs --metrics-addr or --ui-addr (there is nothing to keep serving)"
    );
    ensure!(
        (1..=3_600_000).contains(&args.checkpoint_interval_ms),
        "--checkpoint-interval-ms must be between 1 and 3,600,000"
    );
    ensure!(
        (1..=YEAR_MS).contains(&args.heartbeat_timeout_ms),
        "--heartbeat-timeout-ms {}: 1 to {YEAR_MS} (a year)",
        args.heartbeat_timeout_ms
    );
    if let Some(mb) = args.queue_mb {
        ensure!(
            (1..=MAX_QUEUE_MB).contains(&mb),
            "--queue-mb {mb}: 1 to {MAX_QUEUE_MB} (1 TiB)"
        );
    }
    let available = tandem::sys::affinity::available_cores().len().max(1);
    let cores = args.cores.unwrap_or(available);
    ensure!(
        (1..=available).contains(&cores),
        "--cores must be between 1 and the {available} available here"
    );
    let standby_run = matches!(args.strategy, Strategy::Bqbs | Strategy::Both);
    if args.standby.is_some() && !standby_run {
        bail!("--standby needs --strategy bqbs or both");
    }
    for (flag, given) in [
        ("--standby-mode", args.standby_mode != Mode::Warm),
        ("--queue-mb", args.queue_mb.is_some()),
    ] {
        ensure!(
            standby_run || !given,
            "{flag} needs --strategy bqbs or both (this run has no standby)"
        );
    }
    let checkpointing = matches!(
        args.strategy,
        Strategy::RestartAll | Strategy::Region | Strategy::Both
    );
    if args.stop_with_savepoint_after_ms.is_some() {
        ensure!(
            checkpointing && args.checkpoint_dir.is_some(),
            "--stop-with-savepoint-after-ms needs --strategy restart-all, region or both, and \
             --checkpoint-dir (the savepoint must outlive the run)"
        );
    }
    ensure!(
        args.checkpoint_dir.is_none() || checkpointing,
        "--checkpoint-dir needs --strategy restart-all, region or both (this run takes no checkpoint)"
    );
    // A restore point keeps its source partitions: faults are numbered by
    // them.
    let partitions = match &args.from_savepoint {
        Some(p) => {
            let (m, _) = tandem::runtime::restore_point(p)
                .map_err(|e| anyhow::anyhow!("--from-savepoint {}: {e}", p.display()))?;
            m.parallelism()
                .map_err(|e| anyhow::anyhow!("--from-savepoint {}: {e}", p.display()))?
                .and_then(|s| s.get("events").copied())
                .unwrap_or(cores)
        }
        None => cores,
    };
    let injector = match &args.fault {
        Some(spec) => Some(
            nexmark::injector(args.query, spec, args.events, partitions)
                .map_err(|e| anyhow::anyhow!("--fault {spec}: {e}"))?,
        ),
        None => None,
    };
    let mut named: Vec<(&str, &Path)> = Vec::new();
    for (flag, p) in [
        ("--output", &args.output),
        ("--dump-input", &args.dump_input),
        ("--report", &args.report),
        ("--hlog", &args.hlog),
    ] {
        if let Some(p) = p {
            paths::output_file(flag, p)?;
            named.push((flag, p));
        }
    }
    for (flag, d) in [
        ("--work-dir", &args.work_dir),
        ("--checkpoint-dir", &args.checkpoint_dir),
    ] {
        if let Some(d) = d {
            tandem::sys::output::check_dir(d).map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
            named.push((flag, d));
        }
    }
    paths::distinct(&named)?;
    for (flag, d) in [
        ("--work-dir", &args.work_dir),
        ("--checkpoint-dir", &args.checkpoint_dir),
    ] {
        if let Some(d) = d {
            paths::writable_dir(flag, d)?;
        }
    }
    Ok(Checked {
        cores,
        partitions,
        injector,
    })
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let Checked {
        cores,
        partitions,
        injector,
    } = check(args)?;
    if partitions != cores {
        errln!(
            "rescaling: the restore point has {partitions} source partitions; `events` keeps them \
             (one instance each), the rest of the job runs on {cores} cores"
        );
    }
    tandem_fault_inject::quiet_injected_panics();
    let gen = GenConfig {
        seed: args.seed,
        rate: args.rate,
        base_time_ms: args.base_time_ms,
    };
    let tables = Arc::new(Tables::new(args.seed));
    // The run's scratch (checkpoints, the output's staging): a directory
    // of its own, locked while it lives, removed at the end — and by the
    // next run of any binary if this one is killed.
    let base = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    tandem::sys::scratch::sweep(&base);
    let work = tandem::sys::scratch::ScratchDir::unique(&base, "nexmark")
        .with_context(|| format!("creating a scratch directory in {}", base.display()))?;
    cleanup::add(work.path().to_path_buf());
    if let Some(p) = &args.dump_input {
        dump_input(&gen, &tables, args.events, p)?;
    }
    let standby = match args.strategy {
        Strategy::Bqbs | Strategy::Both => Some(
            args.standby
                .clone()
                .unwrap_or_else(|| args.query.operators()[0].0.to_string()),
        ),
        _ => None,
    };
    let result = run_in(args, cores, gen, tables, standby, injector, work.path());
    let _ = work.remove();
    cleanup::forget(work.path());
    result
}

fn run_in(
    args: &Args,
    cores: usize,
    gen: GenConfig,
    tables: Arc<Tables>,
    standby: Option<String>,
    injector: Option<(
        tandem_fault_inject::FaultInjector,
        tandem_fault_inject::Schedule,
    )>,
    work: &Path,
) -> anyhow::Result<ExitCode> {
    let served = tandem_bench::live::Served::start(args.metrics_addr, args.ui_addr, "nexmark")?;
    let out_dir = args.output.as_ref().map(|_| work.join("out"));
    let opts = Options {
        gen,
        events: args.events,
        partitions: cores,
        paced: args.paced,
        standby: standby.clone(),
        output: out_dir.clone(),
    };
    let (job, counts) = queries::build(args.query, &opts, tables)?;
    let mut cfg = RuntimeConfig::default().cores(cores);
    if args.work_dir.is_some() {
        // The standby's files too: where the user put the run's scratch
        // (else in /dev/shm).
        cfg = cfg.run_dir(work);
    }
    if matches!(
        args.strategy,
        Strategy::RestartAll | Strategy::Region | Strategy::Both
    ) {
        let mut cp = CheckpointConfig::every(Duration::from_millis(args.checkpoint_interval_ms));
        cp.dir = Some(
            args.checkpoint_dir
                .clone()
                .unwrap_or_else(|| work.join("checkpoints")),
        );
        if args.whole_checkpoints {
            cp.incremental = None;
        }
        cfg = cfg.checkpoint(cp).restart(RestartStrategy::FixedDelay {
            attempts: 100,
            delay: Duration::ZERO,
        });
        if args.strategy == Strategy::Region {
            cfg = cfg.failover(tandem::Failover::Region);
        }
    }
    if matches!(args.strategy, Strategy::Bqbs | Strategy::Both) {
        cfg = cfg.standby(StandbyConfig {
            mode: match args.standby_mode {
                Mode::Warm => StandbyMode::Warm,
                Mode::Hot => StandbyMode::Hot,
            },
            heartbeat_timeout: Duration::from_millis(args.heartbeat_timeout_ms),
            queue_memory: args
                .queue_mb
                .unwrap_or((1024 / (cores * cores) as u64).clamp(16, 128))
                << 20,
            follow: args.standby_follow,
            delta_interval: args
                .standby_delta_ms
                .map_or(StandbyConfig::default().delta_interval, |ms| {
                    Duration::from_millis(ms.max(1))
                }),
            ..StandbyConfig::default()
        });
    }
    if let Some(p) = &args.from_savepoint {
        cfg = cfg.restore_from(p);
    }
    let injector = match injector {
        Some((injector, schedule)) => {
            errln!("fault schedule: {schedule}");
            cfg = cfg.probes(Arc::new(injector.clone()));
            Some(injector)
        }
        None => None,
    };

    let cpu0 = tandem::sys::rusage::process_cpu_time();
    let handle = job.start(&cfg).map_err(|e| {
        let hint = match &e {
            tandem::JobError::Runtime(tandem::RuntimeError::NoSpace { .. }) => format!(
                " (here: lower --queue-mb{}, or name a --work-dir on a larger filesystem)",
                args.queue_mb.map_or(String::new(), |m| format!(" {m}"))
            ),
            _ => String::new(),
        };
        anyhow::Error::new(e).context(format!("starting the job{hint}"))
    })?;
    let live = tandem_bench::live::Live::start(
        &tandem_bench::live::LiveFlags {
            hlog: args.hlog.clone(),
            ..Default::default()
        },
        &handle,
        Some(&served),
    )?;
    let mut bar = tandem_bench::progress::Progress::new(args.events, "events");
    // Only for a bar someone sees: while a watch lives, the sinks publish
    // their latency every 10 ms.
    let watch = bar.visible().then(|| handle.watch());
    let mut cancelled = false;
    let started = std::time::Instant::now();
    let stopping = std::thread::scope(|scope| {
        let mut asking = None;
        while !handle.is_finished() {
            std::thread::sleep(Duration::from_millis(50));
            if tandem_bench::cli::interrupted() && !cancelled {
                cancelled = true;
                handle.cancel();
            }
            if let Some(ms) = args.stop_with_savepoint_after_ms {
                if asking.is_none() && started.elapsed() >= Duration::from_millis(ms) {
                    let h = &handle;
                    asking = Some(scope.spawn(move || h.stop_with_savepoint()));
                }
            }
            let pos = handle
                .progress()
                .operator("events")
                .map_or(0, |o| o.records);
            bar.update(pos, watch.as_ref());
        }
        asking.map(|a| a.join().expect("the savepoint's thread does not panic"))
    });
    if let Some(Err(e)) = &stopping {
        errln!("warning: no savepoint was taken to stop at: {e}");
    }
    drop(watch);
    let joined = handle.join();
    served.ended();
    bar.finish();
    live.finish(joined.as_ref().ok())?;
    let report = joined.context("the job failed")?;
    let cpu = (tandem::sys::rusage::process_cpu_time() - cpu0).as_secs_f64();
    if let Some(sp) = &report.stopped_at {
        outln!("stopped with the savepoint {}", sp.display())?;
    }

    let secs = report.elapsed.as_secs_f64();
    let eps = args.events as f64 / secs;
    let records_out = counts.records_out.load(Ordering::Relaxed);
    let late_records = counts.late_records.load(Ordering::Relaxed);
    let latency = LatencyNs::from(&report.latency);
    outln!(
        "nexmark {}: {} events in {:.3} s on {cores} cores: {:.0} events/s, {:.0} events/s per core",
        args.query.name(),
        args.events,
        secs,
        eps,
        eps / cores as f64
    )?;
    let per_cpu = args.events as f64 / cpu.max(1e-9);
    outln!(
        "cpu: {cpu:.2} s (user + system, the whole process): {per_cpu:.0} events per CPU-second"
    )?;
    let event_time_s = args.events as f64 / args.rate;
    let windows_fired: std::collections::BTreeMap<String, u64> = args
        .query
        .operators()
        .iter()
        .filter_map(|(op, _)| {
            let o = report.operator(&format!("{op}.results"))?;
            Some((op.to_string(), o.records))
        })
        .collect();
    if windows_fired.is_empty() {
        outln!("event time: {event_time_s:.1} s")?;
    } else {
        let fired: Vec<String> = windows_fired
            .iter()
            .map(|(op, n)| format!("{op} {n}"))
            .collect();
        outln!(
            "event time: {event_time_s:.1} s; windows fired (results, one per key and window): {}",
            fired.join(", ")
        )?;
    }
    outln!("results: {records_out}, late records: {late_records}")?;
    if latency.samples > 0 {
        outln!(
            "latency (source to sink): p50 {}, p99 {}, p99.9 {}, max {}",
            fmt_ns(latency.p50),
            fmt_ns(latency.p99),
            fmt_ns(latency.p999),
            fmt_ns(latency.max)
        )?;
    } else {
        // Results a timer emits carry no source record's release time.
        outln!("latency: no samples (every result came from a timer)")?;
    }
    let cp = &report.checkpoints;
    if cp.completed > 0 {
        outln!(
            "checkpoints: {} completed ({} incremental), {} failed; bytes written: first {}, after it {} ({:.2}× the final state); final state {} (a restore reads {})",
            cp.completed,
            cp.incremental,
            cp.failed,
            fmt_bytes(cp.first_bytes),
            fmt_bytes(cp.bytes_after_first),
            cp.bytes_after_first as f64 / cp.state_bytes_final.max(1) as f64,
            fmt_bytes(cp.state_bytes_final),
            fmt_bytes(cp.restore_bytes_final),
        )?;
        outln!(
            "checkpoint sizes: {}",
            tandem_bench::report::checkpoint_sizes_line(&cp.sizes, 12)
        )?;
    }
    if let Some(sb) = &report.standby {
        outln!(
            "standby: {} recovery points published ({} deltas); the standbys followed {} ({} rebuilt from a whole one)",
            sb.snapshots_published,
            sb.delta_snapshots_published,
            sb.points_followed,
            sb.points_followed_whole,
        )?;
    }
    for r in &report.recovery {
        outln!(
            "recovered: {} of {}[{}] at record {} — {}{}: {}; first output after {} µs{}",
            r.kind.name(),
            r.operator,
            r.instance,
            r.tuple_id.map_or("?".into(), |t| t.to_string()),
            if r.unprovoked { "unprovoked " } else { "" },
            r.reason.name(),
            r.cause,
            r.first_output_us.map_or("-".into(), |u| u.to_string()),
            r.evidence
                .as_ref()
                .map_or(String::new(), |e| format!(" [evidence: {e}]")),
        )?;
    }
    if let (Some(dir), Some(path)) = (&out_dir, &args.output) {
        let mut lines = queries::committed_lines(dir)
            .with_context(|| format!("reading the committed output in {}", dir.display()))?;
        lines.sort_unstable();
        write_lines(path, &lines)?;
        tandem_bench::cli::kept(path.display().to_string());
        outln!("output: {} ({} lines)", path.display(), lines.len())?;
    }
    let injected = report.injected_recoveries();
    let unprovoked = report.unprovoked_recoveries();
    let mut status = ExitCode::SUCCESS;
    if let Some(i) = &injector {
        outln!(
            "faults: {} of {} fired, {} recoveries ({} of injected faults, {} unprovoked, {} other)",
            i.fired(),
            i.armed(),
            report.recovery.len(),
            injected,
            unprovoked,
            report.recovery.len() - injected - unprovoked,
        )?;
        let unfired: Vec<String> = i
            .status()
            .into_iter()
            .filter(|(_, n)| *n == 0)
            .map(|(f, _)| f)
            .collect();
        if !unfired.is_empty() {
            errln!("error: faults that never fired: {}", unfired.join(", "));
            status = ExitCode::from(1);
        }
    }
    if let Some(p) = &args.report {
        write_json(
            "--report",
            p,
            &Report {
                query: args.query.name(),
                events: args.events,
                events_per_sec: eps,
                events_per_sec_per_core: eps / cores as f64,
                cpu_seconds: cpu,
                events_per_cpu_second: per_cpu,
                event_time_s,
                windows_fired,
                cores,
                latency_ns: latency,
                records_out,
                late_records,
                elapsed_ms: secs * 1e3,
                strategy: format!("{:?}", args.strategy).to_lowercase(),
                standby,
                faults_fired: injector.as_ref().map_or(0, |i| i.fired()),
                recoveries: report.recovery.len(),
                injected_recoveries: injected,
                unprovoked_recoveries: unprovoked,
                checkpoints_completed: cp.completed,
                checkpoints_incremental: cp.incremental,
                checkpoint_bytes_first: cp.first_bytes,
                checkpoint_bytes_after_first: cp.bytes_after_first,
                state_bytes_final: cp.state_bytes_final,
                restore_bytes_final: cp.restore_bytes_final,
                checkpoint_sizes: cp.sizes.clone(),
                recovery: report
                    .recovery
                    .iter()
                    .map(|r| RecoveryJson {
                        kind: r.kind.name(),
                        operator: r.operator.clone(),
                        instance: r.instance,
                        tuple_id: r.tuple_id.map(|t| t.to_string()),
                        reason: r.reason.name(),
                        unprovoked: r.unprovoked,
                        cause: r.cause.clone(),
                        evidence: r.evidence.clone(),
                        detect_us: r.detect_us,
                        first_output_us: r.first_output_us,
                    })
                    .collect(),
            },
        )?;
    }
    tandem_bench::live::linger(&served, args.metrics_linger_s);
    Ok(status)
}

/// Writes `--output` (staged beside it, renamed into place).
fn write_lines(path: &Path, lines: &[String]) -> anyhow::Result<()> {
    let o = paths::output_file("--output", path)?;
    let mut f = std::io::BufWriter::with_capacity(1 << 20, paths::stage("--output", &o)?);
    let write = |f: &mut std::io::BufWriter<paths::Writing>| -> std::io::Result<()> {
        for l in lines {
            f.write_all(l.as_bytes())?;
            f.write_all(b"\n")?;
        }
        f.flush()
    };
    write(&mut f).with_context(|| format!("writing --output {}", path.display()))?;
    f.into_inner().map_err(|e| e.into_error())?.commit()
}

/// Writes `--dump-input` (staged beside it, renamed into place).
fn dump_input(gen: &GenConfig, tables: &Tables, events: u64, path: &Path) -> anyhow::Result<()> {
    let o = paths::output_file("--dump-input", path)?;
    let mut f = std::io::BufWriter::with_capacity(1 << 20, paths::stage("--dump-input", &o)?);
    let mut write = || -> std::io::Result<()> {
        let mut line = String::new();
        for n in 0..events {
            if n % 65_536 == 0 && tandem_bench::cli::interrupted() {
                return Err(std::io::Error::other("interrupted"));
            }
            line.clear();
            event_json(&gen.event(n, tables), &mut line);
            line.push('\n');
            f.write_all(line.as_bytes())?;
        }
        f.flush()
    };
    write().with_context(|| format!("writing --dump-input {}", path.display()))?;
    f.into_inner().map_err(|e| e.into_error())?.commit()?;
    tandem_bench::cli::kept(path.display().to_string());
    Ok(())
}

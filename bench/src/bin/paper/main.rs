//! The paper's pipeline (JSON answers → parse → filter → level → per-user
//! stats → sink) on Tandem, with throughput, HDR latency, CPU and memory,
//! and — with `--strategy restart-all` — checkpoints, injected faults and
//! the recovery figures of each.
//!
//! Input is pre-generated before timing starts (see `paper::gen`); its size
//! is reported as `input_bytes` so the engine's own memory is
//! `peak_rss_bytes - input_bytes`.

use anyhow::Context;
use clap::Parser;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem::recovery::restart::parse_duration;
use tandem::sys::rusage;
use tandem::{Chaining, CheckpointConfig, CheckpointMode, RestartStrategy, RuntimeConfig};
use tandem_bench::paper::{self, names, Input, OutputMode, PaperOptions};
use tandem_bench::report::{fmt_ns, write_json, LatencyNs};

/// Runs the paper's pipeline and prints throughput, latency and recovery.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// Records to generate and process.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Source rate in records/s over all partitions; 0 = as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Seed of the input generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Cores to run on (default: all the process may use).
    #[arg(long)]
    cores: Option<usize>,
    /// Instances per operator (default: the number of cores).
    #[arg(long)]
    parallelism: Option<usize>,
    /// Write one JSONL line per output record here.
    #[arg(long)]
    output: Option<PathBuf>,
    /// How the sink writes --output: transactional (committed per
    /// checkpoint, exactly once) or direct (into part files through a
    /// 64 KiB buffer drained at every barrier; a restart writes the
    /// replayed records again, and the report counts them — an upper
    /// bound: lines still buffered when an attempt failed are written
    /// once). Default: transactional with checkpoints (--strategy
    /// restart-all, or bqbs with --checkpoint-interval-ms), else direct.
    #[arg(long, value_parser = parse_output_mode)]
    sink_mode: Option<OutputMode>,
    /// Write a JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Make every k-th input record malformed (0 = none).
    #[arg(long, default_value_t = 0)]
    malformed_every: u64,
    /// Directory for files the run creates (dead letters, checkpoints);
    /// default: a temp dir.
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Operator chaining: auto, always or never.
    #[arg(long, default_value = "auto", value_parser = parse_chaining)]
    chaining: Chaining,
    /// Slots per ring between tasks.
    #[arg(long, default_value_t = 1024)]
    ring_capacity: usize,
    /// Inject a fault: panic@OPERATOR:N, stall@OPERATOR:N:MILLIS or
    /// cut@OPERATOR:N, where N is the input record's seq (repeatable).
    #[arg(long = "fault")]
    faults: Vec<tandem_fault_inject::FaultSpec>,
    /// Inject COUNT faults evenly spread over the input: KIND@OPERATOR:COUNT
    /// (stall: KIND@OPERATOR:COUNT:MILLIS).
    #[arg(long)]
    fault_schedule: Option<tandem_fault_inject::FaultSpec>,
    /// Recovery strategy: none (a failure ends the run), restart-all
    /// (checkpoints; on a failure every operator restarts from the last
    /// complete one) or bqbs (active standby for the --standby operators).
    #[arg(long, default_value = "none", value_parser = ["none", "restart-all", "bqbs"])]
    strategy: String,
    /// Operators with a standby (bqbs): any of flatmap, filter, keyed,
    /// comma-separated.
    #[arg(long, default_value = "flatmap", value_delimiter = ',')]
    standby: Vec<String>,
    /// Standby mode (bqbs): warm (restores the primary's newest snapshot
    /// and replays) or hot (computes along, output suppressed).
    #[arg(long, default_value = "warm", value_parser = parse_standby_mode)]
    standby_mode: tandem::StandbyMode,
    /// A primary without a heartbeat for this long has stalled (bqbs).
    #[arg(long, default_value_t = 5)]
    standby_heartbeat_ms: u64,
    /// Warm snapshot interval (bqbs, stateful operators).
    #[arg(long, default_value_t = 200)]
    standby_snapshot_ms: u64,
    /// Bytes of each buffer queue, in MiB (bqbs).
    #[arg(long, default_value_t = 16)]
    standby_queue_mib: u64,
    /// Also run the same job with --strategy none first (no faults) and
    /// print the throughput and p99 ratios (bqbs / none).
    #[arg(long)]
    compare_without_standby: bool,
    /// Checkpoint interval. restart-all: default 1000. bqbs: checkpoints
    /// run beside the standbys only when this is given — a failure of an
    /// operator without a standby is then restart-all from the last
    /// complete checkpoint, and --output is transactional.
    #[arg(long)]
    checkpoint_interval_ms: Option<u64>,
    /// Checkpoint directory (default: RUN_DIR/checkpoints or a temp dir
    /// removed at the end).
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Barrier alignment: exactly-once or at-least-once.
    #[arg(long, default_value = "exactly-once", value_parser = parse_mode)]
    checkpoint_mode: CheckpointMode,
    /// A checkpoint not complete after this long is abandoned.
    #[arg(long, default_value_t = 60_000)]
    checkpoint_timeout_ms: u64,
    /// Consecutive failed checkpoints tolerated before the job fails.
    #[arg(long, default_value_t = 3)]
    tolerable_checkpoint_failures: u32,
    /// Least time between the end of a checkpoint and the next one.
    #[arg(long, default_value_t = 0)]
    min_pause_ms: u64,
    /// Checkpoints kept.
    #[arg(long, default_value_t = 3)]
    retain: usize,
    /// Adapt the interval to failures and checkpoint cost within MIN:MAX
    /// (e.g. 100ms:10s).
    #[arg(long, value_parser = parse_range)]
    adaptive_interval: Option<(Duration, Duration)>,
    /// Restart strategy: none | fixed:ATTEMPTS:DELAY |
    /// exp:INITIAL:MAX:MULTIPLIER:JITTER:RESET | rate:FAILURES:INTERVAL:DELAY.
    #[arg(long, default_value = "fixed:100:0ms")]
    restart: RestartStrategy,
    /// A worker without a heartbeat for this long has stalled.
    #[arg(long, default_value_t = 100)]
    heartbeat_timeout_ms: u64,
    /// Take a savepoint this long after the start (restart-all).
    #[arg(long)]
    savepoint_after_ms: Option<u64>,
    /// Start from a savepoint or checkpoint (an sp-ID directory, a
    /// manifest, or a checkpoint directory).
    #[arg(long)]
    from_savepoint: Option<PathBuf>,
    /// Also run the same job without checkpoints first, and print the
    /// throughput ratio (checkpointed / plain).
    #[arg(long)]
    compare_without_checkpoints: bool,
}

fn parse_chaining(s: &str) -> Result<Chaining, String> {
    match s {
        "auto" => Ok(Chaining::Auto),
        "always" => Ok(Chaining::Always),
        "never" => Ok(Chaining::Never),
        _ => Err(format!("expected auto, always or never, got `{s}`")),
    }
}

fn parse_mode(s: &str) -> Result<CheckpointMode, String> {
    match s {
        "exactly-once" => Ok(CheckpointMode::ExactlyOnce),
        "at-least-once" => Ok(CheckpointMode::AtLeastOnce),
        _ => Err(format!("expected exactly-once or at-least-once, got `{s}`")),
    }
}

fn parse_standby_mode(s: &str) -> Result<tandem::StandbyMode, String> {
    match s {
        "warm" => Ok(tandem::StandbyMode::Warm),
        "hot" => Ok(tandem::StandbyMode::Hot),
        _ => Err(format!("expected warm or hot, got `{s}`")),
    }
}

fn parse_output_mode(s: &str) -> Result<OutputMode, String> {
    match s {
        "transactional" => Ok(OutputMode::Transactional),
        "direct" => Ok(OutputMode::Direct),
        _ => Err(format!("expected transactional or direct, got `{s}`")),
    }
}

fn parse_range(s: &str) -> Result<(Duration, Duration), String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("expected MIN:MAX, got `{s}`"))?;
    let d = |x: &str| parse_duration(x).ok_or_else(|| format!("`{x}` is not a duration"));
    Ok((d(a)?, d(b)?))
}

#[derive(Serialize)]
struct Recovery {
    /// `takeover` (a standby took over) or `restart-all`.
    kind: &'static str,
    operator: String,
    instance: usize,
    /// The input record (its seq) the fault fired on, when known.
    tuple_id: Option<u64>,
    cause: String,
    detect_us: u64,
    restore_us: Option<u64>,
    first_output_us: Option<u64>,
    caught_up_us: Option<u64>,
    replayed_tuples: u64,
    restored_checkpoint: Option<u64>,
    skipped_checkpoints: Vec<String>,
    /// A takeover no injected fault or reported failure explains.
    unprovoked: bool,
    /// For a takeover after a stall: what the standby saw.
    evidence: Option<String>,
}

#[derive(Serialize)]
struct Report {
    records_in: u64,
    records_out: u64,
    summaries_out: u64,
    dead_letters: u64,
    dead_letter_path: Option<PathBuf>,
    throughput_rps: f64,
    elapsed_s: f64,
    latency_ns: LatencyNs,
    cpu_seconds: f64,
    peak_rss_bytes: u64,
    input_bytes: u64,
    engine_memory_bytes: u64,
    cores: usize,
    parallelism: usize,
    workers: usize,
    tasks: usize,
    rate: f64,
    seed: u64,
    input_pregenerated: bool,
    strategy: String,
    checkpoint_interval_ms: Option<u64>,
    recovery: Vec<Recovery>,
    restarts: u32,
    duplicates_emitted: u64,
    checkpoints_completed: u64,
    checkpoints_failed: u64,
    /// Started (triggered); each is completed, failed or pending.
    checkpoints_started: u64,
    /// In flight when a failure stopped the attempt or the job ended.
    checkpoints_pending: u64,
    /// Completed later than one interval after their trigger.
    checkpoints_late: u64,
    /// Trigger → durable manifest over the completed ones, milliseconds.
    checkpoint_duration_p50_ms: Option<f64>,
    checkpoint_duration_p99_ms: Option<f64>,
    checkpoint_duration_max_ms: Option<f64>,
    checkpoint_bytes: u64,
    checkpoint_write_mbps: f64,
    checkpoint_dir: Option<PathBuf>,
    savepoint: Option<PathBuf>,
    /// With --compare-without-checkpoints or --compare-without-standby:
    /// the plain run's throughput and this run's over it.
    plain_throughput_rps: Option<f64>,
    throughput_ratio: Option<f64>,
    /// With --compare-without-standby: the plain run's p99 latency and
    /// this run's over it.
    plain_p99_ns: Option<u64>,
    p99_ratio: Option<f64>,
    standby: Option<StandbyReport>,
}

#[derive(Serialize)]
struct StandbyReport {
    operators: Vec<String>,
    mode: String,
    heartbeat_ms: u64,
    groups: usize,
    takeovers: u64,
    /// Takeovers that no injected fault or reported failure explains (the
    /// standby found the primary stuck; see each recovery's `evidence`).
    unprovoked: u64,
    standby_failures: u64,
    queue_bytes_peak: u64,
    snapshots_published: u64,
    /// Over the takeovers: p50 / p99 / max, microseconds.
    detect_us: [u64; 3],
    first_output_us: [u64; 3],
    caught_up_us: [u64; 3],
}

fn p50_p99_max(mut v: Vec<u64>) -> [u64; 3] {
    if v.is_empty() {
        return [0; 3];
    }
    v.sort_unstable();
    let q = |f: f64| v[((v.len() as f64 * f).ceil() as usize).clamp(1, v.len()) - 1];
    [q(0.5), q(0.99), *v.last().expect("non-empty")]
}

/// One run of the job; the report without the comparison fields.
fn run(args: &Args, input: &Arc<Input>, checkpoints: bool) -> anyhow::Result<Report> {
    let available = tandem::sys::affinity::available_cores().len();
    let cores = args.cores.unwrap_or(available);
    let parallelism = args.parallelism.unwrap_or(cores);
    let restart_all = args.strategy == "restart-all";
    let bqbs = args.strategy == "bqbs";
    // Checkpoints (and restarts from them): restart-all, or bqbs with an
    // interval given.
    let checkpointing = restart_all || (bqbs && args.checkpoint_interval_ms.is_some());
    let interval_ms = args.checkpoint_interval_ms.unwrap_or(1000);
    let output_mode = args.sink_mode.unwrap_or(if checkpointing {
        OutputMode::Transactional
    } else {
        OutputMode::Direct
    });
    let opts = PaperOptions {
        parallelism,
        rate: (args.rate > 0.0).then_some(args.rate),
        output: args.output.clone(),
        output_mode,
        standby: if bqbs {
            args.standby.clone()
        } else {
            Vec::new()
        },
    };
    let (job, counts) = paper::build_job(Arc::clone(input), &opts)?;
    let mut cfg = RuntimeConfig::default()
        .cores(cores)
        .chaining(args.chaining)
        .ring_capacity(args.ring_capacity)
        .heartbeat_timeout(Duration::from_millis(args.heartbeat_timeout_ms));
    if let Some(d) = &args.run_dir {
        cfg = cfg.run_dir(d);
    }
    if checkpointing {
        cfg = cfg.restart(args.restart.clone());
        if checkpoints {
            let mut cp = CheckpointConfig::every(Duration::from_millis(interval_ms));
            cp.mode = args.checkpoint_mode;
            cp.timeout = Duration::from_millis(args.checkpoint_timeout_ms);
            cp.tolerable_failures = args.tolerable_checkpoint_failures;
            cp.min_pause = Duration::from_millis(args.min_pause_ms);
            cp.retain = args.retain;
            cp.dir = args.checkpoint_dir.clone();
            cp.adaptive = args.adaptive_interval;
            cfg = cfg.checkpoint(cp);
        }
    }
    if let Some(p) = &args.from_savepoint {
        cfg = cfg.restore_from(p);
    }
    if bqbs {
        cfg = cfg.standby(tandem::StandbyConfig {
            mode: args.standby_mode,
            heartbeat_timeout: Duration::from_millis(args.standby_heartbeat_ms),
            snapshot_interval: Duration::from_millis(args.standby_snapshot_ms),
            queue_memory: args.standby_queue_mib << 20,
        });
    }
    let p = parallelism;
    let mut faults = args.faults.clone();
    if let Some(s) = &args.fault_schedule {
        let count = s.tuple_id;
        for k in 1..=count {
            let mut f = s.clone();
            f.tuple_id = args.records * k / (count + 1);
            faults.push(f);
        }
    }
    if !faults.is_empty() {
        let injector =
            tandem_fault_inject::FaultInjector::new(&faults, move |n| paper::tuple_of(p, n));
        cfg = cfg.probes(Arc::new(injector));
    }

    let cpu0 = rusage::process_cpu_time();
    let handle = job.start(&cfg).context("starting the job")?;
    let bar = indicatif::ProgressBar::new(args.records);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} records {msg}",
        )
        .expect("static template"),
    );
    let started = Instant::now();
    let mut savepoint = None;
    let (mut last_pos, mut last_t) = (0u64, Instant::now());
    while !handle.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(ms) = args.savepoint_after_ms {
            if savepoint.is_none() && started.elapsed() >= Duration::from_millis(ms) {
                savepoint = Some(handle.savepoint().context("taking the savepoint")?);
                bar.println(format!(
                    "savepoint written to {}",
                    savepoint.as_ref().expect("set above").display()
                ));
            }
        }
        let p = handle.progress();
        let pos = p.operator(names::SOURCE).map_or(0, |o| o.records);
        let dt = last_t.elapsed().as_secs_f64();
        if dt >= 0.5 {
            let rate = pos.saturating_sub(last_pos) as f64 / dt / 1e6;
            bar.set_message(format!("({rate:.2} M/s)"));
            (last_pos, last_t) = (pos, Instant::now());
        }
        bar.set_position(pos);
    }
    let report = handle.join().context("the job failed")?;
    let cpu = rusage::process_cpu_time() - cpu0;
    bar.finish_and_clear();

    let (mut records_out, mut summaries_out) = (
        counts.records.load(std::sync::atomic::Ordering::Relaxed),
        counts.summaries.load(std::sync::atomic::Ordering::Relaxed),
    );
    if let Some(out) = &args.output {
        let bytes = paper::merge_output(out, parallelism, output_mode)
            .with_context(|| format!("merging output into {}", out.display()))?;
        eprintln!("wrote {} ({:.1} MB)", out.display(), bytes as f64 / 1e6);
        // After restarts, what counts is what the file holds.
        if report.restarts > 0 {
            use std::io::BufRead;
            (records_out, summaries_out) = (0, 0);
            let mut r = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(out)?);
            let mut line = Vec::new();
            while r.read_until(b'\n', &mut line)? > 0 {
                if line.starts_with(b"{\"type\":\"record\"") {
                    records_out += 1;
                } else {
                    summaries_out += 1;
                }
                line.clear();
            }
        }
    }
    let peak_rss = rusage::peak_rss_bytes().unwrap_or(0);
    let input_bytes = input.memory_bytes();
    // Records the sources produced, once each (replays excluded).
    let records_in = input.len();
    let secs = report.elapsed.as_secs_f64();
    let seq_of = |t: tandem::TupleId| paper::seq_of(p, t);
    Ok(Report {
        records_in,
        records_out,
        summaries_out,
        dead_letters: report.dead_letters,
        dead_letter_path: report.dead_letter_path.clone(),
        throughput_rps: records_in as f64 / secs.max(1e-9),
        elapsed_s: secs,
        latency_ns: LatencyNs::from(&report.latency),
        cpu_seconds: cpu.as_secs_f64(),
        peak_rss_bytes: peak_rss,
        input_bytes,
        engine_memory_bytes: peak_rss.saturating_sub(input_bytes),
        cores,
        parallelism,
        workers: report.workers,
        tasks: report.tasks,
        rate: args.rate,
        seed: args.seed,
        input_pregenerated: true,
        strategy: args.strategy.clone(),
        checkpoint_interval_ms: (checkpointing && checkpoints).then_some(interval_ms),
        recovery: report
            .recovery
            .iter()
            .map(|r| Recovery {
                kind: r.kind.name(),
                operator: r.operator.clone(),
                instance: r.instance,
                tuple_id: r.tuple_id.map(seq_of),
                cause: r.cause.clone(),
                detect_us: r.detect_us,
                restore_us: r.restore_us,
                first_output_us: r.first_output_us,
                caught_up_us: r.caught_up_us,
                replayed_tuples: r.replayed_tuples,
                restored_checkpoint: r.restored_checkpoint,
                skipped_checkpoints: r.skipped_checkpoints.clone(),
                unprovoked: r.unprovoked,
                evidence: r.evidence.clone(),
            })
            .collect(),
        restarts: report.restarts,
        duplicates_emitted: report.duplicates_emitted,
        checkpoints_completed: report.checkpoints.completed,
        checkpoints_failed: report.checkpoints.failed,
        checkpoints_started: report.checkpoints.started,
        checkpoints_pending: report.checkpoints.pending,
        checkpoints_late: report.checkpoints.late,
        checkpoint_duration_p50_ms: ms(report.checkpoints.duration_quantile_us(0.5)),
        checkpoint_duration_p99_ms: ms(report.checkpoints.duration_quantile_us(0.99)),
        checkpoint_duration_max_ms: ms(report.checkpoints.duration_quantile_us(1.0)),
        checkpoint_bytes: report.checkpoints.bytes,
        checkpoint_write_mbps: report.checkpoints.write_mbps,
        checkpoint_dir: report.checkpoints.dir.clone(),
        savepoint,
        plain_throughput_rps: None,
        throughput_ratio: None,
        plain_p99_ns: None,
        p99_ratio: None,
        standby: report.standby.as_ref().map(|s| {
            // Over the injected faults (they name their record); takeovers
            // no fault explains are counted apart.
            let col = |f: &dyn Fn(&tandem::RecoveryRecord) -> Option<u64>| {
                p50_p99_max(
                    report
                        .recovery
                        .iter()
                        .filter(|r| r.kind == tandem::RecoveryKind::Takeover)
                        .filter(|r| r.tuple_id.is_some() && !r.unprovoked)
                        .filter_map(f)
                        .collect(),
                )
            };
            StandbyReport {
                operators: args.standby.clone(),
                mode: format!("{:?}", args.standby_mode).to_lowercase(),
                heartbeat_ms: args.standby_heartbeat_ms,
                groups: s.groups,
                takeovers: s.takeovers,
                unprovoked: report.recovery.iter().filter(|r| r.unprovoked).count() as u64,
                standby_failures: s.standby_failures,
                queue_bytes_peak: s.queue_bytes_peak,
                snapshots_published: s.snapshots_published,
                detect_us: col(&|r| Some(r.detect_us)),
                first_output_us: col(&|r| r.first_output_us),
                caught_up_us: col(&|r| r.caught_up_us),
            }
        }),
    })
}

fn opt_us(v: Option<u64>) -> String {
    v.map_or("-".into(), |us| fmt_ns(us * 1000))
}

/// One line per recovery (restart or takeover).
fn print_recovery(label: &str, r: &Recovery, suffix: &str) {
    println!(
        "  {label:<17} {}[{}] at record {}: detect {}  restore {}  first output {}  caught up {}  replayed {}{suffix}",
        r.operator,
        r.instance,
        r.tuple_id.map_or("?".into(), |t| t.to_string()),
        opt_us(Some(r.detect_us)),
        opt_us(r.restore_us),
        opt_us(r.first_output_us),
        opt_us(r.caught_up_us),
        r.replayed_tuples,
    );
}

/// Microseconds as milliseconds.
fn ms(us: Option<u64>) -> Option<f64> {
    us.map(|u| u as f64 / 1000.0)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tandem_fault_inject::quiet_injected_panics();
    let available = tandem::sys::affinity::available_cores().len();
    let cores = args.cores.unwrap_or(available);
    anyhow::ensure!(cores >= 1, "--cores must be at least 1");
    anyhow::ensure!(
        cores <= available,
        "--cores {cores}: only {available} cores are available to this process"
    );
    anyhow::ensure!(
        args.parallelism.unwrap_or(cores) >= 1,
        "--parallelism must be at least 1"
    );
    anyhow::ensure!(
        args.rate >= 0.0 && args.rate.is_finite(),
        "--rate must be ≥ 0"
    );
    anyhow::ensure!(
        args.checkpoint_interval_ms != Some(0),
        "--checkpoint-interval-ms must be positive"
    );
    anyhow::ensure!(
        args.checkpoint_interval_ms.is_none() || args.strategy != "none",
        "--checkpoint-interval-ms needs --strategy restart-all or bqbs"
    );
    anyhow::ensure!(
        !args.compare_without_checkpoints || args.strategy == "restart-all",
        "--compare-without-checkpoints needs --strategy restart-all"
    );
    anyhow::ensure!(
        !args.compare_without_standby || args.strategy == "bqbs",
        "--compare-without-standby needs --strategy bqbs"
    );

    let t = Instant::now();
    let input = Arc::new(Input::generate(
        args.records,
        args.seed,
        args.malformed_every,
        available,
    ));
    eprintln!(
        "generated {} records ({:.1} MB of JSON) in {:.2} s",
        args.records,
        input.memory_bytes() as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );

    let plain = if args.compare_without_checkpoints || args.compare_without_standby {
        let mut a = args.clone();
        a.faults.clear();
        a.fault_schedule = None;
        a.output = None;
        a.savepoint_after_ms = None;
        if args.compare_without_standby {
            a.strategy = "none".into();
        }
        let r = run(&a, &input, false)?;
        eprintln!(
            "without {}: {:.0} records/s, p99 {}",
            if args.compare_without_standby {
                "standby"
            } else {
                "checkpoints"
            },
            r.throughput_rps,
            fmt_ns(r.latency_ns.p99)
        );
        Some((r.throughput_rps, r.latency_ns.p99))
    } else {
        None
    };
    let mut rep = run(&args, &input, true)?;
    if let Some((p, p99)) = plain {
        rep.plain_throughput_rps = Some(p);
        rep.throughput_ratio = Some(rep.throughput_rps / p);
        if args.compare_without_standby {
            rep.plain_p99_ns = Some(p99);
            rep.p99_ratio = Some(rep.latency_ns.p99 as f64 / p99.max(1) as f64);
        }
    }

    let l = &rep.latency_ns;
    println!(
        "paper pipeline: {} cores, parallelism {}, {} workers, {} tasks, strategy {}",
        rep.cores, rep.parallelism, rep.workers, rep.tasks, rep.strategy
    );
    println!("  records in        {}", rep.records_in);
    println!(
        "  records out       {} (+ {} per-user summaries)",
        rep.records_out, rep.summaries_out
    );
    println!(
        "  dead letters      {}{}",
        rep.dead_letters,
        rep.dead_letter_path
            .as_ref()
            .map(|p| format!(" ({})", p.display()))
            .unwrap_or_default()
    );
    println!("  elapsed           {:.3} s", rep.elapsed_s);
    println!("  throughput        {:.0} records/s", rep.throughput_rps);
    if let (Some(p), Some(r)) = (rep.plain_throughput_rps, rep.throughput_ratio) {
        let what = if rep.strategy == "bqbs" {
            "standby"
        } else {
            "ckpts"
        };
        println!("  without {what:<9} {p:.0} records/s (ratio {r:.3})");
    }
    if let (Some(p), Some(r)) = (rep.plain_p99_ns, rep.p99_ratio) {
        println!("  p99 without       {} (ratio {r:.3})", fmt_ns(p));
    }
    println!(
        "  latency           min {}  p50 {}  p99 {}  p99.9 {}  max {}  ({} samples)",
        fmt_ns(l.min),
        fmt_ns(l.p50),
        fmt_ns(l.p99),
        fmt_ns(l.p999),
        fmt_ns(l.max),
        l.samples
    );
    println!("  cpu               {:.2} s", rep.cpu_seconds);
    println!(
        "  peak rss          {:.1} MiB (input {:.1} MiB, engine {:.1} MiB)",
        rep.peak_rss_bytes as f64 / 1048576.0,
        rep.input_bytes as f64 / 1048576.0,
        rep.engine_memory_bytes as f64 / 1048576.0
    );
    if rep.checkpoint_interval_ms.is_some() {
        println!(
            "  checkpoints       {} started: {} completed ({} late), {} failed, {} pending; {:.1} MB written at {:.0} MB/s",
            rep.checkpoints_started,
            rep.checkpoints_completed,
            rep.checkpoints_late,
            rep.checkpoints_failed,
            rep.checkpoints_pending,
            rep.checkpoint_bytes as f64 / 1e6,
            rep.checkpoint_write_mbps
        );
        if let (Some(p50), Some(p99), Some(max)) = (
            rep.checkpoint_duration_p50_ms,
            rep.checkpoint_duration_p99_ms,
            rep.checkpoint_duration_max_ms,
        ) {
            println!(
                "  checkpoint time   p50 {p50:.2} ms  p99 {p99:.2} ms  max {max:.2} ms (trigger → durable manifest)"
            );
        }
        println!(
            "  restarts          {} (duplicates emitted: {})",
            rep.restarts, rep.duplicates_emitted
        );
        if rep.restarts > 0 && args.checkpoint_mode == CheckpointMode::AtLeastOnce {
            // The count above is of direct sinks only: at-least-once
            // checkpoints cut the streams unaligned, so committed output
            // and keyed state may hold records a restart replayed.
            println!(
                "  at-least-once     committed output may repeat records replayed after a restart, and per-user summaries may count them twice (not counted above)"
            );
        }
    }
    if let Some(s) = &rep.standby {
        println!(
            "  standby           {} on {} ({} groups, {} mode, heartbeat {} ms): {} takeovers ({} unprovoked), {} standby failures, queue peak {:.1} MiB, {} snapshots",
            s.operators.join(","),
            rep.parallelism,
            s.groups,
            s.mode,
            s.heartbeat_ms,
            s.takeovers,
            s.unprovoked,
            s.standby_failures,
            s.queue_bytes_peak as f64 / 1048576.0,
            s.snapshots_published
        );
        if s.takeovers > 0 {
            let f = |v: [u64; 3]| {
                format!(
                    "p50 {}  p99 {}  max {}",
                    opt_us(Some(v[0])),
                    opt_us(Some(v[1])),
                    opt_us(Some(v[2]))
                )
            };
            println!("  over the takeovers of injected faults:");
            println!("  detect            {}", f(s.detect_us));
            println!("  first output      {}", f(s.first_output_us));
            println!("  caught up         {}", f(s.caught_up_us));
        }
    }
    // Every recovery, in order, with the kind that ran.
    for (i, r) in rep.recovery.iter().enumerate() {
        let why = match (r.kind, &r.evidence, r.unprovoked) {
            ("restart-all", _, _) => format!(
                " (from checkpoint {})",
                r.restored_checkpoint
                    .map_or("none".into(), |c| c.to_string())
            ),
            (_, Some(e), true) => format!(" — unprovoked: {e}"),
            (_, Some(e), false) => format!(" — {e}"),
            _ => String::new(),
        };
        print_recovery(&format!("{} {}", r.kind, i + 1), r, &why);
    }
    if let Some(path) = &args.report {
        write_json(path, &rep)?;
        eprintln!("report written to {}", path.display());
    }
    Ok(())
}

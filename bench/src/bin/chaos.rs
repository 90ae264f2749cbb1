//! `chaos`: many randomized fault schedules against the paper pipeline,
//! each run's output checked against a clean run's by the independent
//! checker (`tandem_fault_inject::check`).
//!
//! For each strategy — `restart-all`, `region` (restart-all scoped to the
//! failed task's failover region), `bqbs-warm`, `bqbs-hot`,
//! `bqbs-checkpoints`, and on request `bqbs-process` (process isolation,
//! warm or hot, drawing `kill`, `abort` and `segv` faults too) — it runs
//! `--schedules` schedules. Schedule `i` of a
//! strategy draws, from a seed derived from `--seed`, the strategy's
//! configuration (which operators have a standby, the heartbeat, the queue
//! size, the checkpoint interval), full rate or a throttled rate, and 1–4
//! faults among those the configuration recovers from
//! (`paper::Protection::space`). The run must end successfully with
//! exactly the clean output: a lost, duplicated or changed line, a failed
//! or hung run, is a failure, printed with the `paper` command that
//! reproduces it.

use anyhow::Context;
use clap::Parser;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem::{CheckpointConfig, RecoveryKind, RestartStrategy, RuntimeConfig, StandbyMode};
use tandem_bench::paper::{self, Input, OutputMode, PaperOptions, Protection};
use tandem_bench::report::write_json;
use tandem_bench::{cleanup, outln};
use tandem_fault_inject::schedule::SplitMix64;
use tandem_fault_inject::{Checker, FaultInjector, Schedule, ScheduleSpec};

/// Runs randomized fault schedules and checks every output.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Schedules per strategy.
    #[arg(long, default_value_t = 50)]
    schedules: u64,
    /// Input records of every run.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Seed of the input and of every schedule drawn.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Strategies to run, comma-separated: restart-all, region, bqbs-warm,
    /// bqbs-hot, bqbs-checkpoints, and (not by default) bqbs-process —
    /// standbys in processes of their own, whose faults include the
    /// operator's process dying (kill, abort, segv).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "restart-all,region,bqbs-warm,bqbs-hot,bqbs-checkpoints"
    )]
    strategies: Vec<String>,
    /// Faults per schedule, at most (each draws 1 to this many).
    #[arg(long, default_value_t = 4)]
    max_faults: u64,
    /// Cores to run on (default: all the process may use).
    #[arg(long)]
    cores: Option<usize>,
    /// A run not finished after this many seconds has hung.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Write a JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Directory for the runs' files (default: a temp dir, removed).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// No progress bar (for logs).
    #[arg(long)]
    quiet: bool,
    /// Run only schedule I of STRATEGY (STRATEGY:I, repeatable), e.g. to
    /// repeat a failing one; `--repeat` times each.
    #[arg(long)]
    only: Vec<String>,
    /// With --only: run each schedule this many times.
    #[arg(long, default_value_t = 1)]
    repeat: u64,
    /// (Internal: a child of process isolation builds this configuration's
    /// job and serves its incarnation.)
    #[arg(long, hide = true)]
    serve_config: Option<String>,
}

// Appended in order: a strategy's index seeds its draws, so those of the
// earlier ones stay as they were.
const STRATEGIES: [&str; 6] = [
    "restart-all",
    "bqbs-warm",
    "bqbs-hot",
    "bqbs-checkpoints",
    "bqbs-process",
    "region",
];

/// The most faults one schedule draws.
const MAX_FAULTS: u64 = 64;

/// The longest a run may take before it counts as hung (a day).
const MAX_TIMEOUT_S: u64 = 86_400;

/// One schedule's configuration, drawn.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
struct Config {
    strategy: String,
    /// The standbys compute along (hot), else warm.
    hot: bool,
    /// Process isolation: incarnations in child processes, nothing
    /// chained (every fault targets a chain's head).
    process: bool,
    cores: usize,
    /// Instances per operator (tasks are packed when above the cores).
    parallelism: usize,
    standby: Vec<String>,
    heartbeat_ms: u64,
    queue_mib: u64,
    /// The source's records go through a buffer queue even where a chain
    /// could replay the source.
    queue_source: bool,
    /// Buffer queues hold records encoded, not in typed slots.
    encoded_queue: bool,
    checkpoint_ms: Option<u64>,
    rate: Option<f64>,
    schedule: String,
}

impl Config {
    /// The `paper` command that runs the same job with the same faults.
    fn command(&self, records: u64, seed: u64) -> String {
        let mut c = format!(
            "paper --records {records} --seed {seed} --cores {} --parallelism {}",
            self.cores, self.parallelism
        );
        if let Some(r) = self.rate {
            c += &format!(" --rate {r}");
        }
        match self.strategy.as_str() {
            "restart-all" => c += " --strategy restart-all",
            "region" => c += " --strategy region",
            s => {
                c += &format!(
                    " --strategy bqbs --standby {} --standby-mode {} --standby-heartbeat-ms {} --standby-queue-mib {}",
                    self.standby.join(","),
                    if self.hot { "hot" } else { "warm" },
                    self.heartbeat_ms,
                    self.queue_mib
                );
                if self.queue_source {
                    c += " --standby-queue-source";
                }
                if self.encoded_queue {
                    c += " --standby-encoded-queue";
                }
                if self.process {
                    c += " --isolation process --chaining never";
                }
                let _ = s;
            }
        }
        if let Some(ms) = self.checkpoint_ms {
            c += &format!(" --checkpoint-interval-ms {ms}");
        }
        format!(
            "{c} --fault-schedule '{}' --output faulted.jsonl",
            self.schedule
        )
    }
}

/// What runs did: faults, recoveries, differences.
#[derive(Clone, Debug, Default, Serialize)]
struct Counts {
    faults_armed: u64,
    faults_fired: u64,
    takeovers: u64,
    restarts: u64,
    unprovoked: u64,
    lost: u64,
    duplicated: u64,
    changed: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.faults_armed += o.faults_armed;
        self.faults_fired += o.faults_fired;
        self.takeovers += o.takeovers;
        self.restarts += o.restarts;
        self.unprovoked += o.unprovoked;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.changed += o.changed;
    }
}

/// What one run did.
#[derive(Clone, Debug, Default)]
struct RunOutcome {
    counts: Counts,
    /// The job's error, or "hung".
    failure: Option<String>,
    first_output_us: Vec<u64>,
    secs: f64,
}

/// A strategy's totals.
#[derive(Clone, Debug, Default, Serialize)]
struct Totals {
    schedules: u64,
    #[serde(flatten)]
    counts: Counts,
    failed: u64,
    /// Fault → first output after the recovery, microseconds.
    recovery_p50_us: u64,
    recovery_p99_us: u64,
    recovery_max_us: u64,
    secs: f64,
    #[serde(skip)]
    first_output_us: Vec<u64>,
}

#[derive(Serialize)]
struct Failing {
    strategy: String,
    schedule: u64,
    what: String,
    config: Config,
    command: String,
}

#[derive(Serialize)]
struct Report {
    records: u64,
    seed: u64,
    schedules_per_strategy: u64,
    elapsed_s: f64,
    strategies: BTreeMap<String, Totals>,
    failing: Vec<Failing>,
}

/// Draws schedule `i` of `strategy`.
fn draw(args: &Args, strategy: &str, i: u64) -> Config {
    let k = STRATEGIES.iter().position(|s| *s == strategy).unwrap_or(0) as u64;
    let mut rng = SplitMix64(args.seed ^ (k << 56) ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let standby: Vec<String> = match strategy {
        "restart-all" | "region" => vec![],
        // Not chained (no adjacent pair: each is its own chain's head).
        "bqbs-process" => match rng.below(4) {
            0 => vec!["flatmap".into()],
            1 => vec!["keyed".into()],
            2 => vec!["filter".into()],
            _ => vec!["flatmap".into(), "keyed".into()],
        },
        _ => match rng.below(5) {
            0 => vec!["flatmap".into()],
            1 => vec!["keyed".into()],
            2 => vec!["filter".into()],
            // Adjacent: one backed-up chain.
            3 => vec!["flatmap".into(), "filter".into()],
            _ => vec!["flatmap".into(), "keyed".into()],
        },
    };
    let cores = args
        .cores
        .unwrap_or_else(|| tandem::sys::affinity::available_cores().len());
    // Mostly one instance a core; sometimes one in all, or more than cores.
    let parallelism = [cores, cores, 1, cores + 1][rng.below(4) as usize];
    let checkpoint_ms = matches!(strategy, "restart-all" | "region" | "bqbs-checkpoints")
        .then(|| [10, 20, 50, 100][rng.below(4) as usize]);
    // Half at full rate, half throttled to 100–400 k records/s.
    let rate = (rng.below(2) == 0).then(|| (100_000 + 50_000 * rng.below(7)) as f64);
    // Half the chains after the source replay it, half read a queue.
    let queue_source = rng.below(2) == 0;
    let secs = args.records as f64 / rate.unwrap_or(2e6);
    let process = strategy == "bqbs-process";
    let hot = strategy == "bqbs-hot" || (process && rng.below(2) == 0);
    let protection = Protection {
        process,
        standby: standby.clone(),
        checkpoints: checkpoint_ms.is_some(),
        restarts: checkpoint_ms.is_some(),
        transactional: checkpoint_ms.is_some(),
        checkpoints_expected: checkpoint_ms
            .map_or(0, |ms| ((secs * 1e3 / ms as f64) as u64).clamp(1, 50)),
        cores,
        replays_source: strategy.starts_with("bqbs")
            && !queue_source
            && standby.iter().any(|s| s == paper::names::FLATMAP),
        // Process isolation runs unchained: every backed-up operator heads
        // its own chain.
        unprobed: Vec::new(),
    };
    let spec = ScheduleSpec::Random {
        seed: rng.next_u64(),
        count: 1 + rng.below(args.max_faults.max(1)),
        kinds: vec![],
        targets: vec![],
    };
    let schedule = spec
        .expand(&protection.space(args.records))
        .expect("every strategy's space allows some fault");
    Config {
        strategy: strategy.to_string(),
        hot,
        process,
        cores,
        parallelism,
        standby,
        heartbeat_ms: [2, 5, 10][rng.below(3) as usize],
        queue_mib: [2, 16][rng.below(2) as usize],
        queue_source,
        encoded_queue: rng.below(2) == 0,
        checkpoint_ms,
        rate,
        schedule: schedule.to_string(),
    }
}

/// Runs the pipeline once; `Ok(report)` when it completed in time.
fn run_job(
    args: &Args,
    input: &Arc<Input>,
    cfg: &Config,
    injector: Option<&FaultInjector>,
    out: &Path,
    run_dir: &Path,
) -> anyhow::Result<(tandem::JobReport, OutputMode)> {
    let (cores, parallelism) = (cfg.cores, cfg.parallelism);
    let mode = if cfg.checkpoint_ms.is_some() {
        OutputMode::Transactional
    } else {
        OutputMode::Direct
    };
    let opts = PaperOptions {
        parallelism,
        rate: cfg.rate,
        output: Some(out.to_path_buf()),
        output_mode: mode,
        standby: cfg.standby.clone(),
    };
    let (job, _) = paper::build_job(Arc::clone(input), &opts)?;
    let mut rc = RuntimeConfig::default().cores(cores).run_dir(run_dir);
    if cfg.process {
        rc = rc.chaining(tandem::Chaining::Never);
    }
    if let Some(ms) = cfg.checkpoint_ms {
        let mut cp = CheckpointConfig::every(Duration::from_millis(ms));
        cp.tolerable_failures = 10;
        rc = rc.checkpoint(cp).restart(RestartStrategy::FixedDelay {
            attempts: 100,
            delay: Duration::ZERO,
        });
        if cfg.strategy == "region" {
            rc = rc.failover(tandem::Failover::Region);
        }
    }
    if cfg.strategy.starts_with("bqbs") {
        rc = rc.standby(tandem::StandbyConfig {
            mode: if cfg.hot {
                StandbyMode::Hot
            } else {
                StandbyMode::Warm
            },
            isolation: if cfg.process {
                tandem::Isolation::Process
            } else {
                tandem::Isolation::Thread
            },
            // A child builds this configuration's job from the same input.
            child_args: cfg.process.then(|| {
                [
                    "--records".to_string(),
                    args.records.to_string(),
                    "--seed".into(),
                    args.seed.to_string(),
                    "--serve-config".into(),
                    serde_json::to_string(cfg).expect("a config serializes"),
                ]
                .into_iter()
                .map(Into::into)
                .collect()
            }),
            heartbeat_timeout: Duration::from_millis(cfg.heartbeat_ms),
            queue_memory: cfg.queue_mib << 20,
            replay_sources: !cfg.queue_source,
            encoded_queues: cfg.encoded_queue,
            ..Default::default()
        });
    }
    if let Some(i) = injector {
        rc = rc.probes(Arc::new(i.clone()));
    }
    let handle = job.start(&rc)?;
    let started = Instant::now();
    let timeout = Duration::from_secs(args.timeout_s);
    while !handle.is_finished() {
        if tandem_bench::cli::interrupted() {
            handle.cancel();
            let _ = handle.join();
            anyhow::bail!("interrupted");
        }
        if started.elapsed() > timeout {
            handle.cancel();
            anyhow::bail!("hung: not finished after {} s", args.timeout_s);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let report = handle.join()?;
    paper::merge_output(out, parallelism, mode).context("merging the output")?;
    Ok((report, mode))
}

fn run_one(args: &Args, input: &Arc<Input>, clean: &Path, cfg: &Config, dir: &Path) -> RunOutcome {
    let t = Instant::now();
    let mut o = RunOutcome::default();
    let parallelism = cfg.parallelism;
    let schedule: Schedule = cfg.schedule.parse().expect("a drawn schedule parses");
    let injector = match FaultInjector::builder(&schedule)
        .records(args.records)
        .resolver(move |n| paper::tuple_of(parallelism, n))
        .build()
    {
        Ok(i) => i,
        Err(e) => {
            o.failure = Some(format!("arming the schedule: {e}"));
            return o;
        }
    };
    o.counts.faults_armed = injector.armed() as u64;
    let out = dir.join("faulted.jsonl");
    let run_dir = dir.join("run");
    let result = run_job(args, input, cfg, Some(&injector), &out, &run_dir);
    o.counts.faults_fired = injector.fired();
    match result {
        Err(e) => o.failure = Some(format!("{e:#}")),
        Ok((report, _)) => {
            for r in &report.recovery {
                match r.kind {
                    RecoveryKind::Takeover => o.counts.takeovers += 1,
                    // A restart-all, or any recovery that restarts tasks.
                    _ => o.counts.restarts += 1,
                }
                o.counts.unprovoked += u64::from(r.unprovoked);
                if let Some(us) = r.first_output_us {
                    o.first_output_us.push(us);
                }
            }
            match Checker::default().compare_files(clean, &out) {
                Ok(c) => {
                    o.counts.lost = c.lost;
                    o.counts.duplicated = c.duplicated;
                    o.counts.changed = c.changed + c.unexpected;
                }
                Err(e) => o.failure = Some(format!("checking the output: {e}")),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&run_dir);
    let _ = std::fs::remove_file(&out);
    o.secs = t.elapsed().as_secs_f64();
    o
}

fn quantiles(mut v: Vec<u64>) -> (u64, u64, u64) {
    if v.is_empty() {
        return (0, 0, 0);
    }
    v.sort_unstable();
    let q = |f: f64| v[((v.len() as f64 * f).ceil() as usize).clamp(1, v.len()) - 1];
    (q(0.5), q(0.99), *v.last().expect("non-empty"))
}

fn main() -> ExitCode {
    tandem_bench::cli::main(2, || {
        let args: Args = tandem_bench::cli::parse();
        Ok(if real_main(&args)? {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}

/// The most schedules per strategy, and runs of one (`--repeat`), a
/// campaign takes.
const MAX_SCHEDULES: u64 = 1_000_000;

/// A child of process isolation: builds the job of the configuration it
/// was given, from the same input; the engine serves its incarnation
/// (`start` does not return).
fn serve(args: &Args, cfg: &str) -> anyhow::Result<bool> {
    let cfg: Config = serde_json::from_str(cfg).context("--serve-config")?;
    let available = tandem::sys::affinity::available_cores().len();
    let input = Arc::new(Input::generate(args.records, args.seed, 0, available));
    let opts = PaperOptions {
        parallelism: cfg.parallelism,
        rate: cfg.rate,
        output: None,
        output_mode: OutputMode::Direct,
        standby: cfg.standby.clone(),
    };
    let (job, _) = paper::build_job(input, &opts)?;
    job.start(&RuntimeConfig::default())?;
    anyhow::bail!("a child of process isolation returned from its job's start")
}

fn real_main(args: &Args) -> anyhow::Result<bool> {
    if let Some(cfg) = args.serve_config.as_deref() {
        return serve(args, cfg);
    }
    tandem_fault_inject::silence_injected_panics();
    anyhow::ensure!(
        (1..=MAX_SCHEDULES).contains(&args.schedules),
        "--schedules {}: 1 to {MAX_SCHEDULES}",
        args.schedules
    );
    anyhow::ensure!(
        (1..=MAX_SCHEDULES).contains(&args.repeat),
        "--repeat {}: 1 to {MAX_SCHEDULES}",
        args.repeat
    );
    anyhow::ensure!(args.records >= 100, "--records must be at least 100");
    paper::check_records("--records", args.records)?;
    anyhow::ensure!(
        (1..=MAX_FAULTS).contains(&args.max_faults),
        "--max-faults {}: 1 to {MAX_FAULTS}",
        args.max_faults
    );
    anyhow::ensure!(
        (1..=MAX_TIMEOUT_S).contains(&args.timeout_s),
        "--timeout-s {}: 1 to {MAX_TIMEOUT_S} (a day)",
        args.timeout_s
    );
    for s in &args.strategies {
        anyhow::ensure!(
            STRATEGIES.contains(&s.as_str()),
            "--strategies: unknown strategy `{s}` (expected {})",
            STRATEGIES.join(", ")
        );
    }
    let available = tandem::sys::affinity::available_cores().len();
    if let Some(c) = args.cores {
        anyhow::ensure!(
            (1..=available).contains(&c),
            "--cores {c}: 1 to {available} cores are available"
        );
    }
    if let Some(r) = &args.report {
        tandem_bench::paths::output_file("--report", r)?;
    }
    // The runs' files: in --dir (created if missing; what this run made
    // there is removed if it fails or is interrupted), or in a scratch
    // directory of its own (removed at the end; swept by a later run if
    // this one is killed).
    let scratch;
    let dir = match &args.dir {
        Some(d) => {
            tandem_bench::paths::writable_dir("--dir", d)?;
            // What this run makes there goes if it fails; what was there
            // before is not its to remove.
            for f in ["clean.jsonl", "faulted.jsonl", "run", "clean-run"] {
                if std::fs::symlink_metadata(d.join(f)).is_err() {
                    cleanup::add(d.join(f));
                }
            }
            d.clone()
        }
        None => {
            scratch = tandem::sys::scratch::ScratchDir::unique(&std::env::temp_dir(), "chaos")
                .context("creating a temp dir")?;
            scratch.path().to_path_buf()
        }
    };
    let started = Instant::now();
    let input = Arc::new(Input::generate(args.records, args.seed, 0, available));
    // The reference: the same job, no faults, no protection.
    let clean = dir.join("clean.jsonl");
    let cores = args.cores.unwrap_or(available);
    let none = Config {
        strategy: "none".into(),
        hot: false,
        process: false,
        cores,
        parallelism: cores,
        standby: vec![],
        heartbeat_ms: 5,
        queue_mib: 16,
        queue_source: false,
        encoded_queue: false,
        checkpoint_ms: None,
        rate: None,
        schedule: String::new(),
    };
    run_job(args, &input, &none, None, &clean, &dir.join("clean-run")).context("the clean run")?;
    let _ = std::fs::remove_dir_all(dir.join("clean-run"));

    // The schedules to run: every one, or those --only names.
    let mut plan: Vec<(String, u64)> = Vec::new();
    if args.only.is_empty() {
        for strategy in &args.strategies {
            plan.extend((0..args.schedules).map(|i| (strategy.clone(), i)));
        }
    } else {
        for o in &args.only {
            let (s, i) = o
                .split_once(':')
                .and_then(|(s, i)| Some((s, i.parse::<u64>().ok()?)))
                .filter(|(s, _)| STRATEGIES.contains(s))
                .with_context(|| format!("--only {o}: expected STRATEGY:INDEX"))?;
            for _ in 0..args.repeat.max(1) {
                plan.push((s.to_string(), i));
            }
        }
    }
    let total = plan.len() as u64;
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(total)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} schedules {msg}",
        )
        .expect("static template"),
    );
    let mut totals: BTreeMap<String, Totals> = BTreeMap::new();
    let mut failing = Vec::new();
    for (strategy, i) in &plan {
        if tandem_bench::cli::interrupted() {
            anyhow::bail!("interrupted");
        }
        let (strategy, i) = (strategy, *i);
        {
            let cfg = draw(args, strategy, i);
            bar.set_message(format!("{strategy} #{i}"));
            let o = run_one(args, &input, &clean, &cfg, &dir);
            if tandem_bench::cli::interrupted() {
                anyhow::bail!("interrupted");
            }
            let t = totals.entry(strategy.clone()).or_default();
            t.schedules += 1;
            t.counts.add(&o.counts);
            t.secs += o.secs;
            t.first_output_us.extend(&o.first_output_us);
            let what = match &o.failure {
                Some(f) => Some(f.clone()),
                None if o.counts.lost + o.counts.duplicated + o.counts.changed > 0 => {
                    Some(format!(
                        "output differs: {} lost, {} duplicated, {} changed",
                        o.counts.lost, o.counts.duplicated, o.counts.changed
                    ))
                }
                None => None,
            };
            if let Some(what) = what {
                t.failed += 1;
                let command = cfg.command(args.records, args.seed);
                bar.println(format!(
                    "FAIL {strategy} #{i}: {what}\n  reproduce: {command}"
                ));
                failing.push(Failing {
                    strategy: strategy.clone(),
                    schedule: i,
                    what,
                    config: cfg,
                    command,
                });
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    for t in totals.values_mut() {
        (t.recovery_p50_us, t.recovery_p99_us, t.recovery_max_us) =
            quantiles(std::mem::take(&mut t.first_output_us));
    }
    let elapsed = started.elapsed().as_secs_f64();
    outln!(
        "chaos: {} records, seed {}, {} schedules per strategy, {:.0} s",
        args.records,
        args.seed,
        args.schedules,
        elapsed
    )?;
    outln!(
        "  {:<17} {:>9} {:>7} {:>6} {:>9} {:>8} {:>10} {:>5} {:>5} {:>7} {:>6}  recovery p50 / p99 / max",
        "strategy", "schedules", "faults", "fired", "takeovers", "restarts", "unprovoked", "lost", "dup", "changed", "failed"
    )?;
    for (s, t) in &totals {
        outln!(
            "  {s:<17} {:>9} {:>7} {:>6} {:>9} {:>8} {:>10} {:>5} {:>5} {:>7} {:>6}  {} / {} / {}",
            t.schedules,
            t.counts.faults_armed,
            t.counts.faults_fired,
            t.counts.takeovers,
            t.counts.restarts,
            t.counts.unprovoked,
            t.counts.lost,
            t.counts.duplicated,
            t.counts.changed,
            t.failed,
            fmt_us(t.recovery_p50_us),
            fmt_us(t.recovery_p99_us),
            fmt_us(t.recovery_max_us),
        )?;
    }
    let ok = failing.is_empty();
    if !ok {
        outln!(
            "{} failing schedule(s); each reproduces with:",
            failing.len()
        )?;
        for f in &failing {
            outln!(
                "  {} #{}: {}\n    {}",
                f.strategy,
                f.schedule,
                f.what,
                f.command
            )?;
        }
    }
    if let Some(p) = &args.report {
        write_json(
            "--report",
            p,
            &Report {
                records: args.records,
                seed: args.seed,
                schedules_per_strategy: args.schedules,
                elapsed_s: elapsed,
                strategies: totals,
                failing,
            },
        )?;
    }
    let _ = std::fs::remove_file(&clean);
    Ok(ok)
}

fn fmt_us(us: u64) -> String {
    tandem_bench::report::fmt_ns(us * 1000)
}

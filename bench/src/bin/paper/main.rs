//! The paper's pipeline (JSON answers → parse → filter → level → per-user
//! stats → sink) on Tandem, with throughput, HDR latency, CPU and memory,
//! and — with `--strategy restart-all` — checkpoints, injected faults and
//! the recovery figures of each.
//!
//! Input is pre-generated before timing starts (see `paper::gen`); its size
//! is reported as `input_bytes` so the engine's own memory is
//! `peak_rss_bytes - input_bytes`.

mod args;
mod checks;
mod nats;
mod summary;

use anyhow::Context;
use args::Args;
use checks::Plan;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use summary::{ms, p50_p99_max, Recovery, Report, StandbyReport};
use tandem::sys::rusage;
use tandem::{CheckpointConfig, RuntimeConfig};
use tandem_bench::paper::{self, names, Input, PaperOptions};
use tandem_bench::report::{fmt_ns, write_json, LatencyNs};
use tandem_bench::{cleanup, errln};
use tandem_fault_inject::{FaultInjector, Schedule};

/// The engine's configuration of a run of `plan` (`checkpoints`: with
/// its checkpoints, or without them, for a comparison run); fault probes
/// are the run's to add.
fn runtime_config(args: &Args, plan: &Plan, checkpoints: bool) -> RuntimeConfig {
    let mut cfg = RuntimeConfig::default()
        .cores(plan.cores)
        .chaining(args.chaining)
        .ring_capacity(args.ring_capacity)
        .heartbeat_timeout(Duration::from_millis(args.heartbeat_timeout_ms));
    cfg.spin = Duration::from_micros(args.idle_spin_us);
    cfg.yield_for = Duration::from_micros(args.idle_yield_us);
    if let Some(d) = &args.run_dir {
        cfg = cfg.run_dir(d);
    }
    if args.state_backend == "disk" {
        cfg = cfg.state_backend(tandem::state::StateBackend::Disk(
            tandem::state::DiskBackend {
                cache_bytes: (args.state_cache_mb as usize) << 20,
                dir: None,
            },
        ));
    }
    if plan.checkpointing {
        cfg = cfg.restart(args.restart.clone());
        if args.strategy == "region" {
            cfg = cfg.failover(tandem::Failover::Region);
        }
        if checkpoints {
            let mut cp = CheckpointConfig::every(Duration::from_millis(
                args.checkpoint_interval_ms.unwrap_or(1000),
            ));
            cp.mode = args.checkpoint_mode;
            cp.timeout = Duration::from_millis(args.checkpoint_timeout_ms);
            cp.tolerable_failures = args.tolerable_checkpoint_failures;
            cp.min_pause = Duration::from_millis(args.min_pause_ms);
            cp.retain = args.retain;
            cp.dir = args.checkpoint_dir.clone();
            cp.adaptive = args.adaptive_interval;
            if args.whole_checkpoints {
                cp.incremental = None;
            }
            cfg = cfg.checkpoint(cp);
        }
    }
    if let Some(p) = &args.from_savepoint {
        cfg = cfg.restore_from(p);
    }
    if plan.bqbs {
        cfg = cfg.standby(tandem::StandbyConfig {
            mode: args.standby_mode,
            heartbeat_timeout: Duration::from_millis(args.standby_heartbeat_ms),
            snapshot_interval: Duration::from_millis(args.standby_snapshot_ms),
            delta_interval: Duration::from_millis(args.standby_delta_ms.max(1)),
            follow: args.standby_follow,
            queue_memory: args.standby_queue_mib << 20,
            replay_sources: !args.standby_queue_source,
            encoded_queues: args.standby_encoded_queue,
            isolation: args.isolation,
            child_args: plan.shared_input.as_ref().map(|p| {
                std::env::args_os()
                    .skip(1)
                    .chain(["--shared-input".into(), p.clone().into_os_string()])
                    .collect()
            }),
        });
    }
    cfg
}

/// One run of the job; the report without the comparison fields.
fn run(
    args: &Args,
    plan: &Plan,
    input: &Arc<Input>,
    checkpoints: bool,
    faults: &Schedule,
    live: &tandem_bench::live::LiveFlags,
    served: Option<&tandem_bench::live::Served>,
) -> anyhow::Result<Report> {
    let (cores, parallelism) = (plan.cores, plan.parallelism);
    let checkpointing = plan.checkpointing;
    let interval_ms = args.checkpoint_interval_ms.unwrap_or(1000);
    let output_mode = plan.output_mode;
    let opts = options(args, plan);
    let (job, counts) = paper::build_job(Arc::clone(input), &opts)?;
    let mut cfg = runtime_config(args, plan, checkpoints);
    // Tuple IDs name the source's partitions (a restore keeps them).
    let p = plan.partitions;
    let injector = if faults.faults.is_empty() {
        None
    } else {
        let injector = FaultInjector::builder(faults)
            .records(input.len())
            .resolver(move |n| paper::tuple_of(p, n))
            .build()?;
        cfg = cfg.probes(Arc::new(injector.clone()));
        Some(injector)
    };

    let cpu0 = rusage::process_cpu_time();
    // The host's steal on the cores the workers are pinned to: the share
    // of the latency tail no engine can remove (docs/benchmarks.md, *Latency and the
    // host*).
    let steal_cores: Vec<usize> = tandem::sys::affinity::available_cores()
        .into_iter()
        .take(cores)
        .collect();
    let steal = || tandem::sys::thread::cpus_steal_ns(&steal_cores);
    let steal0 = steal();
    let handle = job.start(&cfg).map_err(|e| {
        let hint = match &e {
            tandem::JobError::Runtime(tandem::RuntimeError::NoSpace { .. }) => format!(
                " (here: lower --standby-queue-mib {}, or name a --run-dir on a larger filesystem)",
                args.standby_queue_mib
            ),
            tandem::JobError::Runtime(tandem::RuntimeError::InsufficientMemory { .. }) => format!(
                " (here: lower --parallelism {} or --ring-capacity {})",
                parallelism, args.ring_capacity
            ),
            _ => String::new(),
        };
        anyhow::Error::new(e).context(format!("starting the job{hint}"))
    })?;
    let live = tandem_bench::live::Live::start(live, &handle, served)?;
    let mut bar = tandem_bench::progress::Progress::new(input.len(), "records");
    // Only for a bar someone sees: while a watch lives, the sinks publish
    // their latency every 10 ms.
    let watch = bar.visible().then(|| handle.watch());
    let started = Instant::now();
    let mut savepoint = None;
    let joined = std::thread::scope(|scope| {
        // The savepoint is asked for on a thread of its own: the wait for
        // it (up to the checkpoint timeout) must not stop this loop from
        // seeing a signal.
        let mut asking = None;
        let mut cancelled = false;
        while !handle.is_finished() {
            std::thread::sleep(Duration::from_millis(50));
            if tandem_bench::cli::interrupted() && !cancelled {
                cancelled = true;
                handle.cancel();
            }
            if let Some(ms) = args.savepoint_after_ms {
                if asking.is_none() && started.elapsed() >= Duration::from_millis(ms) {
                    let h = &handle;
                    asking = Some(scope.spawn(move || h.savepoint()));
                }
            }
            if let Some(ms) = args.stop_with_savepoint_after_ms {
                if asking.is_none() && started.elapsed() >= Duration::from_millis(ms) {
                    let h = &handle;
                    asking = Some(scope.spawn(move || h.stop_with_savepoint()));
                }
            }
            let p = handle.progress();
            let pos = p.operator(names::SOURCE).map_or(0, |o| o.records);
            bar.update(pos, watch.as_ref());
        }
        asking.map(|t| t.join().expect("asking for a savepoint does not panic"))
    });
    match joined {
        Some(Ok(dir)) => {
            let what = if args.stop_with_savepoint_after_ms.is_some() {
                "stopped with the savepoint"
            } else {
                "savepoint written to"
            };
            bar.println(&format!("{what} {}", dir.display()));
            savepoint = Some(dir);
        }
        // The job ended first: its own result says how, below.
        Some(Err(tandem::JobError::EndedBeforeSavepoint)) | None => {}
        Some(Err(e)) => return Err(e).context("taking the savepoint"),
    }
    let joined = handle.join();
    if let Some(s) = served {
        s.ended();
    }
    live.finish(joined.as_ref().ok())?;
    if tandem_bench::cli::interrupted() {
        keep_checkpoints(args);
        checks::interrupted()?;
    }
    let report = joined.context("the job failed")?;
    if let (Some(ms), None) = (args.savepoint_after_ms, &savepoint) {
        errln!("warning: no savepoint was taken: the job ended before one was durable (--savepoint-after-ms {ms})");
    }
    if let (Some(ms), None) = (args.stop_with_savepoint_after_ms, &report.stopped_at) {
        errln!("warning: the job ran to its end before a savepoint stopped it (--stop-with-savepoint-after-ms {ms})");
    }
    if let Some(line) = tandem_bench::report::restored_line(&report) {
        errln!("{line}");
    }
    let cpu = rusage::process_cpu_time() - cpu0;
    let host_steal = steal().zip(steal0).map(|(b, a)| b.saturating_sub(a));
    bar.finish();

    let (mut records_out, mut summaries_out) = (
        counts.records.load(std::sync::atomic::Ordering::Relaxed),
        counts.summaries.load(std::sync::atomic::Ordering::Relaxed),
    );
    if let Some(out) = &plan.output {
        let bytes = paper::merge_output(out, parallelism, output_mode)
            .with_context(|| format!("merging output into {}", out.display()))?;
        // In place: the user's now, whatever comes after (a signal, a
        // report that cannot be written).
        tandem_bench::cli::kept(out.display().to_string());
        errln!("wrote {} ({:.1} MB)", out.display(), bytes as f64 / 1e6);
        // After restarts, or a stop, what counts is what the file holds.
        if report.restarts > 0 || report.stopped_at.is_some() {
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
    // (A stopped job read up to its savepoint.)
    let records_in = match &report.stopped_at {
        Some(_) => report.operator(names::SOURCE).map_or(0, |o| o.records),
        None => input.len(),
    };
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
        host_steal_ms: host_steal.map(|ns| ns as f64 / 1e6),
        peak_rss_bytes: peak_rss,
        input_bytes,
        engine_memory_bytes: peak_rss.saturating_sub(input_bytes),
        cores,
        parallelism,
        workers: report.workers,
        tasks: report.tasks,
        rate: args.rate,
        seed: input.seed(),
        input: input.path().map(|p| p.to_path_buf()),
        blank_lines: input.blank_lines(),
        faults: faults.to_string(),
        faults_fired: injector.as_ref().map_or(0, |i| i.fired()),
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
                fault_at_ms: r.fault_at_us as f64 / 1e3,
                cause: r.cause.clone(),
                detect_us: r.detect_us,
                restore_us: r.restore_us,
                first_output_us: r.first_output_us,
                caught_up_us: r.caught_up_us,
                replayed_tuples: r.replayed_tuples,
                restored_checkpoint: r.restored_checkpoint,
                skipped_checkpoints: r.skipped_checkpoints.clone(),
                reason: r.reason.name(),
                unprovoked: r.unprovoked,
                evidence: r.evidence.clone(),
                restarted: r.restarted.clone(),
                kept_running: r.kept_running.clone(),
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
        checkpoints_incremental: report.checkpoints.incremental,
        checkpoint_bytes_after_first: report.checkpoints.bytes_after_first,
        state_bytes_final: report.checkpoints.state_bytes_final,
        restore_bytes_final: report.checkpoints.restore_bytes_final,
        checkpoint_sizes: report.checkpoints.sizes.clone(),
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
                        .filter(|r| r.reason == tandem::RecoveryCause::Injected)
                        .filter_map(f)
                        .collect(),
                )
            };
            StandbyReport {
                operators: plan.standby.clone(),
                chains: s.chains.iter().map(|c| c.join("→")).collect(),
                mode: format!("{:?}", args.standby_mode).to_lowercase(),
                heartbeat_ms: args.standby_heartbeat_ms,
                groups: s.groups,
                takeovers: s.takeovers,
                unprovoked: report
                    .recovery
                    .iter()
                    .filter(|r| r.kind == tandem::RecoveryKind::Takeover && r.unprovoked)
                    .count() as u64,
                injected: report
                    .recovery
                    .iter()
                    .filter(|r| r.kind == tandem::RecoveryKind::Takeover)
                    .filter(|r| r.reason == tandem::RecoveryCause::Injected)
                    .count() as u64,
                standby_failures: s.standby_failures,
                queue_bytes_peak: s.queue_bytes_peak,
                snapshots_published: s.snapshots_published,
                delta_snapshots_published: s.delta_snapshots_published,
                points_followed: s.points_followed,
                points_followed_whole: s.points_followed_whole,
                hot_fell_behind: s.hot_fell_behind,
                standbys_on_idle_workers: s.standbys_on_idle_workers,
                detect_us: col(&|r| Some(r.detect_us)),
                first_output_us: col(&|r| r.first_output_us),
                caught_up_us: col(&|r| r.caught_up_us),
                children: s.children.iter().map(summary::ChildReport::of).collect(),
            }
        }),
    })
}

/// The job's options, as the run builds it (and every child of process
/// isolation builds it again).
fn options(args: &Args, plan: &Plan) -> PaperOptions {
    PaperOptions {
        parallelism: plan.parallelism,
        rate: (args.rate > 0.0).then_some(args.rate),
        output: plan.output.clone(),
        output_mode: plan.output_mode,
        standby: plan.standby.clone(),
    }
}

fn main() -> ExitCode {
    tandem_fault_inject::quiet_injected_panics();
    tandem_bench::cli::main(1, || {
        let matches = tandem_bench::cli::parse_matches(Args::command());
        let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        real_main(&args, &matches)?;
        Ok(ExitCode::SUCCESS)
    })
}

fn real_main(args: &Args, m: &ArgMatches) -> anyhow::Result<()> {
    if nats::wanted(args) {
        return nats::main(args, m);
    }
    let (mut plan, mut warnings) = checks::flags(args, m)?;
    // A generated input's length is known before it is made: the faults
    // (a random schedule's draws included) are checked before any work.
    let early_faults = match (&args.input, tandem::is_incarnation_process()) {
        (None, false) => Some(plan.faults(args, args.records, &mut warnings)?),
        _ => None,
    };
    let driver = !tandem::is_incarnation_process();
    // Held until the run ends: no other run writes the same output — taken
    // before the input is made, so a second run started meanwhile is
    // refused rather than writing the same file.
    let _claim = match (&args.output, driver) {
        (Some(out), true) => {
            let claim = tandem_bench::paper::claim(out)
                .map_err(|e| anyhow::anyhow!("--output {}: {e}", out.display()))?;
            for p in tandem_bench::paper::staging(out, plan.parallelism) {
                cleanup::add(p);
            }
            plan.output = Some(out.clone());
            Some(claim)
        }
        _ => None,
    };
    // Up before the input is made: a busy port is an error before any
    // work, and a scraper (or a browser) finds the endpoint at once.
    let served = match driver {
        true => tandem_bench::live::Served::start(args.metrics_addr, args.ui_addr, "paper")?,
        false => Default::default(),
    };
    if let (Some(sp), true) = (&args.from_savepoint, driver) {
        // A restore point this job cannot start from (another job's, the
        // other state backend's, damaged) is refused before the input is
        // made: the check needs the job's shape, not its records.
        let empty = Arc::new(Input::generate(0, args.seed, 0, 1));
        let (job, _) = paper::build_job(empty, &options(args, &plan))?;
        job.check_start(&runtime_config(args, &plan, true))
            .map_err(|e| anyhow::anyhow!("--from-savepoint {}: {e}", sp.display()))?;
    }
    let available = tandem::sys::affinity::available_cores().len();
    let t = Instant::now();
    let input = match &args.input {
        _ if args.shared_input.is_some() => {
            let p = args.shared_input.as_ref().expect("checked");
            paper::Input::open_shared(p)?
        }
        Some(path) => {
            let input = Input::from_jsonl(path, args.max_record_bytes)?;
            errln!(
                "read {} records ({:.1} MB) from {} in {:.2} s{}",
                input.len(),
                input.memory_bytes() as f64 / 1e6,
                path.display(),
                t.elapsed().as_secs_f64(),
                match input.blank_lines() {
                    0 => String::new(),
                    n => format!(" ({n} blank lines skipped)"),
                }
            );
            input
        }
        None => {
            let input = Input::generate(args.records, args.seed, args.malformed_every, available);
            if !tandem::is_incarnation_process() {
                errln!(
                    "generated {} records ({:.1} MB of JSON) in {:.2} s",
                    args.records,
                    input.memory_bytes() as f64 / 1e6,
                    t.elapsed().as_secs_f64()
                );
            }
            input
        }
    };
    if tandem::is_incarnation_process() {
        // A child of process isolation: it builds the same job, and the
        // engine serves its incarnation (`start` does not return).
        let (job, _) = paper::build_job(Arc::new(input), &options(args, &plan))?;
        job.start(&RuntimeConfig::default())?;
        anyhow::bail!("a child of process isolation returned from its job's start");
    }
    checks::interrupted()?;
    // Process isolation: the children map the driver's input from a file
    // (removed with the run; swept by the next run if this one is killed)
    // rather than generate it again, each, on the cores of the run — or
    // read the user's --input again, which may have changed since the
    // driver read it: every process of the run sees the same records.
    let _shared = if plan.bqbs && args.isolation == tandem::Isolation::Process {
        let parent = args
            .run_dir
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from("/dev/shm"));
        let dir = tandem::sys::scratch::ScratchDir::unique(&parent, "paper-input")
            .with_context(|| format!("a directory for the shared input in {}", parent.display()))?;
        let path = dir.path().join("input");
        let t = Instant::now();
        input
            .write_shared(&path)
            .with_context(|| format!("writing the shared input {}", path.display()))?;
        errln!(
            "shared the input with the incarnations' processes in {:.2} s ({})",
            t.elapsed().as_secs_f64(),
            path.display()
        );
        plan.shared_input = Some(path);
        Some(dir)
    } else {
        None
    };
    if let Some(sp) = &args.from_savepoint {
        plan.partitions = checks::savepoint_fits(sp, input.len(), plan.parallelism)?;
        if plan.partitions != plan.parallelism {
            errln!(
                "rescaling: the restore point has {} source partitions; `{}` keeps them (one \
                 instance each), the rest of the job runs at parallelism {}",
                plan.partitions,
                names::SOURCE,
                plan.parallelism
            );
        }
    }
    let input = Arc::new(input);
    let faults = match early_faults {
        Some(f) => f,
        None => plan.faults(args, input.len(), &mut warnings)?,
    };
    if args.rate > 0.0 && input.len() as f64 / args.rate > 60.0 {
        warnings.push(format!(
            "--rate {} paces {} records over about {} (stop it with Ctrl-C)",
            args.rate,
            input.len(),
            fmt_ns((input.len() as f64 / args.rate * 1e9).min(u64::MAX as f64) as u64)
        ));
    }
    for w in &warnings {
        errln!("warning: {w}");
    }

    let plain = if args.compare_without_checkpoints || args.compare_without_standby {
        let mut p = plan.clone();
        p.output = None;
        if args.compare_without_standby {
            p.bqbs = false;
            p.standby.clear();
        }
        let mut a = args.clone();
        a.savepoint_after_ms = None;
        let r = run(
            &a,
            &p,
            &input,
            false,
            &Schedule::default(),
            &Default::default(),
            None,
        )?;
        errln!(
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
    let live = tandem_bench::live::LiveFlags {
        hlog: args.hlog.clone(),
        timeline: args.timeline.clone(),
        timeline_operator: names::SINK.to_string(),
    };
    let mut rep = run(args, &plan, &input, true, &faults, &live, Some(&served))?;
    if let Some((p, p99)) = plain {
        rep.plain_throughput_rps = Some(p);
        rep.throughput_ratio = Some(rep.throughput_rps / p);
        if args.compare_without_standby {
            rep.plain_p99_ns = Some(p99);
            rep.p99_ratio = Some(rep.latency_ns.p99 as f64 / p99.max(1) as f64);
        }
    }
    summary::print(args, &rep)?;
    if let Some(path) = &args.report {
        write_json("--report", path, &rep)?;
        tandem_bench::cli::kept(path.display().to_string());
        errln!("report written to {}", path.display());
    }
    checks::interrupted()?;
    // The run succeeded: what it made is the user's (`cli::main` keeps
    // it); the lock goes.
    if let Some(out) = &args.output {
        let _ = std::fs::remove_file(tandem_bench::paper::lock_path(out));
    }
    tandem_bench::live::linger(&served, args.metrics_linger_s);
    Ok(())
}

/// An interrupted run keeps the checkpoints it wrote where the user named
/// (`--checkpoint-dir`, or `--run-dir`'s `checkpoints`): the run can go on
/// from them (`--from-savepoint`).
fn keep_checkpoints(args: &Args) {
    let dir = match (&args.checkpoint_dir, &args.run_dir) {
        (Some(d), _) => d.clone(),
        (None, Some(r)) => r.join("checkpoints"),
        _ => return,
    };
    if tandem::runtime::restore_point(&dir).is_ok() {
        cleanup::keep(&dir);
        tandem_bench::cli::kept(format!(
            "the checkpoints in {} (go on with --from-savepoint {})",
            dir.display(),
            dir.display()
        ));
    }
}

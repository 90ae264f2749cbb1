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

mod args;
mod files;
mod report;

use anyhow::Context;
use args::{check, Args, Checked, Mode, Strategy};
use files::{dump_input, write_lines};
use report::{RecoveryJson, Report};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tandem::{CheckpointConfig, RestartStrategy, RuntimeConfig, StandbyConfig, StandbyMode};
use tandem_bench::nexmark::gen::{GenConfig, Tables};
use tandem_bench::nexmark::queries::{self, Options};
use tandem_bench::report::{fmt_bytes, fmt_ns, write_json, LatencyNs};
use tandem_bench::{cleanup, errln, outln};

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        run(&args)
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
            mode: match args.standby_mode.unwrap_or(Mode::Warm) {
                Mode::Warm => StandbyMode::Warm,
                Mode::Hot => StandbyMode::Hot,
            },
            heartbeat_timeout: Duration::from_millis(args.heartbeat_timeout_ms.unwrap_or(5)),
            queue_memory: args
                .queue_mb
                .unwrap_or((1024 / (cores * cores) as u64).clamp(16, 128))
                << 20,
            follow: args.standby_follow,
            delta_interval: args.standby_delta_ms.map_or(
                StandbyConfig::default().delta_interval,
                Duration::from_millis,
            ),
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
    if let Some(line) = tandem_bench::report::restored_line(&report) {
        errln!("{line}");
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

//! What `paper` prints and writes to its JSON report.

use crate::args::Args;
use serde::Serialize;
use std::path::PathBuf;
use tandem::CheckpointMode;
use tandem_bench::outln;
use tandem_bench::report::{fmt_ns, LatencyNs};

#[derive(Serialize)]
pub struct Recovery {
    /// `takeover` (a standby took over), `restart-all` or `region`.
    pub kind: &'static str,
    pub operator: String,
    pub instance: usize,
    /// The input record (its seq) the fault fired on, when known.
    pub tuple_id: Option<u64>,
    /// When the fault happened, ms since the job started.
    pub fault_at_ms: f64,
    pub cause: String,
    pub detect_us: u64,
    pub restore_us: Option<u64>,
    pub first_output_us: Option<u64>,
    pub caught_up_us: Option<u64>,
    pub replayed_tuples: u64,
    pub restored_checkpoint: Option<u64>,
    pub skipped_checkpoints: Vec<String>,
    /// What caused it: `injected`, `panic`, `process died`, `stuck-kill`,
    /// `stall` or `other`.
    pub reason: &'static str,
    /// A recovery no injected fault or reported failure explains (a stall
    /// verdict, a child killed as stuck).
    pub unprovoked: bool,
    /// For a recovery after a stall verdict: what the watcher saw.
    pub evidence: Option<String>,
    /// The tasks it restarted (operators joined by `+`, `#instance`).
    pub restarted: Vec<String>,
    /// The tasks that ran on through it.
    pub kept_running: Vec<String>,
}

#[derive(Serialize)]
pub struct Report {
    pub records_in: u64,
    pub records_out: u64,
    pub summaries_out: u64,
    pub dead_letters: u64,
    pub dead_letter_path: Option<PathBuf>,
    pub throughput_rps: f64,
    pub elapsed_s: f64,
    pub latency_ns: LatencyNs,
    pub cpu_seconds: f64,
    /// What the host took of the job's cores meanwhile (`/proc/stat`
    /// steal, 10 ms steps; `None`: not reported).
    pub host_steal_ms: Option<f64>,
    pub peak_rss_bytes: u64,
    pub input_bytes: u64,
    pub engine_memory_bytes: u64,
    pub cores: usize,
    pub parallelism: usize,
    pub workers: usize,
    pub tasks: usize,
    pub rate: f64,
    pub seed: u64,
    /// The JSONL file the records were read from (`--input`).
    pub input: Option<PathBuf>,
    /// Blank lines of that file, skipped.
    pub blank_lines: u64,
    /// The faults injected, as a schedule that reproduces them.
    pub faults: String,
    /// How many fired.
    pub faults_fired: u64,
    pub input_pregenerated: bool,
    pub strategy: String,
    pub checkpoint_interval_ms: Option<u64>,
    pub recovery: Vec<Recovery>,
    pub restarts: u32,
    pub duplicates_emitted: u64,
    pub checkpoints_completed: u64,
    pub checkpoints_failed: u64,
    /// Started (triggered); each is completed, failed or pending.
    pub checkpoints_started: u64,
    /// In flight when a failure stopped the attempt or the job ended.
    pub checkpoints_pending: u64,
    /// Completed later than one interval after their trigger.
    pub checkpoints_late: u64,
    /// Trigger → durable manifest over the completed ones, milliseconds.
    pub checkpoint_duration_p50_ms: Option<f64>,
    pub checkpoint_duration_p99_ms: Option<f64>,
    pub checkpoint_duration_max_ms: Option<f64>,
    pub checkpoint_bytes: u64,
    /// Completed checkpoints with a delta among their files.
    pub checkpoints_incremental: u64,
    /// Payload bytes of every completed checkpoint but the first.
    pub checkpoint_bytes_after_first: u64,
    /// The newest checkpoint's last full materialization of the state.
    pub state_bytes_final: u64,
    /// What a restore of the newest checkpoint reads.
    pub restore_bytes_final: u64,
    /// Each completed checkpoint's bytes, whole or a delta.
    pub checkpoint_sizes: Vec<tandem::metrics::CheckpointSize>,
    pub checkpoint_write_mbps: f64,
    pub checkpoint_dir: Option<PathBuf>,
    pub savepoint: Option<PathBuf>,
    /// With --compare-without-checkpoints or --compare-without-standby:
    /// the plain run's throughput and this run's over it.
    pub plain_throughput_rps: Option<f64>,
    pub throughput_ratio: Option<f64>,
    /// With --compare-without-standby: the plain run's p99 latency and
    /// this run's over it.
    pub plain_p99_ns: Option<u64>,
    pub p99_ratio: Option<f64>,
    pub standby: Option<StandbyReport>,
}

#[derive(Serialize)]
pub struct StandbyReport {
    pub operators: Vec<String>,
    /// The chains the standbys back up: each the named operator(s) and the
    /// one-input operators chained after them (`flatmap→filter`).
    pub chains: Vec<String>,
    pub mode: String,
    pub heartbeat_ms: u64,
    pub groups: usize,
    pub takeovers: u64,
    /// Takeovers that no injected fault or reported failure explains (the
    /// standby found the primary stuck; see each recovery's `evidence`).
    pub unprovoked: u64,
    /// Takeovers of injected faults: the figures below are over these.
    pub injected: u64,
    pub standby_failures: u64,
    pub queue_bytes_peak: u64,
    pub snapshots_published: u64,
    /// Of the recovery points, those that were deltas (`--standby-follow`).
    pub delta_snapshots_published: u64,
    /// Recovery points a following standby applied, and of them the whole
    /// ones it built its copy from.
    pub points_followed: u64,
    pub points_followed_whole: u64,
    /// Hot mode: times a hot standby fell behind and ran warm until it
    /// started again (it computes only while its worker's own tasks rest),
    /// and the groups whose standby ran on a worker the job left idle.
    pub hot_fell_behind: u64,
    pub standbys_on_idle_workers: usize,
    /// Over the takeovers: p50 / p99 / max, microseconds.
    pub detect_us: [u64; 3],
    pub first_output_us: [u64; 3],
    pub caught_up_us: [u64; 3],
    /// Process isolation: every incarnation's child, as it ended.
    pub children: Vec<ChildReport>,
}

/// One child process of process isolation.
#[derive(Serialize)]
pub struct ChildReport {
    pub operator: String,
    pub instance: usize,
    pub incarnation: u64,
    pub pid: u32,
    /// `primary` or `standby`: the role it last had.
    pub role: String,
    /// `exit code N`, `signal NAME`, or `running` (not ended by the report).
    pub end: String,
    pub cpu_ms: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
}

impl ChildReport {
    pub fn of(c: &tandem::ChildRecord) -> Self {
        let end = match c.exit.map(|e| e.exit) {
            Some(tandem::sys::process::Exit::Code(n)) => format!("exit code {n}"),
            Some(tandem::sys::process::Exit::Signal { signal, .. }) => {
                format!("signal {}", tandem::sys::process::signal_name(signal))
            }
            None => "running".into(),
        };
        ChildReport {
            operator: c.operator.clone(),
            instance: c.instance,
            incarnation: c.incarnation,
            pid: c.pid,
            role: c.role.to_string(),
            end,
            cpu_ms: c.exit.map(|e| e.cpu.as_millis() as u64),
            peak_rss_bytes: c.exit.map(|e| e.peak_rss_bytes),
        }
    }
}

pub fn p50_p99_max(mut v: Vec<u64>) -> [u64; 3] {
    if v.is_empty() {
        return [0; 3];
    }
    v.sort_unstable();
    let q = |f: f64| v[((v.len() as f64 * f).ceil() as usize).clamp(1, v.len()) - 1];
    [q(0.5), q(0.99), *v.last().expect("non-empty")]
}

pub fn opt_us(v: Option<u64>) -> String {
    v.map_or("-".into(), |us| fmt_ns(us * 1000))
}

/// One line per recovery (restart or takeover).
pub fn print_recovery(label: &str, r: &Recovery, suffix: &str) -> anyhow::Result<()> {
    // A failure no operator owns (a crash around a checkpoint) says what
    // it was instead.
    let who = match (r.operator.is_empty(), r.tuple_id) {
        (true, _) => r.cause.clone(),
        (false, Some(t)) => format!("{}[{}] at record {t}", r.operator, r.instance),
        // A failure of no record's (a sink's commit, a stall verdict):
        // its error says which.
        (false, None) => format!("{}[{}] ({})", r.operator, r.instance, r.cause),
    };
    outln!(
        "  {label:<17} {who}: detect {}  restore {}  first output {}  caught up {}  replayed {}{suffix}",
        opt_us(Some(r.detect_us)),
        opt_us(r.restore_us),
        opt_us(r.first_output_us),
        opt_us(r.caught_up_us),
        r.replayed_tuples,
    )
}

/// A rate with three significant digits at least (a rate below one a
/// second is not zero).
pub fn fmt_rate(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else if r >= 1.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.3}")
    }
}

/// Microseconds as milliseconds.
pub fn ms(us: Option<u64>) -> Option<f64> {
    us.map(|u| u as f64 / 1000.0)
}

/// Prints the run's summary.
pub fn print(args: &Args, rep: &Report) -> anyhow::Result<()> {
    let l = &rep.latency_ns;
    outln!(
        "paper pipeline: {} cores, parallelism {}, {} workers, {} tasks, strategy {}",
        rep.cores,
        rep.parallelism,
        rep.workers,
        rep.tasks,
        rep.strategy
    )?;
    outln!("  records in        {}", rep.records_in)?;
    outln!(
        "  records out       {} (+ {} per-user summaries)",
        rep.records_out,
        rep.summaries_out
    )?;
    outln!(
        "  dead letters      {}{}",
        rep.dead_letters,
        rep.dead_letter_path
            .as_ref()
            .map(|p| format!(" ({})", p.display()))
            .unwrap_or_default()
    )?;
    if !rep.faults.is_empty() {
        outln!(
            "  faults            {} fired: {}",
            rep.faults_fired,
            rep.faults
        )?;
    }
    outln!("  elapsed           {:.3} s", rep.elapsed_s)?;
    outln!(
        "  throughput        {} records/s",
        fmt_rate(rep.throughput_rps)
    )?;
    if let (Some(p), Some(r)) = (rep.plain_throughput_rps, rep.throughput_ratio) {
        let what = if rep.strategy == "bqbs" {
            "standby"
        } else {
            "ckpts"
        };
        outln!("  without {what:<9} {p:.0} records/s (ratio {r:.3})")?;
    }
    if let (Some(p), Some(r)) = (rep.plain_p99_ns, rep.p99_ratio) {
        outln!("  p99 without       {} (ratio {r:.3})", fmt_ns(p))?;
    }
    outln!(
        "  latency           min {}  p50 {}  p99 {}  p99.9 {}  max {}  ({} samples)",
        fmt_ns(l.min),
        fmt_ns(l.p50),
        fmt_ns(l.p99),
        fmt_ns(l.p999),
        fmt_ns(l.max),
        l.samples
    )?;
    match rep.host_steal_ms {
        Some(ms) => outln!(
            "  cpu               {:.2} s (the host took {ms:.0} ms of the job's cores: steal)",
            rep.cpu_seconds
        )?,
        None => outln!("  cpu               {:.2} s", rep.cpu_seconds)?,
    }
    outln!(
        "  peak rss          {:.1} MiB (input {:.1} MiB, engine {:.1} MiB)",
        rep.peak_rss_bytes as f64 / 1048576.0,
        rep.input_bytes as f64 / 1048576.0,
        rep.engine_memory_bytes as f64 / 1048576.0
    )?;
    if rep.checkpoint_interval_ms.is_some() {
        outln!(
            "  checkpoints       {} started: {} completed ({} late), {} failed, {} pending; {:.1} MB written at {:.0} MB/s",
            rep.checkpoints_started,
            rep.checkpoints_completed,
            rep.checkpoints_late,
            rep.checkpoints_failed,
            rep.checkpoints_pending,
            rep.checkpoint_bytes as f64 / 1e6,
            rep.checkpoint_write_mbps
        )?;
        outln!(
            "  checkpoint bytes  {} incremental; after the first {:.1} MB; final state {:.1} MB (a restore reads {:.1} MB)",
            rep.checkpoints_incremental,
            rep.checkpoint_bytes_after_first as f64 / 1e6,
            rep.state_bytes_final as f64 / 1e6,
            rep.restore_bytes_final as f64 / 1e6,
        )?;
        if !rep.checkpoint_sizes.is_empty() {
            outln!(
                "  checkpoint sizes  {}",
                tandem_bench::report::checkpoint_sizes_line(&rep.checkpoint_sizes, 12)
            )?;
        }
        if let (Some(p50), Some(p99), Some(max)) = (
            rep.checkpoint_duration_p50_ms,
            rep.checkpoint_duration_p99_ms,
            rep.checkpoint_duration_max_ms,
        ) {
            outln!(
                "  checkpoint time   p50 {p50:.2} ms  p99 {p99:.2} ms  max {max:.2} ms (trigger → durable manifest)"
            )?;
        }
        let unprovoked = rep
            .recovery
            .iter()
            .filter(|r| matches!(r.kind, "restart-all" | "region") && r.unprovoked)
            .count();
        outln!(
            "  restarts          {} ({} unprovoked; duplicates emitted: {})",
            rep.restarts,
            unprovoked,
            rep.duplicates_emitted
        )?;
        if rep.restarts > 0 && args.checkpoint_mode == CheckpointMode::AtLeastOnce {
            // The count above is of direct sinks only: at-least-once
            // checkpoints cut the streams unaligned, so committed output
            // and keyed state may hold records a restart replayed.
            outln!(
                "  at-least-once     committed output may repeat records replayed after a restart, and per-user summaries may count them twice (not counted above)"
            )?;
        }
    }
    if let Some(s) = &rep.standby {
        outln!(
            "  standby           {} on {} ({} groups, {} mode, heartbeat {} ms): {} takeovers ({} unprovoked), {} standby failures, queue peak {:.1} MiB, {} snapshots",
            s.chains.join(", "),
            rep.parallelism,
            s.groups,
            s.mode,
            s.heartbeat_ms,
            s.takeovers,
            s.unprovoked,
            s.standby_failures,
            s.queue_bytes_peak as f64 / 1048576.0,
            s.snapshots_published
        )?;
        if s.points_followed > 0 || s.delta_snapshots_published > 0 {
            outln!(
                "  followed          {} of the snapshots were deltas; the standbys followed {} points ({} whole)",
                s.delta_snapshots_published,
                s.points_followed,
                s.points_followed_whole
            )?;
        }
        if s.mode == "hot" {
            outln!(
                "  hot standbys      {} of {} on a core the job leaves idle; fell behind {} times, warm until they started again (a hot standby computes only while its worker's own tasks rest)",
                s.standbys_on_idle_workers,
                s.groups,
                s.hot_fell_behind
            )?;
        }
        for c in &s.children {
            outln!(
                "  child process     {}[{}] incarnation {} pid {} ({}): {}, cpu {}, peak rss {}",
                c.operator,
                c.instance,
                c.incarnation,
                c.pid,
                c.role,
                c.end,
                c.cpu_ms.map_or("?".into(), |m| format!("{m} ms")),
                c.peak_rss_bytes
                    .map_or("?".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0))
            )?;
        }
        if s.injected > 0 {
            let f = |v: [u64; 3]| {
                format!(
                    "p50 {}  p99 {}  max {}",
                    opt_us(Some(v[0])),
                    opt_us(Some(v[1])),
                    opt_us(Some(v[2]))
                )
            };
            outln!("  over the {} takeovers of injected faults:", s.injected)?;
            outln!("  detect            {}", f(s.detect_us))?;
            outln!("  first output      {}", f(s.first_output_us))?;
            outln!("  caught up         {}", f(s.caught_up_us))?;
        }
    }
    // Every recovery, in order, with the kind that ran.
    for (i, r) in rep.recovery.iter().enumerate() {
        let why = match (r.kind, &r.evidence, r.unprovoked) {
            ("restart-all" | "region", _, _) => format!(
                " (from checkpoint {}{}; restarted {} tasks, {} kept running)",
                r.restored_checkpoint
                    .map_or("none".into(), |c| c.to_string()),
                if r.skipped_checkpoints.is_empty() {
                    String::new()
                } else {
                    format!("; skipped {}", r.skipped_checkpoints.join("; "))
                },
                r.restarted.len(),
                r.kept_running.len()
            ),
            (_, Some(e), true) => format!(" — unprovoked ({}): {e}", r.reason),
            (_, Some(e), false) => format!(" — {}: {e}", r.reason),
            _ => format!(" — {}", r.reason),
        };
        let why = match (r.kind, r.unprovoked, &r.evidence) {
            ("restart-all" | "region", true, Some(e)) => {
                format!("{why} — unprovoked ({}): {e}", r.reason)
            }
            ("restart-all" | "region", _, _) => format!("{why} — {}", r.reason),
            _ => why,
        };
        print_recovery(&format!("{} {}", r.kind, i + 1), r, &why)?;
    }
    Ok(())
}

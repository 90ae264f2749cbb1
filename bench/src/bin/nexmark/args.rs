//! `nexmark`'s flags, and what they resolve to, checked before any work.

use anyhow::{bail, ensure};
use clap::Parser;
use std::path::{Path, PathBuf};
use tandem_bench::nexmark;
use tandem_bench::nexmark::gen::{DEFAULT_BASE_TIME_MS, DEFAULT_RATE};
use tandem_bench::nexmark::queries::Query;
use tandem_bench::paths;

/// What recovers from a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Strategy {
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
pub(crate) enum Mode {
    /// Snapshots at an interval; a takeover restores one and replays.
    Warm,
    /// Follows the input; a takeover replays a few chunks.
    Hot,
}

#[derive(Parser, Debug)]
#[command(about = "Nexmark queries on Tandem: events/s per core and latency")]
pub(crate) struct Args {
    /// The query.
    #[arg(long, value_enum)]
    pub(crate) query: Query,
    /// Events to generate (1 to 10,000,000,000).
    #[arg(long, default_value_t = 10_000_000)]
    pub(crate) events: u64,
    /// Events per second of event time (the times the events carry,
    /// whether or not the run is `--paced`).
    #[arg(long, default_value_t = DEFAULT_RATE)]
    pub(crate) rate: f64,
    /// Paces the sources to `--rate` (default: as fast as they go).
    #[arg(long)]
    pub(crate) paced: bool,
    /// Seeds the generator.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Event 0's time, ms since the epoch.
    #[arg(long, default_value_t = DEFAULT_BASE_TIME_MS)]
    pub(crate) base_time_ms: u64,
    /// Worker cores (default: every available one); the source and every
    /// operator run one instance per core.
    #[arg(long)]
    pub(crate) cores: Option<usize>,
    /// What recovers from a failure.
    #[arg(long, value_enum, default_value_t = Strategy::None)]
    pub(crate) strategy: Strategy,
    /// The operator with an active standby (`--strategy bqbs`; default:
    /// the query's first operator): `window`, `join`, … (see README).
    #[arg(long)]
    pub(crate) standby: Option<String>,
    /// The standby's mode: `warm` (restores the primary's latest snapshot
    /// and replays from it) or `hot` (follows the primary's input into
    /// its own state; no snapshots — for large state). Default: warm.
    #[arg(long, value_enum)]
    pub(crate) standby_mode: Option<Mode>,
    /// How long a primary may show no sign of life (while its thread is
    /// busy, not merely descheduled) before its standby takes over; the
    /// standby waits up to 8 × this on a machine it sees to be noisy.
    /// Default: 5.
    #[arg(long)]
    pub(crate) heartbeat_timeout_ms: Option<u64>,
    /// A warm standby follows the recovery points: each point after the
    /// first is a delta it applies to its own copy, and a takeover
    /// restores nothing (see the README for its limit).
    #[arg(long)]
    pub(crate) standby_follow: bool,
    /// Recovery point interval while a warm standby follows the points
    /// (each point a delta it applies); the engine's default when not
    /// given.
    #[arg(long)]
    pub(crate) standby_delta_ms: Option<u64>,
    /// MiB of each buffer queue of the standby (one per upstream instance
    /// and operator instance, in /dev/shm or the work directory). The
    /// primary takes a recovery point at the latest when a queue is full
    /// of entries no point covers; at 10 M events/s a 16 MiB queue fills
    /// in about 50 ms, and each point archives the operator's whole state.
    /// Default: 1 GiB over the cores² queues, 16 to 128 MiB each (128 on
    /// 2 cores, 16 from 8 cores on, where each queue carries less).
    #[arg(long)]
    pub(crate) queue_mb: Option<u64>,
    /// Checkpoint interval of `--strategy restart-all`, `region` and `both`.
    #[arg(long, default_value_t = 1000)]
    pub(crate) checkpoint_interval_ms: u64,
    /// Where the checkpoints go, kept after the run (default: the run's
    /// scratch directory, removed at its end).
    #[arg(long)]
    pub(crate) checkpoint_dir: Option<PathBuf>,
    /// Stop the job with a savepoint this long after its start (Flink's
    /// stop-with-savepoint): the output holds what the savepoint covers,
    /// and `--from-savepoint DIR/sp-N`, on any number of cores, writes the
    /// rest. Needs `--strategy restart-all`, `region` or `both` and
    /// `--checkpoint-dir`.
    #[arg(long)]
    pub(crate) stop_with_savepoint_after_ms: Option<u64>,
    /// Start from a savepoint or checkpoint (an sp-N directory, a manifest
    /// or a checkpoint directory) of this query and input, on any number
    /// of cores: the keyed state, windows included, is redistributed by
    /// key, and the source keeps the partitions it had.
    #[arg(long)]
    pub(crate) from_savepoint: Option<PathBuf>,
    /// Every checkpoint writes every state whole (by default a keyed
    /// state's checkpoint is a delta over the previous one, whole again
    /// once the deltas since add up to the last whole archive's size).
    #[arg(long)]
    pub(crate) whole_checkpoints: bool,
    /// Faults to inject, in the fault language (e.g. `panic@window:~10`,
    /// `random:7:5`); record `i` is the `i`-th event of the kind the
    /// operator reads (README).
    #[arg(long)]
    pub(crate) fault: Option<String>,
    /// Writes the results, one JSON object per line, sorted.
    #[arg(long)]
    pub(crate) output: Option<PathBuf>,
    /// Writes the generated events, one JSON object per line.
    #[arg(long)]
    pub(crate) dump_input: Option<PathBuf>,
    /// Writes the figures as JSON.
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
    /// Where the run's scratch files go — checkpoints, the output's
    /// staging, and the standby's files (default: the temp directory, and
    /// `/dev/shm` for the standby's).
    #[arg(long)]
    pub(crate) work_dir: Option<PathBuf>,
    /// Serve live metrics while the job runs, in the Prometheus text
    /// format at http://ADDR/metrics (e.g. 127.0.0.1:9464; port 0: any
    /// free port, printed). Off by default.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// Serve a live view of the job in the browser at http://ADDR/; port
    /// 0: any free port, printed. Off by default.
    #[arg(long, value_name = "ADDR")]
    pub(crate) ui_addr: Option<std::net::SocketAddr>,
    /// With --metrics-addr or --ui-addr: keep serving the final figures
    /// this many seconds after the job ended (a last scrape or look), or
    /// until Ctrl-C; at most a day.
    #[arg(long, value_name = "S", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub(crate) metrics_linger_s: u64,
    /// Write end-to-end latency as an HdrHistogram interval log (.hlog),
    /// one interval a second, values in nanoseconds.
    #[arg(long, value_name = "FILE")]
    pub(crate) hlog: Option<PathBuf>,
}

/// What the flags resolve to, checked before any work.
pub(crate) struct Checked {
    pub(crate) cores: usize,
    /// The source's partitions: the cores, or the restore point's.
    pub(crate) partitions: usize,
    /// The faults, parsed and checked against the query.
    pub(crate) injector: Option<(
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
pub(crate) fn check(args: &Args) -> anyhow::Result<Checked> {
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
    if let Some(ms) = args.heartbeat_timeout_ms {
        ensure!(
            (1..=YEAR_MS).contains(&ms),
            "--heartbeat-timeout-ms {ms}: 1 to {YEAR_MS} (a year)"
        );
    }
    if let Some(ms) = args.standby_delta_ms {
        ensure!(
            (1..=YEAR_MS).contains(&ms),
            "--standby-delta-ms {ms}: 1 to {YEAR_MS} (a year)"
        );
        ensure!(
            args.standby_follow,
            "--standby-delta-ms is the interval of the points a following standby applies: it needs --standby-follow"
        );
    }
    ensure!(
        !args.standby_follow || args.standby_mode != Some(Mode::Hot),
        "--standby-follow needs --standby-mode warm: a hot standby computes along and has no points to follow"
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
        ("--standby-mode", args.standby_mode.is_some()),
        (
            "--heartbeat-timeout-ms",
            args.heartbeat_timeout_ms.is_some(),
        ),
        ("--standby-follow", args.standby_follow),
        ("--standby-delta-ms", args.standby_delta_ms.is_some()),
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

//! The `paper` binary's flags.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use tandem::recovery::restart::parse_duration;
use tandem::{Chaining, CheckpointMode, RestartStrategy};
use tandem_bench::paper::{self, OutputMode};

/// Runs the paper's pipeline and prints throughput, latency and recovery.
#[derive(Parser, Debug, Clone)]
#[command(version)]
pub struct Args {
    /// Records to generate and process.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Read the records from this JSONL file instead of generating them:
    /// one answer record per line, in the generator's shape (see
    /// README). Lines that are not valid records go to the dead-letter
    /// file with their line number and the reason; blank lines are
    /// skipped.
    #[arg(long, conflicts_with_all = ["records", "seed", "malformed_every"])]
    pub input: Option<PathBuf>,
    /// The largest record --input may hold, in bytes; a longer line goes
    /// to the dead-letter file (its first KiB kept).
    #[arg(long, default_value_t = paper::DEFAULT_MAX_RECORD_BYTES)]
    pub max_record_bytes: usize,
    /// Source rate in records/s over all partitions; 0 = as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Seed of the input generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Cores to run on (default: all the process may use).
    #[arg(long)]
    pub cores: Option<usize>,
    /// Instances per operator (default: the number of cores).
    #[arg(long)]
    pub parallelism: Option<usize>,
    /// Write one JSONL line per output record here.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// How the sink writes --output: transactional (committed per
    /// checkpoint, exactly once) or direct (into part files through a
    /// 64 KiB buffer drained at every barrier; a restart writes the
    /// replayed records again, and the report counts them — an upper
    /// bound: lines still buffered when an attempt failed are written
    /// once). Default: transactional with checkpoints (--strategy
    /// restart-all, or bqbs with --checkpoint-interval-ms), else direct.
    #[arg(long, value_parser = parse_output_mode)]
    pub sink_mode: Option<OutputMode>,
    /// Write a JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Make every k-th input record malformed (0 = none).
    #[arg(long, default_value_t = 0)]
    pub malformed_every: u64,
    /// Directory for files the run creates (dead letters, checkpoints);
    /// default: a temp dir.
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Operator chaining: auto, always or never.
    #[arg(long, default_value = "auto", value_parser = parse_chaining)]
    pub chaining: Chaining,
    /// Slots per ring between tasks.
    #[arg(long, default_value_t = 1024)]
    pub ring_capacity: usize,
    /// Inject a fault, KIND@TARGET:WHEN or KIND@TARGET:WHEN:ARG
    /// (repeatable): panic, stall (ARG: MILLIS or forever), slow (MICROS,
    /// or MICROSxCOUNT), cut, mute (MILLIS), standby (before or during),
    /// corrupt (flip or truncate), kill, abort, segv (the process running
    /// the operator dies: --strategy none ends the run; --strategy bqbs
    /// --isolation process, on a backed-up operator, takes over) on an
    /// operator; commit on the sink;
    /// ioerror (eio or enospc, -write or -fsync), crash, corrupt on
    /// `checkpoint`. WHEN: input record N, P/S (a tuple ID), +DUR, %K
    /// (every K-th record), N*B (a burst), ~C (C spread evenly); a
    /// checkpoint id for commit and checkpoint faults, or `final` for
    /// commit (the job's final commit). A group member (--source) takes
    /// commit faults only, each fired once in the member's run. See
    /// README.
    #[arg(long = "fault")]
    pub faults: Vec<tandem_fault_inject::FaultSpec>,
    /// Inject a schedule: SPEC,SPEC,… or random:SEED:COUNT, optionally
    /// :KINDS and :TARGETS (`+`-separated), drawn among the faults this
    /// configuration recovers from (the run prints the faults drawn). One
    /// KIND@OPERATOR:COUNT is the older shorthand for COUNT faults spread
    /// evenly (KIND@OPERATOR:~COUNT).
    #[arg(long)]
    pub fault_schedule: Option<String>,
    /// Recovery strategy: none (a failure ends the run), restart-all
    /// (checkpoints; on a failure every operator restarts from the last
    /// complete one), region (checkpoints; only the failed task's failover
    /// region restarts: the paper's job, whose key_by joins every instance,
    /// is one region) or bqbs (active standby for the --standby
    /// operators).
    #[arg(long, default_value = "none", value_parser = ["none", "restart-all", "region", "bqbs"])]
    pub strategy: String,
    /// Operators with a standby (bqbs): any of flatmap, filter, keyed,
    /// comma-separated.
    #[arg(long, default_value = "flatmap", value_delimiter = ',')]
    pub standby: Vec<String>,
    /// Standby mode (bqbs): warm (restores the primary's newest snapshot
    /// and replays) or hot (computes along, output suppressed).
    #[arg(long, default_value = "warm", value_parser = parse_standby_mode)]
    pub standby_mode: tandem::StandbyMode,
    /// Where a backed-up operator's primary and standby run (bqbs): thread
    /// (on the job's workers) or process (each in a child process of its
    /// own, so that a standby survives its primary's process dying:
    /// kill, abort and segv faults).
    #[arg(long, default_value = "thread", value_parser = parse_isolation)]
    pub isolation: tandem::Isolation,
    /// An idle worker spins this long before it yields (µs): idle spans
    /// shorter than this cost no wake-up, and CPU for as long (see docs/benchmarks.md,
    /// *Latency and the host*).
    #[arg(long, default_value_t = 50)]
    pub idle_spin_us: u64,
    /// ... and yields its core until this long (µs, at least
    /// --idle-spin-us) before it parks; a parked worker is woken by its
    /// producers.
    #[arg(long, default_value_t = 500)]
    pub idle_yield_us: u64,
    /// A primary without a heartbeat for this long has stalled (bqbs).
    #[arg(long, default_value_t = 5)]
    pub standby_heartbeat_ms: u64,
    /// Warm snapshot interval (bqbs, stateful operators).
    #[arg(long, default_value_t = 200)]
    pub standby_snapshot_ms: u64,
    /// Recovery point interval while a warm standby follows the points
    /// (bqbs: each point a delta the standby applies).
    #[arg(long, default_value_t = 10)]
    pub standby_delta_ms: u64,
    /// A warm standby follows the recovery points (either isolation):
    /// each point after the first is a delta it applies to its own copy,
    /// and a takeover restores nothing (see the README for its limit).
    #[arg(long)]
    pub standby_follow: bool,
    /// Bytes of each buffer queue, in MiB (bqbs).
    #[arg(long, default_value_t = 16)]
    pub standby_queue_mib: u64,
    /// Copy the source's records into a buffer queue even where the
    /// backed-up chain could replay the source itself (bqbs; by default a
    /// chain right after a source, such as `--standby flatmap`'s, uses the
    /// source as its queue).
    #[arg(long)]
    pub standby_queue_source: bool,
    /// Encode each record into its buffer queue and decode it again in the
    /// primary and standby (bqbs), as a standby in another process would
    /// need, rather than hand them the record itself in a typed slot.
    #[arg(long)]
    pub standby_encoded_queue: bool,
    /// (Internal: process isolation's children map the driver's generated
    /// input from this file instead of generating it again.)
    #[arg(long, hide = true)]
    pub shared_input: Option<PathBuf>,
    /// Also run the same job with --strategy none first (no faults) and
    /// print the throughput and p99 ratios (bqbs / none).
    #[arg(long)]
    pub compare_without_standby: bool,
    /// Checkpoint interval. restart-all: default 1000. bqbs: checkpoints
    /// run beside the standbys only when this is given — a failure of an
    /// operator without a standby is then restart-all from the last
    /// complete checkpoint, and --output is transactional.
    #[arg(long)]
    pub checkpoint_interval_ms: Option<u64>,
    /// Every checkpoint writes every state whole (by default a keyed
    /// state's checkpoint is a delta over the previous completed one,
    /// whole again once the deltas since add up to its last whole
    /// archive's size).
    #[arg(long)]
    pub whole_checkpoints: bool,
    /// Where the keyed stage keeps its state: `memory` (the default) or
    /// `disk` (an LSM store behind a bounded cache, for state larger than
    /// memory; no standby: refused with --strategy bqbs).
    #[arg(long, default_value = "memory", value_parser = ["memory", "disk"])]
    pub state_backend: String,
    /// The disk backend's cache per keyed instance, in MiB (1 to 65536).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub state_cache_mb: u64,
    /// Checkpoint directory (default: RUN_DIR/checkpoints or a temp dir
    /// removed at the end).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Barrier alignment: exactly-once or at-least-once.
    #[arg(long, default_value = "exactly-once", value_parser = parse_mode)]
    pub checkpoint_mode: CheckpointMode,
    /// A checkpoint not complete after this long is abandoned.
    #[arg(long, default_value_t = 60_000)]
    pub checkpoint_timeout_ms: u64,
    /// Consecutive failed checkpoints tolerated before the job fails.
    #[arg(long, default_value_t = 3)]
    pub tolerable_checkpoint_failures: u32,
    /// Least time between the end of a checkpoint and the next one.
    #[arg(long, default_value_t = 0)]
    pub min_pause_ms: u64,
    /// Checkpoints kept.
    #[arg(long, default_value_t = 3)]
    pub retain: usize,
    /// Adapt the interval to failures and checkpoint cost within MIN:MAX
    /// (e.g. 100ms:10s).
    #[arg(long, value_parser = parse_range)]
    pub adaptive_interval: Option<(Duration, Duration)>,
    /// Restart strategy: none | fixed:ATTEMPTS:DELAY |
    /// exp:INITIAL:MAX:MULTIPLIER:JITTER:RESET | rate:FAILURES:INTERVAL:DELAY.
    #[arg(long, default_value = "fixed:100:0ms")]
    pub restart: RestartStrategy,
    /// A worker without a heartbeat for this long has stalled.
    #[arg(long, default_value_t = 100)]
    pub heartbeat_timeout_ms: u64,
    /// Take a savepoint this long after the start (restart-all).
    #[arg(long)]
    pub savepoint_after_ms: Option<u64>,
    /// Stop the job with a savepoint this long after the start (Flink's
    /// stop-with-savepoint): the output is committed up to the savepoint
    /// and nothing after it; `--from-savepoint DIR`, at this or another
    /// --parallelism, writes the rest. Needs
    /// --checkpoint-dir or --run-dir (the savepoint must outlive the run).
    #[arg(long, conflicts_with = "savepoint_after_ms")]
    pub stop_with_savepoint_after_ms: Option<u64>,
    /// Start from a savepoint or checkpoint (an sp-ID directory, a
    /// manifest, or a checkpoint directory), at any --parallelism: the
    /// per-user state is redistributed by key, the level rules copied, and
    /// the source keeps the partitions it had.
    #[arg(long)]
    pub from_savepoint: Option<PathBuf>,
    /// Also run the same job without checkpoints first, and print the
    /// throughput ratio (checkpointed / plain).
    #[arg(long)]
    pub compare_without_checkpoints: bool,
    /// Serve live metrics while the job runs, in the Prometheus text
    /// format at http://ADDR/metrics (e.g. 127.0.0.1:9464; port 0: any
    /// free port, printed). Off by default.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Serve a live view of the job in the browser at http://ADDR/ (the
    /// job graph with each operator's rate, checkpoints, standby groups
    /// and their lag, recoveries, latency over time); port 0: any free
    /// port, printed. Off by default.
    #[arg(long, value_name = "ADDR")]
    pub ui_addr: Option<std::net::SocketAddr>,
    /// With --metrics-addr or --ui-addr: keep serving the final figures
    /// this many seconds after the job ended (a last scrape or look), or
    /// until Ctrl-C; at most a day.
    #[arg(long, value_name = "S", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub metrics_linger_s: u64,
    /// Write end-to-end latency as an HdrHistogram interval log (.hlog),
    /// one interval a second, values in nanoseconds.
    #[arg(long, value_name = "FILE")]
    pub hlog: Option<PathBuf>,
    /// Write the sink's throughput and p99 latency in 10 ms buckets, and
    /// each recovery's fault, as JSON (what `experiments` plots).
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// NATS: publish the generated records (partitioned by user ID, an
    /// end marker per partition) to the new stream
    /// nats://HOST:PORT/STREAM, and exit.
    #[arg(long, value_name = "URL", conflicts_with_all = ["source", "input"])]
    pub produce: Option<String>,
    /// NATS: partitions of the stream --produce writes.
    #[arg(long, default_value_t = 8)]
    pub partitions: u32,
    /// NATS: run one member of --group over this stream
    /// (nats://HOST:PORT/STREAM); the run ends when the group has
    /// consumed every partition's end marker.
    #[arg(long, value_name = "URL", requires = "group")]
    pub source: Option<String>,
    /// NATS: the stream the output is published to, exactly once.
    #[arg(long, value_name = "URL", requires = "source")]
    pub sink: Option<String>,
    /// NATS: the group this member belongs to (members with the same name
    /// share the partitions; a finished group's name is spent).
    #[arg(long, value_name = "NAME", requires = "source")]
    pub group: Option<String>,
    /// NATS: the object-store bucket for checkpoints
    /// (nats://HOST:PORT/BUCKET; pointers in BUCKET-manifests).
    #[arg(long, value_name = "URL", requires = "source")]
    pub checkpoint_store: Option<String>,
    /// NATS: a lease not renewed for this long expires and its partition
    /// is taken over.
    #[arg(long, default_value_t = 3000, requires = "source")]
    pub lease_ms: u64,
    /// NATS: read the partitions and discard them (the transport's own
    /// rate): no pipeline, sink or checkpoint.
    #[arg(long, requires = "source", conflicts_with_all = ["sink", "checkpoint_store"])]
    pub consume_only: bool,
    /// NATS: replicas of the streams and buckets a run creates (3 in a
    /// three-server cluster).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// NATS: the duplicate window of a stream this run creates, seconds
    /// (how long the server remembers a message id).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub dup_window_s: u64,
    /// NATS: how long a member waits out servers that do not answer (a
    /// cluster electing a leader, a server restarting) before it fails,
    /// seconds.
    #[arg(long, default_value_t = 180, requires = "source", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub outage_s: u64,
    /// NATS: a member of a group that has finished ends at once (exit 0)
    /// instead of refusing the spent name.
    #[arg(long, requires = "source")]
    pub resume_finished: bool,
    /// NATS: --produce packs each partition's records into messages of up
    /// to this many bytes (0: one record a message).
    #[arg(long, default_value_t = 32768, requires = "produce", value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub pack_bytes: u64,
}

pub fn parse_chaining(s: &str) -> Result<Chaining, String> {
    match s {
        "auto" => Ok(Chaining::Auto),
        "always" => Ok(Chaining::Always),
        "never" => Ok(Chaining::Never),
        _ => Err(format!("expected auto, always or never, got `{s}`")),
    }
}

pub fn parse_mode(s: &str) -> Result<CheckpointMode, String> {
    match s {
        "exactly-once" => Ok(CheckpointMode::ExactlyOnce),
        "at-least-once" => Ok(CheckpointMode::AtLeastOnce),
        _ => Err(format!("expected exactly-once or at-least-once, got `{s}`")),
    }
}

pub fn parse_standby_mode(s: &str) -> Result<tandem::StandbyMode, String> {
    match s {
        "warm" => Ok(tandem::StandbyMode::Warm),
        "hot" => Ok(tandem::StandbyMode::Hot),
        _ => Err(format!("expected warm or hot, got `{s}`")),
    }
}

pub fn parse_isolation(s: &str) -> Result<tandem::Isolation, String> {
    match s {
        "thread" => Ok(tandem::Isolation::Thread),
        "process" => Ok(tandem::Isolation::Process),
        _ => Err(format!("expected thread or process, got `{s}`")),
    }
}

pub fn parse_output_mode(s: &str) -> Result<OutputMode, String> {
    match s {
        "transactional" => Ok(OutputMode::Transactional),
        "direct" => Ok(OutputMode::Direct),
        _ => Err(format!("expected transactional or direct, got `{s}`")),
    }
}

pub fn parse_range(s: &str) -> Result<(Duration, Duration), String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("expected MIN:MAX, got `{s}`"))?;
    let d = |x: &str| parse_duration(x).ok_or_else(|| format!("`{x}` is not a duration"));
    Ok((d(a)?, d(b)?))
}

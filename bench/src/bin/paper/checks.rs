//! What `paper` checks before any work starts: every flag that cannot take
//! effect is refused with the flag named, every path it will write is
//! tried, every fault is checked against the job it would hit. Warnings
//! say what will happen that the user may not expect (a fault that never
//! fires).

use crate::args::Args;
use anyhow::ensure;
use clap::parser::ValueSource;
use clap::ArgMatches;
use std::path::{Path, PathBuf};
use tandem::sys::output::{check_dir, kind_of};
use tandem::RestartStrategy;
use tandem_bench::paper::{self, names, OutputMode};
use tandem_bench::paths::{distinct, identity, input_file, output_file, writable_dir};
use tandem_fault_inject::{FaultKind, FaultSpec, Schedule, ScheduleSpec, Space, When, CHECKPOINT};

/// The longest idle spin or yield phase a worker may be given: 1 s.
const MAX_IDLE_US: u64 = 1_000_000;

/// The operators of the paper pipeline, in order.
pub const OPERATORS: [&str; 7] = [
    names::SOURCE,
    names::LEVELS,
    names::FLATMAP,
    names::FILTER,
    names::MAP,
    names::KEYED,
    names::SINK,
];

/// The most instances per operator `paper` runs (the engine refuses
/// earlier what its rings would not fit in memory).
const MAX_PARALLELISM: usize = 1024;

/// The longest an injected stall nothing detects, or a slow operator,
/// may hold the run up.
const MAX_UNDETECTED_DELAY_MS: u64 = 60_000;

/// The slowest `--rate`: one record a day.
const MIN_RATE: f64 = 1.0 / 86_400.0;

/// Operators that can have a standby.
const BACKABLE: [&str; 3] = [names::FLATMAP, names::FILTER, names::KEYED];

/// What the flags resolve to.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Process isolation: the generated input, shared with the children.
    pub shared_input: Option<std::path::PathBuf>,
    pub cores: usize,
    pub parallelism: usize,
    /// The source's partitions: the parallelism, or the number a restored
    /// checkpoint has (a restore keeps a source's partitions whatever the
    /// job's parallelism; the rest of the job rescales).
    pub partitions: usize,
    pub bqbs: bool,
    /// Checkpoints (and restarts from them) run.
    pub checkpointing: bool,
    pub output_mode: OutputMode,
    /// Where the output goes (set once the run holds it).
    pub output: Option<PathBuf>,
    /// Operators with a standby (empty unless bqbs).
    pub standby: Vec<String>,
    /// The faults as given (`--fault`, then the schedule), expanded once
    /// the input's length is known ([`Plan::faults`]).
    pub fault_specs: Vec<FaultSpec>,
    pub schedule: Option<ScheduleSpec>,
}

fn given(m: &ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(ValueSource::CommandLine)
}

/// Refuses `--from-savepoint` when the source cannot reach a position the
/// checkpoint holds: an input shorter than the checkpointed run's (the
/// restore would otherwise fail at the seek, after the job started).
///
/// Returns the source's partitions in the checkpoint.
pub fn savepoint_fits(path: &Path, records: u64, parallelism: usize) -> anyhow::Result<usize> {
    let (m, _) = tandem::runtime::restore_point(path)
        .map_err(|e| anyhow::anyhow!("--from-savepoint {}: {e}", path.display()))?;
    let shape = m
        .parallelism()
        .map_err(|e| anyhow::anyhow!("--from-savepoint {}: {e}", path.display()))?;
    let partitions = shape
        .and_then(|s| s.get(names::SOURCE).copied())
        .unwrap_or(parallelism);
    let p = partitions as u64;
    for e in m.files.iter().filter(|e| e.operator == names::SOURCE) {
        let Some(pos) = e.positions.first() else {
            continue;
        };
        let i = u64::from(e.instance);
        let in_partition = records.saturating_sub(i).div_ceil(p);
        ensure!(
            pos.next_seq <= in_partition,
            "--from-savepoint {}: checkpoint {} resumes source partition {i} at its record {} \
             (input record {}), and this input has {records} records ({in_partition} in that \
             partition): give the run the input the checkpointed run had",
            path.display(),
            m.id,
            pos.next_seq,
            pos.next_seq.saturating_mul(p).saturating_add(i)
        );
    }
    Ok(partitions)
}

/// An error if the run was interrupted (the caller's frame says how).
pub fn interrupted() -> anyhow::Result<()> {
    ensure!(!tandem_bench::cli::interrupted(), "interrupted");
    Ok(())
}

/// Checks the flags; returns the plan and the warnings.
pub fn flags(args: &Args, m: &ArgMatches) -> anyhow::Result<(Plan, Vec<String>)> {
    let mut warnings = Vec::new();
    let available = tandem::sys::affinity::available_cores().len();
    let cores = args.cores.unwrap_or(available);
    ensure!(cores >= 1, "--cores must be at least 1");
    ensure!(
        cores <= available,
        "--cores {cores}: only {available} cores are available to this process"
    );
    let parallelism = args.parallelism.unwrap_or(cores);
    ensure!(parallelism >= 1, "--parallelism must be at least 1");
    ensure!(
        args.rate == 0.0 || (MIN_RATE..f64::INFINITY).contains(&args.rate),
        "--rate {}: 0 (as fast as possible), or records/s from one a day ({MIN_RATE:.7}) up",
        args.rate
    );
    ensure!(
        args.ring_capacity >= 2,
        "--ring-capacity {}: a ring needs at least 2 slots",
        args.ring_capacity
    );
    ensure!(
        args.ring_capacity <= 1 << 24,
        "--ring-capacity {}: at most {} slots",
        args.ring_capacity,
        1 << 24
    );
    if !args.ring_capacity.is_power_of_two() {
        warnings.push(format!(
            "--ring-capacity {} is rounded up to {} slots (a power of two)",
            args.ring_capacity,
            args.ring_capacity.next_power_of_two()
        ));
    }
    ensure!(
        (64..=paper::MAX_RECORD_BYTES).contains(&args.max_record_bytes),
        "--max-record-bytes {}: 64 to {} (1 GiB)",
        args.max_record_bytes,
        paper::MAX_RECORD_BYTES
    );
    ensure!(
        parallelism <= MAX_PARALLELISM,
        "--parallelism {parallelism}: at most {MAX_PARALLELISM}"
    );
    match &args.input {
        None => paper::check_records("--records", args.records)?,
        Some(_) if tandem::is_incarnation_process() => {}
        Some(p) => {
            // Read whole before timing: it must fit in memory.
            let len = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            if let Some(available) = tandem::sys::limits::available_memory() {
                ensure!(
                    len <= available / 2,
                    "--input {}: {} would not fit in memory ({} available; the input is read whole before the run)",
                    p.display(),
                    tandem::sys::fs::human_bytes(len),
                    tandem::sys::fs::human_bytes(available)
                );
            }
        }
    }
    // Region failover is restart-all with a smaller scope: the same
    // checkpoints, restart strategy and flags.
    let restart_all = matches!(args.strategy.as_str(), "restart-all" | "region");
    let bqbs = args.strategy == "bqbs";
    let checkpointing = restart_all || (bqbs && args.checkpoint_interval_ms.is_some());

    ensure!(
        !given(m, "metrics_linger_s") || args.metrics_addr.is_some() || args.ui_addr.is_some(),
        "--metrics-linger-s needs --metrics-addr or --ui-addr (there is nothing to keep serving)"
    );
    // Flags that only take effect with a strategy, refused without it.
    let standby_flags = [
        "standby",
        "isolation",
        "standby_mode",
        "standby_heartbeat_ms",
        "standby_snapshot_ms",
        "standby_queue_mib",
        "standby_delta_ms",
        "standby_follow",
        "standby_queue_source",
        "standby_encoded_queue",
        "compare_without_standby",
    ];
    for f in standby_flags {
        ensure!(
            bqbs || !given(m, f),
            "--{} needs --strategy bqbs (this run has --strategy {})",
            f.replace('_', "-"),
            args.strategy
        );
    }
    let checkpoint_flags = [
        "checkpoint_dir",
        "checkpoint_mode",
        "checkpoint_timeout_ms",
        "tolerable_checkpoint_failures",
        "min_pause_ms",
        "retain",
        "adaptive_interval",
        "restart",
        "heartbeat_timeout_ms",
        "savepoint_after_ms",
        "stop_with_savepoint_after_ms",
    ];
    ensure!(
        args.checkpoint_interval_ms.is_none() || restart_all || bqbs,
        "--checkpoint-interval-ms needs --strategy restart-all or bqbs"
    );
    for f in checkpoint_flags {
        ensure!(
            checkpointing || !given(m, f),
            "--{} needs checkpoints: --strategy restart-all, or --strategy bqbs with --checkpoint-interval-ms",
            f.replace('_', "-")
        );
    }
    ensure!(
        !args.compare_without_checkpoints || restart_all,
        "--compare-without-checkpoints needs --strategy restart-all"
    );
    ensure!(
        args.stop_with_savepoint_after_ms.is_none()
            || args.checkpoint_dir.is_some()
            || args.run_dir.is_some(),
        "--stop-with-savepoint-after-ms needs --checkpoint-dir or --run-dir: the savepoint must outlive the run"
    );
    for (flag, v) in [
        ("--checkpoint-interval-ms", args.checkpoint_interval_ms),
        ("--checkpoint-timeout-ms", Some(args.checkpoint_timeout_ms)),
        ("--heartbeat-timeout-ms", Some(args.heartbeat_timeout_ms)),
        ("--standby-heartbeat-ms", Some(args.standby_heartbeat_ms)),
        ("--standby-snapshot-ms", Some(args.standby_snapshot_ms)),
        ("--standby-delta-ms", Some(args.standby_delta_ms)),
        ("--standby-queue-mib", Some(args.standby_queue_mib)),
    ] {
        ensure!(v != Some(0), "{flag} 0: must be at least 1");
    }
    ensure!(
        !given(m, "standby_delta_ms") || args.standby_follow,
        "--standby-delta-ms is the interval of the points a following standby applies: it needs --standby-follow"
    );
    ensure!(
        !args.standby_follow || args.standby_mode == tandem::StandbyMode::Warm,
        "--standby-follow needs --standby-mode warm: a hot standby computes along and has no points to follow"
    );
    let year = tandem::recovery::restart::MAX_DURATION.as_millis() as u64;
    for (flag, v) in [
        ("--checkpoint-interval-ms", args.checkpoint_interval_ms),
        ("--checkpoint-timeout-ms", Some(args.checkpoint_timeout_ms)),
        ("--heartbeat-timeout-ms", Some(args.heartbeat_timeout_ms)),
        ("--standby-heartbeat-ms", Some(args.standby_heartbeat_ms)),
        ("--standby-snapshot-ms", Some(args.standby_snapshot_ms)),
        ("--standby-delta-ms", Some(args.standby_delta_ms)),
        ("--min-pause-ms", Some(args.min_pause_ms)),
        ("--savepoint-after-ms", args.savepoint_after_ms),
        (
            "--stop-with-savepoint-after-ms",
            args.stop_with_savepoint_after_ms,
        ),
    ] {
        if let Some(v) = v {
            ensure!(v <= year, "{flag} {v}: at most {year} (a year)");
        }
    }
    for (flag, v) in [
        ("--idle-spin-us", args.idle_spin_us),
        ("--idle-yield-us", args.idle_yield_us),
    ] {
        ensure!(v <= MAX_IDLE_US, "{flag} {v}: at most {MAX_IDLE_US} (1 s)");
    }
    ensure!(
        args.idle_yield_us >= args.idle_spin_us,
        "--idle-yield-us {}: at least --idle-spin-us ({})",
        args.idle_yield_us,
        args.idle_spin_us
    );
    ensure!(
        args.standby_queue_mib <= 1 << 20,
        "--standby-queue-mib {}: at most {} (1 TiB)",
        args.standby_queue_mib,
        1 << 20
    );
    ensure!(args.retain >= 1, "--retain 0: keep at least 1 checkpoint");
    if let Some((min, max)) = args.adaptive_interval {
        ensure!(
            !min.is_zero(),
            "--adaptive-interval: the minimum must be above 0"
        );
        ensure!(
            min <= max,
            "--adaptive-interval {:?}:{:?}: the minimum is above the maximum",
            min,
            max
        );
    }

    ensure!(
        !(bqbs && args.isolation == tandem::Isolation::Process && checkpointing),
        "--isolation process does not run with checkpoints yet (an operator in a child process \
         cannot take part in one): drop --checkpoint-interval-ms, or use --isolation thread"
    );

    // Standbys.
    let standby = if bqbs {
        args.standby.clone()
    } else {
        Vec::new()
    };
    for (i, s) in standby.iter().enumerate() {
        ensure!(
            BACKABLE.contains(&s.as_str()),
            "--standby {s}: only flatmap, filter and keyed can have a standby (map has two inputs, sources and sinks none)"
        );
        ensure!(!standby[..i].contains(s), "--standby: `{s}` is named twice");
    }
    if bqbs && args.standby_encoded_queue && standby.iter().any(|s| s != names::FLATMAP) {
        // A parsed record of up to --max-record-bytes enters the queues of
        // filter and keyed, encoded (typed slots take any size).
        let cfg = tandem::standby::bq::BqConfig::for_memory(
            (args.standby_queue_mib << 20).max(64 << 10),
            64,
            tandem::standby::bq::MAX_READERS as u32,
        )?;
        ensure!(
            (args.max_record_bytes as u64).saturating_add(256) <= cfg.max_entry(),
            "--max-record-bytes {} does not fit the standby's buffer queue of --standby-queue-mib {} (entries up to {} bytes): raise the queue or lower the limit",
            args.max_record_bytes,
            args.standby_queue_mib,
            cfg.max_entry()
        );
    }

    // Output.
    let output_mode = args.sink_mode.unwrap_or(if checkpointing {
        OutputMode::Transactional
    } else {
        OutputMode::Direct
    });
    ensure!(
        args.sink_mode.is_none() || args.output.is_some(),
        "--sink-mode needs --output (without it nothing is written)"
    );
    ensure!(
        output_mode != OutputMode::Transactional || checkpointing,
        "--sink-mode transactional commits output at checkpoints: it needs --strategy restart-all, or --strategy bqbs with --checkpoint-interval-ms"
    );
    // A child of process isolation runs the driver's checked job on the
    // driver's copy of the input: it looks at none of the user's paths
    // (the driver did, and the files may have changed since).
    if !tandem::is_incarnation_process() {
        check_paths(args, parallelism)?;
    }

    let plan = Plan {
        shared_input: None,
        cores,
        parallelism,
        partitions: parallelism,
        bqbs,
        checkpointing,
        output_mode,
        output: None,
        standby,
        fault_specs: args.faults.clone(),
        schedule: match &args.fault_schedule {
            None => None,
            Some(s) => Some(legacy(
                s.parse()
                    .map_err(|e| anyhow::anyhow!("--fault-schedule: {e}"))?,
            )),
        },
    };
    for f in &plan.fault_specs {
        plan.check_fault(args, f)
            .map_err(|e| anyhow::anyhow!("--fault {f}: {e}"))?;
    }
    if let Some(ScheduleSpec::List(v)) = &plan.schedule {
        for f in v {
            plan.check_fault(args, f)
                .map_err(|e| anyhow::anyhow!("--fault-schedule {f}: {e}"))?;
        }
    }
    Ok((plan, warnings))
}

/// Every path the run reads or writes, checked before any work (the
/// output discipline of `tandem_bench::paths`): files it reads are regular
/// files, files it writes are regular files or none yet, directories are
/// directories or none yet; no two flags name one file, through symlinks
/// and hard links, the input included — but `--from-savepoint` may name
/// the `--checkpoint-dir` the run goes on checkpointing into. Directories
/// are created only once every path has passed.
fn check_paths(args: &Args, parallelism: usize) -> anyhow::Result<()> {
    let mut named: Vec<(&str, &Path)> = Vec::new();
    if let Some(p) = &args.input {
        input_file("--input", p)?;
        named.push(("--input", p));
    }
    let files = [
        ("--output", &args.output),
        ("--report", &args.report),
        ("--hlog", &args.hlog),
        ("--timeline", &args.timeline),
    ];
    for (flag, p) in files {
        if let Some(p) = p {
            output_file(flag, p)?;
            named.push((flag, p));
        }
    }
    let dirs = [
        ("--run-dir", &args.run_dir),
        ("--checkpoint-dir", &args.checkpoint_dir),
    ];
    for (flag, d) in dirs {
        if let Some(d) = d {
            check_dir(d).map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
            named.push((flag, d));
        }
    }
    distinct(&named)?;
    if let Some(p) = &args.from_savepoint {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() || m.is_file() => {}
            Ok(m) => anyhow::bail!(
                "--from-savepoint {}: is {}; name a savepoint directory, a manifest or a checkpoint directory",
                p.display(),
                kind_of(m.file_type())
            ),
            Err(_) => anyhow::bail!(
                "--from-savepoint {}: no such file or directory",
                p.display()
            ),
        }
        for (flag, q) in &named {
            ensure!(
                *flag == "--checkpoint-dir" || identity(p) != identity(q),
                "--from-savepoint {} and {flag} {} name the same file",
                p.display(),
                q.display()
            );
        }
    }
    if let Some(o) = &args.output {
        for (flag, p) in &named {
            ensure!(
                !paper::staging(o, parallelism)
                    .iter()
                    .any(|s| identity(s) == identity(p)),
                "{flag} {}: the run stages --output {} there",
                p.display(),
                o.display()
            );
        }
    }
    for (flag, d) in dirs {
        if let Some(d) = d {
            writable_dir(flag, d)?;
        }
    }
    Ok(())
}

/// One `KIND@OPERATOR:COUNT[:MILLIS]` is the older spread shorthand.
fn legacy(s: ScheduleSpec) -> ScheduleSpec {
    match s {
        ScheduleSpec::List(mut v) if v.len() == 1 && !v[0].kind.by_checkpoint() => {
            if let When::Record(c) = v[0].when {
                v[0].when = When::Spread(c);
            }
            ScheduleSpec::List(v)
        }
        other => other,
    }
}

impl Plan {
    fn backed_up(&self, op: &str) -> bool {
        self.bqbs && self.standby.iter().any(|s| s == op)
    }

    /// Operators no fault can be injected into (as the engine refuses
    /// them at start): under process isolation, `filter` is chained after
    /// `flatmap` when `flatmap` is backed up, into the chain `flatmap`
    /// heads, whose records the child process runs unprobed.
    fn unprobed(&self, args: &Args) -> Vec<String> {
        let isolated = self.bqbs && args.isolation == tandem::Isolation::Process;
        if isolated && args.chaining != tandem::Chaining::Never && self.backed_up(names::FLATMAP) {
            vec![names::FILTER.to_string()]
        } else {
            Vec::new()
        }
    }

    /// Whether a stall that never ends in `op` is detected (and ends).
    fn stall_detected(&self, args: &Args, op: &str) -> bool {
        (self.backed_up(op) && self.cores > 1)
            || (self.checkpointing && args.restart != RestartStrategy::None)
    }

    /// Whether fault `f` can take effect in this job.
    fn check_fault(&self, args: &Args, f: &FaultSpec) -> Result<(), String> {
        if f.kind.on_checkpoint() {
            if !self.checkpointing {
                return Err("checkpoint faults need checkpoints (--strategy restart-all, or bqbs with --checkpoint-interval-ms)".into());
            }
            return Ok(());
        }
        if !OPERATORS.contains(&f.target.as_str()) {
            return Err(format!(
                "no operator `{}` in the paper pipeline (operators: {}; `{CHECKPOINT}` for checkpoint faults)",
                f.target,
                OPERATORS.join(", ")
            ));
        }
        if self.unprobed(args).contains(&f.target) {
            return Err(format!(
                "under process isolation `{}` is chained after `{}` into the chain `{1}` heads, \
                 which runs in a child process where records are not probed: inject the fault \
                 into `{1}`, or run the operators apart (--chaining never)",
                f.target,
                names::FLATMAP
            ));
        }
        match f.kind {
            FaultKind::Commit => {
                if f.target != names::SINK {
                    return Err(format!("commit faults target the sink `{}`", names::SINK));
                }
                if !(self.checkpointing
                    && args.output.is_some()
                    && self.output_mode == OutputMode::Transactional)
                {
                    return Err(
                        "commit faults need a transactional --output (with checkpoints)".into(),
                    );
                }
            }
            k if k.ends_process()
                && (self.bqbs || self.checkpointing)
                && !(self.backed_up(&f.target) && args.isolation == tandem::Isolation::Process) =>
            {
                let survives = if BACKABLE.contains(&f.target.as_str()) {
                    format!(
                        "it runs with --strategy bqbs --standby {} --isolation process, or with \
                         --strategy none",
                        f.target
                    )
                } else {
                    format!(
                        "it runs with --strategy none; only {} can run in a process of their own \
                         (--isolation process)",
                        BACKABLE.join(", ")
                    )
                };
                return Err(format!(
                    "{} ends the process that runs `{}`, and here that process runs the whole job: neither a standby nor a restart would survive it ({survives})",
                    k.name(),
                    f.target
                ));
            }
            k if k.needs_standby() && !self.backed_up(&f.target) => {
                return Err(format!(
                    "{} faults need `{}` to have a standby (--strategy bqbs --standby {})",
                    k.name(),
                    f.target,
                    f.target
                ));
            }
            FaultKind::Stall { millis: None } if !self.stall_detected(args, &f.target) => {
                return Err(format!(
                    "nothing would detect a stall of `{}` that never ends (it needs a standby, or checkpoints with a restart strategy): the run would hang",
                    f.target
                ));
            }
            FaultKind::Stall { millis: Some(ms) }
                if ms > MAX_UNDETECTED_DELAY_MS && !self.stall_detected(args, &f.target) =>
            {
                return Err(format!(
                    "nothing would detect a stall of `{}` (it needs a standby, or checkpoints with a restart strategy), so the run would wait {} s for it: at most {} s",
                    f.target,
                    ms / 1000,
                    MAX_UNDETECTED_DELAY_MS / 1000
                ));
            }
            FaultKind::Slow { micros, records }
                if micros.saturating_mul(records) / 1000 > MAX_UNDETECTED_DELAY_MS =>
            {
                return Err(format!(
                    "{micros} µs on each of {records} records would slow the run by {} s: at most {} s",
                    micros.saturating_mul(records) / 1_000_000,
                    MAX_UNDETECTED_DELAY_MS / 1000
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// The faults a random schedule may draw: those this configuration
    /// recovers from with exactly the clean output.
    pub fn space(&self, args: &Args, records: u64) -> Space {
        // The checkpoints to expect: one an interval over the time the
        // input takes at its rate (at full rate, ~2 M records/s).
        let interval = args.checkpoint_interval_ms.unwrap_or(1000).max(1) as f64 / 1e3;
        let secs = if args.rate > 0.0 {
            records as f64 / args.rate
        } else {
            records as f64 / 2e6
        };
        paper::Protection {
            process: self.bqbs && args.isolation == tandem::Isolation::Process,
            standby: self.standby.clone(),
            checkpoints: self.checkpointing,
            restarts: args.restart != RestartStrategy::None,
            transactional: args.output.is_some() && self.output_mode == OutputMode::Transactional,
            checkpoints_expected: ((secs / interval) as u64).clamp(1, 1000),
            cores: self.cores,
            replays_source: self.bqbs
                && !args.standby_queue_source
                && self.standby.iter().any(|s| s == paper::names::FLATMAP),
            unprobed: self.unprobed(args),
        }
        .space(records)
    }

    /// The concrete faults of this run, once the input's length is known;
    /// faults that can never fire are dropped with a warning.
    pub fn faults(
        &self,
        args: &Args,
        records: u64,
        warnings: &mut Vec<String>,
    ) -> anyhow::Result<Schedule> {
        let mut all = self.fault_specs.clone();
        if let Some(spec) = &self.schedule {
            let drawn = spec
                .expand(&self.space(args, records))
                .map_err(|e| anyhow::anyhow!("--fault-schedule: {e}"))?;
            if let ScheduleSpec::Random { .. } = spec {
                warnings.push(format!("--fault-schedule {spec} drew: {drawn}"));
                for f in &drawn.faults {
                    self.check_fault(args, f)
                        .map_err(|e| anyhow::anyhow!("--fault-schedule drew {f}: {e}"))?;
                }
            }
            all.extend(drawn.faults);
        }
        let mut kept = Vec::new();
        for f in all {
            let past = match f.when {
                When::Record(n) | When::Burst { first: n, .. } if !f.kind.by_checkpoint() => (n
                    >= records)
                    .then(|| format!("record {n} is past the input's end ({records} records)")),
                When::Tuple { partition, .. } if partition as usize >= self.parallelism => {
                    Some(format!("the source has partitions 0..{}", self.parallelism))
                }
                When::Every(k) if !f.kind.by_checkpoint() && k >= records => {
                    Some(format!("the input has {records} records"))
                }
                _ => None,
            };
            match past {
                Some(why) => warnings.push(format!("fault {f} never fires: {why}")),
                None => kept.push(f),
            }
        }
        Ok(Schedule { faults: kept })
    }
}

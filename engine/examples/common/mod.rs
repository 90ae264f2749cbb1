//! What the event-time examples share: the recovery strategy, the fault
//! schedule, exactly-once line files, and the report.

use clap::ValueEnum;
use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tandem::sinks::transactional::TransactionalFile;
use tandem::{CheckpointConfig, JobReport, RestartStrategy, RuntimeConfig, StandbyConfig, TupleId};
use tandem_fault_inject::{FaultInjector, ScheduleSpec, Space};

/// What recovers from a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Strategy {
    /// No recovery: a fault fails the job.
    None,
    /// Checkpoints every 100 ms; a failure restarts every operator from the
    /// last one.
    RestartAll,
    /// Checkpoints every 100 ms; a failure restarts only the failed task's
    /// failover region from the last one (the job's instances that share
    /// no record with it run on).
    Region,
    /// An active standby on the operator faults are injected into takes
    /// over.
    Bqbs,
}

/// Prints a line to standard output; a closed pipe (`| head`) is not an
/// error (the output file, if any, is written already).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}
pub(crate) use say;

/// An example's failure, as `main` returns it: printed as `Error: ` and
/// its message with its causes (`main`'s return prints the `Debug` form,
/// which here is the message, not Rust's debug text).
pub struct Failed(Box<dyn Error>);

impl<E: Into<Box<dyn Error>>> From<E> for Failed {
    fn from(e: E) -> Self {
        Failed(e.into())
    }
}

impl std::fmt::Debug for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

/// Runs `run` in a fresh work directory for `name` (see [`workdir`]),
/// with injected panics quiet, and removes the directory afterwards,
/// whatever `run` returned.
pub fn in_workdir(
    name: &str,
    run: impl FnOnce(&Path) -> Result<(), Box<dyn Error>>,
) -> Result<(), Failed> {
    tandem_fault_inject::quiet_injected_panics();
    let work = workdir(name)?;
    let result = run(&work);
    let _ = std::fs::remove_dir_all(&work);
    Ok(result?)
}

/// Nanoseconds of event time in a millisecond, and in a microsecond.
#[allow(dead_code)] // not every example has event time
pub const MS: u64 = 1_000_000;
#[allow(dead_code)]
pub const US: u64 = 1_000;

/// A well-mixed hash of record `i` of the input drawn with `seed`.
#[allow(dead_code)] // not every example draws its input with it
pub fn mix(seed: u64, i: u64) -> u64 {
    let mut h = (i ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 31;
    h
}

/// A fresh working directory for the run's output and checkpoints.
pub fn workdir(name: &str) -> std::io::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("tandem-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// The runtime for `strategy` on `cores` cores (default: up to 2), its
/// checkpoints (every `every`, for restart-all and region) under `work`.
pub fn config(
    strategy: Strategy,
    cores: Option<usize>,
    work: &Path,
    every: Duration,
) -> RuntimeConfig {
    let cores = cores.unwrap_or_else(|| tandem::sys::affinity::available_cores().len().clamp(1, 2));
    let config = RuntimeConfig::default().cores(cores);
    match strategy {
        Strategy::None => config,
        Strategy::RestartAll | Strategy::Region => {
            let mut c = CheckpointConfig::every(every);
            c.dir = Some(work.join("checkpoints"));
            let config = config.checkpoint(c).restart(RestartStrategy::FixedDelay {
                attempts: 100,
                delay: Duration::ZERO,
            });
            if strategy == Strategy::Region {
                config.failover(tandem::Failover::Region)
            } else {
                config
            }
        }
        Strategy::Bqbs => config.standby(StandbyConfig::default()),
    }
}

/// The fault schedule `spec` over `records` input records (panics, stalls
/// and cuts in `ops`; input record `i` is tuple `resolve(i)`), armed in
/// `config`; prints it.
pub fn injector(
    spec: Option<&str>,
    records: u64,
    ops: &[&str],
    resolve: fn(u64) -> TupleId,
    config: &mut RuntimeConfig,
) -> Result<Option<FaultInjector>, Box<dyn Error>> {
    let Some(s) = spec else { return Ok(None) };
    let spec: ScheduleSpec = s.parse()?;
    let mut space = Space::new(records);
    for op in ops {
        space = space.allow("panic", op).allow("stall", op).allow("cut", op);
    }
    let schedule = spec.expand(&space)?;
    say!("schedule: {schedule}");
    let injector = FaultInjector::builder(&schedule)
        .records(records)
        .resolver(resolve)
        .build()?;
    *config = std::mem::take(config).probes(Arc::new(injector.clone()));
    Ok(Some(injector))
}

/// What the run recovered from; `lines` (sorted) written to `output`; an
/// error if a scheduled fault never fired (a test that did not run).
pub fn finish(
    report: &JobReport,
    injector: Option<&FaultInjector>,
    lines: &[String],
    output: Option<&Path>,
) -> Result<(), Box<dyn Error>> {
    if let Some(i) = injector {
        let injected = report.injected_recoveries();
        let unprovoked = report.unprovoked_recoveries();
        say!(
            "{} of {} faults fired, {} recoveries ({injected} of injected faults, {unprovoked} unprovoked)",
            i.fired(),
            i.armed(),
            report.recovery.len()
        );
    }
    for r in &report.recovery {
        say!(
            "  recovered: {} of {}[{}]{} — {}{}: {}; first output after {} µs, {} inputs replayed{}",
            r.kind.name(),
            r.operator,
            r.instance,
            r.tuple_id
                .map_or(String::new(), |t| format!(" at record {t}")),
            if r.unprovoked { "unprovoked " } else { "" },
            r.reason.name(),
            r.cause,
            r.first_output_us.map_or("-".into(), |u| u.to_string()),
            r.replayed_tuples,
            r.evidence
                .as_ref()
                .map_or(String::new(), |e| format!(" [evidence: {e}]"))
        );
    }
    if let Some(path) = output {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for l in lines {
            writeln!(f, "{l}")?;
        }
        f.flush()?;
        say!("output: {}", path.display());
    }
    if let Some(i) = injector {
        let unfired: Vec<String> = i
            .status()
            .into_iter()
            .filter(|(_, times)| *times == 0)
            .map(|(f, _)| f)
            .collect();
        if !unfired.is_empty() {
            return Err(format!("faults that never fired: {}", unfired.join(", ")).into());
        }
    }
    Ok(())
}

/// Every line committed in `dir`.
pub fn committed(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut v = Vec::new();
    if !dir.exists() {
        return Ok(v);
    }
    for p in TransactionalFile::committed_files(dir)? {
        v.extend(std::fs::read_to_string(p)?.lines().map(str::to_string));
    }
    Ok(v)
}

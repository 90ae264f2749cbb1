//! Error types, one enum per layer, each naming what failed and where.
//!
//! Variant fields are named after what they hold and spelled out by each
//! variant's message, so they carry no separate docs.
#![allow(missing_docs)]

use std::path::PathBuf;

/// Errors found while building a job graph (before anything runs).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Two of the job's sources, operators and sinks share a name; names
    /// identify them in reports, fault specs, checkpoints and recovery, so
    /// they must be unique across all three.
    #[error("name `{name}` is used twice (sources, operators and sinks share one name space)")]
    DuplicateName { name: String },
    /// A parallelism of zero was requested.
    #[error("operator `{name}`: parallelism must be at least 1")]
    ZeroParallelism { name: String },
    /// A rate limit was set on something other than a source, or is not a
    /// positive finite number.
    #[error("operator `{name}`: {reason}")]
    InvalidRate { name: String, reason: String },
    /// The job has no source.
    #[error("the job has no source")]
    NoSource,
    /// A source partition count exceeds what a tuple ID can encode.
    #[error("operator `{name}`: parallelism {parallelism} exceeds the maximum {max}")]
    ParallelismTooLarge {
        name: String,
        parallelism: usize,
        max: usize,
    },
    /// A standby was asked for where the engine cannot run one.
    #[error("operator `{name}` cannot have a standby: {reason}")]
    Standby { name: String, reason: String },
    /// Event time or windows configured in a way that cannot work.
    #[error("operator `{name}`: {reason}")]
    Window { name: String, reason: String },
    /// A CEP pattern that cannot be matched (`cep::Pattern::validate`).
    #[error("operator `{name}`: {reason}")]
    Pattern { name: String, reason: String },
}

/// Errors of the runtime: the machine cannot host the job as configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// More cores were requested than the process may use.
    #[error("insufficient cpus: {required} requested, {available} available")]
    InsufficientCpus { required: usize, available: usize },
    /// Zero cores were requested.
    #[error("at least one core is required")]
    ZeroCores,
    /// A worker thread could not be spawned.
    #[error("could not spawn worker {worker}: {source}")]
    Spawn {
        worker: usize,
        #[source]
        source: std::io::Error,
    },
    /// Standby operators and this configuration do not go together.
    #[error("standby: {0}")]
    Standby(String),
    /// What the job would allocate before it runs does not fit the
    /// memory this process may still take.
    #[error(
        "{what} need {} and {} of memory is available: {hint}",
        crate::sys::fs::human_bytes(*needed),
        crate::sys::fs::human_bytes(*available)
    )]
    InsufficientMemory {
        what: String,
        needed: u64,
        available: u64,
        hint: String,
    },
    /// The standby groups' shared files do not fit the filesystem of the
    /// directory they go in.
    #[error(
        "the standbys' files need {} in {dir} ({files} files: a buffer queue of {} per input \
         lane, determinant logs, snapshot exchanges, liveness cells), and {} is free there: lower the queue \
         memory (StandbyConfig::queue_memory), give that filesystem more space, or name a run \
         directory on a larger one (RuntimeConfig::run_dir)",
        crate::sys::fs::human_bytes(*needed),
        crate::sys::fs::human_bytes(*queue),
        crate::sys::fs::human_bytes(*free),
        dir = dir.display()
    )]
    NoSpace {
        dir: PathBuf,
        needed: u64,
        free: u64,
        files: usize,
        queue: u64,
    },
}

/// Why a running job ended without completing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The job could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The job could not be placed on this machine.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// User code of an operator panicked.
    #[error("operator `{operator}` (instance {instance}) panicked: {message}")]
    OperatorPanicked {
        operator: String,
        instance: usize,
        message: String,
    },
    /// Process isolation: the child process that ran an operator's
    /// instance ended (killed by a signal, or exited) — not a panic.
    #[error("operator `{operator}` (instance {instance}): {how}")]
    OperatorProcessDied {
        operator: String,
        instance: usize,
        how: String,
        /// Its driver killed it, judged stuck by the liveness rule: what
        /// the rule saw (`None`: it died by itself, or was killed from
        /// outside).
        stuck: Option<String>,
    },
    /// An operator reported an I/O failure it could not handle (its sink
    /// file or the dead-letter file could not be written).
    #[error("operator `{operator}` (instance {instance}): {context}: {source}")]
    Io {
        operator: String,
        instance: usize,
        context: String,
        path: Option<PathBuf>,
        #[source]
        source: std::io::Error,
    },
    /// An operator's input channel broke.
    #[error("operator `{operator}` (instance {instance}): input channel cut")]
    ChannelCut { operator: String, instance: usize },
    /// A worker thread died outside of operator code (an engine bug).
    #[error("worker {worker} died: {message}")]
    WorkerDied { worker: usize, message: String },
    /// The job was cancelled through its handle.
    #[error("the job was cancelled")]
    Cancelled,
    /// A savepoint was asked for, and the job ended (completed, failed or
    /// was cancelled) before one was durable.
    #[error("the job ended before a savepoint was taken")]
    EndedBeforeSavepoint,

    #[error(
        "a worker of stopped attempt {attempt} was still building its operators {secs} s later \
         (an operator factory that does not return); a restart beside it could not be trusted"
    )]
    BuildOverrun { attempt: u32, secs: u64 },
    /// A worker made no progress for longer than the heartbeat timeout.
    #[error("operator `{operator}` (instance {instance}) stalled: no heartbeat for {millis} ms")]
    Stalled {
        operator: String,
        instance: usize,
        millis: u64,
    },
    /// An operator instance could not be restored from its snapshot.
    #[error(
        "operator `{operator}` (instance {instance}): restoring from the checkpoint: {source}"
    )]
    Restore {
        operator: String,
        instance: usize,
        #[source]
        source: crate::checkpoint::CheckpointError,
    },
    /// A source could not be rewound to its checkpointed position.
    #[error(
        "source `{operator}` (instance {instance}) cannot replay from record {position}: {source}"
    )]
    SourceSeek {
        operator: String,
        instance: usize,
        position: u64,
        #[source]
        source: SeekError,
    },
    /// Checkpoint storage failed (opening the directory, reading a
    /// checkpoint to restore from, or a checkpoint that does not match the
    /// job).
    /// A consumer of an operator with a standby found that a new
    /// primary's replay disagrees with what it had received: the operator
    /// is not deterministic, or the standby machinery failed. The job ends
    /// rather than emit a wrong result.
    #[error("operator `{operator}` (instance {instance}), as seen by `{consumer}`: {reason}")]
    StandbyDiverged {
        operator: String,
        instance: usize,
        consumer: String,
        reason: String,
    },

    /// The end-of-run check of a standby group failed: a consumer did not
    /// receive everything its producer's input lane says was produced.
    #[error(
        "operator `{operator}` (instance {instance}), input lane {lane} (from upstream instance {upstream}): `{consumer}` accepted the outputs of {accepted} of {produced} inputs{}",
        if *ended { "" } else { " and never received the end" }
    )]
    StandbyIncomplete {
        operator: String,
        instance: usize,
        lane: usize,
        upstream: usize,
        consumer: String,
        accepted: u64,
        produced: u64,
        ended: bool,
    },

    #[error("checkpoint: {0}")]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// The directory a job was to restore from holds no checkpoint or
    /// savepoint, or none that verifies (`skipped`: each one and why).
    #[error(
        "{path}: {}",
        if skipped.is_empty() {
            "holds no checkpoint or savepoint to restore from (no manifest.json, no manifest-<id>.json)".to_string()
        } else {
            format!("holds no valid checkpoint or savepoint to restore from ({})", skipped.join("; "))
        },
        path = path.display()
    )]
    NoRestorePoint { path: PathBuf, skipped: Vec<String> },
    /// The directory a job was to restore from holds restore points
    /// whose choice would be a guess (see [`crate::recovery::resume`]).
    #[error("{path}: {reason}", path = path.display())]
    AmbiguousRestorePoint { path: PathBuf, reason: String },
    /// A savepoint was asked of a job that cannot take one.
    #[error("cannot take a savepoint: {reason}")]
    NoSavepoint { reason: String },
    /// A checkpoint or savepoint does not fit the job.
    #[error("checkpoint {id} does not fit job: {reason}")]
    Incompatible { id: u64, reason: String },
    /// More consecutive checkpoints failed than the configuration tolerates.
    #[error("{failures} consecutive checkpoints failed; the last: {last}")]
    CheckpointsFailing { failures: u32, last: String },
    /// A backed-up operator failed and its standby could not take over
    /// (no standby left, a record that failed two primaries in a row); with
    /// no restart strategy to answer it, the job fails.
    #[error("no standby could take over ({why}) after: {cause}")]
    NotMasked {
        why: String,
        #[source]
        cause: Box<JobError>,
    },
    /// A standby group's primary failed and its last standby failed too,
    /// spending the group's budget of standby failures.
    #[error(
        "operator `{operator}` (instance {instance}): its primary failed and its standbys are gone"
    )]
    StandbyGone { operator: String, instance: usize },
    /// The restart strategy gave up after a failure.
    #[error("restart strategy gave up ({reason}) after: {cause}")]
    GaveUp {
        reason: String,
        #[source]
        cause: Box<JobError>,
    },
}

impl JobError {
    /// What caused a recovery from this failure (`injected`: the job's
    /// fault injection made it).
    pub fn recovery_cause(&self, injected: bool) -> crate::metrics::RecoveryCause {
        use crate::metrics::RecoveryCause;
        if injected {
            return RecoveryCause::Injected;
        }
        match self {
            JobError::NotMasked { cause, .. } => cause.recovery_cause(false),
            JobError::OperatorPanicked { .. } => RecoveryCause::Panic,
            JobError::OperatorProcessDied { stuck: Some(_), .. } => RecoveryCause::StuckKilled,
            JobError::OperatorProcessDied { .. } => RecoveryCause::ProcessDied,
            JobError::Stalled { .. } => RecoveryCause::Stalled,
            _ => RecoveryCause::Other,
        }
    }

    /// What the liveness rule saw when a driver killed the failed child as
    /// stuck (`None`: not such a death).
    pub fn stuck_evidence(&self) -> Option<&str> {
        match self {
            JobError::OperatorProcessDied { stuck, .. } => stuck.as_deref(),
            JobError::NotMasked { cause, .. } => cause.stuck_evidence(),
            _ => None,
        }
    }

    /// The name of the operator the error is about, if any.
    pub fn operator(&self) -> Option<&str> {
        match self {
            JobError::OperatorPanicked { operator, .. }
            | JobError::OperatorProcessDied { operator, .. }
            | JobError::Io { operator, .. }
            | JobError::ChannelCut { operator, .. }
            | JobError::Stalled { operator, .. }
            | JobError::Restore { operator, .. }
            | JobError::SourceSeek { operator, .. }
            | JobError::StandbyDiverged { operator, .. }
            | JobError::StandbyIncomplete { operator, .. }
            | JobError::StandbyGone { operator, .. } => Some(operator),
            JobError::GaveUp { cause, .. } | JobError::NotMasked { cause, .. } => cause.operator(),
            _ => None,
        }
    }
}

/// An error as people read it: its message and each cause (`source`) that
/// adds to it, once, one per line (`caused by: …`) — error types that put
/// their cause in their own message are not repeated, and no backtrace is
/// ever part of it. For programs that print an engine error.
///
/// ```
/// let e = std::io::Error::other("disk gone");
/// assert_eq!(tandem::error::report(&e), "disk gone");
/// ```
pub fn report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        let line = c.to_string();
        if !line.is_empty() && !text.contains(&line) {
            if !text.is_empty() {
                text.push_str("\n  caused by: ");
            }
            text.push_str(&line);
        }
        cause = c.source();
    }
    text
}

/// Why a source could not rewind to a checkpoint's position
/// ([`crate::Source::seek`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SeekError {
    /// Skipping record by record (the default `seek`), the source had
    /// nothing ready after `read` of `target` records: a source that is
    /// not deterministic, or not at once, overrides [`crate::Source::seek`].
    #[error("not ready after {read} of {target} records while skipping to the checkpoint (override Source::seek)")]
    NotReady {
        /// Records read.
        read: u64,
        /// The position sought.
        target: u64,
    },
    /// The source ended after `read` records, before the position.
    #[error("ended after {read} records, the checkpoint is at {target}")]
    Ended {
        /// Records read.
        read: u64,
        /// The position sought.
        target: u64,
    },
    /// The position lies past everything the source holds (a log
    /// truncated since, a shorter file), `len` records.
    #[error("the source holds {len} records, the checkpoint is at {target}, past them")]
    PastEnd {
        /// Records the source holds.
        len: u64,
        /// The position sought.
        target: u64,
    },
    /// The source cannot seek now (after it was first polled, say), or
    /// failed to: its own words.
    #[error("{0}")]
    Source(String),
}

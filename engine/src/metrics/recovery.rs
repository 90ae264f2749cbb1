//! What a report says of each recovery: which kind ran, what caused it,
//! and what it cost, fault by fault.

/// One recovery, measured by the supervisor (restart-all) or by the
/// standby that took over (BQBS). Times are microseconds from the fault:
/// for a panic or a cut channel the moment the worker caught it, for a
/// stall the last heartbeat.
///
/// For a takeover: `detect_us` is fault → the standby claimed the epoch,
/// `restore_us` claim → every consumer's cut known and the state restored,
/// `first_output_us` fault → the first output of the new primary reached a
/// sink (or, when none of its first outputs reached one within 200 ms,
/// was accepted by its consumer), `caught_up_us` fault → the new primary
/// processed everything its queues held at the takeover, `replayed_tuples`
/// the inputs it read from its queues that were there at the takeover
/// (from the replay's start: the consumers' cut, or the restored
/// snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryRecord {
    /// Which recovery ran: a standby's takeover, or restart-all.
    pub kind: RecoveryKind,
    /// The failed operator (for a stall without a probe: the operators of
    /// the stalled worker, joined by `+`; for a takeover, the operator of
    /// the backed-up chain — or the source it replays — that failed, or the
    /// chain's head when nothing says which).
    pub operator: String,
    /// Its instance.
    pub instance: usize,
    /// The error, as text.
    pub cause: String,
    /// The record it failed on, when known (injected faults).
    pub tuple_id: Option<crate::record::TupleId>,
    /// When the fault happened, microseconds since the job started (the
    /// engine clock): where a timeline marks it.
    pub fault_at_us: u64,
    /// Fault → the supervisor noticed.
    pub detect_us: u64,
    /// Detection → every worker of the new attempt built and restored.
    pub restore_us: Option<u64>,
    /// Fault → the first record reached a sink after the restart.
    pub first_output_us: Option<u64>,
    /// Fault → every sink consumed as many records as before the fault.
    pub caught_up_us: Option<u64>,
    /// Source records read again (position at the fault − restored
    /// position).
    pub replayed_tuples: u64,
    /// The checkpoint restored (`None`: started over from the beginning).
    pub restored_checkpoint: Option<u64>,
    /// Newer checkpoints passed over because they did not verify.
    pub skipped_checkpoints: Vec<String>,
    /// What caused it (see [`RecoveryCause`]).
    pub reason: RecoveryCause,
    /// A recovery no fault and no failure explains: a stall verdict of the
    /// liveness rule, or a child killed as stuck, with no injected fault to
    /// blame — exactly when `reason` is [`RecoveryCause::Stalled`] or
    /// [`RecoveryCause::StuckKilled`]. `evidence` says what was seen.
    pub unprovoked: bool,
    /// For a recovery after a stall verdict (a standby's, the supervisor's,
    /// a driver's): what the watcher saw (silence, threshold, where the
    /// worker was, what its thread did).
    pub evidence: Option<String>,
    /// The tasks the recovery stopped and started again, each named by
    /// its operators joined by `+` and its instance (`source+map#0`): every
    /// task for restart-all, the failed task's region for a region
    /// restart, the backed-up chain's instance for a takeover.
    pub restarted: Vec<String>,
    /// The tasks that ran on through the recovery, named alike (tasks that
    /// had already finished are in neither list).
    pub kept_running: Vec<String>,
}

/// What caused a recovery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryCause {
    /// A fault the job's own fault injection fired (a probe's panic,
    /// stall, kill or cut).
    Injected,
    /// An operator panicked (no fault injected).
    Panic,
    /// A process-isolated operator's child process died (its signal or
    /// status is in `cause`).
    ProcessDied,
    /// The driver of a process-isolated operator killed its child, judged
    /// stuck by the liveness rule (`evidence`).
    StuckKilled,
    /// The liveness rule judged a primary or a worker stalled
    /// (`evidence`), with no failure reported.
    Stalled,
    /// Anything else that failed: I/O, a cut channel, a restore, a
    /// standby's divergence.
    #[default]
    Other,
}

impl RecoveryCause {
    /// `injected`, `panic`, `process died`, `stuck-kill`, `stall` or
    /// `other`.
    pub fn name(self) -> &'static str {
        match self {
            RecoveryCause::Injected => "injected",
            RecoveryCause::Panic => "panic",
            RecoveryCause::ProcessDied => "process died",
            RecoveryCause::StuckKilled => "stuck-kill",
            RecoveryCause::Stalled => "stall",
            RecoveryCause::Other => "other",
        }
    }

    /// Whether nothing but a stall verdict explains it (see
    /// [`RecoveryRecord::unprovoked`]).
    pub fn unprovoked(self) -> bool {
        matches!(self, RecoveryCause::StuckKilled | RecoveryCause::Stalled)
    }
}

/// Which recovery answered a fault.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryKind {
    /// Every worker stopped; the job restarted from its last complete
    /// checkpoint (or from the start).
    #[default]
    RestartAll,
    /// The failed operator's standby took over; nothing else stopped.
    Takeover,
    /// The failed task's region restarted from the last complete
    /// checkpoint; the other regions ran on ([`crate::Failover::Region`]).
    Region,
}

impl RecoveryKind {
    /// `restart-all`, `takeover` or `region`.
    pub fn name(self) -> &'static str {
        match self {
            RecoveryKind::RestartAll => "restart-all",
            RecoveryKind::Takeover => "takeover",
            RecoveryKind::Region => "region",
        }
    }
}

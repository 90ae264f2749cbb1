//! The injector: a schedule armed against one job, plugged into the
//! engine's seams (`tandem::runtime::probe`).
//!
//! Install it with `RuntimeConfig::probes` and keep the same injector
//! across restarts of a job, so that each fault fires exactly once.
//!
//! ```
//! use std::sync::Arc;
//! use tandem_fault_inject::{FaultInjector, Schedule};
//!
//! let schedule: Schedule = "panic@per-user:5000,stall@parse:20000:30".parse().unwrap();
//! let injector = FaultInjector::builder(&schedule)
//!     // Input record n is sequence n / 2 of source partition n % 2.
//!     .resolver(|n| tandem::TupleId::new((n % 2) as u32, n / 2))
//!     .build()
//!     .unwrap();
//! let config = tandem::RuntimeConfig::default().probes(Arc::new(injector.clone()));
//! # let _ = config;
//! // … run the job; then:
//! assert_eq!(injector.fired(), 0);
//! ```

use crate::damage;
use crate::spec::{FaultKind, FaultSpec, IoStep, StandbyPhase, When};
use crate::Schedule;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tandem::checkpoint::Manifest;

/// The checkpoint id the engine commits a sink's final epoch under.
const FINAL: u64 = tandem::FINAL_EPOCH;
use tandem::runtime::probe::{
    ProbeAction, ProbeFactory, RecordProbe, StorageAction, StorageProbe, TakeoverStage,
};
use tandem::TupleId;

mod probes;
#[cfg(test)]
mod tests;

/// Where one armed fault fires.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// On this record.
    Tuple(TupleId),
    /// On the first record this long after the start.
    After(Duration),
    /// On the first record after fault `prev` fired, that none of the
    /// burst's faults (`burst`) fired on.
    Next {
        prev: usize,
        burst: std::ops::Range<usize>,
    },
    /// At this checkpoint id.
    Checkpoint(u64),
    /// At the first checkpoint this long after the start.
    CheckpointAfter(Duration),
    /// At every checkpoint id that is a multiple of this (not one-shot).
    CheckpointEvery(u64),
}

/// One armed fault.
#[derive(Debug)]
struct Armed {
    /// The spec as written (a burst's or a spread's, shared by its parts).
    spec: FaultSpec,
    /// Which part of `spec` this is, and of how many.
    part: (u64, u64),
    target: Target,
    fired: AtomicBool,
    /// Times fired.
    times: AtomicU64,
    /// The tuple ID (or checkpoint id) it fired on last.
    fired_on: AtomicU64,
}

impl Armed {
    fn label(&self) -> String {
        if self.part.1 > 1 {
            format!("{} ({} of {})", self.spec, self.part.0, self.part.1)
        } else {
            self.spec.to_string()
        }
    }

    /// Claims the fault for `on`; `true` once (every time for
    /// `CheckpointEvery`, once per id).
    fn claim(&self, on: u64) -> bool {
        if let Target::CheckpointEvery(_) = self.target {
            if self.fired_on.swap(on, Ordering::SeqCst) == on
                && self.times.load(Ordering::SeqCst) > 0
            {
                return false;
            }
        } else if self.fired.swap(true, Ordering::SeqCst) {
            return false;
        } else {
            self.fired_on.store(on, Ordering::SeqCst);
        }
        self.fired.store(true, Ordering::SeqCst);
        self.times.fetch_add(1, Ordering::SeqCst);
        true
    }
}

/// What happened when a fault fired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    /// The fault (with its part, for a burst or a spread).
    pub fault: String,
    /// Its kind's name.
    pub kind: &'static str,
    /// The operator instance it fired in (`None` for checkpoint faults).
    pub instance: Option<usize>,
    /// The record (its tuple ID) or the checkpoint it fired on.
    pub on: FiredOn,
    /// Since the injector's start.
    pub at: Duration,
    /// What was done, when more than the kind says (the file damaged).
    pub detail: Option<String>,
}

/// What a fault fired on: a record, or a checkpoint (commit and checkpoint
/// faults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FiredOn {
    /// The record with this tuple ID (prints as `record 0:17`: partition,
    /// sequence).
    Record(TupleId),
    /// The checkpoint with this id (prints as `checkpoint 3`).
    Checkpoint(u64),
}

impl fmt::Display for FiredOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FiredOn::Record(id) => write!(f, "record {}:{}", id.partition(), id.seq()),
            FiredOn::Checkpoint(c) => write!(f, "checkpoint {c}"),
        }
    }
}

/// One line: `panic@count:~4[2/4] in instance 1 on record 0:17 at 12.3ms`.
impl fmt::Display for Fired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.fault)?;
        if let Some(i) = self.instance {
            write!(f, " in instance {i}")?;
        }
        write!(f, " on {} at {:?}", self.on, self.at)?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

struct Inner {
    faults: Vec<Armed>,
    start: OnceLock<Instant>,
    /// Buffer-queue files of each standby group, as the engine created them.
    queues: Mutex<HashMap<(String, usize), Vec<PathBuf>>>,
    /// Standbys armed to fail: (operator, instance, phase, fault).
    standbys: Mutex<Vec<(String, usize, StandbyPhase, usize)>>,
    log: Mutex<Vec<Fired>>,
}

impl Inner {
    fn elapsed(&self) -> Duration {
        self.start.get_or_init(Instant::now).elapsed()
    }

    fn note(&self, i: usize, instance: Option<usize>, on: FiredOn, detail: Option<String>) {
        let a = &self.faults[i];
        let f = Fired {
            fault: a.label(),
            kind: a.spec.kind.name(),
            instance,
            on,
            at: self.elapsed(),
            detail,
        };
        self.log.lock().unwrap_or_else(|p| p.into_inner()).push(f);
    }

    /// Whether checkpoint fault `a` fires at checkpoint `id` now.
    fn at_checkpoint(&self, a: &Armed, id: u64) -> bool {
        match a.target {
            Target::Checkpoint(n) => n == id,
            // `+DUR` and `%K` name checkpoint ids, never the final commit.
            Target::CheckpointAfter(d) => id != FINAL && self.elapsed() >= d,
            Target::CheckpointEvery(k) => id != FINAL && id.is_multiple_of(k),
            _ => false,
        }
    }

    /// The first armed checkpoint fault matching `pick` that fires at `id`.
    fn checkpoint_fault(&self, id: u64, pick: impl Fn(&FaultSpec) -> bool) -> Option<usize> {
        self.faults.iter().enumerate().find_map(|(i, a)| {
            (pick(&a.spec) && self.at_checkpoint(a, id) && a.claim(id)).then_some(i)
        })
    }
}

/// Injects a [`Schedule`] into a running job through the engine's seams.
///
/// Cloning shares the armed faults: keep one injector per job, across its
/// restarts.
#[derive(Clone)]
pub struct FaultInjector {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultInjector")
            .field("faults", &self.inner.faults.len())
            .field("fired", &self.fired())
            .finish()
    }
}

/// Why an injector cannot be armed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    /// `%K` and `~C` need the input's length.
    #[error("`{0}`: %K and ~C positions need the input's length (FaultInjectorBuilder::records)")]
    NeedsRecords(String),
    /// A position beyond what the input holds.
    #[error("`{spec}`: record {record} is past the input's end ({records} records)")]
    PastEnd {
        /// The spec.
        spec: String,
        /// The record it names.
        record: u64,
        /// Records in the input.
        records: u64,
    },
    /// A `%K` that arms more faults than one spec may.
    #[error("`{spec}`: {faults} faults; one spec arms at most {max}", max = crate::spec::MAX_FAULTS)]
    TooMany {
        /// The spec.
        spec: String,
        /// The faults it would arm.
        faults: u64,
    },
    /// A schedule that arms more faults in all than one run may take.
    #[error("{specs} fault specs arm {faults} faults or more; a run takes at most {max}", max = crate::spec::MAX_FAULTS)]
    TooManyInAll {
        /// The specs given.
        specs: usize,
        /// The faults armed when the count was exceeded.
        faults: u64,
    },
}

/// Builds a [`FaultInjector`] (see [`FaultInjector::builder`]).
pub struct FaultInjectorBuilder {
    faults: Vec<FaultSpec>,
    records: Option<u64>,
    resolve: Box<dyn Fn(u64) -> TupleId>,
}

impl FaultInjectorBuilder {
    /// The input has `n` records: `%K` and `~C` positions expand over
    /// them, and a record past the end is an error.
    pub fn records(mut self, n: u64) -> Self {
        self.records = Some(n);
        self
    }

    /// How the workload numbers its input: input record `n` is the record
    /// the engine gives tuple ID `resolve(n)` — a source partition `p`
    /// assigns IDs `TupleId::new(p, 0)`, `TupleId::new(p, 1)`, … in the
    /// order it yields its records. Without a resolver, record `n` is
    /// sequence `n` of partition 0; specs can also name a tuple ID directly
    /// (`P/S`).
    pub fn resolver(mut self, resolve: impl Fn(u64) -> TupleId + 'static) -> Self {
        self.resolve = Box::new(resolve);
        self
    }

    /// Arms the faults.
    pub fn build(self) -> Result<FaultInjector, InjectError> {
        let mut faults: Vec<Armed> = Vec::new();
        let arm = |spec: &FaultSpec, part: (u64, u64), target: Target| Armed {
            spec: spec.clone(),
            part,
            target,
            fired: AtomicBool::new(false),
            times: AtomicU64::new(0),
            fired_on: AtomicU64::new(u64::MAX),
        };
        let too_many = |faults: &Vec<Armed>| {
            (faults.len() as u64 > crate::spec::MAX_FAULTS).then_some(InjectError::TooManyInAll {
                specs: self.faults.len(),
                faults: faults.len() as u64,
            })
        };
        for s in &self.faults {
            // Each spec arms at most MAX_FAULTS: the count is checked
            // before the next one adds more.
            if let Some(e) = too_many(&faults) {
                return Err(e);
            }
            let records = || {
                self.records
                    .ok_or_else(|| InjectError::NeedsRecords(s.to_string()))
            };
            let check = |n: u64| match self.records {
                Some(len) if n >= len => Err(InjectError::PastEnd {
                    spec: s.to_string(),
                    record: n,
                    records: len,
                }),
                _ => Ok(n),
            };
            if s.kind.by_checkpoint() {
                match s.when {
                    When::Record(n) => faults.push(arm(s, (1, 1), Target::Checkpoint(n))),
                    When::After(d) => faults.push(arm(s, (1, 1), Target::CheckpointAfter(d))),
                    When::Every(k) => faults.push(arm(s, (1, 1), Target::CheckpointEvery(k))),
                    When::Final => faults.push(arm(s, (1, 1), Target::Checkpoint(FINAL))),
                    When::Burst { first, count } => {
                        for k in 0..count {
                            // Ids past u64::MAX are never reached: one fewer.
                            if let Some(id) = first.checked_add(k) {
                                faults.push(arm(s, (k + 1, count), Target::Checkpoint(id)));
                            }
                        }
                    }
                    // Refused by the parser.
                    When::Tuple { .. } | When::Spread(_) => {}
                }
                continue;
            }
            match s.when {
                When::Record(n) => {
                    faults.push(arm(s, (1, 1), Target::Tuple((self.resolve)(check(n)?))))
                }
                When::Tuple { partition, seq } => {
                    faults.push(arm(s, (1, 1), Target::Tuple(TupleId::new(partition, seq))))
                }
                When::After(d) => faults.push(arm(s, (1, 1), Target::After(d))),
                When::Every(k) => {
                    let len = records()?;
                    // The parser refuses %0.
                    let k = k.max(1);
                    if len.saturating_sub(1) / k > crate::spec::MAX_FAULTS {
                        return Err(InjectError::TooMany {
                            spec: s.to_string(),
                            faults: len.saturating_sub(1) / k,
                        });
                    }
                    let all: Vec<u64> = (1..).map(|i| i * k).take_while(|&n| n < len).collect();
                    let total = all.len() as u64;
                    for (i, n) in all.into_iter().enumerate() {
                        faults.push(arm(
                            s,
                            (i as u64 + 1, total),
                            Target::Tuple((self.resolve)(n)),
                        ));
                    }
                }
                // Refused by the parser: only `commit` fires at `final`.
                When::Final => {}
                When::Spread(c) => {
                    let len = records()?;
                    for k in 1..=c {
                        let n = (len as u128 * k as u128 / (c as u128 + 1)) as u64;
                        faults.push(arm(s, (k, c), Target::Tuple((self.resolve)(n))));
                    }
                }
                When::Burst { first, count } => {
                    let base = faults.len();
                    let burst = base..base + count as usize;
                    faults.push(arm(
                        s,
                        (1, count),
                        Target::Tuple((self.resolve)(check(first)?)),
                    ));
                    for k in 1..count {
                        faults.push(arm(
                            s,
                            (k + 1, count),
                            Target::Next {
                                prev: base + k as usize - 1,
                                burst: burst.clone(),
                            },
                        ));
                    }
                }
            }
        }
        if let Some(e) = too_many(&faults) {
            return Err(e);
        }
        Ok(FaultInjector {
            inner: Arc::new(Inner {
                faults,
                start: OnceLock::new(),
                queues: Mutex::new(HashMap::new()),
                standbys: Mutex::new(Vec::new()),
                log: Mutex::new(Vec::new()),
            }),
        })
    }
}

impl FaultInjector {
    /// An injector for `schedule` (see [`FaultInjectorBuilder`]).
    pub fn builder(schedule: &Schedule) -> FaultInjectorBuilder {
        FaultInjectorBuilder {
            faults: schedule.faults.clone(),
            records: None,
            resolve: Box::new(|n| TupleId::new(0, n)),
        }
    }

    /// An injector for `specs`, record `n` being `resolve(n)` (positions
    /// that need the input's length are refused: use the builder).
    pub fn new(
        specs: &[FaultSpec],
        resolve: impl Fn(u64) -> TupleId + 'static,
    ) -> Result<Self, InjectError> {
        Self::builder(&Schedule {
            faults: specs.to_vec(),
        })
        .resolver(resolve)
        .build()
    }

    /// Starts the clock of `+DUR` positions now (otherwise it starts when
    /// the engine first asks for a probe, as the job is built).
    pub fn start(&self) {
        self.inner.start.get_or_init(Instant::now);
    }

    /// Each armed fault (a burst's and a spread's parts each) and how many
    /// times it fired.
    pub fn status(&self) -> Vec<(String, u64)> {
        self.inner
            .faults
            .iter()
            .map(|f| (f.label(), f.times.load(Ordering::SeqCst)))
            .collect()
    }

    /// Faults fired so far.
    pub fn fired(&self) -> u64 {
        self.inner
            .faults
            .iter()
            .map(|f| f.times.load(Ordering::SeqCst))
            .sum()
    }

    /// Faults armed (a burst's and a spread's parts each).
    pub fn armed(&self) -> usize {
        self.inner.faults.len()
    }

    /// What fired, in order.
    pub fn log(&self) -> Vec<Fired> {
        self.inner
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

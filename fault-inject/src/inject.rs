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
use tandem::runtime::probe::{
    ProbeAction, ProbeFactory, RecordProbe, StorageAction, StorageProbe, TakeoverStage,
};
use tandem::TupleId;

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
            Target::CheckpointAfter(d) => self.elapsed() >= d,
            Target::CheckpointEvery(k) => id.is_multiple_of(k),
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
        for s in &self.faults {
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

/// The probe of one operator instance.
struct OperatorFaults {
    inner: Arc<Inner>,
    operator: String,
    instance: usize,
    mine: Vec<usize>,
    /// A slow fault in progress: its delay and the records left.
    slow: Option<(Duration, u64)>,
}

impl OperatorFaults {
    fn hits(&self, i: usize, id: TupleId) -> bool {
        let a = &self.inner.faults[i];
        if a.fired.load(Ordering::Relaxed) {
            return false;
        }
        match &a.target {
            Target::Tuple(t) => *t == id,
            Target::After(d) => self.inner.elapsed() >= *d,
            Target::Next { prev, burst } => {
                // Never on a record an earlier part of the burst fired on
                // (a replay brings those back): the parts up to `prev`.
                self.inner.faults[*prev].fired.load(Ordering::SeqCst)
                    && (burst.start..=*prev)
                        .all(|b| self.inner.faults[b].fired_on.load(Ordering::SeqCst) != id.0)
            }
            _ => false,
        }
    }

    fn act(&mut self, i: usize, id: TupleId) -> ProbeAction {
        let a = &self.inner.faults[i];
        let msg = format!("injected fault {}", a.label());
        let mut detail = None;
        let action = match a.spec.kind {
            FaultKind::Panic => ProbeAction::Panic(msg),
            FaultKind::Stall { millis: Some(ms) } => ProbeAction::Stall(Duration::from_millis(ms)),
            FaultKind::Stall { millis: None } => ProbeAction::StallForever,
            FaultKind::Slow { micros, records } => {
                let d = Duration::from_micros(micros);
                self.slow = Some((d, records.saturating_sub(1)));
                ProbeAction::Delay(d)
            }
            FaultKind::Cut => ProbeAction::CutInput,
            FaultKind::Mute { millis } => ProbeAction::MuteHeartbeat(Duration::from_millis(millis)),
            FaultKind::Standby { phase } => {
                self.inner
                    .standbys
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((self.operator.clone(), self.instance, phase, i));
                ProbeAction::Panic(msg)
            }
            FaultKind::CorruptQueue { damage } => {
                let files = self
                    .inner
                    .queues
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&(self.operator.clone(), self.instance))
                    .cloned()
                    .unwrap_or_default();
                let done = files
                    .iter()
                    .find_map(|f| damage::queue_entry(f, id.0, damage).transpose());
                detail = Some(match done {
                    Some(Ok(what)) => what,
                    Some(Err(e)) => format!("damaging the buffer queue failed: {e}"),
                    None => "no buffer queue holds the record".to_string(),
                });
                ProbeAction::Panic(format!("{msg}: {}", detail.as_deref().unwrap_or_default()))
            }
            // Dies below, once the firing is noted.
            FaultKind::Process { .. } => ProbeAction::Continue,
            // Not record faults: never armed on a record.
            FaultKind::Commit
            | FaultKind::IoError { .. }
            | FaultKind::Crash
            | FaultKind::CorruptSnapshot { .. } => ProbeAction::Continue,
        };
        self.inner
            .note(i, Some(self.instance), FiredOn::Record(id), detail);
        if let FaultKind::Process { death } = a.spec.kind {
            crate::death::die(death, &format!("injected fault {}", a.label()));
        }
        action
    }
}

impl RecordProbe for OperatorFaults {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        if let Some((d, left)) = &mut self.slow {
            if *left > 0 {
                *left -= 1;
                return ProbeAction::Delay(*d);
            }
            self.slow = None;
        }
        for k in 0..self.mine.len() {
            let i = self.mine[k];
            if self.hits(i, id) && self.inner.faults[i].claim(id.0) {
                return self.act(i, id);
            }
        }
        ProbeAction::Continue
    }
}

/// The snapshot store's probe.
struct StorageFaults(Arc<Inner>);

impl StorageProbe for StorageFaults {
    fn write(&self, checkpoint: u64, _path: &Path) -> Option<std::io::Error> {
        self.io(checkpoint, IoStep::Write)
    }

    fn fsync(&self, checkpoint: u64, _path: &Path) -> Option<std::io::Error> {
        self.io(checkpoint, IoStep::Fsync)
    }

    fn before_publish(&self, checkpoint: u64) -> StorageAction {
        match self
            .0
            .checkpoint_fault(checkpoint, |f| f.kind == FaultKind::Crash)
        {
            Some(i) => {
                self.0.note(i, None, FiredOn::Checkpoint(checkpoint), None);
                StorageAction::Crash
            }
            None => StorageAction::Continue,
        }
    }

    fn published(&self, manifest: &Manifest) -> StorageAction {
        let Some(i) = self.0.checkpoint_fault(manifest.id, |f| {
            matches!(f.kind, FaultKind::CorruptSnapshot { .. })
        }) else {
            return StorageAction::Continue;
        };
        let FaultKind::CorruptSnapshot { damage } = self.0.faults[i].spec.kind else {
            unreachable!("picked above")
        };
        let what = damage::snapshot(manifest, damage)
            .unwrap_or_else(|e| format!("damaging checkpoint {} failed: {e}", manifest.id));
        self.0
            .note(i, None, FiredOn::Checkpoint(manifest.id), Some(what));
        StorageAction::Crash
    }
}

impl StorageFaults {
    fn io(&self, checkpoint: u64, step: IoStep) -> Option<std::io::Error> {
        let i = self.0.checkpoint_fault(
            checkpoint,
            |f| matches!(f.kind, FaultKind::IoError { step: s, .. } if s == step),
        )?;
        let FaultKind::IoError { errno, .. } = self.0.faults[i].spec.kind else {
            unreachable!("picked above")
        };
        self.0.note(i, None, FiredOn::Checkpoint(checkpoint), None);
        Some(std::io::Error::from_raw_os_error(errno.raw()))
    }
}

impl ProbeFactory for FaultInjector {
    fn probe(&self, operator: &str, instance: usize) -> Option<Box<dyn RecordProbe>> {
        self.inner.start.get_or_init(Instant::now);
        let mine: Vec<usize> = self
            .inner
            .faults
            .iter()
            .enumerate()
            .filter(|(_, f)| f.spec.target == operator && !f.spec.kind.by_checkpoint())
            .map(|(i, _)| i)
            .collect();
        (!mine.is_empty()).then(|| {
            Box::new(OperatorFaults {
                inner: Arc::clone(&self.inner),
                operator: operator.to_string(),
                instance,
                mine,
                slow: None,
            }) as Box<dyn RecordProbe>
        })
    }

    fn takeover(&self, operator: &str, instance: usize, stage: TakeoverStage) -> ProbeAction {
        let mut armed = self
            .inner
            .standbys
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let phase = match stage {
            TakeoverStage::Claiming => StandbyPhase::Before,
            TakeoverStage::Replaying => StandbyPhase::During,
        };
        let Some(k) = armed
            .iter()
            .position(|(o, i, p, _)| o == operator && *i == instance && *p == phase)
        else {
            return ProbeAction::Continue;
        };
        let (_, _, _, f) = armed.remove(k);
        ProbeAction::Panic(format!(
            "injected fault {}: the standby fails {} its takeover",
            self.inner.faults[f].label(),
            match phase {
                StandbyPhase::Before => "before",
                StandbyPhase::During => "during",
            }
        ))
    }

    fn storage(&self) -> Option<Arc<dyn StorageProbe>> {
        self.inner
            .faults
            .iter()
            .any(|f| f.spec.kind.on_checkpoint())
            .then(|| Arc::new(StorageFaults(Arc::clone(&self.inner))) as Arc<dyn StorageProbe>)
    }

    fn commit(&self, operator: &str, instance: usize, checkpoint: u64) -> std::io::Result<()> {
        let Some(i) = self.inner.checkpoint_fault(checkpoint, |f| {
            f.kind == FaultKind::Commit && f.target == operator
        }) else {
            return Ok(());
        };
        self.inner
            .note(i, Some(instance), FiredOn::Checkpoint(checkpoint), None);
        Err(std::io::Error::other(format!(
            "injected fault {}",
            self.inner.faults[i].label()
        )))
    }

    fn standby_files(&self, operator: &str, instance: usize, queues: &[PathBuf]) {
        self.inner
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((operator.to_string(), instance), queues.to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn injector(s: &str) -> FaultInjector {
        FaultInjector::builder(&s.parse().unwrap())
            .records(1_000)
            .resolver(|n| TupleId::new((n % 2) as u32, n / 2))
            .build()
            .unwrap()
    }

    #[test]
    fn a_fault_fires_once_on_its_tuple_and_only_in_its_operator() {
        let inj = injector("panic@map:7,stall@map:9:5,cut@sink:3");
        assert!(inj.probe("filter", 0).is_none());
        let mut map = inj.probe("map", 0).unwrap();
        let mut other = inj.probe("map", 1).unwrap();
        assert_eq!(map.before(TupleId::new(0, 7)), ProbeAction::Continue);
        assert!(matches!(
            map.before(TupleId::new(1, 3)),
            ProbeAction::Panic(_)
        ));
        // Fired once, for every instance and every later probe (a restart).
        assert_eq!(other.before(TupleId::new(1, 3)), ProbeAction::Continue);
        assert_eq!(
            inj.probe("map", 0).unwrap().before(TupleId::new(1, 3)),
            ProbeAction::Continue
        );
        assert_eq!(
            map.before(TupleId::new(1, 4)),
            ProbeAction::Stall(Duration::from_millis(5))
        );
        assert_eq!(
            inj.probe("sink", 2).unwrap().before(TupleId::new(1, 1)),
            ProbeAction::CutInput
        );
        assert_eq!(inj.fired(), 3);
        let log = inj.log();
        assert_eq!(log.len(), 3);
        // What a fault fired on prints as a tuple ID, not a raw number.
        assert_eq!(log[0].on, FiredOn::Record(TupleId::new(1, 3)));
        assert_eq!(log[0].on.to_string(), "record 1:3");
        let line = log[0].to_string();
        assert!(line.contains(" on record 1:3 at "), "{line}");
    }

    #[test]
    fn a_burst_fails_successive_records_never_the_same_one_twice() {
        let inj = injector("panic@map:10*3");
        let mut p = inj.probe("map", 0).unwrap();
        let ten = TupleId::new(0, 5);
        assert!(matches!(p.before(ten), ProbeAction::Panic(_)));
        // The replay sees record 10 again: not the burst's second failure.
        assert_eq!(p.before(ten), ProbeAction::Continue);
        assert!(matches!(
            p.before(TupleId::new(0, 3)),
            ProbeAction::Panic(_)
        ));
        assert_eq!(p.before(TupleId::new(0, 3)), ProbeAction::Continue);
        assert!(matches!(
            p.before(TupleId::new(1, 9)),
            ProbeAction::Panic(_)
        ));
        assert_eq!(p.before(TupleId::new(1, 10)), ProbeAction::Continue);
        assert_eq!(inj.fired(), 3);
    }

    #[test]
    fn every_and_spread_expand_over_the_input_and_slow_delays_its_records() {
        let inj = injector("panic@map:%250");
        assert_eq!(inj.armed(), 3); // 250, 500, 750
        let inj = injector("cut@map:~4");
        assert_eq!(inj.armed(), 4); // 200, 400, 600, 800
        let mut p = inj.probe("map", 0).unwrap();
        assert_eq!(p.before(TupleId::new(0, 100)), ProbeAction::CutInput);
        let inj = injector("slow@map:4:50x3");
        let mut p = inj.probe("map", 0).unwrap();
        let d = ProbeAction::Delay(Duration::from_micros(50));
        assert_eq!(p.before(TupleId::new(0, 2)), d);
        assert_eq!(p.before(TupleId::new(0, 3)), d);
        assert_eq!(p.before(TupleId::new(1, 3)), d);
        assert_eq!(p.before(TupleId::new(0, 4)), ProbeAction::Continue);
        assert!(matches!(
            FaultInjector::new(&["panic@map:%5".parse().unwrap()], |n| TupleId::new(0, n)),
            Err(InjectError::NeedsRecords(_))
        ));
        let past = FaultInjector::builder(&"panic@map:1000".parse().unwrap())
            .records(1000)
            .build();
        assert!(matches!(past, Err(InjectError::PastEnd { .. })));
    }

    #[test]
    fn a_faulty_standby_fails_at_its_phase_once() {
        let inj = injector("standby@flatmap:4:during");
        let mut p = inj.probe("flatmap", 1).unwrap();
        assert!(matches!(
            p.before(TupleId::new(0, 2)),
            ProbeAction::Panic(_)
        ));
        assert_eq!(
            inj.takeover("flatmap", 1, TakeoverStage::Claiming),
            ProbeAction::Continue
        );
        assert!(matches!(
            inj.takeover("flatmap", 1, TakeoverStage::Replaying),
            ProbeAction::Panic(_)
        ));
        assert_eq!(
            inj.takeover("flatmap", 1, TakeoverStage::Replaying),
            ProbeAction::Continue
        );
    }

    #[test]
    fn checkpoint_faults_fire_at_their_checkpoint() {
        let inj = injector(
            "ioerror@checkpoint:2:enospc-fsync,crash@checkpoint:3,commit@sink:%2,ioerror@checkpoint:4:eio",
        );
        let s = inj.storage().unwrap();
        let p = Path::new("x");
        assert!(s.write(2, p).is_none());
        assert_eq!(s.fsync(2, p).unwrap().raw_os_error(), Some(28));
        assert!(s.fsync(2, p).is_none());
        assert_eq!(s.before_publish(2), StorageAction::Continue);
        assert_eq!(s.before_publish(3), StorageAction::Crash);
        assert_eq!(s.write(4, p).unwrap().raw_os_error(), Some(5));
        assert!(inj.commit("sink", 0, 1).is_ok());
        assert!(inj.commit("sink", 0, 2).is_err());
        assert!(inj.commit("sink", 1, 2).is_ok(), "once per checkpoint");
        assert!(inj.commit("other", 0, 4).is_ok());
        assert!(inj.commit("sink", 0, 4).is_err());
        let on: Vec<String> = inj.log().iter().map(|f| f.on.to_string()).collect();
        assert_eq!(on[0], "checkpoint 2");
    }
}

//! Tasks: a chain of operators and the inputs that drive it.
//!
//! A task is the unit a worker polls. It owns one or more *ports* — a source
//! partition, or the consumer ends of rings — each feeding the head of an
//! operator chain, and through the chain the producer ends of the rings to
//! the next tasks. Everything in a task lives on one thread: the
//! [`TaskCtx`] the operators share is an `Rc`, its fields `Cell`s.
//!
//! Backpressure: when a ring is full, the sender keeps the record in a small
//! per-lane overflow and raises `blocked`; while `blocked` is non-zero the
//! task reads no input at all, only retries the overflow. The overflow is
//! therefore bounded by what one input chunk can produce, and a full ring
//! stops its producer — nothing is dropped and nothing grows without bound.

use super::background::Background;
use super::coord::Event;
use super::JobShared;
use crate::checkpoint::StateCapture;
use crate::error::JobError;
use crate::record::{Nanos, TupleId};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod publish;
pub(crate) use publish::OpSlot;
use publish::TaskTime;

/// The engine clock: nanoseconds since the job started, the same origin on
/// every core.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    origin: crate::sys::clock::Origin,
}

impl Clock {
    pub(crate) fn new(origin: crate::sys::clock::Origin) -> Self {
        Clock { origin }
    }

    #[inline]
    pub(crate) fn now(&self) -> Nanos {
        self.origin.elapsed_ns()
    }
}

/// State shared by the operators of one task (never crosses a thread).
pub(crate) struct TaskCtx {
    pub(crate) instance: usize,
    /// The operator whose user code runs now: a panic is attributed to it.
    current: Cell<usize>,
    /// The worker's mark of it ([`super::WorkerLive::op`]).
    op_mark: Arc<AtomicU64>,
    /// Number of output lanes holding records that did not fit their ring.
    pub(crate) blocked: Cell<usize>,
    failure: RefCell<Option<JobError>>,
    /// The worker running the task.
    worker: usize,
    /// The tuple a probe acted on last (names the record of a fault).
    pub(crate) fault_tuple: Cell<Option<TupleId>>,
    /// The record an operator of the task processes now (set before its
    /// code runs; names the record of a failure no probe caused).
    pub(crate) record: Cell<Option<TupleId>>,
    /// The lane of its input the record being processed came on (set by
    /// the port that reads it), and that lane's watermark there — what an
    /// event-time operator orders and judges the record by
    /// (`runtime::lanes`).
    pub(crate) lane: Cell<u32>,
    pub(crate) lane_wm: Cell<u64>,
    /// The task's chain has processing-time timers (an event-time keyed
    /// process function): its ports tick it.
    pub(crate) ptimers: Cell<bool>,
    /// The millisecond of the last tick (engine clock).
    pub(crate) ticked_ms: Cell<u64>,
    /// The earliest processing-time timer of the chain (engine
    /// nanoseconds; `u64::MAX`: none).
    pub(crate) next_ptimer: Cell<u64>,
    pub(crate) clock: Clock,
    pub(crate) shared: Arc<JobShared>,
    /// A standby's chain: its ring senders send nothing and probes are not
    /// consulted while set.
    pub(crate) muted: std::rc::Rc<Cell<bool>>,
    /// A standby took over from this (stalled) primary: the task ends.
    pub(crate) fenced: Cell<bool>,
    /// The standby-group incarnation the task runs (0 otherwise).
    pub(crate) incarnation: Cell<u64>,
    /// The epoch it is the primary of (0: none).
    pub(crate) epoch: Cell<u64>,
    /// What a recovery point's capture of the chain's keyed states may be
    /// (a delta over the point the standby follows), set by the primary
    /// around [`Collector::snapshot_chain`](crate::operator::Collector::snapshot_chain).
    pub(crate) point_capture: Cell<crate::state::delta::CaptureFor>,
    /// What the task's role (a standby group's incarnation) watches of
    /// it: its progress, whether its epoch is over.
    pub(crate) watch: std::cell::OnceCell<Arc<dyn RoleWatch>>,
    /// The task's key in its worker's task-poll marks (never 0).
    pub(crate) key: u64,
    /// Steps of progress (inputs processed, keys ended) as a primary.
    ticks: Cell<u64>,
    /// The worker's background work (archiving checkpointed state).
    background: Rc<Background>,
    /// A hot standby's computing: what the task moves is not the worker's
    /// own work (the worker tells such a task whether the others moved,
    /// [`Background::others_busy`]).
    pub(crate) lowly: Cell<bool>,
    /// The chain's operators (node indexes), as their slots were made:
    /// the task's busy and backpressured time is theirs.
    members: RefCell<Vec<usize>>,
    /// The chain's head: the operator whose input aligns barriers.
    head: usize,
    /// Busy and backpressured time not yet published.
    time: Cell<TaskTime>,
}

impl TaskCtx {
    pub(crate) fn new(
        instance: usize,
        head_op: usize,
        worker: usize,
        shared: Arc<JobShared>,
        background: Rc<Background>,
    ) -> Self {
        TaskCtx {
            background,
            key: shared.next_key.fetch_add(1, Ordering::Relaxed) + 1,
            ticks: Cell::new(0),
            watch: std::cell::OnceCell::new(),
            instance,
            worker,
            current: Cell::new(head_op),
            op_mark: shared
                .workers
                .get(worker)
                .map_or_else(Default::default, |l| Arc::clone(&l.op)),
            blocked: Cell::new(0),
            failure: RefCell::new(None),
            fault_tuple: Cell::new(None),
            record: Cell::new(None),
            lane: Cell::new(0),
            lane_wm: Cell::new(0),
            ptimers: Cell::new(false),
            ticked_ms: Cell::new(0),
            next_ptimer: Cell::new(u64::MAX),
            clock: Clock::new(shared.origin),
            shared,
            muted: std::rc::Rc::new(Cell::new(false)),
            fenced: Cell::new(false),
            incarnation: Cell::new(0),
            epoch: Cell::new(0),
            point_capture: Cell::new(crate::state::delta::CaptureFor::whole()),
            lowly: Cell::new(false),
            members: RefCell::new(Vec::new()),
            head: head_op,
            time: Cell::new(TaskTime::default()),
        }
    }

    /// The worker's background work.
    pub(crate) fn background(&self) -> Rc<Background> {
        Rc::clone(&self.background)
    }

    /// The worker running the task.
    pub(crate) fn worker(&self) -> usize {
        self.worker
    }

    /// One step of progress (an input processed, a window fired, a key's
    /// end-of-stream hook run): a sign of life even inside one long poll —
    /// for the primary of a standby group, to its standby; every
    /// [`TICKS_PER_BEAT`] steps, to the supervisor's stall watch (the
    /// worker's heartbeat). A watermark that fires a million windows, or
    /// the end of a stream that closes them all, holds its poll for a
    /// second and more: work, not a stall. A task stuck in an operator's
    /// code ticks no more.
    #[inline]
    pub(crate) fn tick(&self) {
        let n = self.ticks.get() + 1;
        self.ticks.set(n);
        if n.is_multiple_of(TICKS_PER_BEAT) {
            self.beat_worker();
        }
        let Some(w) = self.watch.get() else { return };
        let e = self.epoch.get();
        if e != 0 {
            w.progress(e, n);
        }
    }

    /// Writes the worker's heartbeat, unless a long step runs (the
    /// heartbeat reads 0) or a probe muted it.
    #[cold]
    fn beat_worker(&self) {
        let Some(beat) = self.shared.beats.get(self.worker) else {
            return;
        };
        let now = self.clock.now();
        if beat.load(Ordering::Relaxed) != 0 && self.shared.beating(self.worker, now) {
            beat.store(now.max(1), Ordering::Relaxed);
        }
    }

    /// The record a failure of the task happened on: the one a probe
    /// acted on, else the one an operator was processing.
    pub(crate) fn failing_tuple(&self) -> Option<TupleId> {
        self.fault_tuple.get().or(self.record.get())
    }

    /// What a failure of the task is blamed on: its record, and whether
    /// the job's fault injection made it (a probe acted).
    pub(crate) fn blame(&self) -> Blame {
        Blame {
            tuple: self.failing_tuple(),
            injected: self.fault_tuple.get().is_some(),
        }
    }

    /// Whether a standby took over from this task's primary (or the task
    /// was fenced otherwise): nothing it does counts any more.
    pub(crate) fn superseded(&self) -> bool {
        if self.fenced.get() {
            return true;
        }
        let e = self.epoch.get();
        e != 0 && self.watch.get().is_some_and(|w| w.over(e))
    }

    /// Marks `op` as running (for a panic, and for the supervisor's stall
    /// verdict: one relaxed store to a line only this worker writes);
    /// returns the operator to restore afterwards.
    #[inline]
    pub(crate) fn enter(&self, op: usize) -> usize {
        self.op_mark
            .store(super::op_mark(op, self.instance), Ordering::Relaxed);
        self.current.replace(op)
    }

    #[inline]
    pub(crate) fn leave(&self, prev: usize) {
        self.op_mark
            .store(super::op_mark(prev, self.instance), Ordering::Relaxed);
        self.current.set(prev);
    }

    /// Marks the task's current operator as the worker's (as its poll
    /// begins).
    #[inline]
    pub(crate) fn mark_current(&self) {
        self.op_mark.store(
            super::op_mark(self.current.get(), self.instance),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn current_op(&self) -> usize {
        self.current.get()
    }

    /// Records an I/O failure; the worker ends the job after this poll.
    pub(crate) fn fail_io(
        &self,
        op: usize,
        context: &str,
        path: Option<std::path::PathBuf>,
        source: std::io::Error,
    ) {
        let mut f = self.failure.borrow_mut();
        if f.is_none() {
            *f = Some(JobError::Io {
                operator: self.shared.names[op].to_string(),
                instance: self.instance,
                context: context.to_string(),
                path,
                source,
            });
        }
    }

    /// Records that `op`'s input channel broke; the worker ends the job.
    pub(crate) fn fail_cut(&self, op: usize) {
        let mut f = self.failure.borrow_mut();
        if f.is_none() {
            *f = Some(JobError::ChannelCut {
                operator: self.shared.names[op].to_string(),
                instance: self.instance,
            });
        }
    }

    /// Runs `f` — a long synchronous step of the engine's own (a state
    /// snapshot or restore, an end-of-stream flush that may block on the
    /// disk, a large exchange made or dropped) — outside stall detection:
    /// no standby takes the primaries of this worker for stalled
    /// meanwhile, and the worker's heartbeat reads "busy, not checked" (0)
    /// to the supervisor's watch, so that a restore of a large state under
    /// restart-all is not taken for a stall either (and restarted, and
    /// restored again, without end). Both are restored when `f` returns or
    /// unwinds — a primary that panics in a long step fails alone; its
    /// worker's other primaries must not stay unwatched (a panic's hook
    /// runs in here) — unless an outer long step still runs.
    pub(crate) fn long<R>(&self, f: impl FnOnce() -> R) -> R {
        long_step(&self.shared, self.worker, &self.clock, f)
    }

    /// Records a failure; the worker ends the attempt after this poll.
    pub(crate) fn fail(&self, e: JobError) {
        let mut f = self.failure.borrow_mut();
        if f.is_none() {
            *f = Some(e);
        }
    }

    /// Whether checkpoints run in exactly-once mode (inputs align barriers).
    #[inline]
    pub(crate) fn exactly_once(&self) -> bool {
        self.shared.exactly_once
    }

    /// Acknowledges checkpoint `id` for instance `self.instance` of `op`,
    /// with its state (if it keeps any), its source position (sources) or
    /// its count of records written (sinks).
    pub(crate) fn ack(
        &self,
        op: usize,
        id: u64,
        state: Option<StateCapture>,
        position: Option<u64>,
        written: Option<u64>,
    ) {
        if !self.snapshots_barriers() {
            return;
        }
        let (state, steps) = match state {
            None => (None, None),
            Some(StateCapture::Bytes(b)) => (Some(b), None),
            Some(StateCapture::Steps(s)) => (None, Some(s)),
        };
        let ack = Event::Ack {
            attempt: self.shared.attempt,
            id,
            node: op,
            instance: self.instance,
            state,
            position,
            written,
            epoch: self.epoch.get(),
        };
        match steps {
            // Archived between this worker's polls; acknowledged after.
            Some(steps) => self.background.push(steps, ack),
            // A send fails only once the supervisor is gone (the job is
            // over).
            None => {
                let _ = self.shared.events.send(ack);
            }
        }
    }

    /// Whether a barrier passing this task is snapshotted and acknowledged
    /// here: not in a hot standby, which follows its primary with its
    /// output suppressed (the primary acknowledges).
    #[inline]
    pub(crate) fn snapshots_barriers(&self) -> bool {
        !self.muted.get()
    }

    /// Whether barrier `id` reaching an operator here is still wanted: it
    /// acknowledges only in a task that snapshots barriers, and only the
    /// checkpoint in flight — the newest triggered (one at a time). An
    /// older one is over (completed, or abandoned): a new primary of a
    /// standby group replaying past it, or a barrier of an abandoned
    /// checkpoint, passes on without a snapshot nobody would read.
    #[inline]
    pub(crate) fn wants_snapshot(&self, id: u64) -> bool {
        self.snapshots_barriers() && id >= self.shared.trigger.load(Ordering::Acquire)
    }

    /// What a state captured for checkpoint `id` may be: a delta over the
    /// newest completed checkpoint (incremental checkpoints, not a
    /// savepoint), else whole.
    pub(crate) fn capture_for(&self, id: u64) -> crate::state::delta::CaptureFor {
        let s = &self.shared;
        let Some(policy) = s.incremental else {
            return crate::state::delta::CaptureFor::whole();
        };
        let completed = s.completed.load(Ordering::Acquire);
        let whole = s.whole_at.load(Ordering::Acquire) == id;
        crate::state::delta::CaptureFor {
            checkpoint: id,
            base: (completed > 0 && completed < id && !whole).then_some(completed),
            policy,
        }
    }

    /// Declines checkpoint `id`: `op` could not snapshot its state.
    pub(crate) fn decline(&self, op: usize, id: u64, reason: String) {
        let _ = self.shared.events.send(Event::Decline {
            attempt: self.shared.attempt,
            id,
            node: op,
            instance: self.instance,
            reason,
        });
    }

    /// Whether a failure was recorded in this poll.
    pub(crate) fn has_failure(&self) -> bool {
        self.failure.borrow().is_some()
    }

    pub(crate) fn take_failure(&self) -> Option<JobError> {
        self.failure.borrow_mut().take()
    }
}

impl crate::operator::DeadLetters for TaskCtx {
    fn dead_letter(&self, op: usize, id: TupleId, reason: &str, payload: &[u8]) {
        match self.shared.dead_letters.write(
            &self.shared.names[op],
            self.instance,
            id,
            reason,
            payload,
        ) {
            Err((path, e)) => self.fail_io(op, "dead-letter write failed", path, e),
            Ok(true) => {
                self.shared
                    .metrics
                    .dead_letters
                    .fetch_add(1, Ordering::Relaxed);
            }
            // A replay of a record already there.
            Ok(false) => {}
        }
    }
}

/// A flag a co-operator raises to stop one of its inputs while it aligns a
/// checkpoint barrier (exactly-once mode): the input delivered the barrier,
/// the other input has not yet.
pub(crate) type Hold = std::rc::Rc<Cell<bool>>;

/// Holds back an input of a task.
///
/// Two reasons: a co-operator is not ready for its first input yet
/// ([`crate::CoProcess::first_ready`]; a latch — once every check has
/// passed it is never asked again), or a co-operator holds the input while
/// it aligns a barrier (re-checked every time).
pub(crate) struct Gate {
    open: Cell<bool>,
    checks: Vec<Box<dyn Fn() -> bool>>,
    holds: Vec<Hold>,
}

impl Gate {
    /// A gate over `checks` and `holds`, or `None` when there is nothing to
    /// wait for.
    pub(crate) fn new(
        checks: Vec<Box<dyn Fn() -> bool>>,
        holds: Vec<Hold>,
    ) -> Option<std::rc::Rc<Gate>> {
        (!checks.is_empty() || !holds.is_empty()).then(|| {
            std::rc::Rc::new(Gate {
                open: Cell::new(checks.is_empty()),
                checks,
                holds,
            })
        })
    }

    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        if self.holds.iter().any(|h| h.get()) {
            return false;
        }
        if self.open.get() {
            return true;
        }
        let open = self.checks.iter().all(|c| c());
        self.open.set(open);
        open
    }
}

/// What one poll of a port or task achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Poll {
    /// Did work.
    Progress,
    /// Nothing to do now; `wake_at` (engine clock) when work is known to come.
    Idle { wake_at: Option<Nanos> },
    /// Finished for good.
    Done,
}

/// An input of a task: a source partition or a set of rings.
pub(crate) trait Port {
    /// Moves up to `budget` records into the chain.
    fn poll(&mut self, budget: usize) -> Poll;
    /// Publishes staged output and retries overflowed records.
    fn flush(&mut self);
    /// Processing time reached `now` (engine nanoseconds): the port hands
    /// it to its chain ([`Collector::processing_time`](crate::operator::Collector)).
    /// Ports of a standby group take theirs from the determinant log
    /// instead.
    fn processing_time(&mut self, _now: Nanos) {}
    /// Where the port stands (for a diagnostic dump).
    fn debug(&self) -> String {
        String::new()
    }
}

/// A chain of operators and its inputs.
pub(crate) struct Task {
    pub(crate) ports: Vec<Box<dyn Port>>,
    pub(crate) done: Vec<bool>,
    pub(crate) ctx: std::rc::Rc<TaskCtx>,
    pub(crate) budget: usize,
    /// A role beyond the core's (an incarnation of a standby group): its
    /// failure is the role's business (a takeover), not the attempt's.
    pub(crate) role: Option<Box<dyn TaskRole>>,
}

impl Task {
    pub(crate) fn new(ports: Vec<Box<dyn Port>>, ctx: std::rc::Rc<TaskCtx>, budget: usize) -> Self {
        let done = vec![false; ports.len()];
        Task {
            ports,
            done,
            ctx,
            budget,
            role: None,
        }
    }

    /// Polls the task; `now` is when the worker began this poll.
    pub(crate) fn poll(&mut self, now: Nanos) -> Poll {
        if let Some(r) = &mut self.role {
            if !r.before_poll(&self.ctx, now) {
                // A primary whose epoch ended (a standby took over while
                // it was stalled) ends here, even while its output is
                // blocked on a ring nobody reads any more.
                self.ctx.fenced.set(true);
            }
        }
        if self.ctx.fenced.get() {
            return Poll::Done;
        }
        if self.ctx.blocked.get() > 0 {
            for p in &mut self.ports {
                p.flush();
            }
            if self.ctx.blocked.get() > 0 {
                return Poll::Idle { wake_at: None };
            }
        }
        let mut progress = false;
        let mut wake_at: Option<Nanos> = None;
        // Processing time, for a chain with processing-time timers: once a
        // millisecond. A standby group's incarnation logs its ticks and
        // takes them from its log instead.
        let ms = now / MS;
        let tick = self.ctx.ptimers.get() && self.role.is_none() && ms > self.ctx.ticked_ms.get();
        if tick {
            self.ctx.ticked_ms.set(ms);
        }
        for (p, done) in self.ports.iter_mut().zip(self.done.iter_mut()) {
            if *done {
                continue;
            }
            if tick {
                p.processing_time(ms * MS);
            }
            match p.poll(self.budget) {
                Poll::Progress => progress = true,
                Poll::Done => {
                    *done = true;
                    progress = true;
                }
                Poll::Idle { wake_at: w } => {
                    if let Some(w) = w {
                        wake_at = Some(wake_at.map_or(w, |x| x.min(w)));
                    }
                }
            }
            p.flush();
            if self.ctx.blocked.get() > 0 {
                break;
            }
        }
        if let Some(soon) = self.role.as_ref().and_then(|r| r.look_again(now)) {
            wake_at = Some(wake_at.map_or(soon, |x| x.min(soon)));
        }
        if self.done.iter().all(|d| *d) && self.ctx.blocked.get() == 0 {
            Poll::Done
        } else if progress {
            Poll::Progress
        } else {
            // Woken for the next processing-time timer: at the millisecond
            // whose tick reaches it.
            let timer = self.ctx.next_ptimer.get();
            if self.ctx.ptimers.get() && timer != u64::MAX {
                let due = timer.div_ceil(MS).saturating_mul(MS);
                wake_at = Some(wake_at.map_or(due, |w| w.min(due)));
            }
            Poll::Idle { wake_at }
        }
    }
}

/// What a task's operators' context consults of the task's role (a
/// standby group's incarnation, in `runtime::standby`; the core names no
/// role): shared by the role's incarnations across workers.
pub(crate) trait RoleWatch: Send + Sync {
    /// The primary of `epoch` made step `steps` of progress: a sign of
    /// life to whoever watches it.
    fn progress(&self, epoch: u64, steps: u64);
    /// Whether `epoch` is over (another incarnation took over from it).
    fn over(&self, epoch: u64) -> bool;
    /// The primary of `epoch` panicked (`e`, blamed on `blame`), as seen
    /// by the panic hook, before its worker catches the panic.
    fn primary_panicked(
        &self,
        shared: &super::JobShared,
        epoch: u64,
        e: JobError,
        blame: Blame,
        now: Nanos,
    );
}

/// A task's role beyond running its ports (a standby group's incarnation,
/// in `runtime::standby`): what it does around each poll, and what its
/// failure and its end mean.
pub(crate) trait TaskRole {
    /// Before the ports are polled (a heartbeat, a look at a child
    /// process); `false`: the task was superseded — it ends.
    fn before_poll(&mut self, ctx: &TaskCtx, now: Nanos) -> bool;
    /// After the ports were polled: when to poll again at the latest
    /// (work goes on elsewhere, such as in a child process).
    fn look_again(&self, _now: Nanos) -> Option<Nanos> {
        None
    }
    /// The task failed with `e` (blamed on `blame`, at `now`): the role
    /// answers it (a takeover, a new standby); the attempt goes on.
    fn failed(&self, ctx: &TaskCtx, e: JobError, blame: Blame, now: Nanos);
    /// The task ended: the plan's operator instance `(node, instance)` it
    /// ends, if any (`None`: a standby that never took over, a fenced
    /// primary).
    fn ends(&self, ctx: &TaskCtx) -> Option<(usize, usize)>;
}

/// [`TaskCtx::long`] for worker `worker` of `shared`, outside any task (a
/// worker building a role's new tasks).
pub(crate) fn long_step<R>(
    shared: &JobShared,
    worker: usize,
    clock: &Clock,
    f: impl FnOnce() -> R,
) -> R {
    let Some(at) = shared.released_at.get(worker) else {
        return f();
    };
    let beat = shared.beats.get(worker).map(|b| &**b);
    /// Gives the worker back to both watches on drop.
    struct Watch<'a> {
        released_at: &'a AtomicU64,
        beat: Option<&'a AtomicU64>,
        clock: &'a Clock,
        nested: bool,
    }
    impl Drop for Watch<'_> {
        fn drop(&mut self) {
            if self.nested {
                return;
            }
            let now = self.clock.now();
            self.released_at.store(now, Ordering::Release);
            if let Some(b) = self.beat {
                b.store(now.max(1), Ordering::Relaxed);
            }
        }
    }
    let nested = at.swap(u64::MAX, Ordering::AcqRel) == u64::MAX;
    if let (false, Some(b)) = (nested, beat) {
        b.store(0, Ordering::Relaxed);
    }
    let _watch = Watch {
        released_at: at,
        beat,
        clock,
        nested,
    };
    f()
}

/// What a failure is blamed on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Blame {
    /// The record it happened on, when known.
    pub(crate) tuple: Option<TupleId>,
    /// The job's fault injection made it (a probe acted).
    pub(crate) injected: bool,
}

/// Steps of progress ([`TaskCtx::tick`]) between two heartbeats written
/// from inside a poll (a step is a microsecond or less: well within any
/// heartbeat timeout).
const TICKS_PER_BEAT: u64 = 1024;

/// Nanoseconds in the millisecond processing time ticks by.
pub(crate) const MS: Nanos = 1_000_000;

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_utils::CachePadded;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    fn ctx() -> TaskCtx {
        let (tx, _rx) = std::sync::mpsc::channel();
        let mut s = super::super::supervisor::test_shared(crate::sys::clock::Origin::now(), &tx);
        s.beats = vec![CachePadded::new(AtomicU64::new(5))];
        s.released_at = vec![CachePadded::new(AtomicU64::new(5))];
        TaskCtx::new(0, 0, 0, Arc::new(s), Rc::new(Background::default()))
    }

    fn released(c: &TaskCtx) -> bool {
        c.shared.released_at[0].load(Ordering::Acquire) != u64::MAX
    }

    #[test]
    fn a_long_step_that_panics_gives_its_workers_primaries_back_to_the_watch() {
        let c = ctx();
        let r = catch_unwind(AssertUnwindSafe(|| {
            c.long(|| {
                assert!(!released(&c));
                panic!("a long step panics")
            })
        }));
        assert!(r.is_err());
        assert!(released(&c), "still unwatched after the panic");
        // Nested steps: the inner one's end leaves the outer one in force.
        c.long(|| {
            c.long(|| ());
            assert!(!released(&c));
        });
        assert!(released(&c));
    }

    #[test]
    fn a_long_step_that_panics_beats_again() {
        let c = ctx();
        let r = catch_unwind(AssertUnwindSafe(|| {
            c.long(|| {
                assert_eq!(c.shared.beats[0].load(Ordering::Relaxed), 0);
                panic!("a long step panics")
            })
        }));
        assert!(r.is_err());
        assert_ne!(c.shared.beats[0].load(Ordering::Relaxed), 0);
        assert!(released(&c));
    }
}

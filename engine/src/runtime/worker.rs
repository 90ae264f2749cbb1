//! A worker: one thread, pinned to one core, building its tasks
//! ([`wire`]) and polling them — build, then poll every task round after
//! round, backing off (spin, yield, park) while nothing moves.

mod input;
pub(crate) mod wire;

use super::background::Background;
use super::task::{Poll, Task, TaskCtx};
use super::wiring::Wiring;
use crate::error::JobError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use wire::build_task;

fn panicked(w: &Wiring, ctx: &TaskCtx, payload: &(dyn std::any::Any + Send)) -> JobError {
    super::panic::failure(&w.graph.nodes[ctx.current_op()].name, ctx.instance, payload)
}

/// A task poll longer than this is reported under `TANDEM_DEBUG`.
const SLOW_POLL_NS: u64 = 500_000;

/// A task of the worker's: its index in the plan (`None`: a role's own,
/// such as a standby incarnation), and the task.
type Slot = (Option<usize>, Task);

pub(crate) fn run(index: usize, core: Option<usize>, w: Arc<Wiring>) {
    if let Some(c) = core {
        // Best effort: a refused pin leaves the thread unpinned but working.
        let _ = crate::sys::affinity::pin_current_thread(c);
    }
    let signal = Arc::clone(&w.signals[index]);
    signal.register_current();
    let shared = Arc::clone(&w.shared);
    if let Some(l) = shared.workers.get(index) {
        l.tid
            .store(crate::sys::thread::current_tid(), Ordering::Release);
    }
    let bg = Rc::new(Background::default());
    let Some(tasks) = build(&w, index, &bg) else {
        return finish(&w, index);
    };
    let clock = super::task::Clock::new(shared.origin);
    shared.beats[index].store(clock.now().max(1), Ordering::Relaxed);
    if let Some(r) = shared.released_at.get(index) {
        // Built: primaries here are watched from now on.
        r.store(clock.now(), Ordering::Release);
    }
    shared.send(super::coord::Event::Built {
        attempt: shared.attempt,
    });
    let mut l = Loop {
        w: &w,
        index,
        bg,
        clock,
        tasks,
        owed_done: Vec::new(),
        debug_dump: std::env::var_os("TANDEM_DEBUG").is_some(),
    };
    if l.run().is_ok() && !shared.cancelled() {
        for e in l.owed_done.drain(..) {
            shared.send(e);
        }
    }
    finish(&w, index)
}

/// Builds the worker's tasks of the plan, and the first tasks of its roles
/// (`None`: the attempt failed or was stopped meanwhile).
fn build(w: &Arc<Wiring>, index: usize, bg: &Rc<Background>) -> Option<Vec<Slot>> {
    let shared = &w.shared;
    let mut tasks: Vec<Slot> = Vec::new();
    for (t, _) in w
        .plan
        .worker_of_task
        .iter()
        .enumerate()
        .filter(|(_, &wk)| wk == index)
        .filter(|(t, _)| w.only.as_ref().is_none_or(|o| o.contains(t)))
    {
        let tp = &w.plan.tasks[t];
        let ctx = Rc::new(TaskCtx::new(
            tp.instance,
            tp.head,
            index,
            Arc::clone(shared),
            Rc::clone(bg),
        ));
        // A stopped attempt builds nothing more (see `JobShared::build`).
        let built =
            shared.build(|| catch_unwind(AssertUnwindSafe(|| build_task(w, index, t, &ctx))))?;
        match built {
            Ok(task) => {
                if let Some(e) = ctx.take_failure() {
                    shared.fail(e);
                    return None;
                }
                tasks.push((Some(t), task));
            }
            Err(p) => {
                shared.fail(panicked(w, &ctx, p.as_ref()));
                return None;
            }
        }
    }
    if let Some(r) = &w.roles {
        tasks.extend(r.tasks(w, index, bg, true).into_iter().map(|t| (None, t)));
    }
    Some(tasks)
}

/// The worker's polling loop and what it keeps between rounds.
struct Loop<'a> {
    w: &'a Arc<Wiring>,
    index: usize,
    bg: Rc<Background>,
    clock: super::task::Clock,
    tasks: Vec<Slot>,
    /// Ends of tasks announced once this worker's owed acknowledgements
    /// are.
    owed_done: Vec<super::coord::Event>,
    debug_dump: bool,
}

/// What one round over the tasks found.
#[derive(Default)]
struct Round {
    progress: bool,
    /// Progress of tasks other than hot standbys computing.
    own: bool,
    wake_at: Option<u64>,
}

/// The attempt failed in a task of this worker: the worker ends.
struct Failed;

impl Loop<'_> {
    /// Rounds until every task is done (and no role holds the worker, and
    /// no checkpointed state is still being archived: its acknowledgement
    /// is owed, see `background`) or the attempt is stopped.
    fn run(&mut self) -> Result<(), Failed> {
        let w = self.w;
        let shared = &w.shared;
        let signal = Arc::clone(&w.signals[self.index]);
        let marks = crossbeam_utils::CachePadded::new(super::WorkerLive::default());
        let live = shared.workers.get(self.index).unwrap_or(&marks);
        let mut backoff = Backoff::default();
        let holds = || w.roles.as_ref().is_some_and(|r| r.holds_workers());
        while !self.tasks.is_empty() || holds() || self.bg.busy() {
            if shared.cancelled() {
                break;
            }
            if let Some(r) = &w.roles {
                let new = r.tasks(w, self.index, &self.bg, false);
                self.tasks.extend(new.into_iter().map(|t| (None, t)));
            }
            let mut round = self.round(live)?;
            // The worker's own work: its tasks, and archiving or restoring
            // their states between polls.
            self.bg
                .set_others_busy(round.own || self.bg.busy() || self.bg.restoring());
            // A slice is the engine's own work, meant to be short; but one
            // step of it may grow or finish a large archive (tens of
            // milliseconds on a busy host): a long step, not a stall.
            if self.bg.busy()
                && super::task::long_step(shared, self.index, &self.clock, || {
                    self.bg.slice(shared, || self.clock.now())
                })
            {
                round.progress = true;
            }
            // A lazily restored state reads its base between polls; one
            // step may wait for the disk.
            if self.bg.restoring()
                && super::task::long_step(shared, self.index, &self.clock, || {
                    self.bg.restore_slice(|| self.clock.now())
                })
            {
                round.progress = true;
            }
            if !self.owed_done.is_empty() && !self.bg.busy() {
                for e in self.owed_done.drain(..) {
                    shared.send(e);
                }
            }
            let now = self.clock.now();
            if shared.beating(self.index, now) {
                shared.beats[self.index].store(now, Ordering::Relaxed);
            }
            // A worker going round its loop (even with no task left to
            // poll) is not stuck between tasks.
            live.since.store(now, Ordering::Relaxed);
            if round.progress {
                backoff.reset(&signal);
                continue;
            }
            if backoff.idle_for(now) > 3_000_000_000 && self.debug_dump {
                self.dump();
                backoff.idle_since = Some(now);
            }
            backoff.wait(now, round.wake_at, &w.config, &signal);
        }
        Ok(())
    }

    /// Polls every task once.
    fn round(&mut self, live: &super::WorkerLive) -> Result<Round, Failed> {
        let mut round = Round::default();
        let mut i = 0;
        // One clock read per task poll: a poll ends when the next begins
        // (what lies between is bookkeeping, and the clock is read afresh
        // after anything longer, such as dropping a task).
        let mut now_ns = self.clock.now();
        while i < self.tasks.len() {
            let started = now_ns;
            let r = self.poll_one(i, live, started);
            now_ns = self.clock.now();
            let lowly = self.tasks.get(i).is_some_and(|(_, t)| t.ctx.lowly.get());
            match self.after_poll(i, r, now_ns)? {
                None => i += 1,
                Some(Poll::Progress) => {
                    round.progress = true;
                    round.own |= !lowly;
                    i += 1;
                }
                Some(Poll::Idle { wake_at: Some(t) }) => {
                    round.wake_at = Some(round.wake_at.map_or(t, |x| x.min(t)));
                    i += 1;
                }
                Some(Poll::Idle { wake_at: None }) => i += 1,
                // The task is gone: the next one is at `i` now.
                Some(Poll::Done) => {
                    round.progress = true;
                    round.own = true;
                    now_ns = self.clock.now();
                }
            }
        }
        Ok(round)
    }

    /// Polls task `i` (its panic caught), with the task-poll marks set: a
    /// standby judging a silent primary here sees which task this worker
    /// is in, and since when; the panic hook sees which task panicked.
    fn poll_one(
        &mut self,
        i: usize,
        live: &super::WorkerLive,
        started: u64,
    ) -> std::thread::Result<Poll> {
        let (tid, task) = &mut self.tasks[i];
        live.since.store(started, Ordering::Relaxed);
        task.ctx.mark_current();
        live.polling.store(task.ctx.key, Ordering::Release);
        super::panic::enter(&task.ctx);
        let r = catch_unwind(AssertUnwindSafe(|| task.poll(started)));
        super::panic::leave();
        let now = self.clock.now();
        if let Ok(p) = &r {
            task.ctx
                .account(started, now, !matches!(p, Poll::Idle { .. }));
        }
        if self.debug_dump && now - started > SLOW_POLL_NS {
            // TANDEM_DEBUG: where a worker's time went, for a latency tail
            // (a poll this long held every task behind it).
            let shared = &self.w.shared;
            let what =
                tid.and_then(|t| self.w.plan.tasks.get(t))
                    .map_or("a standby".to_string(), |t| {
                        let names: Vec<&str> =
                            t.members.iter().map(|&m| &*shared.names[m]).collect();
                        format!("{} (instance {})", names.join("+"), t.instance)
                    });
            eprintln!(
                "tandem debug: worker {}: {what} polled for {} µs at {} ms",
                self.index,
                (now - started) / 1000,
                started / 1_000_000
            );
        }
        live.since.store(now, Ordering::Relaxed);
        live.polling.store(0, Ordering::Release);
        r
    }

    /// What task `i`'s poll `r` means: `Some(Done)` when the task is gone
    /// (ended, or failed and answered by its role), `Err` when its failure
    /// is the attempt's.
    fn after_poll(
        &mut self,
        i: usize,
        r: std::thread::Result<Poll>,
        now: u64,
    ) -> Result<Option<Poll>, Failed> {
        let w = self.w;
        let shared = &w.shared;
        let (tid, task) = &self.tasks[i];
        if let Some(role) = &task.role {
            let failure = task.ctx.take_failure();
            if failure.is_some() || r.is_err() {
                let e = match (failure, &r) {
                    (Some(e), _) => e,
                    (None, Err(p)) => panicked(w, &task.ctx, p.as_ref()),
                    (None, Ok(_)) => unreachable!(),
                };
                role.failed(&task.ctx, e, task.ctx.blame(), now);
                let (_, dead) = self.tasks.remove(i);
                let ctx = Rc::clone(&dead.ctx);
                ctx.long(move || {
                    let _ = catch_unwind(AssertUnwindSafe(move || drop(dead)));
                });
                return Ok(Some(Poll::Done));
            }
        }
        if let Some(e) = task.ctx.take_failure() {
            shared.note_fault_tuple(task.ctx.blame());
            shared.fail(e);
            return Err(Failed);
        }
        match r {
            Ok(Poll::Done) => {
                // A task with a role ends the plan's task the role says
                // (a standby group's primary: its instance's).
                let plan_task = match &task.role {
                    Some(r) => r
                        .ends(&task.ctx)
                        .and_then(|(node, inst)| w.plan.task_of(node, inst)),
                    None => *tid,
                };
                if let Some(t) = plan_task.filter(|_| !task.ctx.fenced.get()) {
                    let done = super::coord::Event::TaskDone {
                        attempt: shared.attempt,
                        task: t,
                    };
                    // An acknowledgement this worker still owes (state
                    // archived between polls) goes first: a task that
                    // passed a barrier and then ended must not count as one
                    // that ended before it — that checkpoint would hold
                    // none of its state and restore it as done.
                    if self.bg.busy() {
                        self.owed_done.push(done);
                    } else {
                        shared.send(done);
                    }
                }
                // Dropping a finished task may wait for its sinks' last
                // bytes to reach the disk: not a stall.
                let (_, done) = self.tasks.remove(i);
                let ctx = Rc::clone(&done.ctx);
                ctx.long(move || drop(done));
                Ok(Some(Poll::Done))
            }
            Ok(p) => Ok(Some(p)),
            Err(p) => {
                shared.note_fault_tuple(task.ctx.blame());
                shared.fail(panicked(w, &task.ctx, p.as_ref()));
                Err(Failed)
            }
        }
    }

    /// TANDEM_DEBUG: a worker idle for 3 s says what it waits for.
    fn dump(&self) {
        for (tid, t) in &self.tasks {
            let what = tid.and_then(|t| self.w.plan.tasks.get(t)).map_or(
                "a role's task".to_string(),
                |t| {
                    let names: Vec<&str> = t
                        .members
                        .iter()
                        .map(|&m| &*self.w.shared.names[m])
                        .collect();
                    format!("{} (instance {})", names.join("+"), t.instance)
                },
            );
            for p in &t.ports {
                eprintln!("tandem debug: worker {}: {what}: {}", self.index, p.debug());
            }
        }
        if let Some(r) = &self.w.roles {
            for line in r.debug() {
                eprintln!("tandem debug: worker {}: {line}", self.index);
            }
        }
    }
}

/// A worker with nothing to do backs off: spin → yield → park.
#[derive(Default)]
struct Backoff {
    idle_since: Option<u64>,
    sleeping: bool,
}

impl Backoff {
    fn reset(&mut self, signal: &super::channel::WorkerSignal) {
        self.idle_since = None;
        if self.sleeping {
            signal.set_sleeping(false);
            self.sleeping = false;
        }
    }

    /// Nanoseconds since the worker last moved anything.
    fn idle_for(&mut self, now: u64) -> u64 {
        now - *self.idle_since.get_or_insert(now)
    }

    fn wait(
        &mut self,
        now: u64,
        wake_at: Option<u64>,
        cfg: &super::RuntimeConfig,
        signal: &super::channel::WorkerSignal,
    ) {
        let idle = Duration::from_nanos(self.idle_for(now));
        let due_soon = wake_at.is_some_and(|t| t <= now + cfg.spin.as_nanos() as u64);
        if due_soon || idle < cfg.spin {
            std::hint::spin_loop();
        } else if idle < cfg.yield_for {
            std::thread::yield_now();
        } else if !self.sleeping {
            // Announce the sleep, then poll once more before parking, so a
            // producer that published meanwhile is not missed.
            signal.set_sleeping(true);
            self.sleeping = true;
        } else {
            let mut d = cfg.park_max;
            if let Some(t) = wake_at {
                d = d.min(Duration::from_nanos(t.saturating_sub(now)));
            }
            std::thread::park_timeout(d);
            signal.set_sleeping(false);
            self.sleeping = false;
        }
    }
}

fn finish(w: &Wiring, index: usize) {
    let now = super::task::Clock::new(w.shared.origin).now();
    w.shared.finished_at.fetch_max(now, Ordering::Relaxed);
    w.shared.send(super::coord::Event::WorkerExit {
        attempt: w.shared.attempt,
        worker: index,
    });
}

//! A worker: one thread, pinned to one core, building and polling its tasks.

mod input;
mod process;
use process::remote_chain_build;

use super::background::Background;
use super::task::{Gate, Poll, Task, TaskCtx};
use super::Wiring;
use crate::error::JobError;
use crate::operator::{OperatorInfo, Restored};
use crate::runtime::graph::{AnyBox, BuildCx, NodeKind};
use crate::runtime::task::{Hold, OpSlot, Port};
use input::input_port;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn panicked(w: &Wiring, ctx: &TaskCtx, payload: &(dyn std::any::Any + Send)) -> JobError {
    super::panic::failure(&w.graph.nodes[ctx.current_op()].name, ctx.instance, payload)
}

/// A task poll longer than this is reported under `TANDEM_DEBUG`.
const SLOW_POLL_NS: u64 = 500_000;

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
    let beat = &shared.beats[index];
    let clock = super::task::Clock::new(shared.origin);

    let bg = Rc::new(Background::default());
    let mut tasks: Vec<(usize, Task)> = Vec::new();
    for (t, _) in w
        .plan
        .worker_of_task
        .iter()
        .enumerate()
        .filter(|(_, &wk)| wk == index)
    {
        let tp = &w.plan.tasks[t];
        let ctx = Rc::new(TaskCtx::new(
            tp.instance,
            tp.head,
            index,
            Arc::clone(&shared),
            Rc::clone(&bg),
        ));
        // A stopped attempt builds nothing more (see `JobShared::build`).
        let Some(built) =
            shared.build(|| catch_unwind(AssertUnwindSafe(|| build_task(&w, index, t, &ctx))))
        else {
            return finish(&w, index);
        };
        match built {
            Ok(task) => {
                if let Some(e) = ctx.take_failure() {
                    shared.fail(e);
                    return finish(&w, index);
                }
                tasks.push((t, task));
            }
            Err(p) => {
                shared.fail(panicked(&w, &ctx, p.as_ref()));
                return finish(&w, index);
            }
        }
    }
    // The first standbys placed on this worker.
    if let Some(sb) = &shared.standby {
        let mut mine: Vec<(usize, usize)> = sb
            .groups
            .iter()
            .filter(|(_, g)| {
                g.lock()
                    .standby
                    .is_some_and(|s| s.inc == 1 && s.worker == index)
            })
            .map(|(&k, _)| k)
            .collect();
        mine.sort_unstable();
        for (node, inst) in mine {
            add_standby(&w, index, &bg, node, inst, 1, &mut tasks);
        }
    }
    beat.store(clock.now().max(1), Ordering::Relaxed);
    if let Some(r) = shared.released_at.get(index) {
        // Built: primaries here are watched from now on.
        r.store(clock.now(), Ordering::Release);
    }
    shared.send(super::coord::Event::Built {
        attempt: shared.attempt,
    });

    let cfg = &w.config;
    let marks = crossbeam_utils::CachePadded::new(super::WorkerLive::default());
    let live = shared.workers.get(index).unwrap_or(&marks);
    let debug_dump = std::env::var_os("TANDEM_DEBUG").is_some();
    let mut idle_since: Option<u64> = None;
    // Ends of tasks announced once this worker's owed acknowledgements are.
    let mut owed_done: Vec<super::coord::Event> = Vec::new();
    let mut sleeping = false;
    let standby_live = || {
        shared
            .standby
            .as_ref()
            .is_some_and(|s| s.live.load(Ordering::Acquire) > 0)
    };
    // Checkpointed state still being archived keeps the worker going: its
    // acknowledgement is owed (see `background`).
    while !tasks.is_empty() || standby_live() || bg.busy() {
        if shared.cancelled() {
            break;
        }
        if let Some(sb) = &shared.standby {
            if sb.pending[index].swap(false, Ordering::AcqRel) {
                let reqs =
                    std::mem::take(&mut *sb.inbox[index].lock().unwrap_or_else(|p| p.into_inner()));
                for (node, inst, inc) in reqs {
                    add_standby(&w, index, &bg, node, inst, inc, &mut tasks);
                }
            }
        }
        let mut progress = false;
        let mut wake_at: Option<u64> = None;
        let mut i = 0;
        // One clock read per task poll: a poll ends when the next begins
        // (what lies between is bookkeeping, and the clock is read afresh
        // after anything longer, such as dropping a task).
        let mut now_ns = clock.now();
        while i < tasks.len() {
            let (tid, task) = &mut tasks[i];
            // Task-poll marks: a standby judging a silent primary here sees
            // which task this worker is in, and since when; the panic hook
            // sees which task panicked.
            let started = now_ns;
            live.since.store(started, Ordering::Relaxed);
            live.polling.store(task.ctx.key, Ordering::Release);
            super::panic::enter(&task.ctx);
            let r = catch_unwind(AssertUnwindSafe(|| task.poll(started)));
            super::panic::leave();
            now_ns = clock.now();
            if debug_dump && now_ns - started > SLOW_POLL_NS {
                // TANDEM_DEBUG: where a worker's time went, for a latency
                // tail (a poll this long held every task behind it).
                let what = w.plan.tasks.get(*tid).map_or("a standby".to_string(), |t| {
                    let names: Vec<&str> = t.members.iter().map(|&m| &*shared.names[m]).collect();
                    format!("{} (instance {})", names.join("+"), t.instance)
                });
                eprintln!(
                    "tandem debug: worker {index}: {what} polled for {} µs at {} ms",
                    (now_ns - started) / 1000,
                    started / 1_000_000
                );
            }
            live.since.store(now_ns, Ordering::Relaxed);
            live.polling.store(0, Ordering::Release);
            if let Some((g, inc)) = task.group.clone() {
                let failure = task.ctx.take_failure();
                if failure.is_some() || r.is_err() {
                    let e = match (failure, &r) {
                        (Some(e), _) => e,
                        (None, Err(p)) => panicked(&w, &task.ctx, p.as_ref()),
                        (None, Ok(_)) => unreachable!(),
                    };
                    let tuple = task.ctx.failing_tuple();
                    let epoch = task.ctx.epoch.get();
                    g.incarnation_failed(&shared, inc, epoch, e, tuple, now_ns);
                    let (_, dead) = tasks.remove(i);
                    let ctx = Rc::clone(&dead.ctx);
                    ctx.long(move || {
                        let _ = catch_unwind(AssertUnwindSafe(move || drop(dead)));
                    });
                    now_ns = clock.now();
                    progress = true;
                    continue;
                }
            }
            if let Some(e) = task.ctx.take_failure() {
                shared.note_fault_tuple(task.ctx.failing_tuple());
                shared.fail(e);
                return finish(&w, index);
            }
            match r {
                Ok(Poll::Done) => {
                    // A standby group's primary that finished — the first
                    // one or a standby that took over — ends the plan's
                    // task of its instance; a standby that never took over
                    // and a fenced primary end nothing.
                    let plan_task = match &task.group {
                        Some((g, _)) if task.ctx.epoch.get() != 0 => {
                            w.plan.task_of(g.node, g.instance)
                        }
                        Some(_) => None,
                        None => Some(*tid),
                    };
                    if let Some(t) = plan_task.filter(|_| !task.ctx.fenced.get()) {
                        let done = super::coord::Event::TaskDone {
                            attempt: shared.attempt,
                            task: t,
                        };
                        // An acknowledgement this worker still owes (state
                        // archived between polls) goes first: a task that
                        // passed a barrier and then ended must not count as
                        // one that ended before it — that checkpoint would
                        // hold none of its state and restore it as done.
                        if bg.busy() {
                            owed_done.push(done);
                        } else {
                            shared.send(done);
                        }
                    }
                    // Dropping a finished task may wait for its sinks' last
                    // bytes to reach the disk: not a stall.
                    let (_, done) = tasks.remove(i);
                    let ctx = Rc::clone(&done.ctx);
                    ctx.long(move || drop(done));
                    now_ns = clock.now();
                    progress = true;
                    continue;
                }
                Ok(Poll::Progress) => progress = true,
                Ok(Poll::Idle { wake_at: Some(t) }) => {
                    wake_at = Some(wake_at.map_or(t, |x| x.min(t)));
                }
                Ok(Poll::Idle { wake_at: None }) => {}
                Err(p) => {
                    shared.note_fault_tuple(task.ctx.failing_tuple());
                    shared.fail(panicked(&w, &task.ctx, p.as_ref()));
                    return finish(&w, index);
                }
            }
            i += 1;
        }
        if bg.slice(&shared, || clock.now()) {
            progress = true;
        }
        if !owed_done.is_empty() && !bg.busy() {
            for e in owed_done.drain(..) {
                shared.send(e);
            }
        }
        let now = clock.now();
        if shared.beating(index, now) {
            beat.store(now, Ordering::Relaxed);
        }
        // A worker going round its loop (even with no task left to poll)
        // is not stuck between tasks.
        live.since.store(now, Ordering::Relaxed);
        if progress {
            idle_since = None;
            if sleeping {
                signal.set_sleeping(false);
                sleeping = false;
            }
            continue;
        }
        // Nothing moved: back off, spin → yield → park.
        let since = *idle_since.get_or_insert(now);
        if now - since > 3_000_000_000 && debug_dump {
            // TANDEM_DEBUG: a worker idle for 3 s says what it waits for.
            for (_, t) in &tasks {
                for p in &t.ports {
                    eprintln!("tandem debug: worker {index}: {}", p.debug());
                }
            }
            if let Some(sb) = &shared.standby {
                for ((n, i), g) in &sb.groups {
                    eprintln!(
                        "tandem debug: worker {index}: group {n}/{i}: {}",
                        g.debug_state()
                    );
                }
            }
            idle_since = Some(now);
        }
        let idle = Duration::from_nanos(now - since);
        let due_soon = wake_at.is_some_and(|t| t <= now + cfg.spin.as_nanos() as u64);
        if due_soon || idle < cfg.spin {
            std::hint::spin_loop();
        } else if idle < cfg.yield_for {
            std::thread::yield_now();
        } else if !sleeping {
            // Announce the sleep, then poll once more before parking, so a
            // producer that published meanwhile is not missed.
            signal.set_sleeping(true);
            sleeping = true;
        } else {
            let mut d = cfg.park_max;
            if let Some(t) = wake_at {
                d = d.min(Duration::from_nanos(t.saturating_sub(now)));
            }
            std::thread::park_timeout(d);
            signal.set_sleeping(false);
            sleeping = false;
        }
    }
    if !shared.cancelled() {
        for e in owed_done.drain(..) {
            shared.send(e);
        }
    }
    finish(&w, index)
}

/// Builds standby incarnation `inc` of `(node, inst)` on this worker; a
/// standby that cannot even be built is the group's failure.
fn add_standby(
    w: &Arc<Wiring>,
    index: usize,
    bg: &Rc<Background>,
    node: usize,
    inst: usize,
    inc: u64,
    tasks: &mut Vec<(usize, Task)>,
) {
    let Some(built) = w.shared.build(|| {
        catch_unwind(AssertUnwindSafe(|| {
            build_incarnation(w, index, bg, node, inst, inc, false)
        }))
    }) else {
        return; // the attempt is stopped
    };
    match built {
        Ok(t) => tasks.push((usize::MAX, t)),
        Err(p) => {
            if let Some(g) = w.shared.standby.as_ref().and_then(|s| s.group(node, inst)) {
                let e = super::panic::failure(&w.graph.nodes[node].name, inst, p.as_ref());
                let now = super::task::Clock::new(w.shared.origin).now();
                g.incarnation_failed(&w.shared, inc, 0, e, None, now);
            }
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

fn build_cx(w: &Wiring, node: usize, instance: usize, ctx: &Rc<TaskCtx>) -> BuildCx {
    ctx.enter(node);
    let n = &w.graph.nodes[node];
    let restore = w.shared.restore.as_ref().map(|r| {
        r.instances
            .get(&(node, instance))
            .cloned()
            .unwrap_or_default()
    });
    BuildCx {
        ctx: Rc::clone(ctx),
        slot: OpSlot::new(node, instance, ctx),
        info: OperatorInfo {
            name: Arc::clone(&n.name),
            instance,
            parallelism: n.parallelism,
            attempt: w.shared.attempt,
            restored: w.shared.restore.as_ref().map(|r| Restored {
                checkpoint: r.checkpoint,
                finished: restore.as_ref().is_some_and(|i| i.finished),
            }),
        },
        probe: w
            .config
            .probes
            .as_ref()
            .and_then(|p| p.probe(&n.name, instance)),
        restore,
        standby_state: None,
        from_point: false,
    }
}

/// The task of incarnation `inc` of the standby group `(node, instance)`:
/// the first primary (`primary`), or a standby.
fn build_incarnation(
    w: &Arc<Wiring>,
    index: usize,
    bg: &Rc<Background>,
    node: usize,
    inst: usize,
    inc: u64,
    primary: bool,
) -> Task {
    let group = Arc::clone(
        w.shared
            .standby
            .as_ref()
            .and_then(|s| s.group(node, inst))
            .expect("engine bug: a standby operator without its group"),
    );
    let ctx = Rc::new(TaskCtx::new(
        inst,
        node,
        index,
        Arc::clone(&w.shared),
        Rc::clone(bg),
    ));
    ctx.incarnation.set(inc);
    let _ = ctx.group.set(Arc::clone(&group));
    let kit = w.graph.nodes[node]
        .standby
        .as_ref()
        .expect("engine bug: a standby group of an operator without a standby kit");
    let process = w
        .config
        .standby
        .as_ref()
        .filter(|s| s.isolation == crate::standby::Isolation::Process);
    let (chain, child) = match process {
        Some(sc) => remote_chain_build(w, &group, inc, primary, sc, &ctx),
        None => (local_chain_build(w, &group, &ctx), None),
    };
    // A chain that replays its source runs an instance of it.
    let source = group.source.map(|s| {
        let NodeKind::Source {
            open,
            rate,
            first_partition,
            ..
        } = &w.graph.nodes[s].kind
        else {
            unreachable!("engine bug: a replayed source that is not a source")
        };
        let cx = build_cx(w, s, inst, &ctx);
        crate::runtime::standby::incarnation::source_lane::SourceSpec {
            node: s,
            rate: rate.map(|r| r / cx.info.parallelism as f64),
            origin: Arc::clone(&ctx.shared.pacing_start),
            open: Arc::clone(open),
            finished: cx.restore.as_ref().is_some_and(|r| r.finished),
            start: cx.restore.as_ref().and_then(|r| r.position).unwrap_or(0),
            first_partition: *first_partition,
            probe: cx.probe,
            info: cx.info,
        }
    });
    let port = kit.incarnation(Arc::clone(&group), inc, primary, chain, &ctx, source);
    ctx.enter(node);
    let mut t = Task::new(vec![port], ctx, w.config.budget);
    t.group = Some((group, inc));
    t.child = child;
    t
}

/// An incarnation's chain, built on its worker (thread isolation).
fn local_chain_build(
    w: &Arc<Wiring>,
    group: &Arc<crate::runtime::standby::group::Group>,
    ctx: &Rc<TaskCtx>,
) -> crate::runtime::standby::kit::ChainBuild {
    let (node, inst) = (group.node, group.instance);
    let (w2, c2) = (Arc::clone(w), Rc::clone(ctx));
    let members = group.chain.clone();
    Box::new(move |state| {
        let mut tb = TaskBuild::default();
        if let Some(archive) = state {
            tb.from_point = true;
            match crate::runtime::chain::frame::split(archive, &members) {
                Ok(states) => tb.states = states,
                // The group's own record of the chain's state is damaged:
                // every standby would read the same bytes. The attempt
                // fails (restart-all, or the job's error); the chain built
                // meanwhile never reads an input.
                Err(e) => c2.shared.fail(JobError::Restore {
                    operator: w2.graph.nodes[node].name.to_string(),
                    instance: inst,
                    source: crate::checkpoint::CheckpointError::ChainFrame(e),
                }),
            }
        }
        // The head's chain: the operators placement chained after it.
        build_in(&w2, node, inst, &c2, &mut tb)
    })
}

/// What building a task's chain collects besides the chain itself: the
/// second inputs of co-operators chained through their first input (each
/// becomes a ring port of this task, gated by that co-operator's hold of
/// its second input), and the readiness checks and first-input holds of
/// those co-operators (which gate the task's head inputs).
#[derive(Default)]
struct TaskBuild {
    side_inputs: Vec<(usize, AnyBox, Vec<Hold>)>,
    checks: Vec<Box<dyn Fn() -> bool>>,
    holds: Vec<Hold>,
    /// An incarnation's chain built from a recovery point: its operators'
    /// states, by node (one without a state there starts fresh).
    states: std::collections::HashMap<usize, Vec<u8>>,
    from_point: bool,
}

fn build_task(w: &Arc<Wiring>, index: usize, t: usize, ctx: &Rc<TaskCtx>) -> Task {
    let tp = &w.plan.tasks[t];
    let (head, inst) = (tp.head, tp.instance);
    // A backed-up chain's head, or the source such a chain replays.
    let group_head = tp
        .members
        .iter()
        .copied()
        .find(|&m| w.plan.replays[m] == Some(head))
        .unwrap_or(head);
    if w.shared
        .standby
        .as_ref()
        .is_some_and(|s| s.group(group_head, inst).is_some())
    {
        return build_incarnation(w, index, &ctx.background(), group_head, inst, 0, true);
    }
    let node = &w.graph.nodes[head];
    let in_edge = |port: usize| {
        w.graph
            .edges
            .iter()
            .position(|e| e.to == head && e.port == port)
            .expect("engine bug: missing input edge")
    };
    let mut tb = TaskBuild::default();
    let mut ports: Vec<Box<dyn Port>> = match &node.kind {
        NodeKind::Source {
            build,
            rate,
            watermarks,
            first_partition,
            ..
        } => {
            let down = build_out(w, head, inst, ctx, &mut tb);
            let gate = Gate::new(
                std::mem::take(&mut tb.checks),
                std::mem::take(&mut tb.holds),
            );
            vec![build(
                build_cx(w, head, inst, ctx),
                down,
                *rate,
                gate,
                *watermarks,
                *first_partition,
            )]
        }
        NodeKind::Unary(_) | NodeKind::Sink(_) => {
            let target = build_in(w, head, inst, ctx, &mut tb);
            let gate = Gate::new(
                std::mem::take(&mut tb.checks),
                std::mem::take(&mut tb.holds),
            );
            // Every input edge (a union has several), one port over all
            // their lanes.
            let edges: Vec<usize> = (0..w.graph.edges.len())
                .filter(|&e| w.graph.edges[e].to == head)
                .collect();
            vec![input_port(w, &edges, inst, target, gate, ctx)]
        }
        NodeKind::Binary(build) => {
            let down = build_out(w, head, inst, ctx, &mut tb);
            let co = build(build_cx(w, head, inst, ctx), down);
            // Co-operators chained further down gate both inputs of this
            // one (records of either input reach them); this one's own
            // readiness gates its first input only, and each of its holds
            // the input it names.
            let down_checks = Rc::new(std::mem::take(&mut tb.checks));
            let down_holds = std::mem::take(&mut tb.holds);
            let shared_checks = |extra: Option<Box<dyn Fn() -> bool>>| {
                let mut v: Vec<Box<dyn Fn() -> bool>> = Vec::new();
                if !down_checks.is_empty() {
                    let d = Rc::clone(&down_checks);
                    v.push(Box::new(move || d.iter().all(|c| c())));
                }
                v.extend(extra);
                v
            };
            let mut second_holds = down_holds.clone();
            second_holds.push(co.holds[1].clone());
            let mut first_holds = down_holds;
            first_holds.push(co.holds[0].clone());
            // The second input first: it is what a gated first input waits for.
            vec![
                input_port(
                    w,
                    &[in_edge(1)],
                    inst,
                    co.second,
                    Gate::new(shared_checks(None), second_holds),
                    ctx,
                ),
                input_port(
                    w,
                    &[in_edge(0)],
                    inst,
                    co.first,
                    Gate::new(shared_checks(Some(co.ready)), first_holds),
                    ctx,
                ),
            ]
        }
    };
    // Side inputs of chained co-operators, polled before the head.
    let mut sides: Vec<Box<dyn Port>> = tb
        .side_inputs
        .into_iter()
        .map(|(edge, target, holds)| {
            input_port(w, &[edge], inst, target, Gate::new(Vec::new(), holds), ctx)
        })
        .collect();
    sides.append(&mut ports);
    ctx.enter(head);
    Task::new(sides, Rc::clone(ctx), w.config.budget)
}

/// The collector for `node`'s output: chained consumers and ring senders.
fn build_out(
    w: &Wiring,
    node: usize,
    inst: usize,
    ctx: &Rc<TaskCtx>,
    tb: &mut TaskBuild,
) -> AnyBox {
    let kit = w.graph.nodes[node]
        .out
        .as_ref()
        .expect("engine bug: a sink has no output");
    let mut outs: Vec<AnyBox> = Vec::new();
    for (ei, e) in w.graph.edges.iter().enumerate() {
        if e.from != node {
            continue;
        }
        if w.plan.chained[ei] {
            outs.push(build_in(w, e.to, inst, ctx, tb));
        } else if let Some(sb) = w
            .shared
            .standby
            .as_ref()
            .filter(|s| s.group(e.to, 0).is_some())
        {
            // Into an operator with a standby: its buffer queues.
            let lanes = w
                .lanes(ei)
                .into_iter()
                .filter(|&(u, _)| u == inst)
                .map(|(u, d)| {
                    let g = sb
                        .group(e.to, d)
                        .expect("engine bug: missing standby group");
                    let lane = g
                        .upstream
                        .iter()
                        .position(|&x| x == (ei, u))
                        .expect("engine bug: upstream not a lane of its group");
                    (Arc::clone(g), lane)
                })
                .collect();
            let skit = w.graph.nodes[e.to]
                .standby
                .as_ref()
                .expect("engine bug: a standby group of an operator without a standby kit");
            outs.push(skit.sender(
                lanes,
                &w.partitioning(ei),
                ctx,
                w.config.batch,
                w.config.ring_capacity,
            ));
        } else if let Some(g) = w
            .shared
            .standby
            .as_ref()
            .and_then(|s| s.backing(node, inst))
        {
            // Out of an incarnation's chain: rings of its own, handed to
            // the consumers through the group.
            let inc = ctx.incarnation.get();
            let mut lanes = Vec::new();
            let mut wake = Vec::new();
            {
                let mut gi = g.lock();
                for (u, d) in w.lanes(ei) {
                    if u != inst {
                        continue;
                    }
                    let (p, c) = kit.ring(w.config.ring_capacity);
                    let ci = g
                        .consumers
                        .iter()
                        .position(|c| c.edge == ei && c.instance == d)
                        .expect("engine bug: consumer not in its group");
                    gi.rings.insert((ci, inc), c);
                    let cw = w.worker_of(e.to, d);
                    wake.push(cw);
                    lanes.push((p, Arc::clone(&w.signals[cw])));
                }
            }
            for cw in wake {
                w.signals[cw].wake();
            }
            outs.push(kit.sender(
                lanes,
                &w.partitioning(ei),
                ctx,
                w.config.batch,
                Some(Rc::clone(&ctx.muted)),
            ));
        } else {
            let lanes = {
                let mut prod = w.producers.lock().unwrap_or_else(|p| p.into_inner());
                w.lanes(ei)
                    .into_iter()
                    .filter(|&(u, _)| u == inst)
                    .map(|(u, d)| {
                        let p = prod
                            .remove(&(ei, u, d))
                            .expect("engine bug: ring producer taken twice");
                        (p, Arc::clone(&w.signals[w.worker_of(e.to, d)]))
                    })
                    .collect()
            };
            outs.push(kit.sender(lanes, &w.partitioning(ei), ctx, w.config.batch, None));
        }
    }
    match outs.len() {
        0 => kit.null(),
        1 => outs.pop().expect("one element"),
        _ => kit.tee(outs),
    }
}

/// The input collector of a chained node (for a co-operator: of its first
/// input; its second input is recorded in `tb`).
fn build_in(w: &Wiring, node: usize, inst: usize, ctx: &Rc<TaskCtx>, tb: &mut TaskBuild) -> AnyBox {
    match &w.graph.nodes[node].kind {
        NodeKind::Unary(build) => {
            let down = build_out(w, node, inst, ctx, tb);
            let mut cx = build_cx(w, node, inst, ctx);
            cx.standby_state = tb.states.remove(&node);
            cx.from_point = tb.from_point;
            build(cx, down)
        }
        NodeKind::Sink(build) => build(build_cx(w, node, inst, ctx)),
        NodeKind::Binary(build) => {
            let mark = tb.holds.len();
            let down = build_out(w, node, inst, ctx, tb);
            // Co-operators chained below this one see its second input's
            // records too: their holds gate that input as well.
            let mut side_holds = tb.holds[mark..].to_vec();
            let co = build(build_cx(w, node, inst, ctx), down);
            let side = w
                .graph
                .edges
                .iter()
                .position(|e| e.to == node && e.port == 1)
                .expect("engine bug: co-operator without a second input");
            let [hold_first, hold_second] = co.holds;
            side_holds.push(hold_second);
            tb.side_inputs.push((side, co.second, side_holds));
            tb.checks.push(co.ready);
            tb.holds.push(hold_first);
            co.first
        }
        NodeKind::Source { .. } => unreachable!("engine bug: sources are never chained into"),
    }
}

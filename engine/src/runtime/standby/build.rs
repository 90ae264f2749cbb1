//! What the standby builds into a worker's tasks ([`WireRoles`], named by
//! the core in `runtime::worker`): a backed-up chain's task as its group's
//! first primary, every later incarnation (a standby, built on the worker
//! the group asks for), the upstream senders into a group's buffer queues,
//! an incarnation's own rings to the consumers, and a consumer's fenced
//! input from the groups' current primaries. Under process isolation an
//! incarnation's chain runs in a child process ([`process`]).

mod process;

use super::group::Group;
use super::kit;
use super::run::StandbyRun;
use crate::error::JobError;
use crate::runtime::background::Background;
use crate::runtime::graph::{AnyBox, Fencing, NodeKind};
use crate::runtime::task::{Gate, Port, RoleWatch, Task, TaskCtx};
use crate::runtime::wiring::WireRoles;
use crate::runtime::wiring::Wiring;
use crate::runtime::worker::wire::{build_cx, build_in, build_out, TaskBuild};
use process::remote_chain_build;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl WireRoles for StandbyRun {
    fn task(&self, w: &Arc<Wiring>, index: usize, t: usize, ctx: &Rc<TaskCtx>) -> Option<Task> {
        let tp = &w.plan.tasks[t];
        let (head, inst) = (tp.head, tp.instance);
        // A backed-up chain's head, or the source such a chain replays.
        let group_head = tp
            .members
            .iter()
            .copied()
            .find(|&m| w.plan.replays[m] == Some(head))
            .unwrap_or(head);
        self.group(group_head, inst)?;
        Some(build_incarnation(
            w,
            index,
            &ctx.background(),
            group_head,
            inst,
            0,
            true,
        ))
    }

    fn sender(
        &self,
        w: &Wiring,
        node: usize,
        inst: usize,
        ei: usize,
        ctx: &Rc<TaskCtx>,
    ) -> Option<AnyBox> {
        let e = &w.graph.edges[ei];
        if self.heads(e.to) {
            // Into an operator with a standby: its buffer queues.
            let lanes = w
                .lanes(ei)
                .into_iter()
                .filter(|&(u, _)| u == inst)
                .map(|(u, d)| {
                    let g = self
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
            let skit = kit::of_node(&w.graph.nodes[e.to])
                .expect("engine bug: a standby group of an operator without a standby kit");
            Some(skit.sender(
                lanes,
                &w.partitioning(ei),
                ctx,
                w.config.batch,
                w.config.ring_capacity,
            ))
        } else {
            let g = self.backing(node, inst)?;
            let kit = w.graph.nodes[node]
                .out
                .as_ref()
                .expect("engine bug: a sink has no output");
            // Out of an incarnation's chain: rings of its own, handed to
            // the consumers through the group.
            let inc = ctx.incarnation.get();
            let mut lanes = Vec::new();
            let mut gone = Vec::new();
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
                    gone.push(Arc::clone(&g.consumers[ci].ended));
                    let cw = w.worker_of(e.to, d);
                    wake.push(cw);
                    lanes.push((p, Arc::clone(&w.signals[cw])));
                }
            }
            for cw in wake {
                w.signals[cw].wake();
            }
            Some(kit.sender(
                lanes,
                &w.partitioning(ei),
                ctx,
                w.config.batch,
                Some(Fencing {
                    muted: Rc::clone(&ctx.muted),
                    gone,
                }),
            ))
        }
    }

    fn input(
        &self,
        w: &Wiring,
        edges: &[usize],
        inst: usize,
        target: AnyBox,
        gate: Option<Rc<Gate>>,
        ctx: &Rc<TaskCtx>,
    ) -> Result<Box<dyn Port>, AnyBox> {
        // Either every edge comes from a standby group (the lanes are the
        // groups' current primaries) or none does — the job builder
        // refuses a union of both kinds.
        let backed = |e: usize| self.backs(w.graph.edges[e].from);
        if !backed(edges[0]) {
            assert!(
                !edges.iter().any(|&e| backed(e)),
                "engine bug: a union of backed and plain inputs"
            );
            return Err(target);
        }
        let mut groups = Vec::new();
        for &edge in edges {
            assert!(
                backed(edge),
                "engine bug: a union of backed and plain inputs"
            );
            let e = &w.graph.edges[edge];
            for u in 0..w.graph.nodes[e.from].parallelism {
                if !w.lanes(edge).contains(&(u, inst)) {
                    continue;
                }
                let g = self
                    .backing(e.from, u)
                    .expect("engine bug: missing standby group");
                let ci = g
                    .consumers
                    .iter()
                    .position(|c| c.edge == edge && c.instance == inst)
                    .expect("engine bug: consumer not in its group");
                groups.push((Arc::clone(g), ci));
            }
        }
        let from = &w.graph.nodes[w.graph.edges[edges[0]].from];
        let kit = kit::of_stream(from).expect("engine bug: an edge leaves a sink");
        Ok(kit.fenced_input(groups, target, gate, ctx))
    }

    fn tasks(&self, w: &Arc<Wiring>, index: usize, bg: &Rc<Background>, first: bool) -> Vec<Task> {
        let mut tasks = Vec::new();
        if first {
            // The first standbys placed on this worker.
            let mut mine: Vec<(usize, usize)> = self
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
                add_standby(w, index, bg, node, inst, 1, &mut tasks);
            }
        } else if self.pending[index].load(Ordering::Acquire)
            && self.pending[index].swap(false, Ordering::AcqRel)
        {
            // (Looked at once per turn of the worker's loop: a load, not a
            // read-modify-write, while nothing is pending.)
            let reqs =
                std::mem::take(&mut *self.inbox[index].lock().unwrap_or_else(|p| p.into_inner()));
            for (node, inst, inc) in reqs {
                add_standby(w, index, bg, node, inst, inc, &mut tasks);
            }
        }
        tasks
    }

    fn holds_workers(&self) -> bool {
        self.live.load(Ordering::Acquire) > 0
    }

    fn debug(&self) -> Vec<String> {
        self.groups
            .iter()
            .map(|((n, i), g)| format!("group {n}/{i}: {}", g.debug_state()))
            .collect()
    }
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
    tasks: &mut Vec<Task>,
) {
    // Building a standby (its queues' cursors, its files, its chain, a
    // child process) takes milliseconds between the worker's polls: its
    // primaries are not stalled meanwhile.
    let clock = crate::runtime::task::Clock::new(w.shared.origin);
    let Some(built) = crate::runtime::task::long_step(&w.shared, index, &clock, || {
        w.shared.build(|| {
            catch_unwind(AssertUnwindSafe(|| {
                build_incarnation(w, index, bg, node, inst, inc, false)
            }))
        })
    }) else {
        return; // the attempt is stopped
    };
    match built {
        Ok(t) => tasks.push(t),
        Err(p) => {
            if let Some(g) = w.shared.standby.as_ref().and_then(|s| s.group(node, inst)) {
                let e = crate::runtime::panic::failure(&w.graph.nodes[node].name, inst, p.as_ref());
                let now = crate::runtime::task::Clock::new(w.shared.origin).now();
                g.incarnation_failed(&w.shared, inc, 0, e, Default::default(), now);
            }
        }
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
    let _ = ctx.watch.set(Arc::clone(&group) as Arc<dyn RoleWatch>);
    let kit = kit::of_node(&w.graph.nodes[node])
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
        super::incarnation::source_lane::SourceSpec {
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
    t.role = Some(Box::new(super::role::Incarnation::new(group, inc, child)));
    t
}

/// An incarnation's chain, built on its worker (thread isolation).
fn local_chain_build(
    w: &Arc<Wiring>,
    group: &Arc<Group>,
    ctx: &Rc<TaskCtx>,
) -> super::entry::ChainBuild {
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

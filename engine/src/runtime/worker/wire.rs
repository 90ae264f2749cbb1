//! The builders that turn the plan ([`crate::runtime::graph`]) into a
//! worker's tasks: a task's ports, its chain of operators, the ring senders
//! at its end. A role beyond the core's (a standby group) builds its own
//! parts through [`WireRoles`](crate::runtime::wiring::WireRoles), which the
//! core names and `runtime::standby` implements.

use super::input::input_port;
use crate::operator::{OperatorInfo, Restored};
use crate::runtime::graph::{AnyBox, BuildCx, NodeKind};
use crate::runtime::task::{Gate, Hold, OpSlot, Port, Task, TaskCtx};
use crate::runtime::wiring::Wiring;
use std::rc::Rc;
use std::sync::Arc;

pub(crate) fn build_cx(w: &Wiring, node: usize, instance: usize, ctx: &Rc<TaskCtx>) -> BuildCx {
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
                adopted: restore
                    .as_ref()
                    .map(|i| i.adopted.clone())
                    .unwrap_or_default(),
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

/// What building a task's chain collects besides the chain itself: the
/// second inputs of co-operators chained through their first input (each
/// becomes a ring port of this task, gated by that co-operator's hold of
/// its second input), and the readiness checks and first-input holds of
/// those co-operators (which gate the task's head inputs).
#[derive(Default)]
pub(crate) struct TaskBuild {
    pub(crate) side_inputs: Vec<(usize, AnyBox, Vec<Hold>)>,
    pub(crate) checks: Vec<Box<dyn Fn() -> bool>>,
    pub(crate) holds: Vec<Hold>,
    /// An incarnation's chain built from a recovery point: its operators'
    /// states, by node (one without a state there starts fresh).
    pub(crate) states: std::collections::HashMap<usize, Vec<u8>>,
    pub(crate) from_point: bool,
}

pub(super) fn build_task(w: &Arc<Wiring>, index: usize, t: usize, ctx: &Rc<TaskCtx>) -> Task {
    let tp = &w.plan.tasks[t];
    let (head, inst) = (tp.head, tp.instance);
    if let Some(t) = w.roles.as_ref().and_then(|r| r.task(w, index, t, ctx)) {
        return t;
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
pub(crate) fn build_out(
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
        } else if let Some(s) = w
            .roles
            .as_ref()
            .and_then(|r| r.sender(w, node, inst, ei, ctx))
        {
            // A role's own sender (into a standby group's buffer queues,
            // or out of an incarnation's chain).
            outs.push(s);
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
pub(crate) fn build_in(
    w: &Wiring,
    node: usize,
    inst: usize,
    ctx: &Rc<TaskCtx>,
    tb: &mut TaskBuild,
) -> AnyBox {
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

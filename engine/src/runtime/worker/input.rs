//! A task's input ports: what reads the edges into its head — rings from
//! upstream tasks, or the current primaries of upstream standby groups.

use crate::runtime::graph::AnyBox;
use crate::runtime::task::{Gate, Port, TaskCtx};
use crate::runtime::Wiring;
use std::rc::Rc;
use std::sync::Arc;

/// The port reading `edges` (all into the same node, of the same type;
/// several for a union) for instance `inst`: one port over the lanes of
/// them all, in edge order. Either every edge comes from a standby group
/// (the lanes are the groups' current primaries) or none does — the job
/// builder refuses a union of both kinds.
pub(super) fn input_port(
    w: &Wiring,
    edges: &[usize],
    inst: usize,
    target: AnyBox,
    gate: Option<Rc<Gate>>,
    ctx: &Rc<TaskCtx>,
) -> Box<dyn Port> {
    let first = &w.graph.edges[edges[0]];
    let kit = w.graph.nodes[first.from]
        .out
        .as_ref()
        .expect("engine bug: an edge leaves a sink");
    let backed = |e: usize| {
        let from = w.graph.edges[e].from;
        w.shared
            .standby
            .as_ref()
            .is_some_and(|s| s.backing(from, 0).is_some())
    };
    if let Some(sb) = w.shared.standby.as_ref().filter(|_| backed(edges[0])) {
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
                let g = sb
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
        return kit.fenced_input(groups, target, gate, ctx);
    }
    let mut rings = Vec::new();
    {
        let mut cons = w.consumers.lock().unwrap_or_else(|p| p.into_inner());
        for &edge in edges {
            assert!(
                !backed(edge),
                "engine bug: a union of backed and plain inputs"
            );
            let e = &w.graph.edges[edge];
            for (u, d) in w.lanes(edge).into_iter().filter(|&(_, d)| d == inst) {
                let c = cons
                    .remove(&(edge, u, d))
                    .expect("engine bug: ring consumer taken twice");
                rings.push((c, Arc::clone(&w.signals[w.worker_of(e.from, u)])));
            }
        }
    }
    kit.input(rings, target, gate, ctx)
}

//! A task's input ports: what reads the edges into its head — rings from
//! upstream tasks, or what a role feeds them from (the current primaries of
//! upstream standby groups: [`crate::runtime::wiring::WireRoles::input`]).

use crate::runtime::graph::AnyBox;
use crate::runtime::task::{Gate, Port, TaskCtx};
use crate::runtime::wiring::Wiring;
use std::rc::Rc;
use std::sync::Arc;

/// The port reading `edges` (all into the same node, of the same type;
/// several for a union) for instance `inst`: one port over the lanes of
/// them all, in edge order — the role's, when it feeds them.
pub(super) fn input_port(
    w: &Wiring,
    edges: &[usize],
    inst: usize,
    target: AnyBox,
    gate: Option<Rc<Gate>>,
    ctx: &Rc<TaskCtx>,
) -> Box<dyn Port> {
    let target = match w.roles.as_ref() {
        Some(r) => match r.input(w, edges, inst, target, gate.clone(), ctx) {
            Ok(port) => return port,
            Err(target) => target,
        },
        None => target,
    };
    let first = &w.graph.edges[edges[0]];
    let kit = w.graph.nodes[first.from]
        .out
        .as_ref()
        .expect("engine bug: an edge leaves a sink");
    let mut rings = Vec::new();
    {
        let mut cons = w.consumers.lock().unwrap_or_else(|p| p.into_inner());
        for &edge in edges {
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

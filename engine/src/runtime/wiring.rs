//! What a worker needs to build its tasks ([`Wiring`]): the plan, the
//! placement, the ring ends made up front, the workers' signals, the
//! configuration, and the roles beyond the core's ([`WireRoles`]); and what
//! the plan's edges come to — their real partitioning, their lanes, the
//! memory their rings take, the shapes placement reads.

use crate::error::{JobError, RuntimeError};
use crate::runtime::background::Background;
use crate::runtime::graph::{AnyBox, AnySend, Graph, NodeKind, Partitioning};
use crate::runtime::placement::{EdgeShape, NodeShape, Plan};
use crate::runtime::signal::WorkerSignal;
use crate::runtime::task::{Gate, Port, Task, TaskCtx};
use crate::runtime::{JobShared, RuntimeConfig};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// What a role beyond the core's (standby groups: `runtime::standby`)
/// builds into a worker's tasks, and the tasks of its own it runs there.
pub(crate) trait WireRoles: Send + Sync {
    /// Task `t` of the plan, when the role runs it (a backed-up chain: as
    /// its group's first primary), on worker `index`.
    fn task(&self, w: &Arc<Wiring>, index: usize, t: usize, ctx: &Rc<TaskCtx>) -> Option<Task>;
    /// The collector for edge `ei` out of instance `inst` of `node`, when
    /// the role makes it (into a group's buffer queues, or out of an
    /// incarnation's chain).
    fn sender(
        &self,
        w: &Wiring,
        node: usize,
        inst: usize,
        ei: usize,
        ctx: &Rc<TaskCtx>,
    ) -> Option<AnyBox>;
    /// The port reading `edges` into instance `inst`, when the role feeds
    /// them (a group's current primaries); `Err` gives `target` back.
    fn input(
        &self,
        w: &Wiring,
        edges: &[usize],
        inst: usize,
        target: AnyBox,
        gate: Option<Rc<Gate>>,
        ctx: &Rc<TaskCtx>,
    ) -> Result<Box<dyn Port>, AnyBox>;
    /// Tasks of the role's to run on worker `index` from now on (`first`:
    /// at the worker's start), each answering for its own failure.
    fn tasks(&self, w: &Arc<Wiring>, index: usize, bg: &Rc<Background>, first: bool) -> Vec<Task>;
    /// Whether the worker must go on polling with no task left (the role
    /// may still send it one).
    fn holds_workers(&self) -> bool;
    /// Where the role stands, for a diagnostic dump.
    fn debug(&self) -> Vec<String>;
}

/// Ring ends waiting to be taken by the workers that use them, keyed by
/// `(edge, producer instance, consumer instance)`.
type RingEnds = Mutex<HashMap<(usize, usize, usize), AnySend>>;

/// Everything a worker needs to build its tasks.
pub(crate) struct Wiring {
    pub(crate) graph: Arc<Graph>,
    pub(crate) plan: Plan,
    pub(crate) shared: Arc<JobShared>,
    pub(crate) producers: RingEnds,
    pub(crate) consumers: RingEnds,
    pub(crate) signals: Vec<Arc<WorkerSignal>>,
    pub(crate) config: RuntimeConfig,
    /// The tasks this attempt runs, when it runs one failover region of
    /// several (`None`: every task of the plan).
    pub(crate) only: Option<Arc<std::collections::HashSet<usize>>>,
    /// What a role beyond the core's builds into the workers' tasks (the
    /// standby groups of the attempt, if any).
    pub(crate) roles: Option<Arc<dyn WireRoles>>,
}

impl Wiring {
    /// The partitioning an edge really has: forward between operators of
    /// different parallelism degrades to rebalance.
    pub(crate) fn partitioning(&self, edge: usize) -> Partitioning {
        partitioning(&self.graph, edge)
    }

    /// The `(producer, consumer)` instance pairs that have a ring on `edge`.
    pub(crate) fn lanes(&self, edge: usize) -> Vec<(usize, usize)> {
        lanes(&self.graph, edge)
    }

    /// The worker that runs instance `instance` of `node`.
    pub(crate) fn worker_of(&self, node: usize, instance: usize) -> usize {
        let t = self
            .plan
            .task_of(node, instance)
            .expect("engine bug: node instance without a task");
        self.plan.worker_of_task[t]
    }
}

pub(crate) fn partitioning(graph: &Graph, edge: usize) -> Partitioning {
    let e = &graph.edges[edge];
    let (pf, pt) = (
        graph.nodes[e.from].parallelism,
        graph.nodes[e.to].parallelism,
    );
    match &e.partitioning {
        Partitioning::Forward if pf != pt => Partitioning::Rebalance,
        p => p.clone(),
    }
}

/// Refuses a job whose rings between tasks — allocated whole when each
/// attempt starts: a parallelism of `p` on both sides of a key-partitioned
/// edge makes `p²` of them — would not fit the memory this process may
/// still take (half of it: the records, state and the rest need room too).
/// Checked before placement, which chains some forward edges (a ring
/// fewer each): an upper bound.
pub(crate) fn check_ring_memory(graph: &Graph, config: &RuntimeConfig) -> Result<(), JobError> {
    let Some(available) = crate::sys::limits::available_memory() else {
        return Ok(());
    };
    let mut needed = 0u64;
    let mut rings = 0u64;
    for (ei, e) in graph.edges.iter().enumerate() {
        let Some(kit) = graph.nodes[e.from].out.as_ref() else {
            continue;
        };
        let n = lane_count(graph, ei);
        rings = rings.saturating_add(n);
        needed = needed.saturating_add(n.saturating_mul(kit.ring_bytes(config.ring_capacity)));
    }
    if needed > available / 2 {
        return Err(RuntimeError::InsufficientMemory {
            what: format!(
                "the {rings} rings between this job's tasks ({} slots each)",
                config.ring_capacity
            ),
            needed,
            available,
            hint: "lower the parallelism or the ring capacity".into(),
        }
        .into());
    }
    Ok(())
}

/// How many lanes [`lanes`] lists for `edge`, without listing them.
pub(crate) fn lane_count(graph: &Graph, edge: usize) -> u64 {
    let e = &graph.edges[edge];
    let (pf, pt) = (
        graph.nodes[e.from].parallelism as u64,
        graph.nodes[e.to].parallelism as u64,
    );
    if partitioning(graph, edge).is_forward() {
        pf
    } else {
        pf.saturating_mul(pt)
    }
}

/// The `(producer, consumer)` instance pairs that have a ring on `edge`.
pub(crate) fn lanes(graph: &Graph, edge: usize) -> Vec<(usize, usize)> {
    let e = &graph.edges[edge];
    let (pf, pt) = (
        graph.nodes[e.from].parallelism,
        graph.nodes[e.to].parallelism,
    );
    if partitioning(graph, edge).is_forward() {
        (0..pf).map(|i| (i, i)).collect()
    } else {
        (0..pf).flat_map(|u| (0..pt).map(move |d| (u, d))).collect()
    }
}

/// The shapes placement needs, read off a graph.
/// With `standby`, operators marked for one head (or join) backed-up chains
/// (and, with `replay_sources`, take the source before them in as their
/// queue).
pub(crate) fn shapes(
    graph: &Graph,
    standby: bool,
    replay_sources: bool,
) -> (Vec<NodeShape>, Vec<EdgeShape>) {
    let mut inputs = vec![0; graph.nodes.len()];
    for e in &graph.edges {
        inputs[e.to] += 1;
    }
    let nodes = graph
        .nodes
        .iter()
        .zip(&inputs)
        .map(|(n, &i)| NodeShape {
            parallelism: n.parallelism,
            inputs: i,
            binary: matches!(n.kind, NodeKind::Binary(_)),
            standby: standby && n.standby.is_some(),
            sink: matches!(n.kind, NodeKind::Sink(_)),
            // A source with watermarks is not replayed in place (its
            // idleness is a matter of time, not of its records): its
            // chain's queue holds them.
            source: standby
                && replay_sources
                && matches!(
                    n.kind,
                    NodeKind::Source {
                        watermarks: None,
                        ..
                    }
                ),
        })
        .collect();
    let edges = graph
        .edges
        .iter()
        .map(|e| EdgeShape {
            from: e.from,
            to: e.to,
            port: e.port,
            forward: e.partitioning.is_forward(),
        })
        .collect();
    (nodes, edges)
}

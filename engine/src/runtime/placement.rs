//! Placement: which operators are chained into one task, and which worker
//! (core) runs each task. A pure function of the graph's shape and the core
//! count, so every branch is unit-tested.
//!
//! Policy ([`Chaining::Auto`]): when the machine has a core for every
//! operator instance, nothing is chained — each instance runs alone on its
//! core and exchanges records through rings, as the design intends. When it
//! does not, every chainable edge is chained (a direct call instead of a
//! ring: Flink's operator chaining), which cuts the task count to the number
//! of pipeline segments between exchanges.
//!
//! An edge is *chainable* when records stay on the same instance (forward
//! partitioning with equal parallelism on both ends, or parallelism 1 on
//! both ends) and it is its target's only input — or the *first* input of a
//! two-input operator, whose second input then arrives through a ring into
//! the same task.
//!
//! A node marked for a standby heads a *backed-up chain*: its input arrives
//! through the standby group's buffer queues (never a direct call), and the
//! one-input operators after it join its chain where an edge allows
//! chaining — when the policy chains, and always when the next operator is
//! marked for a standby too (two adjacent marks back up one chain). The
//! chain is what the standby runs and takes over; its outputs leave through
//! the group's fenced rings. A sink or a co-operator never joins one (a
//! sink's output and a second input are not in the group's log).
//!
//! A chain whose head's only input is a *replayable source* instance on the
//! same instance (forward, equal parallelism, the source feeding nothing
//! else) takes that source in as well: the source is its queue. The task
//! is then `source → head → …`, the source's records are never copied, and
//! a takeover replays them from the source itself (it can seek by tuple
//! ID); see `runtime/standby/incarnation/source_lane.rs`.
//!
//! Tasks are ordered by instance, then by position in the graph, and split
//! into contiguous runs, one run per worker: an instance's whole pipeline
//! tends to share a core (its forward edges stay in that core's cache), and
//! different instances go to different cores.

/// What placement needs to know about a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeShape {
    /// Number of instances.
    pub parallelism: usize,
    /// Number of input edges.
    pub inputs: usize,
    /// Whether the node is a two-input (co-)operator.
    pub binary: bool,
    /// Whether the node is marked for a standby: it heads a backed-up
    /// chain, or joins the one its input comes from.
    pub standby: bool,
    /// Whether the node is a sink.
    pub sink: bool,
    /// Whether the node is a source that a backed-up chain after it may
    /// replay instead of copying its records into a buffer queue.
    pub source: bool,
}

/// What placement needs to know about an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeShape {
    /// Producer node.
    pub from: usize,
    /// Consumer node.
    pub to: usize,
    /// Input port of the consumer (1: the second input of a co-operator).
    pub port: usize,
    /// Whether the partitioning is forward.
    pub forward: bool,
}

/// Chaining policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Chaining {
    /// Chain only when there are fewer cores than operator instances.
    #[default]
    Auto,
    /// Chain every chainable edge.
    Always,
    /// Never chain: every operator instance is its own task.
    Never,
}

/// One task: a chain of node instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskPlan {
    /// The node whose inputs drive the task.
    pub head: usize,
    /// The instance index shared by every member.
    pub instance: usize,
    /// Nodes in the task, head first, in graph order.
    pub members: Vec<usize>,
}

/// The outcome of placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Per edge: whether it is a direct call (true) or a ring.
    pub chained: Vec<bool>,
    /// Tasks in execution order.
    pub tasks: Vec<TaskPlan>,
    /// Per task: the worker that runs it.
    pub worker_of_task: Vec<usize>,
    /// Number of workers used (≤ cores).
    pub workers: usize,
    /// Per node: the head of the backed-up chain that holds it (`None`: it
    /// runs without a standby).
    pub backed: Vec<Option<usize>>,
    /// Marked nodes that can neither head a chain nor join the one their
    /// input comes from, with the reason (the runtime refuses the job).
    pub refused: Vec<(usize, &'static str)>,
    /// Per node: for the head of a backed-up chain, the source it replays
    /// as its queue (that source is chained into the head's task and runs
    /// inside the chain's incarnations).
    pub replays: Vec<Option<usize>>,
    /// Per node, per instance: its task (what [`Plan::task_of`] answers in
    /// constant time — wiring asks it for every lane, `p²` per keyed edge).
    task_index: Vec<Vec<usize>>,
}

impl Plan {
    /// The nodes of the backed-up chain headed by `head`, head first, in
    /// graph order (empty when `head` heads none).
    pub fn chain(&self, head: usize) -> Vec<usize> {
        (0..self.backed.len())
            .filter(|&n| self.backed[n] == Some(head))
            .collect()
    }

    /// The task that contains instance `instance` of `node`.
    pub fn task_of(&self, node: usize, instance: usize) -> Option<usize> {
        self.task_index.get(node)?.get(instance).copied()
    }
}

/// [`Plan::task_of`]'s index of `tasks`.
fn task_index(nodes: &[NodeShape], tasks: &[TaskPlan]) -> Vec<Vec<usize>> {
    let mut index: Vec<Vec<usize>> = nodes.iter().map(|n| vec![0; n.parallelism]).collect();
    for (i, t) in tasks.iter().enumerate() {
        for &m in &t.members {
            index[m][t.instance] = i;
        }
    }
    index
}

/// Whether an edge keeps records on the same instance.
fn same_instance(nodes: &[NodeShape], e: &EdgeShape) -> bool {
    let (a, b) = (&nodes[e.from], &nodes[e.to]);
    (e.forward && a.parallelism == b.parallelism) || (a.parallelism == 1 && b.parallelism == 1)
}

/// Whether an edge can be a direct call (between operators without a
/// standby; `backed_chains` decides the others).
pub fn chainable(nodes: &[NodeShape], e: &EdgeShape) -> bool {
    let b = &nodes[e.to];
    let only_input = !b.binary && b.inputs == 1;
    let first_of_two = b.binary && e.port == 0;
    same_instance(nodes, e) && (only_input || first_of_two)
}

/// Why an edge out of a backed-up chain cannot take its target into the
/// chain (`None`: it can).
fn cannot_join(nodes: &[NodeShape], e: &EdgeShape) -> Option<&'static str> {
    let b = &nodes[e.to];
    if b.sink {
        Some("a sink cannot join a backed-up chain")
    } else if b.binary || b.inputs != 1 {
        Some("an operator with two inputs cannot join a backed-up chain")
    } else if !same_instance(nodes, e) {
        Some("its input from the backed-up chain before it is repartitioned, so it cannot join that chain (back up one of the two)")
    } else {
        None
    }
}

/// The backed-up chains of a graph.
struct Chains {
    /// Per node: the head of the chain that holds it.
    backed: Vec<Option<usize>>,
    /// Per edge: inside a chain (a direct call).
    inside: Vec<bool>,
    /// Marked nodes that fit no chain, and why.
    refused: Vec<(usize, &'static str)>,
    /// Per head: the source it replays.
    replays: Vec<Option<usize>>,
}

/// Decides the backed-up chains (see the module docs). `chain` is the
/// policy's decision.
fn backed_chains(nodes: &[NodeShape], edges: &[EdgeShape], chain: bool) -> Chains {
    let mut backed: Vec<Option<usize>> = vec![None; nodes.len()];
    let mut inside = vec![false; edges.len()];
    let mut refused = Vec::new();
    // A marked operator after `n` that could not join `n`'s chain: it would
    // take its input from a chain (not supported), so `n` joins one only
    // when marked itself (and then that operator is refused).
    let strands = |n: usize| {
        edges
            .iter()
            .any(|e| e.from == n && nodes[e.to].standby && cannot_join(nodes, e).is_some())
    };
    // Nodes are in topological order: a node's inputs are decided first.
    for n in 0..nodes.len() {
        let ins: Vec<usize> = (0..edges.len()).filter(|&i| edges[i].to == n).collect();
        let from_chain = ins
            .iter()
            .find_map(|&i| backed[edges[i].from].map(|h| (i, h)));
        if let Some((i, head)) = from_chain {
            match cannot_join(nodes, &edges[i]) {
                None if (chain && !strands(n)) || nodes[n].standby => {
                    inside[i] = true;
                    backed[n] = Some(head);
                    continue;
                }
                None => {}
                Some(why) if nodes[n].standby => {
                    refused.push((n, why));
                    continue;
                }
                Some(_) => {}
            }
        }
        if nodes[n].standby {
            backed[n] = Some(n);
        }
    }
    // A head fed only by a replayable source instance of its own takes the
    // source in as its queue.
    let mut replays = vec![None; nodes.len()];
    for h in (0..nodes.len()).filter(|&h| backed[h] == Some(h)) {
        let ins: Vec<usize> = (0..edges.len()).filter(|&i| edges[i].to == h).collect();
        let [i] = ins[..] else { continue };
        let s = edges[i].from;
        let alone = edges.iter().filter(|e| e.from == s).count() == 1;
        if nodes[s].source && alone && same_instance(nodes, &edges[i]) {
            inside[i] = true;
            replays[h] = Some(s);
        }
    }
    Chains {
        backed,
        inside,
        refused,
        replays,
    }
}

/// Places a graph on `cores` workers. Nodes must be in topological order
/// (the builder guarantees it: a node's inputs exist before it).
pub fn place(nodes: &[NodeShape], edges: &[EdgeShape], cores: usize, chaining: Chaining) -> Plan {
    let cores = cores.max(1);
    let instances: usize = nodes.iter().map(|n| n.parallelism).sum();
    let chain = match chaining {
        Chaining::Auto => instances > cores,
        Chaining::Always => true,
        Chaining::Never => false,
    };
    let Chains {
        backed,
        inside,
        refused,
        replays,
    } = backed_chains(nodes, edges, chain);
    // Into a chain's head: its buffer queues; out of a chain: fenced rings.
    let mut chained: Vec<bool> = edges
        .iter()
        .zip(&inside)
        .map(|(e, &inside)| {
            inside
                || (chain
                    && backed[e.from].is_none()
                    && backed[e.to].is_none()
                    && chainable(nodes, e))
        })
        .collect();
    let mut tasks = form_tasks(nodes, edges, &chained);
    if has_cycle(nodes, edges, &chained, &tasks) {
        // Chaining a co-operator's first input put a ring from a task back
        // into itself (directly, or through another instance): a full ring
        // would then stall the task that must drain it. Without that kind
        // of chaining every non-head member has its only input inside its
        // task, so the task graph follows the node order and is acyclic.
        for (c, e) in chained.iter_mut().zip(edges) {
            if nodes[e.to].binary {
                *c = false;
            }
        }
        tasks = form_tasks(nodes, edges, &chained);
    }
    let workers = cores.min(tasks.len()).max(1);
    let t = tasks.len().max(1);
    let worker_of_task = (0..tasks.len()).map(|j| j * workers / t).collect();
    Plan {
        chained,
        backed,
        refused,
        replays,
        task_index: task_index(nodes, &tasks),
        tasks,
        worker_of_task,
        workers,
    }
}

/// Groups node instances into tasks: a head (a node whose input is not
/// chained) and everything reachable from it through chained edges.
fn form_tasks(nodes: &[NodeShape], edges: &[EdgeShape], chained: &[bool]) -> Vec<TaskPlan> {
    let mut chained_into = vec![false; nodes.len()];
    for (e, &c) in edges.iter().zip(chained) {
        if c {
            chained_into[e.to] = true;
        }
    }
    let max_p = nodes.iter().map(|n| n.parallelism).max().unwrap_or(0);
    let mut tasks = Vec::new();
    for instance in 0..max_p {
        for (head, n) in nodes.iter().enumerate() {
            if chained_into[head] || instance >= n.parallelism {
                continue;
            }
            let mut members = vec![head];
            let mut i = 0;
            while i < members.len() {
                let at = members[i];
                for (e, &c) in edges.iter().zip(chained) {
                    if c && e.from == at {
                        members.push(e.to);
                    }
                }
                i += 1;
            }
            members[1..].sort_unstable();
            tasks.push(TaskPlan {
                head,
                instance,
                members,
            });
        }
    }
    tasks
}

/// Whether the rings between tasks form a cycle.
fn has_cycle(
    nodes: &[NodeShape],
    edges: &[EdgeShape],
    chained: &[bool],
    tasks: &[TaskPlan],
) -> bool {
    let index = task_index(nodes, tasks);
    let task_of = |node: usize, instance: usize| index[node][instance];
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); tasks.len()];
    for (e, &c) in edges.iter().zip(chained) {
        if c {
            continue;
        }
        let (pf, pt) = (nodes[e.from].parallelism, nodes[e.to].parallelism);
        for u in 0..pf {
            for d in 0..pt {
                if e.forward && pf == pt && u != d {
                    continue;
                }
                succ[task_of(e.from, u)].push(task_of(e.to, d));
            }
        }
    }
    // Iterative three-colour DFS.
    let mut colour = vec![0u8; tasks.len()]; // 0 new, 1 on stack, 2 done
    for start in 0..tasks.len() {
        if colour[start] != 0 {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        colour[start] = 1;
        while let Some((t, i)) = stack.pop() {
            if let Some(&next) = succ[t].get(i) {
                stack.push((t, i + 1));
                match colour[next] {
                    0 => {
                        colour[next] = 1;
                        stack.push((next, 0));
                    }
                    1 => return true,
                    _ => {}
                }
            } else {
                colour[t] = 2;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(parallelism: usize, inputs: usize) -> NodeShape {
        NodeShape {
            parallelism,
            inputs,
            binary: false,
            standby: false,
            sink: false,
            source: false,
        }
    }
    /// A co-operator of parallelism `p`.
    fn co(p: usize) -> NodeShape {
        NodeShape {
            binary: true,
            ..n(p, 2)
        }
    }
    /// The edge into a co-operator's second input.
    fn side(from: usize, to: usize, forward: bool) -> EdgeShape {
        EdgeShape {
            port: 1,
            ..e(from, to, forward)
        }
    }
    fn e(from: usize, to: usize, forward: bool) -> EdgeShape {
        EdgeShape {
            from,
            to,
            port: 0,
            forward,
        }
    }

    /// source(p) → map(p) → [hash] → reduce(p) → sink(p)
    fn pipeline(p: usize) -> (Vec<NodeShape>, Vec<EdgeShape>) {
        (
            vec![n(p, 0), n(p, 1), n(p, 1), n(p, 1)],
            vec![e(0, 1, true), e(1, 2, false), e(2, 3, true)],
        )
    }

    #[test]
    fn enough_cores_means_one_instance_per_worker_and_no_chaining() {
        let (nodes, edges) = pipeline(2);
        let plan = place(&nodes, &edges, 8, Chaining::Auto);
        assert_eq!(plan.chained, vec![false; 3]);
        assert_eq!(plan.tasks.len(), 8);
        assert_eq!(plan.workers, 8);
        let mut w = plan.worker_of_task.clone();
        w.dedup();
        assert_eq!(w.len(), 8, "every task has its own worker");
    }

    #[test]
    fn few_cores_chain_forward_edges_but_never_hash_edges() {
        let (nodes, edges) = pipeline(2);
        let plan = place(&nodes, &edges, 2, Chaining::Auto);
        assert_eq!(plan.chained, vec![true, false, true]);
        assert_eq!(plan.tasks.len(), 4);
        assert_eq!(plan.tasks[0].members, vec![0, 1]);
        assert_eq!(plan.tasks[1].members, vec![2, 3]);
        // Instance 0's tasks on worker 0, instance 1's on worker 1.
        assert_eq!(plan.worker_of_task, vec![0, 0, 1, 1]);
    }

    #[test]
    fn one_core_runs_every_task_on_worker_zero() {
        let (nodes, edges) = pipeline(3);
        let plan = place(&nodes, &edges, 1, Chaining::Auto);
        assert_eq!(plan.workers, 1);
        assert!(plan.worker_of_task.iter().all(|&w| w == 0));
        // every node instance is in exactly one task
        for node in 0..4 {
            for inst in 0..3 {
                let c = plan
                    .tasks
                    .iter()
                    .filter(|t| t.instance == inst && t.members.contains(&node))
                    .count();
                assert_eq!(c, 1, "node {node} instance {inst}");
            }
        }
    }

    #[test]
    fn parallelism_one_chains_even_across_a_hash_edge() {
        let (nodes, edges) = pipeline(1);
        let plan = place(&nodes, &edges, 1, Chaining::Auto);
        assert_eq!(plan.chained, vec![true, true, true]);
        assert_eq!(plan.tasks.len(), 1);
        assert_eq!(plan.tasks[0].members, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_two_input_operator_chains_its_first_input_only() {
        // s0 → co ← s1 (side), co → sink
        let nodes = vec![n(1, 0), n(1, 0), co(1), n(1, 1)];
        let side = side(1, 2, true);
        let edges = vec![e(0, 2, true), side, e(2, 3, true)];
        let plan = place(&nodes, &edges, 1, Chaining::Always);
        assert_eq!(plan.chained, vec![true, false, true]);
        assert_eq!(plan.task_of(0, 0), plan.task_of(2, 0));
        assert_eq!(plan.task_of(2, 0), plan.task_of(3, 0));
        assert_ne!(plan.task_of(1, 0), plan.task_of(2, 0));
    }

    /// src feeds both inputs of a co-operator (a diamond): chaining its
    /// first input would make src's task feed a ring back into itself.
    #[test]
    fn a_diamond_into_a_co_operator_is_not_chained_into_a_cycle() {
        for p in [1, 2] {
            let nodes = vec![n(p, 0), n(p, 1), n(p, 1), co(p)];
            let side = side(2, 3, false);
            let edges = vec![e(0, 1, true), e(0, 2, true), e(1, 3, true), side];
            let plan = place(&nodes, &edges, 1, Chaining::Always);
            assert!(
                !plan.chained[2],
                "p={p}: the co-operator heads its own task"
            );
            assert!(!has_cycle(&nodes, &edges, &plan.chained, &plan.tasks));
        }
    }

    #[test]
    fn mismatched_parallelism_is_never_chained() {
        let nodes = vec![n(2, 0), n(1, 1)];
        let edges = [e(0, 1, true)];
        assert!(!chainable(&nodes, &edges[0]));
    }

    #[test]
    fn never_chaining_gives_one_task_per_instance_even_on_one_core() {
        let (nodes, edges) = pipeline(2);
        let plan = place(&nodes, &edges, 1, Chaining::Never);
        assert_eq!(plan.tasks.len(), 8);
        assert_eq!(plan.workers, 1);
    }

    #[test]
    fn more_cores_than_tasks_uses_only_as_many_workers_as_tasks() {
        let (nodes, edges) = pipeline(1);
        let plan = place(&nodes, &edges, 16, Chaining::Always);
        assert_eq!(plan.workers, 1);
    }

    fn marked(mut n: NodeShape) -> NodeShape {
        n.standby = true;
        n
    }

    /// source → a (marked) → b → sink, all with parallelism `p`.
    fn backed_line(p: usize, b_marked: bool) -> (Vec<NodeShape>, Vec<EdgeShape>) {
        let b = if b_marked { marked(n(p, 1)) } else { n(p, 1) };
        let sink = NodeShape {
            sink: true,
            ..n(p, 1)
        };
        (
            vec![n(p, 0), marked(n(p, 1)), b, sink],
            vec![e(0, 1, true), e(1, 2, true), e(2, 3, true)],
        )
    }

    #[test]
    fn a_backed_up_chain_takes_the_one_input_operators_after_its_head_but_not_the_sink() {
        let (nodes, edges) = backed_line(2, false);
        let plan = place(&nodes, &edges, 2, Chaining::Auto);
        assert_eq!(plan.backed, vec![None, Some(1), Some(1), None]);
        assert_eq!(plan.chain(1), vec![1, 2]);
        assert!(plan.chain(2).is_empty());
        // Into the head: its queues; inside: a call; out: fenced rings.
        assert_eq!(plan.chained, vec![false, true, false]);
        assert_eq!(plan.task_of(1, 0), plan.task_of(2, 0));
        assert!(plan.refused.is_empty());
    }

    #[test]
    fn without_chaining_a_backed_up_chain_is_its_head_alone() {
        let (nodes, edges) = backed_line(1, false);
        for (cores, policy) in [(8, Chaining::Auto), (1, Chaining::Never)] {
            let plan = place(&nodes, &edges, cores, policy);
            assert_eq!(plan.backed, vec![None, Some(1), None, None], "{policy:?}");
            assert_eq!(plan.chained, vec![false; 3], "{policy:?}");
        }
    }

    #[test]
    fn two_adjacent_marked_operators_share_one_chain_whatever_the_policy() {
        let (nodes, edges) = backed_line(2, true);
        for (cores, policy) in [
            (8, Chaining::Auto),
            (1, Chaining::Never),
            (1, Chaining::Always),
        ] {
            let plan = place(&nodes, &edges, cores, policy);
            assert_eq!(
                plan.backed,
                vec![None, Some(1), Some(1), None],
                "{policy:?}"
            );
            assert!(plan.chained[1], "{policy:?}");
            assert!(plan.refused.is_empty(), "{policy:?}");
        }
    }

    #[test]
    fn a_marked_operator_behind_a_repartition_of_a_backed_up_chain_is_refused() {
        let (nodes, mut edges) = backed_line(2, true);
        edges[1].forward = false;
        let plan = place(&nodes, &edges, 2, Chaining::Always);
        assert_eq!(plan.refused.len(), 1);
        assert_eq!(plan.refused[0].0, 2);
        assert_eq!(plan.backed[2], None);
        // Unmarked, it simply runs after the chain's fenced ring.
        let (nodes, mut edges) = backed_line(2, false);
        edges[1].forward = false;
        let plan = place(&nodes, &edges, 2, Chaining::Always);
        assert!(plan.refused.is_empty());
        assert_eq!(plan.backed, vec![None, Some(1), None, None]);
        assert!(!plan.chained[1]);
    }

    #[test]
    fn an_operator_stays_out_of_a_chain_when_a_marked_one_after_it_could_not_join() {
        // source → a (marked) → b → [hash] → c (marked): b in a's chain
        // would feed c's queues from a chain.
        let (mut nodes, mut edges) = backed_line(2, false);
        nodes[3] = marked(n(2, 1));
        edges[2].forward = false;
        let plan = place(&nodes, &edges, 2, Chaining::Always);
        assert_eq!(plan.backed, vec![None, Some(1), None, Some(3)]);
        assert!(plan.refused.is_empty());
        assert!(!plan.chained[1] && !plan.chained[2]);
    }

    #[test]
    fn a_co_operator_never_joins_a_backed_up_chain() {
        // s0 → a (marked) → co ← s1
        let nodes = vec![n(1, 0), marked(n(1, 1)), n(1, 0), co(1)];
        let side = side(2, 3, true);
        let edges = vec![e(0, 1, true), e(1, 3, true), side];
        let plan = place(&nodes, &edges, 1, Chaining::Always);
        assert_eq!(plan.backed, vec![None, Some(1), None, None]);
        assert_eq!(plan.chained, vec![false, false, false]);
    }

    fn replayable(mut n: NodeShape) -> NodeShape {
        n.source = true;
        n
    }

    #[test]
    fn a_chain_fed_by_a_replayable_source_takes_the_source_in_as_its_queue() {
        let (mut nodes, edges) = backed_line(2, false);
        nodes[0] = replayable(nodes[0]);
        for (cores, policy) in [
            (2, Chaining::Auto),
            (8, Chaining::Auto),
            (1, Chaining::Never),
        ] {
            let plan = place(&nodes, &edges, cores, policy);
            assert_eq!(plan.replays, vec![None, Some(0), None, None], "{policy:?}");
            assert!(
                plan.chained[0],
                "{policy:?}: the source is called, not queued"
            );
            // Not a member of the chain the standby snapshots: its state
            // is the chain's position.
            assert_eq!(plan.backed[0], None, "{policy:?}");
            assert_eq!(plan.task_of(0, 1), plan.task_of(1, 1), "{policy:?}");
            let t = &plan.tasks[plan.task_of(1, 1).unwrap()];
            assert_eq!(t.head, 0, "{policy:?}: the task starts at the source");
        }
    }

    #[test]
    fn a_source_that_feeds_more_or_is_repartitioned_stays_a_queue_writer() {
        // Repartitioned into the head.
        let (mut nodes, mut edges) = backed_line(2, false);
        nodes[0] = replayable(nodes[0]);
        edges[0].forward = false;
        let plan = place(&nodes, &edges, 2, Chaining::Always);
        assert_eq!(plan.replays, vec![None; 4]);
        assert!(!plan.chained[0]);
        // A second consumer of the source.
        let (mut nodes, mut edges) = backed_line(2, false);
        nodes[0] = replayable(nodes[0]);
        edges.push(e(0, 3, true));
        nodes[3].inputs = 2;
        let plan = place(&nodes, &edges, 2, Chaining::Always);
        assert_eq!(plan.replays, vec![None; 4]);
        // Not replayable (the runtime's choice).
        let (nodes, edges) = backed_line(2, false);
        let plan = place(&nodes, &edges, 2, Chaining::Always);
        assert_eq!(plan.replays, vec![None; 4]);
    }
}

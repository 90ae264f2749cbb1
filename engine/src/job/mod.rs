//! The builder users embed: sources, operators, sinks.
//!
//! A job is a DAG built through typed handles. [`JobBuilder::source`] gives a
//! [`Stream`]; operators on a stream give new streams; a sink ends one. A
//! stream may feed several operators (each gets every record). Mistakes that
//! can only be seen once the whole graph is known (a duplicate name, a zero
//! parallelism) are collected and returned by [`JobBuilder::build`], so
//! building never panics.
//!
//! ```
//! use tandem::{IterSource, JobBuilder, RuntimeConfig};
//! use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
//!
//! let job = JobBuilder::new("squares");
//! let sum = Arc::new(AtomicU64::new(0));
//! let s = Arc::clone(&sum);
//! job.source("numbers", |_info| IterSource((0..1000u64).map(|n| (n, n))))
//!     .map("square", |n: u64| n * n)
//!     .filter("even", |n: &u64| n % 2 == 0)
//!     .for_each("sum", move |r| { s.fetch_add(r.value, Ordering::Relaxed); });
//! let report = job.build().unwrap().run(&RuntimeConfig::default().cores(1)).unwrap();
//! assert_eq!(report.operator("sum").unwrap().records, 500);
//! assert_eq!(sum.load(Ordering::Relaxed), (0..1000u64).map(|n| n * n).filter(|n| n % 2 == 0).sum::<u64>());
//! ```

pub use crate::operator::source;
use crate::runtime::graph;

mod co;
mod join;
mod keyed;
pub mod side;
mod stream;
mod union;
mod window;
pub use co::{KeyedConnected, KeyedStandbyConnected};
pub use join::{IntervalJoin, Sides, WindowJoin};
pub use keyed::KeyedStream;
pub use side::{OutputTag, SideRecord, Sided};
pub use stream::{key_hash, key_instance, Connected, SinkHandle, Stream};
pub use union::{StandbyConnected, Two};
pub use window::{WindowOutput, WindowedStream};

use crate::error::{BuildError, JobError};
use crate::metrics::JobReport;
use crate::operator::{Collector, OperatorInfo};
use crate::runtime::source::{Pacer, SourcePort};
use crate::runtime::{JobHandle, RuntimeConfig};
use crate::standby::codec::Codec;
use graph::{downcast, AnyBox, BuildCx, Edge, Graph, Node, NodeKind, Partitioning};
use source::Source;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

/// What may flow on a stream: owned, clonable (for fan-out and broadcast)
/// and sendable across cores.
pub trait Data: Clone + Send + 'static {}
impl<T: Clone + Send + 'static> Data for T {}

struct Inner {
    name: String,
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    errors: Vec<BuildError>,
    /// The default parallelism ([`JobBuilder::default_parallelism`]).
    parallelism: usize,
    /// Each node's parallelism as asked for, resolved when the job is
    /// built: whenever the default is set, it is every operator's that has
    /// none of its own.
    par: Vec<Par>,
    /// Operators that work in event time: their sources need watermarks.
    event_time: Vec<usize>,
    codecs: crate::runtime::graph::Codecs,
    /// The main and side streams split off so far, by name: the node and
    /// its element type (asking for one again gives the same stream).
    splits: HashMap<String, (usize, std::any::TypeId)>,
}

impl Inner {
    fn new(name: String) -> Self {
        Inner {
            name,
            nodes: Vec::new(),
            edges: Vec::new(),
            errors: Vec::new(),
            parallelism: 1,
            par: Vec::new(),
            event_time: Vec::new(),
            codecs: Default::default(),
            splits: HashMap::new(),
        }
    }
}

/// A node's parallelism as the builder was told it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Par {
    /// The job's default, as it is when the job is built.
    Default,
    /// Its own ([`Stream::parallelism`]).
    Fixed(usize),
    /// The same as another node's (a pass-through on its instances).
    Like(usize),
}

/// Each node's parallelism from `par` and the job's `default`.
fn resolve_parallelism(par: &[Par], default: usize) -> Vec<usize> {
    fn of(par: &[Par], default: usize, n: usize, depth: usize) -> usize {
        match par[n] {
            Par::Default => default,
            Par::Fixed(p) => p,
            // A `Like` names an earlier node: the chain ends.
            Par::Like(m) if depth < par.len() => of(par, default, m, depth + 1),
            Par::Like(_) => default,
        }
    }
    (0..par.len()).map(|n| of(par, default, n, 0)).collect()
}

/// The first source upstream of `node` without watermarks, if any.
fn source_without_watermarks(nodes: &[Node], edges: &[Edge], node: usize) -> Option<usize> {
    let mut stack = vec![node];
    let mut seen = HashSet::new();
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        if let NodeKind::Source { watermarks, .. } = &nodes[n].kind {
            if watermarks.is_none() {
                return Some(n);
            }
        }
        stack.extend(edges.iter().filter(|e| e.to == n).map(|e| e.from));
    }
    None
}

/// Builds a job. See the [module docs](self).
pub struct JobBuilder {
    inner: Rc<RefCell<Inner>>,
}

/// A built, validated job, ready to run.
pub struct Job {
    pub(crate) graph: Arc<Graph>,
}

impl Job {
    /// The job's name.
    pub fn name(&self) -> &str {
        &self.graph.name
    }

    /// Operator names, in the order they were added.
    pub fn operators(&self) -> Vec<String> {
        self.graph
            .nodes
            .iter()
            .map(|n| n.name.to_string())
            .collect()
    }

    /// Runs the job to completion on this thread's behalf.
    ///
    /// ```
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("squares");
    /// job.source("n", |_| IterSource((0..1000u64).map(|n| (n, n))))
    ///     .map("square", |n: u64| n * n)
    ///     .for_each("out", |_| {});
    /// let report = job.build()?.run(&RuntimeConfig::default().cores(1))?;
    /// assert_eq!(report.operator("out").unwrap().records, 1000);
    /// assert!(report.recovery.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run(self, config: &RuntimeConfig) -> Result<JobReport, JobError> {
        self.start(config)?.join()
    }

    /// Starts the job on worker threads and returns at once.
    ///
    /// Errors that can be known before any record flows are returned here:
    /// too few cores, an unusable checkpoint directory, a checkpoint to
    /// restore from that is corrupt or does not fit the job, a worker
    /// thread that cannot be spawned.
    ///
    /// Operators marked for a standby ([`Stream::standby`]) run without
    /// one when `config` has no [`crate::StandbyConfig`]: this prints one
    /// `warning:` line on standard error naming them
    /// ([`Job::standby_warning`]).
    ///
    /// In a child started for process isolation
    /// ([`crate::Isolation::Process`]), `start` never returns: the child
    /// serves its incarnation and exits. Such a child runs `main` again up
    /// to here, so what `main` does before starting the job it does in
    /// every child too; [`crate::is_incarnation_process`] tells it apart.
    ///
    /// ```
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("watched");
    /// job.source("n", |_| IterSource((0..100_000u64).map(|n| (n, n))))
    ///     .for_each("out", |_| {});
    /// let handle = job.build()?.start(&RuntimeConfig::default().cores(1))?;
    /// // While it runs: counts, latency, checkpoints and recoveries so far.
    /// let _seen = handle.progress().operator("out").map_or(0, |o| o.records);
    /// let _restarts = handle.status().restarts;
    /// let report = handle.join()?;
    /// assert_eq!(report.operator("out").unwrap().records, 100_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start(self, config: &RuntimeConfig) -> Result<JobHandle, JobError> {
        if let Some(role) = crate::runtime::standby::remote::child::role() {
            crate::runtime::standby::remote::child::run(
                &self.graph,
                role,
                crate::runtime::standby::kit::child_chain,
            );
        }
        if let Some(w) = self.standby_warning(config) {
            eprintln!("{w}");
        }
        crate::runtime::start(self.graph, config)
    }

    /// Checks, without starting anything, what [`start`](Self::start)
    /// refuses before any record flows: too few cores, and a restore point
    /// ([`RuntimeConfig::restore_from`]) that is missing, damaged,
    /// ambiguous, of another job, of the other state backend, or one this
    /// job cannot restore faithfully — every file mapped and verified.
    /// Returns the point a start would restore (`None`: none is asked
    /// for). A program that prepares its input before it starts the job
    /// asks here first, so that a start that is bound to be refused wastes
    /// no work.
    pub fn check_start(
        &self,
        config: &RuntimeConfig,
    ) -> Result<Option<crate::metrics::RestorePoint>, JobError> {
        crate::runtime::check_start(std::sync::Arc::clone(&self.graph), config)
    }

    /// The job's failover regions: the sets of operator instances that
    /// exchange records with one another, directly or not (Flink's
    /// pipelined regions), each as `(operator, instance)` pairs in the
    /// order the operators were added. Instances joined only by forward
    /// edges form a region per instance; an all-to-all exchange (`key_by`,
    /// `rebalance`, `broadcast`) joins every instance on both sides. No
    /// record crosses between regions.
    ///
    /// ```
    /// use tandem::{IterSource, JobBuilder};
    ///
    /// // Two independent forward pipelines, then the same with a keyBy.
    /// let job = JobBuilder::new("pipelines");
    /// job.default_parallelism(2);
    /// job.source("numbers", |_| IterSource((0..10u64).map(|n| (n, n))))
    ///     .map("double", |n: u64| n * 2)
    ///     .for_each("drop", |_| {});
    /// assert_eq!(job.build().unwrap().regions().len(), 2);
    ///
    /// let job = JobBuilder::new("shuffled");
    /// job.default_parallelism(2);
    /// job.source("numbers", |_| IterSource((0..10u64).map(|n| (n, n))))
    ///     .key_by(|n: &u64| *n)
    ///     .reduce("sum", |a: &u64, b: &u64| a + b)
    ///     .for_each("drop", |_| {});
    /// assert_eq!(job.build().unwrap().regions().len(), 1);
    /// ```
    pub fn regions(&self) -> Vec<Vec<(String, usize)>> {
        self.graph
            .regions()
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .map(|(n, i)| (self.graph.nodes[n].name.to_string(), i))
                    .collect()
            })
            .collect()
    }

    /// The operators marked for a standby ([`Stream::standby`], or a
    /// connection's `.standby()`), in the order they were added.
    pub fn standby_operators(&self) -> Vec<String> {
        self.graph
            .nodes
            .iter()
            .filter(|n| n.standby.is_some())
            .map(|n| n.name.to_string())
            .collect()
    }

    /// The warning [`Job::start`] prints when operators are marked for a
    /// standby and `config` has no [`crate::StandbyConfig`] (`None`:
    /// nothing to say).
    pub fn standby_warning(&self, config: &RuntimeConfig) -> Option<String> {
        if config.standby.is_some() {
            return None;
        }
        let marked = self.standby_operators();
        if marked.is_empty() {
            return None;
        }
        let names = marked
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        Some(format!(
            "warning: job `{}`: {names} {} marked with `.standby()`, but the RuntimeConfig \
             has no StandbyConfig: {} without a standby (give it one with \
             `RuntimeConfig::standby`)",
            self.graph.name,
            if marked.len() == 1 { "is" } else { "are" },
            if marked.len() == 1 {
                "it runs"
            } else {
                "they run"
            },
        ))
    }
}

type BoxCollector<T> = Box<dyn Collector<T>>;

impl JobBuilder {
    /// A new, empty job. Operators get parallelism 1 unless told otherwise.
    pub fn new(name: impl Into<String>) -> Self {
        JobBuilder {
            inner: Rc::new(RefCell::new(Inner::new(name.into()))),
        }
    }

    /// Makes `T`'s [`Codec`] known to the job: under process isolation
    /// ([`crate::StandbyConfig::isolation`]) the output of a backed-up
    /// chain crosses from its child process to the driver encoded, so its
    /// type needs one. The input of every `.standby()` stream is known
    /// already.
    pub fn codec<T: Data + Codec>(&self) -> &Self {
        self.inner
            .borrow_mut()
            .codecs
            .extend([crate::runtime::standby::entry::CodecFns::<T>::entry()]);
        self
    }

    /// Sets the parallelism of every source, operator and sink that has
    /// none of its own ([`Stream::parallelism`], [`SinkHandle::parallelism`])
    /// — those added before the call as well as after: the value when the
    /// job is built counts (Flink's `setParallelism` on the environment).
    /// Default: 1.
    pub fn default_parallelism(&self, p: usize) -> &Self {
        let mut inner = self.inner.borrow_mut();
        if p == 0 {
            inner.errors.push(BuildError::ZeroParallelism {
                name: "<default>".into(),
            });
        } else {
            inner.parallelism = p;
        }
        self
    }

    /// Adds a source. `factory` builds the instance of each partition on the
    /// worker that runs it.
    pub fn source<T, S, F>(&self, name: &str, factory: F) -> Stream<T>
    where
        T: Data,
        S: Source<T>,
        F: Fn(&OperatorInfo) -> S + Send + Sync + 'static,
    {
        let factory = Arc::new(factory);
        let f = Arc::clone(&factory);
        let open: graph::SourceOpen = Arc::new(move |info: &OperatorInfo| -> AnyBox {
            let src: Box<dyn Source<T>> = Box::new(f(info));
            Box::new(src)
        });
        let build: graph::SourceBuild = Arc::new(
            move |cx: BuildCx, down: AnyBox, rate, gate, watermarks, first| {
                let src: Box<dyn Source<T>> = Box::new(factory(&cx.info));
                let down = downcast::<BoxCollector<T>>(down, "source output");
                let per_partition = rate.map(|r: f64| {
                    Pacer::new(
                        r / cx.info.parallelism as f64,
                        Arc::clone(&cx.ctx.shared.pacing_start),
                    )
                });
                Box::new(SourcePort::new(
                    src,
                    down,
                    per_partition,
                    gate,
                    watermarks,
                    first,
                    cx,
                ))
            },
        );
        let node = add_node(
            &self.inner,
            name,
            NodeKind::Source {
                build,
                open,
                rate: None,
                watermarks: None,
                first_partition: 0,
            },
            Some(out_kits::<T>()),
            &[],
        );
        Stream::new(Rc::clone(&self.inner), node)
    }

    /// Validates the graph and returns the job.
    pub fn build(self) -> Result<Job, BuildError> {
        // Streams may outlive the builder; they keep an emptied graph.
        let inner = std::mem::replace(&mut *self.inner.borrow_mut(), Inner::new(String::new()));
        let Inner {
            name,
            mut nodes,
            edges,
            mut errors,
            event_time,
            codecs,
            parallelism,
            par,
            ..
        } = inner;
        if !errors.is_empty() {
            return Err(errors.swap_remove(0));
        }
        for (n, p) in nodes.iter_mut().zip(resolve_parallelism(&par, parallelism)) {
            n.parallelism = p;
        }
        for &n in &event_time {
            // Its windows, timers and waiting records are kept per key.
            nodes[n].rescale = crate::runtime::graph::Rescale::Keyed;
            if let Some(s) = source_without_watermarks(&nodes, &edges, n) {
                return Err(BuildError::Window {
                    name: nodes[n].name.to_string(),
                    reason: format!(
                        "it works in event time, and source `{}` has no watermarks (give it \
                         some with `Stream::watermarks`)",
                        nodes[s].name
                    ),
                });
            }
        }
        if !nodes
            .iter()
            .any(|n| matches!(n.kind, NodeKind::Source { .. }))
        {
            return Err(BuildError::NoSource);
        }
        let mut seen = HashSet::new();
        for n in &nodes {
            if !seen.insert(n.name.clone()) {
                return Err(BuildError::DuplicateName {
                    name: n.name.to_string(),
                });
            }
            if n.parallelism == 0 {
                return Err(BuildError::ZeroParallelism {
                    name: n.name.to_string(),
                });
            }
        }
        // Source partitions are numbered across the job's sources (tuple
        // IDs name the partition in 24 bits).
        let mut next: usize = 0;
        for n in &mut nodes {
            if let NodeKind::Source {
                first_partition, ..
            } = &mut n.kind
            {
                let max = (1usize << 24) - next;
                if n.parallelism > max {
                    return Err(BuildError::ParallelismTooLarge {
                        name: n.name.to_string(),
                        parallelism: n.parallelism,
                        max,
                    });
                }
                *first_partition = next as u32;
                next += n.parallelism;
            }
        }
        let graph = Graph {
            name,
            nodes,
            edges,
            codecs,
            pinned: Vec::new(),
        };
        refuse_stranded_standbys(&graph)?;
        Ok(Job {
            graph: Arc::new(graph),
        })
    }
}

/// A marked operator that can neither head a backed-up chain nor join the
/// one its input comes from (behind a repartition of a backed-up chain) is
/// refused here, not first at `run()`. Which operators are refused does
/// not depend on the chaining policy or the core count (placement's
/// `backed_chains`), so any placement answers.
fn refuse_stranded_standbys(graph: &Graph) -> Result<(), BuildError> {
    if graph.nodes.iter().all(|n| n.standby.is_none()) {
        return Ok(());
    }
    let (nodes, edges) = crate::runtime::wiring::shapes(graph, true, false);
    let plan = crate::runtime::placement::place(
        &nodes,
        &edges,
        1,
        crate::runtime::placement::Chaining::Never,
    );
    if let Some(&(n, why)) = plan.refused.first() {
        return Err(BuildError::Standby {
            name: graph.nodes[n].name.to_string(),
            reason: why.to_string(),
        });
    }
    // A union — and a join or keyed connection, a union of its two tagged
    // inputs — reads all its lanes through one port: plain rings, or
    // backed-up chains' primaries, not both. Whether an unmarked operator
    // joins the chain before it depends on the chaining (and, with
    // `Chaining::Auto`, on the cores): refused here when mixed either way;
    // `run()` refuses what is mixed only with the chaining it runs with.
    let always = crate::runtime::placement::place(
        &nodes,
        &edges,
        1,
        crate::runtime::placement::Chaining::Always,
    );
    match (mixed_union(graph, &plan), mixed_union(graph, &always)) {
        (Some(e), Some(_)) => Err(e),
        _ => Ok(()),
    }
}

/// The first union of `graph` whose inputs `plan` backs up in part.
fn mixed_union(graph: &Graph, plan: &crate::runtime::placement::Plan) -> Option<BuildError> {
    for (n, node) in graph.nodes.iter().enumerate() {
        if !matches!(node.kind, crate::runtime::graph::NodeKind::Unary(_)) {
            continue;
        }
        let ins: Vec<(usize, bool)> = graph
            .edges
            .iter()
            .filter(|e| e.to == n)
            .map(|e| (e.from, plan.backed[e.from].is_some()))
            .collect();
        if let (Some(b), Some(p)) = (ins.iter().find(|i| i.1), ins.iter().find(|i| !i.1)) {
            return Some(BuildError::Standby {
                name: node.name.to_string(),
                reason: format!(
                    "its inputs come from `{}`, backed up, and from `{}`, without a standby: \
                     mark both (or the operator itself, on the connection: \
                     `a.connect(&b).standby()`, `interval_join(..).standby()`), or neither",
                    graph.nodes[b.0].name, graph.nodes[p.0].name
                ),
            });
        }
    }
    None
}

/// The kits of a stream of `T`: the core's (rings, senders, inputs) and
/// the standby's (a consumer's fenced input, a child's chain ends).
pub(crate) struct OutKits {
    core: Arc<dyn graph::StreamKit>,
    standby: graph::RoleKit,
}

/// The kits of a node's output stream of `T`.
pub(crate) fn out_kits<T: Data>() -> OutKits {
    OutKits {
        core: crate::runtime::kit::Kit::<T>::arc(),
        standby: crate::runtime::standby::kit::stream_roles::<T>(),
    }
}

fn add_node(
    inner: &Rc<RefCell<Inner>>,
    name: &str,
    kind: NodeKind,
    out: Option<OutKits>,
    inputs: &[(usize, Partitioning)],
) -> usize {
    add_node_with(inner, name, kind, out, inputs, None)
}

fn add_node_with(
    inner: &Rc<RefCell<Inner>>,
    name: &str,
    kind: NodeKind,
    out: Option<OutKits>,
    inputs: &[(usize, Partitioning)],
    standby: Option<crate::runtime::graph::RoleKit>,
) -> usize {
    let mut g = inner.borrow_mut();
    let id = g.nodes.len();
    g.par.push(Par::Default);
    g.nodes.push(Node {
        name: Arc::from(name),
        // Resolved when the job is built (`Inner::par`).
        parallelism: 0,
        kind,
        out_role: out.as_ref().map(|o| Arc::clone(&o.standby)),
        out: out.map(|o| o.core),
        standby,
        rescale: crate::runtime::graph::Rescale::Refuse(crate::runtime::graph::OWN_STATE),
        in_backend: false,
    });
    for (port, (from, p)) in inputs.iter().enumerate() {
        g.edges.push(Edge {
            from: *from,
            to: id,
            port,
            partitioning: p.clone(),
        });
    }
    id
}

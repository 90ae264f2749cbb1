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
mod union;
mod window;
pub use co::{KeyedConnected, KeyedStandbyConnected};
pub use join::{IntervalJoin, Sides, WindowJoin};
pub use keyed::KeyedStream;
pub use union::{StandbyConnected, Two};
pub use window::{WindowOutput, WindowedStream};

use crate::error::{BuildError, JobError};
use crate::metrics::JobReport;
use crate::operator::{
    CoProcess, Collector, Filter, FlatMap, Map, OperatorInfo, Output, Process, Sink,
};
use crate::record::Record;
use crate::runtime::chain::{build_co_ports, ProcessOp, SinkOp};
use crate::runtime::source::{Pacer, SourcePort};
use crate::runtime::standby::kit::SKit;
use crate::runtime::{JobHandle, RuntimeConfig};
use crate::standby::codec::Codec;
use graph::{downcast, AnyBox, BuildCx, Edge, Graph, HashFn, Node, NodeKind, Partitioning};
use source::Source;
use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
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
    parallelism: usize,
    /// Operators that work in event time: their sources need watermarks.
    event_time: Vec<usize>,
    codecs: crate::runtime::graph::Codecs,
}

impl Inner {
    fn new(name: String) -> Self {
        Inner {
            name,
            nodes: Vec::new(),
            edges: Vec::new(),
            errors: Vec::new(),
            parallelism: 1,
            event_time: Vec::new(),
            codecs: Default::default(),
        }
    }
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
    pub fn start(self, config: &RuntimeConfig) -> Result<JobHandle, JobError> {
        if let Some(role) = crate::runtime::standby::remote::child::role() {
            crate::runtime::standby::remote::child::run(&self.graph, role);
        }
        if let Some(w) = self.standby_warning(config) {
            eprintln!("{w}");
        }
        crate::runtime::start(self.graph, config)
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
            .extend([crate::runtime::standby::kit::CodecFns::<T>::entry()]);
        self
    }

    /// Sets the parallelism of operators added from now on (each can still
    /// override it with [`Stream::parallelism`]).
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
            ..
        } = inner;
        if !errors.is_empty() {
            return Err(errors.swap_remove(0));
        }
        for &n in &event_time {
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
    match plan.refused.first() {
        Some(&(n, why)) => Err(BuildError::Standby {
            name: graph.nodes[n].name.to_string(),
            reason: why.to_string(),
        }),
        None => Ok(()),
    }
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
    let parallelism = g.parallelism;
    g.nodes.push(Node {
        name: Arc::from(name),
        parallelism,
        kind,
        out_role: out.as_ref().map(|o| Arc::clone(&o.standby)),
        out: out.map(|o| o.core),
        standby,
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

/// A stream of `T` records: the output of a source or an operator.
pub struct Stream<T> {
    job: Rc<RefCell<Inner>>,
    node: usize,
    partitioning: Partitioning,
    /// Set by [`Stream::standby`]: the next operator gets a standby.
    standby: Option<crate::runtime::graph::RoleKit>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Stream<T> {
    fn clone(&self) -> Self {
        Stream {
            job: Rc::clone(&self.job),
            node: self.node,
            partitioning: self.partitioning.clone(),
            standby: self.standby.clone(),
            _t: PhantomData,
        }
    }
}

/// Stable 64-bit hash of a key (FxHash, then the SplitMix64 finalizer so the
/// high bits used for lane selection are well mixed). Identical in every run.
pub fn key_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    key.hash(&mut h);
    let mut z = h.finish();
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The instance (of `parallelism`) that owns `key` after a `key_by`.
pub fn key_instance<K: Hash + ?Sized>(key: &K, parallelism: usize) -> usize {
    crate::runtime::channel::lane_of(key_hash(key), parallelism)
}

impl<T: Data> Stream<T> {
    fn new(job: Rc<RefCell<Inner>>, node: usize) -> Self {
        Stream {
            job,
            node,
            partitioning: Partitioning::Forward,
            standby: None,
            _t: PhantomData,
        }
    }

    /// Records a build error: `what` cannot consume a stream marked with
    /// [`Stream::standby`].
    fn no_standby(&self, name: &str, what: &str) {
        if self.standby.is_some() {
            self.job.borrow_mut().errors.push(BuildError::Standby {
                name: name.to_string(),
                reason: format!("{what} cannot have one (only one-input operators can)"),
            });
        }
    }

    /// A connected stream is marked for a standby on the connection
    /// (`a.connect(&b).standby()`), not on an input.
    fn no_standby_reason(&self) -> Option<BuildError> {
        self.standby.as_ref().map(|_| BuildError::Standby {
            name: "<connect>".to_string(),
            reason: "a two-input operator gets one with `a.connect(&b).standby().process(..)`, \
                     not by marking an input"
                .into(),
        })
    }

    /// Sets the parallelism of the operator that produces this stream.
    pub fn parallelism(self, p: usize) -> Self {
        {
            let mut g = self.job.borrow_mut();
            if p == 0 {
                let name = g.nodes[self.node].name.to_string();
                g.errors.push(BuildError::ZeroParallelism { name });
            }
            g.nodes[self.node].parallelism = p;
        }
        self
    }

    /// Limits the source that produces this stream to `records_per_sec` in
    /// total (split evenly over its partitions). Records are released on a
    /// fixed schedule and stamped with their scheduled time.
    pub fn rate_limit(self, records_per_sec: f64) -> Self {
        {
            let mut g = self.job.borrow_mut();
            let name = g.nodes[self.node].name.to_string();
            let ok = records_per_sec.is_finite() && records_per_sec > 0.0;
            match &mut g.nodes[self.node].kind {
                NodeKind::Source { rate, .. } if ok => *rate = Some(records_per_sec),
                NodeKind::Source { .. } => g.errors.push(BuildError::InvalidRate {
                    name,
                    reason: format!("rate must be positive and finite, got {records_per_sec}"),
                }),
                _ => g.errors.push(BuildError::InvalidRate {
                    name,
                    reason: "only a source can be rate limited".into(),
                }),
            }
        }
        self
    }

    /// Gives the source that produces this stream watermarks (see
    /// [`crate::time`]): what event-time operators downstream — windows —
    /// need to know how far their input has come.
    ///
    /// ```
    /// # use tandem::{IterSource, JobBuilder};
    /// use std::time::Duration;
    /// use tandem::time::Watermarks;
    /// # let job = JobBuilder::new("doc");
    /// let clicks = job
    ///     .source("clicks", |_| IterSource((0..10u64).map(|n| (n, n * 1000))))
    ///     .watermarks(Watermarks::bounded(Duration::from_micros(5)));
    /// ```
    pub fn watermarks(self, strategy: crate::time::Watermarks) -> Self {
        {
            let mut g = self.job.borrow_mut();
            let name = g.nodes[self.node].name.to_string();
            match &mut g.nodes[self.node].kind {
                NodeKind::Source { watermarks, .. } => *watermarks = Some(strategy),
                _ => g.errors.push(BuildError::Window {
                    name,
                    reason: "only a source generates watermarks".into(),
                }),
            }
        }
        self
    }

    /// Sends every record to every instance of the next operator.
    pub fn broadcast(mut self) -> Self {
        self.partitioning = Partitioning::Broadcast;
        self
    }

    /// Spreads records round robin over the next operator's instances.
    pub fn rebalance(mut self) -> Self {
        self.partitioning = Partitioning::Rebalance;
        self
    }

    fn input(&self) -> (usize, Partitioning) {
        (self.node, self.partitioning.clone())
    }

    /// The generic one-input operator: `factory` builds a [`Process`] per
    /// instance, on the worker that runs it.
    pub fn process<U, P, F>(&self, name: &str, factory: F) -> Stream<U>
    where
        U: Data,
        P: Process<T, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
    {
        let build: graph::UnaryBuild = Arc::new(move |cx: BuildCx, down: AnyBox| {
            let down = downcast::<BoxCollector<U>>(down, "process output");
            let op = ProcessOp::new(factory(&cx.info), down, cx);
            Box::new(Box::new(op) as BoxCollector<T>) as AnyBox
        });
        let node = add_node_with(
            &self.job,
            name,
            NodeKind::Unary(build),
            Some(out_kits::<U>()),
            &[self.input()],
            self.standby.clone(),
        );
        Stream::new(Rc::clone(&self.job), node)
    }

    /// One output per record.
    ///
    /// ```
    /// # use tandem::{IterSource, JobBuilder};
    /// # let job = JobBuilder::new("doc");
    /// # let words = job.source("src", |_| IterSource(vec![("a".to_string(), 0)].into_iter()));
    /// let lengths = words.map("len", |w: String| w.len());
    /// ```
    pub fn map<U, F>(&self, name: &str, f: F) -> Stream<U>
    where
        U: Data,
        F: Fn(T) -> U + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.process(name, move |_| Map(Arc::clone(&f)))
    }

    /// Keeps the records `pred` accepts.
    ///
    /// ```
    /// # use tandem::{IterSource, JobBuilder};
    /// # let job = JobBuilder::new("doc");
    /// # let nums = job.source("src", |_| IterSource((0..10u64).map(|n| (n, n))));
    /// let odd = nums.filter("odd", |n: &u64| n % 2 == 1);
    /// ```
    pub fn filter<F>(&self, name: &str, pred: F) -> Stream<T>
    where
        F: Fn(&T) -> bool + Send + Sync + 'static,
    {
        let f = Arc::new(pred);
        self.process(name, move |_| Filter(Arc::clone(&f)))
    }

    /// Any number of outputs per record, emitted into the [`Output`].
    ///
    /// ```
    /// # use tandem::{IterSource, JobBuilder, Output};
    /// # let job = JobBuilder::new("doc");
    /// # let lines = job.source("src", |_| IterSource(vec![("a b".to_string(), 0)].into_iter()));
    /// let words = lines.flat_map("split", |line: String, out: &mut Output<'_, String>| {
    ///     for w in line.split_whitespace() {
    ///         out.emit(w.to_string());
    ///     }
    /// });
    /// ```
    pub fn flat_map<U, F>(&self, name: &str, f: F) -> Stream<U>
    where
        U: Data,
        F: Fn(T, &mut Output<'_, U>) + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.process(name, move |_| FlatMap(Arc::clone(&f)))
    }

    /// Partitions the stream by key: every record with the same key goes to
    /// the same instance of the next (keyed) operator.
    pub fn key_by<K, F>(&self, key: F) -> KeyedStream<K, T>
    where
        K: Hash + Eq + Clone + Send + 'static,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        let key: Arc<dyn Fn(&T) -> K + Send + Sync> = Arc::new(key);
        let k2 = Arc::clone(&key);
        let hash: HashFn<T> = Arc::new(move |v: &T| key_hash(&k2(v)));
        let mut stream = self.clone();
        stream.partitioning = Partitioning::Hash(Arc::new(hash));
        KeyedStream { stream, key }
    }

    /// Joins this stream with `other` into a two-input operator (see
    /// [`Connected::process`]). Use `other.broadcast()` for a side stream
    /// every instance must see.
    pub fn connect<B: Data>(&self, other: &Stream<B>) -> Connected<T, B> {
        for s in [self.no_standby_reason(), other.no_standby_reason()]
            .into_iter()
            .flatten()
        {
            self.job.borrow_mut().errors.push(s);
        }
        Connected {
            first: self.clone(),
            second: other.clone(),
        }
    }

    /// Ends the stream in a sink; `factory` builds one per instance.
    pub fn sink<S, F>(&self, name: &str, factory: F)
    where
        S: Sink<T>,
        F: Fn(&OperatorInfo) -> S + Send + Sync + 'static,
    {
        self.no_standby(name, "a sink");
        let build: graph::SinkBuild = Arc::new(move |cx: BuildCx| {
            let op = SinkOp::new(factory(&cx.info), cx);
            Box::new(Box::new(op) as BoxCollector<T>) as AnyBox
        });
        add_node(
            &self.job,
            name,
            NodeKind::Sink(build),
            None,
            &[self.input()],
        );
    }

    /// Ends the stream in a sink that calls `f` for every record.
    pub fn for_each<F>(&self, name: &str, f: F)
    where
        F: Fn(Record<T>) + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.sink(name, move |_| ForEach(Arc::clone(&f)));
    }
}

impl<T: Data + Codec + Sync> Stream<T> {
    /// The next one-input operator built on this stream (`map`, `filter`,
    /// `flat_map`, `process`, or a keyed operator after `key_by`) may run
    /// with an active standby: when the runtime has a
    /// [`crate::StandbyConfig`], each of its instances gets a standby on
    /// another core, fed from a buffer queue that this stream's records are
    /// written to once ([`crate::standby`]): moved into a typed slot that
    /// primary and standby clone from (`T: Sync`), or encoded with its
    /// [`Codec`] (`StandbyConfig::encoded_queues`, as a standby in another
    /// process will need).
    ///
    /// The operator must produce the same outputs, in the same order, when
    /// an input is processed again from the same state (replay after a
    /// takeover relies on it).
    ///
    /// **Which operators may have a standby.** A one-input operator: `map`,
    /// `filter`, `flat_map`, `process`, a keyed `reduce`, `aggregate`,
    /// `process` or `process_timed`, a window, or a union. A sink cannot
    /// (marking the stream a sink reads is a [`BuildError::Standby`]); a
    /// two-input operator gets one on the connection instead
    /// ([`crate::Connected::standby`], [`KeyedConnected::standby`],
    /// [`IntervalJoin::standby`], [`WindowJoin::standby`]), never by
    /// marking an input.
    ///
    /// **Chains.** The one-input operators chained after the marked one run
    /// in the same primary and standby (the chain is the unit of backup);
    /// two adjacent marked operators on a forward edge back up one chain.
    /// A marked operator whose input comes from a backed-up chain through a
    /// repartition (a `key_by`, a `rebalance`, another parallelism) cannot
    /// join that chain and cannot take its input from one: such a job is
    /// refused by [`JobBuilder::build`] with a [`BuildError::Standby`]
    /// naming it — back up one of the two.
    ///
    /// **The runtime must ask for standbys.** The mark takes effect only
    /// when the [`RuntimeConfig`] has a [`crate::StandbyConfig`]
    /// ([`RuntimeConfig::standby`]); without one the job runs without
    /// standbys (`report.standby` is `None`), and [`Job::start`] says so on
    /// standard error. That is how a job runs its fault-free reference:
    /// the same graph, without the configuration.
    pub fn standby(&self) -> Stream<T> {
        self.job
            .borrow_mut()
            .codecs
            .extend([crate::runtime::standby::kit::CodecFns::<T>::entry()]);
        let mut s = self.clone();
        s.standby = Some(SKit::<T>::arc());
        s
    }
}

struct ForEach<F>(Arc<F>);

impl<T, F: Fn(Record<T>) + 'static> Sink<T> for ForEach<F> {
    fn write(&mut self, rec: Record<T>) -> std::io::Result<()> {
        (self.0)(rec);
        Ok(())
    }
}

/// Two streams joined by [`Stream::connect`].
pub struct Connected<A, B> {
    first: Stream<A>,
    second: Stream<B>,
}

impl<A: Data, B: Data> Connected<A, B> {
    /// The two-input operator: `factory` builds a [`CoProcess`] per instance.
    pub fn process<U, P, F>(&self, name: &str, factory: F) -> Stream<U>
    where
        U: Data,
        P: CoProcess<A, B, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
    {
        let build: graph::BinaryBuild = Arc::new(move |cx: BuildCx, down: AnyBox| {
            let down = downcast::<BoxCollector<U>>(down, "connect output");
            let ports = build_co_ports::<A, B, U, P>(factory(&cx.info), down, cx);
            graph::CoInputs {
                first: Box::new(ports.first) as AnyBox,
                second: Box::new(ports.second) as AnyBox,
                ready: ports.ready,
                holds: ports.holds,
            }
        });
        let node = add_node(
            &self.first.job,
            name,
            NodeKind::Binary(build),
            Some(out_kits::<U>()),
            &[self.first.input(), self.second.input()],
        );
        Stream::new(Rc::clone(&self.first.job), node)
    }
}

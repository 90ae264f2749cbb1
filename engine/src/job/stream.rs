//! Streams: what a source or an operator puts out, and what the builder
//! hangs the next operator on — `map`, `filter`, `process`, `key_by`,
//! `connect`, `sink`, a standby for the next operator — and the key hash
//! that places a key on an instance.

use super::{add_node, add_node_with, out_kits, BoxCollector, Data, Inner, KeyedStream};
use crate::error::BuildError;
use crate::operator::{CoProcess, Filter, FlatMap, Map, OperatorInfo, Output, Process, Sink};
use crate::record::Record;
use crate::runtime::chain::{build_co_ports, AsyncIo, AsyncOp, ProcessOp, SinkOp};
use crate::runtime::graph;
use crate::runtime::standby::kit::SKit;
use crate::standby::codec::Codec;
use graph::{downcast, AnyBox, BuildCx, HashFn, NodeKind, Partitioning};
use std::cell::RefCell;
use std::hash::Hash;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

/// A stream of `T` records: the output of a source or an operator.
pub struct Stream<T> {
    pub(super) job: Rc<RefCell<Inner>>,
    pub(super) node: usize,
    pub(super) partitioning: Partitioning,
    /// Set by [`Stream::standby`]: the next operator gets a standby.
    pub(super) standby: Option<crate::runtime::graph::RoleKit>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Stream<T> {
    /// The name of the operator that gives this stream.
    pub(super) fn node_name(&self) -> String {
        self.job.borrow().nodes[self.node].name.to_string()
    }
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

pub use crate::runtime::channel::{key_hash, key_instance};

/// The plan's rule for an operator's own state declared `r`.
fn rescale_of(r: crate::operator::Redistribution) -> crate::runtime::graph::Rescale {
    use crate::operator::Redistribution;
    use crate::runtime::graph::{Rescale, OWN_STATE};
    match r {
        Redistribution::Refuse => Rescale::Refuse(OWN_STATE),
        Redistribution::Replicate => Rescale::Replicate,
    }
}

impl<T: Data> Stream<T> {
    pub(super) fn new(job: Rc<RefCell<Inner>>, node: usize) -> Self {
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
    pub(super) fn no_standby(&self, name: &str, what: &str) {
        if self.standby.is_some() {
            self.job.borrow_mut().errors.push(BuildError::Standby {
                name: name.to_string(),
                reason: format!("{what} cannot have one (only one-input operators can)"),
            });
        }
    }

    /// A connected stream is marked for a standby on the connection
    /// (`a.connect(&b).standby()`), not on an input.
    pub(super) fn no_standby_reason(&self) -> Option<BuildError> {
        self.standby.as_ref().map(|_| BuildError::Standby {
            name: "<connect>".to_string(),
            reason: "a two-input operator gets one with `a.connect(&b).standby().process(..)`, \
                     not by marking an input"
                .into(),
        })
    }

    /// Sets the parallelism of the operator that produces this stream
    /// (else it has the job's default,
    /// [`JobBuilder::default_parallelism`](super::JobBuilder::default_parallelism)).
    pub fn parallelism(self, p: usize) -> Self {
        set_parallelism(&self.job, self.node, super::Par::Fixed(p));
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

    pub(super) fn input(&self) -> (usize, Partitioning) {
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
        let out = self.unary(name, build);
        out.job.borrow_mut().nodes[out.node].rescale = rescale_of(P::redistribution());
        out
    }

    /// A one-input operator node `name` reading this stream, built by
    /// `build` on each instance's worker.
    fn unary<U: Data>(&self, name: &str, build: graph::UnaryBuild) -> Stream<U> {
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

    /// Asynchronous I/O (Flink's `AsyncDataStream`): `f` runs for each
    /// record on helper threads of the instance, up to `io.capacity` at
    /// once — a call to a service that would otherwise hold the worker —
    /// and its result is emitted in the record's envelope, in the
    /// records' order ([`AsyncIo::ordered`]) or as they complete
    /// ([`AsyncIo::unordered`]). A request is answered before anything
    /// after its record leaves the operator (a barrier, a watermark, the
    /// end), so none is in flight at a checkpoint or a standby's chunk
    /// boundary: a restore or a takeover issues again exactly the requests
    /// of the records it replays. A request slower than `io.timeout`, or
    /// a panic of `f`, fails the operator, naming the record
    /// (`runtime::chain::asyncio` has the details).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tandem::{AsyncIo, IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("enrich");
    /// job.source("ids", |_| IterSource((0..100u64).map(|n| (n, n))))
    ///     // A lookup that blocks (a database, a web service).
    ///     .async_map("lookup", AsyncIo::ordered(8, Duration::from_secs(1)), |id: u64| {
    ///         std::thread::sleep(Duration::from_micros(200));
    ///         (id, id * 10)
    ///     })
    ///     .for_each("check", |r| assert_eq!(r.value.1, r.value.0 * 10));
    /// let report = job.build()?.run(&RuntimeConfig::default())?;
    /// assert_eq!(report.operator("lookup").unwrap().emitted, 100);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn async_map<U, F>(&self, name: &str, io: AsyncIo, f: F) -> Stream<U>
    where
        U: Data,
        F: Fn(T) -> U + Send + Sync + 'static,
    {
        let f: Arc<dyn Fn(T) -> U + Send + Sync> = Arc::new(f);
        let build: graph::UnaryBuild = Arc::new(move |cx: BuildCx, down: AnyBox| {
            let down = downcast::<BoxCollector<U>>(down, "async output");
            let op = AsyncOp::new(io, Arc::clone(&f), down, cx);
            Box::new(Box::new(op) as BoxCollector<T>) as AnyBox
        });
        self.unary(name, build)
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

    /// Ends the stream in a sink; `factory` builds one per instance. Its
    /// name is one of the job's names, shared with its sources and
    /// operators: each must be unique (reports, fault specs and
    /// checkpoints name them). The handle sets its parallelism.
    pub fn sink<S, F>(&self, name: &str, factory: F) -> SinkHandle
    where
        S: Sink<T>,
        F: Fn(&OperatorInfo) -> S + Send + Sync + 'static,
    {
        self.no_standby(name, "a sink");
        let build: graph::SinkBuild = Arc::new(move |cx: BuildCx| {
            let op = SinkOp::new(factory(&cx.info), cx);
            Box::new(Box::new(op) as BoxCollector<T>) as AnyBox
        });
        let node = add_node(
            &self.job,
            name,
            NodeKind::Sink(build),
            None,
            &[self.input()],
        );
        SinkHandle {
            job: Rc::clone(&self.job),
            node,
        }
    }

    /// Ends the stream in a sink that calls `f` for every record (a sink
    /// as [`sink`](Self::sink) makes one).
    pub fn for_each<F>(&self, name: &str, f: F) -> SinkHandle
    where
        F: Fn(Record<T>) + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.sink(name, move |_| ForEach(Arc::clone(&f)))
    }
}

/// A sink of the job being built ([`Stream::sink`]), to set its
/// parallelism on.
///
/// ```
/// use tandem::{IterSource, JobBuilder};
///
/// let job = JobBuilder::new("counts");
/// job.source("n", |_| IterSource((0..100u64).map(|n| (n, n))))
///     .for_each("print", |r| println!("{}", r.value))
///     // One instance, whatever the job's default.
///     .parallelism(1);
/// job.default_parallelism(4);
/// # job.build().unwrap();
/// ```
pub struct SinkHandle {
    job: Rc<RefCell<Inner>>,
    node: usize,
}

impl SinkHandle {
    /// Sets the sink's parallelism (else it has the job's default).
    pub fn parallelism(self, p: usize) -> Self {
        set_parallelism(&self.job, self.node, super::Par::Fixed(p));
        self
    }
}

/// Records node `node`'s parallelism as asked for (a zero is an error of
/// the build, naming it).
pub(super) fn set_parallelism(job: &Rc<RefCell<Inner>>, node: usize, p: super::Par) {
    let mut g = job.borrow_mut();
    if let super::Par::Fixed(0) = p {
        let name = g.nodes[node].name.to_string();
        g.errors.push(BuildError::ZeroParallelism { name });
    }
    g.par[node] = p;
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
    /// ([`crate::Connected::standby`], [`crate::KeyedConnected::standby`],
    /// [`crate::job::IntervalJoin::standby`], [`crate::job::WindowJoin::standby`]), never by
    /// marking an input.
    ///
    /// **Chains.** The one-input operators chained after the marked one run
    /// in the same primary and standby (the chain is the unit of backup);
    /// two adjacent marked operators on a forward edge back up one chain.
    /// A marked operator whose input comes from a backed-up chain through a
    /// repartition (a `key_by`, a `rebalance`, another parallelism) cannot
    /// join that chain and cannot take its input from one: such a job is
    /// refused by [`crate::JobBuilder::build`] with a [`BuildError::Standby`]
    /// naming it — back up one of the two.
    ///
    /// **The runtime must ask for standbys.** The mark takes effect only
    /// when the [`crate::RuntimeConfig`] has a [`crate::StandbyConfig`]
    /// ([`crate::RuntimeConfig::standby`]); without one the job runs without
    /// standbys (`report.standby` is `None`), and [`crate::Job::start`] says so on
    /// standard error. That is how a job runs its fault-free reference:
    /// the same graph, without the configuration.
    pub fn standby(&self) -> Stream<T> {
        self.job
            .borrow_mut()
            .codecs
            .extend([crate::runtime::standby::entry::CodecFns::<T>::entry()]);
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
    pub(super) first: Stream<A>,
    pub(super) second: Stream<B>,
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
        self.first.job.borrow_mut().nodes[node].rescale = rescale_of(P::redistribution());
        Stream::new(Rc::clone(&self.first.job), node)
    }
}

//! Unions of same-typed streams, and a two-input operator with a standby —
//! which is a one-input operator over the union of its two inputs.
//!
//! A standby backs up one-input operators: its buffer queues have one
//! record type, its determinant log one order over its lanes. A
//! [`CoProcess`] marked for a standby is built as exactly that: each input
//! is tagged (`NAME.first`, `NAME.second`, chained to the producers, one
//! call and no copy), the two tagged streams are the union input of the
//! operator `NAME`, whose lanes are the lanes of both inputs — so the log
//! records which input each chunk came from, and a takeover replays both in
//! the primary's order. [`CoOne`] hands each record to
//! `process_first` or `process_second`.
//!
//! `first_ready` is kept by holding the first input's records in the
//! operator (they are in its snapshots) until it returns `true` or the
//! input ends, not by leaving them in their rings.

use super::out_kits;
use super::{add_node_with, BoxCollector, Connected, Data, Stream};
use crate::checkpoint::{CheckpointError, SnapshotBytes};
use crate::error::BuildError;
use crate::operator::{CoProcess, OperatorInfo, Output, Process};
use crate::record::{Record, TupleId};
use crate::runtime::chain::ProcessOp;
use crate::runtime::graph::{self, downcast, AnyBox, BuildCx, HashFn, NodeKind, Partitioning};
use crate::runtime::standby::kit::SKit;
use crate::standby::codec::{decode_bytes, encode_bytes, Codec, CodecError};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

/// A record of a two-input operator's first or second input (the element
/// of the union its standby backs up).
#[derive(Clone, Debug, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum Two<A, B> {
    /// A record of the first input.
    First(A),
    /// A record of the second input.
    Second(B),
}

/// A tagged record as the record of its input, in its envelope.
pub(crate) fn untag<A, B>(rec: Record<Two<A, B>>) -> Two<Record<A>, Record<B>> {
    let Record {
        id,
        event_time,
        ingest,
        value,
    } = rec;
    match value {
        Two::First(value) => Two::First(Record {
            id,
            event_time,
            ingest,
            value,
        }),
        Two::Second(value) => Two::Second(Record {
            id,
            event_time,
            ingest,
            value,
        }),
    }
}

impl<A: Codec, B: Codec> Codec for Two<A, B> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Two::First(a) => {
                out.push(0);
                a.encode(out);
            }
            Two::Second(b) => {
                out.push(1);
                b.encode(out);
            }
        }
    }

    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        match bytes.split_first() {
            Some((0, rest)) => A::decode(rest).map(|(a, r)| (Two::First(a), r)),
            Some((1, rest)) => B::decode(rest).map(|(b, r)| (Two::Second(b), r)),
            Some((t, _)) => Err(CodecError(format!("input tag {t}"))),
            None => Err(CodecError("an empty two-input record".into())),
        }
    }
}

impl<T: Data> Stream<T> {
    /// Merges this stream and `others` (all of type `T`) into one stream,
    /// through the operator `name` that passes every record on as it
    /// comes. Each input keeps its partitioning (forward, `rebalance`,
    /// `broadcast`, by key); barriers align over all the inputs' lanes,
    /// watermarks are their minimum. A union may have a standby (marked on
    /// any input) when every input comes from operators with standbys or
    /// none does.
    ///
    /// ```
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("both");
    /// let a = job.source("a", |_| IterSource((0..10u64).map(|n| (n, n))));
    /// let b = job.source("b", |_| IterSource((10..20u64).map(|n| (n, n))));
    /// a.union("both", &[&b]).for_each("sink", |_| {});
    /// let report = job.build()?.run(&RuntimeConfig::default().cores(1))?;
    /// assert_eq!(report.operator("sink").unwrap().records, 20);
    /// # Ok::<(), tandem::JobError>(())
    /// ```
    pub fn union(&self, name: &str, others: &[&Stream<T>]) -> Stream<T> {
        let mut inputs = vec![self.input()];
        inputs.extend(others.iter().map(|s| s.input()));
        let standby = std::iter::once(self)
            .chain(others.iter().copied())
            .find_map(|s| s.standby.clone());
        let build: graph::UnaryBuild = Arc::new(move |cx: BuildCx, down: AnyBox| {
            let down = downcast::<BoxCollector<T>>(down, "union output");
            let op = ProcessOp::new(Pass, down, cx);
            Box::new(Box::new(op) as BoxCollector<T>) as AnyBox
        });
        let node = add_node_with(
            &self.job,
            name,
            NodeKind::Unary(build),
            Some(out_kits::<T>()),
            &inputs,
            standby,
        );
        Stream::new(Rc::clone(&self.job), node)
    }
}

/// Passes records on.
struct Pass;

impl<T> Process<T, T> for Pass {
    #[inline]
    fn process(&mut self, rec: Record<T>, out: &mut Output<'_, T>) {
        out.emit(rec.value);
    }
}

/// Two connected streams whose operator gets a standby
/// ([`Connected::standby`]).
pub struct StandbyConnected<A, B>(Connected<A, B>);

impl<A, B> Connected<A, B>
where
    A: Data + Codec + Sync,
    B: Data + Codec + Sync,
{
    /// The two-input operator built on these streams (next,
    /// [`StandbyConnected::process`]) may run with an active standby, as
    /// [`Stream::standby`] gives a one-input operator one: when the runtime
    /// has a [`crate::StandbyConfig`], each instance gets a standby on
    /// another core, fed from buffer queues holding both inputs: each input
    /// is tagged (operators `NAME.first` and `NAME.second`, chained to
    /// their producers) and the two are the operator's union input, so
    /// its determinant log records which input each chunk came from and a
    /// takeover replays both in the primary's order. Both input types need
    /// a [`Codec`] and `Sync`.
    ///
    /// The rules of [`Stream::standby`] hold here too: mark the
    /// connection, never an input (a marked input is a build error); the
    /// mark takes effect only with a [`crate::StandbyConfig`] (without one
    /// the job runs without a standby and [`crate::Job::start`] warns).
    /// The same goes for [`crate::KeyedConnected::standby`],
    /// [`crate::job::IntervalJoin::standby`] and
    /// [`crate::job::WindowJoin::standby`].
    ///
    /// ```
    /// use tandem::{CoProcess, IterSource, JobBuilder, Output, Record, RuntimeConfig, StandbyConfig};
    ///
    /// struct Sum(u64);
    /// impl CoProcess<u64, u64, u64> for Sum {
    ///     fn process_first(&mut self, r: Record<u64>, out: &mut Output<'_, u64>) {
    ///         self.0 += r.value;
    ///         out.emit(self.0);
    ///     }
    ///     fn process_second(&mut self, r: Record<u64>, out: &mut Output<'_, u64>) {
    ///         self.0 += r.value;
    ///         out.emit(self.0);
    ///     }
    /// }
    ///
    /// let job = JobBuilder::new("join");
    /// let a = job.source("a", |_| IterSource((0..100u64).map(|n| (n, n))));
    /// let b = job.source("b", |_| IterSource((0..100u64).map(|n| (n, n))));
    /// a.key_by(|n: &u64| *n)
    ///     .connect(&b.key_by(|n: &u64| *n))
    ///     .standby()
    ///     .process("sum", |_| Sum(0))
    ///     .for_each("sink", |_| {});
    /// job.build()?.run(&RuntimeConfig::default().cores(1).standby(StandbyConfig::default()))?;
    /// # Ok::<(), tandem::JobError>(())
    /// ```
    pub fn standby(&self) -> StandbyConnected<A, B> {
        StandbyConnected(Connected {
            first: self.first.clone(),
            second: self.second.clone(),
        })
    }
}

impl<A, B> StandbyConnected<A, B>
where
    A: Data + Codec + Sync,
    B: Data + Codec + Sync,
{
    /// The two-input operator, with a standby: `factory` builds a
    /// [`CoProcess`] per instance (as [`Connected::process`]; the first
    /// input is held in the operator, not in its rings, while
    /// `first_ready` is `false`).
    pub fn process<U, P, F>(&self, name: &str, factory: F) -> Stream<U>
    where
        U: Data,
        P: CoProcess<A, B, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
    {
        let Connected { first, second } = &self.0;
        let first_in = first;
        let second_in = second;
        let first = tag(first_in, &format!("{name}.first"), Two::<A, B>::First);
        let second = tag(second_in, &format!("{name}.second"), Two::<A, B>::Second);
        let mut first = first;
        first.partitioning = retype(
            &first_in.partitioning,
            |v: &Two<A, B>, h: &HashFn<A>| match v {
                Two::First(a) => h(a),
                Two::Second(_) => 0,
            },
        );
        let mut second = second;
        second.partitioning = retype(
            &second_in.partitioning,
            |v: &Two<A, B>, h: &HashFn<B>| match v {
                Two::Second(b) => h(b),
                Two::First(_) => 0,
            },
        );
        first.standby = Some(SKit::<Two<A, B>>::arc());
        let out = first.process(name, move |info| CoOne {
            op: factory(info),
            held: VecDeque::new(),
            ready: false,
        });
        // The second input is the operator's union input too.
        {
            let mut g = out.job.borrow_mut();
            let port = g.edges.iter().filter(|e| e.to == out.node).count();
            g.edges.push(graph::Edge {
                from: second.node,
                to: out.node,
                port,
                partitioning: second.partitioning.clone(),
            });
        }
        out
    }
}

/// `input` tagged as one side of a two-input operator: a pass-through on
/// the producer's instances (forward, chained to it).
pub(super) fn tag<X: Data, Y: Data>(input: &Stream<X>, name: &str, f: fn(X) -> Y) -> Stream<Y> {
    let producer = input.node;
    if input.standby.is_some() {
        // The mark would fall on the tagging map, not on the two-input
        // operator it was meant for: said at build, never dropped.
        let op = name.rsplit_once('.').map_or(name, |(op, _)| op);
        input.job.borrow_mut().errors.push(BuildError::Standby {
            name: op.to_string(),
            reason: "`.standby()` marks the operator built on the stream it is called on; \
                     a two-input operator (a join, a connection) is marked on the pair: \
                     `a.key_by(..).interval_join(&b.key_by(..), ..).standby()`, \
                     `a.connect(&b).standby()`"
                .into(),
        });
    }
    let mut plain = input.clone();
    plain.partitioning = Partitioning::Forward;
    plain.standby = None;
    let tagged = plain.map(name, f);
    super::stream::set_parallelism(&tagged.job, tagged.node, super::Par::Like(producer));
    tagged
}

/// The partitioning of an edge carrying `Two<A, B>` where the original
/// carried `X`: the same, a hash by key reading the tagged value.
pub(super) fn retype<X: 'static, A: 'static, B: 'static>(
    p: &Partitioning,
    f: fn(&Two<A, B>, &HashFn<X>) -> u64,
) -> Partitioning {
    match p {
        Partitioning::Hash(h) => {
            let h = h
                .downcast_ref::<HashFn<X>>()
                .expect("engine bug: hash function of the wrong type")
                .clone();
            let two: HashFn<Two<A, B>> = Arc::new(move |v: &Two<A, B>| f(v, &h));
            Partitioning::Hash(Arc::new(two))
        }
        other => other.clone(),
    }
}

/// A [`CoProcess`] as a one-input operator over the union of its inputs
/// (see the module docs).
struct CoOne<A, P> {
    op: P,
    /// First-input records held until the operator is ready for them.
    held: VecDeque<Record<A>>,
    /// `first_ready` has returned `true` (a latch).
    ready: bool,
}

impl<A, P> CoOne<A, P> {
    /// Hands the held first-input records over, in order, each in its own
    /// envelope.
    fn release<B, O>(&mut self, out: &mut Output<'_, O>)
    where
        P: CoProcess<A, B, O>,
    {
        while let Some(h) = self.held.pop_front() {
            let mut o = Output {
                down: &mut *out.down,
                id: h.id,
                event_time: h.event_time,
                ingest: h.ingest,
                emitted: &mut *out.emitted,
                task: out.task,
                op: out.op,
            };
            self.op.process_first(h, &mut o);
        }
    }
}

impl<A, B, O, P> Process<Two<A, B>, O> for CoOne<A, P>
where
    A: Codec + 'static,
    B: 'static,
    P: CoProcess<A, B, O>,
{
    fn process(&mut self, rec: Record<Two<A, B>>, out: &mut Output<'_, O>) {
        match untag(rec) {
            Two::First(r) => {
                if self.ready || self.op.first_ready() {
                    self.ready = true;
                    self.op.process_first(r, out);
                } else {
                    self.held.push_back(r);
                }
            }
            Two::Second(r) => {
                self.op.process_second(r, out);
                if !self.ready && self.op.first_ready() {
                    self.ready = true;
                    self.release(out);
                }
            }
        }
    }

    fn on_end(&mut self, out: &mut Output<'_, O>) {
        // Both inputs ended: the first is read regardless.
        self.release(out);
        self.op.on_end(out);
    }

    fn snapshot_state(&mut self) -> Result<Option<SnapshotBytes>, CheckpointError> {
        let own = self.op.snapshot_state()?;
        if own.is_none() && self.held.is_empty() && !self.ready {
            return Ok(None);
        }
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.push(self.ready as u8);
        match &own {
            Some(s) => {
                b.push(1);
                encode_bytes(s.payload(), &mut b);
            }
            None => b.push(0),
        }
        (self.held.len() as u64).encode(&mut b);
        let mut v = Vec::new();
        for h in &self.held {
            h.id.0.encode(&mut b);
            h.event_time.encode(&mut b);
            h.ingest.encode(&mut b);
            v.clear();
            h.value.encode(&mut v);
            encode_bytes(&v, &mut b);
        }
        Ok(Some(SnapshotBytes::from_payload(&b)))
    }

    fn restore_state(&mut self, payload: &[u8]) -> Result<(), CheckpointError> {
        let bad = |why: String| {
            CheckpointError::ChainFrame(format!("a two-input operator's state: {why}"))
        };
        let rest = payload
            .strip_prefix(MAGIC.as_slice())
            .ok_or_else(|| bad("no frame".into()))?;
        let e = |c: CodecError| bad(c.0);
        let (ready, rest) = bool::decode(rest).map_err(e)?;
        let (has, mut rest) = bool::decode(rest).map_err(e)?;
        if has {
            let (own, r) = decode_bytes(rest).map_err(e)?;
            // The operator's own archive, aligned for its checked access.
            self.op
                .restore_state(SnapshotBytes::from_payload(own).payload())?;
            rest = r;
        }
        let (n, mut rest) = u64::decode(rest).map_err(e)?;
        self.ready = ready;
        self.held.clear();
        for _ in 0..n {
            let (id, r) = u64::decode(rest).map_err(e)?;
            let (event_time, r) = u64::decode(r).map_err(e)?;
            let (ingest, r) = u64::decode(r).map_err(e)?;
            let (bytes, r) = decode_bytes(r).map_err(e)?;
            let (value, left) = A::decode(bytes).map_err(e)?;
            if !left.is_empty() {
                return Err(bad(format!("{} bytes after a held record", left.len())));
            }
            self.held.push_back(Record {
                id: TupleId(id),
                event_time,
                ingest,
                value,
            });
            rest = r;
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} bytes after the held records", rest.len())));
        }
        Ok(())
    }
}

const MAGIC: &[u8; 8] = b"TDMCOONE";

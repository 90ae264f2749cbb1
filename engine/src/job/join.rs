//! Keyed process functions in event time, and the interval join built on
//! one ([`crate::time::TimedProcess`]).

use super::union::{retype, tag, Two};
use super::{add_node_with, BoxCollector, Data, KeyedStream, Stream};
use crate::operator::{OperatorInfo, Output};
use crate::record::Record;
use crate::runtime::chain::{SideCodec, StateCodec, TimedOp};
use crate::runtime::graph::{self, downcast, AnyBox, BuildCx, HashFn, Kit, NodeKind};
use crate::runtime::standby::kit::{SKit, StandbyKit};
use crate::standby::codec::Codec;
use crate::state::{KeyedState, StateSnapshot};
use crate::time::process::{Timed, TimedProcess, TimerContext};
use crate::time::window::WindowSide;
use rkyv::{Archive, Deserialize, Serialize};
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

impl<K, T> KeyedStream<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Data,
{
    /// A keyed process function in event time, with timers: `factory`
    /// builds a [`TimedProcess`] per instance. The stream's sources need
    /// watermarks ([`Stream::watermarks`]).
    pub fn process_timed<U, P, F>(&self, name: &str, factory: F) -> Stream<U>
    where
        U: Data,
        P: TimedProcess<K, T, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
        KeyedState<K, Timed<P::State>>: StateSnapshot,
        WindowSide<T>: StateSnapshot,
    {
        timed_node(
            &self.stream,
            name,
            Arc::clone(&self.key),
            factory,
            self.stream.standby.clone(),
            &[],
        )
    }

    /// Joins this stream with `other` on the key, in event time: a record
    /// `a` of this stream and `b` of `other` with equal keys are a pair when
    /// `a.t - before <= b.t <= a.t + after`. Each pair is emitted once, by
    /// the record of the two taken second (in event-time order, then tuple
    /// ID), in its envelope. A record is kept until the watermark passes
    /// the last time a partner could have. Both streams' sources need
    /// watermarks.
    pub fn interval_join<B: Data>(
        &self,
        other: &KeyedStream<K, B>,
        before: Duration,
        after: Duration,
    ) -> IntervalJoin<K, T, B> {
        IntervalJoin {
            left: KeyedStream {
                stream: self.stream.clone(),
                key: Arc::clone(&self.key),
            },
            right: KeyedStream {
                stream: other.stream.clone(),
                key: Arc::clone(&other.key),
            },
            before: nanos(before),
            after: nanos(after),
            standby: None,
        }
    }
}

/// A key function.
type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A [`TimedOp`] node over `input` (and further `edges` into it).
fn timed_node<K, T, U, P, F>(
    input: &Stream<T>,
    name: &str,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    factory: F,
    standby: Option<Arc<dyn StandbyKit>>,
    more: &[&Stream<T>],
) -> Stream<U>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Data,
    U: Data,
    P: TimedProcess<K, T, U>,
    F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
    KeyedState<K, Timed<P::State>>: StateSnapshot,
    WindowSide<T>: StateSnapshot,
{
    let build: graph::UnaryBuild = Arc::new(move |cx: BuildCx, down: AnyBox| {
        let down = downcast::<BoxCollector<U>>(down, "timed output");
        let op = TimedOp::new(
            factory(&cx.info),
            Arc::clone(&key),
            StateCodec::of(),
            SideCodec::of(),
            down,
            cx,
        );
        Box::new(Box::new(op) as BoxCollector<T>) as AnyBox
    });
    let mut inputs = vec![input.input()];
    inputs.extend(more.iter().map(|s| s.input()));
    let node = add_node_with(
        &input.job,
        name,
        NodeKind::Unary(build),
        Some(Kit::<U>::arc()),
        &inputs,
        standby,
    );
    input.job.borrow_mut().event_time.push(node);
    Stream::new(Rc::clone(&input.job), node)
}

/// Two keyed streams to join in event time
/// ([`KeyedStream::interval_join`]).
pub struct IntervalJoin<K, A, B> {
    left: KeyedStream<K, A>,
    right: KeyedStream<K, B>,
    before: u64,
    after: u64,
    standby: Option<Arc<dyn StandbyKit>>,
}

impl<K, A, B> IntervalJoin<K, A, B>
where
    A: Data + Codec + Sync,
    B: Data + Codec + Sync,
{
    /// The join gets an active standby (see [`crate::Connected::standby`]):
    /// both inputs in its buffer queues, in the order its primary took
    /// them.
    pub fn standby(mut self) -> Self {
        self.standby = Some(SKit::<Two<A, B>>::arc());
        self
    }
}

impl<K, A, B> IntervalJoin<K, A, B>
where
    K: Hash + Eq + Clone + Send + 'static,
    A: Data,
    B: Data,
{
    /// The join operator `name`: emits `f(key, a, b)` for every pair.
    pub fn process<O, F>(&self, name: &str, f: F) -> Stream<O>
    where
        O: Data,
        F: Fn(&K, &A, &B) -> O + Send + Sync + 'static,
        KeyedState<K, Timed<Sides<A, B>>>: StateSnapshot,
        WindowSide<Two<A, B>>: StateSnapshot,
    {
        let (ka, kb) = (Arc::clone(&self.left.key), Arc::clone(&self.right.key));
        let key: KeyFn<Two<A, B>, K> = Arc::new(move |v| match v {
            Two::First(a) => ka(a),
            Two::Second(b) => kb(b),
        });
        let mut first = tag(
            &self.left.stream,
            &format!("{name}.first"),
            Two::<A, B>::First,
        );
        first.partitioning = retype(
            &self.left.stream.partitioning,
            |v: &Two<A, B>, h: &HashFn<A>| match v {
                Two::First(a) => h(a),
                Two::Second(_) => 0,
            },
        );
        let mut second = tag(
            &self.right.stream,
            &format!("{name}.second"),
            Two::<A, B>::Second,
        );
        second.partitioning = retype(
            &self.right.stream.partitioning,
            |v: &Two<A, B>, h: &HashFn<B>| match v {
                Two::Second(b) => h(b),
                Two::First(_) => 0,
            },
        );
        let (before, after) = (self.before, self.after);
        let f = Arc::new(f);
        timed_node(
            &first,
            name,
            key,
            move |_| Interval {
                before,
                after,
                f: Arc::clone(&f),
            },
            self.standby.clone(),
            &[&second],
        )
    }
}

/// What an interval join keeps per key: each side's records, with their
/// event times, until no partner can come.
#[derive(Clone, Debug, Archive, Serialize, Deserialize)]
pub struct Sides<A, B> {
    left: Vec<(u64, A)>,
    right: Vec<(u64, B)>,
}

impl<A, B> Default for Sides<A, B> {
    fn default() -> Self {
        Sides {
            left: Vec::new(),
            right: Vec::new(),
        }
    }
}

struct Interval<F> {
    before: u64,
    after: u64,
    f: Arc<F>,
}

impl<K, A, B, O, F> TimedProcess<K, Two<A, B>, O> for Interval<F>
where
    A: Clone + 'static,
    B: Clone + 'static,
    F: Fn(&K, &A, &B) -> O + 'static,
{
    type State = Sides<A, B>;

    fn process(
        &mut self,
        key: &K,
        s: &mut Sides<A, B>,
        rec: Record<Two<A, B>>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, O>,
    ) {
        let t = rec.event_time;
        match rec.value {
            Two::First(a) => {
                let (lo, hi) = (t.saturating_sub(self.before), t.saturating_add(self.after));
                for (tb, b) in &s.right {
                    if (lo..=hi).contains(tb) {
                        out.emit((self.f)(key, &a, b));
                    }
                }
                s.left.push((t, a));
                // No partner of it can come once the watermark is past hi.
                cx.register(hi.saturating_add(1));
            }
            Two::Second(b) => {
                let (lo, hi) = (t.saturating_sub(self.after), t.saturating_add(self.before));
                for (ta, a) in &s.left {
                    if (lo..=hi).contains(ta) {
                        out.emit((self.f)(key, a, &b));
                    }
                }
                s.right.push((t, b));
                cx.register(hi.saturating_add(1));
            }
        }
    }

    fn on_timer(
        &mut self,
        _key: &K,
        s: &mut Sides<A, B>,
        at: u64,
        _cx: &mut TimerContext<'_>,
        _out: &mut Output<'_, O>,
    ) {
        let (before, after) = (self.before, self.after);
        s.left
            .retain(|(ta, _)| ta.saturating_add(after).saturating_add(1) > at);
        s.right
            .retain(|(tb, _)| tb.saturating_add(before).saturating_add(1) > at);
    }
}

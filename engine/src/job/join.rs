//! Keyed process functions in event time, and the interval join built on
//! one ([`crate::time::TimedProcess`]).

use super::out_kits;
use super::union::{retype, tag, Two};
use super::window::{split_late, WindowOutput, WindowedStream};
use super::{add_node_with, BoxCollector, Data, KeyedStream, Stream};
use crate::operator::{OperatorInfo, Output};
use crate::record::Record;
use crate::runtime::chain::{SideCodec, StateCodec, TimedOp};
use crate::runtime::graph::{self, downcast, AnyBox, BuildCx, HashFn, NodeKind};
use crate::runtime::standby::kit::SKit;
use crate::standby::codec::Codec;
use crate::state::{KeyedState, StateSnapshot};
use crate::time::process::{Timed, TimedProcess, TimerContext};
use crate::time::window::{KeyWindows, WinOut, Window, WindowSide, Windows};
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

    /// Joins this stream with `other` on the key in `windows` (Flink's
    /// window join): when a window of a key fires, every pair of a record
    /// of this stream and one of `other` in it is a result
    /// ([`WindowJoin::apply`]), or a function sees both sides' records
    /// ([`WindowJoin::cogroup`]). Both streams' sources need watermarks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tandem::time::{Watermarks, Windows};
    /// use tandem::{IterSource, JobBuilder, RuntimeConfig};
    ///
    /// let job = JobBuilder::new("ads");
    /// let ms = 1_000_000u64;
    /// // (ad, event time): impressions and clicks.
    /// let shown = (0..100u64).map(move |n| ((n % 10) as u32, n * ms));
    /// let clicked = (0..100u64).step_by(3).map(move |n| ((n % 10) as u32, n * ms + 1));
    /// let wm = Watermarks::bounded(Duration::from_millis(5));
    /// let shows = job.source("shown", move |_| IterSource(shown.clone())).watermarks(wm);
    /// let clicks = job.source("clicked", move |_| IterSource(clicked.clone())).watermarks(wm);
    /// shows
    ///     .key_by(|ad: &u32| *ad)
    ///     .window_join(&clicks.key_by(|ad: &u32| *ad), Windows::tumbling(Duration::from_millis(20)))
    ///     .apply("shown-then-clicked", |ad: &u32, w, _s: &u32, _c: &u32| (*ad, w.start))
    ///     .results()
    ///     .for_each("print", |r| assert!(r.value.0 < 10));
    /// job.build()?.run(&RuntimeConfig::default().cores(1))?;
    /// # Ok::<(), tandem::JobError>(())
    /// ```
    pub fn window_join<B: Data>(
        &self,
        other: &KeyedStream<K, B>,
        windows: Windows,
    ) -> WindowJoin<K, T, B> {
        WindowJoin {
            left: KeyedStream {
                stream: self.stream.clone(),
                key: Arc::clone(&self.key),
            },
            right: KeyedStream {
                stream: other.stream.clone(),
                key: Arc::clone(&other.key),
            },
            windows,
            lateness: 0,
            standby: None,
        }
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
pub(super) type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A [`TimedOp`] node over `input` (and further `edges` into it).
pub(super) fn timed_node<K, T, U, P, F>(
    input: &Stream<T>,
    name: &str,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    factory: F,
    standby: Option<crate::runtime::graph::RoleKit>,
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
        Some(out_kits::<U>()),
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
    standby: Option<crate::runtime::graph::RoleKit>,
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
    /// The join operator `name`: emits `f(key, a, b)` for every pair, in
    /// [`WindowOutput::results`]. A record behind the watermark of its
    /// input lane when it arrives is *late* — partners it would have
    /// paired with may already be gone — and joins nothing: it goes,
    /// tagged with its side, to [`WindowOutput::late`] (and is counted as
    /// operator `NAME.late`'s `emitted`), as Flink's interval join drops late records
    /// and offers them to a side output. The rule is the lane's
    /// watermark, not the operator's, so that which records are late is
    /// the same in every run, whatever the order the lanes interleave in.
    pub fn process<O, F>(&self, name: &str, f: F) -> WindowOutput<O, Two<A, B>>
    where
        O: Data,
        F: Fn(&K, &A, &B) -> O + Send + Sync + 'static,
        KeyedState<K, Timed<Sides<A, B>>>: StateSnapshot,
        WindowSide<Two<A, B>>: StateSnapshot,
    {
        let (first, second, key) = tagged(&self.left, &self.right, name);
        let (before, after) = (self.before, self.after);
        let f = Arc::new(f);
        let out: Stream<WinOut<O, Two<A, B>>> = timed_node(
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
        );
        split_late(&out, name, false)
    }
}

/// Both inputs tagged, and the key of either.
pub(super) type Tagged<K, A, B> = (Stream<Two<A, B>>, Stream<Two<A, B>>, KeyFn<Two<A, B>, K>);

/// The two inputs of a two-input keyed operator `name` as one record type:
/// each tagged by a map chained to its producer (`NAME.first`,
/// `NAME.second`) and partitioned by its own key; and the key of either.
pub(super) fn tagged<K, A, B>(
    left: &KeyedStream<K, A>,
    right: &KeyedStream<K, B>,
    name: &str,
) -> Tagged<K, A, B>
where
    K: 'static,
    A: Data,
    B: Data,
{
    let (ka, kb) = (Arc::clone(&left.key), Arc::clone(&right.key));
    let key: KeyFn<Two<A, B>, K> = Arc::new(move |v| match v {
        Two::First(a) => ka(a),
        Two::Second(b) => kb(b),
    });
    let mut first = tag(&left.stream, &format!("{name}.first"), Two::<A, B>::First);
    first.partitioning = retype(
        &left.stream.partitioning,
        |v: &Two<A, B>, h: &HashFn<A>| match v {
            Two::First(a) => h(a),
            Two::Second(_) => 0,
        },
    );
    let mut second = tag(
        &right.stream,
        &format!("{name}.second"),
        Two::<A, B>::Second,
    );
    second.partitioning = retype(
        &right.stream.partitioning,
        |v: &Two<A, B>, h: &HashFn<B>| match v {
            Two::Second(b) => h(b),
            Two::First(_) => 0,
        },
    );
    (first, second, key)
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

impl<K, A, B, O, F> TimedProcess<K, Two<A, B>, WinOut<O, Two<A, B>>> for Interval<F>
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
        out: &mut Output<'_, WinOut<O, Two<A, B>>>,
    ) {
        let t = rec.event_time;
        if t < cx.now() {
            // Behind its lane's watermark: its partners may be gone.
            out.emit(WinOut::Late(rec.value));
            return;
        }
        match rec.value {
            Two::First(a) => {
                let (lo, hi) = (t.saturating_sub(self.before), t.saturating_add(self.after));
                for (tb, b) in &s.right {
                    if (lo..=hi).contains(tb) {
                        out.emit(WinOut::Result((self.f)(key, &a, b)));
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
                        out.emit(WinOut::Result((self.f)(key, a, &b)));
                    }
                }
                s.right.push((t, b));
                cx.register(hi.saturating_add(1));
            }
        }
    }

    fn is_empty(&self, s: &Sides<A, B>) -> bool {
        // Joined and forgotten: the key goes (an order ID is seen once).
        s.left.is_empty() && s.right.is_empty()
    }

    fn on_timer(
        &mut self,
        _key: &K,
        s: &mut Sides<A, B>,
        at: u64,
        _cx: &mut TimerContext<'_>,
        _out: &mut Output<'_, WinOut<O, Two<A, B>>>,
    ) {
        let (before, after) = (self.before, self.after);
        s.left
            .retain(|(ta, _)| ta.saturating_add(after).saturating_add(1) > at);
        s.right
            .retain(|(tb, _)| tb.saturating_add(before).saturating_add(1) > at);
    }
}

/// Two keyed streams to join in windows ([`KeyedStream::window_join`]).
pub struct WindowJoin<K, A, B> {
    left: KeyedStream<K, A>,
    right: KeyedStream<K, B>,
    windows: Windows,
    lateness: u64,
    standby: Option<crate::runtime::graph::RoleKit>,
}

impl<K, A, B> WindowJoin<K, A, B>
where
    A: Data + Codec + Sync,
    B: Data + Codec + Sync,
{
    /// The join gets an active standby, as
    /// [`IntervalJoin::standby`].
    pub fn standby(mut self) -> Self {
        self.standby = Some(SKit::<Two<A, B>>::arc());
        self
    }
}

impl<K, A, B> WindowJoin<K, A, B>
where
    K: Hash + Eq + Clone + Send + 'static,
    A: Data,
    B: Data,
    WindowSide<Two<A, B>>: StateSnapshot,
    KeyedState<K, KeyWindows<Vec<Two<A, B>>>>: StateSnapshot,
{
    /// Records up to `lateness` behind the watermark past their window's
    /// end still join it, and the window fires again with every pair
    /// (as [`WindowedStream::allowed_lateness`](crate::WindowedStream::allowed_lateness)).
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.lateness = nanos(lateness);
        self
    }

    /// The join operator `name`: when a window of a key fires, emits
    /// `f(key, window, a, b)` for every record `a` of the first stream and
    /// `b` of the second in it — the `a`s in event-time order, then tuple
    /// ID, and for each the `b`s in that order. A window with records of
    /// one side only emits nothing. Records too late for any window are
    /// in [`WindowOutput::late`], tagged with their side.
    pub fn apply<O, F>(&self, name: &str, f: F) -> WindowOutput<O, Two<A, B>>
    where
        O: Data,
        F: Fn(&K, Window, &A, &B) -> O + Send + Sync + 'static,
    {
        self.cogroup_refs(name, move |k, w, a, b, out| {
            for x in a {
                for y in b {
                    out(f(k, w, x, y));
                }
            }
        })
    }

    /// The join operator `name`: when a window of a key fires, `f` sees
    /// the window's records of each side (each in event-time order, then
    /// tuple ID) and emits any number of results (Flink's `coGroup`: one
    /// side may be empty).
    pub fn cogroup<O, F>(&self, name: &str, f: F) -> WindowOutput<O, Two<A, B>>
    where
        O: Data,
        F: Fn(&K, Window, &[A], &[B], &mut dyn FnMut(O)) + Send + Sync + 'static,
    {
        self.cogroup_refs(name, move |k, w, a, b, out| {
            let a: Vec<A> = a.iter().map(|x| (*x).clone()).collect();
            let b: Vec<B> = b.iter().map(|y| (*y).clone()).collect();
            f(k, w, &a, &b, out)
        })
    }

    fn cogroup_refs<O, F>(&self, name: &str, f: F) -> WindowOutput<O, Two<A, B>>
    where
        O: Data,
        F: Fn(&K, Window, &[&A], &[&B], &mut dyn FnMut(O)) + Send + Sync + 'static,
    {
        let (mut first, second, key) = tagged(&self.left, &self.right, name);
        first.standby = self.standby.clone();
        let windowed = WindowedStream {
            keyed: KeyedStream { stream: first, key },
            windows: self.windows,
            lateness: self.lateness,
            early: None,
            purging: false,
            evictor: None,
            trigger: None,
            all: false,
            more: vec![second],
        };
        windowed.process(name, move |k, w, recs: &[Two<A, B>], out| {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for r in recs {
                match r {
                    Two::First(x) => a.push(x),
                    Two::Second(y) => b.push(y),
                }
            }
            f(k, w, &a, &b, out)
        })
    }
}

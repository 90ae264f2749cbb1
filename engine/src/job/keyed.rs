//! Keyed streams and their keyed operators (`process`, `reduce`,
//! `aggregate`, `connect`); windows, process functions in event time and
//! the interval join are in `window.rs` and `join.rs`.

use super::co::KeyedConnected;
use super::out_kits;
use super::{add_node_with, BoxCollector, Data, Stream};
use crate::operator::{KeyedProcess, OperatorInfo, Output};
use crate::record::Record;
use crate::runtime::chain::{KeyedOp, StateCodec};
use crate::runtime::graph::{self, downcast, AnyBox, BuildCx, NodeKind};
use crate::state::{KeyedState, StateSnapshot};
use std::hash::Hash;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

/// A stream partitioned by key, ready for a keyed operator.
pub struct KeyedStream<K, T> {
    pub(super) stream: Stream<T>,
    pub(super) key: Arc<dyn Fn(&T) -> K + Send + Sync>,
}

impl<K, T> KeyedStream<K, T> {
    /// Refuses the job at `build()` with `e` (a structural mistake found
    /// while adding an operator).
    pub(crate) fn refuse(&self, e: crate::error::BuildError) {
        self.stream.job.borrow_mut().errors.push(e);
    }
}

impl<K, T: Data + crate::standby::Codec + Sync> KeyedStream<K, T> {
    /// The keyed operator built next on this stream (`process`, `reduce`,
    /// `aggregate`, `process_timed`, `window(..)…`) gets an active standby:
    /// the mark [`Stream::standby`] puts before the `key_by`, put here
    /// where the operator is built — the one rule for every operator:
    /// `.standby()` right before the call that builds it
    /// (`s.standby().map(..)`, `s.key_by(k).standby().process(..)`,
    /// `s.key_by(k).window(w).standby().process(..)`,
    /// `a.connect(&b).standby().process(..)`,
    /// `a.interval_join(&b, ..).standby().process(..)`).
    pub fn standby(&self) -> Self {
        KeyedStream {
            stream: self.stream.standby(),
            key: Arc::clone(&self.key),
        }
    }
}

impl<K, T> Clone for KeyedStream<K, T> {
    fn clone(&self) -> Self {
        KeyedStream {
            stream: self.stream.clone(),
            key: Arc::clone(&self.key),
        }
    }
}

impl<K, T> KeyedStream<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Data,
{
    /// The generic keyed operator: the engine keeps a
    /// [`KeyedProcess::State`] per key.
    pub fn process<U, P, F>(&self, name: &str, factory: F) -> Stream<U>
    where
        U: Data,
        P: KeyedProcess<K, T, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
        KeyedState<K, P::State>: StateSnapshot,
    {
        let key = Arc::clone(&self.key);
        let build: graph::UnaryBuild = Arc::new(move |cx: BuildCx, down: AnyBox| {
            let down = downcast::<BoxCollector<U>>(down, "keyed output");
            let op = KeyedOp::new(
                factory(&cx.info),
                Arc::clone(&key),
                StateCodec::of(),
                down,
                cx,
            );
            Box::new(Box::new(op) as BoxCollector<T>) as AnyBox
        });
        let node = add_node_with(
            &self.stream.job,
            name,
            NodeKind::Unary(build),
            Some(out_kits::<U>()),
            &[self.stream.input()],
            self.stream.standby.clone(),
        );
        {
            let mut job = self.stream.job.borrow_mut();
            job.nodes[node].rescale = graph::Rescale::Keyed;
            job.nodes[node].in_backend = true;
        }
        Stream::new(Rc::clone(&self.stream.job), node)
    }

    /// Connects two streams keyed the same way: records of either with
    /// equal keys reach the same instance of the two-input operator —
    /// orders and payments by order ID, each read once (no broadcast).
    /// The operator is a [`CoProcess`](crate::CoProcess) in arrival order
    /// ([`KeyedConnected::process`]), or a
    /// [`TimedCoProcess`](crate::time::TimedCoProcess) with keyed state and
    /// timers, in the deterministic order of event time, then tuple ID
    /// ([`KeyedConnected::process_timed`]).
    pub fn connect<B: Data>(&self, other: &KeyedStream<K, B>) -> KeyedConnected<K, T, B> {
        KeyedConnected {
            left: self.clone(),
            right: other.clone(),
        }
    }

    /// Emits, for every record, the running reduction of its key's records.
    ///
    /// ```
    /// # use tandem::{IterSource, JobBuilder};
    /// # let job = JobBuilder::new("doc");
    /// # let pairs = job.source("src", |_| IterSource(vec![((1u32, 2u64), 0)].into_iter()));
    /// let running_sum = pairs
    ///     .key_by(|p: &(u32, u64)| p.0)
    ///     .reduce("sum", |a, b| (a.0, a.1 + b.1));
    /// ```
    pub fn reduce<F>(&self, name: &str, f: F) -> Stream<T>
    where
        F: Fn(&T, &T) -> T + Send + Sync + 'static,
        KeyedState<K, Option<T>>: StateSnapshot,
    {
        let f = Arc::new(f);
        self.process(name, move |_| Reduce(Arc::clone(&f)))
    }

    /// Folds every record into its key's state `S` and emits what `f`
    /// returns.
    ///
    /// ```
    /// # use tandem::{IterSource, JobBuilder};
    /// # let job = JobBuilder::new("doc");
    /// # let clicks = job.source("src", |_| IterSource(vec![(7u32, 0)].into_iter()));
    /// let counts = clicks
    ///     .key_by(|user: &u32| *user)
    ///     .aggregate("count", |n: &mut u64, user: &u32| { *n += 1; (*user, *n) });
    /// ```
    pub fn aggregate<S, U, F>(&self, name: &str, f: F) -> Stream<U>
    where
        S: Default + Clone + 'static,
        U: Data,
        F: Fn(&mut S, &T) -> U + Send + Sync + 'static,
        KeyedState<K, S>: StateSnapshot,
    {
        let f = Arc::new(f);
        self.process(name, move |_| Aggregate(Arc::clone(&f), PhantomData))
    }
}

struct Reduce<F>(Arc<F>);

impl<K, T: Clone + 'static, F: Fn(&T, &T) -> T + 'static> KeyedProcess<K, T, T> for Reduce<F> {
    type State = Option<T>;
    fn process(&mut self, _k: &K, acc: &mut Option<T>, rec: Record<T>, out: &mut Output<'_, T>) {
        let next = match acc.take() {
            Some(a) => (self.0)(&a, &rec.value),
            None => rec.value,
        };
        *acc = Some(next.clone());
        out.emit(next);
    }
}

struct Aggregate<F, S>(Arc<F>, PhantomData<fn() -> S>);

impl<K, T, U, S, F> KeyedProcess<K, T, U> for Aggregate<F, S>
where
    S: Default + Clone + 'static,
    F: Fn(&mut S, &T) -> U + 'static,
{
    type State = S;
    fn process(&mut self, _k: &K, s: &mut S, rec: Record<T>, out: &mut Output<'_, U>) {
        let v = (self.0)(s, &rec.value);
        out.emit(v);
    }
}

//! Two keyed streams connected ([`KeyedStream::connect`]): a two-input
//! operator in arrival order, or one in event time with keyed state and
//! timers — the deterministic merge of its inputs.

use super::join::{tagged, timed_node};
use super::union::{untag, Two};
use super::{Data, KeyedStream, Stream};
use crate::operator::{CoProcess, OperatorInfo, Output};
use crate::record::Record;
use crate::runtime::standby::kit::SKit;
use crate::standby::codec::Codec;
use crate::state::{KeyedState, StateSnapshot};
use crate::time::process::{Timed, TimedCoProcess, TimedProcess, TimerContext};
use crate::time::window::WindowSide;
use std::hash::Hash;
use std::marker::PhantomData;

/// Two keyed streams connected ([`KeyedStream::connect`]).
pub struct KeyedConnected<K, A, B> {
    pub(super) left: KeyedStream<K, A>,
    pub(super) right: KeyedStream<K, B>,
}

/// Two keyed streams connected, for an operator with an active standby
/// ([`KeyedConnected::standby`]).
pub struct KeyedStandbyConnected<K, A, B>(KeyedConnected<K, A, B>);

impl<K, A, B> KeyedConnected<K, A, B>
where
    K: Hash + Eq + Clone + Send + 'static,
    A: Data,
    B: Data,
{
    /// The two-input operator in the order its inputs arrive (see
    /// [`crate::Connected::process`]): `factory` builds a [`CoProcess`]
    /// per instance. What it computes may depend on how its inputs
    /// interleave; [`process_timed`](Self::process_timed) does not.
    pub fn process<U, P, F>(&self, name: &str, factory: F) -> Stream<U>
    where
        U: Data,
        P: CoProcess<A, B, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
    {
        self.left
            .stream
            .connect(&self.right.stream)
            .process(name, factory)
    }

    /// The two-input operator in event time (Flink's
    /// `KeyedCoProcessFunction`): `factory` builds a [`TimedCoProcess`]
    /// per instance. The engine keeps its `State` per key and its timers,
    /// and merges the two inputs deterministically: it takes each record
    /// once the watermarks of both inputs have passed it, in the order of
    /// event time, then tuple ID (a late record at the watermark of the
    /// lane it came on) — so the operator computes the same on every run,
    /// after any restart or takeover. Both streams' sources need
    /// watermarks.
    pub fn process_timed<U, P, F>(&self, name: &str, factory: F) -> Stream<U>
    where
        U: Data,
        P: TimedCoProcess<K, A, B, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
        KeyedState<K, Timed<P::State>>: StateSnapshot,
        WindowSide<Two<A, B>>: StateSnapshot,
    {
        self.timed(name, factory, None)
    }

    fn timed<U, P, F>(
        &self,
        name: &str,
        factory: F,
        standby: Option<crate::runtime::graph::RoleKit>,
    ) -> Stream<U>
    where
        U: Data,
        P: TimedCoProcess<K, A, B, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
        KeyedState<K, Timed<P::State>>: StateSnapshot,
        WindowSide<Two<A, B>>: StateSnapshot,
    {
        let (first, second, key) = tagged(&self.left, &self.right, name);
        timed_node(
            &first,
            name,
            key,
            move |info| Co(factory(info), PhantomData),
            standby,
            &[&second],
        )
    }
}

impl<K, A, B> KeyedConnected<K, A, B>
where
    A: Data + Codec + Sync,
    B: Data + Codec + Sync,
{
    /// The operator gets an active standby (see
    /// [`crate::Connected::standby`]): both inputs in its buffer queues, in
    /// the order its primary took them.
    pub fn standby(self) -> KeyedStandbyConnected<K, A, B> {
        KeyedStandbyConnected(self)
    }
}

impl<K, A, B> KeyedStandbyConnected<K, A, B>
where
    K: Hash + Eq + Clone + Send + 'static,
    A: Data + Codec + Sync,
    B: Data + Codec + Sync,
{
    /// [`KeyedConnected::process`], with the standby.
    pub fn process<U, P, F>(&self, name: &str, factory: F) -> Stream<U>
    where
        U: Data,
        P: CoProcess<A, B, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
    {
        let KeyedConnected { left, right } = &self.0;
        left.stream
            .connect(&right.stream)
            .standby()
            .process(name, factory)
    }

    /// [`KeyedConnected::process_timed`], with the standby.
    pub fn process_timed<U, P, F>(&self, name: &str, factory: F) -> Stream<U>
    where
        U: Data,
        P: TimedCoProcess<K, A, B, U>,
        F: Fn(&OperatorInfo) -> P + Send + Sync + 'static,
        KeyedState<K, Timed<P::State>>: StateSnapshot,
        WindowSide<Two<A, B>>: StateSnapshot,
    {
        self.0.timed(name, factory, Some(SKit::<Two<A, B>>::arc()))
    }
}

/// A [`TimedCoProcess`] as the [`TimedProcess`] over its tagged inputs.
struct Co<P, A, B>(P, PhantomData<fn(A, B)>);

impl<K, A, B, O, P> TimedProcess<K, Two<A, B>, O> for Co<P, A, B>
where
    A: 'static,
    B: 'static,
    P: TimedCoProcess<K, A, B, O>,
{
    type State = P::State;
    const EXPIRES: bool = P::EXPIRES;

    fn process(
        &mut self,
        key: &K,
        state: &mut P::State,
        rec: Record<Two<A, B>>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, O>,
    ) {
        match untag(rec) {
            Two::First(r) => self.0.process_first(key, state, r, cx, out),
            Two::Second(r) => self.0.process_second(key, state, r, cx, out),
        }
    }

    fn on_timer(
        &mut self,
        key: &K,
        state: &mut P::State,
        at: u64,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, O>,
    ) {
        self.0.on_timer(key, state, at, cx, out)
    }

    fn on_processing_timer(
        &mut self,
        key: &K,
        state: &mut P::State,
        at: u64,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, O>,
    ) {
        self.0.on_processing_timer(key, state, at, cx, out)
    }

    fn has_expired(&self, state: &P::State, now: u64) -> bool {
        self.0.has_expired(state, now)
    }

    fn expire(&self, state: &mut P::State, now: u64) {
        self.0.expire(state, now)
    }

    fn is_empty(&self, state: &P::State) -> bool {
        self.0.is_empty(state)
    }

    fn is_empty_at(&self, state: &P::State, now: u64) -> bool {
        self.0.is_empty_at(state, now)
    }

    fn on_end(&mut self, key: &K, state: &mut P::State, out: &mut Output<'_, O>) {
        self.0.on_end(key, state, out)
    }
}

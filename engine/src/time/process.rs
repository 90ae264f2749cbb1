//! Keyed process functions in event time: per-key state and timers, records
//! taken in the deterministic order windows take them in (event time, then
//! tuple ID; see [`crate::time::window`]).

use crate::operator::Output;
use crate::record::Record;
use rkyv::{Archive, Deserialize, Serialize};
use smallvec::SmallVec;

/// A keyed operator in event time, as Flink's `KeyedProcessFunction`: the
/// engine keeps a `State` per key and the key's event-time timers, hands
/// it the key's records in event-time order (a late record at the
/// watermark of the lane it came on), then tuple ID, and calls
/// [`on_timer`](Self::on_timer) when the watermark reaches a timer — before
/// any record released at or after it. Built with
/// [`KeyedStream::process_timed`](crate::KeyedStream::process_timed); its
/// sources need watermarks.
///
/// ```
/// use tandem::time::{TimedProcess, TimerContext};
/// use tandem::{Output, Record};
///
/// /// Emits a key's count of records once it has been quiet for 1 ms of
/// /// event time.
/// struct Quiet;
///
/// impl TimedProcess<u32, u32, (u32, u64)> for Quiet {
///     type State = (u64, u64); // (count, the timer set)
///     fn process(&mut self, _k: &u32, s: &mut (u64, u64), r: Record<u32>,
///                cx: &mut TimerContext<'_>, _out: &mut Output<'_, (u32, u64)>) {
///         s.0 += 1;
///         cx.delete(s.1);
///         s.1 = r.event_time + 1_000_000;
///         cx.register(s.1);
///     }
///     fn on_timer(&mut self, k: &u32, s: &mut (u64, u64), _at: u64,
///                 _cx: &mut TimerContext<'_>, out: &mut Output<'_, (u32, u64)>) {
///         out.emit((*k, s.0));
///         s.0 = 0;
///     }
/// }
/// ```
pub trait TimedProcess<K, T, O>: 'static {
    /// Per-key state, created with `Default` on a key's first record
    /// (`Clone`: see [`crate::KeyedProcess::State`]).
    type State: Default + Clone + 'static;
    /// Handles one record of `key`.
    fn process(
        &mut self,
        key: &K,
        state: &mut Self::State,
        rec: Record<T>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, O>,
    );
    /// Processing-time timer `at` of `key` fired (see
    /// [`TimerContext::register_processing_time`]). Does nothing unless
    /// overridden.
    fn on_processing_timer(
        &mut self,
        _key: &K,
        _state: &mut Self::State,
        _at: u64,
        _cx: &mut TimerContext<'_>,
        _out: &mut Output<'_, O>,
    ) {
    }

    /// Timer `at` of `key` fired: the watermark reached it. Does nothing
    /// unless overridden (a function that registers no event-time timer
    /// need not write it).
    fn on_timer(
        &mut self,
        _key: &K,
        _state: &mut Self::State,
        _at: u64,
        _cx: &mut TimerContext<'_>,
        _out: &mut Output<'_, O>,
    ) {
    }
    /// `true` when `State` holds TTL state ([`crate::state::ttl`]): after
    /// each record the engine then visits [`CLEANED_PER_RECORD`] keys, in
    /// insertion order round and round, and calls
    /// [`expire`](Self::expire) on those whose state
    /// [`has_expired`](Self::has_expired) at the operator's event time
    /// (the incremental clean-up).
    const EXPIRES: bool = false;

    /// Whether anything in `state` has expired at `now` (read only; with
    /// [`EXPIRES`](Self::EXPIRES)). For a state that implements
    /// [`Expire`](crate::state::ttl::Expire): `state.has_expired(now)`.
    fn has_expired(&self, _state: &Self::State, _now: u64) -> bool {
        false
    }

    /// Drops what has expired in `state` at `now` (with
    /// [`EXPIRES`](Self::EXPIRES)). For a state that implements
    /// [`Expire`](crate::state::ttl::Expire): `state.expire(now)`.
    fn expire(&self, _state: &mut Self::State, _now: u64) {}

    /// Whether the key's state holds nothing worth keeping. When it does
    /// not and the key has no timers either, the engine removes the key
    /// after the call: its memory is freed, snapshots stop carrying it,
    /// [`on_end`](Self::on_end) is not called for it, and a later record
    /// of it starts from `Default` again (coming after the keys already
    /// there in the order `on_end` visits them). Default: `false`, every
    /// key is kept. A state whose emptiness depends on the time (TTL
    /// state) answers [`is_empty_at`](Self::is_empty_at) instead.
    fn is_empty(&self, _state: &Self::State) -> bool {
        false
    }

    /// As [`is_empty`](Self::is_empty), at `now`: the operator's event
    /// time, the time TTL state expires by — for a TTL state,
    /// `state.is_empty_at(now)` ([`MapState`](crate::state::ttl::MapState),
    /// [`ListState`](crate::state::ttl::ListState),
    /// [`ValueState`](crate::state::ttl::ValueState)). The engine asks this
    /// one; its default asks [`is_empty`](Self::is_empty).
    fn is_empty_at(&self, state: &Self::State, _now: u64) -> bool {
        self.is_empty(state)
    }

    /// Called once per key after the last input record (every timer has
    /// fired: the end of the input is a watermark past every time).
    fn on_end(&mut self, _key: &K, _state: &mut Self::State, _out: &mut Output<'_, O>) {}
}

/// A keyed two-input operator in event time, as Flink's
/// `KeyedCoProcessFunction`: a [`TimedProcess`] whose records come from
/// two inputs ([`KeyedConnected::process_timed`](crate::KeyedConnected::process_timed)),
/// taken from both in one deterministic order — event time, then tuple
/// ID (tuple IDs name their source, so two inputs' records never tie).
/// Per-key state, event- and processing-time timers and TTL clean-up are
/// as [`TimedProcess`]'s.
pub trait TimedCoProcess<K, A, B, O>: 'static {
    /// Per-key state, created with `Default` on a key's first record.
    type State: Default + Clone + 'static;
    /// As [`TimedProcess::EXPIRES`].
    const EXPIRES: bool = false;
    /// Handles one record of the first input.
    fn process_first(
        &mut self,
        key: &K,
        state: &mut Self::State,
        rec: Record<A>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, O>,
    );
    /// Handles one record of the second input.
    fn process_second(
        &mut self,
        key: &K,
        state: &mut Self::State,
        rec: Record<B>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, O>,
    );
    /// As [`TimedProcess::on_timer`] (does nothing unless overridden).
    fn on_timer(
        &mut self,
        _key: &K,
        _state: &mut Self::State,
        _at: u64,
        _cx: &mut TimerContext<'_>,
        _out: &mut Output<'_, O>,
    ) {
    }
    /// As [`TimedProcess::on_processing_timer`].
    fn on_processing_timer(
        &mut self,
        _key: &K,
        _state: &mut Self::State,
        _at: u64,
        _cx: &mut TimerContext<'_>,
        _out: &mut Output<'_, O>,
    ) {
    }
    /// As [`TimedProcess::has_expired`].
    fn has_expired(&self, _state: &Self::State, _now: u64) -> bool {
        false
    }
    /// As [`TimedProcess::expire`].
    fn expire(&self, _state: &mut Self::State, _now: u64) {}
    /// As [`TimedProcess::is_empty`].
    fn is_empty(&self, _state: &Self::State) -> bool {
        false
    }
    /// As [`TimedProcess::is_empty_at`].
    fn is_empty_at(&self, state: &Self::State, _now: u64) -> bool {
        self.is_empty(state)
    }
    /// As [`TimedProcess::on_end`].
    fn on_end(&mut self, _key: &K, _state: &mut Self::State, _out: &mut Output<'_, O>) {}
}

/// Keys the incremental clean-up of TTL state visits after each record
/// ([`TimedProcess::EXPIRES`]).
pub const CLEANED_PER_RECORD: u32 = 2;

/// What a [`TimedProcess`] call is given besides its key and state: the
/// operator's event time and processing time, and the key's timers of
/// both.
///
/// ## Processing time
///
/// Processing time is the job's clock: nanoseconds since the job started,
/// in steps of a millisecond. It is what the operator was told last, not
/// a read of the clock: the engine tells it once a millisecond (and when a
/// timer is due while no input comes). With a standby, each of those
/// steps is an entry of the operator's determinant log at its place in
/// the input, so a standby replaying the input sees the same processing
/// time at every record and fires every processing-time timer where the
/// primary did (Clonos's way). Under restart-all the replay after a
/// restart runs on the clock again, as Flink's does. Processing-time
/// timers still pending at the end of the input do not fire.
pub struct TimerContext<'a> {
    pub(crate) now: u64,
    pub(crate) ptime: u64,
    pub(crate) timers: &'a mut SmallVec<[u64; 2]>,
    pub(crate) ptimers: &'a mut SmallVec<[u64; 1]>,
    /// Timers registered in this call (the operator indexes them).
    pub(crate) added: &'a mut Added,
}

/// Timers registered in one call, to index.
#[derive(Default)]
pub(crate) struct Added {
    pub(crate) event: Vec<u64>,
    pub(crate) processing: Vec<u64>,
}

impl TimerContext<'_> {
    /// The event time the operator is at: the record's (for a late record,
    /// the watermark of its lane: `rec.event_time < cx.now()` says it is
    /// late), or the timer's.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Registers an event-time timer of the key at `at` (once: registering
    /// the same time again does nothing). A timer at or before
    /// [`now`](Self::now) fires before the operator's next record.
    pub fn register(&mut self, at: u64) {
        if !self.timers.contains(&at) {
            self.timers.push(at);
            self.added.event.push(at);
        }
    }

    /// Deletes the key's timer at `at`, if it has one.
    pub fn delete(&mut self, at: u64) {
        self.timers.retain(|t| *t != at);
    }

    /// The key's pending timers.
    pub fn timers(&self) -> &[u64] {
        self.timers
    }

    /// The operator's processing time (see the type's docs).
    pub fn processing_time(&self) -> u64 {
        self.ptime
    }

    /// Registers a processing-time timer of the key at `at` (once): it
    /// fires ([`TimedProcess::on_processing_timer`]) when processing time
    /// reaches it — at the next step, if it has already.
    pub fn register_processing_time(&mut self, at: u64) {
        if !self.ptimers.contains(&at) {
            self.ptimers.push(at);
            self.added.processing.push(at);
        }
    }

    /// Deletes the key's processing-time timer at `at`, if it has one.
    pub fn delete_processing_time(&mut self, at: u64) {
        self.ptimers.retain(|t| *t != at);
    }

    /// The key's pending processing-time timers.
    pub fn processing_timers(&self) -> &[u64] {
        self.ptimers
    }
}

/// A key's state in a timed operator: the function's, and its timers (in
/// the key's keyed state, so snapshots hold them).
#[derive(Clone, Debug, Default, Archive, Serialize, Deserialize)]
pub struct Timed<S> {
    /// The function's state.
    pub user: S,
    /// The key's pending timers.
    pub timers: SmallVec<[u64; 2]>,
    /// The key's pending processing-time timers.
    pub ptimers: SmallVec<[u64; 1]>,
}

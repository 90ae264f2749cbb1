//! Windows: which windows a record belongs to, and what a key keeps of its
//! open windows.
//!
//! A keyed stream is windowed with
//! [`KeyedStream::window`](crate::KeyedStream::window) and one of
//! [`Windows`]; the windowed stream is aggregated incrementally
//! ([`WindowAggregate`], `reduce`) or by a function over all of a window's
//! records (`process`). What the operator does, in the order it does it:
//!
//! 1. **A deterministic order.** Records are taken in the order of their
//!    event time (a late record: at the watermark of the lane it came on),
//!    then tuple ID — not in the order their lanes happened to interleave —
//!    and each is released once the operator's watermark has passed it. So
//!    a window's contents, when it fires and which records are late are
//!    the same in every run of the same input: after a restart, after a
//!    standby's takeover, on any number of cores.
//! 2. **Windows fire at the watermark.** A window `[start, end)` fires once
//!    the watermark reaches `end` (every record before `end` has been
//!    taken), emitting its result with event time `end - 1`; a count window
//!    fires with its `size`-th record. At the end of the input every time
//!    window fires (an incomplete count window does not, as in Flink).
//! 3. **Lateness.** A record whose event time is below the watermark of its
//!    lane is late. Within the *allowed lateness* of its window's end it is
//!    added to the window, which fires again with it (a late firing);
//!    beyond it, it goes to the **late side output** — counted in the
//!    operator's report and never silently dropped. A window's state is
//!    dropped once the watermark passes its end plus the allowed lateness.
//!
//! Window contents, the records waiting for the watermark and the timers
//! are part of the operator's snapshots and of a standby's recovery points.

use rkyv::{Archive, Deserialize, Serialize};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::time::Duration;

/// A window: event times `start .. end` (nanoseconds) — for a count window,
/// the key's records numbered `start .. end`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Archive, Serialize, Deserialize,
)]
pub struct Window {
    /// The first event time (record number) in the window.
    pub start: u64,
    /// One past the last.
    pub end: u64,
}

impl Window {
    /// The largest event time in the window: a result's event time.
    pub fn max_timestamp(&self) -> u64 {
        self.end.saturating_sub(1)
    }
}

/// The kinds of windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Windows {
    /// Fixed, non-overlapping windows of `size` starting at multiples of
    /// `size` (plus `offset`).
    Tumbling {
        /// Window length, nanoseconds.
        size: u64,
        /// Shift of the window starts, nanoseconds (less than `size`).
        offset: u64,
    },
    /// Windows of `size` starting every `slide`: a record is in
    /// `size / slide` of them.
    Sliding {
        /// Window length, nanoseconds.
        size: u64,
        /// Distance between window starts, nanoseconds.
        slide: u64,
    },
    /// Per key, records less than `gap` apart in event time are in one
    /// window (a session), which ends `gap` after its last record.
    Session {
        /// Inactivity gap, nanoseconds.
        gap: u64,
    },
    /// Per key, every `size` records (in event-time order) are a window.
    Count {
        /// Records per window.
        size: u64,
    },
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Windows {
    /// Tumbling windows of `size`.
    pub fn tumbling(size: Duration) -> Self {
        Windows::Tumbling {
            size: nanos(size),
            offset: 0,
        }
    }

    /// Sliding windows of `size` every `slide`.
    pub fn sliding(size: Duration, slide: Duration) -> Self {
        Windows::Sliding {
            size: nanos(size),
            slide: nanos(slide),
        }
    }

    /// Session windows closed by a `gap` of inactivity.
    pub fn session(gap: Duration) -> Self {
        Windows::Session { gap: nanos(gap) }
    }

    /// Count windows of `size` records.
    pub fn count(size: u64) -> Self {
        Windows::Count { size }
    }

    /// Why these windows cannot be used, if so.
    pub(crate) fn invalid(&self) -> Option<String> {
        match *self {
            Windows::Tumbling { size: 0, .. } | Windows::Sliding { size: 0, .. } => {
                Some("a window size must be positive".into())
            }
            Windows::Tumbling { size, offset } if offset >= size => Some(format!(
                "offset {offset} ns is not below the size {size} ns"
            )),
            Windows::Sliding { slide: 0, .. } => Some("a slide must be positive".into()),
            Windows::Sliding { size, slide } if size / slide > 4096 => Some(format!(
                "{} overlapping windows per record (size / slide); at most 4096",
                size / slide
            )),
            Windows::Session { gap: 0 } => Some("a session gap must be positive".into()),
            Windows::Count { size: 0 } => Some("a count window needs at least one record".into()),
            _ => None,
        }
    }

    /// The time windows a record of event time `t` belongs to, earliest
    /// first (not for count windows).
    fn time_windows(&self, t: u64, out: &mut Vec<Window>) {
        out.clear();
        match *self {
            Windows::Tumbling { size, offset } => {
                // Before the first full window: the part of the one before.
                let w = if t < offset {
                    Window {
                        start: 0,
                        end: offset,
                    }
                } else {
                    let start = t - (t - offset) % size;
                    Window {
                        start,
                        end: start.saturating_add(size),
                    }
                };
                out.push(w);
            }
            Windows::Sliding { size, slide } => {
                let last = t - (t % slide);
                let mut start = last;
                loop {
                    out.push(Window {
                        start,
                        end: start.saturating_add(size),
                    });
                    if start < slide || start - slide + size <= t {
                        break;
                    }
                    start -= slide;
                }
                out.reverse();
            }
            Windows::Session { gap } => out.push(Window {
                start: t,
                end: t.saturating_add(gap),
            }),
            Windows::Count { .. } => {}
        }
    }
}

/// When a kind's windows fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// When the watermark passes the window's end (and again for each late
    /// record within the allowed lateness).
    EventTime,
    /// When the window holds this many records (in event-time order); no
    /// timers, no lateness.
    Count(u64),
}

/// Firings of a time window before its end (Flink's early-firing
/// triggers: a `CountTrigger` or a `ContinuousEventTimeTrigger` beside the
/// window's event-time trigger). The window still fires when the
/// watermark passes its end. Early results are emitted in the window's
/// envelope (event time: its last instant), like the final one; they
/// depend on the records alone, in event-time order, so they are the same
/// in every run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyFiring {
    /// Each time this many records have joined the window since it last
    /// fired.
    Count(u64),
    /// Each time the watermark passes another multiple of this much event
    /// time after the window's start.
    Every(Duration),
}

/// What a [`WindowTrigger`] decides for the window a record joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerAction {
    /// Nothing now.
    Continue,
    /// The window fires now (and again when the watermark passes its
    /// end).
    Fire,
    /// The window fires now and clears its accumulator: later results
    /// cover the records after this one (Flink's `FIRE_AND_PURGE`).
    FireAndPurge,
}

/// A custom early-firing rule for tumbling and sliding windows (Flink's
/// `Trigger::onElement`), set with `WindowedStream::trigger`: asked each
/// time a record joins a window — the record, its event time, the window,
/// and how many records joined it since it last fired, this one included.
/// It sees nothing else (no clock, no state of its own), so the windows
/// fire at the same records in every run, after any restart or takeover;
/// the window still fires when the watermark passes its end.
///
/// A closure `Fn(&T, u64, Window, u64) -> TriggerAction` is one.
pub trait WindowTrigger<T>: Send + Sync + 'static {
    /// Whether the window `window` fires now that `value` (at
    /// `event_time`) joined it, the `since`-th record since it last fired.
    fn on_record(&self, value: &T, event_time: u64, window: Window, since: u64) -> TriggerAction;
}

impl<T, F> WindowTrigger<T> for F
where
    F: Fn(&T, u64, Window, u64) -> TriggerAction + Send + Sync + 'static,
{
    fn on_record(&self, value: &T, event_time: u64, window: Window, since: u64) -> TriggerAction {
        self(value, event_time, window, since)
    }
}

/// What the window operator asks of a window kind (Flink's window assigner
/// and its default trigger): which windows a record joins, whether a key's
/// windows merge, when they fire, how late a record may be. The operator
/// (`runtime/chain/window.rs`) decides by these alone, so a new kind is
/// an implementation of this — for [`Windows`], one arm in each method
/// below — and its tests.
pub(crate) trait WindowAssigner {
    /// When windows of this kind fire.
    fn trigger(&self) -> Trigger;
    /// Whether a key's overlapping windows merge into one (sessions).
    fn merging(&self) -> bool;
    /// The windows a record at event time `t` belongs to, earliest first
    /// (an event-time kind; a merging kind gives the record's own window,
    /// to be merged with the key's).
    fn assign(&self, t: u64, out: &mut Vec<Window>);
    /// The lateness allowed for these windows, of the `allowed` asked for
    /// (a count window's records are never late).
    fn lateness(&self, allowed: u64) -> u64 {
        match self.trigger() {
            Trigger::EventTime => allowed,
            Trigger::Count(_) => 0,
        }
    }
}

impl WindowAssigner for Windows {
    fn trigger(&self) -> Trigger {
        match *self {
            Windows::Count { size } => Trigger::Count(size),
            Windows::Tumbling { .. } | Windows::Sliding { .. } | Windows::Session { .. } => {
                Trigger::EventTime
            }
        }
    }

    fn merging(&self) -> bool {
        matches!(self, Windows::Session { .. })
    }

    fn assign(&self, t: u64, out: &mut Vec<Window>) {
        self.time_windows(t, out)
    }
}

/// Incremental aggregation of a window's records, as Flink's
/// `AggregateFunction`: an accumulator per key and window, a record added
/// at a time, two merged when sessions merge, the result when the window
/// fires.
///
/// ```
/// use tandem::time::{Window, WindowAggregate};
///
/// /// Clicks per user and window.
/// struct CountClicks;
///
/// impl WindowAggregate<u32, u32, (u32, u64, u64)> for CountClicks {
///     type Acc = u64;
///     fn add(&self, n: &mut u64, _user: &u32) { *n += 1; }
///     fn merge(&self, n: &mut u64, other: u64) { *n += other; }
///     fn result(&self, user: &u32, w: Window, n: &u64) -> (u32, u64, u64) {
///         (*user, w.start, *n)
///     }
/// }
/// ```
pub trait WindowAggregate<K, T, O>: Send + Sync + 'static {
    /// The accumulator (`Default`: empty). `Clone`: see
    /// [`crate::KeyedProcess::State`].
    type Acc: Default + Clone + 'static;
    /// Whether the result depends only on which records were added, not on
    /// the order they were added in (a count, a sum, a minimum; default
    /// `false`). The operator then adds a record that is on time to its
    /// windows at once, instead of holding it until the watermark passes
    /// it to take the records in event-time order — which is what most of
    /// a window's cost is. Declaring it for an aggregate whose result does
    /// depend on the order makes the results depend on how the input lanes
    /// interleaved.
    const COMMUTATIVE: bool = false;
    /// Adds one record.
    fn add(&self, acc: &mut Self::Acc, value: &T);
    /// Merges `other` into `acc` (session windows that come to overlap).
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc);
    /// The window's result when it fires.
    fn result(&self, key: &K, window: Window, acc: &Self::Acc) -> O;
}

/// One window a key has open: its bounds, accumulator, whether it fired,
/// and the envelope its results carry (the largest tuple ID among its
/// records, and that record's ingest stamp).
#[derive(Clone, Debug, Archive, Serialize, Deserialize)]
pub struct Open<A> {
    /// The window.
    pub window: Window,
    /// Its accumulator.
    pub acc: A,
    /// It fired at least once (its state stays for late records until the
    /// watermark passes its end plus the allowed lateness).
    pub fired: bool,
    /// The largest tuple ID among its records (`u64::MAX`: none yet).
    pub last_id: u64,
    /// That record's ingest stamp.
    pub ingest: u64,
    /// Records added since it last fired (early firing by count).
    pub since: u64,
}

impl<A> Open<A> {
    /// A trigger purged the window (`TriggerAction::FireAndPurge`): it
    /// holds no record until the next, and a firing with none since says
    /// nothing (the next record's tuple ID heads the results' envelope).
    pub(crate) fn purge_mark(&mut self) {
        self.last_id = u64::MAX;
    }

    /// Whether a trigger purged the window and no record came since.
    pub(crate) fn purged(&self) -> bool {
        self.last_id == u64::MAX
    }

    /// Record `id` (ingested at `ingest`) was added: the window's results
    /// carry the largest tuple ID of its records — the same whatever order
    /// they were added in.
    #[inline]
    pub(crate) fn note(&mut self, id: u64, ingest: u64) {
        if self.last_id == u64::MAX || id > self.last_id {
            self.last_id = id;
            self.ingest = ingest;
        }
    }
}

/// A key's windows: the open ones, in order of their start, and — for
/// count windows — how many records the key has had. The first open window
/// is inline (in the keyed state's entry, read with the key).
#[derive(Clone, Debug, Default, Archive, Serialize, Deserialize)]
pub struct KeyWindows<A> {
    /// Open windows by start.
    pub open: SmallVec<[Open<A>; 1]>,
    /// Records counted (count windows).
    pub count: u64,
}

impl<A> KeyWindows<A> {
    /// The open window `w`, created empty if missing (kept in order of
    /// start), and whether it was.
    #[inline]
    pub(crate) fn slot(&mut self, w: Window) -> (&mut Open<A>, bool)
    where
        A: Default,
    {
        // Most keys have one window open: the one the record is in.
        if self.open.len() == 1 && self.open[0].window == w {
            return (&mut self.open[0], false);
        }
        let (i, created) = match self.open.binary_search_by(|o| o.window.cmp(&w)) {
            Ok(i) => (i, false),
            Err(i) => {
                self.open.insert(
                    i,
                    Open {
                        window: w,
                        acc: A::default(),
                        fired: false,
                        last_id: u64::MAX,
                        ingest: u64::MAX,
                        since: 0,
                    },
                );
                (i, true)
            }
        };
        (&mut self.open[i], created)
    }

    /// Merges the session window `w` with every open window it overlaps:
    /// returns the merged window's index. `merge` folds accumulators.
    pub(crate) fn merge_session(&mut self, w: Window, mut merge: impl FnMut(&mut A, A)) -> usize
    where
        A: Default,
    {
        let mut lo = w.start;
        let mut hi = w.end;
        let overlapping: Vec<usize> = (0..self.open.len())
            .filter(|&i| {
                let o = self.open[i].window;
                o.start < w.end && w.start < o.end
            })
            .collect();
        for &i in &overlapping {
            lo = lo.min(self.open[i].window.start);
            hi = hi.max(self.open[i].window.end);
        }
        let merged = Window { start: lo, end: hi };
        if overlapping.is_empty() {
            self.slot(merged);
        } else {
            // Fold the overlapping windows, earliest first, into the first.
            let first = overlapping[0];
            let mut rest: SmallVec<[Open<A>; 2]> = SmallVec::new();
            for &i in overlapping[1..].iter().rev() {
                rest.push(self.open.remove(i));
            }
            let target = &mut self.open[first];
            for o in rest.into_iter().rev() {
                merge(&mut target.acc, o.acc);
                target.fired |= o.fired;
                if o.last_id != u64::MAX {
                    target.note(o.last_id, o.ingest);
                }
            }
            target.window = merged;
        }
        self.open
            .binary_search_by(|o| o.window.cmp(&merged))
            .expect("the merged window is open")
    }
}

/// A record waiting for the watermark in a window operator (its layout in
/// snapshots).
#[derive(Clone, Debug, Archive, Serialize, Deserialize)]
pub struct Waiting<T> {
    pub(crate) release: u64,
    pub(crate) id: u64,
    pub(crate) lane: u32,
    pub(crate) arrival: u64,
    pub(crate) event_time: u64,
    pub(crate) ingest: u64,
    pub(crate) value: T,
}

impl<T> Waiting<T> {
    #[inline]
    fn order(&self) -> (u64, u64, u32, u64) {
        (self.release, self.id, self.lane, self.arrival)
    }
}

impl<T> PartialEq for Waiting<T> {
    fn eq(&self, o: &Self) -> bool {
        self.order() == o.order()
    }
}
impl<T> Eq for Waiting<T> {}
impl<T> PartialOrd for Waiting<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Waiting<T> {
    /// Reversed: the heap's top is the first to release.
    fn cmp(&self, o: &Self) -> Ordering {
        o.order().cmp(&self.order())
    }
}

/// What a window operator keeps beside its keyed state — the records
/// waiting for the watermark, in release order, and its clocks — as
/// snapshots hold it.
#[derive(Clone, Debug, Archive, Serialize, Deserialize)]
pub struct WindowSide<T> {
    pub(crate) waiting: Vec<Waiting<T>>,
    pub(crate) wm_in: u64,
    pub(crate) wm_out: u64,
    pub(crate) now: u64,
    pub(crate) arrivals: u64,
    /// A timed operator's processing time (0 in a window operator).
    pub(crate) ptime: u64,
}

impl<T> crate::state::StateSnapshot for WindowSide<T>
where
    T: Archive + Clone + 'static,
    Self: for<'a> Serialize<crate::checkpoint::format::SnapshotSerializer<'a>>,
    <Self as Archive>::Archived: Deserialize<Self, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>
        + rkyv::Portable
        + for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rkyv::rancor::Error>>,
{
    fn snapshot(
        &self,
    ) -> Result<crate::checkpoint::SnapshotBytes, crate::checkpoint::CheckpointError> {
        crate::checkpoint::serialize(self, 64 + self.waiting.len() * 64)
    }

    fn restore(payload: &[u8]) -> Result<Self, crate::checkpoint::CheckpointError> {
        let archived = crate::checkpoint::access::<Self>(payload)?;
        rkyv::deserialize::<Self, rkyv::rancor::Error>(archived)
            .map_err(|source| crate::checkpoint::CheckpointError::Deserialize { source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_says_when_it_fires_whether_it_merges_and_how_late_a_record_may_be() {
        let ms = Duration::from_millis;
        let kinds = [
            (Windows::tumbling(ms(10)), Trigger::EventTime, false, 7),
            (
                Windows::sliding(ms(10), ms(5)),
                Trigger::EventTime,
                false,
                7,
            ),
            (Windows::session(ms(10)), Trigger::EventTime, true, 7),
            (Windows::count(3), Trigger::Count(3), false, 0),
        ];
        for (w, trigger, merging, lateness) in kinds {
            assert_eq!(w.trigger(), trigger, "{w:?}");
            assert_eq!(w.merging(), merging, "{w:?}");
            assert_eq!(w.lateness(7), lateness, "{w:?}");
        }
        // A merging kind gives the record's own window.
        let mut v = Vec::new();
        Windows::session(ms(10)).assign(5, &mut v);
        assert_eq!(
            v,
            vec![Window {
                start: 5,
                end: 10_000_005
            }]
        );
    }

    fn starts(w: &Windows, t: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        w.assign(t, &mut v);
        v.into_iter().map(|w| (w.start, w.end)).collect()
    }

    #[test]
    fn tumbling_and_sliding_windows_cover_each_time_as_defined() {
        let t = Windows::Tumbling {
            size: 10,
            offset: 0,
        };
        assert_eq!(starts(&t, 0), vec![(0, 10)]);
        assert_eq!(starts(&t, 19), vec![(10, 20)]);
        let o = Windows::Tumbling {
            size: 10,
            offset: 3,
        };
        assert_eq!(starts(&o, 12), vec![(3, 13)]);
        assert_eq!(starts(&o, 13), vec![(13, 23)]);
        assert_eq!(starts(&o, 1), vec![(0, 3)]);
        let s = Windows::Sliding { size: 10, slide: 5 };
        assert_eq!(starts(&s, 12), vec![(5, 15), (10, 20)]);
        assert_eq!(starts(&s, 3), vec![(0, 10)]);
        let s3 = Windows::Sliding {
            size: 30,
            slide: 10,
        };
        assert_eq!(starts(&s3, 35), vec![(10, 40), (20, 50), (30, 60)]);
        for t in 0..200 {
            for w in starts(&s3, t) {
                assert!(w.0 <= t && t < w.1, "{t} in {w:?}");
            }
        }
    }

    #[test]
    fn sessions_merge_when_a_record_bridges_them() {
        let mut k = KeyWindows::<u64>::default();
        let i = k.merge_session(Window { start: 0, end: 10 }, |a, b| *a += b);
        k.open[i].acc += 1;
        let i = k.merge_session(Window { start: 20, end: 30 }, |a, b| *a += b);
        k.open[i].acc += 1;
        assert_eq!(k.open.len(), 2);
        let i = k.merge_session(Window { start: 8, end: 22 }, |a, b| *a += b);
        k.open[i].acc += 1;
        assert_eq!(k.open.len(), 1, "{:?}", k.open);
        assert_eq!(k.open[0].window, Window { start: 0, end: 30 });
        assert_eq!(k.open[0].acc, 3);
    }
}

/// What a window operator computes (engine-internal): incremental
/// aggregation ([`Aggregating`]) or a function over all of a window's
/// records ([`Processing`]).
pub(crate) trait WindowFn<K, T, O>: 'static {
    /// See [`WindowAggregate::COMMUTATIVE`].
    const COMMUTATIVE: bool;
    type Acc: Default + Clone + 'static;
    fn add(&self, acc: &mut Self::Acc, value: &T);
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc);
    fn fire(&self, key: &K, window: Window, acc: &Self::Acc, out: &mut dyn FnMut(O));
    /// Applies evictor `e` to `acc`, window `window`'s (a function that
    /// keeps records — [`Processing`] — evicts, an aggregate cannot).
    fn evict(&self, _acc: &mut Self::Acc, _window: Window, _e: &Evictor<T>) {}
}

/// What a window keeps of its records (Flink's evictors), applied each time
/// a record joins it.
pub(crate) enum Evictor<T> {
    /// Its last `n` records.
    KeepLast(u64),
    /// What the user's function leaves of them.
    With(EvictFn<T>),
}

/// A custom evictor's function (`WindowedStream::evictor`).
pub(crate) type EvictFn<T> = std::sync::Arc<dyn Fn(Window, &mut Vec<T>) + Send + Sync>;

impl<T> Clone for Evictor<T> {
    fn clone(&self) -> Self {
        match self {
            Evictor::KeepLast(n) => Evictor::KeepLast(*n),
            Evictor::With(f) => Evictor::With(std::sync::Arc::clone(f)),
        }
    }
}

/// A [`WindowAggregate`] as a window function.
pub(crate) struct Aggregating<G>(pub(crate) std::sync::Arc<G>);

impl<K, T, O, G: WindowAggregate<K, T, O>> WindowFn<K, T, O> for Aggregating<G> {
    const COMMUTATIVE: bool = G::COMMUTATIVE;
    type Acc = G::Acc;
    #[inline]
    fn add(&self, acc: &mut G::Acc, value: &T) {
        self.0.add(acc, value);
    }
    fn merge(&self, acc: &mut G::Acc, other: G::Acc) {
        self.0.merge(acc, other);
    }
    fn fire(&self, key: &K, window: Window, acc: &G::Acc, out: &mut dyn FnMut(O)) {
        out(self.0.result(key, window, acc));
    }
}

/// A function over all of a window's records, in the order they were
/// taken (event time, then tuple ID), emitting any number of results.
pub(crate) struct Processing<F>(pub(crate) std::sync::Arc<F>);

impl<K, T, O, F> WindowFn<K, T, O> for Processing<F>
where
    T: Clone + 'static,
    F: Fn(&K, Window, &[T], &mut dyn FnMut(O)) + 'static,
{
    const COMMUTATIVE: bool = false;
    type Acc = Vec<T>;
    #[inline]
    fn add(&self, acc: &mut Vec<T>, value: &T) {
        acc.push(value.clone());
    }
    fn merge(&self, acc: &mut Vec<T>, other: Vec<T>) {
        acc.extend(other);
    }
    fn evict(&self, acc: &mut Vec<T>, window: Window, e: &Evictor<T>) {
        match e {
            Evictor::KeepLast(n) => {
                let over = acc
                    .len()
                    .saturating_sub(usize::try_from(*n).unwrap_or(usize::MAX));
                if over > 0 {
                    acc.drain(..over);
                }
            }
            Evictor::With(f) => f(window, acc),
        }
    }
    fn fire(&self, key: &K, window: Window, acc: &Vec<T>, out: &mut dyn FnMut(O)) {
        (self.0)(key, window, acc, out);
    }
}

/// What a window operator emits (engine-internal): a window's result, or a
/// record too late for any window — split into the operator's two streams
/// by the job builder.
#[derive(Clone, Debug)]
pub(crate) enum WinOut<O, T> {
    Result(O),
    Late(T),
}

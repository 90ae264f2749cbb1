//! Keyed state with a time to live: a value, a list and a map, each entry
//! stamped with the event time it was last written (or read), and never
//! returned once its TTL has passed.
//!
//! These are parts of a key's state: fields of a
//! [`TimedProcess::State`](crate::time::TimedProcess::State) (or of any
//! keyed operator's state), archived in its snapshots with it. Each method
//! takes `now`, the operator's event time: in a [`TimedProcess`] that is
//! [`TimerContext::now`](crate::time::TimerContext::now).
//!
//! ## Which clock
//!
//! Flink's TTL runs on processing time. Tandem's runs on the operator's
//! **event time**, for one reason: a standby or a restarted job replays the
//! primary's input, and what expired must expire at the same record in the
//! replay as it did the first time, or the replay emits something else.
//! Event time (the record's, or the watermark the operator is at) is a
//! function of the input; the wall clock is not. It also makes expiry
//! testable with no clock to fake: the input's event times are the clock.
//!
//! ## Semantics
//!
//! - An entry written at `at` is expired at every `now >= at + TTL`, and
//!   never returned then (Flink's `NeverReturnExpired`).
//! - [`UpdateOn::CreateAndWrite`] (the default) restarts an entry's TTL when
//!   it is written; [`UpdateOn::ReadAndWrite`] also when it is read.
//! - A list's and a map's TTLs are per element (per entry), as Flink's.
//! - A read that meets an expired entry drops it. What is never read again
//!   is dropped by the **incremental clean-up**: a [`TimedProcess`] that
//!   declares [`TimedProcess::EXPIRES`] has a few keys visited after each
//!   record (in insertion order, round and round) and their expired entries
//!   dropped through [`Expire`]. Clean-up never changes what the function
//!   sees: it drops only what a read would drop.
//!
//! The TTL is part of the state's type ([`TtlPolicy`]), so a key's state
//! created with `Default` knows it, and no entry carries it.
//!
//! ```
//! use tandem::state::ttl::{TtlPolicy, UpdateOn, ValueState};
//!
//! /// Forget a user's last page after 30 s of event time without a visit.
//! struct ThirtySeconds;
//! impl TtlPolicy for ThirtySeconds {
//!     const TTL_NANOS: u64 = 30_000_000_000;
//!     const UPDATE: UpdateOn = UpdateOn::CreateAndWrite;
//! }
//!
//! let mut last: ValueState<String, ThirtySeconds> = ValueState::default();
//! last.update("/home".into(), 1_000);
//! assert_eq!(last.value(29_000_000_999).map(String::as_str), Some("/home"));
//! assert_eq!(last.value(30_000_001_000), None); // expired: never returned
//! ```
//!
//! [`TimedProcess`]: crate::time::TimedProcess
//! [`TimedProcess::EXPIRES`]: crate::time::TimedProcess::EXPIRES

use rkyv::{Archive, Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

/// When an entry's time to live starts again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateOn {
    /// When the entry is created or written (Flink's `OnCreateAndWrite`).
    CreateAndWrite,
    /// Also when it is read (Flink's `OnReadAndWrite`).
    ReadAndWrite,
}

/// A time to live, as a type (see the module docs).
pub trait TtlPolicy: 'static {
    /// Event-time nanoseconds an entry lives after its last update.
    const TTL_NANOS: u64;
    /// What restarts the TTL.
    const UPDATE: UpdateOn = UpdateOn::CreateAndWrite;
}

/// No expiry: a plain value, list or map in the engine's state.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTtl;

impl TtlPolicy for NoTtl {
    const TTL_NANOS: u64 = u64::MAX;
}

/// What the incremental clean-up calls on a key's state: implemented by
/// [`ValueState`], [`ListState`] and [`MapState`], by tuples and options of
/// them, and by a user's state struct that holds some (delegating to its
/// fields).
pub trait Expire {
    /// Whether anything in it has expired at `now` (reads only: a state
    /// the clean-up visits and finds current is not written, so a
    /// snapshot under way keeps no copy of it).
    fn has_expired(&self, now: u64) -> bool;
    /// Drops whatever has expired at `now`.
    fn expire(&mut self, now: u64);
}

/// An entry and the event time its TTL started at.
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize)]
pub struct Stamped<T> {
    value: T,
    at: u64,
}

#[inline]
fn live<P: TtlPolicy>(at: u64, now: u64) -> bool {
    now < at.saturating_add(P::TTL_NANOS)
}

#[inline]
fn refresh<P: TtlPolicy>(at: &mut u64, now: u64) {
    if P::UPDATE == UpdateOn::ReadAndWrite {
        *at = (*at).max(now);
    }
}

/// One value per key, with a TTL.
#[derive(Archive, Serialize, Deserialize)]
pub struct ValueState<T, P = NoTtl> {
    entry: Option<Stamped<T>>,
    #[rkyv(with = rkyv::with::Skip)]
    _ttl: PhantomData<fn() -> P>,
}

impl<T, P: TtlPolicy> ValueState<T, P> {
    /// The value, unless there is none or it has expired at `now` (then it
    /// is dropped). Restarts the TTL under [`UpdateOn::ReadAndWrite`].
    pub fn value(&mut self, now: u64) -> Option<&T> {
        self.expire(now);
        let e = self.entry.as_mut()?;
        refresh::<P>(&mut e.at, now);
        Some(&e.value)
    }

    /// Sets the value; its TTL starts at `now`.
    pub fn update(&mut self, value: T, now: u64) {
        self.entry = Some(Stamped { value, at: now });
    }

    /// Drops the value.
    pub fn clear(&mut self) {
        self.entry = None;
    }

    /// Whether there is no live value at `now` (reads only).
    pub fn is_empty_at(&self, now: u64) -> bool {
        !matches!(&self.entry, Some(e) if live::<P>(e.at, now))
    }

    /// Whether it holds no value at all, live or expired.
    pub fn is_empty(&self) -> bool {
        self.entry.is_none()
    }
}

impl<T, P: TtlPolicy> Expire for ValueState<T, P> {
    fn has_expired(&self, now: u64) -> bool {
        matches!(&self.entry, Some(e) if !live::<P>(e.at, now))
    }
    fn expire(&mut self, now: u64) {
        if self.has_expired(now) {
            self.entry = None;
        }
    }
}

/// A list per key; each element has its own TTL.
#[derive(Archive, Serialize, Deserialize)]
pub struct ListState<T, P = NoTtl> {
    items: Vec<Stamped<T>>,
    #[rkyv(with = rkyv::with::Skip)]
    _ttl: PhantomData<fn() -> P>,
}

impl<T, P: TtlPolicy> ListState<T, P> {
    /// Appends `value`; its TTL starts at `now`.
    pub fn add(&mut self, value: T, now: u64) {
        self.items.push(Stamped { value, at: now });
    }

    /// The live elements at `now`, oldest first (the expired ones are
    /// dropped). Restarts their TTLs under [`UpdateOn::ReadAndWrite`].
    pub fn get(&mut self, now: u64) -> impl ExactSizeIterator<Item = &T> + '_ {
        self.expire(now);
        self.items.iter_mut().map(move |e| {
            refresh::<P>(&mut e.at, now);
            &e.value
        })
    }

    /// Replaces the list with `values`, all stamped `now`.
    pub fn update(&mut self, values: impl IntoIterator<Item = T>, now: u64) {
        self.items = values
            .into_iter()
            .map(|value| Stamped { value, at: now })
            .collect();
    }

    /// Keeps the live elements `keep` says to keep (the TTL of those kept
    /// is left as it is: this is a removal, not a write of them).
    pub fn retain(&mut self, now: u64, mut keep: impl FnMut(&T) -> bool) {
        self.items
            .retain(|e| live::<P>(e.at, now) && keep(&e.value));
    }

    /// Drops every element.
    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// Live elements at `now` (reads only).
    pub fn len_at(&self, now: u64) -> usize {
        self.items.iter().filter(|e| live::<P>(e.at, now)).count()
    }

    /// Whether no element is live at `now` (reads only): what a
    /// [`TimedProcess::is_empty_at`](crate::time::TimedProcess::is_empty_at)
    /// asks to let the engine drop the key.
    pub fn is_empty_at(&self, now: u64) -> bool {
        !self.items.iter().any(|e| live::<P>(e.at, now))
    }

    /// Whether it holds no element at all, live or expired.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl<T, P: TtlPolicy> Expire for ListState<T, P> {
    fn has_expired(&self, now: u64) -> bool {
        self.items.iter().any(|e| !live::<P>(e.at, now))
    }
    fn expire(&mut self, now: u64) {
        if self.has_expired(now) {
            self.items.retain(|e| live::<P>(e.at, now));
        }
    }
}

/// A map per key, ordered by its keys (so what a function sees iterating it
/// is the same in a replay, whatever the map's history); each entry has its
/// own TTL.
#[derive(Archive, Serialize, Deserialize)]
pub struct MapState<K: Ord, V, P = NoTtl> {
    entries: BTreeMap<K, Stamped<V>>,
    #[rkyv(with = rkyv::with::Skip)]
    _ttl: PhantomData<fn() -> P>,
}

impl<K: Ord, V, P: TtlPolicy> MapState<K, V, P> {
    /// The value of `key`, unless it has none or it has expired at `now`
    /// (then it is dropped). Restarts its TTL under
    /// [`UpdateOn::ReadAndWrite`].
    pub fn get(&mut self, key: &K, now: u64) -> Option<&V> {
        let at = self.entries.get(key)?.at;
        if !live::<P>(at, now) {
            self.entries.remove(key);
            return None;
        }
        let e = self.entries.get_mut(key)?;
        refresh::<P>(&mut e.at, now);
        Some(&e.value)
    }

    /// Whether `key` has a live value at `now` (reads only: no refresh).
    pub fn contains(&self, key: &K, now: u64) -> bool {
        matches!(self.entries.get(key), Some(e) if live::<P>(e.at, now))
    }

    /// Sets the value of `key`; its TTL starts at `now`. Returns the live
    /// value it replaced, if any.
    pub fn put(&mut self, key: K, value: V, now: u64) -> Option<V> {
        self.entries
            .insert(key, Stamped { value, at: now })
            .filter(|old| live::<P>(old.at, now))
            .map(|old| old.value)
    }

    /// Removes `key`; returns its live value, if it had one.
    pub fn remove(&mut self, key: &K, now: u64) -> Option<V> {
        self.entries
            .remove(key)
            .filter(|old| live::<P>(old.at, now))
            .map(|old| old.value)
    }

    /// The live entries at `now`, in key order (the expired ones are
    /// dropped). Restarts their TTLs under [`UpdateOn::ReadAndWrite`].
    pub fn iter(&mut self, now: u64) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.expire(now);
        self.entries.iter_mut().map(move |(k, e)| {
            refresh::<P>(&mut e.at, now);
            (k, &e.value)
        })
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Live entries at `now` (reads only).
    pub fn len_at(&self, now: u64) -> usize {
        self.entries
            .values()
            .filter(|e| live::<P>(e.at, now))
            .count()
    }

    /// Whether no entry is live at `now` (reads only): what a
    /// [`TimedProcess::is_empty_at`](crate::time::TimedProcess::is_empty_at)
    /// asks to let the engine drop the key.
    pub fn is_empty_at(&self, now: u64) -> bool {
        !self.entries.values().any(|e| live::<P>(e.at, now))
    }

    /// Whether it holds no entry at all, live or expired.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Ord, V, P: TtlPolicy> Expire for MapState<K, V, P> {
    fn has_expired(&self, now: u64) -> bool {
        self.entries.values().any(|e| !live::<P>(e.at, now))
    }
    fn expire(&mut self, now: u64) {
        if self.has_expired(now) {
            self.entries.retain(|_, e| live::<P>(e.at, now));
        }
    }
}

impl<E: Expire> Expire for Option<E> {
    fn has_expired(&self, now: u64) -> bool {
        self.as_ref().is_some_and(|e| e.has_expired(now))
    }
    fn expire(&mut self, now: u64) {
        if let Some(e) = self {
            e.expire(now)
        }
    }
}

macro_rules! expire_tuple {
    ($($n:tt $t:ident),+) => {
        impl<$($t: Expire),+> Expire for ($($t,)+) {
            fn has_expired(&self, now: u64) -> bool {
                $(self.$n.has_expired(now))||+
            }
            fn expire(&mut self, now: u64) {
                $(self.$n.expire(now);)+
            }
        }
    };
}
expire_tuple!(0 A);
expire_tuple!(0 A, 1 B);
expire_tuple!(0 A, 1 B, 2 C);
expire_tuple!(0 A, 1 B, 2 C, 3 D);

// `Default`, `Clone` and `Debug` by hand: the policy is a marker, and needs
// none of them.

impl<T, P> Default for ValueState<T, P> {
    fn default() -> Self {
        ValueState {
            entry: None,
            _ttl: PhantomData,
        }
    }
}

impl<T, P> Default for ListState<T, P> {
    fn default() -> Self {
        ListState {
            items: Vec::new(),
            _ttl: PhantomData,
        }
    }
}

impl<K: Ord, V, P> Default for MapState<K, V, P> {
    fn default() -> Self {
        MapState {
            entries: BTreeMap::new(),
            _ttl: PhantomData,
        }
    }
}

impl<T: Clone, P> Clone for ValueState<T, P> {
    fn clone(&self) -> Self {
        ValueState {
            entry: self.entry.clone(),
            _ttl: PhantomData,
        }
    }
}

impl<T: Clone, P> Clone for ListState<T, P> {
    fn clone(&self) -> Self {
        ListState {
            items: self.items.clone(),
            _ttl: PhantomData,
        }
    }
}

impl<K: Ord + Clone, V: Clone, P> Clone for MapState<K, V, P> {
    fn clone(&self) -> Self {
        MapState {
            entries: self.entries.clone(),
            _ttl: PhantomData,
        }
    }
}

impl<T: fmt::Debug, P> fmt::Debug for ValueState<T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ValueState").field(&self.entry).finish()
    }
}

impl<T: fmt::Debug, P> fmt::Debug for ListState<T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ListState").field(&self.items).finish()
    }
}

impl<K: Ord + fmt::Debug, V: fmt::Debug, P> fmt::Debug for MapState<K, V, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MapState").field(&self.entries).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ten;
    impl TtlPolicy for Ten {
        const TTL_NANOS: u64 = 10;
    }
    struct TenOnRead;
    impl TtlPolicy for TenOnRead {
        const TTL_NANOS: u64 = 10;
        const UPDATE: UpdateOn = UpdateOn::ReadAndWrite;
    }

    #[test]
    fn a_value_lives_until_its_ttl_from_its_last_write_and_is_never_returned_after() {
        let mut v: ValueState<u32, Ten> = ValueState::default();
        assert_eq!(v.value(0), None);
        v.update(7, 100);
        assert_eq!(v.value(109).copied(), Some(7));
        assert_eq!(v.value(109).copied(), Some(7), "a read does not restart it");
        assert!(!v.has_expired(109));
        assert!(v.has_expired(110));
        assert!(v.is_empty_at(110));
        assert_eq!(v.value(110), None);
        v.update(8, 200);
        v.update(9, 205);
        assert_eq!(v.value(214).copied(), Some(9), "a write restarts it");
        assert_eq!(v.value(215), None);
    }

    #[test]
    fn read_and_write_restarts_the_ttl_on_every_read() {
        let mut v: ValueState<u32, TenOnRead> = ValueState::default();
        v.update(1, 0);
        for now in [9, 18, 27] {
            assert_eq!(v.value(now).copied(), Some(1), "read at {now}");
        }
        assert_eq!(v.value(37), None);
        let mut m: MapState<u32, u32, TenOnRead> = MapState::default();
        m.put(1, 10, 0);
        m.put(2, 20, 0);
        assert_eq!(m.get(&1, 9).copied(), Some(10));
        assert!(m.contains(&1, 18), "refreshed by the read at 9");
        assert!(!m.contains(&2, 18), "never read: expired at 10");
        assert_eq!(m.iter(18).count(), 1);
    }

    #[test]
    fn list_elements_expire_one_by_one() {
        let mut l: ListState<u32, Ten> = ListState::default();
        for t in 0..5u32 {
            l.add(t, u64::from(t) * 3);
        }
        // Written at 0, 3, 6, 9, 12: at 13 the first two are gone.
        assert_eq!(l.len_at(13), 3);
        assert_eq!(l.get(13).copied().collect::<Vec<_>>(), vec![2, 3, 4]);
        l.retain(13, |x| *x != 3);
        assert_eq!(l.get(13).copied().collect::<Vec<_>>(), vec![2, 4]);
        assert!(l.has_expired(16));
        l.expire(16);
        assert_eq!(l.get(16).copied().collect::<Vec<_>>(), vec![4]);
    }

    #[test]
    fn map_entries_expire_one_by_one_and_a_replaced_expired_value_is_not_returned() {
        let mut m: MapState<&str, u32, Ten> = MapState::default();
        m.put("a", 1, 0);
        m.put("b", 2, 5);
        assert_eq!(m.put("a", 3, 10), None, "the old value had expired");
        assert_eq!(m.put("a", 4, 11), Some(3));
        assert_eq!(m.get(&"b", 15), None);
        assert_eq!(m.remove(&"a", 20), Some(4));
        m.put("c", 5, 20);
        assert!(!m.has_expired(29));
        assert!(m.has_expired(30));
        m.expire(30);
        assert_eq!(m.len_at(0), 0, "expired entries are gone, not hidden");
    }

    #[test]
    fn no_ttl_never_expires() {
        let mut v: ValueState<u32> = ValueState::default();
        v.update(1, 5);
        assert_eq!(v.value(u64::MAX - 1).copied(), Some(1));
        assert!(!(v.clone(), Some(ListState::<u8>::default())).has_expired(u64::MAX - 1));
    }

    #[test]
    fn ttl_state_survives_a_snapshot_with_its_stamps() {
        let mut m: MapState<u32, String, Ten> = MapState::default();
        m.put(1, "x".into(), 100);
        m.put(2, "y".into(), 105);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&m).unwrap();
        let archived =
            rkyv::access::<ArchivedMapState<u32, String, Ten>, rkyv::rancor::Error>(&bytes)
                .unwrap();
        let mut back: MapState<u32, String, Ten> =
            rkyv::deserialize::<_, rkyv::rancor::Error>(archived).unwrap();
        assert_eq!(back.get(&1, 109).map(String::as_str), Some("x"));
        assert_eq!(back.get(&1, 110), None);
        assert_eq!(back.get(&2, 114).map(String::as_str), Some("y"));
    }
}

//! Archiving a frozen keyed state a slice at a time, on the core that owns
//! it.
//!
//! A large state takes milliseconds to archive. In one go on the
//! operator's core, every record queued behind it waits that long; on a
//! thread of its own it is no better where every core runs a pinned
//! worker (the one thing thread-per-core guarantees): the OS gives the
//! thread one of those cores, descheduling its worker for as long. Measured
//! on the 2-core reference machine with a warm standby on the paper's keyed
//! stage at 200 k records/s, both cost the same p99 (1.2–2.8 ms against
//! 0.15–0.3 ms with no state archived). So the owner archives the state
//! itself, a slice of entries between its records, from a freeze
//! ([`super::KeyedState`]'s module docs) that the live state goes on from.
//!
//! The bytes are exactly those of [`super::KeyedState::to_snapshot_bytes`]
//! at the freeze (same format, same checked access, same restore). rkyv
//! writes a vector of entries as (1) every entry's out-of-line parts, in
//! order, (2) the array of the entries themselves, (3) the root that points
//! at the array. [`Steps`] makes the same writes in the same order: (1) and
//! (2) a slice of entries per call, each call with a fresh serializer over
//! the same output (rkyv's positions are the output's own, so they carry
//! over from call to call), keeping the entries' resolvers from (1) for
//! (2); each slice of (2) is checked to start where the previous one ended
//! (one contiguous array); (3) serializes a stand-in state marked as
//! written, which then writes the root only.

use super::{BrokenOrder, Frozen, KeyedState, Table};
use crate::checkpoint::format::{ArchiveSteps, SnapshotSerializer};
use crate::checkpoint::{CheckpointError, SnapshotBytes};
use rkyv::{
    collections::util::{Entry, EntryAdapter, EntryResolver},
    rancor::{self, Fallible, Strategy},
    ser::{sharing::Share, Serializer, WriterExt},
    vec::ArchivedVec,
    Archive, Archived, Place, Serialize,
};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::hash::Hash;
use std::rc::Rc;

/// An archive of a frozen state under way (see the module docs).
pub(crate) struct Steps<K: Archive, S: Archive> {
    /// The freeze (`None` once the archive is whole: the freeze is over).
    frozen: Option<Frozen<K, S>>,
    /// Places at the freeze, and the live keys among them (the entries
    /// archived).
    len: usize,
    live: usize,
    /// Entries written into the array so far.
    written: usize,
    /// The output (`None` only inside a call, and once it is handed out).
    out: Option<SnapshotBytes>,
    /// Resolvers of the entries whose parts are written and whose entry is
    /// not yet, in order.
    resolvers: VecDeque<EntryResolver<K::Resolver, S::Resolver>>,
    phase: Phase,
    /// The next entry of the phase.
    next: usize,
    /// Keys and states have zero-sized resolvers (no out-of-line parts):
    /// phase (1) is skipped.
    inline: bool,
    /// A delta's entries: the places archived, in order (`None`: every
    /// place below the freeze's count).
    places: Option<Vec<u32>>,
    /// A delta's base checkpoint, marked on the output.
    delta_over: Option<u64>,
    /// The key index builder a whole archive's output gets.
    indexer: Option<crate::checkpoint::format::Indexer>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// (1) the entries' out-of-line parts.
    Parts,
    /// (2) the entries; the array starts at `start` (known after the
    /// first slice).
    Entries { start: Option<usize> },
    /// (3) the root of the array at `start`.
    Root { start: usize },
    /// Handed out.
    Done,
}

impl<K: Archive, S: Archive> Steps<K, S> {
    pub(crate) fn new(frozen: Frozen<K, S>) -> Self {
        Self::with(frozen, None)
    }

    /// A delta's entries (see `super::delta`): the `places` of the freeze
    /// (sorted; those dead at the freeze are passed over, as a whole
    /// archive passes over every dead place), after the delta's `prefix`
    /// (its header and removed keys), the output marked a delta over
    /// `base`.
    pub(crate) fn delta(frozen: Frozen<K, S>, places: Vec<u32>, prefix: &[u8], base: u64) -> Self {
        Self::with(frozen, Some((places, prefix, base)))
    }

    fn with(frozen: Frozen<K, S>, delta: Option<(Vec<u32>, &[u8], u64)>) -> Self {
        let entry = std::mem::size_of::<Entry<Archived<K>, Archived<S>>>();
        let (len, live) = match &delta {
            Some((places, ..)) => (places.len(), places.len()),
            None => (frozen.len, frozen.live),
        };
        let inline =
            std::mem::size_of::<K::Resolver>() == 0 && std::mem::size_of::<S::Resolver>() == 0;
        // The entries themselves, or — where they have out-of-line parts —
        // as many bytes an entry as the last archive took, and an eighth
        // more.
        let (bytes, entries) = frozen
            .table
            .try_borrow()
            .map_or((0, 0), |t| t.archived.get());
        let hint = (64 + live * entry).max(match entries {
            0 => 0,
            n => (bytes / n)
                .saturating_mul(live)
                .saturating_add(bytes / n * live / 8),
        });
        let (places, delta_over, out) = match delta {
            Some((places, prefix, base)) => {
                let mut out = SnapshotBytes::with_capacity(prefix.len() + hint);
                // Writing into a growing buffer cannot fail.
                let _ = rkyv::ser::Writer::<rancor::Error>::write(&mut out, prefix);
                (Some(places), Some(base), out)
            }
            None => (None, None, SnapshotBytes::with_capacity(hint)),
        };
        Steps {
            frozen: Some(frozen),
            len,
            live,
            written: 0,
            out: Some(out),
            resolvers: VecDeque::with_capacity(if inline { 0 } else { live }),
            phase: Phase::Parts,
            next: 0,
            inline,
            places,
            delta_over,
            indexer: None,
        }
    }

    /// An archive whose checkpoint file gets a key index built by
    /// `indexer` (see `super::index`).
    pub(crate) fn with_indexer(mut self, indexer: crate::checkpoint::format::Indexer) -> Self {
        self.indexer = Some(indexer);
        self
    }

    /// The table place of the `i`-th entry archived.
    #[inline]
    fn place(&self, i: usize) -> usize {
        self.places.as_ref().map_or(i, |p| p[i] as usize)
    }
}

/// The table of `frozen`, borrowed for one slice (an engine bug if it is
/// borrowed already: an error, not a panic).
fn borrow<K, S>(
    frozen: &Option<Frozen<K, S>>,
) -> Result<(std::cell::Ref<'_, Table<K, S>>, u32), CheckpointError> {
    let broken = || CheckpointError::Serialize {
        source: <rancor::Error as rancor::Source>::new(BrokenOrder),
    };
    let f = frozen.as_ref().ok_or_else(broken)?;
    let t = f.table.try_borrow().map_err(|_| broken())?;
    Ok((t, f.epoch))
}

/// Entry `i` as the freeze `epoch` of `t` saw it (`None`: a dead place
/// then).
fn entry<K: Hash + Eq, S>(
    t: &Table<K, S>,
    epoch: u32,
    i: usize,
) -> Result<Option<(&K, &S)>, rancor::Error> {
    let f = t
        .freeze(epoch)
        .ok_or_else(|| <rancor::Error as rancor::Source>::new(BrokenOrder))?;
    Ok(t.entry_at(i, Some(f)))
}

/// Runs `f` with a serializer over `out` (a fresh arena and sharing table:
/// both only matter within one value's parts, which one call writes whole).
fn with_serializer<R>(
    out: &mut Option<SnapshotBytes>,
    f: impl FnOnce(&mut SnapshotSerializer<'_>) -> Result<R, rancor::Error>,
) -> Result<R, CheckpointError> {
    let writer = out.take().ok_or_else(|| CheckpointError::Serialize {
        source: <rancor::Error as rancor::Source>::new(BrokenOrder),
    })?;
    rkyv::util::with_arena(|arena| {
        let mut ser = Serializer::new(writer, arena.acquire(), Share::new());
        let r = f(Strategy::wrap(&mut ser));
        *out = Some(ser.into_writer());
        r
    })
    .map_err(|source| CheckpointError::Serialize { source })
}

/// An entry whose parts are written: serializing it hands back their
/// resolver (writing nothing), resolving it writes the entry. Without a
/// resolver kept (`inline`: types whose resolvers are zero-sized, which
/// have no out-of-line parts to point at) it serializes itself then — and
/// writes nothing either, which the caller checks.
struct Presolved<'a, K: Archive, S: Archive> {
    key: &'a K,
    value: &'a S,
    resolver: Cell<Option<EntryResolver<K::Resolver, S::Resolver>>>,
    inline: bool,
}

impl<K: Archive, S: Archive> Archive for Presolved<'_, K, S> {
    type Archived = Entry<K::Archived, S::Archived>;
    type Resolver = EntryResolver<K::Resolver, S::Resolver>;

    fn resolve(&self, resolver: Self::Resolver, out: Place<Self::Archived>) {
        EntryAdapter::<_, _, K, S>::new(self.key, self.value).resolve(resolver, out)
    }
}

impl<K, S, D> Serialize<D> for Presolved<'_, K, S>
where
    K: Archive + Serialize<D>,
    S: Archive + Serialize<D>,
    D: Fallible + ?Sized,
    D::Error: rancor::Source,
{
    fn serialize(&self, d: &mut D) -> Result<Self::Resolver, D::Error> {
        if self.inline {
            return EntryAdapter::<_, _, K, S>::new(self.key, self.value).serialize(d);
        }
        self.resolver
            .take()
            .ok_or_else(|| <D::Error as rancor::Source>::new(BrokenOrder))
    }
}

impl<K, S> ArchiveSteps for Steps<K, S>
where
    K: Archive + Hash + Eq + for<'a> Serialize<SnapshotSerializer<'a>>,
    S: Archive + for<'a> Serialize<SnapshotSerializer<'a>>,
    KeyedState<K, S>: for<'a> Serialize<SnapshotSerializer<'a>>,
{
    fn step(&mut self, entries: usize) -> Result<Option<SnapshotBytes>, CheckpointError> {
        let len = self.len;
        let entries = entries.max(1);
        match self.phase {
            Phase::Parts if self.inline => {
                // Nothing to write before the entries: straight to them.
                (self.phase, self.next) = (Phase::Entries { start: None }, 0);
                self.step(entries)
            }
            Phase::Parts => {
                let end = (self.next + entries).min(len);
                let (t, epoch) = borrow(&self.frozen)?;
                let places: Vec<usize> = (self.next..end).map(|i| self.place(i)).collect();
                let resolvers = &mut self.resolvers;
                with_serializer(&mut self.out, |ser| {
                    for i in places {
                        if let Some((k, s)) = entry(&t, epoch, i)? {
                            resolvers
                                .push_back(EntryAdapter::<_, _, K, S>::new(k, s).serialize(ser)?);
                        }
                    }
                    Ok(())
                })?;
                self.next = end;
                if end == len {
                    (self.phase, self.next) = (Phase::Entries { start: None }, 0);
                }
                Ok(None)
            }
            Phase::Entries { start } => {
                let end = (self.next + entries).min(len);
                let (t, epoch) = borrow(&self.frozen)?;
                let places: Vec<usize> = (self.next..end).map(|i| self.place(i)).collect();
                let (resolvers, inline) = (&mut self.resolvers, self.inline);
                let written = self.written;
                let mut items = Vec::new();
                for i in places {
                    let Some((key, value)) = entry(&t, epoch, i)
                        .map_err(|source| CheckpointError::Serialize { source })?
                    else {
                        continue;
                    };
                    items.push(Presolved {
                        key,
                        value,
                        resolver: Cell::new(if inline { None } else { resolvers.pop_front() }),
                        inline,
                    });
                }
                let size = std::mem::size_of::<Entry<K::Archived, S::Archived>>();
                let n = items.len();
                let at = with_serializer(&mut self.out, |ser| {
                    let at = ser.align_for::<Entry<K::Archived, S::Archived>>()?;
                    if start.is_some_and(|s| at != s + written * size) {
                        return Err(<rancor::Error as rancor::Source>::new(BrokenOrder));
                    }
                    ArchivedVec::<Entry<K::Archived, S::Archived>>::serialize_from_iter::<
                        Presolved<'_, K, S>,
                        _,
                        _,
                    >(items.iter(), ser)?;
                    // One contiguous array: nothing but the entries written.
                    if rkyv::ser::Positional::pos(ser) != at + n * size {
                        return Err(<rancor::Error as rancor::Source>::new(BrokenOrder));
                    }
                    Ok(at)
                });
                drop(items);
                drop(t);
                let at = at?;
                let start = start.unwrap_or(at);
                self.next = end;
                self.written += n;
                if end == len && self.places.is_some() {
                    // A delta's places were not looked up before: its
                    // entries are the live ones among them.
                    self.live = self.written;
                } else if end == len && self.written != self.live {
                    // Not the entries the freeze saw: refused, not written
                    // wrong.
                    return Err(CheckpointError::Serialize {
                        source: <rancor::Error as rancor::Source>::new(BrokenOrder),
                    });
                }
                self.phase = if end == len {
                    Phase::Root { start }
                } else {
                    Phase::Entries { start: Some(start) }
                };
                Ok(None)
            }
            Phase::Root { start } => {
                // The freeze is over: the live state saves no more
                // pre-images.
                let epoch = self.frozen.as_ref().map(|f| f.epoch);
                let frozen = self.frozen.take();
                let stand_in: KeyedState<K, S> = KeyedState {
                    map: Rc::new(RefCell::new(Table {
                        presolved: Some((start, self.live)),
                        ..Table::default()
                    })),
                };
                let r = with_serializer(&mut self.out, |ser| {
                    rkyv::api::serialize_using(&stand_in, ser).map(|_| ())
                });
                self.phase = Phase::Done;
                r?;
                let mut out = self.out.take();
                if let (Some(f), Some(out)) = (frozen, &mut out) {
                    out.set_delta_over(self.delta_over);
                    if let Some(i) = self.indexer {
                        out.set_indexer(i);
                    }
                    if let Ok(mut t) = f.table.try_borrow_mut() {
                        if self.delta_over.is_none() {
                            t.archived.set((out.len(), self.live));
                        }
                        // The chain this capture extends learns its bytes.
                        let (bytes, live) = (out.len() as u64, self.live as u64);
                        if let Some(c) = t
                            .log
                            .journal
                            .captured
                            .iter_mut()
                            .find(|c| Some(c.epoch) == epoch)
                        {
                            if c.delta {
                                c.chain.delta_bytes += bytes;
                            } else {
                                c.chain.whole_bytes = bytes;
                                c.chain.whole_entries = live;
                            }
                        }
                    }
                    // Dropped here, the freeze ends (after the borrow).
                    drop(f);
                }
                Ok(out)
            }
            Phase::Done => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::KeyedState;
    use super::*;

    fn sliced<K, S>(state: &KeyedState<K, S>, entries: usize) -> SnapshotBytes
    where
        Steps<K, S>: ArchiveSteps,
        K: Archive,
        S: Archive,
    {
        let mut steps = Steps::new(state.freeze());
        let mut calls = 0;
        loop {
            calls += 1;
            assert!(calls < 1_000_000, "the archive never completes");
            if let Some(b) = steps.step(entries).unwrap() {
                assert!(steps.step(entries).unwrap().is_none(), "handed out once");
                return b;
            }
        }
    }

    #[test]
    fn a_sliced_archive_has_the_bytes_of_the_whole_one() {
        let mut plain: KeyedState<u64, (u64, u64)> = KeyedState::default();
        let mut strings: KeyedState<String, Vec<u32>> = KeyedState::default();
        for n in [0usize, 1, 255, 256, 257, 3_000] {
            for i in plain.len()..n {
                *plain.get_or_default(&(((i as u64) * 7_919) ^ 5)) = (i as u64, 2 * i as u64);
                *strings.get_or_default(&format!("key-{i}-{}", "x".repeat(i % 13))) =
                    (0..(i % 5) as u32).collect();
            }
            let whole = plain.to_snapshot_bytes().unwrap();
            let whole_s = strings.to_snapshot_bytes().unwrap();
            for slice in [1, 7, 256, 10_000] {
                assert_eq!(
                    sliced(&plain, slice).payload(),
                    whole.payload(),
                    "{n} / {slice}"
                );
                assert_eq!(
                    sliced(&strings, slice).payload(),
                    whole_s.payload(),
                    "{n} / {slice}"
                );
            }
        }
    }

    #[test]
    fn the_live_state_goes_on_while_its_freeze_is_archived() {
        let mut s: KeyedState<u64, u64> = KeyedState::default();
        for k in 0..2_000u64 {
            *s.get_or_default(&k) = k;
        }
        let expect = s.to_snapshot_bytes().unwrap();
        let mut steps = Steps::new(s.freeze());
        let mut k = 0u64;
        let got = loop {
            // Between slices: every key written, keys added.
            *s.get_or_default(&k) += 1_000_000;
            *s.get_or_default(&(10_000 + k)) = 1;
            k += 1;
            if let Some(b) = steps.step(50).unwrap() {
                break b;
            }
        };
        assert_eq!(got.payload(), expect.payload());
        assert_eq!(s.get(&5).as_deref(), Some(&1_000_005));
        assert_eq!(s.len() as u64, 2_000 + k);
        let back = <KeyedState<u64, u64> as crate::StateSnapshot>::restore(got.payload()).unwrap();
        assert_eq!((back.len(), back.get(&5).as_deref()), (2_000, Some(&5)));
        assert!(
            s.map.borrow().log.freezes.is_empty(),
            "the freeze ended with its archive"
        );
    }

    /// The keys in iteration order, with their states.
    fn listed(s: &mut KeyedState<u64, u64>) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        s.for_each_mut(|k, st| v.push((*k, *st)));
        v
    }

    fn seq_of(s: &mut KeyedState<u64, u64>, k: u64) -> u32 {
        let (seq, _) = s.get_or_default_numbered(&k);
        seq
    }

    #[test]
    fn a_removed_key_is_gone_and_comes_back_at_the_end_of_the_order() {
        let mut s: KeyedState<u64, u64> = KeyedState::default();
        for k in 0..5u64 {
            *s.get_or_default(&k) = 10 + k;
        }
        let two = seq_of(&mut s, 2);
        assert!(s.remove_at(two));
        assert!(!s.remove_at(two), "removed once");
        assert_eq!(s.len(), 4);
        assert_eq!(s.get(&2).as_deref(), None);
        assert!(
            s.with_key_at(two, |_, _| ()).is_none(),
            "a dead number names nothing"
        );
        *s.get_or_default(&2) += 1;
        assert_eq!(
            listed(&mut s),
            vec![(0, 10), (1, 11), (3, 13), (4, 14), (2, 1)],
            "inserted again, at the end, from the default"
        );
        assert!(
            s.with_key_at(two, |_, _| ()).is_none(),
            "its old number is still dead"
        );
        let back = <KeyedState<u64, u64> as crate::StateSnapshot>::restore(
            s.to_snapshot_bytes().unwrap().payload(),
        )
        .unwrap();
        let mut back = back;
        assert_eq!(
            listed(&mut back),
            listed(&mut s),
            "a restore keeps the order"
        );
    }

    #[test]
    fn a_freeze_archives_what_it_saw_whatever_is_removed_or_added_meanwhile() {
        let mut s: KeyedState<u64, u64> = KeyedState::default();
        for k in 0..3_000u64 {
            *s.get_or_default(&k) = k;
        }
        for k in (0..3_000u64).step_by(3) {
            let seq = seq_of(&mut s, k);
            assert!(s.remove_at(seq));
        }
        let expect = s.to_snapshot_bytes().unwrap();
        for slice in [1, 50, 10_000] {
            let mut t: KeyedState<u64, u64> = KeyedState::default();
            for k in 0..3_000u64 {
                *t.get_or_default(&k) = k;
            }
            for k in (0..3_000u64).step_by(3) {
                let seq = seq_of(&mut t, k);
                t.remove_at(seq);
            }
            let mut steps = Steps::new(t.freeze());
            let mut k = 0u64;
            let got = loop {
                // Between slices: keys removed, written, added again.
                let seq = seq_of(&mut t, 3 * k + 1);
                t.remove_at(seq);
                *t.get_or_default(&(3 * k)) = 7;
                *t.get_or_default(&(3 * k + 2)) += 1_000_000;
                k += 1;
                if let Some(b) = steps.step(slice).unwrap() {
                    break b;
                }
            };
            assert_eq!(got.payload(), expect.payload(), "slice {slice}");
        }
    }

    #[test]
    fn compaction_keeps_the_order_and_drops_the_dead_places() {
        let mut s: KeyedState<u64, u64> = KeyedState::default();
        for k in 0..1_000u64 {
            *s.get_or_default(&k) = k;
        }
        for k in (0..1_000u64).filter(|k| k % 4 != 0) {
            let seq = seq_of(&mut s, k);
            s.remove_at(seq);
        }
        *s.get_or_default(&1) = 5;
        let before = listed(&mut s);
        let frozen = s.freeze();
        assert!(s.compact().is_none(), "not under a freeze");
        drop(frozen);
        let renumber = s.compact().expect("half the places are dead");
        assert_eq!(listed(&mut s), before);
        assert_eq!(s.places(), s.len(), "dense again");
        assert_eq!(seq_of(&mut s, 1), 250, "numbered by place");
        assert_eq!(
            (renumber[4], renumber[5], renumber[1]),
            (1, u32::MAX, u32::MAX)
        );
        assert!(s.compact().is_none(), "nothing dead");
    }
}

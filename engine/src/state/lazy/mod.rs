//! A keyed state restored lazily: restore in O(what is touched).
//!
//! An eager restore reads the whole archive, checks it, and inserts every
//! key before the first record is processed: 500 MB of state took 0.75 s
//! from a cold disk to map and check, and as long again to rebuild. A lazy
//! restore maps the checkpoint's whole archive ([`LazySnapshot`]: each
//! 64 KiB block verified against the file's block table the first time it
//! is read) and starts at once, the archive as its **base**:
//!
//! - A record's key not in the table yet is looked up in the base through
//!   the file's key index ([`super::index`]) and, if there, **materialized
//!   ahead**: its entry is validated (rkyv's checked access of that one
//!   entry), decoded and inserted with its place in the base as its
//!   insertion number. A key in neither is new: it is placed after every
//!   base place, in the order new keys come (the *tail*).
//! - Between records, the worker materializes the base **in order**, a
//!   slice at a time ([`crate::runtime::background`]), appending each key
//!   to the insertion order (a key materialized ahead is only appended).
//!   When it reaches the end, the tail's keys follow and the table is an
//!   ordinary one. Reading every entry in order is also the check of the
//!   index: a key the index did not find where it is (a key hashing
//!   differently in this build) is already in the table, at another
//!   place — an error naming the file, not a silently fresh state.
//! - Anything that needs the whole table — a freeze for a checkpoint or a
//!   recovery point, iterating every key, a compaction, a by-number
//!   access — first materializes the rest at once (**settles**).
//!
//! The deltas of an incremental checkpoint's chain are applied over the
//! base as they are over a whole state: removals make places dead,
//! entries are written in place (materializing the key ahead) or appended
//! to the tail. What the restored state iterates, archives and emits is
//! exactly what an eager restore's does; only the numbers inside differ
//! (an eager restore numbers densely), and numbers are never observable.
//!
//! Errors — a block that does not verify, an entry that does not validate,
//! an index that misses a key — are `CheckpointError`s naming the file;
//! the engine's keyed operator looks each record's key up with
//! [`KeyedState::prefetch`] and fails its task with the error (the
//! checkpoint is then condemned and the next attempt restores an older
//! one). Only a caller that skips `prefetch` and reads a damaged base
//! through `get_or_default` meets it as a panic.

mod base;
#[cfg(test)]
mod tests;

use rkyv::{
    api::high::{HighDeserializer, HighValidator},
    bytecheck::CheckBytes,
    collections::util::Entry,
    rancor, Archive, Archived, Deserialize,
};
use rustc_hash::{FxHashMap, FxHashSet};
use std::hash::Hash;
use std::sync::Arc;

use super::{grow::GrowMap, KeyedState, Slot, Table};
use crate::checkpoint::{CheckpointError, LazySnapshot};
use base::{Base, BaseRead};

/// One link of a lazily read chain: the whole archive, or a delta's
/// entries and the keys it removed (before them).
pub(crate) struct Layer<K, S> {
    entries: Box<dyn BaseRead<K, S>>,
    removed: FxHashSet<K>,
    /// Place of its first entry.
    at: usize,
}

/// The keys the deltas of a chain name (removed or written), gathered in
/// steps before the walk: a key of the whole archive outside it is read
/// without a look into any delta.
enum Touched<K> {
    /// Gathering: the next layer and entry.
    Gathering(usize, usize, FxHashSet<K>),
    Done(FxHashSet<K>),
}

/// A table still reading its chain (see the module docs).
pub(crate) struct Lazy<K, S> {
    layers: Vec<Layer<K, S>>,
    /// Places the chain spans: every entry of every layer has one (the
    /// whole archive's first, then each delta's).
    places: usize,
    /// The walk: places below it are in the insertion order.
    next: usize,
    /// Places at or above `next` decided ahead of the walk that hold a
    /// key's place in the end (live, or removed since), with the key.
    ahead: FxHashMap<u32, K>,
    /// Places at or above `next` decided ahead of the walk as dead (a key
    /// whose place is elsewhere, or that a delta removed).
    dead: FxHashSet<u32>,
    /// Keys placed since the restore, numbered `places + i`.
    tail: Vec<K>,
    /// Live keys still only in the chain, when known (a chain of one
    /// archive: its entries not taken yet).
    pending: Option<usize>,
    touched: Touched<K>,
    /// Called every [`PROGRESS_EVERY`] places read in order: a long read
    /// (settling a large chain) is work, not a stall.
    progress: Option<Box<dyn Fn()>>,
}

/// Places read in order between two calls of the progress hook.
const PROGRESS_EVERY: usize = 16;

/// Where a key stands in a chain: its final place and which layer's
/// entry holds its state (`None`: no key, removed by a delta).
type Final = Option<(usize, usize, usize)>;

impl<K: Hash + Eq + Clone, S> Lazy<K, S> {
    /// The layer and entry of place `q`.
    fn locate(&self, q: usize) -> (usize, usize) {
        let j = self.layers.partition_point(|l| l.at <= q) - 1;
        (j, q - self.layers[j].at)
    }

    /// Whether place `q` was decided already (by the walk or ahead of it).
    fn decided(&self, q: usize) -> bool {
        q < self.next || self.ahead.contains_key(&(q as u32)) || self.dead.contains(&(q as u32))
    }

    /// Replays `key`'s history through the chain: every place it has, and
    /// where it stands in the end. As a restore that applies each delta in
    /// turn: a removal kills the key's place; an entry writes the state in
    /// place if the key is there, else places the key anew (at the
    /// entry's own place).
    fn history(&self, key: &K) -> Result<(Vec<usize>, Final), CheckpointError> {
        let untouched = matches!(&self.touched, Touched::Done(t) if !t.contains(key));
        let mut places = Vec::new();
        let mut at: Final = None;
        for (j, layer) in self.layers.iter().enumerate() {
            if j > 0 && untouched {
                break;
            }
            if layer.removed.contains(key) {
                at = None;
            }
            if let Some(i) = layer.entries.find(key)? {
                let q = layer.at + i;
                places.push(q);
                at = Some(match at {
                    Some((p, _, _)) => (p, j, i),
                    None => (q, j, i),
                });
            }
        }
        Ok((places, at))
    }
}

impl<K, S> KeyedState<K, S> {
    /// Entries of the whole archive a lazily restored state reads (0 for
    /// another).
    pub(crate) fn whole_entries(&self) -> usize {
        let t = self.map.borrow();
        t.lazy
            .as_deref()
            .and_then(|l| l.layers.first())
            .map_or(0, |l| l.entries.len())
    }
}

impl<K, S> Table<K, S> {
    /// A table over the chain `layers`, nothing read yet.
    pub(crate) fn over(layers: Vec<Layer<K, S>>) -> Self {
        let places = layers.last().map_or(0, |l| l.at + l.entries.len());
        let n = layers.first().map_or(0, |l| l.entries.len());
        let single = layers.len() == 1;
        Table {
            map: GrowMap::with_capacity(n),
            order: Vec::with_capacity(places),
            lazy: Some(Box::new(Lazy {
                layers,
                places,
                next: 0,
                ahead: FxHashMap::default(),
                dead: FxHashSet::default(),
                tail: Vec::new(),
                pending: single.then_some(n),
                touched: if single {
                    Touched::Done(FxHashSet::default())
                } else {
                    Touched::Gathering(1, 0, FxHashSet::default())
                },
                progress: None,
            })),
            ..Table::default()
        }
    }

    /// Live keys, with those still only in the chain (`None`: not known
    /// before the chain is read).
    pub(crate) fn live_known(&self) -> Option<usize> {
        match &self.lazy {
            None => Some(self.map.len()),
            Some(l) => l.pending.map(|p| self.map.len() + p),
        }
    }

    /// Places, live or dead, with the chain's.
    pub(crate) fn place_count(&self) -> usize {
        match &self.lazy {
            Some(l) => l.places + l.tail.len(),
            None => self.order.len(),
        }
    }
}

/// The key at place `i` of a table with insertion order `order` and
/// lazy part `lazy`; `None` for a place not decided yet, or a dead one
/// decided ahead of the walk (or none).
#[inline]
pub(crate) fn key_at<'a, K, S>(
    order: &'a [K],
    lazy: &'a Option<Box<Lazy<K, S>>>,
    i: usize,
) -> Option<&'a K> {
    match lazy.as_deref() {
        None => order.get(i),
        Some(l) if i < l.next => order.get(i),
        Some(l) if i < l.places => l.ahead.get(&(i as u32)),
        Some(l) => l.tail.get(i - l.places),
    }
}

/// The operations on a lazy table.
pub(crate) trait LazyTable<K, S> {
    /// Takes `key` out of the chain into the map if the chain has it and
    /// it was not taken before; whether it is in the map now.
    fn take_ahead(&mut self, key: &K) -> Result<bool, CheckpointError>;
    /// Reads up to `n` more places of the chain in order (first the keys
    /// the deltas name); whether the chain is done with (the table is an
    /// ordinary one).
    fn advance(&mut self, n: usize) -> Result<bool, CheckpointError>;
    /// Places `key` (in neither map nor chain) after every place, with
    /// state `state`.
    fn place_new(&mut self, key: &K, state: S);
    /// Takes the key at place `p` into the map if the place is not
    /// decided yet.
    fn take_place(&mut self, p: usize) -> Result<(), CheckpointError>;
}

impl<K: Hash + Eq + Clone, S> Table<K, S> {
    /// Decides every place of `key` from its history; whether it is live
    /// (then it is in the map at its place). `false` if a place of it was
    /// decided before (taken, and removed since: a new key now).
    fn decide(&mut self, key: &K) -> Result<bool, CheckpointError> {
        let Some(l) = self.lazy.as_deref_mut() else {
            return Ok(false);
        };
        let (places, at) = l.history(key)?;
        if places.iter().any(|&q| l.decided(q)) {
            return Ok(false);
        }
        for &q in &places {
            if at.is_some_and(|(p, _, _)| p == q) {
                l.ahead.insert(q as u32, key.clone());
            } else {
                l.dead.insert(q as u32);
            }
        }
        let Some((p, j, i)) = at else {
            return Ok(false);
        };
        let (_, state) = l.layers[j].entries.read(i)?;
        if let Some(n) = l.pending.as_mut() {
            *n -= 1;
        }
        self.map.insert(
            key.clone(),
            Slot {
                seq: p as u32,
                touched: 0,
                state,
            },
        );
        Ok(true)
    }
}

impl<K: Hash + Eq + Clone, S> LazyTable<K, S> for Table<K, S> {
    fn take_ahead(&mut self, key: &K) -> Result<bool, CheckpointError> {
        if self.map.get(key).is_some() {
            return Ok(true);
        }
        if self.lazy.is_none() {
            return Ok(false);
        }
        self.decide(key)
    }

    fn advance(&mut self, n: usize) -> Result<bool, CheckpointError> {
        let mut budget = n;
        // First the keys the deltas name.
        while budget > 0 {
            let Some(l) = self.lazy.as_deref_mut() else {
                return Ok(true);
            };
            let Touched::Gathering(j, i, set) = &mut l.touched else {
                break;
            };
            if *j == l.layers.len() {
                l.touched = Touched::Done(std::mem::take(set));
                break;
            }
            let layer = &l.layers[*j];
            if *i == 0 {
                set.extend(layer.removed.iter().cloned());
            }
            if *i < layer.entries.len() {
                set.insert(layer.entries.key(*i)?);
                *i += 1;
                budget -= 1;
            } else {
                *j += 1;
                *i = 0;
            }
        }
        while budget > 0 {
            let Some(l) = self.lazy.as_deref_mut() else {
                return Ok(true);
            };
            if !matches!(l.touched, Touched::Done(_)) {
                return Ok(false);
            }
            if l.next == l.places {
                let tail = std::mem::take(&mut l.tail);
                self.order.extend(tail);
                self.lazy = None;
                return Ok(true);
            }
            let q = l.next;
            if let Some(key) = l.ahead.remove(&(q as u32)) {
                self.order.push(key);
            } else {
                let (j, i) = l.locate(q);
                let key = l.layers[j].entries.key(i)?;
                if !l.dead.remove(&(q as u32)) {
                    let Touched::Done(touched) = &l.touched else {
                        unreachable!("gathered above");
                    };
                    if j == 0 && !touched.contains(&key) {
                        // Only the whole archive has it: its place and
                        // state are the archive's.
                        let (_, state) = l.layers[0].entries.read(i)?;
                        if let Some(s) = self.map.get(&key) {
                            return Err(l.layers[0].entries.broken(format!(
                                "the key of place {q} was not found through the index (it was placed at {} instead): the index does not match this build's hashing",
                                s.seq
                            )));
                        }
                        if let Some(n) = l.pending.as_mut() {
                            *n -= 1;
                        }
                        self.map.insert(
                            key.clone(),
                            Slot {
                                seq: q as u32,
                                touched: 0,
                                state,
                            },
                        );
                    } else if self.map.get(&key).is_some() {
                        return Err(l.layers[j].entries.broken(format!(
                            "the key of place {q} was not found through the index: the index does not match this build's hashing"
                        )));
                    } else {
                        self.decide(&key)?;
                        let l = self.lazy.as_deref_mut().expect("still lazy");
                        l.ahead.remove(&(q as u32));
                        l.dead.remove(&(q as u32));
                    }
                }
                self.order.push(key);
            }
            let l = self.lazy.as_deref_mut().expect("still lazy");
            l.next += 1;
            budget -= 1;
            if l.next.is_multiple_of(PROGRESS_EVERY) {
                if let Some(p) = &l.progress {
                    p();
                }
            }
        }
        Ok(self.lazy.is_none())
    }

    fn place_new(&mut self, key: &K, state: S) {
        let Some(l) = self.lazy.as_deref_mut() else {
            unreachable!("placing a new key beside a chain that is done with");
        };
        let seq =
            u32::try_from(l.places + l.tail.len()).expect("at most 2^32 keys per keyed state");
        l.tail.push(key.clone());
        self.map.insert(
            key.clone(),
            Slot {
                seq,
                touched: 0,
                state,
            },
        );
    }

    fn take_place(&mut self, p: usize) -> Result<(), CheckpointError> {
        let Some(l) = self.lazy.as_deref_mut() else {
            return Ok(());
        };
        if p >= l.places || l.decided(p) {
            return Ok(());
        }
        let (j, i) = l.locate(p);
        let key = l.layers[j].entries.key(i)?;
        if self.map.get(&key).is_none() {
            self.decide(&key)?;
        }
        Ok(())
    }
}

impl<K, S> KeyedState<K, S> {
    /// Whether the state is still reading its chain (restored lazily).
    pub fn is_lazy(&self) -> bool {
        self.map.borrow().lazy.is_some()
    }
}

impl<K, S> KeyedState<K, S>
where
    K: Archive + Hash + Eq + Clone + 'static,
    S: Archive + 'static,
    Entry<Archived<K>, Archived<S>>: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
    Archived<K>: Deserialize<K, HighDeserializer<rancor::Error>>,
    Archived<S>: Deserialize<S, HighDeserializer<rancor::Error>>,
{
    /// A state over a chain of archives with key indexes (a whole one,
    /// then the deltas after it, oldest first), nothing read yet but the
    /// index headers, the deltas' removed keys and the parts before each
    /// archive's entries. `removed` restores a delta's removed keys.
    pub(crate) fn over_chain(
        links: &[Arc<LazySnapshot>],
        removed: impl Fn(&[u8]) -> Result<Vec<K>, CheckpointError>,
    ) -> Result<Self, CheckpointError> {
        let mut layers: Vec<Layer<K, S>> = Vec::with_capacity(links.len());
        let mut at = 0;
        for (j, file) in links.iter().enumerate() {
            let base = Base::<K, S>::open(Arc::clone(file))?;
            let head = file.payload(0..base.g.array_at as usize)?;
            let delta = super::delta::is_delta(
                file.payload(0..16.min(file.header().payload_len as usize))?,
            );
            if delta != (j > 0) {
                return Err(CheckpointError::Delta(format!(
                    "{}: link {} of {} is {} (a chain is a whole archive, then deltas)",
                    file.path().display(),
                    j + 1,
                    links.len(),
                    if delta { "a delta" } else { "whole" }
                )));
            }
            let removed = if delta {
                // The delta's header and removed keys lie before its
                // entries: verified with them.
                let p = super::delta::parse(head)?;
                removed(p.removed)?.into_iter().collect()
            } else {
                FxHashSet::default()
            };
            let n = base.g.n as usize;
            layers.push(Layer {
                entries: Box::new(base),
                removed,
                at,
            });
            at += n;
        }
        Ok(KeyedState {
            map: std::rc::Rc::new(std::cell::RefCell::new(Table::over(layers))),
        })
    }
}

impl<K: Hash + Eq + Clone, S: Default> KeyedState<K, S> {
    /// Brings `key`'s state into the table from the chain, or places the
    /// key new there with `S::default()` (a lazily restored state;
    /// nothing otherwise): `get_or_default` then reads no chain. The
    /// chain's errors come here.
    #[inline]
    pub fn prefetch(&self, key: &K) -> Result<(), CheckpointError> {
        let mut t = self.map.borrow_mut();
        if t.lazy.is_none() {
            return Ok(());
        }
        if !t.take_ahead(key)? {
            t.place_new(key, S::default());
        }
        Ok(())
    }
}

impl<K: Hash + Eq + Clone, S> KeyedState<K, S> {
    /// Has `f` called as the chain is read in order (every few places):
    /// for the owner's liveness, when the rest is read at once.
    pub fn on_restore_progress(&self, f: Box<dyn Fn()>) {
        if let Some(l) = self.map.borrow_mut().lazy.as_deref_mut() {
            l.progress = Some(f);
        }
    }

    /// Reads up to `n` more places of the chain in order; whether the
    /// chain is done with.
    pub fn restore_steps(&self, n: usize) -> Result<bool, CheckpointError> {
        self.map.borrow_mut().advance(n)
    }

    /// Reads the rest of the chain at once.
    pub fn settle(&self) -> Result<(), CheckpointError> {
        self.restore_steps(usize::MAX).map(drop)
    }

    /// [`restore_steps`](Self::restore_steps) for whoever drives the
    /// reading between records (the worker's background): it does not
    /// keep the state alive, and skips a turn while the state is in use.
    /// `Ok(true)` once the chain is read or the state gone.
    pub(crate) fn reader(&self) -> impl FnMut(usize) -> Result<bool, CheckpointError> {
        let table = std::rc::Rc::downgrade(&self.map);
        move |n| {
            let Some(t) = table.upgrade() else {
                return Ok(true);
            };
            let Ok(mut t) = t.try_borrow_mut() else {
                return Ok(false);
            };
            t.advance(n)
        }
    }
}

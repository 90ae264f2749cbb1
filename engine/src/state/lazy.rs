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

use rkyv::{
    api::high::{HighDeserializer, HighValidator},
    bytecheck::CheckBytes,
    collections::util::Entry,
    rancor,
    validation::{archive::ArchiveValidator, shared::SharedValidator, Validator},
    Archive, Archived, Deserialize,
};
use rustc_hash::{FxHashMap, FxHashSet};
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use super::index::{self, Geometry};
use super::{grow::GrowMap, KeyedState, Slot, Table};
use crate::checkpoint::{CheckpointError, LazySnapshot};

/// The archive a lazily restored state reads its keys from.
pub(crate) struct Base<K, S> {
    file: Arc<LazySnapshot>,
    g: Geometry,
    _types: PhantomData<fn() -> (K, S)>,
}

impl<K, S> Base<K, S>
where
    K: Archive + Hash + Eq,
    S: Archive,
    Entry<Archived<K>, Archived<S>>: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
    Archived<K>: Deserialize<K, HighDeserializer<rancor::Error>>,
    Archived<S>: Deserialize<S, HighDeserializer<rancor::Error>>,
{
    /// The base of `file` (a whole keyed archive with a key index).
    pub(crate) fn open(file: Arc<LazySnapshot>) -> Result<Self, CheckpointError> {
        let index_len = file.header().index_len;
        let head = file.index(0..index::HEADER.min(index_len as usize))?;
        let g = Geometry::decode(head, index_len, file.path())?;
        let entry = std::mem::size_of::<Entry<Archived<K>, Archived<S>>>() as u64;
        let payload = file.header().payload_len;
        let fits =
            g.n.checked_mul(entry)
                .and_then(|b| b.checked_add(g.array_at))
                .is_some_and(|end| end <= payload);
        let align = std::mem::align_of::<Entry<Archived<K>, Archived<S>>>() as u64;
        if g.entry != entry || !fits || g.array_at % align != 0 {
            return Err(CheckpointError::Lazy {
                path: file.path().to_path_buf(),
                reason: format!(
                    "key index: {} entries of {} bytes at {} do not fit this state's type ({entry} bytes an entry) in {payload} bytes",
                    g.n, g.entry, g.array_at
                ),
            });
        }
        // The entries' out-of-line parts (strings, vectors) lie before
        // the array: verified now, so that an entry read later points only
        // into verified bytes. Nothing for fixed-size keys and states.
        file.payload(0..g.array_at as usize)?;
        Ok(Base {
            file,
            g,
            _types: PhantomData,
        })
    }

    /// Entry `p`, verified and validated.
    fn entry(&self, p: usize) -> Result<&Entry<Archived<K>, Archived<S>>, CheckpointError> {
        let at = self.g.array_at as usize + p * self.g.entry as usize;
        self.file.payload(at..at + self.g.entry as usize)?;
        let all = self.file.payload_unverified();
        rkyv::api::access_pos_with_context::<Entry<Archived<K>, Archived<S>>, _, rancor::Error>(
            all,
            at,
            &mut Validator::new(ArchiveValidator::new(all), SharedValidator::new()),
        )
        .map_err(|source| CheckpointError::Validate {
            path: self.file.path().to_path_buf(),
            source,
        })
    }
}

/// Reading a base, for a table whose own bounds know nothing of rkyv.
pub(crate) trait BaseRead<K, S> {
    /// Entries in the base.
    fn len(&self) -> usize;
    /// Entry `p`, decoded.
    fn read(&self, p: usize) -> Result<(K, S), CheckpointError>;
    /// The key of entry `p`.
    fn key(&self, p: usize) -> Result<K, CheckpointError>;
    /// The place of `key` in the base, if it has one.
    fn find(&self, key: &K) -> Result<Option<usize>, CheckpointError>;
    /// An error naming the file: `why` is wrong with its index.
    fn broken(&self, why: String) -> CheckpointError;
}

impl<K, S> BaseRead<K, S> for Base<K, S>
where
    K: Archive + Hash + Eq,
    S: Archive,
    Entry<Archived<K>, Archived<S>>: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
    Archived<K>: Deserialize<K, HighDeserializer<rancor::Error>>,
    Archived<S>: Deserialize<S, HighDeserializer<rancor::Error>>,
{
    fn len(&self) -> usize {
        self.g.n as usize
    }

    fn read(&self, p: usize) -> Result<(K, S), CheckpointError> {
        let e = self.entry(p)?;
        let key = rkyv::deserialize::<K, rancor::Error>(&e.key)
            .map_err(|source| CheckpointError::Deserialize { source })?;
        let state = rkyv::deserialize::<S, rancor::Error>(&e.value)
            .map_err(|source| CheckpointError::Deserialize { source })?;
        Ok((key, state))
    }

    fn key(&self, p: usize) -> Result<K, CheckpointError> {
        let e = self.entry(p)?;
        rkyv::deserialize::<K, rancor::Error>(&e.key)
            .map_err(|source| CheckpointError::Deserialize { source })
    }

    fn find(&self, key: &K) -> Result<Option<usize>, CheckpointError> {
        let b = index::bucket(index::hash_of(key), self.g.buckets) as usize;
        let d = self
            .file
            .index(index::HEADER + 4 * b..index::HEADER + 4 * b + 8)?;
        let from = u32::from_le_bytes(d[0..4].try_into().unwrap()) as usize;
        let to = u32::from_le_bytes(d[4..8].try_into().unwrap()) as usize;
        if from > to || to as u64 > self.g.n {
            return Err(self.broken(format!("bucket {b} holds places {from}..{to}")));
        }
        let at = self.g.pos_at() as usize;
        let places = self.file.index(at + 4 * from..at + 4 * to)?;
        for c in places.chunks_exact(4) {
            let p = u32::from_le_bytes(c.try_into().unwrap()) as usize;
            if p as u64 >= self.g.n {
                return Err(self.broken(format!("place {p} of {}", self.g.n)));
            }
            if self.key(p)? == *key {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }

    fn broken(&self, why: String) -> CheckpointError {
        CheckpointError::Lazy {
            path: self.file.path().to_path_buf(),
            reason: format!("key index: {why} (a damaged index or an engine bug)"),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::format::{file_image, Position, SnapshotHeader, FORMAT_VERSION};
    use crate::checkpoint::SnapshotBytes;
    use crate::state::delta::chain_tests::listed;
    use crate::state::delta::{CaptureFor, Incremental};
    use crate::state::StateSnapshot;
    use proptest::prelude::*;
    use std::path::PathBuf;

    type S = KeyedState<u64, Vec<u32>>;

    /// `(op, key)`: 0–5 write, 6–7 remove, 8 compact; an even key is
    /// looked up through `prefetch` first, as the engine's keyed operator
    /// does, an odd one straight through `get_or_default`.
    fn apply_op(s: &mut S, op: u8, key: u64) {
        if op < 8 && key.is_multiple_of(2) {
            s.prefetch(&key).unwrap();
        }
        crate::state::delta::chain_tests::apply_op(s, op, key);
    }

    /// A checkpoint file of `bytes` (with its key index, if it has one).
    fn write_file(tag: &str, id: u64, bytes: &SnapshotBytes) -> PathBuf {
        let index = bytes
            .indexer()
            .map(|build| build(bytes.payload()).unwrap())
            .unwrap_or_default();
        let header = SnapshotHeader {
            checkpoint_id: id,
            operator: "keyed".into(),
            instance: 0,
            positions: vec![Position {
                partition: 0,
                next_seq: 1,
            }],
            created_at_ms: 0,
            payload_len: 0,
            payload_checksum: 0,
            index_len: 0,
            version: FORMAT_VERSION,
        };
        let path = std::env::temp_dir().join(format!(
            "tandem-lazy-{tag}-{}-{id}-{:?}.snap",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&path, file_image(header, bytes.payload(), &index)).unwrap();
        path
    }

    fn policy() -> Incremental {
        Incremental {
            max_deltas: 3,
            max_delta_ratio: 3.0,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// A state restored lazily from a chain — its whole archive
        /// read through the key index, the deltas over it, the rest
        /// read in steps at any moment — behaves as the same chain
        /// restored eagerly under any writes, removals and compactions
        /// after it: it iterates the same, and its next checkpoint's
        /// bytes are the same.
        #[test]
        fn a_lazily_restored_state_is_indistinguishable_from_an_eager_one(
            rounds in proptest::collection::vec(
                proptest::collection::vec((0u8..9, 0u64..200), 0..120),
                1..6,
            ),
            after in proptest::collection::vec((0u8..9, 0u64..260, 0usize..3), 0..120),
        ) {
            let mut s = S::default();
            s.index_archives();
            let mut done: Vec<(u64, Option<u64>, SnapshotBytes)> = Vec::new();
            for (i, ops) in rounds.iter().enumerate() {
                for &(op, key) in ops {
                    apply_op(&mut s, op, key);
                }
                let id = i as u64 + 1;
                let how = CaptureFor { checkpoint: id, base: done.last().map(|d| d.0), policy: policy() };
                let bytes = s.capture_for(how).unwrap().archive().unwrap();
                done.push((id, bytes.delta_over(), bytes));
            }
            let id = done.last().unwrap().0;
            let mut chain = vec![done.len() - 1];
            while let Some(base) = done[*chain.last().unwrap()].1 {
                chain.push(done.iter().position(|d| d.0 == base).unwrap());
            }
            chain.reverse();
            let links: Vec<&[u8]> = chain.iter().map(|&i| done[i].2.payload()).collect();
            let mut eager = S::restore_chain(&links, Some(id)).unwrap();
            let mut files = Vec::new();
            let mut paths = Vec::new();
            for &i in &chain {
                let bytes = &done[i].2;
                prop_assert!(bytes.indexer().is_some(), "an archive carries its indexer");
                let path = write_file("same", done[i].0, bytes);
                files.push(LazySnapshot::open(&path).unwrap().unwrap());
                paths.push(path);
            }
            let mut lazy = S::restore_lazy(&files, Some(id)).unwrap();
            for p in paths {
                std::fs::remove_file(p).unwrap();
            }
            // (`len` of a chain with deltas reads the chain: compared at
            // the end.)
            for &(op, key, steps) in &after {
                apply_op(&mut eager, op, key);
                apply_op(&mut lazy, op, key);
                lazy.restore_steps(steps.saturating_sub(1)).unwrap();
            }
            // Two checkpoints more, the base still being read at the first
            // (a delta needs only what was written: no settling).
            for (n, ops) in [&after[..], &after[after.len() / 2..]].into_iter().enumerate() {
                if n > 0 {
                    for &(op, key, steps) in ops.iter().rev() {
                        apply_op(&mut eager, op, key);
                        apply_op(&mut lazy, op, key);
                        lazy.restore_steps(steps.saturating_sub(1)).unwrap();
                    }
                }
                let c = id + 1 + n as u64;
                let how = CaptureFor { checkpoint: c, base: Some(c - 1), policy: policy() };
                let a = eager.capture_for(how).unwrap().archive().unwrap();
                let b = lazy.capture_for(how).unwrap().archive().unwrap();
                prop_assert_eq!(a.delta_over(), b.delta_over());
                prop_assert_eq!(a.payload(), b.payload());
            }
            prop_assert_eq!(listed(&mut lazy), listed(&mut eager));
            prop_assert!(!lazy.is_lazy());
            prop_assert_eq!(lazy.len(), eager.len());
        }
    }

    /// A whole archive of `n` keys `k → [k]` as a checkpoint file.
    fn whole_file(tag: &str, n: u64) -> (S, PathBuf) {
        let mut s = S::default();
        s.index_archives();
        for k in 0..n {
            s.get_or_default(&k).push(k as u32);
        }
        let bytes = s.capture().unwrap().archive().unwrap();
        let path = write_file(tag, 1, &bytes);
        (s, path)
    }

    #[test]
    fn a_key_is_read_without_reading_the_rest() {
        let (_, path) = whole_file("touch", 50_000);
        let file = LazySnapshot::open(&path).unwrap().unwrap();
        let s = S::restore_lazy(&[Arc::clone(&file)], None).unwrap();
        s.prefetch(&31_337).unwrap();
        assert_eq!(s.get(&31_337).as_deref(), Some(&vec![31_337]));
        assert_eq!(s.len(), 50_000);
        // A few blocks of the index and the archive, not all of them.
        let blocks = file.layout().blocks;
        let read = (0..blocks)
            .filter(|&b| file.body(b * 65_536..b * 65_536 + 1).is_ok())
            .count();
        assert_eq!(read as u64, blocks, "every block is intact");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_damaged_block_is_an_error_naming_the_file_and_condemns_it() {
        let (_, path) = whole_file("damaged", 20_000);
        let file = LazySnapshot::open(&path).unwrap().unwrap();
        let s = S::restore_lazy(&[Arc::clone(&file)], None).unwrap();
        // Flip a byte of an entry in a block not read yet (block 3: the
        // entries span blocks 1 to 6), on disk, under the map.
        let at = crate::checkpoint::format::HEADER_BLOCK as u64 + 3 * 65_536 + 100;
        drop(file);
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let mut b = [0u8; 1];
            f.read_exact_at(&mut b, at).unwrap();
            f.write_all_at(&[!b[0]], at).unwrap();
        }
        let e = s.settle().unwrap_err().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
        assert!(e.contains(&*path.to_string_lossy()), "{e}");
        let again = LazySnapshot::open(&path).unwrap_err().to_string();
        assert!(again.contains("found damaged earlier"), "{again}");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn an_index_that_does_not_find_a_key_is_an_error_not_a_fresh_state() {
        // The index of another archive of as many keys: the keys it
        // places are not where this one has them.
        let (_, path) = whole_file("index-a", 3_000);
        let mut other = S::default();
        other.index_archives();
        for k in 0..3_000u64 {
            other.get_or_default(&(k + 1_000_000)).push(0);
        }
        let other = other.capture().unwrap().archive().unwrap();
        let mut mine = S::default();
        mine.index_archives();
        for k in 0..3_000u64 {
            mine.get_or_default(&k).push(k as u32);
        }
        let mine = mine.capture().unwrap().archive().unwrap();
        let index = other.indexer().unwrap()(other.payload()).unwrap();
        let header = SnapshotHeader {
            checkpoint_id: 1,
            operator: "keyed".into(),
            instance: 0,
            positions: Vec::new(),
            created_at_ms: 0,
            payload_len: 0,
            payload_checksum: 0,
            index_len: 0,
            version: FORMAT_VERSION,
        };
        std::fs::write(&path, file_image(header, mine.payload(), &index)).unwrap();
        let file = LazySnapshot::open(&path).unwrap().unwrap();
        let mut s = S::restore_lazy(&[file], None).unwrap();
        s.prefetch(&7).unwrap();
        s.get_or_default(&7).push(1);
        let e = s.settle().unwrap_err().to_string();
        assert!(e.contains("not found through the index"), "{e}");
        std::fs::remove_file(path).unwrap();
    }
}

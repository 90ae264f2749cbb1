//! Keyed state: what a keyed operator instance remembers per key.
//!
//! State is owned by exactly one operator instance on one core (records are
//! hash-partitioned by key before they reach it), so it needs no
//! synchronisation.
//!
//! ## Order
//!
//! Iterating the state — as a keyed operator's end-of-stream hook does —
//! visits keys in **insertion order**: the order their first records were
//! processed, a function of the input order alone. A hash map's own order
//! would also depend on its capacity and growth history, so a state
//! restored from a snapshot could iterate differently from the live one it
//! was taken from; a standby that replays the primary's input after
//! restoring must emit the same outputs in the same order (the consumers
//! drop what they already have by counting), so the order has to survive a
//! snapshot. Each entry of the hash map carries its insertion number beside
//! its state (one probe per record, the state in the same bucket), and the
//! keys are also kept in insertion order.
//!
//! ## Removing keys
//!
//! An operator drops a key whose state holds nothing any more (a session
//! that closed, a joined order) with `KeyedState::remove_at`: its entry
//! leaves the map, its place in the order stays behind, dead, and a later
//! record of the key inserts it again, at the end of the order. Dead
//! places are skipped by iteration and archives; once they are half the
//! order, `KeyedState::compact` renumbers the live keys densely, in the
//! same order (the operator re-indexes what it keeps by number). A
//! restore numbers the keys densely too. Only relative order is ever
//! observable, and it is the same in all three.
//!
//! ## Snapshots off the data path
//!
//! A snapshot must not stop the core that owns the state: archiving a
//! large state takes milliseconds, and every record queued behind it waits
//! that long. So a snapshot is a **freeze** ([`StateSnapshot::capture`]),
//! nearly O(1): it notes the number of keys and an epoch, and from then on the
//! first write to an entry that existed at the freeze saves the entry's
//! state as it was (its *pre-image*) in the freeze's undo log — one
//! comparison in the bucket the record touches anyway, and a clone of one
//! state into a page of the log the first time (pages of 256, allocated on
//! first use; the freeze itself allocates one pointer per page). The frozen state is then archived a slice at a
//! time (`archive.rs`) by the worker that owns the state, between its
//! records: each entry below the frozen count, in insertion order, from
//! its pre-image if it has one, else from the live map. Not by a thread of
//! its own, which would take the core from a pinned worker for as long.
//! When the archive is whole the freeze ends and its undo log is dropped.
//! The state lives behind an `Rc<RefCell<…>>` shared with the archive
//! under way (never across threads: a keyed state is not `Send`); it is
//! borrowed for one record or one slice at a time.
//!
//! (An earlier layout kept the entries in copy-on-write chunks behind a
//! separate key → number index: two cache misses per record instead of
//! one, which cost the paper pipeline ~17 % of its throughput.)
//!
//! [`KeyedState::to_snapshot_bytes`] archives the state with rkyv as a
//! vector of `(key, state)` entries in insertion order. The archive is
//! [`ArchivedKeyedState`]; looking a key up in it is a linear scan, so
//! restoring rebuilds the state with [`KeyedState::from_archived`]. The
//! same state always produces the same bytes, whole or in slices. (The
//! archived layout is the one earlier builds wrote for a hash map's
//! entries, so their snapshots still restore.)

use rkyv::{Archive, Deserialize, Serialize};
use std::cell::{Ref, RefCell, RefMut};
use std::hash::Hash;
use std::rc::Rc;

mod archive;
pub mod delta;
pub mod disk;
mod grow;
mod index;
mod lazy;
mod order;
mod snapshot;
pub mod ttl;

use lazy::LazyTable;

pub use disk::{DiskBackend, StateBackend};
pub use snapshot::StateSnapshot;

use grow::GrowMap;
use order::BrokenOrder;
pub use order::InsertionOrder;

/// One value of type `S` per key, iterated in insertion order (see the
/// module docs).
#[derive(Archive, Serialize, Deserialize)]
pub struct KeyedState<K, S> {
    #[rkyv(with = InsertionOrder)]
    map: Rc<RefCell<Table<K, S>>>,
}

/// The entries, their keys in insertion order, and the freezes under way.
pub struct Table<K, S> {
    map: GrowMap<K, Slot<S>>,
    /// Every key, by insertion number (a removed key's place stays, dead,
    /// until a compaction).
    order: Vec<K>,
    /// Dead places in `order`.
    dead: usize,
    /// The freezes under way and the journal of changes: what a write
    /// touches first.
    log: Log<K, S>,
    /// The epoch the next freeze gets (1, 2, …).
    next_epoch: u32,
    /// Set only on the stand-in an archive made in slices writes its root
    /// from: where its entries stand in the output, and how many.
    presolved: Option<(usize, usize)>,
    /// The payload bytes and live entries of this table's last whole
    /// archive made in slices: the next one reserves its output from them,
    /// so that it does not grow by doubling — each doubling copies the
    /// whole archive so far at once, milliseconds of one slice for a
    /// large state.
    archived: std::cell::Cell<(usize, usize)>,
    /// A lazily restored table's base, until every place of it is read
    /// ([`lazy`]).
    lazy: Option<Box<lazy::Lazy<K, S>>>,
    /// Its checkpoint files carry a key index ([`index`]): a restore
    /// reads it lazily (a `key_by` operator's state).
    indexed: bool,
}

/// A key's state, its insertion number, and the newest freeze its
/// pre-image was saved for (0: none).
pub struct Slot<S> {
    seq: u32,
    touched: u32,
    state: S,
}

/// One freeze under way: the places below `len` as they were at it.
struct Freeze<S> {
    epoch: u32,
    len: usize,
    /// Pre-images of the entries written since, by insertion number.
    undo: Undo<S>,
}

/// Pre-images by insertion number, in pages of [`PAGE`] allocated on the
/// first write into them: no rehash, no copy of what is there as it grows
/// (a hash map here paused a record for 1–4.5 ms when it doubled).
struct Undo<S> {
    pages: Vec<Option<Box<[Option<S>]>>>,
}

/// Entries per page of an undo log.
const PAGE: usize = 256;

impl<S> Undo<S> {
    /// An empty log for `len` entries: one pointer per page.
    fn new(len: usize) -> Self {
        let mut pages = Vec::new();
        pages.resize_with(len.div_ceil(PAGE), || None);
        Undo { pages }
    }

    fn get(&self, seq: u32) -> Option<&S> {
        let i = seq as usize;
        self.pages.get(i / PAGE)?.as_ref()?[i % PAGE].as_ref()
    }

    fn save(&mut self, seq: u32, state: S) {
        let i = seq as usize;
        if let Some(page) = self.pages.get_mut(i / PAGE) {
            let page = page.get_or_insert_with(|| (0..PAGE).map(|_| None).collect());
            page[i % PAGE] = Some(state);
        }
    }
}

impl<K, S> Default for Table<K, S> {
    fn default() -> Self {
        Table {
            map: GrowMap::default(),
            order: Vec::new(),
            dead: 0,
            log: Log::default(),
            next_epoch: 1,
            presolved: None,
            archived: std::cell::Cell::new((0, 0)),
            lazy: None,
            indexed: false,
        }
    }
}

impl<K, S> Default for KeyedState<K, S> {
    fn default() -> Self {
        KeyedState {
            map: Rc::new(RefCell::new(Table::default())),
        }
    }
}

impl<K: Hash + Eq, S> Table<K, S> {
    /// Entry `i` (by insertion number) as freeze `f` saw it, or as it is
    /// now (`f` = `None`).
    /// `None`: no such place, or a dead one.
    fn entry_at<'a>(&'a self, i: usize, f: Option<&'a Freeze<S>>) -> Option<(&'a K, &'a S)> {
        let key = lazy::key_at(&self.order, &self.lazy, i)?;
        let pre = f.and_then(|f| f.undo.get(i as u32));
        let state = match pre {
            Some(s) => s,
            None => &self.live_slot(i)?.state,
        };
        Some((key, state))
    }

    /// The key at place `seq` and its slot, unless the place is dead, and
    /// the freezes (a write touches them first).
    #[inline]
    fn at_mut(&mut self, seq: u32) -> Option<SlotAt<'_, K, S>> {
        let Table {
            map,
            order,
            log,
            lazy,
            ..
        } = self;
        let key = lazy::key_at(order, lazy, seq as usize)?;
        let slot = map.get_mut(key).filter(|s| s.seq == seq)?;
        Some((key, slot, log))
    }

    /// The slot of the key at place `i`, unless that place is dead (the
    /// key removed, or inserted again at a later place).
    #[inline]
    fn live_slot(&self, i: usize) -> Option<&Slot<S>> {
        self.map
            .get(lazy::key_at(&self.order, &self.lazy, i)?)
            .filter(|s| s.seq as usize == i)
    }

    fn freeze(&self, epoch: u32) -> Option<&Freeze<S>> {
        self.log.freezes.iter().find(|f| f.epoch == epoch)
    }
}

impl<K: Hash + Eq + Clone, S> Table<K, S> {
    /// Reads the rest of a lazily restored table's base now (see
    /// [`lazy`]): for what needs every place.
    ///
    /// # Panics
    ///
    /// If the base cannot be read (a damaged file). The engine's keyed
    /// operator settles with [`KeyedState::settle`] first, which returns
    /// the error instead.
    fn settle_now(&mut self) {
        if self.lazy.is_some() {
            if let Err(e) = self.advance(usize::MAX) {
                panic!("a lazily restored keyed state could not read its checkpoint: {e}");
            }
        }
    }

    /// Takes place `seq` of a lazily restored table's base into the map
    /// if it is still only there (for an access by number).
    ///
    /// # Panics
    ///
    /// As [`settle_now`](Self::settle_now).
    fn take_place_now(&mut self, seq: u32) {
        if self.lazy.is_some() {
            if let Err(e) = self.take_place(seq as usize) {
                panic!("a lazily restored keyed state could not read its checkpoint: {e}");
            }
        }
    }

    /// Puts `key` in the map of a lazily restored table: taken from the
    /// base, or placed new.
    #[cold]
    fn lazy_slot(&mut self, key: &K)
    where
        S: Default,
    {
        match self.take_ahead(key) {
            Ok(true) => {}
            Ok(false) => self.place_new(key, S::default()),
            Err(e) => panic!("a lazily restored keyed state could not read its checkpoint: {e}"),
        }
    }

    /// Numbers the live keys densely, in the same order (no freeze may be
    /// under way: its pre-images are by number), the journal with them;
    /// returns the new number of each old one (`u32::MAX`: dead).
    fn renumber_densely(&mut self) -> Vec<u32> {
        self.settle_now();
        let Table {
            map,
            order,
            dead,
            log,
            ..
        } = self;
        // A retired table moves by walking `order` by number: done first.
        map.settle(order);
        let old = std::mem::take(order);
        let mut renumber = vec![u32::MAX; old.len()];
        for (i, key) in old.into_iter().enumerate() {
            if let Some(slot) = map.get_mut(&key).filter(|s| s.seq as usize == i) {
                slot.seq = order.len() as u32;
                renumber[i] = slot.seq;
                order.push(key);
            }
        }
        *dead = 0;
        log.journal.renumber(&renumber);
        renumber
    }
}

/// A live key, its slot, and what a write to it touches first.
type SlotAt<'a, K, S> = (&'a K, &'a mut Slot<S>, &'a mut Log<K, S>);

/// What a write touches first: the freezes under way (for their
/// pre-images) and the journal of changes (for deltas).
pub struct Log<K, S> {
    /// Freezes whose archive is under way, oldest first.
    freezes: Vec<Freeze<S>>,
    /// The newest freeze's epoch (0: none yet): a slot whose `touched` is
    /// below it is written for the first time since that freeze.
    now: u32,
    /// Changes since the oldest freeze a delta may still start from.
    journal: delta::Journal<K>,
}

impl<K, S> Default for Log<K, S> {
    fn default() -> Self {
        Log {
            freezes: Vec::new(),
            now: 0,
            journal: delta::Journal::default(),
        }
    }
}

/// Before a write to `slot`: the first write since the newest freeze
/// saves its pre-image for every freeze under way that has none of it yet
/// and that it existed at, and journals its place (when deltas are taken).
#[inline]
fn touch<K, S: Clone>(log: &mut Log<K, S>, slot: &mut Slot<S>) {
    if slot.touched >= log.now {
        return;
    }
    for f in log.freezes.iter_mut() {
        // Not written since this freeze (else `touched` would be at least
        // its epoch): its state now is its state then.
        if f.epoch > slot.touched && (slot.seq as usize) < f.len {
            f.undo.save(slot.seq, slot.state.clone());
        }
    }
    log.journal.written(slot.seq);
    slot.touched = log.now;
}

impl<K: Hash + Eq + Clone, S: Default + Clone> KeyedState<K, S> {
    /// The state of `key`, created with `S::default()` on first use.
    ///
    /// # Panics
    ///
    /// With more than 2³² keys in one instance, and if the state is
    /// borrowed already (an engine bug: it is borrowed for one record or
    /// one archive slice at a time).
    #[inline]
    pub fn get_or_default(&mut self, key: &K) -> RefMut<'_, S> {
        self.get_or_default_numbered(key).1
    }

    /// The state of `key` (created with `S::default()` on first use) and
    /// the key's insertion number, which names it for
    /// [`with_key_at`](Self::with_key_at).
    #[inline]
    pub(crate) fn get_or_default_numbered(&mut self, key: &K) -> (u32, RefMut<'_, S>) {
        let mut seq = 0;
        let state = RefMut::map(self.map.borrow_mut(), |t| {
            if t.lazy.is_some() {
                t.lazy_slot(key);
                let Table { map, log, .. } = t;
                let slot = map.get_mut(key).expect("placed");
                touch(log, slot);
                seq = slot.seq;
                return &mut slot.state;
            }
            let Table {
                map, order, log, ..
            } = t;
            let slot = map.get_or_insert_with(key, order, |n| {
                let seq = u32::try_from(n).expect("at most 2^32 keys per keyed state");
                Slot {
                    seq,
                    touched: 0,
                    state: S::default(),
                }
            });
            touch(log, slot);
            seq = slot.seq;
            &mut slot.state
        });
        (seq, state)
    }

    /// Calls `f` with the key numbered `seq` (its insertion number) and
    /// its state; `None` if there is no such key.
    pub(crate) fn with_key_at<R>(
        &mut self,
        seq: u32,
        f: impl FnOnce(&K, &mut S) -> R,
    ) -> Option<R> {
        let mut t = self.map.borrow_mut();
        t.take_place_now(seq);
        let (key, slot, log) = t.at_mut(seq)?;
        touch(log, slot);
        Some(f(key, &mut slot.state))
    }

    /// Removes the key numbered `seq` and its state (see the module docs);
    /// `false` if there is no such key. A freeze under way keeps its
    /// pre-image.
    pub(crate) fn remove_at(&mut self, seq: u32) -> bool {
        let mut t = self.map.borrow_mut();
        t.take_place_now(seq);
        let Some((key, slot, log)) = t.at_mut(seq) else {
            return false;
        };
        touch(log, slot);
        let key = key.clone();
        t.log.journal.removed(&key);
        t.map.remove(&key);
        t.dead += 1;
        true
    }

    /// Renumbers the live keys densely, in the same order, once dead places
    /// are at least half of the order and no freeze is under way (a
    /// freeze's pre-images are by number). If it did, returns the new
    /// number of each old one (`u32::MAX`: dead), for the caller to
    /// renumber what it keeps by number. O(places), at most once per as
    /// many removals.
    pub(crate) fn compact(&mut self) -> Option<Vec<u32>> {
        let mut t = self.map.borrow_mut();
        // Not while a lazily restored state reads its base (its dead
        // places wait).
        if t.lazy.is_some()
            || t.dead < 64
            || 2 * t.dead < t.order.len()
            || !t.log.freezes.is_empty()
        {
            return None;
        }
        Some(t.renumber_densely())
    }

    /// Places in the insertion order, live or dead: the range of key
    /// numbers.
    pub(crate) fn places(&self) -> usize {
        self.map.borrow().place_count()
    }

    /// Writes the state of key number `seq` with `f` if `check`, reading
    /// it only, says so: a state `check` declines is not marked written
    /// (a freeze under way saves no pre-image of it). What `f` returned
    /// (`false` if it did not run); `None` if there is no such key.
    pub(crate) fn update_at_if(
        &mut self,
        seq: u32,
        check: impl FnOnce(&S) -> bool,
        f: impl FnOnce(&mut S) -> bool,
    ) -> Option<bool> {
        let mut t = self.map.borrow_mut();
        t.take_place_now(seq);
        let (_, slot, log) = t.at_mut(seq)?;
        if !check(&slot.state) {
            return Some(false);
        }
        touch(log, slot);
        Some(f(&mut slot.state))
    }

    /// Calls `f` with every key's insertion number and state, in insertion
    /// order, without marking anything written (`f` only reads).
    pub(crate) fn for_each_numbered(&self, mut f: impl FnMut(u32, &S)) {
        self.map.borrow_mut().settle_now();
        let t = self.map.borrow();
        for i in 0..t.order.len() {
            if let Some(slot) = t.live_slot(i) {
                f(slot.seq, &slot.state);
            }
        }
    }

    /// Moves into this state the keys of `other` that `keep` accepts, in
    /// `other`'s insertion order (a key this state has already is
    /// overwritten): what an instance restored at another parallelism
    /// takes of an old instance's state.
    pub(crate) fn take_keys(&mut self, mut other: Self, keep: impl Fn(&K) -> bool) {
        other.for_each_mut(|k, s| {
            if keep(k) {
                *self.get_or_default(k) = std::mem::take(s);
            }
        });
    }

    /// Calls `f` with every key and its state, in insertion order.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&K, &mut S)) {
        let mut t = self.map.borrow_mut();
        t.settle_now();
        let Table {
            map, order, log, ..
        } = &mut *t;
        for (i, key) in order.iter().enumerate() {
            if let Some(slot) = map.get_mut(key).filter(|s| s.seq as usize == i) {
                touch(log, slot);
                f(key, &mut slot.state);
            }
        }
    }
}

impl<K, S> KeyedState<K, S> {
    /// The state of `key`, if it has one.
    ///
    /// # Panics
    ///
    /// For a lazily restored state whose checkpoint cannot be read (see
    /// [`KeyedState::prefetch`], which returns that error).
    pub fn get(&self, key: &K) -> Option<Ref<'_, S>>
    where
        K: Hash + Eq + Clone,
    {
        {
            let mut t = self.map.borrow_mut();
            if t.lazy.is_some() {
                if let Err(e) = t.take_ahead(key) {
                    panic!("a lazily restored keyed state could not read its checkpoint: {e}");
                }
            }
        }
        Ref::filter_map(self.map.borrow(), |t| t.map.get(key).map(|s| &s.state)).ok()
    }

    /// Number of keys with state.
    ///
    /// # Panics
    ///
    /// For a state restored lazily from a chain with deltas whose
    /// checkpoint cannot be read (its live keys are known once the chain
    /// is read; see [`KeyedState::settle`], which returns that error).
    pub fn len(&self) -> usize
    where
        K: Hash + Eq + Clone,
    {
        if let Some(n) = self.map.borrow().live_known() {
            return n;
        }
        self.map.borrow_mut().settle_now();
        self.map.borrow().map.len()
    }

    /// Whether no key has state.
    pub fn is_empty(&self) -> bool
    where
        K: Hash + Eq + Clone,
    {
        self.len() == 0
    }

    /// Freezes the state as it is now, in O(1) (see the module docs): until
    /// the returned handle is dropped, the first write to an entry saves its
    /// pre-image for it.
    ///
    /// A lazily restored state may be frozen before its base is read
    /// (the places still only in the base are not entries of the freeze:
    /// a whole archive settles first, a delta's places are all read).
    fn freeze(&self) -> Frozen<K, S> {
        let mut t = self.map.borrow_mut();
        if t.next_epoch == u32::MAX && t.log.freezes.is_empty() {
            // Once in 4 G freezes: numbering starts again, and no delta
            // can start from a freeze numbered before.
            t.map.values_mut().for_each(|s| s.touched = 0);
            t.next_epoch = 1;
            t.log.journal.forget();
        }
        let epoch = t.next_epoch;
        t.next_epoch = t.next_epoch.saturating_add(1);
        t.log.now = epoch;
        let (len, live) = (t.place_count(), t.map.len());
        t.log.freezes.push(Freeze {
            epoch,
            len,
            undo: Undo::new(len),
        });
        Frozen {
            table: Rc::clone(&self.map),
            epoch,
            len,
            live,
        }
    }
}

/// A freeze of a keyed state under way ([`KeyedState::freeze`]); dropping
/// it ends the freeze.
pub(crate) struct Frozen<K, S> {
    table: Rc<RefCell<Table<K, S>>>,
    epoch: u32,
    /// Places at the freeze, and live keys among them.
    len: usize,
    live: usize,
}

impl<K, S> Drop for Frozen<K, S> {
    fn drop(&mut self) {
        // Never borrowed while a handle drops (one record or one slice at a
        // time, on one thread); if it were, the freeze would only live on
        // and keep saving pre-images.
        if let Ok(mut t) = self.table.try_borrow_mut() {
            let epoch = self.epoch;
            t.log.freezes.retain(|f| f.epoch != epoch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_created_once_per_key_and_kept() {
        let mut s: KeyedState<u32, u64> = KeyedState::default();
        *s.get_or_default(&1) += 5;
        *s.get_or_default(&1) += 2;
        *s.get_or_default(&2) += 1;
        assert_eq!(s.get(&1).as_deref(), Some(&7));
        assert_eq!(s.get(&2).as_deref(), Some(&1));
        assert_eq!(s.get(&3).as_deref(), None);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn state_survives_a_snapshot_round_trip() {
        let mut s: KeyedState<String, (u64, u64)> = KeyedState::default();
        for i in 0..100u64 {
            *s.get_or_default(&format!("k{i}")) = (i, i * i);
        }
        let bytes = s.to_snapshot_bytes().unwrap();
        let archived = rkyv::access::<ArchivedKeyedState<String, (u64, u64)>, rkyv::rancor::Error>(
            bytes.payload(),
        )
        .unwrap();
        assert_eq!(archived.len(), 100);
        let back = KeyedState::<String, (u64, u64)>::from_archived(archived).unwrap();
        assert_eq!(back.len(), 100);
        assert_eq!(back.get(&"k7".to_string()).as_deref(), Some(&(7, 49)));
    }

    #[test]
    fn iteration_order_is_insertion_order_and_survives_a_snapshot() {
        // Keys whose hashes collide and spread over growth steps: a hash
        // map rebuilt from its archive can iterate in another order.
        let mut s: KeyedState<u64, u64> = KeyedState::default();
        let keys: Vec<u64> = (0..5000u64).map(|i| (i * 7_919) ^ (i << 17)).collect();
        for (i, k) in keys.iter().enumerate() {
            *s.get_or_default(k) = i as u64;
        }
        let mut order = Vec::new();
        s.for_each_mut(|k, _| order.push(*k));
        assert_eq!(order, keys);
        let restored = <KeyedState<u64, u64> as StateSnapshot>::restore(
            StateSnapshot::snapshot(&s).unwrap().payload(),
        )
        .unwrap();
        let mut restored = restored;
        *restored.get_or_default(&u64::MAX) = 1;
        *s.get_or_default(&u64::MAX) = 1;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        s.for_each_mut(|k, v| a.push((*k, *v)));
        restored.for_each_mut(|k, v| b.push((*k, *v)));
        assert_eq!(a, b, "a restored state iterates as the live one");
    }

    /// The entries below a freeze's count as that freeze saw them.
    fn frozen_view(s: &KeyedState<u64, u64>, f: &Frozen<u64, u64>) -> Vec<(u64, u64)> {
        let t = s.map.borrow();
        let fr = t.freeze(f.epoch).expect("under way");
        (0..f.len)
            .map(|i| {
                let (k, v) = t.entry_at(i, Some(fr)).unwrap();
                (*k, *v)
            })
            .collect()
    }

    #[test]
    fn overlapping_freezes_each_see_the_state_as_it_was_at_them() {
        let mut s: KeyedState<u64, u64> = KeyedState::default();
        for k in 0..100 {
            *s.get_or_default(&k) = k;
        }
        let at_a: Vec<(u64, u64)> = (0..100).map(|k| (k, k)).collect();
        let a = s.freeze();
        for k in (0..100).step_by(3) {
            *s.get_or_default(&k) += 1_000;
        }
        *s.get_or_default(&500) = 5;
        let mut at_b = Vec::new();
        s.for_each_mut(|k, v| at_b.push((*k, *v)));
        let b = s.freeze();
        for k in 0..101 {
            *s.get_or_default(&k) += 7;
        }
        s.for_each_mut(|_, v| *v += 1);
        assert_eq!(frozen_view(&s, &a), at_a);
        assert_eq!(frozen_view(&s, &b), at_b);
        // Ending a freeze keeps the other; once none is under way, writes
        // save nothing.
        drop(a);
        assert_eq!(frozen_view(&s, &b), at_b);
        drop(b);
        *s.get_or_default(&1) += 1;
        assert!(s.map.borrow().log.freezes.is_empty());
        assert_eq!(s.get(&1).as_deref(), Some(&(1 + 7 + 1 + 1)));
    }
}

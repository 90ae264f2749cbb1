//! A hash map that grows without a pause.
//!
//! A hash map doubles by moving every entry into a new table at once: on
//! the paper's keyed stage (50 k users an instance) the last doublings
//! held one record for 1.5–3.4 ms, the whole tail of a run at 200 k
//! records/s (p99.9 ~2 ms, max ~5 ms, every run; measured on the 2-core
//! reference VM). Here a full table is *retired* instead: new keys go to a
//! table twice as large, and every access that may insert moves
//! [`STEP`] entries of the retired table across, in insertion order, until
//! it is empty. A lookup during the move probes both tables.
//!
//! The move always ends before the new table fills: after a retirement of
//! `n` entries the new table holds room for `2n`, and each access adds at
//! most one new key while moving at least one old one, so `n` new keys
//! cannot arrive before the `n` old ones have moved. (Should it ever not,
//! the rest moves at once — the old pause, never a wrong answer.)

use rustc_hash::{FxBuildHasher, FxHashMap};
use std::hash::Hash;

/// Entries moved per access while a retired table empties.
pub(super) const STEP: usize = 4;

/// See the module docs. The move walks the keys in insertion order (a
/// removed key's place is still in the order, so every key of the retired
/// table is among the places it walks).
pub(crate) struct GrowMap<K, V> {
    live: FxHashMap<K, V>,
    /// The table `live` outgrew, emptying into it.
    retired: FxHashMap<K, V>,
    /// The next key, by insertion number, to move out of `retired`.
    cursor: usize,
}

impl<K, V> Default for GrowMap<K, V> {
    fn default() -> Self {
        GrowMap {
            live: FxHashMap::default(),
            retired: FxHashMap::default(),
            cursor: 0,
        }
    }
}

impl<K, V> GrowMap<K, V> {
    /// A map with room for `n` entries.
    pub(crate) fn with_capacity(n: usize) -> Self {
        GrowMap {
            live: FxHashMap::with_capacity_and_hasher(n, FxBuildHasher),
            ..GrowMap::default()
        }
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.live.len() + self.retired.len()
    }

    /// Whether a retired table is still emptying.
    #[cfg(test)]
    fn moving(&self) -> bool {
        !self.retired.is_empty()
    }

    /// Every value, in no particular order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.live.values_mut().chain(self.retired.values_mut())
    }
}

impl<K: Hash + Eq, V> GrowMap<K, V> {
    /// The value of `key`.
    #[inline]
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        match self.live.get(key) {
            Some(v) => Some(v),
            None if self.retired.is_empty() => None,
            None => self.retired.get(key),
        }
    }

    /// The value of `key`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match self.live.get_mut(key) {
            Some(v) => Some(v),
            None => self.retired.get_mut(key),
        }
    }
}

impl<K: Hash + Eq + Clone, V> GrowMap<K, V> {
    /// Inserts into a map being built (a restore); returns the value `key`
    /// had.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.settle_unordered();
        self.live.insert(key, value)
    }

    /// The value of `key`; a key without one gets `make(n)`, `n` its
    /// insertion number, and is pushed onto `order` (every key, in
    /// insertion order).
    #[inline]
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: &K,
        order: &mut Vec<K>,
        make: impl FnOnce(usize) -> V,
    ) -> &mut V {
        if !self.retired.is_empty() {
            self.step(order);
            // A key still in the retired table moves now.
            if let Some(v) = self.retired.remove(key) {
                self.live.insert(key.clone(), v);
            }
        }
        if self.live.len() == self.live.capacity() && !self.live.contains_key(key) {
            self.retire(order);
        }
        self.live.entry(key.clone()).or_insert_with(|| {
            let v = make(order.len());
            order.push(key.clone());
            v
        })
    }

    /// Retires the full live table: new keys go to one twice as large.
    #[cold]
    fn retire(&mut self, order: &[K]) {
        // Never two retired tables (see the module docs: cannot happen).
        self.settle(order);
        let n = self.live.len().max(8);
        let fresh = FxHashMap::with_capacity_and_hasher(2 * n, FxBuildHasher);
        self.retired = std::mem::replace(&mut self.live, fresh);
        self.cursor = 0;
        self.step(order);
    }

    /// Moves up to [`STEP`] entries of the retired table.
    #[inline]
    fn step(&mut self, order: &[K]) {
        let mut moved = 0;
        while moved < STEP && !self.retired.is_empty() {
            let Some(key) = order.get(self.cursor) else {
                // Every key of the retired table is in `order` (keys are
                // never removed): unreachable, but settle rather than spin.
                self.settle_unordered();
                return;
            };
            self.cursor += 1;
            if let Some(v) = self.retired.remove(key) {
                self.live.insert(key.clone(), v);
                moved += 1;
            }
        }
    }

    /// Removes `key`; returns its value.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        match self.live.remove(key) {
            Some(v) => Some(v),
            None => self.retired.remove(key),
        }
    }

    /// Moves whatever is left of the retired table, at once.
    pub(super) fn settle(&mut self, order: &[K]) {
        while !self.retired.is_empty() {
            let before = self.cursor;
            self.step(order);
            if self.cursor == before {
                break;
            }
        }
        self.settle_unordered();
    }

    fn settle_unordered(&mut self) {
        if !self.retired.is_empty() {
            self.live.extend(self.retired.drain());
        }
        self.cursor = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts each of `keys` through `get_or_insert_with`, as a keyed
    /// state does.
    fn fill(m: &mut GrowMap<u64, u64>, order: &mut Vec<u64>, keys: impl Iterator<Item = u64>) {
        for k in keys {
            *m.get_or_insert_with(&k, order, |_| 0) += 1;
        }
    }

    #[test]
    fn every_key_keeps_its_value_through_every_growth() {
        let (mut m, mut order) = (GrowMap::default(), Vec::new());
        let mut saw_moving = false;
        for round in 0..3u64 {
            for k in 0..20_000u64 {
                // Interleaved new and old keys, each counted once a round.
                let k = (k * 7919) % 20_000 + round * 5_000;
                fill(&mut m, &mut order, std::iter::once(k));
                saw_moving |= m.moving();
            }
        }
        assert!(saw_moving, "the test grew the map");
        let distinct: std::collections::HashSet<u64> = order.iter().copied().collect();
        assert_eq!(distinct.len(), order.len(), "each key pushed once");
        assert_eq!(m.len(), order.len());
        for &k in &order {
            let rounds = (0..3u64).filter(|r| k >= r * 5_000 && k < 20_000 + r * 5_000);
            assert_eq!(m.get(&k), Some(&(rounds.count() as u64)), "key {k}");
        }
        assert_eq!(m.get(&1_000_000), None);
    }

    #[test]
    fn the_retired_table_empties_before_the_new_one_fills() {
        let (mut m, mut order) = (GrowMap::default(), Vec::new());
        for k in 0..200_000u64 {
            let retired_before = m.retired.len();
            fill(&mut m, &mut order, std::iter::once(k));
            // A retirement happens only with nothing retired left to move
            // (else `retire` would have settled it: the pause this avoids).
            assert!(
                !(m.retired.len() > retired_before && retired_before > 0),
                "two retirements overlapped at key {k}"
            );
        }
        assert_eq!(m.len(), 200_000);
        assert!((0..200_000u64).all(|k| m.get(&k) == Some(&1)));
    }

    #[test]
    fn get_mut_and_values_mut_reach_entries_in_both_tables() {
        let (mut m, mut order) = (GrowMap::default(), Vec::new());
        let mut k = 0;
        while !m.moving() {
            fill(&mut m, &mut order, std::iter::once(k));
            k += 1;
        }
        *m.get_mut(&0).unwrap() += 10;
        *m.get_mut(&(k - 1)).unwrap() += 10;
        assert_eq!(m.get(&0), Some(&11));
        assert_eq!(m.get(&(k - 1)), Some(&11));
        m.values_mut().for_each(|v| *v += 1);
        assert_eq!(m.values_mut().map(|v| *v).sum::<u64>(), 2 * k + 20);
    }
}

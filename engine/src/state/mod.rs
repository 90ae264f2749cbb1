//! Keyed state: what a keyed operator instance remembers per key.
//!
//! State is owned by exactly one operator instance on one core (records are
//! hash-partitioned by key before they reach it), so it needs no
//! synchronisation. The hasher is fixed (FxHash), so iteration order and
//! partitioning are the same in every run — replay reproduces outputs.

use rustc_hash::FxHashMap;
use std::hash::Hash;

/// One value of type `S` per key.
pub struct KeyedState<K, S> {
    map: FxHashMap<K, S>,
}

impl<K, S> Default for KeyedState<K, S> {
    fn default() -> Self {
        KeyedState {
            map: FxHashMap::default(),
        }
    }
}

impl<K: Hash + Eq + Clone, S: Default> KeyedState<K, S> {
    /// The state of `key`, created with `S::default()` on first use.
    #[inline]
    pub fn get_or_default(&mut self, key: &K) -> &mut S {
        // One hash and one probe; keys are small (cloning is a copy).
        self.map.entry(key.clone()).or_default()
    }
}

impl<K, S> KeyedState<K, S> {
    /// The state of `key`, if it has any.
    pub fn get(&self, key: &K) -> Option<&S>
    where
        K: Hash + Eq,
    {
        self.map.get(key)
    }

    /// Number of keys with state.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every key and its state, in the map's (deterministic) order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut S)> {
        self.map.iter_mut()
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
        assert_eq!(s.get(&1), Some(&7));
        assert_eq!(s.get(&2), Some(&1));
        assert_eq!(s.len(), 2);
    }
}

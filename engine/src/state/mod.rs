//! Keyed state: what a keyed operator instance remembers per key.
//!
//! State is owned by exactly one operator instance on one core (records are
//! hash-partitioned by key before they reach it), so it needs no
//! synchronisation. The hasher is fixed (FxHash), so iteration order and
//! partitioning are the same in every run — replay reproduces outputs.
//!
//! ## Snapshots
//!
//! [`KeyedState::to_snapshot_bytes`] archives the state with rkyv as a
//! vector of `(key, state)` entries in the map's iteration order — one linear
//! pass, no sorting, no hash index to build, so a data-path core spends as
//! little time as possible serializing. The archive is
//! [`ArchivedKeyedState`]; looking a key up in it is a linear scan, so
//! restoring rebuilds the map with [`KeyedState::from_archived`]. The same
//! state always produces the same bytes (the hasher is fixed).

use rkyv::{
    api::high::HighDeserializer, rancor, with::AsVec, Archive, Archived, Deserialize, Serialize,
};
use rustc_hash::FxHashMap;
use std::hash::Hash;

use crate::checkpoint::{self, CheckpointError, SnapshotBytes};

/// One value of type `S` per key.
#[derive(Archive, Serialize, Deserialize)]
pub struct KeyedState<K, S> {
    #[rkyv(with = AsVec)]
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

impl<K: Archive, S: Archive> KeyedState<K, S> {
    /// Archives every key and its state into a snapshot payload (entries in
    /// map order; see the module docs).
    pub fn to_snapshot_bytes(&self) -> Result<SnapshotBytes, CheckpointError>
    where
        Self: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    {
        let entry = std::mem::size_of::<Archived<K>>() + std::mem::size_of::<Archived<S>>();
        checkpoint::serialize(self, 64 + self.map.len() * entry)
    }

    /// Rebuilds the state from its archive.
    pub fn from_archived(archived: &ArchivedKeyedState<K, S>) -> Result<Self, CheckpointError>
    where
        K: Hash + Eq,
        ArchivedKeyedState<K, S>: Deserialize<Self, HighDeserializer<rancor::Error>>,
    {
        rkyv::deserialize::<Self, rancor::Error>(archived)
            .map_err(|source| CheckpointError::Serialize { source })
    }
}

/// State the engine can checkpoint and restore: implemented for every
/// [`KeyedState`] whose key and value types rkyv can archive, validate and
/// deserialize (integers, strings, tuples, `Option`, `Vec`, and types that
/// derive `rkyv::Archive, Serialize, Deserialize`).
pub trait StateSnapshot: Sized + 'static {
    /// Archives the state (see [`KeyedState::to_snapshot_bytes`]).
    fn snapshot(&self) -> Result<SnapshotBytes, CheckpointError>;
    /// Validates an archive with rkyv's checked access and rebuilds the
    /// state from it.
    fn restore(payload: &[u8]) -> Result<Self, CheckpointError>;
}

impl<K, S> StateSnapshot for KeyedState<K, S>
where
    K: Archive + Hash + Eq + 'static,
    S: Archive + 'static,
    Self: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    <Self as Archive>::Archived: Deserialize<Self, HighDeserializer<rancor::Error>>
        + rkyv::Portable
        + for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rancor::Error>>,
{
    fn snapshot(&self) -> Result<SnapshotBytes, CheckpointError> {
        self.to_snapshot_bytes()
    }

    fn restore(payload: &[u8]) -> Result<Self, CheckpointError> {
        let archived = checkpoint::access::<Self>(payload)?;
        rkyv::deserialize::<Self, rancor::Error>(archived)
            .map_err(|source| CheckpointError::Deserialize { source })
    }
}

impl<K, S> ArchivedKeyedState<K, S>
where
    K: Archive,
    S: Archive,
{
    /// Number of keys in the archive.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the archive holds no key.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every archived key and its state, in the order they were written.
    pub fn iter(&self) -> impl Iterator<Item = (&Archived<K>, &Archived<S>)> {
        self.map.iter().map(|e| (&e.key, &e.value))
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

    #[test]
    fn state_survives_a_snapshot_round_trip() {
        let mut s: KeyedState<String, (u64, u64)> = KeyedState::default();
        for i in 0..100u64 {
            *s.get_or_default(&format!("k{i}")) = (i, i * i);
        }
        let bytes = s.to_snapshot_bytes().unwrap();
        let archived =
            rkyv::access::<ArchivedKeyedState<String, (u64, u64)>, rancor::Error>(bytes.payload())
                .unwrap();
        assert_eq!(archived.len(), 100);
        let back = KeyedState::<String, (u64, u64)>::from_archived(archived).unwrap();
        assert_eq!(back.len(), 100);
        assert_eq!(back.get(&"k7".to_string()), Some(&(7, 49)));
    }
}

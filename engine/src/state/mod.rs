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
//! snapshot. Each entry carries its insertion number beside its state (the
//! map itself stays a plain FxHash map: one probe per record); iteration
//! and snapshots place entries by that number (one linear pass), and a
//! restore inserts them in that order. Keys are never removed, so the
//! numbers stay dense.
//!
//! ## Snapshots
//!
//! [`KeyedState::to_snapshot_bytes`] archives the state with rkyv as a
//! vector of `(key, state)` entries in insertion order — linear passes, no
//! sorting, no hash index to build, so a data-path core spends as little
//! time as possible serializing. The archive is [`ArchivedKeyedState`];
//! looking a key up in it is a linear scan, so restoring rebuilds the map
//! with [`KeyedState::from_archived`]. The same state always produces the
//! same bytes. (The archived layout is the one earlier builds wrote for a
//! hash map's entries, so their snapshots still restore.)

use rkyv::{
    api::high::HighDeserializer,
    collections::util::{Entry, EntryAdapter},
    rancor::{self, Fallible},
    ser::{Allocator, Writer},
    vec::{ArchivedVec, VecResolver},
    with::{ArchiveWith, DeserializeWith, SerializeWith},
    Archive, Archived, Deserialize, Place, Serialize,
};
use rustc_hash::FxHashMap;
use std::hash::Hash;

use crate::checkpoint::{self, CheckpointError, SnapshotBytes};

/// One value of type `S` per key, iterated in insertion order (see the
/// module docs).
#[derive(Archive, Serialize, Deserialize)]
pub struct KeyedState<K, S> {
    #[rkyv(with = InsertionOrder)]
    map: FxHashMap<K, Slot<S>>,
}

/// A key's state and its insertion number.
pub struct Slot<S> {
    seq: u64,
    state: S,
}

impl<K, S> Default for KeyedState<K, S> {
    fn default() -> Self {
        KeyedState {
            map: FxHashMap::default(),
        }
    }
}

/// The entries of `map` placed by insertion number (`None` where a number
/// is missing, which only a broken invariant leaves).
fn in_order<K, S>(map: &FxHashMap<K, Slot<S>>) -> Vec<Option<(&K, &S)>> {
    let mut v: Vec<Option<(&K, &S)>> = Vec::new();
    v.resize_with(map.len(), || None);
    for (k, s) in map {
        if let Some(place) = v.get_mut(s.seq as usize) {
            *place = Some((k, &s.state));
        }
    }
    v
}

/// rkyv wrapper: the map archived as the vector of its `(key, state)`
/// entries in insertion order, and rebuilt by inserting them in that
/// order (numbering them again from 0).
pub struct InsertionOrder;

impl<K: Archive, V: Archive, H> ArchiveWith<std::collections::HashMap<K, Slot<V>, H>>
    for InsertionOrder
{
    type Archived = ArchivedVec<Entry<K::Archived, V::Archived>>;
    type Resolver = VecResolver;

    fn resolve_with(
        field: &std::collections::HashMap<K, Slot<V>, H>,
        resolver: VecResolver,
        out: Place<Self::Archived>,
    ) {
        ArchivedVec::resolve_from_len(field.len(), resolver, out);
    }
}

impl<K, V, S> SerializeWith<FxHashMap<K, Slot<V>>, S> for InsertionOrder
where
    K: Serialize<S>,
    V: Serialize<S>,
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize_with(
        field: &FxHashMap<K, Slot<V>>,
        serializer: &mut S,
    ) -> Result<VecResolver, S::Error> {
        let order = in_order(field);
        if order.iter().any(Option::is_none) {
            return Err(<S::Error as rancor::Source>::new(BrokenOrder));
        }
        ArchivedVec::serialize_from_iter(
            order.iter().map(|e| {
                let (key, value) = e.expect("every place is filled (checked above)");
                EntryAdapter::<_, _, K, V>::new(key, value)
            }),
            serializer,
        )
    }
}

/// The insertion numbers of a keyed state are not `0..len` (an engine
/// bug): its snapshot is refused rather than written out of order.
#[derive(Debug, thiserror::Error)]
#[error("keyed state: insertion numbers are not dense")]
struct BrokenOrder;

impl<K, V, D>
    DeserializeWith<ArchivedVec<Entry<K::Archived, V::Archived>>, FxHashMap<K, Slot<V>>, D>
    for InsertionOrder
where
    K: Archive + Hash + Eq,
    V: Archive,
    K::Archived: Deserialize<K, D>,
    V::Archived: Deserialize<V, D>,
    D: Fallible + ?Sized,
{
    fn deserialize_with(
        field: &ArchivedVec<Entry<K::Archived, V::Archived>>,
        deserializer: &mut D,
    ) -> Result<FxHashMap<K, Slot<V>>, D::Error> {
        let mut map = FxHashMap::with_capacity_and_hasher(field.len(), rustc_hash::FxBuildHasher);
        for (i, e) in field.iter().enumerate() {
            map.insert(
                e.key.deserialize(deserializer)?,
                Slot {
                    seq: i as u64,
                    state: e.value.deserialize(deserializer)?,
                },
            );
        }
        Ok(map)
    }
}

impl<K: Hash + Eq + Clone, S: Default> KeyedState<K, S> {
    /// The state of `key`, created with `S::default()` on first use.
    #[inline]
    pub fn get_or_default(&mut self, key: &K) -> &mut S {
        // One hash and one probe; keys are small (cloning is a copy).
        let seq = self.map.len() as u64;
        &mut self
            .map
            .entry(key.clone())
            .or_insert_with(|| Slot {
                seq,
                state: S::default(),
            })
            .state
    }
}

impl<K, S> KeyedState<K, S> {
    /// The state of `key`, if it has any.
    pub fn get(&self, key: &K) -> Option<&S>
    where
        K: Hash + Eq,
    {
        self.map.get(key).map(|s| &s.state)
    }

    /// Whether inserting one more key would grow (rehash) the map — a
    /// pause of milliseconds for a large state.
    #[inline]
    pub fn full(&self) -> bool {
        self.map.len() == self.map.capacity()
    }

    /// Grows the map ahead of an insert (doubling it).
    pub fn grow(&mut self)
    where
        K: Hash + Eq,
    {
        self.map.reserve(self.map.len().max(16));
    }

    /// Number of keys with state.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every key and its state, in insertion order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut S)> {
        let mut v: Vec<Option<(&K, &mut S)>> = Vec::new();
        v.resize_with(self.map.len(), || None);
        let mut stray = Vec::new();
        for (k, s) in self.map.iter_mut() {
            match v.get_mut(s.seq as usize) {
                Some(place @ None) => *place = Some((k, &mut s.state)),
                // Cannot happen (numbers are dense and unique); never lose
                // an entry if it did.
                _ => stray.push((k, &mut s.state)),
            }
        }
        v.into_iter().flatten().chain(stray)
    }
}

impl<K: Archive, S: Archive> KeyedState<K, S> {
    /// Archives every key and its state into a snapshot payload (entries in
    /// insertion order; see the module docs).
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

    #[test]
    fn iteration_order_is_insertion_order_and_survives_a_snapshot() {
        // Keys whose hashes collide and spread over growth steps: a hash
        // map rebuilt from its archive can iterate in another order.
        let mut s: KeyedState<u64, u64> = KeyedState::default();
        let keys: Vec<u64> = (0..5000u64).map(|i| (i * 7_919) ^ (i << 17)).collect();
        for (i, k) in keys.iter().enumerate() {
            *s.get_or_default(k) = i as u64;
        }
        let order: Vec<u64> = s.iter_mut().map(|(k, _)| *k).collect();
        assert_eq!(order, keys);
        let restored = <KeyedState<u64, u64> as StateSnapshot>::restore(
            StateSnapshot::snapshot(&s).unwrap().payload(),
        )
        .unwrap();
        let mut restored = restored;
        *restored.get_or_default(&u64::MAX) = 1;
        *s.get_or_default(&u64::MAX) = 1;
        let a: Vec<(u64, u64)> = s.iter_mut().map(|(k, v)| (*k, *v)).collect();
        let b: Vec<(u64, u64)> = restored.iter_mut().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(a, b, "a restored state iterates as the live one");
    }
}

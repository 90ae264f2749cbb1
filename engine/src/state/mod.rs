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
//! snapshot. The entries themselves live in insertion order, in chunks of
//! [`CHUNK`]; a hash index maps each key to its insertion number (one probe
//! per record, then one array access). Keys are never removed.
//!
//! ## Snapshots off the data path
//!
//! A snapshot must not stop the core that owns the state: archiving a
//! large state takes milliseconds, and every record queued behind it waits
//! that long. So the chunks are shared copy-on-write (`Arc`):
//! [`KeyedState::freeze`] takes the state as it is in O(keys / [`CHUNK`])
//! (one reference count per chunk, no entry copied), and the frozen copy is
//! archived a slice at a time ([`StateSnapshot::capture`], `archive.rs`)
//! by the worker that owns the state, between its records — not by a
//! thread of its own, which would take the core from a pinned worker for
//! as long. Meanwhile the live state goes on, and the first write to a
//! chunk the frozen copy still holds copies that chunk once (`CHUNK`
//! clones, a few microseconds). Hence the bounds on [`StateSnapshot`]:
//! keys and states are `Clone`, and `Send` and `Sync` (a capture is a
//! value that may cross threads, though the engine archives it on the
//! owner's).
//!
//! [`KeyedState::to_snapshot_bytes`] archives the state with rkyv as a
//! vector of `(key, state)` entries in insertion order — linear passes, no
//! sorting, no hash index to build. The archive is [`ArchivedKeyedState`];
//! looking a key up in it is a linear scan, so restoring rebuilds the state
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
use std::sync::Arc;

use crate::checkpoint::{self, CheckpointError, SnapshotBytes, StateCapture};

mod archive;

/// Entries per copy-on-write chunk: what the first write to a chunk after
/// a [`KeyedState::freeze`] copies.
pub const CHUNK: usize = 256;

/// One value of type `S` per key, iterated in insertion order (see the
/// module docs).
#[derive(Archive, Serialize, Deserialize)]
pub struct KeyedState<K, S> {
    #[rkyv(with = InsertionOrder)]
    map: Table<K, S>,
}

/// The entries in insertion order, in shared chunks, and the index from a
/// key to its insertion number. A frozen copy has chunks but no index.
pub struct Table<K, S> {
    index: FxHashMap<K, usize>,
    chunks: Vec<Arc<Vec<(K, S)>>>,
    len: usize,
    /// Where the archived entries already stand in the output (set only on
    /// a frozen copy whose entries [`archive::Steps`] wrote): serializing
    /// the table then writes nothing more.
    presolved: Option<usize>,
}

impl<K, S> Default for KeyedState<K, S> {
    fn default() -> Self {
        KeyedState {
            map: Table {
                index: FxHashMap::default(),
                chunks: Vec::new(),
                len: 0,
                presolved: None,
            },
        }
    }
}

impl<K, S> Table<K, S> {
    fn entries(&self) -> impl Iterator<Item = &(K, S)> {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

/// rkyv wrapper: the table archived as the vector of its `(key, state)`
/// entries in insertion order, and rebuilt by inserting them in that order.
pub struct InsertionOrder;

impl<K: Archive, V: Archive> ArchiveWith<Table<K, V>> for InsertionOrder {
    type Archived = ArchivedVec<Entry<K::Archived, V::Archived>>;
    type Resolver = VecResolver;

    fn resolve_with(field: &Table<K, V>, resolver: VecResolver, out: Place<Self::Archived>) {
        ArchivedVec::resolve_from_len(field.len, resolver, out);
    }
}

impl<K, V, S> SerializeWith<Table<K, V>, S> for InsertionOrder
where
    K: Serialize<S>,
    V: Serialize<S>,
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize_with(field: &Table<K, V>, serializer: &mut S) -> Result<VecResolver, S::Error> {
        if let Some(pos) = field.presolved {
            return Ok(VecResolver::from_pos(pos));
        }
        // rkyv walks the entries twice (their out-of-line parts, then the
        // entries): an exact-size, cloneable iterator.
        let order: Vec<&(K, V)> = field.entries().collect();
        if order.len() != field.len {
            return Err(<S::Error as rancor::Source>::new(BrokenOrder));
        }
        ArchivedVec::serialize_from_iter(
            order
                .iter()
                .map(|(key, value)| EntryAdapter::<_, _, K, V>::new(key, value)),
            serializer,
        )
    }
}

/// The chunks of a keyed state do not hold its length in entries (an
/// engine bug): its snapshot is refused rather than written short.
#[derive(Debug, thiserror::Error)]
#[error("keyed state: the entries do not match the state's length")]
struct BrokenOrder;

impl<K, V, D> DeserializeWith<ArchivedVec<Entry<K::Archived, V::Archived>>, Table<K, V>, D>
    for InsertionOrder
where
    K: Archive + Hash + Eq + Clone,
    V: Archive,
    K::Archived: Deserialize<K, D>,
    V::Archived: Deserialize<V, D>,
    D: Fallible + ?Sized,
{
    fn deserialize_with(
        field: &ArchivedVec<Entry<K::Archived, V::Archived>>,
        deserializer: &mut D,
    ) -> Result<Table<K, V>, D::Error> {
        let mut index = FxHashMap::with_capacity_and_hasher(field.len(), rustc_hash::FxBuildHasher);
        let mut chunks = Vec::with_capacity(field.len().div_ceil(CHUNK));
        let mut chunk = Vec::with_capacity(CHUNK);
        for (i, e) in field.iter().enumerate() {
            let key: K = e.key.deserialize(deserializer)?;
            index.insert(key.clone(), i);
            chunk.push((key, e.value.deserialize(deserializer)?));
            if chunk.len() == CHUNK {
                chunks.push(Arc::new(std::mem::replace(
                    &mut chunk,
                    Vec::with_capacity(CHUNK),
                )));
            }
        }
        if !chunk.is_empty() {
            chunks.push(Arc::new(chunk));
        }
        Ok(Table {
            len: field.len(),
            index,
            chunks,
            presolved: None,
        })
    }
}

impl<K: Hash + Eq + Clone, S: Default + Clone> KeyedState<K, S> {
    /// The state of `key`, created with `S::default()` on first use.
    #[inline]
    pub fn get_or_default(&mut self, key: &K) -> &mut S {
        let t = &mut self.map;
        let n = match t.index.get(key) {
            Some(&n) => n,
            None => {
                let n = t.len;
                t.index.insert(key.clone(), n);
                if n.is_multiple_of(CHUNK) {
                    t.chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
                }
                let last = t.chunks.last_mut().expect("a chunk with room");
                Arc::make_mut(last).push((key.clone(), S::default()));
                t.len += 1;
                n
            }
        };
        // Copies the chunk only if a frozen copy still holds it.
        &mut Arc::make_mut(&mut t.chunks[n / CHUNK])[n % CHUNK].1
    }

    /// Every key and its state, in insertion order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut S)> {
        self.map
            .chunks
            .iter_mut()
            .flat_map(|c| Arc::make_mut(c).iter_mut().map(|(k, s)| (&*k, s)))
    }
}

impl<K, S> KeyedState<K, S> {
    /// The state of `key`, if it has any.
    pub fn get(&self, key: &K) -> Option<&S>
    where
        K: Hash + Eq,
    {
        let n = *self.map.index.get(key)?;
        self.map.chunks.get(n / CHUNK)?.get(n % CHUNK).map(|e| &e.1)
    }

    /// Whether inserting one more key would grow (rehash) the index — a
    /// pause of milliseconds for a large state.
    #[inline]
    pub fn full(&self) -> bool {
        self.map.index.len() == self.map.index.capacity()
    }

    /// Grows the index ahead of an insert (doubling it).
    pub fn grow(&mut self)
    where
        K: Hash + Eq,
    {
        self.map.index.reserve(self.map.len.max(16));
    }

    /// Number of keys with state.
    pub fn len(&self) -> usize {
        self.map.len
    }

    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }

    /// The state as it is now, for archiving elsewhere, in O(keys /
    /// [`CHUNK`]): the copy shares every chunk (see the module docs). It
    /// has no index: it can be archived, not looked into.
    pub fn freeze(&self) -> FrozenState<K, S> {
        FrozenState(KeyedState {
            map: Table {
                index: FxHashMap::default(),
                chunks: self.map.chunks.clone(),
                len: self.map.len,
                presolved: None,
            },
        })
    }
}

/// A keyed state as [`KeyedState::freeze`] took it: archived a slice at a
/// time ([`StateSnapshot::capture`]) while the live state goes on.
pub struct FrozenState<K, S>(KeyedState<K, S>);

impl<K: Archive, S: Archive> KeyedState<K, S> {
    /// Archives every key and its state into a snapshot payload (entries in
    /// insertion order; see the module docs).
    pub fn to_snapshot_bytes(&self) -> Result<SnapshotBytes, CheckpointError>
    where
        Self: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    {
        let entry = std::mem::size_of::<rkyv::collections::util::Entry<Archived<K>, Archived<S>>>();
        checkpoint::serialize(self, 64 + self.map.len * entry)
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
/// derive `rkyv::Archive, Serialize, Deserialize`) and that are `Clone +
/// Send + Sync`, so that a snapshot is archived on another thread while the
/// state goes on (see the module docs).
pub trait StateSnapshot: Sized + 'static {
    /// Archives the state (see [`KeyedState::to_snapshot_bytes`]).
    fn snapshot(&self) -> Result<SnapshotBytes, CheckpointError>;
    /// The state as it is now, archived later by whoever takes the capture
    /// (the default archives it at once).
    fn capture(&self) -> Result<StateCapture, CheckpointError> {
        self.snapshot().map(StateCapture::Bytes)
    }
    /// Validates an archive with rkyv's checked access and rebuilds the
    /// state from it.
    fn restore(payload: &[u8]) -> Result<Self, CheckpointError>;
}

impl<K, S> StateSnapshot for KeyedState<K, S>
where
    K: Archive + Hash + Eq + Clone + Send + Sync + 'static,
    S: Archive + Clone + Send + Sync + 'static,
    K: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    S: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    K::Resolver: Send,
    S::Resolver: Send,
    Self: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    <Self as Archive>::Archived: Deserialize<Self, HighDeserializer<rancor::Error>>
        + rkyv::Portable
        + for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rancor::Error>>,
{
    fn snapshot(&self) -> Result<SnapshotBytes, CheckpointError> {
        self.to_snapshot_bytes()
    }

    fn capture(&self) -> Result<StateCapture, CheckpointError> {
        Ok(StateCapture::Steps(Box::new(archive::Steps::new(
            self.freeze(),
        ))))
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

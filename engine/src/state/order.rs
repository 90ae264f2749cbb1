//! The keyed state's archived form: the vector of its `(key, state)`
//! entries in insertion order (see the [module docs](super)).

use rkyv::{
    collections::util::{Entry, EntryAdapter},
    rancor::{self, Fallible},
    ser::{Allocator, Writer},
    vec::{ArchivedVec, VecResolver},
    with::{ArchiveWith, DeserializeWith, SerializeWith},
    Archive, Deserialize, Place, Serialize,
};
use std::cell::RefCell;
use std::hash::Hash;
use std::rc::Rc;

use super::{GrowMap, Slot, Table};

/// rkyv wrapper: the table archived as the vector of its `(key, state)`
/// entries in insertion order, and rebuilt by inserting them in that order.
pub struct InsertionOrder;

impl<K: Archive, V: Archive> ArchiveWith<Rc<RefCell<Table<K, V>>>> for InsertionOrder {
    type Archived = ArchivedVec<Entry<K::Archived, V::Archived>>;
    type Resolver = VecResolver;

    fn resolve_with(
        field: &Rc<RefCell<Table<K, V>>>,
        resolver: VecResolver,
        out: Place<Self::Archived>,
    ) {
        // Serializing borrowed the table already (and failed if it could
        // not); nothing writes it between the two calls.
        let len = field
            .try_borrow()
            .map_or(0, |t| t.presolved.map_or(t.map.len(), |(_, len)| len));
        ArchivedVec::resolve_from_len(len, resolver, out);
    }
}

impl<K, V, S> SerializeWith<Rc<RefCell<Table<K, V>>>, S> for InsertionOrder
where
    K: Serialize<S> + Hash + Eq,
    V: Serialize<S>,
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: rancor::Source,
{
    fn serialize_with(
        field: &Rc<RefCell<Table<K, V>>>,
        serializer: &mut S,
    ) -> Result<VecResolver, S::Error> {
        let t = field
            .try_borrow()
            .map_err(|_| <S::Error as rancor::Source>::new(BrokenOrder))?;
        if let Some((pos, _)) = t.presolved {
            return Ok(VecResolver::from_pos(pos));
        }
        if t.lazy.is_some() {
            // Its base is not read yet: callers settle first.
            return Err(<S::Error as rancor::Source>::new(BrokenOrder));
        }
        // rkyv walks the entries twice (their out-of-line parts, then the
        // entries): an exact-size, cloneable iterator.
        let entries: Vec<(&K, &V)> = (0..t.order.len())
            .filter_map(|i| t.entry_at(i, None))
            .collect();
        if entries.len() != t.map.len() || t.order.len() != t.map.len() + t.dead {
            return Err(<S::Error as rancor::Source>::new(BrokenOrder));
        }
        ArchivedVec::serialize_from_iter(
            entries
                .iter()
                .map(|(key, value)| EntryAdapter::<_, _, K, V>::new(*key, *value)),
            serializer,
        )
    }
}

/// The keys and entries of a keyed state disagree (an engine bug), or its
/// table is in use: its snapshot is refused rather than written wrong.
#[derive(Debug, thiserror::Error)]
#[error(
    "keyed state: the entries do not match the keys in insertion order, or the state is in use"
)]
pub(super) struct BrokenOrder;

impl<K, V, D>
    DeserializeWith<ArchivedVec<Entry<K::Archived, V::Archived>>, Rc<RefCell<Table<K, V>>>, D>
    for InsertionOrder
where
    K: Archive + Hash + Eq + Clone,
    V: Archive,
    K::Archived: Deserialize<K, D>,
    V::Archived: Deserialize<V, D>,
    D: Fallible + ?Sized,
    D::Error: rancor::Source,
{
    fn deserialize_with(
        field: &ArchivedVec<Entry<K::Archived, V::Archived>>,
        deserializer: &mut D,
    ) -> Result<Rc<RefCell<Table<K, V>>>, D::Error> {
        let n = field.len();
        let mut t = Table {
            map: GrowMap::with_capacity(n),
            order: Vec::with_capacity(n),
            ..Table::default()
        };
        for (i, e) in field.iter().enumerate() {
            let key: K = e.key.deserialize(deserializer)?;
            let seq =
                u32::try_from(i).map_err(|_| <D::Error as rancor::Source>::new(BrokenOrder))?;
            let slot = Slot {
                seq,
                touched: 0,
                state: e.value.deserialize(deserializer)?,
            };
            if t.map.insert(key.clone(), slot).is_some() {
                // The same key twice: not an archive this engine wrote.
                return Err(<D::Error as rancor::Source>::new(BrokenOrder));
            }
            t.order.push(key);
        }
        Ok(Rc::new(RefCell::new(t)))
    }
}

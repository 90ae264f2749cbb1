//! One archive of a lazily read chain, read in place: an entry by its
//! place (its block verified, the entry validated by rkyv's checked
//! access), a key's place through the file's key index.

use rkyv::{
    api::high::{HighDeserializer, HighValidator},
    bytecheck::CheckBytes,
    collections::util::Entry,
    rancor,
    validation::{archive::ArchiveValidator, shared::SharedValidator, Validator},
    Archive, Archived, Deserialize,
};
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::checkpoint::{CheckpointError, LazySnapshot};
use crate::state::index::{self, Geometry};

/// The archive a lazily restored state reads its keys from.
pub(crate) struct Base<K, S> {
    file: Arc<LazySnapshot>,
    pub(super) g: Geometry,
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

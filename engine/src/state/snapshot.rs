//! A keyed state to and from snapshots: whole archives, the deltas of
//! incremental checkpoints and recovery points ([`super::delta`]), the
//! chain a restore reads, and a standby's copy brought forward by a
//! point (see the [module docs](super) for the layout).

use rkyv::{
    api::high::{HighDeserializer, HighValidator},
    bytecheck::CheckBytes,
    collections::util::Entry,
    rancor, Archive, Archived, Deserialize, Serialize,
};
use std::hash::Hash;
use std::sync::Arc;

use super::{delta, ArchivedKeyedState, KeyedState, Slot, Table};
use crate::checkpoint::{self, CheckpointError, LazySnapshot, SnapshotBytes, StateCapture};

impl<K: Archive, S: Archive> KeyedState<K, S> {
    /// Archives every key and its state into a snapshot payload (entries in
    /// insertion order; see the module docs).
    pub fn to_snapshot_bytes(&self) -> Result<SnapshotBytes, CheckpointError>
    where
        Self: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    {
        let entry = std::mem::size_of::<rkyv::collections::util::Entry<Archived<K>, Archived<S>>>();
        checkpoint::serialize(self, 64 + self.map.borrow().map.len() * entry)
    }

    /// Rebuilds the state from its archive.
    pub fn from_archived(archived: &ArchivedKeyedState<K, S>) -> Result<Self, CheckpointError>
    where
        K: Hash + Eq,
        ArchivedKeyedState<K, S>: Deserialize<Self, HighDeserializer<rancor::Error>>,
    {
        rkyv::deserialize::<Self, rancor::Error>(archived)
            .map_err(|source| CheckpointError::Deserialize { source })
    }
}

/// State the engine can checkpoint and restore: implemented for every
/// [`KeyedState`] whose key and value types rkyv can archive, validate and
/// deserialize (integers, strings, tuples, `Option`, `Vec`, and types that
/// derive `rkyv::Archive, Serialize, Deserialize`) and that are `Clone`
/// (a snapshot keeps the pre-images of the entries written while it is
/// archived; see the module docs).
pub trait StateSnapshot: Sized + 'static {
    /// Archives the state (see [`KeyedState::to_snapshot_bytes`]).
    fn snapshot(&self) -> Result<SnapshotBytes, CheckpointError>;
    /// The state as it is now, archived later by whoever takes the capture
    /// (the default archives it at once).
    fn capture(&self) -> Result<StateCapture, CheckpointError> {
        self.snapshot().map(StateCapture::Bytes)
    }
    /// The state as it is now for checkpoint `how.checkpoint`: a delta
    /// over `how.base` where the state can take one (see [`delta`]), else
    /// whole (the default).
    fn capture_for(&self, how: delta::CaptureFor) -> Result<StateCapture, CheckpointError> {
        let _ = how;
        self.capture()
    }
    /// Validates an archive with rkyv's checked access and rebuilds the
    /// state from it.
    fn restore(payload: &[u8]) -> Result<Self, CheckpointError>;
    /// Brings the state to a newer one ([`delta`]): `payload` is that
    /// state whole, or a delta over this state. The default takes it
    /// whole.
    fn follow(&mut self, payload: &[u8]) -> Result<(), CheckpointError> {
        *self = Self::restore(payload)?;
        Ok(())
    }
    /// As [`restore_chain`](Self::restore_chain) with the chain read
    /// lazily from `links` (files with key indexes: the whole archive,
    /// then the deltas after it). The default reads them whole.
    fn restore_lazy(
        links: &[Arc<LazySnapshot>],
        from: Option<u64>,
    ) -> Result<Self, CheckpointError> {
        let mut bytes = Vec::with_capacity(links.len());
        for l in links {
            l.verify_all()?;
            bytes.push(l.payload_unverified());
        }
        Self::restore_chain(&bytes, from)
    }
    /// A store of this state on the disk backend ([`super::disk`]), in a
    /// directory of its own under `base`, as the keyed hop takes it (a
    /// boxed `Box<dyn DiskOps<K, S>>`). The default: this state has none.
    #[doc(hidden)]
    fn open_disk(
        base: &std::path::Path,
        cache_bytes: usize,
    ) -> Result<Box<dyn std::any::Any>, CheckpointError> {
        let _ = (base, cache_bytes);
        Err(CheckpointError::Delta(
            "this state has no disk backend".into(),
        ))
    }
    /// Rebuilds the state from a chain: a whole archive, then the deltas
    /// after it, oldest first, as checkpoint `from` holds them (`None`:
    /// not a checkpoint's). The default takes a chain of one.
    fn restore_chain(links: &[&[u8]], from: Option<u64>) -> Result<Self, CheckpointError> {
        let _ = from;
        match links {
            [whole] => Self::restore(whole),
            _ => Err(CheckpointError::Delta(format!(
                "a chain of {} archives for a state that takes only whole ones",
                links.len()
            ))),
        }
    }
}

impl<K, S> StateSnapshot for KeyedState<K, S>
where
    K: Archive + Hash + Eq + Clone + 'static,
    S: Archive + Default + Clone + 'static,
    K: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    S: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    Self: for<'a> Serialize<checkpoint::format::SnapshotSerializer<'a>>,
    <Self as Archive>::Archived: Deserialize<Self, HighDeserializer<rancor::Error>>
        + rkyv::Portable
        + for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rancor::Error>>,
    <Self as Archive>::Archived: super::index::Entries<K, S>,
    Entry<Archived<K>, Archived<S>>: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
    Archived<K>: Deserialize<K, HighDeserializer<rancor::Error>>,
    Archived<S>: Deserialize<S, HighDeserializer<rancor::Error>>,
{
    fn snapshot(&self) -> Result<SnapshotBytes, CheckpointError> {
        self.settle()?;
        self.to_snapshot_bytes()
    }

    fn capture(&self) -> Result<StateCapture, CheckpointError> {
        self.settle()?;
        Ok(StateCapture::Steps(Box::new(
            self.indexing(super::archive::Steps::new(self.freeze())),
        )))
    }

    fn capture_for(&self, how: delta::CaptureFor) -> Result<StateCapture, CheckpointError> {
        if how.checkpoint == 0 {
            return self.capture();
        }
        // The base a delta would apply over, if the chain may grow.
        let base = {
            let mut t = self.map.borrow_mut();
            t.log.journal.enable();
            how.base.and_then(|b| t.log.journal.base(b)).filter(|b| {
                let c = &b.chain;
                // The whole archive's bytes are known once it is
                // archived: a chain whose whole archive is still under
                // way (a failed checkpoint's) is not extended.
                c.whole_bytes > 0
                    && c.deltas < how.policy.max_deltas
                    && (c.delta_bytes as f64) < how.policy.max_delta_ratio * c.whole_bytes as f64
            })
        };
        if base.is_none() {
            // A whole archive of a lazily restored state reads the rest
            // of its base first; a delta's places are all read already.
            self.settle()?;
        }
        let frozen = self.freeze();
        let mut t = self.map.borrow_mut();
        let epoch = frozen.epoch;
        // Nothing was written since the freeze: the mark is where the
        // journal stood at it.
        t.log.journal.mark(epoch);
        let Some(base) = base else {
            t.log.journal.captured.push_back(delta::Captured {
                checkpoint: how.checkpoint,
                epoch,
                chain: delta::Chain::default(),
                delta: false,
            });
            // Deltas of this kind start from this capture or a later one.
            t.log.journal.retire(how.checkpoint, how.checkpoint);
            drop(t);
            return Ok(StateCapture::Steps(Box::new(
                self.indexing(super::archive::Steps::new(frozen)),
            )));
        };
        let Some((places, removed)) = t.log.journal.between(base.epoch, epoch) else {
            return Err(CheckpointError::Delta(format!(
                "the journal lost the changes since checkpoint {} (an engine bug)",
                base.checkpoint
            )));
        };
        // Places dead at the freeze (a key removed, or placed since the
        // base and removed) are passed over by the archive, as a whole
        // one passes over every dead place: no lookup of each place now.
        let mut seen = std::collections::HashSet::with_capacity(removed.len());
        let gone = KeyedState::<K, S>::default();
        for k in removed {
            if seen.insert(k) {
                gone.get_or_default_plain(k);
            }
        }
        drop(seen);
        let mut chain = base.chain;
        chain.deltas += 1;
        t.log.journal.captured.push_back(delta::Captured {
            checkpoint: how.checkpoint,
            epoch,
            chain,
            delta: true,
        });
        t.log.journal.retire(how.checkpoint, base.checkpoint);
        drop(t);
        let removed = gone.to_snapshot_bytes()?;
        let prefix = delta::prefix(base.checkpoint, removed.payload());
        Ok(StateCapture::Steps(Box::new(self.indexing(
            super::archive::Steps::delta(frozen, places, &prefix, base.checkpoint),
        ))))
    }

    fn restore(payload: &[u8]) -> Result<Self, CheckpointError> {
        if delta::is_delta(payload) {
            return Err(CheckpointError::Delta(
                "a delta where a whole archive was expected".into(),
            ));
        }
        let archived = checkpoint::access::<Self>(payload)?;
        let state = rkyv::deserialize::<Self, rancor::Error>(archived)
            .map_err(|source| CheckpointError::Deserialize { source })?;
        // The first archive after a restore (a takeover's, a restart's)
        // reserves its output from the one restored.
        {
            let t = state.map.borrow();
            t.archived.set((payload.len(), t.map.len()));
        }
        Ok(state)
    }

    fn follow(&mut self, payload: &[u8]) -> Result<(), CheckpointError> {
        self.settle()?;
        if !delta::is_delta(payload) {
            *self = Self::restore(payload)?;
            return Ok(());
        }
        let p = delta::parse(payload)?;
        let removed = Self::restore(p.removed)?;
        let entries = Self::restore(p.entries)?;
        // No freeze of a standby's copy is under way (it takes no
        // points); its numbers are its own (nothing keeps them).
        self.apply(&removed, entries);
        self.compact();
        Ok(())
    }

    fn open_disk(
        base: &std::path::Path,
        cache_bytes: usize,
    ) -> Result<Box<dyn std::any::Any>, CheckpointError> {
        let store = super::disk::DiskState::<K, S>::open(base, cache_bytes)?;
        let ops: Box<dyn super::disk::DiskOps<K, S>> = Box::new(store);
        Ok(Box::new(ops))
    }

    fn restore_chain(links: &[&[u8]], from: Option<u64>) -> Result<Self, CheckpointError> {
        let Some((whole, deltas)) = links.split_first() else {
            return Err(CheckpointError::Delta("an empty chain".into()));
        };
        if super::disk::is_run(whole) {
            return Err(CheckpointError::Delta(
                "a checkpoint of the disk state backend restores only into it \
                 (run the job with StateBackend::Disk)"
                    .into(),
            ));
        }
        let mut state = Self::restore(whole)?;
        let mut chain = delta::Chain {
            deltas: deltas.len() as u32,
            whole_bytes: whole.len() as u64,
            whole_entries: state.len() as u64,
            delta_bytes: 0,
        };
        for (i, d) in deltas.iter().enumerate() {
            let p = delta::parse(d).map_err(|e| {
                CheckpointError::Delta(format!("link {} of {}: {e}", i + 2, links.len()))
            })?;
            let removed = Self::restore(p.removed)?;
            let entries = Self::restore(p.entries)?;
            state.apply(&removed, entries);
            chain.delta_bytes += d.len() as u64;
        }
        if !deltas.is_empty() {
            state.densify();
        }
        state.mark_restored(from, chain, !deltas.is_empty());
        Ok(state)
    }

    fn restore_lazy(
        links: &[Arc<LazySnapshot>],
        from: Option<u64>,
    ) -> Result<Self, CheckpointError> {
        let Some(whole) = links.first() else {
            return Err(CheckpointError::Delta("an empty chain".into()));
        };
        let whole_bytes = whole.header().payload_len;
        let state = Self::over_chain(links, |removed| {
            let gone = Self::restore(removed)?;
            let keys = gone.map.borrow().order.clone();
            Ok(keys)
        })?;
        let chain = delta::Chain {
            deltas: links.len() as u32 - 1,
            whole_bytes,
            whole_entries: state.whole_entries() as u64,
            delta_bytes: links[1..].iter().map(|l| l.header().payload_len).sum(),
        };
        {
            let t = state.map.borrow();
            let live = t.live_known().unwrap_or(chain.whole_entries as usize);
            t.archived.set((whole_bytes as usize, live));
        }
        state.mark_restored(from, chain, links.len() > 1);
        Ok(state)
    }
}

impl<K, S> KeyedState<K, S>
where
    K: Archive + Hash + Eq + Clone + 'static,
    S: Archive + 'static,
    KeyedState<K, S>: Archive,
    Archived<K>: Deserialize<K, HighDeserializer<rancor::Error>>,
    Archived<KeyedState<K, S>>: rkyv::Portable
        + for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + super::index::Entries<K, S>,
{
    /// `steps`, with a key index for its checkpoint file if this state's
    /// files carry one.
    fn indexing(&self, steps: super::archive::Steps<K, S>) -> super::archive::Steps<K, S> {
        if self.map.borrow().indexed {
            steps.with_indexer(super::index::build::<K, S>)
        } else {
            steps
        }
    }
}

impl<K, S> KeyedState<K, S> {
    /// Has this state's checkpoint files carry a key index, so that a
    /// restart restores it lazily (a `key_by` operator's state; the
    /// others restore whole, and an index would only cost bytes).
    pub(crate) fn index_archives(&self) {
        self.map.borrow_mut().indexed = true;
    }
}

impl<K: Hash + Eq + Clone, S: Default + Clone> KeyedState<K, S> {
    /// After a restore of checkpoint `from` (if a checkpoint's): a delta
    /// may apply over it, the state being that checkpoint's, as freeze 1.
    fn mark_restored(&self, from: Option<u64>, chain: delta::Chain, delta: bool) {
        if let Some(checkpoint) = from {
            let mut t = self.map.borrow_mut();
            t.log.journal.enable();
            t.next_epoch = 2;
            t.log.now = 1;
            t.log.journal.mark(1);
            t.log.journal.captured.push_back(delta::Captured {
                checkpoint,
                epoch: 1,
                chain,
                delta,
            });
        }
    }
}

impl<K: Hash + Eq + Clone, S: Default + Clone> KeyedState<K, S> {
    /// The state of `key`, created on first use, without marking it
    /// written (for a state nobody freezes).
    fn get_or_default_plain(&self, key: &K) {
        let mut t = self.map.borrow_mut();
        let Table { map, order, .. } = &mut *t;
        map.get_or_insert_with(key, order, |n| Slot {
            seq: n as u32,
            touched: 0,
            state: S::default(),
        });
    }

    /// Applies a delta's removals, then its entries (see [`delta`]).
    fn apply(&self, removed: &Self, entries: Self) {
        let mut t = self.map.borrow_mut();
        let gone = removed.map.borrow();
        for key in &gone.order {
            if t.map.remove(key).is_some() {
                t.dead += 1;
            }
        }
        let mut e = entries.map.borrow_mut();
        let Table { map, order, .. } = &mut *e;
        let keys = std::mem::take(order);
        for key in keys {
            let Some(slot) = map.remove(&key) else {
                continue;
            };
            let Table {
                map: live,
                order: live_order,
                ..
            } = &mut *t;
            let at = live.get_or_insert_with(&key, live_order, |n| Slot {
                seq: n as u32,
                touched: 0,
                state: S::default(),
            });
            at.state = slot.state;
        }
    }

    /// Numbers the live keys densely, in order (after a chain is applied).
    fn densify(&mut self) {
        self.map.borrow_mut().renumber_densely();
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

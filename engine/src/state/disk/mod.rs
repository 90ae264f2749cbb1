//! Keyed state larger than memory: the **disk backend**.
//!
//! The in-memory backend ([`KeyedState`](super::KeyedState)) keeps every
//! key in a hash table; a job whose keyed state does not fit in memory
//! chooses this one instead ([`StateBackend::Disk`], on
//! [`RuntimeConfig::state_backend`](crate::RuntimeConfig::state_backend)).
//! It serves the operators a `key_by` builds (`process`, `aggregate`,
//! `reduce`); windows, joins and timed functions keep their state in
//! memory.
//!
//! ## Layout
//!
//! Each keyed operator instance owns an embedded LSM tree ([fjall]) in a
//! directory of its own, on local disk, and a bounded cache in front of
//! it:
//!
//! - **The store.** A key is stored under its *disk key*: the stable hash
//!   of the key (8 bytes, big-endian), then the key's rkyv archive. The
//!   value is the epoch the entry was last written in (4 bytes), then the
//!   archive of the key and its state (`rkyv::collections::util::Entry`,
//!   read with rkyv's checked access). Keys are therefore in the order of
//!   their hashes, a function of the keys alone.
//! - **The cache** holds the entries of the keys touched lately, decoded.
//!   A record's key is looked up there first, then in the store (the
//!   tree's bloom filters answer for a new key without a read). An entry
//!   handed to the operator is *dirty*; dirty entries are written back in
//!   batches of `FLUSH_AT` (1,024), and the cache evicts clean entries it has
//!   not used since the last sweep (a clock) when it is full.
//! - **The change index.** A second tree holds, for each key, its disk key
//!   behind the epoch it was last written in: what a delta since an epoch
//!   holds is one range of it.
//!
//! ## Checkpoints
//!
//! A capture writes the cache's dirty entries back, takes a snapshot of the
//! store (the tree's MVCC view: O(1)), and starts a new epoch. The archive
//! is then made from the snapshot a slice at a time while the operator
//! goes on (`ArchiveSteps`), into a buffer that lives in a file
//! (`AlignedBuf::in_file`), so that a whole archive larger than memory
//! can be made:
//!
//! - **Whole**: every entry, in disk-key order.
//! - **Delta** over checkpoint `B`: every entry written since `B`'s epoch
//!   (the change index's range), each once, with its state at the capture.
//!   The state never removes a key (a keyed operator's state lives as long
//!   as the job), so a delta holds no removals.
//!
//! When a checkpoint is a delta follows the job's `Incremental` bounds,
//! as for the in-memory backend. The payload is a *run* (`run.rs`), not
//! the in-memory backend's archive: a checkpoint of one backend restores
//! only into that backend, and saying so is the error a restore gives.
//!
//! ## Restore
//!
//! A restore opens a fresh store and loads the chain into it: the whole run
//! by the tree's bulk ingestion (it is sorted), then each delta as write
//! batches. It reads O(state) bytes, sequentially (a RocksDB backend
//! links its checkpoint's files instead); the operator starts after it.
//!
//! ## Iteration
//!
//! The end-of-stream hook (`KeyedProcess::on_end`) visits every key in
//! disk-key order (the in-memory backend visits in insertion order). Both
//! orders are functions of the input alone, so a run restored from a
//! checkpoint emits what a clean run emits.
//!
//! ## What this backend does not do (yet)
//!
//! Standbys: an operator on this backend cannot have one (refused when the
//! job starts). TTL: the keyed operators it serves have no TTL.

mod run;
pub(crate) use run::is_run;
#[cfg(test)]
mod tests;

use rkyv::{
    api::high::{HighDeserializer, HighValidator},
    bytecheck::CheckBytes,
    collections::util::{Entry, EntryAdapter},
    rancor,
    util::AlignedVec,
    Archive, Archived, Deserialize, Serialize,
};
use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::collections::VecDeque;
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use crate::checkpoint::format::SnapshotSerializer;
use crate::checkpoint::{CheckpointError, SnapshotBytes, StateCapture};
use crate::state::delta::CaptureFor;
use crate::sys::scratch::ScratchDir;

/// Where a job keeps the state of its keyed operators.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum StateBackend {
    /// In memory, in insertion order (the default; see [`crate::state`]).
    #[default]
    Memory,
    /// On local disk behind a bounded cache (see the [module docs](self)).
    Disk(DiskBackend),
}

impl StateBackend {
    /// `memory` or `disk`, as a checkpoint's manifest records it.
    pub fn name(&self) -> &'static str {
        match self {
            StateBackend::Memory => "memory",
            StateBackend::Disk(_) => "disk",
        }
    }

    /// The disk backend with its defaults.
    pub fn disk() -> Self {
        StateBackend::Disk(DiskBackend::default())
    }
}

/// The disk backend's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskBackend {
    /// Memory each keyed operator instance may use for its state: half
    /// for its cache of decoded entries, half for the store's block cache.
    /// The store's write buffers (14 MiB of entries, and up to four sealed
    /// ones being written out, each taking two to three times its bytes)
    /// and its pinned bloom filters (~1.3 bytes a key) come on top.
    pub cache_bytes: usize,
    /// Directory for the stores (`None`: `state/` in the run directory,
    /// else a fresh temporary directory). Each instance's store is a
    /// directory of its own in it, removed when the instance ends.
    pub dir: Option<PathBuf>,
}

impl Default for DiskBackend {
    fn default() -> Self {
        DiskBackend {
            cache_bytes: 64 << 20,
            dir: None,
        }
    }
}

/// The disk backend of one job: its settings and the directory its
/// instances' stores go in, shared by every attempt.
pub(crate) struct DiskPlace {
    pub(crate) backend: DiskBackend,
    pub(crate) base: PathBuf,
    /// A temporary base, removed with the job.
    _temp: Option<ScratchDir>,
}

impl DiskPlace {
    /// Resolves where the stores go (see [`DiskBackend::dir`]).
    pub(crate) fn open(
        backend: &DiskBackend,
        run_dir: Option<&Path>,
    ) -> Result<Self, CheckpointError> {
        let io = |path: &Path, source| CheckpointError::Io {
            path: path.to_path_buf(),
            op: "creating the disk state backend's directory",
            source,
        };
        let (base, temp) = match (&backend.dir, run_dir) {
            (Some(d), _) => (d.clone(), None),
            (None, Some(r)) => (r.join("state"), None),
            (None, None) => {
                let t = ScratchDir::unique(&std::env::temp_dir(), "state")
                    .map_err(|e| io(&std::env::temp_dir(), e))?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        std::fs::create_dir_all(&base).map_err(|e| io(&base, e))?;
        Ok(DiskPlace {
            backend: backend.clone(),
            base,
            _temp: temp,
        })
    }
}

/// Dirty entries the cache holds before it writes them back in one batch
/// (what a capture writes back at most, on the operator's core).
pub(crate) const FLUSH_AT: usize = 1024;

/// Bytes of the store's write buffer (its memtable) for the entries; the
/// change index gets half, the pre-images a quarter.
const MEMTABLE: u64 = 8 << 20;

/// A keyed state on the disk backend, for the keyed hop, whose own bounds
/// know nothing of rkyv.
pub(crate) trait DiskOps<K, S> {
    /// `key`'s state (its default if the key is new), dirty from now on.
    fn state(&mut self, key: &K) -> Result<&mut S, CheckpointError>;
    /// The state as it is now, for `how` (see the [module docs](self)).
    fn capture_for(&mut self, how: CaptureFor) -> Result<StateCapture, CheckpointError>;
    /// Every key and its state, in disk-key order.
    fn for_each(&mut self, f: &mut dyn FnMut(&K, &mut S)) -> Result<(), CheckpointError>;
    /// Loads a chain (a whole run, then deltas) into the empty store.
    fn restore(&mut self, links: &[&[u8]], from: Option<u64>) -> Result<(), CheckpointError>;
}

/// An error of the store (`what` it was doing).
pub(crate) fn store_error(
    what: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> CheckpointError {
    CheckpointError::Disk {
        what: what.to_string(),
        source: Box::new(e),
    }
}

/// A cached entry.
struct Cached<S> {
    state: S,
    /// The epoch its copy in the store was written in (`None`: it has
    /// none; 0: loaded by a restore).
    on_disk: Option<u32>,
    dirty: bool,
    /// Used since the clock last passed it.
    used: bool,
}

/// One capture: a checkpoint's, as a later delta's base.
struct Captured {
    checkpoint: u64,
    epoch: u32,
    /// Payload bytes of each link of its chain, the whole run first (0:
    /// not archived yet).
    chain: Vec<Rc<Cell<u64>>>,
}

/// The store of one instance.
pub(crate) struct DiskState<K, S> {
    db: fjall::Database,
    data: fjall::Keyspace,
    changed: fjall::Keyspace,
    /// Pre-images of entries overwritten while an archive needs them.
    undo: fjall::Keyspace,
    /// The archives under way (and finished ones whose pre-images are
    /// still to remove).
    archives: Vec<Rc<run::Archiving>>,
    cache: FxHashMap<K, Cached<S>>,
    /// Keys made dirty since the last write-back.
    dirty: Vec<K>,
    /// Most entries the cache holds.
    cap: usize,
    cache_bytes: usize,
    /// Bytes and entries written back so far (the cache sizes its entries
    /// from them).
    written: (u64, u64),
    /// Epoch of the writes now (captures close it).
    epoch: u32,
    captured: VecDeque<Captured>,
    /// Reused for encoding keys and entries.
    scratch: Option<SnapshotBytes>,
    align: AlignedVec<16>,
    /// The instance's directory; last, so that it goes after the store.
    dir: Arc<ScratchDir>,
}

impl<K, S> DiskState<K, S>
where
    K: Archive + Hash + Eq + Clone + 'static,
    S: Archive + Default + Clone + 'static,
    K: for<'a> Serialize<SnapshotSerializer<'a>>,
    S: for<'a> Serialize<SnapshotSerializer<'a>>,
    Entry<Archived<K>, Archived<S>>: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
    Archived<K>: Deserialize<K, HighDeserializer<rancor::Error>>,
    Archived<S>: Deserialize<S, HighDeserializer<rancor::Error>>,
{
    /// A fresh, empty store for one instance, in a directory of its own
    /// under `base`, with `cache_bytes` of cache (see
    /// [`DiskBackend::cache_bytes`]).
    pub(crate) fn open(base: &Path, cache_bytes: usize) -> Result<Self, CheckpointError> {
        let dir = ScratchDir::unique(base, "keyed").map_err(|source| CheckpointError::Io {
            path: base.to_path_buf(),
            op: "creating a keyed state's store directory",
            source,
        })?;
        let half = cache_bytes / 2;
        let db = fjall::Database::builder(dir.path().join("db"))
            .cache_size(half.max(1 << 20) as u64)
            // The checkpoints are what survives a crash, not the store:
            // its journal is never synced.
            .manual_journal_persist(true)
            .worker_threads(2)
            .temporary(true)
            .open()
            .map_err(|e| store_error("opening the store", e))?;
        let options = |memtable: u64| {
            move || fjall::KeyspaceCreateOptions::default().max_memtable_size(memtable)
        };
        // The entries' filter blocks stay in memory at every level (~1.3
        // bytes a key): a lookup of a new key then reads nothing from
        // disk. The change index is only ever read in ranges: nothing of
        // it is pinned.
        let data = db
            .keyspace("state", move || {
                options(MEMTABLE)()
                    .filter_block_pinning_policy(fjall::config::PinningPolicy::all(true))
            })
            .map_err(|e| store_error("opening the store", e))?;
        let changed = db
            .keyspace("changed", move || {
                options(MEMTABLE / 2)()
                    .filter_block_pinning_policy(fjall::config::PinningPolicy::all(false))
                    .index_block_pinning_policy(fjall::config::PinningPolicy::all(false))
            })
            .map_err(|e| store_error("opening the store", e))?;
        let undo = db
            .keyspace("undo", options(MEMTABLE / 4))
            .map_err(|e| store_error("opening the store", e))?;
        let mut s = DiskState {
            db,
            data,
            changed,
            undo,
            archives: Vec::new(),
            cache: FxHashMap::default(),
            dirty: Vec::new(),
            cap: 0,
            cache_bytes: half,
            written: (0, 0),
            epoch: 1,
            captured: VecDeque::new(),
            scratch: Some(SnapshotBytes::new()),
            align: AlignedVec::new(),
            dir: Arc::new(dir),
        };
        s.size_cache();
        Ok(s)
    }

    /// Sets the cache's capacity from what an entry costs.
    fn size_cache(&mut self) {
        let inline = std::mem::size_of::<(K, Cached<S>)>() + 16;
        let encoded = match self.written {
            (_, 0) => 0,
            (b, n) => (b / n) as usize,
        };
        self.cap = (self.cache_bytes / inline.max(encoded)).max(FLUSH_AT * 2);
    }

    /// Decodes an entry's archive.
    fn decode(align: &mut AlignedVec<16>, bytes: &[u8]) -> Result<(K, S), CheckpointError> {
        align.clear();
        align.extend_from_slice(bytes);
        let e = rkyv::access::<Entry<Archived<K>, Archived<S>>, rancor::Error>(align)
            .map_err(|source| CheckpointError::Access { source })?;
        let k = rkyv::deserialize::<K, rancor::Error>(&e.key)
            .map_err(|source| CheckpointError::Deserialize { source })?;
        let s = rkyv::deserialize::<S, rancor::Error>(&e.value)
            .map_err(|source| CheckpointError::Deserialize { source })?;
        Ok((k, s))
    }

    /// `key`'s state and epoch in the store, if it is there.
    fn load(&mut self, key: &K) -> Result<Option<(S, Option<u32>)>, CheckpointError> {
        let dk = disk_key(&mut self.scratch, key)?;
        let Some(v) = self
            .data
            .get(&dk)
            .map_err(|e| store_error("reading a key", e))?
        else {
            return Ok(None);
        };
        let (epoch, entry) = split_value(&v)?;
        let (k, s) = Self::decode(&mut self.align, entry)?;
        if k != *key {
            return Err(CheckpointError::Delta(
                "the disk store holds another key under a key's place".into(),
            ));
        }
        Ok(Some((s, Some(epoch))))
    }

    /// Writes the dirty entries back, in one batch.
    fn flush(&mut self) -> Result<(), CheckpointError> {
        if self.dirty.is_empty() && !self.archives.iter().any(|a| a.done.get()) {
            return Ok(());
        }
        let mut batch = self.db.batch();
        let epoch = self.epoch;
        let dirty = std::mem::take(&mut self.dirty);
        let mut bytes = 0u64;
        let scratch = &mut self.scratch;
        for key in &dirty {
            let Some(c) = self.cache.get_mut(key) else {
                continue;
            };
            let dk = disk_key(scratch, key)?;
            if let Some(was) = c.on_disk.filter(|&w| w != epoch) {
                // The first overwrite since `was`: an archive under way
                // that still needs the entry as it is gets a copy first.
                let mut old = None;
                for a in self.archives.iter().filter(|a| a.needs(was, &dk)) {
                    if old.is_none() {
                        old = self
                            .data
                            .get(&dk)
                            .map_err(|e| store_error("reading a key", e))?;
                    }
                    let v = old.as_ref().ok_or_else(|| {
                        CheckpointError::Delta("the disk store lost a key it wrote".into())
                    })?;
                    batch.insert(&self.undo, a.undo_key(&dk), v.clone());
                }
                if was != 0 {
                    batch.remove(&self.changed, changed_key(was, &dk));
                }
            }
            if c.on_disk != Some(epoch) {
                batch.insert(&self.changed, changed_key(epoch, &dk), Vec::<u8>::new());
            }
            let mut value = Vec::with_capacity(64);
            value.extend_from_slice(&epoch.to_le_bytes());
            encode(
                scratch,
                &EntryAdapter::<_, _, K, S>::new(key, &c.state),
                &mut value,
            )?;
            bytes += value.len() as u64;
            batch.insert(&self.data, dk, value);
            c.on_disk = Some(epoch);
            c.dirty = false;
        }
        // Pre-images of archives that ended go in the same batch.
        for a in self.archives.iter().filter(|a| a.done.get()) {
            for k in self.undo.prefix(a.epoch.to_be_bytes()) {
                let k = k.key().map_err(|e| store_error("removing pre-images", e))?;
                batch.remove(&self.undo, k);
            }
        }
        self.archives.retain(|a| !a.done.get());
        batch
            .commit()
            .map_err(|e| store_error("writing entries back", e))?;
        self.written.0 += bytes;
        self.written.1 += dirty.len() as u64;
        self.dirty = dirty;
        self.dirty.clear();
        Ok(())
    }

    /// Makes room for one more entry: writes back, then evicts the clean
    /// entries the clock finds unused (a second pass takes any).
    fn make_room(&mut self) -> Result<(), CheckpointError> {
        if self.cache.len() < self.cap {
            return Ok(());
        }
        self.flush()?;
        self.size_cache();
        let target = self.cap - self.cap / 4;
        self.cache
            .retain(|_, c| std::mem::replace(&mut c.used, false));
        if self.cache.len() > target {
            let mut over = self.cache.len() - target;
            self.cache.retain(|_, _| {
                if over > 0 {
                    over -= 1;
                    false
                } else {
                    true
                }
            });
        }
        Ok(())
    }
}

/// Archives `value` into `out`, through a reused buffer.
fn encode<T>(
    scratch: &mut Option<SnapshotBytes>,
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), CheckpointError>
where
    T: for<'a> Serialize<SnapshotSerializer<'a>>,
{
    let mut buf = scratch.take().unwrap_or_default();
    buf.clear();
    let buf = rkyv::api::high::to_bytes_in(value, buf)
        .map_err(|source| CheckpointError::Serialize { source })?;
    out.extend_from_slice(buf.payload());
    *scratch = Some(buf);
    Ok(())
}

/// The disk key of `key`: its stable hash, then its archive.
fn disk_key<K>(scratch: &mut Option<SnapshotBytes>, key: &K) -> Result<Vec<u8>, CheckpointError>
where
    K: Hash + for<'a> Serialize<SnapshotSerializer<'a>>,
{
    let mut out = Vec::with_capacity(32);
    out.extend_from_slice(&super::index::hash_of(key).to_be_bytes());
    encode(scratch, key, &mut out)?;
    Ok(out)
}

/// A change index key: the epoch, then the disk key.
fn changed_key(epoch: u32, dk: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + dk.len());
    k.extend_from_slice(&epoch.to_be_bytes());
    k.extend_from_slice(dk);
    k
}

/// A stored value's epoch and entry.
fn split_value(v: &[u8]) -> Result<(u32, &[u8]), CheckpointError> {
    match v.split_first_chunk::<4>() {
        Some((e, rest)) => Ok((u32::from_le_bytes(*e), rest)),
        None => Err(CheckpointError::Delta(
            "a disk store value shorter than its epoch".into(),
        )),
    }
}

impl<K, S> DiskOps<K, S> for DiskState<K, S>
where
    K: Archive + Hash + Eq + Clone + 'static,
    S: Archive + Default + Clone + 'static,
    K: for<'a> Serialize<SnapshotSerializer<'a>>,
    S: for<'a> Serialize<SnapshotSerializer<'a>>,
    Entry<Archived<K>, Archived<S>>: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
    Archived<K>: Deserialize<K, HighDeserializer<rancor::Error>>,
    Archived<S>: Deserialize<S, HighDeserializer<rancor::Error>>,
{
    fn state(&mut self, key: &K) -> Result<&mut S, CheckpointError> {
        if !self.cache.contains_key(key) {
            self.make_room()?;
            let (state, on_disk) = self.load(key)?.unwrap_or_default();
            self.cache.insert(
                key.clone(),
                Cached {
                    state,
                    on_disk,
                    dirty: false,
                    used: false,
                },
            );
        }
        if self.dirty.len() >= FLUSH_AT {
            self.flush()?;
        }
        let c = self.cache.get_mut(key).expect("inserted above");
        c.used = true;
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(key.clone());
        }
        Ok(&mut c.state)
    }

    fn capture_for(&mut self, how: CaptureFor) -> Result<StateCapture, CheckpointError> {
        self.flush()?;
        let epoch = self.epoch;
        self.epoch += 1;
        let base = how
            .base
            .filter(|_| how.checkpoint != 0)
            .and_then(|b| self.captured.iter().find(|c| c.checkpoint == b))
            .filter(|c| {
                let whole = c.chain[0].get();
                let deltas: u64 = c.chain[1..].iter().map(|b| b.get()).sum();
                whole > 0
                    && c.chain[1..].iter().all(|b| b.get() > 0)
                    && ((c.chain.len() - 1) as u32) < how.policy.max_deltas
                    && (deltas as f64) < how.policy.max_delta_ratio * whole as f64
            })
            .map(|c| (c.checkpoint, c.epoch, c.chain.clone()));
        let bytes = Rc::new(Cell::new(0));
        let (kind, chain) = match base {
            Some((checkpoint, base_epoch, mut chain)) => {
                chain.push(Rc::clone(&bytes));
                (
                    run::Kind::Delta {
                        over: checkpoint,
                        from_epoch: base_epoch + 1,
                    },
                    chain,
                )
            }
            None => (run::Kind::Whole, vec![Rc::clone(&bytes)]),
        };
        if how.checkpoint != 0 {
            // Older captures are no base any more: the newest completed
            // checkpoint is `how.base`.
            if let Some(b) = how.base {
                self.captured.retain(|c| c.checkpoint >= b);
            }
            while self.captured.len() >= 16 {
                self.captured.pop_front();
            }
            self.captured.push_back(Captured {
                checkpoint: how.checkpoint,
                epoch,
                chain,
            });
        }
        let at = run::Archiving::new(epoch, kind);
        self.archives.push(Rc::clone(&at));
        let steps = run::Steps::new(
            [&self.data, &self.changed, &self.undo],
            at,
            bytes,
            Arc::clone(&self.dir),
        )?;
        Ok(StateCapture::Steps(Box::new(steps)))
    }

    fn for_each(&mut self, f: &mut dyn FnMut(&K, &mut S)) -> Result<(), CheckpointError> {
        self.flush()?;
        for kv in self.data.iter() {
            let (_, v) = kv
                .into_inner()
                .map_err(|e| store_error("reading the store in order", e))?;
            let (_, entry) = split_value(&v)?;
            let (k, mut s) = Self::decode(&mut self.align, entry)?;
            f(&k, &mut s);
        }
        Ok(())
    }

    fn restore(&mut self, links: &[&[u8]], from: Option<u64>) -> Result<(), CheckpointError> {
        let chain = run::load(&self.db, &self.data, links)?;
        if let Some(checkpoint) = from {
            self.captured.push_back(Captured {
                checkpoint,
                epoch: 0,
                chain: chain.into_iter().map(|b| Rc::new(Cell::new(b))).collect(),
            });
        }
        Ok(())
    }
}

//! The disk backend's checkpoint payload: a **run** of entries.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "TNDMRUN1"
//!      8     8  kind: 0 whole, 1 delta
//!     16     8  the checkpoint a delta applies over (0: whole)
//!     24     8  N = entries
//!     32     …  N entries: key length (u32 LE), value length (u32 LE),
//!               the disk key, the entry's archive
//! ```
//!
//! A whole run is in disk-key order, strictly ascending (a restore loads
//! it by bulk ingestion, which needs that, and checks it); a delta's
//! entries are each key once, in the order of the epochs they were last
//! written in.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use super::store_error;
use crate::checkpoint::{ArchiveSteps, CheckpointError, SnapshotBytes};
use crate::sys::scratch::ScratchDir;

/// Magic of a run.
pub(crate) const MAGIC: &[u8; 8] = b"TNDMRUN1";
/// Bytes of a run's header.
const HEADER: usize = 32;

/// What a capture archives.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Whole,
    /// The entries written in epochs `from_epoch..=` the capture's.
    Delta {
        over: u64,
        from_epoch: u32,
    },
}

/// An archive under way, as the store's write-back sees it: what it must
/// save a pre-image for before it overwrites an entry (see the
/// [module docs](super)).
pub(super) struct Archiving {
    /// The capture's epoch: entries written in it or before are the
    /// capture's.
    pub(super) epoch: u32,
    pub(super) kind: Kind,
    /// The last key the archive has passed: of the store (whole), or of
    /// the change index (delta); `None`: none yet.
    cursor: RefCell<Option<Vec<u8>>>,
    /// A delta has read its range of the change index: every key is
    /// passed.
    ranged: Cell<bool>,
    /// Finished or dropped: its pre-images can go.
    pub(super) done: Cell<bool>,
}

impl Archiving {
    pub(super) fn new(epoch: u32, kind: Kind) -> Rc<Self> {
        Rc::new(Archiving {
            epoch,
            kind,
            cursor: RefCell::new(None),
            ranged: Cell::new(false),
            done: Cell::new(false),
        })
    }

    /// Whether the entry `dk`, stored in epoch `was`, must be saved before
    /// it is overwritten: the archive still needs it as it was.
    pub(super) fn needs(&self, was: u32, dk: &[u8]) -> bool {
        if self.done.get() || self.ranged.get() {
            return false;
        }
        let cursor = self.cursor.borrow();
        let passed = |key: &[u8]| cursor.as_deref().is_some_and(|c| key <= c);
        match self.kind {
            Kind::Whole => was <= self.epoch && !passed(dk),
            Kind::Delta { from_epoch, .. } => {
                (from_epoch..=self.epoch).contains(&was) && !passed(&super::changed_key(was, dk))
            }
        }
    }

    /// Where this archive's pre-images are kept: its epoch, then the disk
    /// key.
    pub(super) fn undo_key(&self, dk: &[u8]) -> Vec<u8> {
        super::changed_key(self.epoch, dk)
    }
}

/// A capture archived a slice at a time from the live store, while the
/// operator goes on writing to it.
///
/// No snapshot of the store is held: a snapshot keeps every memtable
/// written while it is open in memory (the store's versions are kept for
/// it), which for a state of gigabytes archived over seconds is more memory
/// than the backend may use. Instead, an entry of the capture that the
/// write-back overwrites before the archive has passed it is first copied
/// to the pre-image keyspace (see [`Archiving::needs`]); the archive reads
/// an entry stored after its epoch from there. Each step opens its own
/// iterator and drops it.
pub(super) struct Steps {
    data: fjall::Keyspace,
    changed: fjall::Keyspace,
    undo: fjall::Keyspace,
    at: Rc<Archiving>,
    /// A delta's second part: the pre-images, after this key (`Some(None)`:
    /// from the start).
    undo_after: Option<Option<Vec<u8>>>,
    out: Option<SnapshotBytes>,
    entries: u64,
    /// Where the payload's size goes once it is done.
    bytes: Rc<Cell<u64>>,
    /// The store's directory lives while a capture of it does.
    _dir: Arc<ScratchDir>,
}

impl Steps {
    pub(super) fn new(
        store: [&fjall::Keyspace; 3],
        at: Rc<Archiving>,
        bytes: Rc<Cell<u64>>,
        dir: Arc<ScratchDir>,
    ) -> Result<Self, CheckpointError> {
        let [data, changed, undo] = store;
        // The archive may be larger than the memory the process may use:
        // its bytes live in a file beside the store.
        let mut out = SnapshotBytes::in_file(dir.path()).map_err(|source| CheckpointError::Io {
            path: dir.path().to_path_buf(),
            op: "creating a checkpoint's buffer file",
            source,
        })?;
        let (kind_word, over) = match at.kind {
            Kind::Whole => (0u64, 0u64),
            Kind::Delta { over, .. } => (1, over),
        };
        out.extend(MAGIC);
        out.extend(&kind_word.to_le_bytes());
        out.extend(&over.to_le_bytes());
        out.extend(&0u64.to_le_bytes());
        Ok(Steps {
            data: data.clone(),
            changed: changed.clone(),
            undo: undo.clone(),
            at,
            undo_after: None,
            out: Some(out),
            entries: 0,
            bytes,
            _dir: dir,
        })
    }

    fn push(&mut self, key: &[u8], entry: &[u8]) -> Result<(), CheckpointError> {
        let out = self.out.as_mut().ok_or(CheckpointError::WriterGone)?;
        let len = |n: usize| {
            u32::try_from(n).map_err(|_| {
                CheckpointError::Delta(format!("a disk state entry of {n} bytes (at most 4 GiB)"))
            })
        };
        out.extend(&len(key.len())?.to_le_bytes());
        out.extend(&len(entry.len())?.to_le_bytes());
        out.extend(key);
        out.extend(entry);
        self.entries += 1;
        Ok(())
    }

    /// The archive, complete.
    fn finish(&mut self) -> Result<SnapshotBytes, CheckpointError> {
        let mut out = self.out.take().ok_or(CheckpointError::WriterGone)?;
        out.payload_mut()[24..32].copy_from_slice(&self.entries.to_le_bytes());
        if let Kind::Delta { over, .. } = self.at.kind {
            out.set_delta_over(Some(over));
        }
        self.bytes.set(out.len() as u64);
        self.at.done.set(true);
        Ok(out)
    }

    /// A pre-image this archive saved of `dk`, if any.
    fn saved(&self, dk: &[u8]) -> Result<Option<fjall::UserValue>, CheckpointError> {
        self.undo
            .get(self.at.undo_key(dk))
            .map_err(|e| store_error("reading a pre-image", e))
    }

    /// Up to `n` entries of the store, from the cursor on; `false` once
    /// past the last.
    fn whole_step(&mut self, n: usize) -> Result<bool, CheckpointError> {
        use std::ops::Bound::{Excluded, Unbounded};
        let after = self.at.cursor.borrow().clone();
        let iter = match &after {
            None => self.data.iter(),
            Some(k) => self
                .data
                .range::<&[u8], _>((Excluded(k.as_slice()), Unbounded)),
        };
        let (last, more) = bounded(iter, n, |kv| {
            let (k, v) = kv
                .into_inner()
                .map_err(|e| store_error("reading the store in order", e))?;
            let (epoch, entry) = super::split_value(&v)?;
            if epoch <= self.at.epoch {
                self.push(&k, entry)?;
            } else if let Some(u) = self.saved(&k)? {
                // Overwritten since the capture: as it was then.
                let (_, entry) = super::split_value(&u)?;
                self.push(&k, entry)?;
            }
            // (Else placed since the capture: not in it.)
            Ok(k)
        })?;
        if let Some(k) = last {
            *self.at.cursor.borrow_mut() = Some(k.to_vec());
        }
        Ok(more)
    }

    /// Up to `n` keys of the delta's range of the change index; `false`
    /// once past its end.
    fn delta_step(&mut self, n: usize) -> Result<bool, CheckpointError> {
        let Kind::Delta { from_epoch, .. } = self.at.kind else {
            return Ok(false);
        };
        let after = self.at.cursor.borrow().clone();
        let iter = epoch_range(&self.changed, from_epoch, self.at.epoch, after.as_deref());
        let (last, more) = bounded(iter, n, |kv| {
            let ck = kv
                .key()
                .map_err(|e| store_error("reading the change index", e))?;
            let (was, dk) = ck.split_at(4);
            let v = self
                .data
                .get(dk)
                .map_err(|e| store_error("reading the store", e))?
                .ok_or_else(|| {
                    CheckpointError::Delta(
                        "the disk store's change index names a key it does not hold".into(),
                    )
                })?;
            let (epoch, entry) = super::split_value(&v)?;
            if epoch.to_be_bytes() != was {
                return Err(CheckpointError::Delta(
                    "the disk store's change index disagrees with the store".into(),
                ));
            }
            self.push(dk, entry)?;
            Ok(ck)
        })?;
        if let Some(k) = last {
            *self.at.cursor.borrow_mut() = Some(k.to_vec());
        }
        Ok(more)
    }

    /// Up to `n` of the delta's pre-images (the keys overwritten since
    /// the capture, whose change index entry left the range); `false` once
    /// past the last.
    fn undo_step(&mut self, n: usize) -> Result<bool, CheckpointError> {
        let after = self.undo_after.clone().flatten();
        let iter = epoch_range(&self.undo, self.at.epoch, self.at.epoch, after.as_deref());
        let (last, more) = bounded(iter, n, |kv| {
            let (k, v) = kv
                .into_inner()
                .map_err(|e| store_error("reading a pre-image", e))?;
            let (_, entry) = super::split_value(&v)?;
            self.push(&k[4..], entry)?;
            Ok(k)
        })?;
        if let Some(k) = last {
            self.undo_after = Some(Some(k.to_vec()));
        }
        Ok(more)
    }
}

/// Takes up to `n` (at least one) items of `iter` through `each`, which
/// returns the key a later step goes on after: the last of those keys,
/// and whether `iter` had more.
fn bounded<I: Iterator, K>(
    iter: I,
    n: usize,
    mut each: impl FnMut(I::Item) -> Result<K, CheckpointError>,
) -> Result<(Option<K>, bool), CheckpointError> {
    let mut last = None;
    for (seen, item) in iter.enumerate() {
        if seen >= n.max(1) {
            return Ok((last, true));
        }
        last = Some(each(item)?);
    }
    Ok((last, false))
}

/// The keys of `ks` (epoch-prefixed) from epoch `from` to epoch `to`
/// inclusive, after `after` if given.
fn epoch_range(ks: &fjall::Keyspace, from: u32, to: u32, after: Option<&[u8]>) -> fjall::Iter {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let lo = from.to_be_bytes();
    let hi = (u64::from(to) + 1).to_be_bytes();
    let start = match after {
        None => Included(&lo[..]),
        Some(k) => Excluded(k),
    };
    let end = if to == u32::MAX {
        Unbounded
    } else {
        Excluded(&hi[4..])
    };
    ks.range::<&[u8], _>((start, end))
}

impl ArchiveSteps for Steps {
    fn step(&mut self, entries: usize) -> Result<Option<SnapshotBytes>, CheckpointError> {
        if self.out.is_none() {
            return Ok(None);
        }
        let more = match self.at.kind {
            Kind::Whole => self.whole_step(entries)?,
            Kind::Delta { .. } if !self.at.ranged.get() => {
                if !self.delta_step(entries)? {
                    // Every key of the range is passed: what the
                    // write-back overwrites from now on is not saved.
                    self.at.ranged.set(true);
                    self.undo_after = Some(None);
                }
                true
            }
            Kind::Delta { .. } => self.undo_step(entries)?,
        };
        if more {
            return Ok(None);
        }
        self.finish().map(Some)
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        // Finished or abandoned (a checkpoint that failed): its pre-images
        // can go (the store removes them at its next write-back).
        self.at.done.set(true);
    }
}

/// A run's header, checked.
struct Parsed<'a> {
    delta: bool,
    entries: u64,
    body: &'a [u8],
}

fn parse(link: &[u8]) -> Result<Parsed<'_>, CheckpointError> {
    let bad = |why: &str| CheckpointError::Delta(format!("a disk state run {why}"));
    // The magic first: a short in-memory archive is another backend's
    // checkpoint, not a damaged run.
    if link.get(..8) != Some(MAGIC.as_slice()) {
        return Err(CheckpointError::Delta(
            "not written by the disk state backend (a checkpoint of the in-memory backend \
             restores only into it: run the job with StateBackend::Memory)"
                .into(),
        ));
    }
    if link.len() < HEADER {
        return Err(bad("shorter than its header"));
    }
    let word = |i: usize| u64::from_le_bytes(link[i..i + 8].try_into().expect("8 bytes"));
    let delta = match word(8) {
        0 => false,
        1 => true,
        k => return Err(bad(&format!("of unknown kind {k}"))),
    };
    Ok(Parsed {
        delta,
        entries: word(24),
        body: &link[HEADER..],
    })
}

/// The entries of a run, each checked against the run's bounds.
fn entries<'a>(
    p: &Parsed<'a>,
) -> impl Iterator<Item = Result<(&'a [u8], &'a [u8]), CheckpointError>> {
    let mut rest = p.body;
    let mut left = p.entries;
    std::iter::from_fn(move || {
        if left == 0 {
            return (!rest.is_empty()).then(|| {
                rest = &[];
                Err(CheckpointError::Delta(
                    "a disk state run longer than its entries".into(),
                ))
            });
        }
        left -= 1;
        let cut = |b: &[u8]| -> Option<(usize, usize)> {
            let k = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
            let v = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?) as usize;
            (b.len() - 8 >= k.checked_add(v)?).then_some((k, v))
        };
        match cut(rest) {
            Some((k, v)) => {
                let key = &rest[8..8 + k];
                let entry = &rest[8 + k..8 + k + v];
                rest = &rest[8 + k + v..];
                Some(Ok((key, entry)))
            }
            None => {
                left = 0;
                rest = &[];
                Some(Err(CheckpointError::Delta(
                    "a disk state run cut short in an entry".into(),
                )))
            }
        }
    })
}

/// A stored value: epoch 0 (loaded by a restore), then the entry.
fn value(entry: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + entry.len());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(entry);
    v
}

/// Loads a chain into an empty store: the whole run by bulk ingestion,
/// then each delta in batches. Returns each link's payload bytes.
pub(super) fn load(
    db: &fjall::Database,
    data: &fjall::Keyspace,
    links: &[&[u8]],
) -> Result<Vec<u64>, CheckpointError> {
    let Some((whole, deltas)) = links.split_first() else {
        return Err(CheckpointError::Delta("an empty chain".into()));
    };
    let p = parse(whole)?;
    if p.delta {
        return Err(CheckpointError::Delta(
            "a disk state chain that starts with a delta".into(),
        ));
    }
    let mut ingest = data
        .start_ingestion()
        .map_err(|e| store_error("loading a checkpoint", e))?;
    let mut last: Option<&[u8]> = None;
    for e in entries(&p) {
        let (key, entry) = e?;
        // Ingestion panics on keys out of order: a run that has them is
        // damaged, and says so.
        if last.is_some_and(|l| l >= key) {
            return Err(CheckpointError::Delta(
                "a whole disk state run whose keys are not in ascending order".into(),
            ));
        }
        last = Some(key);
        ingest
            .write(key.to_vec(), value(entry))
            .map_err(|e| store_error("loading a checkpoint", e))?;
    }
    ingest
        .finish()
        .map_err(|e| store_error("loading a checkpoint", e))?;
    for (i, d) in deltas.iter().enumerate() {
        let p = parse(d)?;
        if !p.delta {
            return Err(CheckpointError::Delta(format!(
                "link {} of {} of a disk state chain is whole, not a delta",
                i + 2,
                links.len()
            )));
        }
        let mut batch = db.batch();
        for e in entries(&p) {
            let (key, entry) = e?;
            batch.insert(data, key.to_vec(), value(entry));
            if batch.len() >= 4096 {
                std::mem::replace(&mut batch, db.batch())
                    .commit()
                    .map_err(|e| store_error("loading a checkpoint", e))?;
            }
        }
        batch
            .commit()
            .map_err(|e| store_error("loading a checkpoint", e))?;
    }
    Ok(links.iter().map(|l| l.len() as u64).collect())
}

/// Whether a payload is a disk state run (the in-memory backend refuses
/// one by name).
pub(crate) fn is_run(payload: &[u8]) -> bool {
    payload.get(..8) == Some(MAGIC.as_slice())
}

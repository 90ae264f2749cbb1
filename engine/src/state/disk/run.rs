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

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use fjall::Readable;

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
    /// The entries written in epochs `from_epoch..=to_epoch`.
    Delta {
        over: u64,
        from_epoch: u32,
        to_epoch: u32,
    },
}

/// A capture archived a slice at a time from the store's snapshot.
pub(super) struct Steps {
    snapshot: fjall::Snapshot,
    data: fjall::Keyspace,
    iter: fjall::Iter,
    kind: Kind,
    out: Option<SnapshotBytes>,
    entries: u64,
    /// Where the payload's size goes once it is done.
    bytes: Rc<Cell<u64>>,
    /// The store's directory lives while a capture of it does.
    _dir: Arc<ScratchDir>,
}

impl Steps {
    pub(super) fn new(
        snapshot: fjall::Snapshot,
        data: fjall::Keyspace,
        changed: fjall::Keyspace,
        kind: Kind,
        bytes: Rc<Cell<u64>>,
        dir: Arc<ScratchDir>,
    ) -> Result<Self, CheckpointError> {
        let iter = match kind {
            Kind::Whole => snapshot.iter(&data),
            Kind::Delta {
                from_epoch,
                to_epoch,
                ..
            } => {
                let lo = from_epoch.to_be_bytes().to_vec();
                let hi = (u64::from(to_epoch) + 1).to_be_bytes()[4..].to_vec();
                if to_epoch == u32::MAX {
                    snapshot.range(&changed, lo..)
                } else {
                    snapshot.range(&changed, lo..hi)
                }
            }
        };
        // The archive may be larger than the memory the process may use:
        // its bytes live in a file beside the store.
        let mut out = SnapshotBytes::in_file(dir.path()).map_err(|source| CheckpointError::Io {
            path: dir.path().to_path_buf(),
            op: "creating a checkpoint's buffer file",
            source,
        })?;
        let (kind_word, over) = match kind {
            Kind::Whole => (0u64, 0u64),
            Kind::Delta { over, .. } => (1, over),
        };
        out.extend(MAGIC);
        out.extend(&kind_word.to_le_bytes());
        out.extend(&over.to_le_bytes());
        out.extend(&0u64.to_le_bytes());
        Ok(Steps {
            snapshot,
            data,
            iter,
            kind,
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
}

impl ArchiveSteps for Steps {
    fn step(&mut self, entries: usize) -> Result<Option<SnapshotBytes>, CheckpointError> {
        if self.out.is_none() {
            return Ok(None);
        }
        for _ in 0..entries.max(1) {
            let Some(kv) = self.iter.next() else {
                let mut out = self.out.take().ok_or(CheckpointError::WriterGone)?;
                out.payload_mut()[24..32].copy_from_slice(&self.entries.to_le_bytes());
                if let Kind::Delta { over, .. } = self.kind {
                    out.set_delta_over(Some(over));
                }
                self.bytes.set(out.len() as u64);
                return Ok(Some(out));
            };
            let (k, v) = kv
                .into_inner()
                .map_err(|e| store_error("reading a snapshot of the store", e))?;
            match self.kind {
                Kind::Whole => {
                    let (_, entry) = super::split_value(&v)?;
                    self.push(&k, entry)?;
                }
                Kind::Delta { .. } => {
                    let dk = &k[4..];
                    let v = self
                        .snapshot
                        .get(&self.data, dk)
                        .map_err(|e| store_error("reading a snapshot of the store", e))?
                        .ok_or_else(|| {
                            CheckpointError::Delta(
                                "the disk store's change index names a key it does not hold".into(),
                            )
                        })?;
                    let (_, entry) = super::split_value(&v)?;
                    self.push(dk, entry)?;
                }
            }
        }
        Ok(None)
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
    if link.len() < HEADER {
        return Err(bad("shorter than its header"));
    }
    if &link[..8] != MAGIC {
        return Err(CheckpointError::Delta(
            "not written by the disk state backend (a checkpoint of the in-memory backend \
             restores only into it: run the job with StateBackend::Memory)"
                .into(),
        ));
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

//! The snapshot exchange of warm mode: the primary publishes its state's
//! rkyv archive into a memory-mapped file; the standby maps the newest one
//! in place — no copy, no deserialization — when it takes over.
//!
//! ## File layout (little-endian)
//!
//! ```text
//! 0      header block (4096 bytes)
//!          0  magic "TNDMSX\0\x01"   8  version (u32) = 1
//!         16  slot bytes (u64, multiple of 4096)
//!         64  published (atomic u64) = seq << 2 | slot   (0: nothing yet)
//!        128 + 64·i  slot i: length, covered position, XXH3-64 of the
//!                    bytes, pins (atomic u64 each)
//! 4096 + i·slot_bytes   slot i's bytes (i = 0, 1, 2)
//! ```
//!
//! Three slots, one writer, readers that pin: the writer fills a slot that
//! is neither the published one nor pinned by a reader — with one standby
//! pinning at most one slot, one of the three is always free — and then
//! publishes it with a release store that also bumps a sequence number. A
//! reader loads `published`, pins that slot, and re-checks `published`
//! (both sequentially consistent, against the writer's publish and its
//! read of the pins): if it changed, the writer may have chosen the slot
//! before the pin, so the reader unpins and tries again; if not, the slot
//! is current and pinned, and the writer will not touch it until the pin is
//! dropped. Each slot carries the position its state covers (the buffer
//! queue may evict below it) and a checksum the reader verifies.

use memmap2::{MmapMut, MmapOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::bq::BqError;

/// File magic.
pub const MAGIC: [u8; 8] = *b"TNDMSX\0\x01";
const VERSION: u32 = 1;
const HEADER: usize = 4096;
const SLOTS: usize = 3;
const OFF_PUBLISHED: usize = 64;
const OFF_SLOT_META: usize = 128;

/// Why a publication did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishError {
    /// The archive is larger than a slot.
    TooLarge {
        /// Its length.
        len: usize,
        /// The slot size.
        slot: usize,
    },
    /// Every non-current slot is pinned (more than one reader holds an old
    /// snapshot); try again at the next interval.
    Busy,
}

/// A published snapshot, pinned while this guard lives.
#[derive(Debug)]
pub struct Pinned<'a> {
    exchange: &'a SnapshotExchange,
    slot: usize,
    /// The sequence number of the publication (1, 2, …).
    pub seq: u64,
    /// The buffer-queue position the state covers.
    pub covered: u64,
    /// The archive, in place in the mapping (4096-aligned).
    pub bytes: &'a [u8],
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        self.exchange.pins(self.slot).fetch_sub(1, Ordering::SeqCst);
    }
}

/// Three snapshot slots in one mapped file.
pub struct SnapshotExchange {
    map: MmapMut,
    path: PathBuf,
    slot_bytes: usize,
    base: *mut u8,
}

// SAFETY: shared mutation goes through the header atomics; slot bytes are
// written only by the one writer, into a slot no reader has pinned or can
// newly pin (see the module docs), and read only under a pin.
unsafe impl Send for SnapshotExchange {}
// SAFETY: as above.
unsafe impl Sync for SnapshotExchange {}

impl std::fmt::Debug for SnapshotExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotExchange")
            .field("path", &self.path)
            .field("slot_bytes", &self.slot_bytes)
            .finish()
    }
}

impl SnapshotExchange {
    /// Creates the file (mode 0600; an existing file is an error) with
    /// slots of `slot_bytes` (rounded up to 4096).
    pub fn create(path: impl AsRef<Path>, slot_bytes: usize) -> Result<Self, BqError> {
        let path = path.as_ref().to_path_buf();
        let slot_bytes = slot_bytes.max(1).next_multiple_of(4096);
        let file = super::bq::create_file(&path, (HEADER + SLOTS * slot_bytes) as u64)?;
        // SAFETY: a fresh file of ours; shared access follows the protocol
        // of the module docs.
        let mut map =
            unsafe { MmapOptions::new().map_mut(&file) }.map_err(|source| BqError::Io {
                path: path.clone(),
                op: "mmap",
                source,
            })?;
        map[0..8].copy_from_slice(&MAGIC);
        map[8..12].copy_from_slice(&VERSION.to_le_bytes());
        map[16..24].copy_from_slice(&(slot_bytes as u64).to_le_bytes());
        let base = map.as_mut_ptr();
        Ok(SnapshotExchange {
            map,
            path,
            slot_bytes,
            base,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes one snapshot may have.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    fn atomic(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= HEADER && self.map.len() > HEADER);
        // SAFETY: an 8-aligned offset in the header of a page-aligned map
        // that lives as long as `self`; only ever accessed atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn meta(&self, slot: usize, field: usize) -> &AtomicU64 {
        self.atomic(OFF_SLOT_META + 64 * slot + 8 * field)
    }

    fn pins(&self, slot: usize) -> &AtomicU64 {
        self.meta(slot, 3)
    }

    /// Writer: publishes `bytes` (an archive covering buffer-queue positions
    /// below `covered`). Returns the publication's sequence number.
    pub fn publish(&self, bytes: &[u8], covered: u64) -> Result<u64, PublishError> {
        if bytes.len() > self.slot_bytes {
            return Err(PublishError::TooLarge {
                len: bytes.len(),
                slot: self.slot_bytes,
            });
        }
        let published = self.atomic(OFF_PUBLISHED).load(Ordering::SeqCst);
        let (seq, current) = (published >> 2, (published & 3) as usize);
        let slot = (0..SLOTS)
            .find(|&s| (published == 0 || s != current) && self.pins(s).load(Ordering::SeqCst) == 0)
            .ok_or(PublishError::Busy)?;
        let start = HEADER + slot * self.slot_bytes;
        // SAFETY: `slot` is not the published one and was not pinned when
        // checked; a reader that pins it afterwards re-checks `published`,
        // finds it unchanged only if this writer has not published since —
        // and then `slot` is not current, so the reader retries. The range
        // is inside the map (`bytes.len() <= slot_bytes`).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(start), bytes.len());
        }
        self.meta(slot, 0)
            .store(bytes.len() as u64, Ordering::Relaxed);
        self.meta(slot, 1).store(covered, Ordering::Relaxed);
        self.meta(slot, 2).store(
            crate::checkpoint::format::checksum(bytes),
            Ordering::Relaxed,
        );
        let next = seq + 1;
        self.atomic(OFF_PUBLISHED)
            .store(next << 2 | slot as u64, Ordering::SeqCst);
        Ok(next)
    }

    /// Reader: the newest published snapshot, pinned, its checksum verified;
    /// `None` if nothing was published yet.
    pub fn latest(&self) -> Option<Pinned<'_>> {
        loop {
            let p = self.atomic(OFF_PUBLISHED).load(Ordering::SeqCst);
            if p == 0 {
                return None;
            }
            let slot = (p & 3) as usize;
            self.pins(slot).fetch_add(1, Ordering::SeqCst);
            if self.atomic(OFF_PUBLISHED).load(Ordering::SeqCst) != p {
                self.pins(slot).fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            let len = self.meta(slot, 0).load(Ordering::Relaxed) as usize;
            let covered = self.meta(slot, 1).load(Ordering::Relaxed);
            let sum = self.meta(slot, 2).load(Ordering::Relaxed);
            let start = HEADER + slot * self.slot_bytes;
            // SAFETY: the slot is current and pinned (checked above), so the
            // writer does not write it while this guard lives; its bytes and
            // meta were written before the SeqCst store of `published` that
            // the load above observed.
            let bytes = unsafe { std::slice::from_raw_parts(self.base.add(start), len) };
            let pinned = Pinned {
                exchange: self,
                slot,
                seq: p >> 2,
                covered,
                bytes,
            };
            if crate::checkpoint::format::checksum(bytes) != sum {
                // Cannot happen under the protocol; treat as not published
                // rather than hand out damaged state.
                return None;
            }
            return Some(pinned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tmp(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "tandem-sx-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ))
    }

    #[test]
    fn the_newest_publication_is_read_in_place() {
        let p = tmp("basic");
        let x = SnapshotExchange::create(&p, 100).unwrap();
        assert!(x.latest().is_none());
        assert_eq!(x.publish(b"one", 10), Ok(1));
        assert_eq!(x.publish(b"two", 20), Ok(2));
        let s = x.latest().unwrap();
        assert_eq!((s.bytes, s.covered, s.seq), (&b"two"[..], 20, 2));
        assert_eq!(s.bytes.as_ptr() as usize % 4096, 0, "aligned for rkyv");
        assert_eq!(
            x.publish(&vec![0u8; 5000], 30),
            Err(PublishError::TooLarge {
                len: 5000,
                slot: 4096
            })
        );
        drop(s);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_pinned_snapshot_is_never_overwritten() {
        let p = tmp("pin");
        let x = SnapshotExchange::create(&p, 4096).unwrap();
        x.publish(b"held", 1).unwrap();
        let held = x.latest().unwrap();
        for i in 0..10u8 {
            x.publish(&[i; 64], 2 + i as u64).unwrap();
        }
        assert_eq!(held.bytes, b"held");
        assert_eq!(x.latest().unwrap().bytes, &[9u8; 64][..]);
        // Two readers pinning two old slots leave no slot to write.
        let a = x.latest().unwrap();
        x.publish(b"next", 20).unwrap();
        assert_eq!(x.publish(b"again", 21), Err(PublishError::Busy));
        drop((held, a));
        assert!(x.publish(b"again", 21).is_ok());
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_reader_racing_the_writer_always_sees_a_whole_snapshot() {
        let p = tmp("race");
        let x = Arc::new(SnapshotExchange::create(&p, 64 << 10).unwrap());
        let writer = {
            let x = Arc::clone(&x);
            std::thread::spawn(move || {
                for i in 1..=20_000u64 {
                    let len = 1 + (i as usize * 7919) % (64 << 10);
                    let bytes: Vec<u8> = (0..len).map(|k| (k as u64 ^ i) as u8).collect();
                    while x.publish(&bytes, i) == Err(PublishError::Busy) {
                        std::thread::yield_now();
                    }
                }
            })
        };
        let mut last = 0;
        while last < 20_000 {
            if let Some(s) = x.latest() {
                assert!(s.seq >= last, "sequence went back");
                let i = s.covered;
                assert_eq!(s.bytes.len(), 1 + (i as usize * 7919) % (64 << 10));
                assert!(s
                    .bytes
                    .iter()
                    .enumerate()
                    .all(|(k, &b)| b == (k as u64 ^ i) as u8));
                last = s.seq;
            }
        }
        writer.join().unwrap();
        std::fs::remove_file(p).unwrap();
    }
}

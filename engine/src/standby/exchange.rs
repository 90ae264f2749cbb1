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
//!                    bytes, pins, reserved (atomic u64 each)
//! 4096 + i·slot_bytes   slot i's bytes (i = 0, 1, 2)
//! ```
//!
//! Three slots, writers that reserve, readers that pin: a writer reserves
//! a slot that is neither the published one nor pinned by a reader nor
//! reserved by another writer ([`SnapshotExchange::reserve`]), fills it a
//! piece at a time ([`Staging::write`] — the primary copies a large state
//! over several polls, so no record waits behind the whole copy), and
//! publishes it ([`Staged::commit`]) with a compare-and-swap that also
//! bumps a sequence number. A slot dropped unpublished is released. With
//! one reader pinning at most one slot and one writer staging, one of the
//! three is always free; otherwise reserving says [`PublishError::Busy`]
//! and the point is skipped (a fenced primary that still stages holds at
//! most one more). A reader loads `published`, pins that slot, and re-checks `published`
//! (both sequentially consistent, against the writer's publish and its
//! read of the pins): if it changed, the writer may have chosen the slot
//! before the pin, so the reader unpins and tries again; if not, the slot
//! is current and pinned, and the writer will not touch it until the pin is
//! dropped. Each slot carries the position its state covers (the buffer
//! queue may evict below it) and a checksum the reader verifies.

use memmap2::MmapMut;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use xxhash_rust::xxh3::Xxh3;

use super::bq::BqError;

/// File magic.
pub const MAGIC: [u8; 8] = *b"TNDMSX\0\x01";
const VERSION: u32 = 1;
const HEADER: usize = 4096;
const SLOTS: usize = 3;
const OFF_PUBLISHED: usize = 64;
const OFF_SLOT_META: usize = 128;

/// Why a publication did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The archive is larger than a slot.
    #[error("a snapshot of {len} bytes is larger than the exchange's slots ({slot} bytes)")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The slot size.
        slot: usize,
    },
    /// Every non-current slot is pinned (more than one reader holds an old
    /// snapshot); try again at the next interval.
    #[error("every slot of the exchange is pinned by a reader")]
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

/// A slot reserved by [`SnapshotExchange::reserve`] and being filled a
/// piece at a time ([`Staging::write`]); released if dropped unfinished.
pub struct Staging {
    slot: Slot,
    len: usize,
    written: usize,
    sum: Xxh3,
}

/// A filled slot, not yet published ([`Staged::commit`]); released if
/// dropped unpublished.
#[derive(Debug)]
pub struct Staged {
    slot: Slot,
}

/// A slot this writer holds reserved; the reservation ends on drop.
#[derive(Debug)]
struct Slot {
    exchange: Arc<SnapshotExchange>,
    slot: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.exchange.reserved(self.slot).store(0, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging")
            .field("slot", &self.slot)
            .field("len", &self.len)
            .field("written", &self.written)
            .finish()
    }
}

impl Staging {
    /// Bytes still to write.
    pub fn remaining(&self) -> usize {
        self.len - self.written
    }

    /// Appends the next `bytes` of the archive (at most
    /// [`remaining`](Self::remaining); the rest is ignored).
    pub fn write(&mut self, bytes: &[u8]) {
        let bytes = &bytes[..bytes.len().min(self.remaining())];
        let x = &self.slot.exchange;
        let start = HEADER + self.slot.slot * x.slot_bytes + self.written;
        // SAFETY: the slot is reserved by this writer (no other writer
        // fills it) and is not current: it was neither published nor
        // pinned when reserved, only this writer's commit makes it current,
        // and a reader pins only a current slot (it re-checks `published`
        // after pinning). The range is inside the slot: `written +
        // bytes.len() <= len <= slot_bytes` (checked in `reserve`).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), x.base.add(start), bytes.len());
        }
        self.sum.update(bytes);
        self.written += bytes.len();
    }

    /// The filled slot, for an archive covering buffer-queue positions
    /// below `covered`; `None` if fewer bytes were written than reserved.
    pub fn finish(self, covered: u64) -> Option<Staged> {
        if self.written != self.len {
            return None;
        }
        let (x, slot) = (&self.slot.exchange, self.slot.slot);
        x.meta(slot, 0).store(self.len as u64, Ordering::Relaxed);
        x.meta(slot, 1).store(covered, Ordering::Relaxed);
        x.meta(slot, 2).store(self.sum.digest(), Ordering::Relaxed);
        Some(Staged { slot: self.slot })
    }
}

impl Staged {
    /// The exchange the slot is in.
    pub fn exchange(&self) -> &Arc<SnapshotExchange> {
        &self.slot.exchange
    }

    /// Publishes the slot: readers see it from now on (the bytes and meta
    /// were written before this SeqCst update). Returns the publication's
    /// sequence number (1, 2, …; one more than the newest before it,
    /// whichever writer published that).
    pub fn commit(self) -> u64 {
        let x = &self.slot.exchange;
        let published = x.atomic(OFF_PUBLISHED);
        let mut cur = published.load(Ordering::SeqCst);
        loop {
            let next = (cur >> 2) + 1;
            match published.compare_exchange(
                cur,
                next << 2 | self.slot.slot as u64,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                // Dropping `self.slot` ends the reservation; the slot is
                // current now, so no writer takes it until another is.
                Ok(_) => return next,
                Err(now) => cur = now,
            }
        }
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
    /// The length of an exchange file with slots of `slot_bytes` (rounded
    /// up to 4096): the header block and three slots.
    pub fn file_len(slot_bytes: usize) -> u64 {
        (slot_bytes.max(1) as u64)
            .checked_next_multiple_of(4096)
            .and_then(|s| s.checked_mul(SLOTS as u64))
            .and_then(|b| b.checked_add(HEADER as u64))
            .unwrap_or(u64::MAX)
    }

    /// Creates the file (mode 0600; an existing file is an error) with
    /// slots of `slot_bytes` (rounded up to 4096).
    pub fn create(path: impl AsRef<Path>, slot_bytes: usize) -> Result<Self, BqError> {
        let path = path.as_ref().to_path_buf();
        let slot_bytes = slot_bytes.max(1).next_multiple_of(4096);
        // Shared access follows the protocol of the module docs.
        let mut map = super::bq::create_mapped(&path, Self::file_len(slot_bytes))?;
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

    /// Maps an existing exchange another incarnation created (possibly in
    /// another process), after checking its header against the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, BqError> {
        let path = path.as_ref().to_path_buf();
        let (mut map, h) = super::bq::open_mapped(&path, &MAGIC, VERSION, "snapshot exchange")?;
        let slot_bytes = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
        let implied = usize::try_from(slot_bytes)
            .ok()
            .filter(|s| *s > 0 && s.is_multiple_of(4096))
            .map(Self::file_len);
        if implied != Some(map.len() as u64) {
            return Err(BqError::Invalid {
                path,
                reason: format!(
                    "{} bytes with slots of {slot_bytes} bytes: three slots after the header do not fit",
                    map.len()
                ),
            });
        }
        let base = map.as_mut_ptr();
        Ok(SnapshotExchange {
            map,
            path,
            slot_bytes: slot_bytes as usize,
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

    fn reserved(&self, slot: usize) -> &AtomicU64 {
        self.meta(slot, 4)
    }

    /// Writer: publishes `bytes` (an archive covering buffer-queue positions
    /// below `covered`) at once — [`reserve`](Self::reserve), one
    /// [`write`](Staging::write), [`commit`](Staged::commit). Returns the
    /// publication's sequence number.
    pub fn publish(self: &Arc<Self>, bytes: &[u8], covered: u64) -> Result<u64, PublishError> {
        let mut staging = self.reserve(bytes.len())?;
        staging.write(bytes);
        Ok(staging
            .finish(covered)
            .expect("every reserved byte written")
            .commit())
    }

    /// Writer: reserves a slot for an archive of `len` bytes, to be filled
    /// a piece at a time (so a large state's copy need not stop the
    /// primary's core for long) and then published. The slot is neither
    /// the published one nor pinned by a reader nor reserved by another
    /// writer.
    pub fn reserve(self: &Arc<Self>, len: usize) -> Result<Staging, PublishError> {
        if len > self.slot_bytes {
            return Err(PublishError::TooLarge {
                len,
                slot: self.slot_bytes,
            });
        }
        for s in 0..SLOTS {
            if self
                .reserved(s)
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                continue;
            }
            // Reserved from here on: dropped, it is released again.
            let slot = Slot {
                exchange: Arc::clone(self),
                slot: s,
            };
            let published = self.atomic(OFF_PUBLISHED).load(Ordering::SeqCst);
            let current = (published & 3) as usize;
            if (published == 0 || s != current) && self.pins(s).load(Ordering::SeqCst) == 0 {
                return Ok(Staging {
                    slot,
                    len,
                    written: 0,
                    sum: Xxh3::new(),
                });
            }
        }
        Err(PublishError::Busy)
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
        let x = Arc::new(SnapshotExchange::create(&p, 100).unwrap());
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
    fn a_second_mapping_opened_by_path_shares_publications_and_pins() {
        let p = tmp("open");
        let writer = Arc::new(SnapshotExchange::create(&p, 100).unwrap());
        let reader = SnapshotExchange::open(&p).unwrap();
        assert_eq!(reader.slot_bytes(), 4096);
        assert_eq!(writer.publish(b"one", 10), Ok(1));
        let s = reader.latest().unwrap();
        assert_eq!((s.bytes, s.covered), (&b"one"[..], 10));
        // The reader's pin, made through its own mapping, keeps the writer
        // off the slot: two more publications take the other two.
        assert_eq!(writer.publish(b"two", 20), Ok(2));
        assert_eq!(writer.publish(b"three", 30), Ok(3));
        assert_eq!(s.bytes, b"one", "the pinned slot was not reused");
        drop(s);

        // Another format, a damaged size, a short file: refused.
        let junk = tmp("open-junk");
        std::fs::write(&junk, vec![0u8; 8192]).unwrap();
        let e = SnapshotExchange::open(&junk).unwrap_err();
        assert!(e.to_string().contains("not a snapshot exchange"), "{e}");
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.truncate(4096 + 4096);
        std::fs::write(&junk, &bytes).unwrap();
        let e = SnapshotExchange::open(&junk).unwrap_err();
        assert!(e.to_string().contains("do not fit"), "{e}");
        std::fs::remove_file(junk).unwrap();
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_pinned_snapshot_is_never_overwritten() {
        let p = tmp("pin");
        let x = Arc::new(SnapshotExchange::create(&p, 4096).unwrap());
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
    fn a_slot_filled_piece_by_piece_is_seen_only_once_committed() {
        let p = tmp("staged");
        let x = Arc::new(SnapshotExchange::create(&p, 4096).unwrap());
        x.publish(b"old", 1).unwrap();
        let bytes: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let mut staging = x.reserve(bytes.len()).unwrap();
        for piece in bytes.chunks(700) {
            staging.write(piece);
            assert_eq!(x.latest().unwrap().bytes, b"old", "not before the commit");
        }
        assert_eq!(staging.remaining(), 0);
        let staged = staging.finish(9).unwrap();
        assert_eq!(x.latest().unwrap().bytes, b"old");
        assert_eq!(staged.commit(), 2);
        let s = x.latest().unwrap();
        assert_eq!((s.bytes, s.covered, s.seq), (&bytes[..], 9, 2));
        drop(s);
        // A short copy is refused; dropped reservations free their slots.
        let mut short = x.reserve(10).unwrap();
        short.write(b"abc");
        assert!(short.finish(3).is_none());
        let (a, b) = (x.reserve(1).unwrap(), x.reserve(1).unwrap());
        assert_eq!(x.reserve(1).err(), Some(PublishError::Busy));
        drop((a, b));
        assert!(x.reserve(1).is_ok());
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

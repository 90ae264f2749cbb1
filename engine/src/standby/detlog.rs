//! The determinant log: the order in which a primary took its input lanes.
//!
//! An operator with several input lanes (one buffer queue per upstream
//! instance) sees its input as an interleaving of those lanes, and the
//! interleaving is decided by timing. An operator whose output depends on
//! that order — a running count per key fed by two partitions, any
//! end-of-stream summary — computes something else when a new primary
//! reads the lanes in another order. So the primary *logs* each choice
//! before it acts on it (the idea of Clonos's causal logging of
//! nondeterministic events), and every later reader of the queues — a new
//! primary replaying after a takeover, a hot standby following along —
//! takes the lanes in exactly the logged order.
//!
//! One entry per *chunk*: "the next `n` inputs of lane `l`", "the end
//! entry of lane `l`", or "the checkpoint barrier entry at the head of
//! lane `l`". Chunks of one lane are contiguous in its queue, so a
//! reader that knows where each lane stood at some log position (a snapshot
//! records it) knows where every later chunk starts. Entry `s` is the
//! chunk with *sequence number* `s`; consumers see the same numbers in the
//! chunk marks that follow each chunk's output
//! ([`super::decide::Tracker`]).
//!
//! ## File layout (little-endian)
//!
//! ```text
//! 0      header block (4096 bytes)
//!          0  magic "TNDMDL\0\x01"   8  format version (u32) = 1
//!         12  lanes (u32)            16  capacity (u64, power of two)
//! 4096   capacity entries of 8 bytes (atomic u64), entry s at s mod capacity
//! ```
//!
//! An entry is one word:
//!
//! ```text
//!  63         40 39        24  23   22              0
//! +-------------+------------+-----+-----------------+
//! |  lap tag    |    lane    | ctl |        n        |
//! +-------------+------------+-----+-----------------+
//! ```
//!
//! `ctl` set: a control entry taking one queue position — `n` = 1 the
//! lane's end, `n` = 2 a checkpoint barrier whose id is in its queue
//! entry. A lane that is a replayed source (no queue: see
//! `runtime/standby/incarnation/source_lane.rs`) has no entry to carry a
//! barrier's id, so its barrier entries carry the id's low 22 bits: `n` =
//! 2²² + (id mod 2²²). A reader recovers the id as the largest one not
//! above the newest checkpoint triggered with those low bits
//! ([`barrier_id`]): exact while fewer than 2²² checkpoints are triggered
//! between the entry's append and its replay.
//!
//! A **tick** (`ctl` set, lane field 2¹⁶ − 1, which no lane has) takes no
//! queue position: the operator's processing time advanced by `n`
//! milliseconds there, so its processing-time timers fire at this point of
//! its input in every replay, as Clonos logs a timer's firing by its place
//! in the input. A primary logs one before a chunk when a millisecond or
//! more has passed since the last (at most one a chunk, so ticks at most
//! double the entries), or when a timer is due while its input is idle
//! (then the log may fill before the queues do, and asks for a recovery
//! point as it does when full).
//!
//! The lap tag is `(s / capacity) mod (2^24 − 1) + 1`: never zero (a fresh
//! file reads as empty), and different for consecutive laps, so a reader
//! tells entry `s` from the entry `s − capacity` that occupied its word
//! before.
//!
//! ## Protocol: one writer at a time, fenced by the epoch
//!
//! Entries are written once, by compare-and-swap from the previous lap's
//! word, and never change afterwards. The writer is the current primary;
//! a primary that was taken over while stalled may still try to append
//! when it wakes. So [`Words::append`] is a claim, not a store: the first writer
//! of entry `s` decides it, and every later writer (and reader) gets that
//! entry instead. After a successful append the writer looks at the epoch
//! (a SeqCst fence between the two, matched by one after the new primary's
//! claim of the epoch): either it sees that it was fenced — and stops
//! without acting on the entry, which the new primary will replay — or the
//! new primary, reading the log after its claim, sees the entry. A writer
//! whose append fails adopts the existing entry only if its epoch still
//! holds (the entry was left by a fenced primary that never acted on it,
//! or acted and had its outputs cut off by the consumers' cuts).
//!
//! The log cannot overflow before the queues do: every entry consumes at
//! least one queue position, and entries are kept from the same point on
//! as queue positions are (the newest recovery point, see
//! `runtime/standby/group.rs`), so a capacity of at least the sum of the queues'
//! slots always suffices; [`Words::append`] refuses an entry that would
//! overwrite one still needed.

use crate::sync::{fence, AtomicU64, Ordering};

/// One logged choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Det {
    /// The next `n` inputs (≥ 1) of `lane`.
    Chunk {
        /// The input lane.
        lane: u32,
        /// Inputs taken.
        n: u32,
    },
    /// The end-of-input entry of `lane`.
    End {
        /// The input lane.
        lane: u32,
    },
    /// The operator's processing time advanced by `ms` milliseconds (≥ 1)
    /// here: its processing-time timers due by then fire at this point of
    /// its input. Consumes no queue position.
    Tick {
        /// Milliseconds since the previous tick (from 0 at the group's
        /// start, on the job's clock).
        ms: u32,
    },
    /// The checkpoint barrier entry at the head of `lane`.
    Barrier {
        /// The input lane.
        lane: u32,
        /// The barrier's id modulo 2²² where the lane has no queue entry
        /// to carry it (a replayed source); `None`: the id is in the
        /// queue entry.
        low: Option<u32>,
    },
}

/// Bits of a checkpoint id a barrier entry carries.
pub const BARRIER_LOW_BITS: u32 = 22;
const LOW_MASK: u64 = (1 << BARRIER_LOW_BITS) - 1;

/// The low bits of checkpoint `id` a barrier entry carries.
#[inline]
pub fn barrier_low(id: u64) -> u32 {
    (id & LOW_MASK) as u32
}

/// The checkpoint id whose low bits are `low`: the largest not above
/// `newest` (the newest checkpoint triggered, which no logged barrier
/// exceeds).
#[inline]
pub fn barrier_id(low: u32, newest: u64) -> u64 {
    newest - (newest.wrapping_sub(low as u64) & LOW_MASK)
}

impl Det {
    /// The lane the entry takes from (a tick takes from none: `usize::MAX`,
    /// which no lane is).
    pub fn lane(&self) -> usize {
        match *self {
            Det::Chunk { lane, .. } | Det::End { lane } | Det::Barrier { lane, .. } => {
                lane as usize
            }
            Det::Tick { .. } => usize::MAX,
        }
    }

    /// Queue positions it consumes.
    pub fn len(&self) -> u64 {
        match *self {
            Det::Chunk { n, .. } => n as u64,
            Det::End { .. } | Det::Barrier { .. } => 1,
            Det::Tick { .. } => 0,
        }
    }

    /// Whether it consumes no queue position (only a tick).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Largest `n` of one chunk.
pub const MAX_CHUNK: u32 = (1 << 23) - 1;
/// Largest lane index (the lane field's largest value marks a tick).
pub const MAX_LANE: u32 = u16::MAX as u32 - 1;
/// The lane field of a tick entry.
const TICK_LANE: u32 = u16::MAX as u32;
/// Largest `ms` of one tick.
pub const MAX_TICK: u32 = MAX_CHUNK;
const TAG_SHIFT: u32 = 40;
const TAGS: u64 = (1 << 24) - 1;

/// The lap tag of entry `seq` in a log of `2^log2_cap` entries.
#[inline]
pub fn lap_tag(seq: u64, log2_cap: u32) -> u64 {
    (seq >> log2_cap) % TAGS + 1
}

/// The word for `det` as entry `seq`.
#[inline]
pub fn encode(seq: u64, log2_cap: u32, det: Det) -> u64 {
    let (lane, end, n) = match det {
        Det::Chunk { lane, n } => (lane, 0u64, n),
        Det::End { lane } => (lane, 1, 1),
        Det::Barrier { lane, low: None } => (lane, 1, 2),
        Det::Barrier {
            lane,
            low: Some(low),
        } => (lane, 1, 1 << BARRIER_LOW_BITS | low & LOW_MASK as u32),
        Det::Tick { ms } => (TICK_LANE, 1, ms),
    };
    debug_assert!(
        (lane <= MAX_LANE || matches!(det, Det::Tick { .. })) && (1..=MAX_CHUNK).contains(&n)
    );
    lap_tag(seq, log2_cap) << TAG_SHIFT | (lane as u64) << 24 | end << 23 | n as u64
}

/// The entry `seq` a word holds, if it holds that entry (and not an older
/// lap's, or nothing).
#[inline]
pub fn decode(word: u64, seq: u64, log2_cap: u32) -> Option<Det> {
    if word >> TAG_SHIFT != lap_tag(seq, log2_cap) {
        return None;
    }
    let lane = ((word >> 24) & 0xffff) as u32;
    let n = (word & MAX_CHUNK as u64) as u32;
    Some(if word & 1 << 23 != 0 {
        if lane == TICK_LANE {
            Det::Tick { ms: n }
        } else if n & 1 << BARRIER_LOW_BITS != 0 {
            Det::Barrier {
                lane,
                low: Some(n & LOW_MASK as u32),
            }
        } else if n == 2 {
            Det::Barrier { lane, low: None }
        } else {
            Det::End { lane }
        }
    } else {
        Det::Chunk { lane, n }
    })
}

/// Why an append did not add the caller's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppendError {
    /// Entry `seq` was already written (by a primary that was fenced since,
    /// or by a new primary if the caller is the fenced one): here it is.
    Taken(Det),
    /// Entry `seq − capacity` is still needed: the log is full.
    Full,
}

/// The log's protocol over its words (the mapped file, or a loom model's
/// atomics).
pub struct Words<'a> {
    words: &'a [AtomicU64],
    log2_cap: u32,
}

impl<'a> Words<'a> {
    /// The protocol over `words` (a power-of-two count).
    pub fn new(words: &'a [AtomicU64]) -> Self {
        assert!(
            words.len().is_power_of_two(),
            "log capacity must be a power of two"
        );
        Words {
            log2_cap: words.len().trailing_zeros(),
            words,
        }
    }

    fn word(&self, seq: u64) -> &AtomicU64 {
        &self.words[(seq & (self.words.len() as u64 - 1)) as usize]
    }

    /// Entry `seq`, if written.
    #[inline]
    pub fn get(&self, seq: u64) -> Option<Det> {
        decode(self.word(seq).load(Ordering::Acquire), seq, self.log2_cap)
    }

    /// Appends `det` as entry `seq`, given that entries below `floor` are no
    /// longer needed. On success the caller must look at its epoch after a
    /// SeqCst fence ([`fenced_append`] does both) before acting on it.
    pub fn append(&self, seq: u64, floor: u64, det: Det) -> Result<(), AppendError> {
        if seq >= floor.saturating_add(self.words.len() as u64) {
            return Err(AppendError::Full);
        }
        let w = self.word(seq);
        let new = encode(seq, self.log2_cap, det);
        let mut cur = w.load(Ordering::Acquire);
        loop {
            if let Some(d) = decode(cur, seq, self.log2_cap) {
                return Err(AppendError::Taken(d));
            }
            match w.compare_exchange(cur, new, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// Capacity in entries.
    pub fn capacity(&self) -> u64 {
        self.words.len() as u64
    }
}

/// What a writer may do with entry `seq` after trying to append `det`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Process this entry (the caller's, or one a fenced primary left).
    Go(Det),
    /// The caller's epoch is over: it must stop without processing.
    Fenced,
    /// The log is full.
    Full,
}

/// Appends `det` as entry `seq` on behalf of the primary of `epoch`, where
/// `current` reads the epoch now current (the liveness cell): the whole
/// writer side of the protocol in the module docs.
pub fn fenced_append(
    words: &Words<'_>,
    seq: u64,
    floor: u64,
    det: Det,
    epoch: u64,
    current: impl Fn() -> u64,
) -> Appended {
    let r = words.append(seq, floor, det);
    // Pairs with the fence after a claim of the epoch: either this load sees
    // the claim, or the claimer's later reads of the log see this entry.
    fence(Ordering::SeqCst);
    if current() != epoch {
        return Appended::Fenced;
    }
    match r {
        Ok(()) => Appended::Go(det),
        Err(AppendError::Taken(d)) => Appended::Go(d),
        Err(AppendError::Full) => Appended::Full,
    }
}

pub use mapped::DetLog;

/// The length of a log file of at least `capacity` entries: the 4096-byte
/// header block, then the entries (the capacity rounded up to a power of
/// two).
pub(crate) fn file_len(capacity: u64) -> u64 {
    capacity
        .max(2)
        .checked_next_power_of_two()
        .and_then(|c| c.checked_mul(8))
        .and_then(|b| b.checked_add(4096))
        .unwrap_or(u64::MAX)
}

/// Under loom the log's words cannot be a mapping (loom models only its
/// own atomics): the same API over a vector, so the crate builds; the
/// model checks exercise [`Words`] and [`fenced_append`] directly.
#[cfg(loom)]
mod mapped {
    use super::{Det, Words};
    use crate::standby::bq::BqError;
    use crate::sync::AtomicU64;
    use std::path::{Path, PathBuf};

    /// A determinant log (loom build: in memory).
    pub struct DetLog {
        words: Vec<AtomicU64>,
        path: PathBuf,
        lanes: u32,
    }

    impl DetLog {
        /// A log of at least `capacity` entries.
        pub fn create(path: impl AsRef<Path>, lanes: u32, capacity: u64) -> Result<Self, BqError> {
            let n = capacity.max(2).next_power_of_two() as usize;
            Ok(DetLog {
                words: (0..n).map(|_| AtomicU64::new(0)).collect(),
                path: path.as_ref().to_path_buf(),
                lanes,
            })
        }
        /// The entries.
        pub fn words(&self) -> Words<'_> {
            Words::new(&self.words)
        }
        /// Entry `seq`, if written.
        pub fn get(&self, seq: u64) -> Option<Det> {
            self.words().get(seq)
        }
        /// The file.
        pub fn path(&self) -> &Path {
            &self.path
        }
        /// Lanes.
        pub fn lanes(&self) -> u32 {
            self.lanes
        }
        /// Capacity in entries.
        pub fn capacity(&self) -> u64 {
            self.words.len() as u64
        }
    }
}

#[cfg(not(loom))]
mod mapped {
    use super::{Det, Words};
    use crate::standby::bq::BqError;
    use memmap2::MmapMut;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::AtomicU64;

    /// File magic.
    pub const MAGIC: [u8; 8] = *b"TNDMDL\0\x01";
    const VERSION: u32 = 1;
    const HEADER: usize = 4096;

    /// A determinant log over its mapped file (see the module docs).
    pub struct DetLog {
        map: MmapMut,
        path: PathBuf,
        lanes: u32,
        capacity: usize,
    }

    impl std::fmt::Debug for DetLog {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("DetLog")
                .field("path", &self.path)
                .field("capacity", &self.capacity)
                .finish()
        }
    }

    impl DetLog {
        /// Creates the file (mode 0600; an existing file is an error) for
        /// `lanes` lanes and at least `capacity` entries (rounded up to a
        /// power of two).
        pub fn create(path: impl AsRef<Path>, lanes: u32, capacity: u64) -> Result<Self, BqError> {
            let path = path.as_ref().to_path_buf();
            if lanes == 0 || lanes > super::MAX_LANE + 1 {
                return Err(BqError::Config(format!(
                    "{lanes} lanes in a determinant log"
                )));
            }
            let capacity = capacity.max(2).next_power_of_two() as usize;
            debug_assert_eq!(
                super::file_len(capacity as u64),
                (HEADER + 8 * capacity) as u64
            );
            // The entries are only accessed as atomics (see `words`).
            let mut map =
                crate::standby::bq::create_mapped(&path, super::file_len(capacity as u64))?;
            map[0..8].copy_from_slice(&MAGIC);
            map[8..12].copy_from_slice(&VERSION.to_le_bytes());
            map[12..16].copy_from_slice(&lanes.to_le_bytes());
            map[16..24].copy_from_slice(&(capacity as u64).to_le_bytes());
            Ok(DetLog {
                map,
                path,
                lanes,
                capacity,
            })
        }

        /// Maps an existing log another incarnation created (possibly in
        /// another process), after checking its header against the file:
        /// another format or version, an impossible lane count or
        /// capacity, or a length the header does not imply, is refused.
        pub fn open(path: impl AsRef<Path>) -> Result<Self, BqError> {
            let path = path.as_ref().to_path_buf();
            let (map, h) =
                crate::standby::bq::open_mapped(&path, &MAGIC, VERSION, "determinant log")?;
            let lanes = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
            let capacity = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
            let invalid = |reason: String| BqError::Invalid {
                path: path.clone(),
                reason,
            };
            if lanes == 0 || lanes > super::MAX_LANE + 1 {
                return Err(invalid(format!("{lanes} lanes in a determinant log")));
            }
            if capacity < 2 || !capacity.is_power_of_two() || capacity > (1 << 40) {
                return Err(invalid(format!(
                    "a capacity of {capacity} entries (a power of two is written)"
                )));
            }
            if map.len() as u64 != super::file_len(capacity) {
                return Err(invalid(format!(
                    "{} bytes, the header implies {}",
                    map.len(),
                    super::file_len(capacity)
                )));
            }
            Ok(DetLog {
                map,
                path,
                lanes,
                capacity: capacity as usize,
            })
        }

        /// The entries, as the protocol sees them.
        pub fn words(&self) -> Words<'_> {
            let base = self.map[HEADER..].as_ptr() as *const AtomicU64;
            // SAFETY: the map is page-aligned, so `HEADER` is 8-aligned, and
            // holds `8 * capacity` bytes after the header; it lives as long
            // as `self`; every access to those bytes is atomic (through
            // this slice), from this and any other mapping of the file.
            let words = unsafe { std::slice::from_raw_parts(base, self.capacity) };
            Words::new(words)
        }

        /// Entry `seq`, if written.
        pub fn get(&self, seq: u64) -> Option<Det> {
            self.words().get(seq)
        }

        /// The file.
        pub fn path(&self) -> &Path {
            &self.path
        }

        /// Lanes.
        pub fn lanes(&self) -> u32 {
            self.lanes
        }

        /// Capacity in entries.
        pub fn capacity(&self) -> u64 {
            self.capacity as u64
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn words(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn entries_round_trip_and_an_older_lap_reads_as_empty() {
        for (seq, det) in [
            (0, Det::Chunk { lane: 0, n: 1 }),
            (
                5,
                Det::Chunk {
                    lane: 3,
                    n: MAX_CHUNK,
                },
            ),
            (1 << 30, Det::End { lane: MAX_LANE }),
            (7, Det::Barrier { lane: 2, low: None }),
            (8, Det::Tick { ms: 1 }),
            (10, Det::Tick { ms: MAX_TICK }),
            (
                9,
                Det::Barrier {
                    lane: MAX_LANE,
                    low: None,
                },
            ),
            (
                11,
                Det::Barrier {
                    lane: 0,
                    low: Some(0),
                },
            ),
            (
                12,
                Det::Barrier {
                    lane: 1,
                    low: Some((1 << BARRIER_LOW_BITS) - 1),
                },
            ),
        ] {
            let w = encode(seq, 4, det);
            assert_eq!(decode(w, seq, 4), Some(det));
            assert_eq!(decode(w, seq + 16, 4), None, "the next lap's entry");
            assert_eq!(decode(0, seq, 4), None, "a fresh word");
        }
    }

    #[test]
    fn a_barrier_id_is_recovered_from_its_low_bits_and_a_newer_trigger() {
        let span = 1u64 << BARRIER_LOW_BITS;
        for id in [
            0,
            1,
            5,
            span - 1,
            span,
            span + 3,
            7 * span + 11,
            u64::MAX >> 2,
        ] {
            for later in [0, 1, 2, span / 2, span - 1] {
                let newest = id + later;
                assert_eq!(
                    barrier_id(barrier_low(id), newest),
                    id,
                    "id {id} newest {newest}"
                );
            }
        }
    }

    #[test]
    fn the_first_append_decides_and_later_writers_get_it() {
        let v = words(4);
        let l = Words::new(&v);
        let a = Det::Chunk { lane: 0, n: 3 };
        let b = Det::Chunk { lane: 1, n: 2 };
        assert_eq!(l.get(0), None);
        assert_eq!(l.append(0, 0, a), Ok(()));
        assert_eq!(l.append(0, 0, b), Err(AppendError::Taken(a)));
        assert_eq!(l.get(0), Some(a));
    }

    #[test]
    fn an_entry_still_needed_is_never_overwritten() {
        let v = words(4);
        let l = Words::new(&v);
        for s in 0..4 {
            l.append(s, 0, Det::End { lane: s as u32 }).unwrap();
        }
        assert_eq!(l.append(4, 0, Det::End { lane: 9 }), Err(AppendError::Full));
        assert_eq!(l.get(0), Some(Det::End { lane: 0 }));
        // Entry 0 is no longer needed: entry 4 takes its word.
        assert_eq!(l.append(4, 1, Det::End { lane: 9 }), Ok(()));
        assert_eq!(l.get(4), Some(Det::End { lane: 9 }));
        assert_eq!(l.get(0), None);
    }

    #[test]
    fn a_fenced_writer_never_gets_to_act() {
        let v = words(8);
        let l = Words::new(&v);
        let d = Det::Chunk { lane: 0, n: 1 };
        // The old primary of epoch 1 appends after epoch 2 was claimed: the
        // entry stays (the new primary replays it), the old one stops.
        assert_eq!(fenced_append(&l, 0, 0, d, 1, || 2), Appended::Fenced);
        assert_eq!(l.get(0), Some(d));
        // The new primary adopts it.
        let mine = Det::Chunk { lane: 1, n: 4 };
        assert_eq!(fenced_append(&l, 0, 0, mine, 2, || 2), Appended::Go(d));
        assert_eq!(fenced_append(&l, 1, 0, mine, 2, || 2), Appended::Go(mine));
    }

    #[test]
    fn a_mapped_log_keeps_its_entries_and_never_replaces_a_file() {
        let p = std::env::temp_dir().join(format!("tandem-dl-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let log = DetLog::create(&p, 2, 5).unwrap();
        assert_eq!(log.capacity(), 8);
        let d = Det::Chunk { lane: 1, n: 7 };
        log.words().append(0, 0, d).unwrap();
        assert_eq!(log.get(0), Some(d));
        assert!(
            DetLog::create(&p, 2, 8).is_err(),
            "never over an existing file"
        );
        // Another mapping of the file, opened by path as another process
        // would, reads what the first appended and appends after it.
        let other = DetLog::open(&p).unwrap();
        assert_eq!((other.lanes(), other.capacity()), (2, 8));
        assert_eq!(other.get(0), Some(d));
        let e = Det::End { lane: 0 };
        other.words().append(1, 0, e).unwrap();
        assert_eq!(log.get(1), Some(e));

        // A damaged header is refused, never read as entries.
        let junk = p.with_extension("junk");
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[16] = 3; // a capacity that is not a power of two
        std::fs::write(&junk, &bytes).unwrap();
        let err = DetLog::open(&junk).unwrap_err();
        assert!(err.to_string().contains("capacity of"), "{err}");
        bytes[0] = b'X';
        std::fs::write(&junk, &bytes).unwrap();
        let err = DetLog::open(&junk).unwrap_err();
        assert!(err.to_string().contains("not a determinant log"), "{err}");
        std::fs::remove_file(junk).unwrap();
        std::fs::remove_file(&p).unwrap();
    }
}

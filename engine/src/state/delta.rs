//! Incremental snapshots of a keyed state: what changed since an earlier
//! checkpoint, instead of every key.
//!
//! ## What a delta holds
//!
//! A delta from checkpoint `B`'s freeze to checkpoint `N`'s holds the keys
//! removed since `B` and, in `N`'s insertion order, every key written or
//! inserted since `B` with its state at `N`. Applied to the state at `B`
//! (removals first, then each entry: written in place where the key is
//! there, appended at the end of the order where it is not) it gives the
//! state at `N` with the same iteration order: keys that survive from `B`
//! keep their relative order, and every key placed since comes after
//! them, in the order it was placed (a key removed and inserted again is
//! removed, then appended).
//!
//! ## The journal
//!
//! A write's first touch of a key since the newest freeze (the same
//! comparison that saves pre-images, see the [module docs](super)) appends
//! the key's place to a journal; a removal appends the key. Each freeze
//! marks where the journal stood. The places written between two marks are
//! the entries of the delta between their freezes (sorted, deduplicated,
//! read through the newer freeze's pre-images), the keys removed between
//! them its removals. Compaction renumbers the journal with the table. The
//! journal keeps only what a delta may still need: from the newest
//! completed checkpoint's mark on.
//!
//! ## Payload
//!
//! ```text
//! offset  size  field
//!      0     8  magic "TNDMDLT1"
//!      8     8  the checkpoint the delta applies over
//!     16     8  R = bytes of the removed keys' archive
//!     24     8  E = where the entries' archive starts (a multiple of 16)
//!     32     R  the removed keys, archived as a keyed state (each with the
//!               default state)
//!      E     …  the entries, archived as a keyed state: the format of a
//!               whole snapshot, so the same checked access reads it
//! ```
//!
//! A whole snapshot never starts with the magic as a delta does only
//! because the manifest says which a file is: the magic is a second check,
//! and the restore refuses a chain whose kinds disagree with it.
//!
//! ## When a checkpoint is whole
//!
//! A state archives itself whole when no delta can be taken (the first
//! checkpoint, a savepoint, a state restored from a standby, a base the
//! journal no longer reaches) and when the chain since the last whole
//! archive is long enough ([`Incremental`]): a restore reads the last
//! whole archive and every delta after it, so the chain is bounded in
//! links and in bytes.

use std::collections::VecDeque;

use crate::checkpoint::CheckpointError;

/// The bit that marks a capture's id as a standby's recovery point (its
/// sequence number below it) rather than a checkpoint: the two kinds of
/// delta each have their own bases, in one journal.
pub const POINT: u64 = 1 << 63;

/// Magic of a delta payload.
pub const MAGIC: &[u8; 8] = b"TNDMDLT1";
/// Bytes of a delta payload's header.
pub const HEADER: usize = 32;

/// When a checkpoint may be a delta, and when it must be whole.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Incremental {
    /// At most this many deltas after a whole archive (a restore reads
    /// them all).
    pub max_deltas: u32,
    /// A whole archive again once the deltas since the last one add up to
    /// this multiple of its size.
    pub max_delta_ratio: f64,
}

impl Default for Incremental {
    fn default() -> Self {
        Incremental {
            max_deltas: 100,
            max_delta_ratio: 1.0,
        }
    }
}

/// What a capture of a state is for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CaptureFor {
    /// The checkpoint being taken (0: not a checkpoint — a standby's
    /// recovery point, an archive for its own sake).
    pub checkpoint: u64,
    /// The newest completed checkpoint a delta may apply over; `None`: the
    /// capture is whole.
    pub base: Option<u64>,
    /// The chain's bounds.
    pub policy: Incremental,
}

impl CaptureFor {
    /// A whole archive, outside any chain.
    pub fn whole() -> Self {
        CaptureFor {
            checkpoint: 0,
            base: None,
            policy: Incremental::default(),
        }
    }
}

/// The chain a capture extends: how a restore of it reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Chain {
    /// Deltas after the whole archive.
    pub(crate) deltas: u32,
    /// Payload bytes of the whole archive, and the entries in it.
    pub(crate) whole_bytes: u64,
    pub(crate) whole_entries: u64,
    /// Payload bytes of the deltas since.
    pub(crate) delta_bytes: u64,
}

/// A checkpoint this state was captured (or restored) at, which a later
/// delta may apply over once it completes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Captured {
    pub(crate) checkpoint: u64,
    pub(crate) epoch: u32,
    /// The chain up to and including this capture (its own bytes once its
    /// archive is whole).
    pub(crate) chain: Chain,
    /// Whether this capture is a delta (else whole).
    pub(crate) delta: bool,
}

/// The journal of changes (see the module docs).
pub(crate) struct Journal<K> {
    /// Whether deltas are taken: nothing is journaled until one is asked
    /// for.
    on: bool,
    /// Places first written in each epoch, in order.
    writes: Vec<u32>,
    /// Keys removed, in order.
    removed: Vec<K>,
    /// Per freeze still reachable: its epoch, and the lengths of `writes`
    /// and `removed` at it; oldest first.
    marks: VecDeque<(u32, usize, usize)>,
    /// Checkpoints captured whose freezes a delta may start from, oldest
    /// first.
    pub(crate) captured: VecDeque<Captured>,
}

impl<K> Default for Journal<K> {
    fn default() -> Self {
        Journal {
            on: false,
            writes: Vec::new(),
            removed: Vec::new(),
            marks: VecDeque::new(),
            captured: VecDeque::new(),
        }
    }
}

/// Marks kept at most: freezes of failed checkpoints and of standby
/// points are marked too; a base older than this many freezes is out of
/// reach (the next checkpoint is whole).
const MAX_MARKS: usize = 256;

impl<K> Journal<K> {
    /// Starts journaling (from the next freeze on).
    pub(crate) fn enable(&mut self) {
        self.on = true;
    }

    #[inline]
    pub(crate) fn written(&mut self, seq: u32) {
        if self.on {
            self.writes.push(seq);
        }
    }

    pub(crate) fn removed(&mut self, key: &K)
    where
        K: Clone,
    {
        if self.on {
            self.removed.push(key.clone());
        }
    }

    /// A freeze with `epoch` was taken.
    pub(crate) fn mark(&mut self, epoch: u32) {
        if !self.on {
            return;
        }
        self.marks
            .push_back((epoch, self.writes.len(), self.removed.len()));
        if self.marks.len() > MAX_MARKS {
            let oldest = self.marks[1].0;
            self.trim(oldest);
        }
    }

    /// Captures of the kind of `id` (checkpoints, or recovery points:
    /// [`POINT`]) older than `keep` can no longer be a base: they go, and
    /// the journal keeps what the oldest capture left of either kind needs.
    pub(crate) fn retire(&mut self, id: u64, keep: u64) {
        let kind = id & POINT;
        self.captured
            .retain(|c| c.checkpoint & POINT != kind || c.checkpoint >= keep);
        if let Some(oldest) = self.captured.iter().map(|c| c.epoch).min() {
            self.trim(oldest);
        }
    }

    /// Drops everything before the mark of `epoch` (and the captures
    /// whose freezes are older).
    pub(crate) fn trim(&mut self, epoch: u32) {
        while self.marks.front().is_some_and(|m| m.0 < epoch) {
            self.marks.pop_front();
        }
        self.captured.retain(|c| c.epoch >= epoch);
        let Some(&(_, w, r)) = self.marks.front() else {
            self.writes.clear();
            self.removed.clear();
            return;
        };
        if w > 0 || r > 0 {
            self.writes.drain(..w);
            self.removed.drain(..r);
            for m in &mut self.marks {
                m.1 -= w;
                m.2 -= r;
            }
        }
    }

    /// Numbering starts again (compaction): `renumber[old]` is a place's
    /// new number (`u32::MAX`: dead, its removal journaled already).
    pub(crate) fn renumber(&mut self, renumber: &[u32]) {
        if self.writes.is_empty() {
            return;
        }
        let mut kept = Vec::with_capacity(self.writes.len());
        let mut marks = self.marks.iter_mut().peekable();
        for (i, &seq) in self.writes.iter().enumerate() {
            while let Some(m) = marks.next_if(|m| m.1 == i) {
                m.1 = kept.len();
            }
            if let Some(&n) = renumber.get(seq as usize).filter(|&&n| n != u32::MAX) {
                kept.push(n);
            }
        }
        for m in marks {
            m.1 = kept.len();
        }
        self.writes = kept;
    }

    /// Nothing journaled is of use any more (epochs start again).
    pub(crate) fn forget(&mut self) {
        self.writes.clear();
        self.removed.clear();
        self.marks.clear();
        self.captured.clear();
    }

    /// The places written and the keys removed between the freezes
    /// `from` and `to` (both marked), places sorted and deduplicated;
    /// `None` if either mark is out of reach.
    pub(crate) fn between(&self, from: u32, to: u32) -> Option<(Vec<u32>, &[K])> {
        let at = |e: u32| self.marks.iter().find(|m| m.0 == e);
        let (&(_, w0, r0), &(_, w1, r1)) = (at(from)?, at(to)?);
        let places = sorted_set(self.writes.get(w0..w1)?);
        Some((places, self.removed.get(r0..r1)?))
    }

    /// The capture of `checkpoint`, if a delta may still start from it.
    pub(crate) fn base(&self, checkpoint: u64) -> Option<Captured> {
        let c = self
            .captured
            .iter()
            .rev()
            .find(|c| c.checkpoint == checkpoint)?;
        self.marks.iter().any(|m| m.0 == c.epoch).then_some(*c)
    }
}

/// `places` sorted, each once. A dense set (millions of places, most of
/// the table's: a state written all over between two checkpoints) is
/// gathered in a bitmap, in two linear passes, where a sort took seconds
/// at tens of millions; a sparse one is sorted.
pub(crate) fn sorted_set(places: &[u32]) -> Vec<u32> {
    let Some(&max) = places.iter().max() else {
        return Vec::new();
    };
    let words = max as usize / 64 + 1;
    if places.len() < words / 8 {
        let mut v = places.to_vec();
        v.sort_unstable();
        v.dedup();
        return v;
    }
    let mut bits = vec![0u64; words];
    for &p in places {
        bits[p as usize / 64] |= 1 << (p % 64);
    }
    let mut out = Vec::with_capacity(places.len().min(max as usize + 1));
    for (w, &b) in bits.iter().enumerate() {
        let mut b = b;
        while b != 0 {
            out.push((w * 64) as u32 + b.trailing_zeros());
            b &= b - 1;
        }
    }
    out
}

/// A parsed delta payload: its base, and its two archives.
pub struct DeltaPayload<'a> {
    /// The checkpoint it applies over.
    pub base: u64,
    /// The removed keys' archive (a keyed state).
    pub removed: &'a [u8],
    /// The entries' archive (a keyed state).
    pub entries: &'a [u8],
}

/// Whether `payload` is a delta (by its magic).
pub fn is_delta(payload: &[u8]) -> bool {
    payload.starts_with(MAGIC)
}

/// Splits a delta payload, checking its header.
pub fn parse(payload: &[u8]) -> Result<DeltaPayload<'_>, CheckpointError> {
    let bad = |why: &str| CheckpointError::Delta(why.to_string());
    if !is_delta(payload) || payload.len() < HEADER {
        return Err(bad("not a delta (no TNDMDLT1 header)"));
    }
    let word = |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
    let (base, removed, entries) = (word(8), word(16), word(24));
    let removed_end = (HEADER as u64).checked_add(removed);
    match removed_end {
        Some(end) if end <= entries && entries <= payload.len() as u64 && entries % 16 == 0 => {
            Ok(DeltaPayload {
                base,
                removed: &payload[HEADER..end as usize],
                entries: &payload[entries as usize..],
            })
        }
        _ => Err(bad("its header's lengths do not fit the payload")),
    }
}

/// The header and removed keys a delta payload starts with, padded so
/// that the entries' archive starts on a multiple of 16.
pub(crate) fn prefix(base: u64, removed: &[u8]) -> Vec<u8> {
    let entries = (HEADER + removed.len()).next_multiple_of(16);
    let mut out = Vec::with_capacity(entries);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&base.to_le_bytes());
    out.extend_from_slice(&(removed.len() as u64).to_le_bytes());
    out.extend_from_slice(&(entries as u64).to_le_bytes());
    out.extend_from_slice(removed);
    out.resize(entries, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Dense sets (the bitmap) and sparse ones (the sort) alike.
        #[test]
        fn sorted_set_is_the_sorted_places_each_once(
            places in proptest::collection::vec(0u32..5000, 0..3000),
            spread in 1u32..2000,
        ) {
            let places: Vec<u32> = places.iter().map(|p| p * spread).collect();
            let mut want = places.clone();
            want.sort_unstable();
            want.dedup();
            proptest::prop_assert_eq!(sorted_set(&places), want);
        }
    }

    #[test]
    fn the_journal_gives_what_changed_between_two_marks() {
        let mut j: Journal<u64> = Journal::default();
        j.written(9);
        j.mark(1);
        assert!(j.between(1, 1).is_none(), "not on: nothing marked");
        j.enable();
        j.mark(1);
        j.written(5);
        j.written(3);
        j.removed(&77);
        j.mark(2);
        j.written(5);
        j.written(8);
        j.mark(3);
        let (p, r) = j.between(1, 3).unwrap();
        assert_eq!((p, r.to_vec()), (vec![3, 5, 8], vec![77]));
        let (p, r) = j.between(2, 3).unwrap();
        assert_eq!((p, r.len()), (vec![5, 8], 0));
        // Compaction: place 3 dead, 5 → 1, 8 → 2.
        let mut renumber = vec![u32::MAX; 9];
        renumber[5] = 1;
        renumber[8] = 2;
        j.renumber(&renumber);
        assert_eq!(j.between(1, 3).unwrap().0, vec![1, 2]);
        assert_eq!(j.between(2, 3).unwrap().0, vec![1, 2]);
        j.trim(2);
        assert!(j.between(1, 3).is_none(), "trimmed");
        assert_eq!(j.between(2, 3).unwrap().0, vec![1, 2]);
    }

    #[test]
    fn a_delta_payload_parses_back_and_a_bad_one_is_refused() {
        let mut p = prefix(7, b"removed!!");
        assert_eq!(p.len() % 16, 0);
        p.extend_from_slice(b"entries");
        let d = parse(&p).unwrap();
        assert_eq!(
            (d.base, d.removed, d.entries),
            (7, &b"removed!!"[..], &b"entries"[..])
        );
        assert!(parse(b"TNDMDLT1short").is_err());
        let mut bad = p.clone();
        bad[16] = 0xff;
        assert!(parse(&bad).is_err());
        assert!(parse(b"not a delta at all, but long enough to have a header").is_err());
    }
}

#[cfg(test)]
pub(crate) mod chain_tests {
    use super::*;
    use crate::state::{KeyedState, StateSnapshot};
    use proptest::prelude::*;

    type S = KeyedState<u64, Vec<u32>>;

    /// Every key and its state, in order.
    pub(crate) fn listed(s: &mut S) -> Vec<(u64, Vec<u32>)> {
        let mut v = Vec::new();
        s.for_each_mut(|k, st| v.push((*k, st.clone())));
        v
    }

    /// One step of a job: `(op, key)`: 0–5 write, 6–7 remove, 8 compact.
    pub(crate) fn apply_op(s: &mut S, op: u8, key: u64) {
        match op {
            0..=5 => s.get_or_default(&key).push(op as u32),
            6 | 7 => {
                let (seq, _) = s.get_or_default_numbered(&key);
                s.remove_at(seq);
            }
            _ => {
                s.compact();
            }
        }
    }

    fn policy() -> Incremental {
        Incremental {
            max_deltas: 4,
            max_delta_ratio: 3.0,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever writes, removals, compactions and failed checkpoints
        /// happen, the chain of every completed checkpoint restores the
        /// state as it was at it, in the same order; and a state restored
        /// from a chain takes deltas over that checkpoint that restore too.
        #[test]
        fn a_chain_of_deltas_restores_every_completed_checkpoint_exactly(
            rounds in proptest::collection::vec(
                (proptest::collection::vec((0u8..9, 0u64..40), 0..60), any::<bool>()),
                1..14,
            ),
            restore_at in 0usize..14,
        ) {
            let mut s = S::default();
            // Completed checkpoints' payloads, by id: (delta base, bytes).
            let mut done: Vec<(u64, Option<u64>, Vec<u8>)> = Vec::new();
            let mut completed: Option<u64> = None;
            for (i, (ops, fails)) in rounds.iter().enumerate() {
                for &(op, key) in ops {
                    apply_op(&mut s, op, key);
                }
                let id = i as u64 + 1;
                let how = CaptureFor { checkpoint: id, base: completed, policy: policy() };
                let bytes = s.capture_for(how).unwrap().archive().unwrap();
                if let Some(b) = bytes.delta_over() {
                    prop_assert_eq!(Some(b), completed, "a delta over the newest completed one");
                }
                let expect = listed(&mut s);
                if *fails {
                    continue;
                }
                done.push((id, bytes.delta_over(), bytes.payload().to_vec()));
                completed = Some(id);
                // The chain: back from this link to the whole archive.
                let mut chain = vec![done.len() - 1];
                while let Some(base) = done[*chain.last().unwrap()].1 {
                    let at = done.iter().position(|d| d.0 == base).expect("the base completed");
                    chain.push(at);
                }
                chain.reverse();
                prop_assert!(chain.len() <= policy().max_deltas as usize + 1);
                let links: Vec<&[u8]> = chain.iter().map(|&i| done[i].2.as_slice()).collect();
                let mut back = S::restore_chain(&links, Some(id)).unwrap();
                prop_assert_eq!(listed(&mut back), expect);
                if i == restore_at {
                    // Go on from the restored state, as a restarted job.
                    s = back;
                }
            }
        }
    }

    #[test]
    fn a_restore_refuses_a_chain_that_starts_with_a_delta_or_has_a_whole_one_inside() {
        let mut s = S::default();
        s.get_or_default(&1).push(1);
        let how = |id, base| CaptureFor {
            checkpoint: id,
            base,
            policy: policy(),
        };
        let whole = s.capture_for(how(1, None)).unwrap().archive().unwrap();
        s.get_or_default(&2).push(2);
        let d = s.capture_for(how(2, Some(1))).unwrap().archive().unwrap();
        assert_eq!(d.delta_over(), Some(1));
        assert!(S::restore_chain(&[d.payload()], None).is_err());
        assert!(S::restore_chain(&[whole.payload(), whole.payload()], None).is_err());
        let back = S::restore_chain(&[whole.payload(), d.payload()], None).unwrap();
        assert_eq!(back.len(), 2);
        // A delta is small: one key, not both.
        let mut big = S::default();
        for k in 0..10_000 {
            big.get_or_default(&k).push(k as u32);
        }
        let w = big.capture_for(how(1, None)).unwrap().archive().unwrap();
        big.get_or_default(&5).push(0);
        let d = big.capture_for(how(2, Some(1))).unwrap().archive().unwrap();
        assert!(
            d.len() * 100 < w.len(),
            "delta {} bytes against {}",
            d.len(),
            w.len()
        );
    }
}

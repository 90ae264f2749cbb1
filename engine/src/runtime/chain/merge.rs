//! What event-time operators share: the records waiting for the watermark
//! in their release order, and timers by time and key number (see
//! `window.rs` for the order and why it makes an operator's output a
//! function of its input streams alone).

use crate::time::window::Waiting;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

/// A waiting record's place in the release order: `(release, tuple ID,
/// lane · arrival)`, and where the record is held. Small, so the heap
/// moves little.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Due {
    release: u64,
    id: u64,
    /// The lane in the top 24 bits, the arrival number in the low 40.
    tie: u64,
    at: u32,
}

impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Due {
    /// Reversed: the heap's top is the first to release.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.release, o.id, o.tie).cmp(&(self.release, self.id, self.tie))
    }
}

const ARRIVAL_BITS: u32 = 40;
const ARRIVAL_MASK: u64 = (1 << ARRIVAL_BITS) - 1;

/// The records waiting for the watermark: their release order in a heap
/// of [`Due`]s, the records themselves in a slab.
pub(crate) struct Pending<T> {
    heap: BinaryHeap<Due>,
    slab: Vec<Option<(u64, u64, T)>>,
    free: Vec<u32>,
}

impl<T: Clone> Pending<T> {
    pub(crate) fn new() -> Self {
        Pending {
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, w: Waiting<T>) {
        let held = Some((w.event_time, w.ingest, w.value));
        let at = match self.free.pop() {
            Some(at) => {
                self.slab[at as usize] = held;
                at
            }
            None => {
                self.slab.push(held);
                (self.slab.len() - 1) as u32
            }
        };
        self.heap.push(Due {
            release: w.release,
            id: w.id,
            tie: (u64::from(w.lane) << ARRIVAL_BITS) | (w.arrival & ARRIVAL_MASK),
            at,
        });
    }

    #[inline]
    pub(crate) fn first_release(&self) -> Option<u64> {
        self.heap.peek().map(|d| d.release)
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Waiting<T>> {
        let d = self.heap.pop()?;
        let (event_time, ingest, value) = self.slab[d.at as usize]
            .take()
            .expect("a due record is held");
        self.free.push(d.at);
        Some(Waiting {
            release: d.release,
            id: d.id,
            lane: (d.tie >> ARRIVAL_BITS) as u32,
            arrival: d.tie & ARRIVAL_MASK,
            event_time,
            ingest,
            value,
        })
    }

    /// Every waiting record, in release order (for a snapshot).
    pub(crate) fn sorted(&self) -> Vec<Waiting<T>> {
        let mut due: Vec<Due> = self.heap.iter().copied().collect();
        due.sort_by(|a, b| b.cmp(a));
        due.into_iter()
            .map(|d| {
                let (event_time, ingest, value) = self.slab[d.at as usize]
                    .clone()
                    .expect("a due record is held");
                Waiting {
                    release: d.release,
                    id: d.id,
                    lane: (d.tie >> ARRIVAL_BITS) as u32,
                    arrival: d.tie & ARRIVAL_MASK,
                    event_time,
                    ingest,
                    value,
                }
            })
            .collect()
    }
}

/// Timers: per time, the numbers of the keys due then. They fire in the
/// order `(time, key number)` — sorted when they fire, so adding one is a
/// push (all the keys' tumbling windows end at the same times).
#[derive(Default)]
pub(crate) struct Timers(BTreeMap<u64, Vec<u32>>);

impl Timers {
    #[inline]
    pub(crate) fn add(&mut self, at: u64, seq: u32) {
        self.0.entry(at).or_default().push(seq);
    }

    /// The earliest time at or below `t` and its keys, in order, once each.
    pub(crate) fn take_first(&mut self, t: u64) -> Option<(u64, Vec<u32>)> {
        let e = self.0.first_entry()?;
        if *e.key() > t {
            return None;
        }
        let (at, mut seqs) = e.remove_entry();
        seqs.sort_unstable();
        seqs.dedup();
        Some((at, seqs))
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// Renumbers the keys after a compaction of their state (`renumber`:
    /// the new number of each old one, `u32::MAX` if it is gone), in one
    /// pass, allocating nothing.
    pub(crate) fn remap(&mut self, renumber: &[u32]) {
        self.0.retain(|_, seqs| {
            seqs.retain_mut(|s| match renumber.get(*s as usize) {
                Some(&n) if n != u32::MAX => {
                    *s = n;
                    true
                }
                _ => false,
            });
            !seqs.is_empty()
        });
    }

    /// The earliest time indexed.
    pub(crate) fn first(&self) -> Option<u64> {
        self.0.first_key_value().map(|(t, _)| *t)
    }
}

//! Pure decisions of a takeover (paper algorithm 2, with the corrections of
//! the design brief): which tuple the new primary resumes from, and whether
//! a batch from a producer's epoch may pass.

/// Where the new primary starts, given the largest tuple ID the downstream
/// operator received from the old primary (`None`: nothing yet) and the
/// oldest tuple ID the buffer queue still holds (`None`: it is empty).
///
/// It resumes right after what downstream has seen; what the buffer queue
/// no longer holds was covered by the snapshot the standby restores, so the
/// resume point is never before the queue's oldest entry.
pub fn resume_from(last_seen_downstream: Option<u64>, oldest_held: Option<u64>) -> u64 {
    let after_seen = last_seen_downstream.map_or(0, |id| id + 1);
    match oldest_held {
        Some(oldest) => after_seen.max(oldest),
        None => after_seen,
    }
}

/// Whether a batch stamped with `batch_epoch` may be accepted when the
/// operator's current epoch is `current`: batches of an ended epoch (a
/// fenced primary that woke up late) are dropped.
pub fn accept_batch(batch_epoch: u64, current: u64) -> bool {
    batch_epoch == current
}

/// Whether the primary of `epoch` is alive: its epoch is still the current
/// one, and its last heartbeat (engine nanoseconds) is within `timeout_ns`
/// of `now`.
pub fn epoch_live(epoch: u64, current: u64, last_beat: u64, now: u64, timeout_ns: u64) -> bool {
    epoch == current && now.saturating_sub(last_beat) <= timeout_ns
}

/// Where one consumer stands in the output of an operator with a standby,
/// per input lane of that operator (buffer-queue positions): the outputs
/// of every input below `next[l]` reached it, and so did the first
/// `skip[l]` outputs of the inputs from `next[l]` on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// Per lane: the first input not all of whose outputs were received.
    pub next: Vec<u64>,
    /// Per lane: outputs of inputs at and after `next` already received.
    pub skip: Vec<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Open {
    lane: usize,
    first: u64,
    last: u64,
    /// Every output of it was received before (a replay).
    drop_all: bool,
    /// Data messages of it so far (dropped or passed).
    data: u64,
}

/// A consumer's view of one producer with a standby: follows the producer's
/// `Chunk` marks, drops what it already received when a new primary
/// replays (the paper's "emit only outputs C has not seen"), and yields its
/// [`Cut`] when a takeover happens.
///
/// Chunks of one lane are contiguous. A new primary replays in chunks of one
/// input up to the largest `next` of all its consumers, so a chunk never
/// straddles a consumer's cut; outputs of one input are assumed to be the
/// same, in the same order, when it is processed again from the same state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracker {
    next: Vec<u64>,
    skip: Vec<u64>,
    open: Option<Open>,
}

impl Tracker {
    /// A consumer that has received nothing, of a producer with `lanes`
    /// input lanes.
    pub fn new(lanes: usize) -> Self {
        Tracker {
            next: vec![0; lanes],
            skip: vec![0; lanes],
            open: None,
        }
    }

    /// A mark: the data that follows comes from inputs `first..=last` of
    /// `lane`. Returns the lane and its new `next` when the previous chunk
    /// closed (its outputs are all received).
    pub fn on_chunk(&mut self, lane: usize, first: u64, last: u64) -> Option<(usize, u64)> {
        let closed = self.close();
        let lane = lane.min(self.next.len().saturating_sub(1));
        let drop_all = last < self.next[lane];
        debug_assert!(
            drop_all || first >= self.next[lane],
            "a chunk straddles the cut: {first}..={last}, next {}",
            self.next[lane]
        );
        self.open = Some(Open {
            lane,
            first,
            last,
            drop_all,
            data: 0,
        });
        closed
    }

    fn close(&mut self) -> Option<(usize, u64)> {
        let o = self.open.take()?;
        if o.drop_all {
            return None;
        }
        let n = &mut self.next[o.lane];
        *n = (*n).max(o.last + 1);
        Some((o.lane, *n))
    }

    /// A data message: whether to pass it on (`false`: received before).
    #[inline]
    pub fn on_data(&mut self) -> bool {
        let Some(o) = &mut self.open else {
            return true;
        };
        o.data += 1;
        if o.drop_all {
            return false;
        }
        let s = &mut self.skip[o.lane];
        if *s > 0 {
            *s -= 1;
            false
        } else {
            true
        }
    }

    /// The producer's input ended: closes the open chunk.
    pub fn on_end(&mut self) -> Option<(usize, u64)> {
        self.close()
    }

    /// The cut at a takeover; the tracker continues from it (the open chunk
    /// may be incomplete: it is replayed).
    pub fn take_cut(&mut self) -> Cut {
        if let Some(o) = self.open.take() {
            if !o.drop_all {
                self.next[o.lane] = o.first;
                self.skip[o.lane] += o.data;
            }
        }
        Cut {
            next: self.next.clone(),
            skip: self.skip.clone(),
        }
    }

    /// Per lane: inputs below this have all their outputs here.
    pub fn acked(&self, lane: usize) -> u64 {
        self.next[lane]
    }
}

/// A new primary's replay of one lane: start at `start`; up to `upto`
/// (exclusive) in chunks of one input, so that every consumer's cut falls
/// on a chunk boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replay {
    /// First input to process again.
    pub start: u64,
    /// Inputs below this go one per chunk.
    pub upto: u64,
}

/// Plans the replay of each lane from the consumers' cuts (consumers that
/// have ended are left out) and, for a warm standby of a stateful
/// operator, the positions its restored snapshot covers (`None`: no state
/// to restore, or a hot standby's own position).
pub fn plan_replay(cuts: &[&Cut], lanes: usize, from: Option<&[u64]>) -> Vec<Replay> {
    (0..lanes)
        .map(|l| {
            let lo = cuts.iter().map(|c| c.next[l]).min();
            let hi = cuts.iter().map(|c| c.next[l]).max().unwrap_or(0);
            let start = match (from, lo) {
                (Some(f), _) => f[l],
                (None, Some(lo)) => lo,
                (None, None) => hi,
            };
            Replay {
                start: start.min(lo.unwrap_or(start)),
                upto: hi,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracker_passes_everything_without_a_takeover_and_acks_closed_chunks() {
        let mut t = Tracker::new(2);
        assert_eq!(t.on_chunk(0, 0, 3), None);
        assert!(t.on_data() && t.on_data());
        assert_eq!(t.on_chunk(1, 0, 0), Some((0, 4)));
        assert!(t.on_data());
        assert_eq!(t.on_end(), Some((1, 1)));
        assert_eq!((t.acked(0), t.acked(1)), (4, 1));
    }

    #[test]
    fn cut_of_an_open_chunk_replays_it_and_drops_what_arrived() {
        let mut t = Tracker::new(1);
        t.on_chunk(0, 0, 9);
        t.on_data();
        t.on_chunk(0, 10, 19); // closes 0..=9
        t.on_data();
        t.on_data();
        let cut = t.take_cut();
        assert_eq!(
            cut,
            Cut {
                next: vec![10],
                skip: vec![2]
            }
        );
        // The new primary replays 10, 11, … one per chunk: two outputs of
        // input 10 (say) were received, a third is new.
        t.on_chunk(0, 10, 10);
        assert!(!t.on_data());
        assert!(!t.on_data());
        assert!(t.on_data());
        t.on_chunk(0, 11, 11);
        assert!(t.on_data());
        assert_eq!(t.acked(0), 11);
    }

    #[test]
    fn chunks_below_the_cut_are_dropped_whole() {
        let mut t = Tracker::new(2);
        t.on_chunk(1, 0, 4);
        t.on_chunk(0, 0, 0);
        let cut = t.take_cut();
        assert_eq!(cut.next, vec![0, 5]);
        // Replay from a slower consumer's cut: lane 1 inputs 2..=4 again.
        for p in 2..5 {
            assert_eq!(t.on_chunk(1, p, p), None);
            assert!(!t.on_data());
        }
        t.on_chunk(1, 5, 8);
        assert!(t.on_data());
    }

    #[test]
    fn a_skip_spanning_several_inputs_survives_a_second_takeover() {
        let mut t = Tracker::new(1);
        t.on_chunk(0, 0, 5);
        for _ in 0..3 {
            t.on_data();
        }
        assert_eq!(t.take_cut().skip, vec![3]);
        // Input 0 had one output, input 1 two: all dropped on replay.
        t.on_chunk(0, 0, 0);
        assert!(!t.on_data());
        t.on_chunk(0, 1, 1);
        assert!(!t.on_data());
        // The second primary fails here: input 1's second output is still
        // owed to the skip.
        let cut = t.take_cut();
        assert_eq!(
            cut,
            Cut {
                next: vec![1],
                skip: vec![2]
            }
        );
        t.on_chunk(0, 1, 1);
        assert!(!t.on_data());
        assert!(!t.on_data());
        t.on_chunk(0, 2, 2);
        assert!(t.on_data());
    }

    #[test]
    fn data_before_any_mark_passes() {
        let mut t = Tracker::new(1);
        assert!(t.on_data());
        assert_eq!(t.on_end(), None);
    }

    #[test]
    fn replay_starts_at_the_slowest_cut_and_goes_one_by_one_to_the_fastest() {
        let a = Cut {
            next: vec![10, 3],
            skip: vec![0, 0],
        };
        let b = Cut {
            next: vec![12, 3],
            skip: vec![1, 0],
        };
        let r = plan_replay(&[&a, &b], 2, None);
        assert_eq!(
            r,
            vec![
                Replay {
                    start: 10,
                    upto: 12
                },
                Replay { start: 3, upto: 3 }
            ]
        );
        // A restored snapshot (or a hot standby) starts earlier.
        let r = plan_replay(&[&a, &b], 2, Some(&[7, 3]));
        assert_eq!(r[0], Replay { start: 7, upto: 12 });
        // Never later than the slowest cut.
        let r = plan_replay(&[&a], 2, Some(&[11, 9]));
        assert_eq!(
            r,
            vec![
                Replay {
                    start: 10,
                    upto: 10
                },
                Replay { start: 3, upto: 3 }
            ]
        );
        // Every consumer ended: nothing owed.
        let r = plan_replay(&[], 1, None);
        assert_eq!(r, vec![Replay { start: 0, upto: 0 }]);
    }

    #[test]
    fn resume_right_after_what_downstream_saw() {
        assert_eq!(resume_from(Some(41), Some(10)), 42);
        assert_eq!(
            resume_from(None, Some(0)),
            0,
            "nothing seen: from the start"
        );
        assert_eq!(resume_from(None, None), 0);
        assert_eq!(resume_from(Some(41), None), 42, "empty queue: live from 42");
    }

    #[test]
    fn never_resume_before_the_oldest_held_entry() {
        // Downstream saw 5, but 6..=9 were evicted: the snapshot covers them.
        assert_eq!(resume_from(Some(5), Some(10)), 10);
    }

    #[test]
    fn batches_of_an_ended_epoch_are_dropped() {
        assert!(accept_batch(3, 3));
        assert!(!accept_batch(2, 3), "fenced: the old primary woke up");
        assert!(!accept_batch(4, 3), "from an epoch not yet begun");
    }

    #[test]
    fn an_epoch_is_live_while_current_and_beating() {
        assert!(epoch_live(2, 2, 1_000, 1_500, 1_000));
        assert!(epoch_live(2, 2, 1_000, 2_000, 1_000), "at the timeout");
        assert!(!epoch_live(2, 2, 1_000, 2_001, 1_000), "past the timeout");
        assert!(!epoch_live(1, 2, 1_000, 1_000, 1_000), "epoch ended");
        assert!(
            epoch_live(2, 2, 5_000, 1_000, 1_000),
            "beat after now (clock skew)"
        );
    }
}

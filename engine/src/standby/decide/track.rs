//! A consumer's view of the chunks of one producer with a standby: which
//! outputs it already has, what to drop when a new primary replays, and
//! whether a replay agrees with what it received before.

use std::collections::VecDeque;
use std::fmt;

/// A chunk's trailing mark, as a consumer receives it: the outputs since
/// the previous mark (or the stream's start) are the outputs of chunk
/// `seq` — inputs `first .. first + n` of input lane `lane` — for this
/// consumer, `count` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closing {
    /// The chunk's sequence number (its determinant-log entry).
    pub seq: u64,
    /// The producer's input lane.
    pub lane: usize,
    /// First input position.
    pub first: u64,
    /// Inputs.
    pub n: u64,
    /// Outputs the producer sent this consumer for it.
    pub count: u64,
}

/// A chunk a consumer has now received completely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed {
    /// The producer's input lane of the chunk.
    pub lane: usize,
    /// Lane `lane`: inputs below this have all their outputs here.
    pub acked: u64,
    /// Chunks below this have all their outputs here.
    pub next_seq: u64,
}

/// The stream a consumer reads disagrees with what it received before: a
/// replay lost or changed outputs (an operator that is not deterministic,
/// or an engine bug). Never ignored: the job fails with it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Diverged {
    /// A new primary's stream starts after chunks this consumer never
    /// received completely: their outputs would be lost.
    Gap {
        /// The first chunk not received completely.
        next_seq: u64,
        /// Where the new stream starts.
        resumed: u64,
    },
    /// A stream starts before the oldest chunk this consumer still
    /// remembers, so its replay cannot be checked.
    Unverifiable {
        /// The oldest chunk remembered.
        base: u64,
        /// Where the new stream starts.
        resumed: u64,
    },
    /// A replayed chunk had another number of outputs than when this
    /// consumer received it first.
    Count {
        /// The chunk.
        seq: u64,
        /// Outputs received the first time (for a chunk cut short: at
        /// least this many).
        before: u64,
        /// Outputs of the replay.
        now: u64,
    },
    /// The messages broke the protocol (data before a stream's start,
    /// marks out of order, a mark whose count disagrees with the data).
    Protocol(String),
}

impl fmt::Display for Diverged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Diverged::Gap { next_seq, resumed } => write!(
                f,
                "the new primary resumed at chunk {resumed}, but chunk {next_seq} was not received completely: outputs would be lost"
            ),
            Diverged::Unverifiable { base, resumed } => write!(
                f,
                "the new primary resumed at chunk {resumed}, before the oldest chunk remembered ({base})"
            ),
            Diverged::Count { seq, before, now } => write!(
                f,
                "chunk {seq} replayed with {now} outputs where {before} were received before (is the operator deterministic?)"
            ),
            Diverged::Protocol(why) => write!(f, "standby protocol: {why}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stream {
    /// The chunk whose outputs arrive now.
    seq: u64,
    /// Data messages of it so far (dropped or passed).
    data: u64,
}

/// A consumer's view of one producer with a standby.
///
/// The producer's chunks are numbered by its determinant log and replayed
/// with the same numbers, inputs and outputs after a takeover. Each
/// primary's stream to this consumer starts with a *resume* mark naming
/// its first chunk; each chunk's outputs are followed by a *closing* mark
/// with their count. The tracker keeps `next_seq` (chunks below it were
/// received completely), `skip` (outputs of chunk `next_seq` received
/// before a takeover) and the output counts of the chunks a replay may
/// still repeat, so that it drops exactly what it has — and checks that a
/// replay repeats it exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracker {
    next_seq: u64,
    skip: u64,
    acked: Vec<u64>,
    /// Output counts of chunks `base .. next_seq`.
    history: VecDeque<u64>,
    base: u64,
    cur: Option<Stream>,
}

impl Tracker {
    /// A consumer that has received nothing, of a producer with `lanes`
    /// input lanes.
    pub fn new(lanes: usize) -> Self {
        Tracker {
            next_seq: 0,
            skip: 0,
            acked: vec![0; lanes],
            history: VecDeque::new(),
            base: 0,
            cur: None,
        }
    }

    /// A primary's stream starts at chunk `seq`.
    pub fn on_resume(&mut self, seq: u64) -> Result<(), Diverged> {
        if self.cur.is_some() {
            return Err(Diverged::Protocol(format!(
                "a stream resumed at chunk {seq} inside another stream"
            )));
        }
        if seq > self.next_seq {
            return Err(Diverged::Gap {
                next_seq: self.next_seq,
                resumed: seq,
            });
        }
        if seq < self.base {
            return Err(Diverged::Unverifiable {
                base: self.base,
                resumed: seq,
            });
        }
        self.cur = Some(Stream { seq, data: 0 });
        Ok(())
    }

    /// A data message: whether to pass it on (`false`: received before).
    #[inline]
    pub fn on_data(&mut self) -> Result<bool, Diverged> {
        let Some(c) = &mut self.cur else {
            return Err(Diverged::Protocol("data before the stream's start".into()));
        };
        c.data += 1;
        Ok(c.seq == self.next_seq && c.data > self.skip)
    }

    /// A closing mark. Returns the chunk when it is newly complete here.
    pub fn on_closing(&mut self, m: Closing) -> Result<Option<Closed>, Diverged> {
        let Some(c) = &mut self.cur else {
            return Err(Diverged::Protocol(format!(
                "chunk {} closed before the stream's start",
                m.seq
            )));
        };
        if c.seq != m.seq {
            return Err(Diverged::Protocol(format!(
                "chunk {} closed where chunk {} was expected",
                m.seq, c.seq
            )));
        }
        if m.count != c.data {
            return Err(Diverged::Protocol(format!(
                "chunk {}: {} outputs announced, {} received",
                m.seq, m.count, c.data
            )));
        }
        c.seq += 1;
        c.data = 0;
        if m.seq < self.next_seq {
            // A replay of a chunk received before: it must repeat it.
            let before = self.history[(m.seq - self.base) as usize];
            if before != m.count {
                return Err(Diverged::Count {
                    seq: m.seq,
                    before,
                    now: m.count,
                });
            }
            return Ok(None);
        }
        if m.count < self.skip {
            return Err(Diverged::Count {
                seq: m.seq,
                before: self.skip,
                now: m.count,
            });
        }
        if m.lane >= self.acked.len() {
            return Err(Diverged::Protocol(format!(
                "chunk {} of lane {}",
                m.seq, m.lane
            )));
        }
        self.history.push_back(m.count);
        self.next_seq += 1;
        self.skip = 0;
        self.acked[m.lane] = m.first + m.n;
        Ok(Some(Closed {
            lane: m.lane,
            acked: m.first + m.n,
            next_seq: self.next_seq,
        }))
    }

    /// The producer's stream ended: no chunk may be left open.
    pub fn on_end(&mut self) -> Result<(), Diverged> {
        match self.cur {
            Some(c) if c.data > 0 => Err(Diverged::Protocol(format!(
                "the stream ended inside chunk {} ({} outputs without a closing mark)",
                c.seq, c.data
            ))),
            None => Err(Diverged::Protocol(
                "the stream ended before it started".into(),
            )),
            Some(_) => Ok(()),
        }
    }

    /// A takeover: stop reading the old primary's stream. What arrived of
    /// chunk `next_seq` is remembered (the next primary's replay of it
    /// drops that many).
    pub fn take_cut(&mut self) {
        if let Some(c) = self.cur.take() {
            if c.seq == self.next_seq {
                self.skip = self.skip.max(c.data);
            }
        }
    }

    /// Whether a stream has started (its resume mark was received) and
    /// not been cut.
    pub fn streaming(&self) -> bool {
        self.cur.is_some()
    }

    /// Forgets the counts of chunks below `floor` (no replay starts before
    /// the producer's newest recovery point), but never of chunks the
    /// current stream has still to repeat.
    pub fn trim(&mut self, floor: u64) {
        let keep = self
            .cur
            .map_or(self.next_seq, |c| c.seq)
            .min(self.next_seq)
            .min(floor);
        while self.base < keep {
            self.history.pop_front();
            self.base += 1;
        }
    }

    /// Per lane: inputs below this have all their outputs here.
    pub fn acked(&self, lane: usize) -> u64 {
        self.acked[lane]
    }

    /// Chunks below this were received completely.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closing(seq: u64, lane: usize, first: u64, n: u64, count: u64) -> Closing {
        Closing {
            seq,
            lane,
            first,
            n,
            count,
        }
    }

    #[test]
    fn tracker_passes_everything_without_a_takeover_and_acks_closed_chunks() {
        let mut t = Tracker::new(2);
        t.on_resume(0).unwrap();
        assert!(t.on_data().unwrap() && t.on_data().unwrap());
        assert_eq!(
            t.on_closing(closing(0, 0, 0, 4, 2)).unwrap(),
            Some(Closed {
                lane: 0,
                acked: 4,
                next_seq: 1
            })
        );
        assert!(t.on_data().unwrap());
        t.on_closing(closing(1, 1, 0, 1, 1)).unwrap();
        t.on_end().unwrap();
        assert_eq!((t.acked(0), t.acked(1), t.next_seq()), (4, 1, 2));
    }

    #[test]
    fn a_replay_drops_what_arrived_and_passes_the_rest() {
        let mut t = Tracker::new(1);
        t.on_resume(0).unwrap();
        t.on_data().unwrap();
        t.on_closing(closing(0, 0, 0, 10, 1)).unwrap();
        // Two outputs of chunk 1 arrive, then the primary fails.
        assert!(t.on_data().unwrap() && t.on_data().unwrap());
        t.take_cut();
        // The new primary replays from chunk 0 (its recovery point).
        t.on_resume(0).unwrap();
        assert!(!t.on_data().unwrap(), "chunk 0 is here already");
        assert_eq!(t.on_closing(closing(0, 0, 0, 10, 1)).unwrap(), None);
        assert!(!t.on_data().unwrap() && !t.on_data().unwrap());
        assert!(t.on_data().unwrap(), "the third output of chunk 1 is new");
        assert!(t.on_closing(closing(1, 0, 10, 5, 3)).unwrap().is_some());
        assert_eq!((t.acked(0), t.next_seq()), (15, 2));
    }

    #[test]
    fn a_skip_survives_a_second_takeover() {
        let mut t = Tracker::new(1);
        t.on_resume(0).unwrap();
        for _ in 0..3 {
            t.on_data().unwrap();
        }
        t.take_cut();
        t.on_resume(0).unwrap();
        assert!(!t.on_data().unwrap());
        t.take_cut();
        // The second new primary replays chunk 0: still three to drop.
        t.on_resume(0).unwrap();
        for _ in 0..3 {
            assert!(!t.on_data().unwrap());
        }
        assert!(t.on_data().unwrap());
        t.on_closing(closing(0, 0, 0, 1, 4)).unwrap();
    }

    #[test]
    fn a_replay_that_starts_past_an_incomplete_chunk_is_a_loss() {
        let mut t = Tracker::new(1);
        t.on_resume(0).unwrap();
        t.on_data().unwrap();
        t.take_cut();
        assert_eq!(
            t.on_resume(1),
            Err(Diverged::Gap {
                next_seq: 0,
                resumed: 1
            })
        );
    }

    #[test]
    fn a_replayed_chunk_with_other_outputs_is_caught() {
        // The landed code lost every end-of-stream summary of an instance
        // this way: the new primary took its lanes in another order, so the
        // final chunk it emitted them in had been received — with no
        // output — under the same number.
        let mut t = Tracker::new(2);
        t.on_resume(0).unwrap();
        t.on_closing(closing(0, 0, 0, 1, 0)).unwrap();
        t.take_cut();
        t.on_resume(0).unwrap();
        for _ in 0..5 {
            assert!(!t.on_data().unwrap());
        }
        assert_eq!(
            t.on_closing(closing(0, 0, 0, 1, 5)),
            Err(Diverged::Count {
                seq: 0,
                before: 0,
                now: 5
            })
        );
        // Fewer outputs than were received before is caught too.
        let mut t = Tracker::new(1);
        t.on_resume(0).unwrap();
        t.on_data().unwrap();
        t.on_data().unwrap();
        t.take_cut();
        t.on_resume(0).unwrap();
        t.on_data().unwrap();
        assert!(matches!(
            t.on_closing(closing(0, 0, 0, 1, 1)),
            Err(Diverged::Count {
                before: 2,
                now: 1,
                ..
            })
        ));
    }

    #[test]
    fn protocol_breaks_are_errors() {
        let mut t = Tracker::new(1);
        assert!(t.on_data().is_err(), "data before a resume");
        let mut t = Tracker::new(1);
        t.on_resume(0).unwrap();
        assert!(t.on_resume(0).is_err(), "a resume inside a stream");
        t.on_data().unwrap();
        assert!(t.on_closing(closing(0, 0, 0, 1, 2)).is_err(), "count");
        let mut t = Tracker::new(1);
        t.on_resume(0).unwrap();
        assert!(t.on_closing(closing(3, 0, 0, 1, 0)).is_err(), "order");
        let mut t = Tracker::new(1);
        t.on_resume(0).unwrap();
        t.on_data().unwrap();
        assert!(t.on_end().is_err(), "an end inside a chunk");
        assert!(Tracker::new(1).on_end().is_err(), "an end before a start");
    }

    #[test]
    fn history_is_trimmed_to_the_recovery_point_but_not_under_a_replay() {
        let mut t = Tracker::new(1);
        t.on_resume(0).unwrap();
        for s in 0..10 {
            t.on_closing(closing(s, 0, s, 1, 0)).unwrap();
        }
        t.take_cut();
        t.on_resume(4).unwrap();
        t.trim(8);
        // Chunks 4..8 are still being replayed: kept.
        for s in 4..10 {
            assert_eq!(t.on_closing(closing(s, 0, s, 1, 0)).unwrap(), None);
        }
        t.trim(8);
        t.take_cut();
        assert!(matches!(
            t.on_resume(7),
            Err(Diverged::Unverifiable { base: 8, .. })
        ));
        let mut t2 = t.clone();
        assert!(t2.on_resume(8).is_ok());
    }
}

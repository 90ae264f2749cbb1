//! Pure decisions of the standby protocol, each a function of what was
//! observed, so that every branch has a unit test:
//!
//! - [`Tracker`] — a consumer's view of the chunks of one producer with a
//!   standby: which outputs it already has, what to drop when a new primary
//!   replays, and whether a replay agrees with what it received before.
//! - [`Detector`] — the standby's judgement of its primary's silence:
//!   "progressing", "descheduled" or "stuck", from heartbeats, the worker's
//!   task-poll marks and the operating system's view of the thread.
//! - [`epoch_live`] — whether an epoch's primary is alive by its heartbeat
//!   alone (the liveness cell's own wait).

use std::collections::VecDeque;
use std::fmt;

/// Whether the primary of `epoch` is alive: its epoch is still the current
/// one, and its last heartbeat (engine nanoseconds) is within `timeout_ns`
/// of `now`.
pub fn epoch_live(epoch: u64, current: u64, last_beat: u64, now: u64, timeout_ns: u64) -> bool {
    epoch == current && now.saturating_sub(last_beat) <= timeout_ns
}

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

/// The operating system's view of a thread at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSample {
    /// When (engine nanoseconds).
    pub at: u64,
    /// The scheduler state letter (`R` running or runnable, `S` sleeping,
    /// `D` waiting for I/O, …).
    pub state: u8,
    /// CPU time it has run.
    pub cpu_ns: u64,
    /// Time it has waited on a run queue.
    pub wait_ns: u64,
    /// Times it was put on a CPU.
    pub slices: u64,
}

/// What a thread did between two samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// It sleeps in a blocking call and has not run at all since the first
    /// sample: it is stuck where it is.
    Blocked,
    /// It ran nearly all the time without waiting for a CPU: busy inside
    /// whatever it is in.
    Busy,
    /// Anything else — it wants to run but hardly did (descheduled, or its
    /// virtual CPU stolen by the host), it shares a CPU, or it woke up and
    /// ran a little: no proof that it is stuck.
    Runnable,
}

/// What thread samples `a` then `b` say the thread did.
pub fn activity(a: &ThreadSample, b: &ThreadSample) -> Activity {
    let elapsed = b.at.saturating_sub(a.at).max(1);
    let cpu = b.cpu_ns.saturating_sub(a.cpu_ns);
    let wait = b.wait_ns.saturating_sub(a.wait_ns);
    if a.state != b'R' && b.state != b'R' && b.slices == a.slices {
        Activity::Blocked
    } else if b.state == b'R' && 10 * cpu >= 8 * elapsed && 10 * wait < elapsed {
        Activity::Busy
    } else {
        Activity::Runnable
    }
}

/// Where the primary's worker is, as its task-poll marks say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerAt {
    /// Inside a poll of the primary's own task, since `since`.
    Primary {
        /// Engine nanoseconds when the poll began.
        since: u64,
    },
    /// Inside a poll of another task of the worker, since `since`.
    Other {
        /// Engine nanoseconds when the poll began.
        since: u64,
    },
    /// Between task polls (its loop, or parked), since `since`.
    Between {
        /// Engine nanoseconds when its last task poll ended.
        since: u64,
    },
}

/// Why a standby declared its primary stalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evidence {
    /// No heartbeat for this long.
    pub silence_ns: u64,
    /// The threshold it crossed (the configured timeout, or more when the
    /// detector learned that this machine's scheduling is noisier).
    pub threshold_ns: u64,
    /// Where the worker was.
    pub at: WorkerAt,
    /// For how long it had been there.
    pub there_ns: u64,
    /// What its thread did over the last interval (`None`: no view from
    /// the operating system).
    pub activity: Option<Activity>,
    /// Declared only because the silence outlasted the starvation limit
    /// while the thread was runnable.
    pub starved: bool,
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        write!(
            f,
            "no heartbeat for {:.1} ms (threshold {:.1} ms)",
            ms(self.silence_ns),
            ms(self.threshold_ns)
        )?;
        let there = ms(self.there_ns);
        match self.at {
            WorkerAt::Primary { .. } => write!(
                f,
                "; its worker is inside the primary's task ({there:.1} ms)"
            )?,
            WorkerAt::Other { .. } => {
                write!(f, "; its worker is inside another task ({there:.1} ms)")?
            }
            WorkerAt::Between { .. } => write!(f, "; its worker polls no task ({there:.1} ms)")?,
        }
        match self.activity {
            Some(Activity::Blocked) => write!(f, "; the thread is blocked (sleeping or waiting)")?,
            Some(Activity::Busy) => write!(f, "; the thread is busy")?,
            Some(Activity::Runnable) => write!(f, "; the thread is runnable but not running")?,
            None => write!(f, "; no thread state available")?,
        }
        if self.starved {
            write!(f, "; starved past the limit")?;
        }
        Ok(())
    }
}

/// The standby's verdict on one observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Alive, or not judged yet.
    Alive,
    /// Stalled: take over.
    Stalled(Evidence),
}

/// What the standby sees at one of its polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    /// Engine nanoseconds now.
    pub now: u64,
    /// The primary's last heartbeat (written at each poll of its task).
    pub beat: u64,
    /// The primary's progress counter (inputs it processed, with its
    /// epoch): a change is a sign of life too, also inside one long poll.
    pub progress: u64,
    /// The primary's worker is in a long synchronous step (a snapshot, a
    /// restore) or came out of one within the timeout.
    pub long_step: bool,
}

/// Judges a primary's silence (the standby feeds it at each of its polls;
/// `standby/group.rs` describes the protocol).
///
/// A primary is stalled only when it is *stuck*: neither its heartbeat
/// (written whenever its task is polled) nor its progress counter (one
/// step per input) has moved for longer than the threshold, its worker has
/// been inside the primary's own task for that long (or between tasks and
/// not come back), and the thread is blocked or busy there — not merely
/// waiting for a CPU. A worker stuck in *another* task does not fail this
/// primary: that task's own standby (if it has one) takes it over. The
/// silence must also have been watched: if the standby itself was not
/// running for a while, it judges only after seeing the silence go on.
///
/// The threshold starts at the configured timeout and learns, phi-accrual
/// style, from the gaps between heartbeats it sees: `max(timeout, mean + 6
/// σ)`, at most 8 × the timeout. A primary that is runnable but not
/// running is given up on only after 20 × the threshold.
#[derive(Clone, Debug)]
pub struct Detector {
    timeout_ns: u64,
    mean: f64,
    var: f64,
    samples: u32,
    last_beat: u64,
    last_obs: u64,
    last_progress: u64,
    /// When a change of the progress counter was last seen.
    progress_at: u64,
    /// The first thread sample of the current silence.
    suspect: Option<Option<ThreadSample>>,
}

/// Gap samples before the learned threshold is trusted.
const WARMUP: u32 = 32;

impl Detector {
    /// A detector for a configured timeout.
    pub fn new(timeout_ns: u64) -> Self {
        Detector {
            timeout_ns: timeout_ns.max(1),
            mean: (timeout_ns / 16) as f64,
            var: 0.0,
            samples: 0,
            last_beat: 0,
            last_obs: 0,
            last_progress: 0,
            progress_at: 0,
            suspect: None,
        }
    }

    /// The silence that counts as suspicious now.
    pub fn threshold(&self) -> u64 {
        let t = self.timeout_ns;
        if self.samples < WARMUP {
            return t;
        }
        let learned = (self.mean + 6.0 * self.var.sqrt()) as u64;
        learned.clamp(t, 8 * t)
    }

    fn learn(&mut self, gap: u64) {
        // Exponentially weighted mean and variance (α = 1/16).
        let a = 1.0 / 16.0;
        let d = gap as f64 - self.mean;
        self.mean += a * d;
        self.var = (1.0 - a) * (self.var + a * d * d);
        self.samples = self.samples.saturating_add(1);
    }

    /// One observation. `look` is asked (at most once) for where the
    /// primary's worker is and, if the operating system says, a sample of
    /// its thread — only when the silence is suspicious.
    pub fn observe(
        &mut self,
        o: Observation,
        look: impl FnOnce() -> (WorkerAt, Option<ThreadSample>),
    ) -> Verdict {
        let own_gap = o.now.saturating_sub(self.last_obs);
        self.last_obs = o.now;
        if o.beat > self.last_beat {
            // Gaps seen finely enough are the primary's scheduling jitter.
            if self.last_beat != 0 && own_gap <= self.timeout_ns / 8 {
                self.learn(o.beat - self.last_beat);
            }
            self.last_beat = o.beat;
        }
        if o.progress != self.last_progress {
            self.last_progress = o.progress;
            self.progress_at = o.now;
        }
        let threshold = self.threshold();
        let silence = o.now.saturating_sub(o.beat.max(self.progress_at));
        if o.long_step || silence <= threshold / 2 {
            self.suspect = None;
            return Verdict::Alive;
        }
        if own_gap > threshold / 2 {
            // This standby was not running either: what it missed says
            // nothing about the primary. Look again from here.
            self.suspect = None;
        }
        let Some(first) = self.suspect else {
            let (_, sample) = look();
            self.suspect = Some(sample);
            return Verdict::Alive;
        };
        if silence <= threshold {
            return Verdict::Alive;
        }
        let (at, sample) = look();
        let act = match (first, sample) {
            (Some(a), Some(b)) => Some(activity(&a, &b)),
            _ => None,
        };
        // The next interval starts here.
        self.suspect = Some(sample);
        let now = o.now;
        let there_ns = match at {
            WorkerAt::Primary { since }
            | WorkerAt::Other { since }
            | WorkerAt::Between { since } => now.saturating_sub(since),
        };
        let inside = match at {
            WorkerAt::Primary { .. } | WorkerAt::Between { .. } => there_ns > threshold,
            // The worker is stuck in another task: that task's failure, not
            // this primary's (it runs again when the worker does).
            WorkerAt::Other { .. } => false,
        };
        if !inside {
            return Verdict::Alive;
        }
        let starved = silence > 20 * threshold;
        let stalled = match act {
            Some(Activity::Blocked) | Some(Activity::Busy) | None => true,
            Some(Activity::Runnable) => starved,
        };
        if !stalled {
            return Verdict::Alive;
        }
        Verdict::Stalled(Evidence {
            silence_ns: silence,
            threshold_ns: threshold,
            at,
            there_ns,
            activity: act,
            starved: starved && act == Some(Activity::Runnable),
        })
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

    fn sample(at: u64, state: u8, cpu: u64) -> ThreadSample {
        ThreadSample {
            at,
            state,
            cpu_ns: cpu,
            wait_ns: 0,
            slices: 0,
        }
    }

    #[test]
    fn activity_tells_blocked_busy_and_runnable_apart() {
        let s = sample(0, b'S', 0);
        assert_eq!(activity(&s, &sample(10, b'S', 0)), Activity::Blocked);
        assert_eq!(activity(&s, &sample(10, b'D', 0)), Activity::Blocked);
        let r = sample(0, b'R', 0);
        assert_eq!(activity(&r, &sample(10, b'R', 9)), Activity::Busy);
        assert_eq!(activity(&r, &sample(10, b'R', 1)), Activity::Runnable);
        // Woke up and ran in between (a worker parking and waking): not
        // blocked.
        let woke = ThreadSample {
            slices: 3,
            ..sample(10, b'S', 1)
        };
        assert_eq!(activity(&s, &woke), Activity::Runnable);
        // Ran half the time, waiting for a CPU the other half: sharing a
        // CPU is no proof of being stuck.
        let shared = ThreadSample {
            wait_ns: 5,
            ..sample(10, b'R', 5)
        };
        assert_eq!(activity(&r, &shared), Activity::Runnable);
    }

    const MS: u64 = 1_000_000;

    fn obs(now: u64, beat: u64) -> Observation {
        Observation {
            now,
            beat,
            progress: 0,
            long_step: false,
        }
    }

    /// Feeds a detector observations every 100 µs from `from` to `to`
    /// with the beat frozen at `beat`; returns the first stall verdict.
    fn watch(
        d: &mut Detector,
        from: u64,
        to: u64,
        beat: u64,
        at: WorkerAt,
        state: u8,
        cpu_share: f64,
    ) -> Option<(u64, Evidence)> {
        let mut now = from;
        while now <= to {
            let s = sample(now, state, (now as f64 * cpu_share) as u64);
            if let Verdict::Stalled(e) = d.observe(obs(now, beat), || (at, Some(s))) {
                return Some((now, e));
            }
            now += MS / 10;
        }
        None
    }

    #[test]
    fn a_primary_blocked_in_its_own_task_is_stalled_after_the_timeout() {
        let mut d = Detector::new(5 * MS);
        let (at, e) = watch(
            &mut d,
            MS,
            100 * MS,
            MS,
            WorkerAt::Primary { since: MS },
            b'S',
            0.0,
        )
        .expect("stalled");
        assert!(at > 6 * MS && at <= 6 * MS + MS / 5, "{at}");
        assert_eq!(e.activity, Some(Activity::Blocked));
        let mut d = Detector::new(5 * MS);
        let busy = watch(
            &mut d,
            MS,
            100 * MS,
            MS,
            WorkerAt::Primary { since: MS },
            b'R',
            1.0,
        );
        assert_eq!(busy.unwrap().1.activity, Some(Activity::Busy));
    }

    #[test]
    fn a_slow_primary_that_makes_progress_inside_one_long_poll_is_alive() {
        let mut d = Detector::new(5 * MS);
        let at = WorkerAt::Primary { since: MS };
        for k in 10..1000u64 {
            let now = k * MS / 10;
            let o = Observation {
                progress: k / 20, // one input every 2 ms
                ..obs(now, MS)
            };
            let s = sample(now, b'R', now);
            assert_eq!(d.observe(o, || (at, Some(s))), Verdict::Alive, "at {now}");
        }
    }

    #[test]
    fn a_descheduled_primary_is_not_stalled_until_starved() {
        let mut d = Detector::new(5 * MS);
        let r = watch(
            &mut d,
            MS,
            50 * MS,
            MS,
            WorkerAt::Primary { since: MS },
            b'R',
            0.05,
        );
        assert_eq!(r, None, "runnable, hardly running: the host's doing");
        let r = watch(
            &mut d,
            50 * MS,
            200 * MS,
            MS,
            WorkerAt::Primary { since: MS },
            b'R',
            0.05,
        );
        let (at, e) = r.expect("starved");
        assert!(e.starved && at > 100 * MS);
    }

    #[test]
    fn a_worker_stuck_in_another_task_does_not_fail_this_primary() {
        let mut d = Detector::new(5 * MS);
        let r = watch(
            &mut d,
            MS,
            300 * MS,
            MS,
            WorkerAt::Other { since: MS },
            b'S',
            0.0,
        );
        assert_eq!(r, None);
    }

    #[test]
    fn a_poll_that_just_began_or_a_long_step_is_alive() {
        let mut d = Detector::new(5 * MS);
        // The worker entered the primary's poll recently: it is beating.
        assert_eq!(
            watch(
                &mut d,
                MS,
                40 * MS,
                MS,
                WorkerAt::Primary { since: 39 * MS },
                b'S',
                0.0
            ),
            None
        );
        let mut d = Detector::new(5 * MS);
        for k in 1..500 {
            let o = Observation {
                now: k * MS / 10,
                beat: 1,
                progress: 0,
                long_step: true,
            };
            assert_eq!(
                d.observe(o, || (WorkerAt::Primary { since: 0 }, None)),
                Verdict::Alive
            );
        }
    }

    #[test]
    fn a_silence_the_standby_did_not_watch_is_judged_only_after_watching_it() {
        let mut d = Detector::new(5 * MS);
        d.observe(obs(MS, MS), || unreachable!());
        // The standby's own worker was away for 30 ms: no verdict yet.
        let at = WorkerAt::Primary { since: MS };
        let s = sample(31 * MS, b'S', 0);
        assert_eq!(
            d.observe(obs(31 * MS, MS), || (at, Some(s))),
            Verdict::Alive
        );
        let s = sample(31 * MS + MS / 10, b'S', 0);
        assert!(matches!(
            d.observe(obs(31 * MS + MS / 10, MS), || (at, Some(s))),
            Verdict::Stalled(_)
        ));
    }

    #[test]
    fn the_threshold_learns_a_noisy_schedule_within_its_bounds() {
        let mut d = Detector::new(5 * MS);
        assert_eq!(d.threshold(), 5 * MS);
        // Beats every 0.3 ms: the floor holds.
        for k in 1..200u64 {
            let beat = k * 300_000;
            d.observe(obs(beat, beat), || unreachable!());
        }
        assert_eq!(d.threshold(), 5 * MS);
        // Every tenth gap 8 ms: the threshold grows, capped at 8 × timeout.
        let mut d = Detector::new(5 * MS);
        let (mut now, mut beat, mut next) = (0u64, 0u64, 300_000u64);
        for k in 1..400u64 {
            while now < next {
                now += 100_000;
                d.observe(obs(now, beat), || (WorkerAt::Primary { since: now }, None));
            }
            beat = next;
            next += if k % 10 == 0 { 8 * MS } else { 300_000 };
        }
        assert!(d.threshold() > 5 * MS, "{}", d.threshold());
        assert!(d.threshold() <= 40 * MS);
    }

    #[test]
    fn without_a_thread_view_the_timeout_alone_decides() {
        let mut d = Detector::new(5 * MS);
        let mut now = MS;
        let r = loop {
            if let Verdict::Stalled(e) =
                d.observe(obs(now, MS), || (WorkerAt::Primary { since: MS }, None))
            {
                break (now, e);
            }
            now += MS / 10;
        };
        assert!(r.0 > 6 * MS && r.0 < 7 * MS);
        assert_eq!(r.1.activity, None);
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

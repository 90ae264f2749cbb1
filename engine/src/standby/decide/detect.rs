//! The standby's judgement of its primary's silence — "progressing",
//! "descheduled" or "stuck" — from heartbeats, the worker's task-poll marks
//! and the operating system's view of the thread.

use super::liveness::{judge, Liveness, Silence};
use std::fmt;

pub use crate::sys::thread::ThreadSample;

/// What a thread did between two samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// It sleeps in a blocking call and has not run at all since the first
    /// sample: it is stuck where it is.
    Blocked,
    /// It ran nearly all the time without waiting for a CPU: busy inside
    /// whatever it is in.
    Busy,
    /// It sleeps now, and over the interval ran a little and hardly waited
    /// for a CPU: it sleeps by itself (a loop of short sleeps, a wait with
    /// a timeout) — not starved of a CPU, not making progress either.
    Sleeping,
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
    // The host ran something else on this virtual CPU meanwhile: the guest
    // counts that time as the thread's own running, so "busy" proves
    // nothing (a thread that is really stuck is found busy again in the
    // next interval without steal).
    let stolen = a.cpu == b.cpu && a.cpu != u32::MAX && b.steal_ns > a.steal_ns;
    if a.state != b'R' && b.state != b'R' && b.slices == a.slices {
        Activity::Blocked
    } else if stolen {
        Activity::Runnable
    } else if b.state == b'R' && 10 * cpu >= 8 * elapsed && 10 * wait < elapsed {
        Activity::Busy
    } else if b.state != b'R' && 10 * cpu < 2 * elapsed && 10 * wait < 2 * elapsed {
        // Asleep now, and neither running nor waiting to run most of the
        // interval: it slept, and woke only briefly.
        Activity::Sleeping
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
            Some(Activity::Sleeping) => write!(f, "; the thread sleeps, waking only briefly")?,
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
/// `runtime/standby/group.rs` describes the protocol).
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
/// σ)`, at most 8 × the timeout. The verdict is [`judge`]'s (a primary
/// that is runnable but not running is given up on only after
/// [`super::STARVED`] × the threshold). The same detector watches a worker
/// for the supervisor and a child process for its driver
/// ([`super::Watched`]).
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
        let held = match at {
            WorkerAt::Primary { .. } | WorkerAt::Between { .. } => Some(there_ns),
            // The worker is stuck in another task: that task's failure, not
            // this primary's (it runs again when the worker does).
            WorkerAt::Other { .. } => None,
        };
        let Liveness::Stalled { starved } = judge(&Silence {
            silence_ns: silence,
            threshold_ns: threshold,
            held_ns: held,
            activity: act,
        }) else {
            return Verdict::Alive;
        };
        Verdict::Stalled(Evidence {
            silence_ns: silence,
            threshold_ns: threshold,
            at,
            there_ns,
            activity: act,
            starved,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: u64, state: u8, cpu: u64) -> ThreadSample {
        ThreadSample {
            at,
            state,
            cpu_ns: cpu,
            wait_ns: 0,
            slices: 0,
            cpu: 1,
            steal_ns: 0,
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
        // Woke up and ran a little in between, waiting for no CPU (a loop
        // of short sleeps): sleeping, not blocked in one call.
        let woke = ThreadSample {
            slices: 3,
            ..sample(10, b'S', 1)
        };
        assert_eq!(activity(&s, &woke), Activity::Sleeping);
        // Ran a little and waited for a CPU most of the time: descheduled.
        let waited = ThreadSample {
            slices: 3,
            wait_ns: 8,
            ..sample(10, b'R', 1)
        };
        assert_eq!(activity(&r, &waited), Activity::Runnable);
        // Ran half the time, waiting for a CPU the other half: sharing a
        // CPU is no proof of being stuck.
        let shared = ThreadSample {
            wait_ns: 5,
            ..sample(10, b'R', 5)
        };
        assert_eq!(activity(&r, &shared), Activity::Runnable);
        // Ran all the time by the guest's count, but the host stole its
        // CPU meanwhile: no proof either. Steal on another CPU than the one
        // it ran on says nothing.
        let stolen = ThreadSample {
            steal_ns: 10_000_000,
            ..sample(10, b'R', 9)
        };
        assert_eq!(activity(&r, &stolen), Activity::Runnable);
        // Counters of two different CPUs are not comparable.
        let elsewhere = ThreadSample { cpu: 0, ..stolen };
        assert_eq!(activity(&r, &elsewhere), Activity::Busy);
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
}

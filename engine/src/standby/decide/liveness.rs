//! The engine's one stall rule: whether a silent party — a standby
//! group's primary, a worker thread, a process-isolated child — is stuck,
//! from one observation of its silence. Every watcher (the standby's
//! [`Detector`](super::Detector), the supervisor's worker watch, the
//! driver's watch of a child process) feeds a [`Detector`](super::Detector),
//! whose verdict is [`judge`]; the base timeout of each kind of party is
//! [`base_timeout`]'s.

use super::Activity;

/// What a watcher watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watched {
    /// A standby group's primary, watched by its standby (the group's
    /// heartbeat timeout).
    Primary,
    /// A worker thread, watched by the supervisor for restart-all (the
    /// runtime's heartbeat timeout).
    Worker,
    /// A worker watched only so that a job whose every standby is stuck
    /// does not hang (no restart strategy): failing the attempt is the
    /// last resort, so only a silence far past the timeout counts.
    LastResort,
    /// A child process running an incarnation's operators, answering its
    /// driver through a pipe (the group's heartbeat timeout).
    Child,
}

/// The base timeout for a party of kind `w`, from the configured
/// heartbeat timeout (nanoseconds); the detector learns up from it.
pub fn base_timeout(w: Watched, configured_ns: u64) -> u64 {
    const MS: u64 = 1_000_000;
    let t = configured_ns.max(1);
    match w {
        Watched::Primary | Watched::Worker => t,
        Watched::LastResort => t.saturating_mul(10).max(1_000 * MS),
        // A pipe's round trip on the noisiest machine: as long as the
        // detector learns to wait (8 × the timeout), and never under
        // 100 ms — killing a process that was only starved of its core
        // costs a takeover.
        Watched::Child => t.saturating_mul(8).max(100 * MS),
    }
}

/// A silence past the threshold times this, while the party is runnable
/// but not running, counts as a stall too (it was starved that long).
pub const STARVED: u64 = 20;

/// One look at a silent party.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Silence {
    /// Since its last sign of life (a heartbeat, progress, a reply).
    pub silence_ns: u64,
    /// The silence that counts (the base timeout, or what the watcher
    /// learned of this machine's scheduling).
    pub threshold_ns: u64,
    /// For how long it has been where its stall would hold it (inside its
    /// own work, or between tasks without coming back); `None`: it is
    /// elsewhere (its worker runs another task), which is not its stall.
    pub held_ns: Option<u64>,
    /// What its thread did over the last interval (`None`: no view from
    /// the operating system).
    pub activity: Option<Activity>,
}

/// The rule's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Alive, or no proof of a stall.
    Alive,
    /// Stuck: blocked or busy where it is for longer than the threshold,
    /// or (`starved`) runnable but not running for [`STARVED`] times it.
    Stalled {
        /// Declared only because the starvation limit passed.
        starved: bool,
    },
}

/// The stall rule. A party is stalled only when it is *stuck*: silent for
/// longer than the threshold, held where it is for that long, and its
/// thread blocked, busy or sleeping there — not merely waiting for a CPU (a
/// descheduled thread, or a virtual CPU the host took) unless that lasts
/// [`STARVED`] times the threshold. No view of the thread counts as
/// stuck: without the operating system's word the silence is all there is.
pub fn judge(s: &Silence) -> Liveness {
    if s.silence_ns <= s.threshold_ns {
        return Liveness::Alive;
    }
    match s.held_ns {
        Some(held) if held > s.threshold_ns => {}
        // Elsewhere, or not held there long: it moved within the silence.
        _ => return Liveness::Alive,
    }
    match s.activity {
        Some(Activity::Blocked | Activity::Busy | Activity::Sleeping) | None => {
            Liveness::Stalled { starved: false }
        }
        Some(Activity::Runnable) if s.silence_ns > STARVED * s.threshold_ns => {
            Liveness::Stalled { starved: true }
        }
        Some(Activity::Runnable) => Liveness::Alive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn silence(silence_ns: u64, held: Option<u64>, activity: Option<Activity>) -> Silence {
        Silence {
            silence_ns,
            threshold_ns: 10 * MS,
            held_ns: held,
            activity,
        }
    }

    #[test]
    fn a_silence_within_the_threshold_is_alive_whatever_the_thread_does() {
        for a in [None, Some(Activity::Blocked), Some(Activity::Busy)] {
            assert_eq!(judge(&silence(10 * MS, Some(50 * MS), a)), Liveness::Alive);
        }
    }

    #[test]
    fn a_party_that_moved_within_the_silence_or_is_elsewhere_is_alive() {
        let busy = Some(Activity::Busy);
        assert_eq!(
            judge(&silence(50 * MS, Some(5 * MS), busy)),
            Liveness::Alive
        );
        assert_eq!(judge(&silence(50 * MS, None, busy)), Liveness::Alive);
    }

    #[test]
    fn blocked_busy_sleeping_or_unseen_past_the_threshold_is_stalled() {
        for a in [
            None,
            Some(Activity::Blocked),
            Some(Activity::Busy),
            Some(Activity::Sleeping),
        ] {
            assert_eq!(
                judge(&silence(11 * MS, Some(11 * MS), a)),
                Liveness::Stalled { starved: false },
                "{a:?}"
            );
        }
    }

    #[test]
    fn a_runnable_party_is_stalled_only_once_starved() {
        let r = Some(Activity::Runnable);
        assert_eq!(
            judge(&silence(150 * MS, Some(150 * MS), r)),
            Liveness::Alive
        );
        assert_eq!(
            judge(&silence(200 * MS, Some(200 * MS), r)),
            Liveness::Alive
        );
        assert_eq!(
            judge(&silence(201 * MS, Some(201 * MS), r)),
            Liveness::Stalled { starved: true }
        );
    }

    #[test]
    fn base_timeouts_follow_the_configured_one() {
        assert_eq!(base_timeout(Watched::Primary, 5 * MS), 5 * MS);
        assert_eq!(base_timeout(Watched::Worker, 100 * MS), 100 * MS);
        assert_eq!(base_timeout(Watched::Child, 5 * MS), 100 * MS);
        assert_eq!(base_timeout(Watched::Child, 50 * MS), 400 * MS);
        assert_eq!(base_timeout(Watched::LastResort, 100 * MS), 1_000 * MS);
        assert_eq!(base_timeout(Watched::LastResort, 500 * MS), 5_000 * MS);
        assert_eq!(base_timeout(Watched::Primary, 0), 1);
    }
}

//! Pure decisions of the standby protocol, each a function of what was
//! observed, so that every branch has a unit test:
//!
//! - [`Tracker`] — a consumer's view of the chunks of one producer with a
//!   standby: which outputs it already has, what to drop when a new primary
//!   replays, and whether a replay agrees with what it received before.
//! - [`Detector`] — a watcher's judgement of a silent party (a standby's
//!   primary, a worker, a child process): "progressing", "descheduled" or
//!   "stuck", from heartbeats, task-poll marks and the operating system's
//!   view of the thread; its verdict is [`judge`], the engine's one stall
//!   rule.
//! - [`epoch_live`] — whether an epoch's primary is alive by its heartbeat
//!   alone (the liveness cell's own wait).

mod detect;
mod liveness;
mod track;

pub use detect::*;
pub use liveness::*;
pub use track::*;

/// Whether the primary of `epoch` is alive: its epoch is still the current
/// one, and its last heartbeat (engine nanoseconds) is within `timeout_ns`
/// of `now`.
pub fn epoch_live(epoch: u64, current: u64, last_beat: u64, now: u64, timeout_ns: u64) -> bool {
    epoch == current && now.saturating_sub(last_beat) <= timeout_ns
}

#[cfg(test)]
mod tests {
    use super::*;

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

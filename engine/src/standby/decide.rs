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

#[cfg(test)]
mod tests {
    use super::*;

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

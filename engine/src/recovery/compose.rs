//! Standbys beside checkpoints: which recovery a failure gets, and whether
//! a checkpoint may complete across a takeover.
//!
//! A job may run both: checkpoints cover every operator, and the operators
//! built after `Stream::standby` also have a standby. A failure of a
//! backed-up operator is a *takeover* — its standby replays from the
//! buffer queues, nothing else stops, checkpoints go on. Every other
//! failure is *restart-all*: every worker stops and the job restarts from
//! its last complete checkpoint (from the start without one), standby
//! groups rebuilt from it. [`recovery_for`] draws that line.
//!
//! A checkpoint's barrier flows through a group's buffer queues in order
//! with the records, and the group's primary snapshots and acknowledges it
//! when its alignment completes. A takeover while a checkpoint is in flight
//! may leave that acknowledgement with a primary that is no longer the
//! group's: the new primary repeats the barrier — and acknowledges it again
//! — if its replay starts before it; otherwise nothing of the new primary
//! is in the checkpoint. [`across_takeover`] decides: a checkpoint
//! completes only with every group's acknowledgement from its current
//! primary, waits while a new primary may still repeat the barrier, and is
//! declined otherwise — never a checkpoint that mixes two primaries' views.

/// What is known of a failure when it is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The failed operator runs with a standby.
    pub backed_up: bool,
    /// Its group still has (or is bringing up) a standby; `false` once
    /// standbys kept failing and the group gave up on them.
    pub standby_left: bool,
    /// The record it failed on also failed the group's previous primary.
    pub repeats_last_record: bool,
}

/// Which recovery a failure gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// The group's standby takes over; nothing else stops.
    Takeover,
    /// Every operator restarts from the last complete checkpoint (or, with
    /// none, the job's restart strategy decides; without one it fails).
    RestartAll(RestartWhy),
}

/// Why a failure is not a takeover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartWhy {
    /// The failed operator has no standby.
    NoStandby,
    /// Its group has no standby left.
    StandbysGone,
    /// The record failed two primaries in a row: a standby would only fail
    /// on it again.
    PoisonRecord,
}

impl std::fmt::Display for RestartWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RestartWhy::NoStandby => "the operator has no standby",
            RestartWhy::StandbysGone => {
                "its group has no standby left: its standbys failed 3 times in this attempt, the group's whole budget of standby failures"
            }
            RestartWhy::PoisonRecord => "the record failed two primaries in a row",
        })
    }
}

/// The recovery a failure gets (see the module docs).
pub fn recovery_for(f: &Failure) -> Recovery {
    if !f.backed_up {
        Recovery::RestartAll(RestartWhy::NoStandby)
    } else if f.repeats_last_record {
        Recovery::RestartAll(RestartWhy::PoisonRecord)
    } else if !f.standby_left {
        Recovery::RestartAll(RestartWhy::StandbysGone)
    } else {
        Recovery::Takeover
    }
}

/// One standby group as the checkpoint in flight sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupAtCheckpoint {
    /// The epoch of the primary whose acknowledgement the checkpoint holds
    /// (`None`: none yet).
    pub acked_epoch: Option<u64>,
    /// The group's current epoch.
    pub current_epoch: u64,
    /// Its current primary is still replaying its predecessor's chunks
    /// (it may yet repeat the barrier and acknowledge it).
    pub replaying: bool,
    /// The group's output has ended (its primary finished).
    pub done: bool,
}

/// Whether a checkpoint whose every instance acknowledged may complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcrossTakeover {
    /// Every group's acknowledgement is its current primary's.
    Complete,
    /// A new primary may still acknowledge: look again later.
    Wait,
    /// A group's acknowledgement is a replaced primary's, and its new
    /// primary will not repeat the barrier: decline (with the group's
    /// index in the slice).
    Decline(usize),
}

/// Decides a checkpoint across the takeovers of `groups` (see the module
/// docs).
pub fn across_takeover(groups: &[GroupAtCheckpoint]) -> AcrossTakeover {
    let mut wait = false;
    for (i, g) in groups.iter().enumerate() {
        match g.acked_epoch {
            // Not acknowledged: a group that finished before the barrier
            // reached it is covered by its end; otherwise the checkpoint is
            // not complete yet.
            None if g.done => {}
            None => wait = true,
            Some(e) if e == g.current_epoch => {}
            Some(_) if g.replaying => wait = true,
            Some(_) => return AcrossTakeover::Decline(i),
        }
    }
    if wait {
        AcrossTakeover::Wait
    } else {
        AcrossTakeover::Complete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(backed_up: bool, standby_left: bool, repeats: bool) -> Failure {
        Failure {
            backed_up,
            standby_left,
            repeats_last_record: repeats,
        }
    }

    #[test]
    fn a_backed_up_operator_with_a_standby_is_taken_over() {
        assert_eq!(
            recovery_for(&failure(true, true, false)),
            Recovery::Takeover
        );
    }

    #[test]
    fn every_other_failure_is_restart_all_and_says_why() {
        assert_eq!(
            recovery_for(&failure(false, false, false)),
            Recovery::RestartAll(RestartWhy::NoStandby)
        );
        assert_eq!(
            recovery_for(&failure(true, true, true)),
            Recovery::RestartAll(RestartWhy::PoisonRecord)
        );
        assert_eq!(
            recovery_for(&failure(true, false, false)),
            Recovery::RestartAll(RestartWhy::StandbysGone)
        );
        // A poison record is named before a missing standby.
        assert_eq!(
            recovery_for(&failure(true, false, true)),
            Recovery::RestartAll(RestartWhy::PoisonRecord)
        );
    }

    fn group(acked: Option<u64>, current: u64, replaying: bool, done: bool) -> GroupAtCheckpoint {
        GroupAtCheckpoint {
            acked_epoch: acked,
            current_epoch: current,
            replaying,
            done,
        }
    }

    #[test]
    fn a_checkpoint_completes_with_every_current_primarys_acknowledgement() {
        assert_eq!(across_takeover(&[]), AcrossTakeover::Complete);
        let g = [
            group(Some(1), 1, false, false),
            group(Some(3), 3, true, false),
        ];
        assert_eq!(across_takeover(&g), AcrossTakeover::Complete);
        // A group that finished before the barrier reached it.
        let g = [group(None, 2, false, true), group(Some(1), 1, false, false)];
        assert_eq!(across_takeover(&g), AcrossTakeover::Complete);
    }

    #[test]
    fn a_replaced_primarys_acknowledgement_waits_for_the_replay_then_declines() {
        // Epoch 1 acknowledged, epoch 2 took over and is replaying: it may
        // repeat the barrier.
        let g = [group(Some(1), 2, true, false)];
        assert_eq!(across_takeover(&g), AcrossTakeover::Wait);
        // It caught up without repeating it: the checkpoint would mix two
        // primaries' views.
        let g = [
            group(Some(1), 1, false, false),
            group(Some(1), 2, false, false),
        ];
        assert_eq!(across_takeover(&g), AcrossTakeover::Decline(1));
        // Done, but acknowledged by a replaced primary: still declined.
        let g = [group(Some(1), 2, false, true)];
        assert_eq!(across_takeover(&g), AcrossTakeover::Decline(0));
    }

    #[test]
    fn a_group_not_acknowledged_yet_keeps_the_checkpoint_waiting() {
        let g = [
            group(None, 2, false, false),
            group(Some(1), 1, false, false),
        ];
        assert_eq!(across_takeover(&g), AcrossTakeover::Wait);
        // A decline anywhere wins over waiting elsewhere.
        let g = [
            group(None, 2, false, false),
            group(Some(1), 2, false, false),
        ];
        assert_eq!(across_takeover(&g), AcrossTakeover::Decline(1));
    }
}

//! A group's failures: a primary's (a takeover, or restart-all when a
//! standby cannot mask it) and a standby's (replaced, until the group gives
//! up on standbys), and what the next takeover learns about the fault.

use super::{Group, NONE};
use crate::error::JobError;
use crate::metrics::RecoveryCause;
use crate::record::{Nanos, TupleId};
use crate::recovery::compose::{recovery_for, Failure, Recovery, RestartWhy};
use crate::runtime::task::Blame;
use std::sync::atomic::Ordering;

/// What a new primary learns about the failure it replaces.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) at: Nanos,
    pub(crate) cause: String,
    pub(crate) tuple: Option<TupleId>,
    /// The operator of the group that failed, when the error names one.
    pub(crate) operator: Option<String>,
    /// What caused it.
    pub(crate) reason: RecoveryCause,
    /// A child killed as stuck: what the liveness rule saw.
    pub(crate) evidence: Option<String>,
}

/// What the group knows of its primaries' failures.
#[derive(Default)]
pub(crate) struct Faults {
    /// The newest epoch whose failure was reported.
    reported: u64,
    /// The failure the next takeover answers.
    pub(crate) fault: Option<Fault>,
    /// The record the last failed primary failed on.
    last_tuple: Option<TupleId>,
}

/// Standby failures in one group (one attempt) after which it runs on
/// without a standby.
pub(crate) const MAX_STANDBY_FAILURES: u32 = 3;

impl Group {
    /// The primary of `epoch` failed with `e` at `at` (on record `tuple`,
    /// when known): notes why and marks the epoch failed, which wakes the
    /// standby to take over. Called from the panic hook before anything
    /// is printed (`wait` false: it never blocks, and leaves what it cannot
    /// do at once to the second call) and by the worker that caught the
    /// failure; the second call for an epoch changes nothing. A failure a
    /// standby cannot mask ([`recovery_for`]: a record that fails two
    /// primaries in a row, a group whose standbys are gone) fails the
    /// attempt instead: restart-all.
    pub(crate) fn primary_failed(
        &self,
        shared: &crate::runtime::JobShared,
        epoch: u64,
        e: JobError,
        blame: Blame,
        at: Nanos,
        wait: bool,
    ) {
        let tuple = blame.tuple;
        if self.done.load(Ordering::Acquire) || self.live.current() != epoch {
            return;
        }
        let mut f = if wait {
            self.faults.lock().unwrap_or_else(|p| p.into_inner())
        } else {
            match self.faults.try_lock() {
                Ok(f) => f,
                Err(_) => return,
            }
        };
        if f.reported >= epoch {
            drop(f);
            // The first report (from the panic hook, which must not block)
            // found no standby to wake — the primary failed before it had
            // asked for one, e.g. right after its own takeover: the
            // worker's report starts one, or the group waits for ever.
            if wait
                && self.live.current() == epoch
                && self.live.failed()
                && self.standby_worker.load(Ordering::Acquire) == NONE
            {
                self.ensure_standby(shared);
            }
            return;
        }
        f.reported = epoch;
        let failure = Failure {
            backed_up: true,
            standby_left: !self.standbys_gone.load(Ordering::Acquire),
            repeats_last_record: tuple.is_some() && tuple == f.last_tuple,
        };
        if let Recovery::RestartAll(why) = recovery_for(&failure) {
            drop(f);
            shared.note_fault_tuple(blame);
            shared.fail(JobError::NotMasked {
                why: why.to_string(),
                cause: Box::new(e),
            });
            return;
        }
        f.last_tuple = tuple;
        f.fault = Some(Fault {
            at,
            cause: e.to_string(),
            tuple,
            operator: e.operator().map(str::to_string),
            reason: e.recovery_cause(blame.injected),
            evidence: e.stuck_evidence().map(str::to_string),
        });
        drop(f);
        if self.live.report_failure(epoch) {
            let w = self.standby_worker.load(Ordering::Acquire);
            if w != NONE {
                shared.signals[w].wake();
            } else if wait {
                self.ensure_standby(shared);
            }
        }
        // Its standby may have spent the group's budget since the failure
        // was judged a takeover.
        self.fail_if_unmasked(shared);
    }

    /// A primary that failed waits for a standby to take over; once the
    /// group's standbys are gone none will: the attempt fails (restart-all,
    /// or the job's failure naming the budget), instead of waiting for
    /// ever. Once per group.
    fn fail_if_unmasked(&self, shared: &crate::runtime::JobShared) {
        if !self.standbys_gone.load(Ordering::Acquire)
            || !self.live.failed()
            || self.done.load(Ordering::Acquire)
            || self.gave_up.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let fault = self
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .fault
            .take();
        let (why, blame) = match &fault {
            Some(f) => (
                format!(
                    "{}; the primary had failed: {}",
                    RestartWhy::StandbysGone,
                    f.cause
                ),
                Blame {
                    tuple: f.tuple,
                    injected: f.reason == RecoveryCause::Injected,
                },
            ),
            None => (RestartWhy::StandbysGone.to_string(), Blame::default()),
        };
        shared.note_fault_tuple(blame);
        shared.fail(JobError::NotMasked {
            why,
            cause: Box::new(JobError::StandbyGone {
                operator: self.name.to_string(),
                instance: self.instance,
            }),
        });
    }

    /// Incarnation `inc`, primary of `epoch` (0: a standby), failed with `e`
    /// at `now`. A primary: see [`Group::primary_failed`]. A standby: a new
    /// one is started. A fenced old primary: nothing.
    pub(crate) fn incarnation_failed(
        &self,
        shared: &crate::runtime::JobShared,
        inc: u64,
        epoch: u64,
        e: JobError,
        blame: Blame,
        now: Nanos,
    ) {
        if self.done.load(Ordering::Acquire) {
            return;
        }
        if epoch != 0 {
            self.primary_failed(shared, epoch, e, blame, now, true);
            return;
        }
        let mut g = self.lock();
        if g.standby.is_some_and(|s| s.inc == inc) {
            if let Some(sb) = &shared.standby {
                sb.log.standby_failures.fetch_add(1, Ordering::Relaxed);
            }
            g.standby = None;
            self.standby_worker.store(NONE, Ordering::Release);
            g.standby_failures += 1;
            if g.standby_failures >= MAX_STANDBY_FAILURES {
                // A failure of the primary is restart-all from now on — and
                // one that happened already waits for no one.
                self.standbys_gone.store(true, Ordering::Release);
                drop(g);
                self.fail_if_unmasked(shared);
                return;
            }
            drop(g);
            self.ensure_standby(shared);
        }
    }
}

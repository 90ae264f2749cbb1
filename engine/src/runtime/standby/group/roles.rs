//! Who plays which role in a group: where a standby goes, the reader
//! slots incarnations hold in the queues (taken by a new standby, freed
//! when an incarnation is gone, reclaimed from a fenced primary by its
//! successor), and the primary that is done.

use super::{Group, Inner, StandbyRole};
use crate::standby::config::StandbyMode;
use std::sync::atomic::Ordering;

/// The worker a standby of a group whose primary runs on `primary` goes
/// to, among `workers`: a hot one (`hot`) on one of the `idle` workers
/// (those the job's own tasks leave idle) other than the primary's, the
/// `turn`-th in turn, when there is one; otherwise the worker after the
/// primary's.
pub(crate) fn standby_worker(
    primary: usize,
    workers: usize,
    idle: &[usize],
    hot: bool,
    turn: usize,
) -> usize {
    let free: Vec<usize> = idle.iter().copied().filter(|&w| w != primary).collect();
    match free.len() {
        n if hot && n > 0 => free[turn % n],
        _ => (primary + 1) % workers.max(1),
    }
}

impl Group {
    /// Registers a new standby incarnation on a worker other than the
    /// primary's when there is one, with a free reader slot; `None` (and
    /// the standby is owed) when every slot is held.
    pub(crate) fn next_standby(&self, g: &mut Inner) -> Option<(u64, usize)> {
        let Some(slot) = g.owners.iter().position(|o| o.is_none()) else {
            g.want_standby = true;
            return None;
        };
        let inc = g.next_incarnation;
        g.next_incarnation += 1;
        g.owners[slot] = Some(inc);
        g.want_standby = false;
        // A new standby has no copy of the state (whatever became of its
        // predecessor's): the primary's next point is whole — taken at its
        // next poll when the newest point may be a delta over a copy that
        // is gone, so that the time in which no standby could take over
        // from it is one archive long, not a point interval.
        let had_copy = self.applied.swap(0, Ordering::AcqRel) != 0
            || self.following_to.load(Ordering::Acquire) != 0;
        self.following_to.store(0, Ordering::Release);
        if self.follows && had_copy {
            self.point_wanted.store(true, Ordering::Release);
        }
        let w = standby_worker(
            g.primary_worker,
            self.workers,
            &self.idle_workers,
            self.mode == StandbyMode::Hot,
            self.instance + inc as usize,
        );
        g.standby = Some(StandbyRole {
            inc,
            worker: w,
            slot,
        });
        self.standby_worker.store(w, Ordering::Release);
        if self.mode == StandbyMode::Hot {
            self.reader_workers[1].store(w, Ordering::Release);
        }
        Some((inc, w))
    }

    /// Starts a standby if the group lacks one and is not done.
    pub(crate) fn ensure_standby(&self, shared: &crate::runtime::JobShared) {
        let mut g = self.lock();
        if g.standby.is_some()
            || self.done.load(Ordering::Acquire)
            || self.standbys_gone.load(Ordering::Acquire)
        {
            return;
        }
        if let Some((inc, w)) = self.next_standby(&mut g) {
            drop(g);
            shared.request_standby(w, self.node, self.instance, inc);
        }
    }

    /// The reader slot of incarnation `inc`, or `None` if it has none.
    pub(crate) fn slot_of(&self, inc: u64) -> Option<usize> {
        self.lock().owners.iter().position(|&o| o == Some(inc))
    }

    /// Incarnation `inc` is gone: its reader slot is free (its cursor
    /// released); a standby owed for want of a slot is started.
    pub(crate) fn free_slot(&self, shared: &crate::runtime::JobShared, inc: u64) {
        let mut g = self.lock();
        let Some(slot) = g.owners.iter().position(|&o| o == Some(inc)) else {
            return;
        };
        for q in &self.queues {
            q.release(slot);
        }
        g.owners[slot] = None;
        let want = g.want_standby && g.standby.is_none() && !self.done.load(Ordering::Acquire);
        drop(g);
        if want {
            self.ensure_standby(shared);
        }
    }

    /// The new primary releases the cursor of its fenced predecessor
    /// `inc` (reader slot `slot`) wherever that one is not copying entries
    /// out; `true` once released everywhere (or the predecessor is gone).
    pub(crate) fn reclaim(&self, inc: u64, slot: usize) -> bool {
        let g = self.lock();
        if g.owners[slot] != Some(inc) {
            return true;
        }
        let mut all = true;
        for q in &self.queues {
            all &= q.try_reclaim(slot);
        }
        all
    }

    /// The primary of `epoch` put its end marker in every ring: done.
    /// Refused (`false`) for a primary that was fenced meanwhile.
    pub(crate) fn mark_done(&self, shared: &crate::runtime::JobShared, epoch: u64) -> bool {
        let g = self.lock();
        if self.live.current() != epoch || g.primary_epoch != epoch {
            return false;
        }
        self.replaying.store(false, Ordering::Release);
        if !self.done.swap(true, Ordering::AcqRel) {
            drop(g);
            if let Some(sb) = &shared.standby {
                sb.live.fetch_sub(1, Ordering::AcqRel);
            }
            for s in &shared.signals {
                s.wake();
            }
        }
        true
    }
}

//! The standby groups of one attempt, and what they report: each takeover
//! as its new primary measured it, and what the sinks watch to time the
//! first output after it.

use super::group::Group;
use crate::metrics::RecoveryRecord;
use crate::record::{Nanos, TupleId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// One takeover, as the new primary measured it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Takeover {
    pub(crate) record: RecoveryRecord,
    pub(crate) fault_at: Nanos,
    /// The first output a consumer accepted from the new primary.
    pub(crate) accepted_at: Option<Nanos>,
    /// Tuple IDs of the first outputs consumers accepted (the sink watch).
    pub(crate) first_ids: Vec<TupleId>,
    /// The first of those seen at a sink.
    pub(crate) sink_at: Option<Nanos>,
    pub(crate) caught_up_at: Option<Nanos>,
    /// Sinks still look for `first_ids`.
    pub(crate) watched: bool,
}

/// What every standby group of an attempt reports to, and what sinks watch.
#[derive(Default)]
pub(crate) struct StandbyLog {
    pub(crate) takeovers: Mutex<Vec<Takeover>>,
    /// Takeovers whose first output has not been seen at a sink yet.
    pub(crate) watching: AtomicUsize,
    pub(crate) standby_failures: AtomicU64,
}

/// Outputs of a new primary a consumer reports for the sink watch.
pub(crate) const WATCH_IDS: usize = 16;

impl StandbyLog {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<Takeover>> {
        self.takeovers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sink received record `id` at `now` while a takeover is watched.
    #[cold]
    pub(crate) fn sink_saw(&self, id: TupleId, now: Nanos) {
        let mut t = self.lock();
        for k in t.iter_mut() {
            if k.watched && k.first_ids.contains(&id) {
                k.sink_at = Some(now);
                k.watched = false;
                self.watching.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// A consumer accepted output `id` of the new primary of takeover `k`.
    pub(crate) fn accepted(&self, k: usize, id: TupleId, now: Nanos) {
        let mut t = self.lock();
        if let Some(k) = t.get_mut(k) {
            k.accepted_at.get_or_insert(now);
            if k.first_ids.len() < WATCH_IDS && k.watched {
                k.first_ids.push(id);
            }
        }
    }

    /// Registers a takeover (watched by the sinks); returns its index.
    pub(crate) fn open(&self, t: Takeover) -> usize {
        let mut v = self.lock();
        v.push(Takeover { watched: true, ..t });
        self.watching.fetch_add(1, Ordering::AcqRel);
        v.len() - 1
    }

    /// Stops watching takeover `k` (nothing of it reached a sink in time).
    pub(crate) fn unwatch(&self, k: usize) {
        let mut v = self.lock();
        if let Some(t) = v.get_mut(k) {
            if std::mem::replace(&mut t.watched, false) {
                self.watching.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// The standby groups of one attempt, and what workers and sinks share
/// about them.
pub(crate) struct StandbyRun {
    /// Per `(chain head, instance)`.
    pub(crate) groups: HashMap<(usize, usize), Arc<Group>>,
    /// Per node: the head of the backed-up chain that holds it.
    pub(crate) backed: Vec<Option<usize>>,
    pub(crate) log: StandbyLog,
    /// Per worker: standby incarnations to build, `(node, instance, inc)`.
    pub(crate) inbox: Vec<Mutex<Vec<(usize, usize, u64)>>>,
    pub(crate) pending: Vec<AtomicBool>,
    /// Groups that are not done.
    pub(crate) live: AtomicUsize,
    /// This attempt's own directory (`standby-N` in the run directory, or
    /// a fresh one in `/dev/shm`), removed with the run — or, if the
    /// process is killed, by the next job's sweep.
    pub(crate) dir: crate::sys::scratch::ScratchDir,
    /// Process isolation: every incarnation's child, as it ended.
    pub(crate) children: Arc<Mutex<Vec<super::remote::ChildRecord>>>,
    /// Process isolation: cores the process may use that no worker is
    /// pinned to (empty when workers are not pinned): children are pinned
    /// to them in turn, so that an operator's child does not take its
    /// time from a worker's core.
    pub(crate) child_cores: Vec<usize>,
    /// The next of `child_cores` to give a child.
    pub(crate) next_child_core: AtomicUsize,
}

impl StandbyRun {
    /// The group of the chain that `head` heads (its input's queues).
    pub(crate) fn group(&self, head: usize, instance: usize) -> Option<&Arc<Group>> {
        self.groups.get(&(head, instance))
    }

    /// Whether `node` heads a backed-up chain (whatever instances of it
    /// this run's region holds).
    pub(crate) fn heads(&self, node: usize) -> bool {
        self.backed.get(node).copied().flatten() == Some(node)
    }

    /// Whether `node` is in a backed-up chain.
    pub(crate) fn backs(&self, node: usize) -> bool {
        self.backed.get(node).copied().flatten().is_some()
    }

    /// The group of the chain that holds `node` (its output's fenced rings).
    pub(crate) fn backing(&self, node: usize, instance: usize) -> Option<&Arc<Group>> {
        let head = (*self.backed.get(node)?)?;
        self.groups.get(&(head, instance))
    }

    /// Removes the groups' files and their directory now, while workers of
    /// a stopped attempt may still map them (their pages live until
    /// unmapped; nothing reads them by name again).
    pub(crate) fn remove_files(&self) {
        let _ = self.dir.remove();
    }
}

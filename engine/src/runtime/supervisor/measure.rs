//! Recovery measurement: how long each recovery took, per fault —
//! detection, restore, fault → first output at a sink, caught up — for a
//! restart (measured here while the new attempt runs) and for a standby's
//! takeovers (recorded by the groups, completed here at the end).

use super::Supervisor;
use crate::error::JobError;
use crate::metrics::{RecoveryKind, RecoveryRecord};
use crate::runtime::standby::run::StandbyRun;
use crate::runtime::task::Blame;
use std::sync::atomic::Ordering;

/// A recovery being measured.
pub(super) struct OpenRecovery {
    pub(super) record: RecoveryRecord,
    pub(super) failed_at: u64,
    pub(super) detected_at: u64,
    pub(super) attempt: u32,
}

/// What one sink's tally says after a restart (engine nanoseconds; 0 =
/// not yet).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SinkMarks {
    /// Its first output in the new attempt.
    pub(super) first_at: u64,
    /// Records it must redo before it is caught up (0: nothing to redo).
    pub(super) target: u64,
    /// When it had redone them.
    pub(super) caught_at: u64,
}

/// The sinks' progress after a restart, taken together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Progress {
    /// The earliest first output of any sink.
    pub(super) first_output: Option<u64>,
    /// When the last sink with something to redo had redone it (the first
    /// output when none had anything to redo), once every one has.
    pub(super) caught_up: Option<u64>,
}

/// Folds the sinks' marks into the recovery's progress.
pub(super) fn sinks_after_restart(sinks: impl IntoIterator<Item = SinkMarks>) -> Progress {
    let mut first = None::<u64>;
    let mut caught = None::<u64>;
    let mut all_caught = true;
    for t in sinks {
        if t.first_at != 0 {
            first = Some(first.map_or(t.first_at, |f| f.min(t.first_at)));
        }
        if t.target > 0 {
            if t.caught_at == 0 {
                all_caught = false;
            } else {
                caught = Some(caught.map_or(t.caught_at, |c| c.max(t.caught_at)));
            }
        }
    }
    Progress {
        first_output: first,
        caught_up: if all_caught { caught.or(first) } else { None },
    }
}

/// What a status lists of `all` (in order): the newest
/// [`INJECTED_KEPT`](crate::metrics::INJECTED_KEPT) that are `injected`,
/// and the newest [`RECENT`](crate::metrics::RECENT) others.
fn kept<T>(all: &[T], injected: impl Fn(&T) -> bool) -> impl Iterator<Item = &T> {
    let (mut inj, mut other) = (0, 0);
    let mut keep = vec![false; all.len()];
    for (i, x) in all.iter().enumerate().rev() {
        let (n, max) = if injected(x) {
            (&mut inj, crate::metrics::INJECTED_KEPT)
        } else {
            (&mut other, crate::metrics::RECENT)
        };
        if *n < max {
            *n += 1;
            keep[i] = true;
        }
    }
    all.iter().zip(keep).filter(|(_, k)| *k).map(|(x, _)| x)
}

/// The record of a restart caused by `err`, before its figures after the
/// restart are known.
pub(super) fn restart_record(
    failover: crate::recovery::restart::Failover,
    err: &JobError,
    blame: Blame,
    evidence: Option<String>,
    fault_at_us: u64,
    detect_us: u64,
) -> RecoveryRecord {
    let reason = err.recovery_cause(blame.injected);
    let evidence = err.stuck_evidence().map(str::to_string).or(evidence);
    RecoveryRecord {
        kind: match failover {
            crate::recovery::restart::Failover::Region => RecoveryKind::Region,
            _ => RecoveryKind::RestartAll,
        },
        operator: err.operator().unwrap_or("").to_string(),
        instance: error_instance(err),
        cause: err.to_string(),
        tuple_id: blame.tuple,
        fault_at_us,
        detect_us,
        restore_us: None,
        first_output_us: None,
        caught_up_us: None,
        replayed_tuples: 0,
        restored_checkpoint: None,
        skipped_checkpoints: Vec::new(),
        reason,
        unprovoked: reason.unprovoked(),
        evidence: evidence.filter(|_| reason.unprovoked()),
        restarted: Vec::new(),
        kept_running: Vec::new(),
    }
}

/// The operator instance an error names (0 when it names none).
fn error_instance(e: &JobError) -> usize {
    match e {
        JobError::OperatorPanicked { instance, .. }
        | JobError::OperatorProcessDied { instance, .. }
        | JobError::Io { instance, .. }
        | JobError::ChannelCut { instance, .. }
        | JobError::Stalled { instance, .. }
        | JobError::Restore { instance, .. }
        | JobError::SourceSeek { instance, .. }
        | JobError::StandbyGone { instance, .. } => *instance,
        JobError::NotMasked { cause, .. } => error_instance(cause),
        _ => 0,
    }
}

impl Supervisor {
    /// Task `t`'s name: its operators joined by `+`, and its instance.
    pub(super) fn task_name(&self, t: usize) -> String {
        let task = &self.plan.tasks[t];
        let names: Vec<&str> = task.members.iter().map(|&m| &*self.names[m]).collect();
        format!("{}#{}", names.join("+"), task.instance)
    }

    /// What a restart of `region` restarts (its tasks) and what runs on
    /// through it (the other regions' tasks that have not finished).
    pub(super) fn tasks_through(&self, region: usize) -> (Vec<String>, Vec<String>) {
        let restarted = self.regions[region]
            .tasks
            .iter()
            .map(|&t| self.task_name(t))
            .collect();
        let mut kept = Vec::new();
        for (r, g) in self.regions.iter().enumerate() {
            if r == region {
                continue;
            }
            let a = &self.attempts[r];
            for &t in &g.tasks {
                let done = self.members[t].iter().all(|k| a.finished.contains(k));
                if !done && !a.ended() {
                    kept.push(self.task_name(t));
                }
            }
        }
        (restarted, kept)
    }

    /// The tasks of a takeover's record: the backed-up chain's instance
    /// restarted (as its standby), every other task ran on.
    pub(super) fn tasks_of_takeover(&self, r: &mut RecoveryRecord) {
        let node = self.names.iter().position(|n| **n == *r.operator);
        let failed = node.and_then(|n| self.plan.task_of(n, r.instance));
        for t in 0..self.plan.tasks.len() {
            if Some(t) == failed {
                r.restarted.push(self.task_name(t));
            } else {
                r.kept_running.push(self.task_name(t));
            }
        }
    }

    pub(super) fn measure_recovery(&mut self, now: u64) {
        let Some(o) = &mut self.open else { return };
        let Some(attempt) = self.attempts.iter().find(|a| a.number == o.attempt) else {
            return;
        };
        let shared = &attempt.shared;
        if o.record.restore_us.is_none() && attempt.all_built() {
            o.record.restore_us = Some(now.saturating_sub(o.detected_at) / 1000);
        }
        let progress = sinks_after_restart(shared.sinks.values().map(|t| SinkMarks {
            first_at: t.first_at.load(Ordering::Relaxed),
            target: t.target.load(Ordering::Relaxed),
            caught_at: t.caught_at.load(Ordering::Relaxed),
        }));
        if o.record.first_output_us.is_none() {
            if let Some(first) = progress.first_output {
                o.record.first_output_us = Some(first.saturating_sub(o.failed_at) / 1000);
            }
        }
        if o.record.first_output_us.is_some() {
            if let Some(at) = progress.caught_up {
                o.record.caught_up_us = Some(at.saturating_sub(o.failed_at) / 1000);
            }
        }
        if o.record.restore_us.is_some()
            && o.record.first_output_us.is_some()
            && o.record.caught_up_us.is_some()
        {
            let o = self.open.take().expect("checked above");
            self.recovery.push(o.record);
        }
    }

    /// Publishes what a live reader sees of checkpoints, recoveries and
    /// standbys ([`crate::JobHandle::status`]).
    pub(super) fn publish_status(&self) {
        let mut s = crate::JobStatus {
            restarts: self.restarts,
            ..Default::default()
        };
        // The newest recovery with its first output: (fault, fault → first output).
        let mut newest = self
            .recovery
            .iter()
            .filter_map(|r| r.first_output_us.map(|f| (r.fault_at_us, f)))
            .max();
        if let Some(st) = &self.standby_stats {
            s.takeovers = st.takeovers;
        }
        if let Some(c) = &self.coord {
            s.checkpoints_started = c.stats.started;
            s.checkpoints_completed = c.stats.completed;
            s.checkpoints_failed = c.stats.failed;
            s.checkpoints_late = c.stats.late;
            s.checkpoint_last_duration_us = c.stats.durations_us.last().copied();
            s.checkpoint_bytes = c.stats.bytes;
            s.checkpoint_last_bytes = c.stats.sizes.last().map(|z| z.bytes);
            s.recent_checkpoints = c
                .stats
                .sizes
                .iter()
                .zip(&c.stats.durations_us)
                .rev()
                .take(crate::metrics::RECENT)
                .map(|(z, &d)| crate::metrics::RecentCheckpoint {
                    id: z.id,
                    bytes: z.bytes,
                    delta: z.delta,
                    duration_us: d,
                })
                .collect();
        }
        let mut history: Vec<crate::RecoveryRecord> = kept(&self.recovery, |r| {
            r.reason == crate::metrics::RecoveryCause::Injected
        })
        .cloned()
        .collect();
        if let Some(o) = &self.open {
            history.push(o.record.clone());
        }
        let mut count = |r: &crate::RecoveryRecord| {
            let (kind, cause) = (r.kind.name(), r.reason.name());
            match s
                .recoveries
                .iter_mut()
                .find(|c| c.kind == kind && c.cause == cause && c.unprovoked == r.unprovoked)
            {
                Some(c) => c.count += 1,
                None => s.recoveries.push(crate::RecoveryCount {
                    kind,
                    cause,
                    unprovoked: r.unprovoked,
                    count: 1,
                }),
            }
        };
        self.recovery.iter().for_each(&mut count);
        if let Some(o) = &self.open {
            count(&o.record);
        }
        for sb in self
            .attempts
            .iter()
            .filter_map(|a| a.shared.standby.as_ref())
        {
            let log = sb.log.lock();
            s.takeovers += log.len() as u64;
            log.iter().for_each(|t| count(&t.record));
            // As `record_takeovers` will write them, with what is known;
            // the newest only (the log holds every takeover of the
            // attempt, and this runs every 10 ms).
            let injected = |t: &crate::runtime::standby::run::Takeover| {
                t.record.reason == crate::metrics::RecoveryCause::Injected
            };
            history.extend(kept(&log, injected).map(|t| {
                let mut r = t.record.clone();
                let since = |at: u64| at.saturating_sub(t.fault_at) / 1000;
                r.first_output_us = t.sink_at.or(t.accepted_at).map(since);
                r.caught_up_us = t.caught_up_at.map(since);
                r
            }));
            let live = log
                .iter()
                .filter_map(|t| {
                    let first = t.sink_at.or(t.accepted_at)?;
                    Some((t.fault_at / 1000, first.saturating_sub(t.fault_at) / 1000))
                })
                .max();
            drop(log);
            newest = newest.max(live);
            s.standby_groups += sb.groups.len();
            let now = crate::sys::clock::monotonic_ns();
            for g in sb.groups.values() {
                let source_position = g.source.map_or(0, |src| {
                    self.metrics.counters[src][g.instance]
                        .records
                        .load(Ordering::Relaxed)
                });
                s.standby.push(crate::GroupStatus {
                    operator: g.name.to_string(),
                    chain: g
                        .members()
                        .iter()
                        .map(|&n| self.names[n].to_string())
                        .collect(),
                    instance: g.instance,
                    queue_entries: g.queue_entries(),
                    queue_bytes: g.queue_bytes(),
                    lag_records: g.lag_records(source_position),
                    point_age_us: now.saturating_sub(g.point_at.load(Ordering::Relaxed)) / 1000,
                });
                s.standby_queue_bytes += g.queue_bytes();
                s.standby_queue_entries += g.queue_entries();
                s.standby_points_published += g.snapshots.load(Ordering::Relaxed);
                s.standby_points_followed += g.followed.load(Ordering::Relaxed);
            }
        }
        s.last_recovery_first_output_us = newest.map(|(_, f)| f);
        s.standby
            .sort_by(|a, b| (&a.operator, a.instance).cmp(&(&b.operator, b.instance)));
        history.sort_by_key(|r| r.fault_at_us);
        s.recent_recoveries = history;
        s.ended_after_us = self.ended_after_us;
        self.metrics.publish_status(s);
    }

    /// A standby run's takeovers, in the order of their faults, become
    /// recovery records (figures measured from the fault), and its counts
    /// add to the report's standby figures (its groups' shape is
    /// [`Self::standby_shape`]'s, once, at the end).
    pub(super) fn record_takeovers(&mut self, sb: &StandbyRun) {
        let mut takeovers = std::mem::take(&mut *sb.log.lock());
        takeovers.sort_by_key(|t| t.fault_at);
        let stats = self.standby_stats.get_or_insert_with(Default::default);
        stats.takeovers += takeovers.len() as u64;
        stats.standby_failures += sb.log.standby_failures.load(Ordering::Relaxed);
        for g in sb.groups.values() {
            stats.queue_bytes_peak = stats
                .queue_bytes_peak
                .max(g.queue_peak.load(Ordering::Relaxed));
            stats.snapshots_published += g.snapshots.load(Ordering::Relaxed);
            stats.delta_snapshots_published += g.delta_snapshots.load(Ordering::Relaxed);
            stats.points_followed += g.followed.load(Ordering::Relaxed);
            stats.points_followed_whole += g.followed_whole.load(Ordering::Relaxed);
            stats.hot_fell_behind += g.hot_fell_behind.load(Ordering::Relaxed);
        }
        stats.children.extend(
            sb.children
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..),
        );
        for t in takeovers {
            let mut r = t.record;
            let since = |at: u64| at.saturating_sub(t.fault_at) / 1000;
            r.first_output_us = t.sink_at.or(t.accepted_at).map(since);
            r.caught_up_us = t.caught_up_at.map(since);
            self.tasks_of_takeover(&mut r);
            self.recovery.push(r);
        }
    }
}

impl Supervisor {
    /// The standby groups of the current attempts, every region's, in the
    /// report: how many, their chains, and how many standbys sit on idle
    /// workers.
    pub(super) fn standby_shape(&mut self) {
        let Some(stats) = &mut self.standby_stats else {
            return;
        };
        let runs = self
            .attempts
            .iter()
            .filter_map(|a| a.shared.standby.as_ref());
        let mut chains = Vec::new();
        stats.groups = 0;
        stats.standbys_on_idle_workers = 0;
        for sb in runs {
            stats.groups += sb.groups.len();
            stats.standbys_on_idle_workers +=
                sb.groups.values().filter(|g| g.standby_on_idle).count();
            chains.extend(sb.groups.values().map(|g| g.members()));
        }
        chains.sort();
        chains.dedup();
        stats.chains = chains
            .into_iter()
            .map(|c| c.iter().map(|&n| self.names[n].to_string()).collect())
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::RecoveryCause;
    use crate::TupleId;

    fn marks(first_at: u64, target: u64, caught_at: u64) -> SinkMarks {
        SinkMarks {
            first_at,
            target,
            caught_at,
        }
    }

    #[test]
    fn a_restart_record_names_the_failed_instance_and_its_record() {
        let err = JobError::OperatorPanicked {
            operator: "keyed".into(),
            instance: 3,
            message: "boom".into(),
        };
        let blame = Blame {
            tuple: Some(TupleId(42)),
            injected: false,
        };
        let r = restart_record(Default::default(), &err, blame, None, 5, 17);
        assert_eq!((r.operator.as_str(), r.instance), ("keyed", 3));
        assert_eq!(r.tuple_id, Some(TupleId(42)));
        assert_eq!(r.detect_us, 17);
        assert!(r.cause.contains("boom"));
        assert!(!r.unprovoked && r.restore_us.is_none());
        // An error that names no instance: instance 0.
        assert_eq!(r.reason, RecoveryCause::Panic);
        assert_eq!(
            restart_record(
                Default::default(),
                &JobError::Cancelled,
                Blame::default(),
                None,
                0,
                0
            )
            .instance,
            0
        );
    }

    #[test]
    fn first_output_is_the_earliest_sinks_and_caught_up_waits_for_the_last() {
        let p = sinks_after_restart([marks(50, 10, 90), marks(40, 5, 0)]);
        assert_eq!(p.first_output, Some(40));
        assert_eq!(p.caught_up, None);
        let p = sinks_after_restart([marks(50, 10, 90), marks(40, 5, 120)]);
        assert_eq!(p.caught_up, Some(120));
    }

    #[test]
    fn with_nothing_to_redo_a_restart_is_caught_up_at_its_first_output() {
        let p = sinks_after_restart([marks(0, 0, 0), marks(70, 0, 0)]);
        assert_eq!(
            p,
            Progress {
                first_output: Some(70),
                caught_up: Some(70)
            }
        );
        // No output yet: neither.
        let p = sinks_after_restart([marks(0, 0, 0)]);
        assert_eq!(p.first_output, None);
        assert_eq!(p.caught_up, None);
    }
}

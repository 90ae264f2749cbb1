//! How a job ends well: every attempt's workers finished (what is left
//! lands, the sinks commit their final epochs, the standby groups must owe
//! nothing), or it stopped with a savepoint (every task stops where it is,
//! nothing after the savepoint committed) — and the report either way.

use super::{now_ns, Supervisor};
use crate::checkpoint;
use crate::error::JobError;
use crate::metrics::{CheckpointStats, JobReport};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Supervisor {
    /// The attempt's workers all finished: lands what is left and reports.
    /// `None` when landing failed the attempt after all (a crash around
    /// the last checkpoint's publication, a failed commit): the next tick
    /// restarts it.
    pub(super) fn on_success(&mut self) -> Result<Option<JobReport>, JobError> {
        for a in &mut self.attempts {
            for (_, t) in std::mem::take(&mut a.threads) {
                let _ = t.join();
            }
        }
        // A checkpoint still being written lands first, then everything the
        // sinks staged after their last barrier becomes visible.
        if let Some(w) = self.coord.as_mut().and_then(|c| c.writing.take()) {
            match w.pending.wait() {
                Ok(p) => {
                    if let Some(c) = &mut self.coord {
                        c.published(w.id, w.started, &p, w.savepoint);
                    }
                    if !self.completed(w.id, w.written, &w.finished, p.manifest) {
                        return Ok(None);
                    }
                }
                Err(checkpoint::CheckpointError::Crashed { id, published }) => {
                    self.crashed(id, published);
                    return Ok(None);
                }
                Err(e) => {
                    if let Some(c) = &mut self.coord {
                        c.failed(format!("checkpoint {}: {e}", w.id));
                    }
                }
            }
        }
        // The job completed: everything the sinks staged in this attempt is
        // output — the final epochs, and the epochs of a checkpoint that was
        // still in flight when the input ended. It is committed and settled
        // before the job reports success, or the attempt fails.
        if let Err(f) = self.commit_final() {
            self.commit_failed(f, "the final commit");
            return Ok(None);
        }
        // Nothing the standby groups owed may be missing from a job that
        // ends successfully.
        self.end_standbys(true)?;
        let elapsed = self
            .attempts
            .iter()
            .map(|a| a.shared.finished_at.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let report = self.report(None, elapsed)?;
        // Checkpoints of a directory of the engine's own choosing go with it.
        drop(self.coord.take());
        Ok(Some(report))
    }

    /// The stop savepoint is durable (its output committed): every task
    /// stops where it is — no end of input — and the job reports, its
    /// `stopped_at` set. What the sinks staged after the savepoint's
    /// barrier stays uncommitted (`run` settles them), for the job started
    /// from the savepoint to write.
    pub(super) fn on_stopped(&mut self) -> Result<JobReport, JobError> {
        let at = self.stopping.take().expect("called when stopping");
        for r in 0..self.attempts.len() {
            self.stop_attempt(r, None);
        }
        self.end_standbys(false)?;
        self.report(Some(at), now_ns(self.origin))
    }

    /// The current attempts' standby runs: their takeovers recorded (each
    /// group's debts checked first, when `check`), their shape in the
    /// report.
    fn end_standbys(&mut self, check: bool) -> Result<(), JobError> {
        let runs: Vec<_> = self
            .attempts
            .iter()
            .filter_map(|a| a.shared.standby.clone())
            .collect();
        for sb in runs {
            if check {
                let mut groups: Vec<_> = sb.groups.values().collect();
                groups.sort_by_key(|g| (g.node, g.instance));
                for g in groups {
                    g.check_complete(&self.names)?;
                }
            }
            self.record_takeovers(&sb);
        }
        self.standby_shape();
        Ok(())
    }

    /// The job's report at its end (`elapsed`: engine nanoseconds):
    /// the recovery still being measured closed, a checkpoint still
    /// aligning counted pending, the dead letters flushed.
    fn report(&mut self, stopped_at: Option<PathBuf>, elapsed: u64) -> Result<JobReport, JobError> {
        // A restarted attempt can finish between two ticks (a short replay
        // at full rate): its figures are read once more before the record
        // closes, so it never ends with none.
        self.measure_recovery(now_ns(self.origin));
        if let Some(o) = self.open.take() {
            self.recovery.push(o.record);
        }
        // The last status a watcher reads: the job's whole history, and
        // its length.
        self.ended_after_us = Some(elapsed / 1000);
        self.publish_status();
        let mut checkpoints = CheckpointStats::default();
        if let Some(c) = &mut self.coord {
            // One still aligning when the input ended never completes.
            if c.in_flight.take().is_some() {
                c.stats.pending += 1;
            }
            checkpoints = c.stats.clone();
            checkpoints.dir = c.temp_dir.is_none().then(|| c.store.dir().to_path_buf());
        }
        let dead_letter_path =
            self.dead_letters
                .finish()
                .map_err(|(path, source)| JobError::Io {
                    operator: "<dead letters>".into(),
                    instance: 0,
                    context: "flushing the dead-letter file".into(),
                    path,
                    source,
                })?;
        Ok(JobReport {
            operators: crate::runtime::operator_stats(&self.graph, &self.metrics),
            stopped_at,
            latency: self.metrics.latency(),
            dead_letters: self.metrics.dead_letters.load(Ordering::Relaxed),
            dead_letter_path,
            elapsed: Duration::from_nanos(elapsed),
            workers: self.plan.workers,
            tasks: self.plan.tasks.len(),
            recovery: std::mem::take(&mut self.recovery),
            checkpoints,
            duplicates_emitted: self.duplicates,
            restarts: self.restarts,
            restored_from: self.restored_from.as_ref().map(|r| r.0.clone()),
            restore_skipped: self
                .restored_from
                .as_mut()
                .map(|r| std::mem::take(&mut r.1))
                .unwrap_or_default(),
            standby: self.standby_stats.take(),
        })
    }
}

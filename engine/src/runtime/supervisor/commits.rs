//! Phase two of the sinks' two-phase commit, and what a failure of it
//! does: each checkpoint's staged output made visible once the checkpoint
//! is durable ([`commit_all`]), the final output when the job completes
//! ([`Supervisor::commit_final`]), and every sink waited for as the job
//! ends ([`Supervisor::settle_sinks`]).
//!
//! **A sink's output is settled, or the job fails.** A commit that fails —
//! its own error, one a sink that publishes on a thread of its own reports
//! only when waited for (`Committer::settle`), or an injected `commit`
//! fault — fails the attempt ([`Supervisor::commit_failed`]): the restart
//! strategy decides, each restore commits what its checkpoint covers and
//! the job produces the rest again; with no restart left the job fails,
//! naming the sink. No job reports success with its output short.

use super::{Key, Supervisor};
use crate::error::JobError;
use crate::operator::{Committer, FINAL_EPOCH};
use crate::runtime::coord::Event;
use crate::runtime::probe::ProbeFactory;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The operator named in the error every region but the first gets when a
/// sink's commit fails: an echo of that one failure, not a failure of its
/// own (see `Supervisor::echoes`).
pub(super) const COMMIT_ECHO: &str = "<commit>";

/// A sink's commit that failed, and whether the job's fault injection
/// failed it.
pub(super) struct CommitFailure {
    pub(super) error: Box<JobError>,
    pub(super) injected: bool,
}

impl CommitFailure {
    /// Instance `instance` of sink `name` failed `what` (`injected`: the
    /// job's fault injection failed it) with `source`.
    fn of(
        name: &str,
        instance: usize,
        what: String,
        injected: bool,
        source: std::io::Error,
    ) -> Self {
        CommitFailure {
            error: Box::new(JobError::Io {
                operator: name.to_string(),
                instance,
                context: what,
                path: None,
                source,
            }),
            injected,
        }
    }
}

/// `commit`, unless `probes` fail it first (a `commit` fault at
/// `checkpoint`, as the sink's own commit would fail).
fn probed(
    probes: Option<&Arc<dyn ProbeFactory>>,
    (name, instance): (&str, usize),
    checkpoint: u64,
    what: impl FnOnce() -> String,
    commit: impl FnOnce() -> std::io::Result<()>,
) -> Result<(), CommitFailure> {
    if let Err(e) = probes.map_or(Ok(()), |p| p.commit(name, instance, checkpoint)) {
        return Err(CommitFailure::of(name, instance, what(), true, e));
    }
    commit().map_err(|e| CommitFailure::of(name, instance, what(), false, e))
}

/// Phase two for checkpoint `id`: every sink's output staged under it, and
/// the final epoch of the sinks in `finished`.
pub(super) fn commit_all(
    committers: &mut HashMap<Key, Box<dyn Committer>>,
    names: &[Arc<str>],
    probes: Option<&Arc<dyn ProbeFactory>>,
    id: u64,
    finished: &HashSet<Key>,
) -> Result<(), CommitFailure> {
    for (&(node, instance), c) in committers.iter_mut() {
        let what = || format!("committing the output of checkpoint {id}");
        probed(probes, (&names[node], instance), id, what, || {
            c.commit(id)?;
            if id != FINAL_EPOCH && finished.contains(&(node, instance)) {
                c.commit(FINAL_EPOCH)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// What a final commit failed at.
fn final_commit() -> String {
    "committing its final output (what it wrote after its last checkpoint barrier) at the end \
     of the job"
        .into()
}

impl Supervisor {
    /// A sink's output could not be staged or committed (`what`: which
    /// checkpoint, or the final commit): the commits stop at the first
    /// that fails, so sinks of every region may have left output
    /// uncommitted. Every region's attempt fails — one failure against the
    /// restart strategy, not one per region — and each restore commits
    /// what its checkpoint covers; the job produces the rest again. With
    /// no restart left, the job fails with the error, which names the sink.
    pub(super) fn commit_failed(&mut self, f: CommitFailure, what: &str) {
        let e = *f.error;
        if f.injected {
            // The job's fault injection failed it (a `commit` fault).
            self.attempts[0]
                .shared
                .note_fault_tuple(crate::runtime::task::Blame {
                    tuple: None,
                    injected: true,
                });
        }
        for a in &self.attempts[1..] {
            a.shared.fail(JobError::Io {
                operator: COMMIT_ECHO.into(),
                instance: 0,
                context: format!("{what}: another region's sink failed to commit"),
                path: None,
                source: std::io::Error::other(e.to_string()),
            });
        }
        self.attempts[0].shared.fail(e);
    }

    /// Commits every sink's final output, then waits until each has
    /// settled (a sink that publishes on a thread of its own reports a
    /// failure only when waited for; handing every sink its final commit
    /// first lets them publish at once): the first failure, naming the
    /// sink instance. Sinks in a fixed order, so that a run and its rerun
    /// commit alike.
    pub(super) fn commit_final(&mut self) -> Result<(), CommitFailure> {
        let mut keys: Vec<Key> = self.committers.keys().copied().collect();
        keys.sort_unstable();
        let probes = self.config.probes.clone();
        for &(node, instance) in &keys {
            let c = self
                .committers
                .get_mut(&(node, instance))
                .expect("listed above");
            let who = (&*self.names[node], instance);
            probed(probes.as_ref(), who, FINAL_EPOCH, final_commit, || {
                c.commit_final()
            })?;
        }
        for &(node, instance) in &keys {
            let c = self
                .committers
                .get_mut(&(node, instance))
                .expect("listed above");
            c.settle().map_err(|e| {
                CommitFailure::of(&self.names[node], instance, final_commit(), false, e)
            })?;
        }
        Ok(())
    }

    /// Waits until no sink of any attempt still changes its output on a
    /// thread of its own (a stopped attempt's sink may still be staging
    /// an epoch). A sink of the last attempts that did not settle fails
    /// the job — its output of a committed checkpoint (a savepoint's, say)
    /// may be missing — naming it; a stopped attempt's is only reported:
    /// the fencing of the next run keeps its output out.
    pub(super) fn settle_sinks(&mut self) -> Result<(), JobError> {
        while let Ok(e) = self.rx.try_recv() {
            if let Event::Committer { committer, .. } = e {
                self.retired.push(committer);
            }
        }
        let mut first = None;
        let mut keys: Vec<Key> = self.committers.keys().copied().collect();
        keys.sort_unstable();
        for (node, instance) in keys {
            let c = self
                .committers
                .get_mut(&(node, instance))
                .expect("listed above");
            if let Err(source) = c.settle() {
                first.get_or_insert(JobError::Io {
                    operator: self.names[node].to_string(),
                    instance,
                    context: "settling its committed output as the job ended".into(),
                    path: None,
                    source,
                });
            }
        }
        for c in &mut self.retired {
            if let Err(e) = c.settle() {
                eprintln!(
                    "tandem: a stopped attempt's sink had not settled as the job ended (its output \
                     is fenced off; the job's own is complete): {e}"
                );
            }
        }
        first.map_or(Ok(()), Err)
    }
}

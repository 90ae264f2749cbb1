//! Phase two: the committer that makes a durable, staged epoch visible
//! (see the [parent module](super)).

use super::files::{committed_path, epoch_name, sync_dir};
use super::SyncState;
use crate::operator::{Committer, FINAL_EPOCH};
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// How long [`FileCommitter::settle`] waits for the sync thread.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Phase two of one [`TransactionalFile`](super::TransactionalFile) instance: waits until a
/// pre-committed epoch is durable, then renames it into the output
/// directory.
#[derive(Debug, Clone)]
pub struct FileCommitter {
    pub(super) dir: PathBuf,
    pub(super) stage: PathBuf,
    pub(super) instance: usize,
    pub(super) sync: Arc<SyncState>,
}

impl FileCommitter {
    /// Waits until every epoch up to `checkpoint` this run handed over is
    /// durable and staged.
    pub fn prepare(&self, checkpoint: u64) -> io::Result<()> {
        let mut p = self.sync.progress.lock().unwrap_or_else(|p| p.into_inner());
        while p.error.is_none() && !p.staged_through(checkpoint) {
            p = self.sync.changed.wait(p).unwrap_or_else(|p| p.into_inner());
        }
        p.failure()
    }
}

impl Committer for FileCommitter {
    fn prepared(&mut self, checkpoint: u64) -> io::Result<bool> {
        let p = self.sync.progress.lock().unwrap_or_else(|p| p.into_inner());
        p.failure()?;
        Ok(p.staged_through(checkpoint))
    }

    fn commit_final(&mut self) -> io::Result<()> {
        self.commit(FINAL_EPOCH)?;
        // The run's staging directory is empty now (the in-progress file
        // went with the final epoch); one a stopped writer still uses
        // stays for the next run's `open` to fence.
        match fs::remove_dir(&self.stage) {
            Ok(()) => sync_dir(&self.dir.join(".staged")),
            Err(_) => Ok(()),
        }
    }

    /// Waits until the sync thread has finished with every epoch handed
    /// to it (staged it, or failed to), so nothing of this run touches the
    /// directory once the job has returned.
    fn settle(&mut self) -> io::Result<()> {
        let deadline = std::time::Instant::now() + SETTLE_WAIT;
        let mut p = self.sync.progress.lock().unwrap_or_else(|p| p.into_inner());
        while p.pending > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the sync thread of sink instance {} still stages {} epoch(s) after {}s",
                        self.instance,
                        p.pending,
                        SETTLE_WAIT.as_secs()
                    ),
                ));
            }
            p = self
                .sync
                .changed
                .wait_timeout(p, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    /// Commits every epoch this run staged up to `checkpoint` — including
    /// those of checkpoints that were abandoned before it: its state covers
    /// their records too. Epochs of other runs (a stopped attempt's late
    /// writer) are never in the list.
    fn commit(&mut self, checkpoint: u64) -> io::Result<()> {
        self.prepare(checkpoint)?;
        let due: Vec<u64> = {
            let mut p = self.sync.progress.lock().unwrap_or_else(|p| p.into_inner());
            let n = p.epochs.iter().take_while(|&&e| e <= checkpoint).count();
            p.epochs.drain(..n).collect()
        };
        if due.is_empty() {
            return Ok(());
        }
        for e in due {
            // Every epoch in the list had output and is staged (`prepare`):
            // one missing is output lost, never a case to skip quietly.
            let staged = self.stage.join(epoch_name(e));
            fs::rename(&staged, committed_path(&self.dir, self.instance, e)).map_err(|err| {
                io::Error::new(
                    err.kind(),
                    format!("committing {}: {err}", staged.display()),
                )
            })?;
        }
        sync_dir(&self.dir)
    }
}

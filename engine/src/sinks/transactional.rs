//! A two-phase-commit file sink (Flink's `TwoPhaseCommitSinkFunction`,
//! for files).
//!
//! Records written after the barrier of checkpoint `p` and up to the
//! barrier of checkpoint `c` form *epoch* `c`. They go to an in-progress
//! file; when the barrier of `c` reaches the sink,
//! [`TransactionalFile::pre_commit`] closes it and hands it to the
//! instance's sync thread, which fsyncs it and renames it to a staged file
//! named by `c` (phase one, off the data path); when checkpoint `c` is
//! complete, the supervisor calls the [`FileCommitter`], which renames it
//! into the output directory and fsyncs the directory (phase two). Before
//! it publishes checkpoint `c` at all, the supervisor waits (`prepare`) until
//! every sink's epoch `c` is durable and staged, so a published checkpoint
//! never names output a crash could still lose. A rename
//! is atomic, so an epoch's output is either wholly visible or not at all.
//! The output after the last barrier is staged as [`FINAL_EPOCH`] and
//! committed when the job completes.
//!
//! ```text
//! DIR/part-<instance>-<epoch:020>.jsonl                      committed output
//! DIR/.staged/part-<instance>.attempt-<a>/                   attempt a's staging directory:
//!     <epoch:020>.jsonl                                      pre-committed, not yet committed
//!     inprogress                                             being written
//!     closing-<c>                                            epoch c, being made durable
//! ```
//!
//! Recovery ([`TransactionalFile::open`] of an instance restored from
//! checkpoint `k`): staged epochs up to `k` belong to the complete
//! checkpoint (the process died between its completion and the commit; an
//! epoch of a checkpoint abandoned before `k` is covered by `k`'s state
//! too), as does the final epoch of an instance that had finished by `k`.
//! Those are committed; every other staged or in-progress file holds output
//! the restored job produces again, and is deleted. The committed files
//! are then exactly the output of the records `k` covers: no loss, no
//! duplicate. Committed epochs past `k` (`k` older than the newest
//! checkpoint, which was found damaged and skipped, or no usable
//! checkpoint at all) are output the restored job produces again: they are
//! moved to `DIR/.retracted/` rather than left to appear twice.
//!
//! **Fencing.** A stopped attempt's writer may still be running (a worker
//! abandoned in user code) and its sync thread still staging an epoch it
//! was handed. `open` empties every earlier attempt's staging directory
//! and removes it; a file created or renamed into it afterwards fails for
//! want of the directory, so nothing a stopped attempt does later can
//! appear in the output — not even at a later recovery, which commits
//! every staged epoch up to the checkpoint it restores. A committer
//! commits only the epochs its own run staged.

use crate::operator::{Committer, OperatorInfo, Restored, Sink, FINAL_EPOCH};
use crate::record::Record;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;

mod commit;
mod files;
#[cfg(test)]
mod tests;

pub use commit::FileCommitter;
use files::{committed_path, epoch_name, epochs_in, fence, name, stage_dir, sync_dir};

/// One sink instance's transactional output.
///
/// It is a [`Sink`] of any `T: Display`: each record is written as its
/// `Display` and a newline. Open one per instance in the sink's factory:
///
/// ```
/// use std::time::Duration;
/// use tandem::sinks::transactional::TransactionalFile;
/// use tandem::{CheckpointConfig, IterSource, JobBuilder, RuntimeConfig};
///
/// let out = std::env::temp_dir().join(format!("tandem-doc-txn-{}", std::process::id()));
/// let dir = out.clone();
/// let job = JobBuilder::new("numbers");
/// job.source("numbers", |_| IterSource((0..1000u64).map(|n| (n, n))))
///     .map("square", |n: u64| n * n)
///     .sink("out", move |info| TransactionalFile::for_instance(&dir, info).unwrap());
/// // Output is committed when a checkpoint completes, and at the end.
/// let config = RuntimeConfig::default()
///     .cores(1)
///     .checkpoint(CheckpointConfig::every(Duration::from_millis(10)));
/// job.build()?.run(&config)?;
/// let mut lines = 0;
/// for f in TransactionalFile::committed_files(&out)? {
///     lines += std::fs::read_to_string(f)?.lines().count();
/// }
/// assert_eq!(lines, 1000);
/// # std::fs::remove_dir_all(&out)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Without checkpoints everything is committed when the job completes.
///
/// Phase one does not block the data path on the disk: `pre_commit` hands
/// the epoch's file to this instance's sync thread (fsync, rename to
/// staged, fsync of the directory) and returns; the committer waits for
/// that epoch to be durable before it makes it visible.
#[derive(Debug)]
pub struct TransactionalFile {
    dir: PathBuf,
    /// This attempt's staging directory.
    stage: PathBuf,
    instance: usize,
    current: Option<BufWriter<File>>,
    sync: Arc<SyncState>,
    syncer: Option<(mpsc::Sender<SyncJob>, JoinHandle<()>)>,
}

/// Where the sync thread stands, shared with the committer.
#[derive(Debug, Default)]
struct SyncState {
    progress: Mutex<SyncProgress>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct SyncProgress {
    /// Every epoch handed over and not committed yet, oldest first.
    epochs: Vec<u64>,
    /// The newest epoch durable and staged (the sync thread takes epochs
    /// in order, so every one handed over before it is too).
    durable: Option<u64>,
    /// The first failure, which every later commit reports.
    error: Option<(io::ErrorKind, String)>,
    /// Epochs handed over that the sync thread has not finished with.
    pending: usize,
}

impl SyncProgress {
    /// Whether every epoch up to `checkpoint` handed over is durable and
    /// staged. Not just the epoch named `checkpoint`: the epochs of
    /// checkpoints abandoned before it, or every epoch of the run for the
    /// final commit, may still be on the sync thread.
    fn staged_through(&self, checkpoint: u64) -> bool {
        let newest = self.epochs.iter().rev().find(|&&e| e <= checkpoint);
        newest.is_none_or(|&e| self.durable.is_some_and(|d| d >= e))
    }

    fn failure(&self) -> io::Result<()> {
        match &self.error {
            Some((kind, msg)) => Err(io::Error::new(*kind, msg.clone())),
            None => Ok(()),
        }
    }
}

#[derive(Debug)]
struct SyncJob {
    epoch: u64,
    file: File,
    from: PathBuf,
    to: PathBuf,
}

impl Drop for TransactionalFile {
    fn drop(&mut self) {
        // The sync thread finishes the epochs already handed over on its
        // own (a committer may be waiting for them); the data path does not
        // wait for the disk, not even when a failed attempt is torn down.
        self.syncer.take();
    }
}

/// Settles what instance `instance`'s earlier attempts left in `dir`, given
/// the checkpoint it is restored from (`None`: a fresh start, where nothing
/// staged can be complete) and whether it had finished there.
fn settle(
    dir: &Path,
    instance: usize,
    checkpoint: Option<u64>,
    finished: bool,
    attempt: u32,
) -> io::Result<()> {
    let covered =
        |epoch: u64| checkpoint.is_some_and(|c| epoch <= c || (epoch == FINAL_EPOCH && finished));
    // Output committed past the checkpoint the instance restores — a
    // newer checkpoint was found damaged and skipped, or none was usable —
    // is output the restored job produces again: it is retracted (kept
    // aside in `.retracted/`, out of the output), or it would be there
    // twice. Never on a fresh job's first attempt, whose directory may
    // hold what an earlier job committed.
    if checkpoint.is_some() || attempt > 0 {
        let retracted = dir.join(".retracted");
        for epoch in epochs_in(dir, &format!("part-{instance}-"))? {
            if !covered(epoch) {
                fs::create_dir_all(&retracted)?;
                fs::rename(
                    committed_path(dir, instance, epoch),
                    retracted.join(name(instance, epoch)),
                )?;
            }
        }
    }
    // Every staging directory of this instance is an earlier attempt's
    // (or, after a crash, an earlier process's, which may have used this
    // very attempt number).
    let staged = dir.join(".staged");
    let prefix = format!("part-{instance}.attempt-");
    for e in fs::read_dir(&staged)? {
        let name = e?.file_name();
        if name.to_str().is_some_and(|n| n.starts_with(&prefix)) {
            fence(&staged.join(name), dir, instance, covered)?;
        }
    }
    Ok(())
}

impl TransactionalFile {
    /// Opens instance `instance`'s output in `dir` for attempt `attempt`,
    /// settling what an earlier run left behind given the checkpoint the
    /// instance is restored from (`None`: a fresh start, where nothing
    /// staged can be complete).
    pub fn open(
        dir: impl Into<PathBuf>,
        instance: usize,
        attempt: u32,
        restored: Option<Restored>,
    ) -> io::Result<Self> {
        let dir = dir.into();
        let staged = dir.join(".staged");
        fs::create_dir_all(&staged)?;
        let checkpoint = restored.as_ref().map(|r| r.checkpoint);
        settle(
            &dir,
            instance,
            checkpoint,
            restored.as_ref().is_some_and(|r| r.finished),
            attempt,
        )?;
        // Old instances gone at the parallelism the job restores at: their
        // staged output is settled here, as their own would have been.
        for &(old, finished) in restored.iter().flat_map(|r| &r.adopted) {
            settle(&dir, old, checkpoint, finished, attempt)?;
        }
        let stage = stage_dir(&dir, instance, attempt);
        fs::create_dir(&stage)?;
        sync_dir(&staged)?;
        sync_dir(&dir)?;
        Ok(TransactionalFile {
            dir,
            stage,
            instance,
            current: None,
            sync: Arc::default(),
            syncer: None,
        })
    }

    /// [`open`](Self::open) for the sink instance `info` describes (its
    /// instance, attempt and the checkpoint it is restored from): what a
    /// sink factory calls.
    pub fn for_instance(dir: impl Into<PathBuf>, info: &OperatorInfo) -> io::Result<Self> {
        Self::open(dir, info.instance, info.attempt, info.restored.clone())
    }

    fn in_progress_path(&self) -> PathBuf {
        self.stage.join("inprogress")
    }

    /// Appends bytes (whole lines) to the current epoch.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.current.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(self.in_progress_path())?;
            self.current = Some(BufWriter::with_capacity(1 << 16, f));
        }
        self.current
            .as_mut()
            .expect("opened above")
            .write_all(bytes)
    }

    /// Phase one for checkpoint `checkpoint` (its barrier reached the sink):
    /// closes the current epoch under that id and starts the next. The
    /// epoch becomes durable and staged on the sync thread; the committer
    /// waits for it. An epoch with no output stages nothing.
    pub fn pre_commit(&mut self, checkpoint: u64) -> io::Result<()> {
        let Some(w) = self.current.take() else {
            return Ok(());
        };
        let file = w.into_inner().map_err(|e| e.into_error())?;
        // A fresh in-progress name per epoch: the sync thread may still be
        // renaming the previous one.
        let moving = self.stage.join(format!("closing-{checkpoint}"));
        fs::rename(self.in_progress_path(), &moving)?;
        let job = SyncJob {
            epoch: checkpoint,
            file,
            from: moving,
            to: self.stage.join(epoch_name(checkpoint)),
        };
        if self.syncer.is_none() {
            let (tx, rx) = mpsc::channel::<SyncJob>();
            let state = Arc::clone(&self.sync);
            let stage = self.stage.clone();
            let t = std::thread::Builder::new()
                .name(format!("tandem-2pc-sync-{}", self.instance))
                .spawn(move || sync_thread(rx, state, stage))?;
            self.syncer = Some((tx, t));
        }
        {
            let mut p = self.sync.progress.lock().unwrap_or_else(|p| p.into_inner());
            p.epochs.push(checkpoint);
            p.pending += 1;
        }
        let (tx, _) = self.syncer.as_ref().expect("started above");
        tx.send(job)
            .map_err(|_| io::Error::other("the sink's sync thread has stopped"))
    }

    /// The phase-two handle of this instance.
    pub fn committer(&self) -> FileCommitter {
        FileCommitter {
            dir: self.dir.clone(),
            stage: self.stage.clone(),
            instance: self.instance,
            sync: Arc::clone(&self.sync),
        }
    }

    /// Committed output files of every instance in `dir`, in epoch order per
    /// instance.
    pub fn committed_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> = fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("part-") && n.ends_with(".jsonl"))
            })
            .collect();
        v.sort();
        Ok(v)
    }
}

/// Each record is one line: its `Display`, then `\n`. Exactly once with
/// checkpoints: phase one at each barrier, phase two by the supervisor once
/// the checkpoint is durable (see the [module docs](self)).
impl<T: std::fmt::Display + 'static> Sink<T> for TransactionalFile {
    fn write(&mut self, rec: Record<T>) -> io::Result<()> {
        let line = format!("{}\n", rec.value);
        TransactionalFile::write(self, line.as_bytes())
    }

    fn pre_commit(&mut self, checkpoint: u64) -> io::Result<()> {
        TransactionalFile::pre_commit(self, checkpoint)
    }

    fn committer(&self) -> Option<Box<dyn Committer>> {
        Some(Box::new(TransactionalFile::committer(self)))
    }
}

fn sync_thread(rx: mpsc::Receiver<SyncJob>, state: Arc<SyncState>, stage: PathBuf) {
    for job in rx {
        let r = job
            .file
            .sync_data()
            .and_then(|()| fs::rename(&job.from, &job.to))
            .and_then(|()| sync_dir(&stage));
        let mut p = state.progress.lock().unwrap_or_else(|p| p.into_inner());
        p.pending -= 1;
        match r {
            Ok(()) => p.durable = Some(job.epoch),
            Err(e) => {
                if p.error.is_none() {
                    p.error = Some((e.kind(), format!("staging epoch {}: {e}", job.epoch)));
                }
            }
        }
        drop(p);
        state.changed.notify_all();
    }
}

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

/// How long [`FileCommitter::settle`] waits for the sync thread.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Drop for TransactionalFile {
    fn drop(&mut self) {
        // The sync thread finishes the epochs already handed over on its
        // own (a committer may be waiting for them); the data path does not
        // wait for the disk, not even when a failed attempt is torn down.
        self.syncer.take();
    }
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
        let covered = |epoch: u64| {
            restored.is_some_and(|r| epoch <= r.checkpoint || (epoch == FINAL_EPOCH && r.finished))
        };
        // Output committed past the checkpoint the instance restores — a
        // newer checkpoint was found damaged and skipped, or none was
        // usable — is output the restored job produces again: it is
        // retracted (kept aside in `.retracted/`, out of the output), or
        // it would be there twice. Never on a fresh job's first attempt,
        // whose directory may hold what an earlier job committed.
        if restored.is_some() || attempt > 0 {
            let retracted = dir.join(".retracted");
            for epoch in epochs_in(&dir, &format!("part-{instance}-"))? {
                if !covered(epoch) {
                    fs::create_dir_all(&retracted)?;
                    fs::rename(
                        committed_path(&dir, instance, epoch),
                        retracted.join(name(instance, epoch)),
                    )?;
                }
            }
        }
        // Every staging directory of this instance is an earlier attempt's
        // (or, after a crash, an earlier process's, which may have used
        // this very attempt number).
        let prefix = format!("part-{instance}.attempt-");
        for e in fs::read_dir(&staged)? {
            let name = e?.file_name();
            if name.to_str().is_some_and(|n| n.starts_with(&prefix)) {
                fence(&staged.join(name), &dir, instance, covered)?;
            }
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
        Self::open(dir, info.instance, info.attempt, info.restored)
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

/// Phase two of one [`TransactionalFile`] instance: waits until a
/// pre-committed epoch is durable, then renames it into the output
/// directory.
#[derive(Debug, Clone)]
pub struct FileCommitter {
    dir: PathBuf,
    stage: PathBuf,
    instance: usize,
    sync: Arc<SyncState>,
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

fn name(instance: usize, epoch: u64) -> String {
    format!("part-{instance}-{}", epoch_name(epoch))
}

fn epoch_name(epoch: u64) -> String {
    format!("{epoch:020}.jsonl")
}

fn stage_dir(dir: &Path, instance: usize, attempt: u32) -> PathBuf {
    dir.join(".staged")
        .join(format!("part-{instance}.attempt-{attempt}"))
}

fn committed_path(dir: &Path, instance: usize, epoch: u64) -> PathBuf {
    dir.join(name(instance, epoch))
}

/// The epochs of the files in `dir` named `<prefix><epoch:020>.jsonl`.
fn epochs_in(dir: &Path, prefix: &str) -> io::Result<Vec<u64>> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)? {
        let name = e?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(epoch) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(".jsonl"))
            .and_then(|r| r.parse::<u64>().ok())
        {
            v.push(epoch);
        }
    }
    v.sort_unstable();
    Ok(v)
}

/// Settles and removes a stopped attempt's staging directory `stage`:
/// commits its staged epochs the restored checkpoint covers, deletes the
/// rest. A sync thread of that attempt may still rename an epoch into it
/// meanwhile: the directory is emptied again until it can be removed,
/// after which nothing can enter it.
fn fence(
    stage: &Path,
    dir: &Path,
    instance: usize,
    covered: impl Fn(u64) -> bool,
) -> io::Result<()> {
    for _ in 0..1_000 {
        for e in fs::read_dir(stage)? {
            let path = e?.path();
            let epoch = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".jsonl"))
                .and_then(|n| n.parse::<u64>().ok());
            match epoch {
                Some(epoch) if covered(epoch) => {
                    fs::rename(&path, committed_path(dir, instance, epoch))?
                }
                // Gone already: a stopped attempt's sync thread moved it.
                _ => remove_if_present(&path)?,
            }
        }
        match fs::remove_dir(stage) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "{}: a stopped attempt keeps writing into it",
        stage.display()
    )))
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tandem-2pc-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn committed_text(dir: &Path) -> String {
        TransactionalFile::committed_files(dir)
            .unwrap()
            .iter()
            .map(|p| fs::read_to_string(p).unwrap())
            .collect()
    }

    fn restored(checkpoint: u64, finished: bool) -> Option<Restored> {
        Some(Restored {
            checkpoint,
            finished,
        })
    }

    #[test]
    fn output_is_visible_only_after_its_checkpoint_completes() {
        let dir = tempdir("visible");
        let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        let mut c = s.committer();
        s.write(b"a\n").unwrap();
        s.pre_commit(1).unwrap();
        s.write(b"b\n").unwrap();
        assert_eq!(committed_text(&dir), "", "nothing before completion");
        c.commit(1).unwrap();
        assert_eq!(committed_text(&dir), "a\n");
        s.pre_commit(2).unwrap();
        c.commit(2).unwrap();
        assert_eq!(committed_text(&dir), "a\nb\n");
        c.commit(3).unwrap(); // nothing staged under 3: not an error
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn recovery_commits_the_restored_epoch_and_drops_the_rest() {
        let dir = tempdir("recover");
        let mut s = TransactionalFile::open(&dir, 3, 0, None).unwrap();
        s.write(b"e1\n").unwrap();
        s.pre_commit(1).unwrap();
        s.write(b"e2\n").unwrap();
        s.pre_commit(2).unwrap();
        s.write(b"e3-partial\n").unwrap();
        s.current.as_mut().unwrap().flush().unwrap();
        // Crash: checkpoint 1 completed — so its epoch was prepared
        // (durable) before it was published — but its commit never ran;
        // 2 did not complete.
        let c = s.committer();
        c.prepare(1).unwrap();
        c.prepare(2).unwrap();
        drop(s);
        TransactionalFile::open(&dir, 3, 1, restored(1, false)).unwrap();
        assert_eq!(committed_text(&dir), "e1\n");
        let left: Vec<_> = fs::read_dir(dir.join(".staged"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["part-3.attempt-1"], "attempt 0's files are gone");
        assert!(
            fs::read_dir(stage_dir(&dir, 3, 1))
                .unwrap()
                .next()
                .is_none(),
            "the new attempt's staging directory starts empty"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn recovery_also_commits_an_abandoned_epoch_before_the_restored_one() {
        let dir = tempdir("recover-abandoned");
        let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        let c = s.committer();
        for (e, text) in [(1, &b"e1\n"[..]), (2, b"e2\n"), (3, b"e3\n")] {
            s.write(text).unwrap();
            s.pre_commit(e).unwrap();
            c.prepare(e).unwrap();
        }
        drop(s);
        // Checkpoint 1 was abandoned, 2 completed (crash before its commit),
        // 3 never completed.
        TransactionalFile::open(&dir, 0, 1, restored(2, false)).unwrap();
        assert_eq!(committed_text(&dir), "e1\ne2\n");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_final_epoch_survives_only_for_an_instance_restored_as_finished() {
        for finished in [false, true] {
            let dir = tempdir("final");
            let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
            s.write(b"tail\n").unwrap();
            s.pre_commit(FINAL_EPOCH).unwrap();
            s.committer().prepare(FINAL_EPOCH).unwrap();
            drop(s);
            TransactionalFile::open(&dir, 0, 1, restored(4, finished)).unwrap();
            let expect = if finished { "tail\n" } else { "" };
            assert_eq!(committed_text(&dir), expect, "finished: {finished}");
            fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn a_completed_checkpoint_commits_the_epochs_of_abandoned_ones_before_it() {
        let dir = tempdir("abandoned");
        let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        let mut c = s.committer();
        s.write(b"e1\n").unwrap();
        s.pre_commit(1).unwrap(); // checkpoint 1 times out
        s.write(b"e2\n").unwrap();
        s.pre_commit(2).unwrap();
        c.commit(2).unwrap();
        assert_eq!(committed_text(&dir), "e1\ne2\n");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn at_job_end_every_epoch_of_the_run_is_committed() {
        let dir = tempdir("final-all");
        let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        let mut c = s.committer();
        s.write(b"e1\n").unwrap();
        s.pre_commit(1).unwrap();
        c.commit(1).unwrap();
        // Checkpoint 2's barrier passed, but the input ended before it
        // completed: its epoch still belongs to the output.
        s.write(b"e2\n").unwrap();
        s.pre_commit(2).unwrap();
        s.write(b"tail\n").unwrap();
        s.pre_commit(FINAL_EPOCH).unwrap();
        c.commit_final().unwrap();
        assert_eq!(committed_text(&dir), "e1\ne2\ntail\n");
        fs::remove_dir_all(dir).unwrap();
    }

    /// The CI failure of stop 34: the input ended right after a barrier, so
    /// the final commit named an epoch with no output while the epoch
    /// before it was still on the sync thread; the commit skipped it as
    /// "nothing staged", and a whole instance's output was lost.
    #[test]
    fn a_commit_waits_for_every_earlier_epoch_still_on_the_sync_thread() {
        for round in 0..20 {
            let dir = tempdir("wait-earlier");
            let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
            let mut c = s.committer();
            s.write(b"e1\n").unwrap();
            s.pre_commit(1).unwrap();
            s.write(b"e2\n").unwrap();
            s.pre_commit(2).unwrap();
            s.pre_commit(FINAL_EPOCH).unwrap(); // no output after 2
            if round % 2 == 0 {
                c.commit_final().unwrap();
            } else {
                // Checkpoints 1 and 2 were abandoned; 3 (no output) completed.
                c.commit(3).unwrap();
            }
            assert_eq!(committed_text(&dir), "e1\ne2\n", "round {round}");
            fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn a_checkpoint_is_prepared_only_once_every_epoch_before_it_is_staged() {
        for _ in 0..20 {
            let dir = tempdir("prepared");
            let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
            let mut c = s.committer();
            s.write(b"e1\n").unwrap();
            s.pre_commit(1).unwrap();
            // Checkpoint 2 saw no output at this sink.
            let ready = c.prepared(2).unwrap();
            let staged = stage_dir(&dir, 0, 0).join(epoch_name(1)).exists();
            assert!(!ready || staged, "prepared(2) before epoch 1 was staged");
            c.prepare(2).unwrap();
            assert!(c.prepared(2).unwrap());
            assert!(stage_dir(&dir, 0, 0).join(epoch_name(1)).exists());
            drop(s);
            fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn a_late_writer_of_a_stopped_attempt_cannot_touch_the_new_one() {
        let dir = tempdir("fence");
        let mut old = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        old.write(b"old\n").unwrap();
        let mut new = TransactionalFile::open(&dir, 0, 1, None).unwrap();
        new.write(b"new\n").unwrap();
        // The stalled writer wakes and pre-commits an id of its attempt:
        // its in-progress file is gone (the new attempt cleared it).
        assert!(old.pre_commit(7).is_err());
        new.pre_commit(9).unwrap();
        let mut c = new.committer();
        c.commit(9).unwrap();
        assert_eq!(committed_text(&dir), "new\n");
        fs::remove_dir_all(dir).unwrap();
    }

    /// Without the fence, an epoch a stopped attempt staged after the next
    /// attempt opened sat in `.staged` until a later recovery restored a
    /// checkpoint past its id — and committed it, a second copy of output
    /// the restored job had produced again.
    #[test]
    fn a_stopped_attempt_cannot_stage_an_epoch_a_later_recovery_would_commit() {
        let dir = tempdir("fence-late");
        let mut old = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        let mut new = TransactionalFile::open(&dir, 0, 1, None).unwrap();
        // The stopped attempt goes on after the new one opened: a new
        // epoch, staged under checkpoint 7.
        let late = old
            .write(b"late\n")
            .and_then(|()| old.pre_commit(7))
            .and_then(|()| old.committer().prepare(7));
        assert!(late.is_err(), "the stopped attempt staged an epoch");
        new.write(b"new\n").unwrap();
        new.pre_commit(9).unwrap();
        new.committer().commit(9).unwrap();
        drop((old, new));
        // Attempt 2 restores checkpoint 9, which covers id 7.
        TransactionalFile::open(&dir, 0, 2, restored(9, false)).unwrap();
        assert_eq!(committed_text(&dir), "new\n");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn settle_returns_once_the_sync_thread_is_done_and_the_run_leaves_no_staging_directory() {
        let dir = tempdir("settle");
        let mut s = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        let mut c = s.committer();
        for e in 1..=5 {
            s.write(format!("e{e}\n").as_bytes()).unwrap();
            s.pre_commit(e).unwrap();
        }
        drop(s);
        c.settle().unwrap();
        // Everything handed over is staged: nothing moves any more.
        assert_eq!(fs::read_dir(stage_dir(&dir, 0, 0)).unwrap().count(), 5);
        c.commit_final().unwrap();
        assert_eq!(committed_text(&dir), "e1\ne2\ne3\ne4\ne5\n");
        assert!(!stage_dir(&dir, 0, 0).exists());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn instances_recover_independently() {
        let dir = tempdir("instances");
        let mut a = TransactionalFile::open(&dir, 0, 0, None).unwrap();
        let mut b = TransactionalFile::open(&dir, 1, 0, None).unwrap();
        a.write(b"a1\n").unwrap();
        b.write(b"b1\n").unwrap();
        a.pre_commit(1).unwrap();
        b.pre_commit(1).unwrap();
        a.committer().prepare(1).unwrap();
        b.committer().prepare(1).unwrap();
        drop((a, b));
        TransactionalFile::open(&dir, 0, 1, restored(1, false)).unwrap();
        // Instance 1 not reopened yet: its epoch stays staged.
        assert_eq!(committed_text(&dir), "a1\n");
        TransactionalFile::open(&dir, 1, 1, restored(1, false)).unwrap();
        assert_eq!(committed_text(&dir), "a1\nb1\n");
        fs::remove_dir_all(dir).unwrap();
    }
}

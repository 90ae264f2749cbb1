//! A two-phase-commit file sink (Flink's `TwoPhaseCommitSinkFunction`,
//! for files).
//!
//! Records written between checkpoint `c - 1` and checkpoint `c` belong to
//! *epoch* `c`. They go to a staged file; when the barrier of `c` reaches the
//! sink, [`TransactionalFile::pre_commit`] flushes and fsyncs it (phase one);
//! when the job's checkpoint `c` is complete, [`TransactionalFile::commit`]
//! renames it into the output directory and fsyncs the directory (phase
//! two). A rename is atomic, so an epoch's output is either wholly visible
//! or not at all.
//!
//! ```text
//! DIR/part-<instance>-<epoch:020>.jsonl         committed output
//! DIR/.staged/part-<instance>-<epoch:020>.jsonl  written, not yet committed
//! ```
//!
//! Recovery ([`TransactionalFile::recover`], given the last *complete*
//! checkpoint `k`): staged epochs `≤ k` were pre-committed before `k`
//! completed, so they are committed now (the crash fell between completion
//! and commit); staged epochs `> k` hold output the restarted job will
//! produce again, so they are deleted. The committed files are then exactly
//! the output of the records the checkpoint covers: no loss, no duplicate.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// One sink instance's transactional output.
#[derive(Debug)]
pub struct TransactionalFile {
    dir: PathBuf,
    instance: usize,
    epoch: u64,
    current: Option<BufWriter<File>>,
    /// Epochs pre-committed and waiting for their checkpoint to complete.
    pending: Vec<u64>,
}

impl TransactionalFile {
    /// Opens instance `instance`'s output in `dir` and recovers it to the
    /// last complete checkpoint `last_complete` (0: none), so the next record
    /// belongs to epoch `last_complete + 1`.
    pub fn recover(
        dir: impl Into<PathBuf>,
        instance: usize,
        last_complete: u64,
    ) -> io::Result<Self> {
        let dir = dir.into();
        let staged = dir.join(".staged");
        fs::create_dir_all(&staged)?;
        for epoch in staged_epochs(&staged, instance)? {
            let path = staged_path(&dir, instance, epoch);
            if epoch <= last_complete {
                fs::rename(&path, committed_path(&dir, instance, epoch))?;
            } else {
                fs::remove_file(&path)?;
            }
        }
        sync_dir(&staged)?;
        sync_dir(&dir)?;
        Ok(TransactionalFile {
            dir,
            instance,
            epoch: last_complete + 1,
            current: None,
            pending: Vec::new(),
        })
    }

    /// The epoch records written now belong to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Appends bytes (whole lines) to the current epoch.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.current.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(staged_path(&self.dir, self.instance, self.epoch))?;
            self.current = Some(BufWriter::with_capacity(1 << 16, f));
        }
        self.current
            .as_mut()
            .expect("opened above")
            .write_all(bytes)
    }

    /// Phase one for checkpoint `checkpoint` (the barrier reached the sink):
    /// makes the current epoch durable and starts the next one.
    pub fn pre_commit(&mut self, checkpoint: u64) -> io::Result<()> {
        if checkpoint != self.epoch {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "pre-commit of checkpoint {checkpoint} during epoch {}",
                    self.epoch
                ),
            ));
        }
        if let Some(w) = self.current.take() {
            let f = w.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            self.pending.push(self.epoch);
        }
        self.epoch += 1;
        Ok(())
    }

    /// Phase two: checkpoint `checkpoint` is complete, so every epoch up to
    /// it becomes visible.
    pub fn commit(&mut self, checkpoint: u64) -> io::Result<()> {
        let (done, keep): (Vec<u64>, Vec<u64>) =
            self.pending.iter().partition(|&&e| e <= checkpoint);
        for &e in &done {
            fs::rename(
                staged_path(&self.dir, self.instance, e),
                committed_path(&self.dir, self.instance, e),
            )?;
        }
        self.pending = keep;
        if !done.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(())
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

fn name(instance: usize, epoch: u64) -> String {
    format!("part-{instance}-{epoch:020}.jsonl")
}

fn staged_path(dir: &Path, instance: usize, epoch: u64) -> PathBuf {
    dir.join(".staged").join(name(instance, epoch))
}

fn committed_path(dir: &Path, instance: usize, epoch: u64) -> PathBuf {
    dir.join(name(instance, epoch))
}

fn staged_epochs(staged: &Path, instance: usize) -> io::Result<Vec<u64>> {
    let prefix = format!("part-{instance}-");
    let mut v = Vec::new();
    for e in fs::read_dir(staged)? {
        let name = e?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(epoch) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".jsonl"))
            .and_then(|r| r.parse::<u64>().ok())
        {
            v.push(epoch);
        }
    }
    v.sort_unstable();
    Ok(v)
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

    #[test]
    fn output_is_visible_only_after_its_checkpoint_completes() {
        let dir = tempdir("visible");
        let mut s = TransactionalFile::recover(&dir, 0, 0).unwrap();
        s.write(b"a\n").unwrap();
        s.pre_commit(1).unwrap();
        s.write(b"b\n").unwrap();
        assert_eq!(committed_text(&dir), "", "nothing before completion");
        s.commit(1).unwrap();
        assert_eq!(committed_text(&dir), "a\n");
        s.pre_commit(2).unwrap();
        s.commit(2).unwrap();
        assert_eq!(committed_text(&dir), "a\nb\n");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn recovery_commits_pre_committed_epochs_of_complete_checkpoints_and_drops_the_rest() {
        let dir = tempdir("recover");
        let mut s = TransactionalFile::recover(&dir, 3, 0).unwrap();
        s.write(b"e1\n").unwrap();
        s.pre_commit(1).unwrap();
        s.write(b"e2\n").unwrap();
        s.pre_commit(2).unwrap();
        s.write(b"e3-partial\n").unwrap();
        s.current.as_mut().unwrap().flush().unwrap();
        // Crash: checkpoint 1 completed (its commit never ran), 2 did not.
        drop(s);
        let s = TransactionalFile::recover(&dir, 3, 1).unwrap();
        assert_eq!(committed_text(&dir), "e1\n");
        assert_eq!(s.epoch(), 2, "the replay writes epoch 2 again");
        assert!(
            fs::read_dir(dir.join(".staged")).unwrap().next().is_none(),
            "uncommitted epochs are gone"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_pre_commit_out_of_order_is_an_error() {
        let dir = tempdir("order");
        let mut s = TransactionalFile::recover(&dir, 0, 4).unwrap();
        assert!(s.pre_commit(4).is_err());
        assert!(s.pre_commit(5).is_ok());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn instances_recover_independently() {
        let dir = tempdir("instances");
        let mut a = TransactionalFile::recover(&dir, 0, 0).unwrap();
        let mut b = TransactionalFile::recover(&dir, 1, 0).unwrap();
        a.write(b"a1\n").unwrap();
        b.write(b"b1\n").unwrap();
        a.pre_commit(1).unwrap();
        b.pre_commit(1).unwrap();
        drop((a, b));
        TransactionalFile::recover(&dir, 0, 1).unwrap();
        // Instance 1 not recovered yet: its epoch stays staged.
        assert_eq!(committed_text(&dir), "a1\n");
        TransactionalFile::recover(&dir, 1, 1).unwrap();
        assert_eq!(committed_text(&dir), "a1\nb1\n");
        fs::remove_dir_all(dir).unwrap();
    }
}

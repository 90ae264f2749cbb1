//! The pipeline's sink and its output: JSONL lines, written directly to a
//! part file per instance or transactionally per checkpoint, and merged
//! into one file at the end.

use super::PaperOut;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tandem::sinks::transactional::{FileCommitter, TransactionalFile};
use tandem::{Committer, Record, Sink, FINAL_EPOCH};

/// Appends the JSONL line of `o` (stable field order) to `buf`.
pub fn write_line(buf: &mut Vec<u8>, o: &PaperOut) {
    let mut n = itoa::Buffer::new();
    let mut field = |buf: &mut Vec<u8>, name: &str, v: u64| {
        buf.extend_from_slice(b",\"");
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(b"\":");
        buf.extend_from_slice(n.format(v).as_bytes());
    };
    match o {
        PaperOut::Record(l) => {
            let f = &l.flat;
            buf.extend_from_slice(b"{\"type\":\"record\"");
            field(buf, "seq", f.seq);
            field(buf, "ts", f.ts);
            field(buf, "answer_id", f.answer_id);
            field(buf, "user_id", f.user_id as u64);
            buf.extend_from_slice(b",\"user_name\":");
            tandem::runtime::json_str(buf, &f.user_name);
            field(buf, "reputation", f.reputation as u64);
            field(buf, "likes", f.likes as u64);
            field(buf, "favorites", f.favorites as u64);
            field(buf, "comments", f.comments as u64);
            field(buf, "text_len", f.text_len as u64);
            field(buf, "word_count", f.word_count as u64);
            field(buf, "score", f.score);
            field(buf, "level", l.level as u64);
        }
        PaperOut::Summary {
            user_id,
            count,
            likes_sum,
        } => {
            buf.extend_from_slice(b"{\"type\":\"summary\"");
            field(buf, "user_id", *user_id as u64);
            field(buf, "count", *count);
            field(buf, "likes_sum", *likes_sum);
        }
    }
    buf.extend_from_slice(b"}\n");
}

/// The lines of the job's output, counted as they are committed: without
/// an output file or with a transactional one, a sink instance's counts
/// since its last checkpoint barrier are staged under that checkpoint and
/// added here when it completes (or the job does) — what an attempt wrote
/// after its last completed checkpoint is never counted, as it is never
/// output. A direct sink (output visible at once) adds its counts when it
/// finishes; after restarts its file is what counts.
#[derive(Default, Debug)]
pub struct SinkCounts {
    /// Record lines.
    pub records: AtomicU64,
    /// Summary lines.
    pub summaries: AtomicU64,
}

/// One sink instance's counts staged per epoch, in epoch order:
/// `(epoch, records, summaries)`.
type StagedCounts = Arc<Mutex<Vec<(u64, u64, u64)>>>;

/// Phase two of a counted sink: commits the file's epochs (if it writes
/// one), then the counts staged under them.
struct CountCommitter {
    file: Option<FileCommitter>,
    staged: StagedCounts,
    counts: Arc<SinkCounts>,
}

impl CountCommitter {
    /// Adds the counts staged under epochs up to `upto`.
    fn commit_counts(&self, upto: u64) {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        let n = staged.iter().take_while(|e| e.0 <= upto).count();
        for (_, records, summaries) in staged.drain(..n) {
            self.counts.records.fetch_add(records, Ordering::Relaxed);
            self.counts
                .summaries
                .fetch_add(summaries, Ordering::Relaxed);
        }
    }
}

impl Committer for CountCommitter {
    fn prepared(&mut self, checkpoint: u64) -> std::io::Result<bool> {
        match &mut self.file {
            Some(f) => f.prepared(checkpoint),
            None => Ok(true),
        }
    }

    /// Every epoch this instance staged up to `checkpoint`, as the file's
    /// committer does (those of abandoned checkpoints before it included).
    fn commit(&mut self, checkpoint: u64) -> std::io::Result<()> {
        if let Some(f) = &mut self.file {
            f.commit(checkpoint)?;
        }
        self.commit_counts(checkpoint);
        Ok(())
    }

    fn commit_final(&mut self) -> std::io::Result<()> {
        if let Some(f) = &mut self.file {
            f.commit_final()?;
        }
        self.commit_counts(FINAL_EPOCH);
        Ok(())
    }

    fn settle(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.settle(),
            None => Ok(()),
        }
    }
}

/// Where the sink's JSONL goes.
pub(super) enum SinkOut {
    /// Count only.
    None,
    /// Straight into the instance's part file (visible at once; after a
    /// restart the replayed records are written again).
    Direct(File),
    /// Two-phase commit per checkpoint.
    Transactional(TransactionalFile),
}

/// The sink: counts, and with an output path writes JSONL, directly to its
/// own part file (`<output>.part-<instance>`) or transactionally (into
/// `<output>.txn/`); [`merge_output`] assembles the output afterwards.
pub(super) struct PaperSink {
    out: SinkOut,
    buf: Vec<u8>,
    /// Lines since the last barrier.
    records: u64,
    summaries: u64,
    staged: StagedCounts,
    counts: Arc<SinkCounts>,
}

const FLUSH_AT: usize = 1 << 16;

impl PaperSink {
    pub(super) fn new(out: SinkOut, counts: Arc<SinkCounts>) -> Self {
        PaperSink {
            out,
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            records: 0,
            summaries: 0,
            staged: StagedCounts::default(),
            counts,
        }
    }

    fn drain(&mut self) -> std::io::Result<()> {
        match &mut self.out {
            SinkOut::None => {}
            SinkOut::Direct(f) => f.write_all(&self.buf)?,
            SinkOut::Transactional(t) => t.write(&self.buf)?,
        }
        self.buf.clear();
        Ok(())
    }
}

impl Sink<PaperOut> for PaperSink {
    #[inline]
    fn write(&mut self, rec: Record<PaperOut>) -> std::io::Result<()> {
        match &rec.value {
            PaperOut::Record(_) => self.records += 1,
            PaperOut::Summary { .. } => self.summaries += 1,
        }
        if !matches!(self.out, SinkOut::None) {
            write_line(&mut self.buf, &rec.value);
            if self.buf.len() >= FLUSH_AT {
                self.drain()?;
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.drain()?;
        if let SinkOut::Direct(f) = &mut self.out {
            f.sync_data()?;
            // Not transactional: what it wrote is output now. (The
            // others stage their last lines at the final barrier.)
            self.counts
                .records
                .fetch_add(std::mem::take(&mut self.records), Ordering::Relaxed);
            self.counts
                .summaries
                .fetch_add(std::mem::take(&mut self.summaries), Ordering::Relaxed);
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: u64) -> std::io::Result<()> {
        // Everything before the barrier leaves the buffer: staged under the
        // checkpoint (transactional), or in the part file (direct) — a
        // restart from this checkpoint does not produce it again, so a
        // direct sink that kept it buffered would lose it with the attempt.
        self.drain()?;
        if !matches!(self.out, SinkOut::Direct(_)) {
            let (records, summaries) = (
                std::mem::take(&mut self.records),
                std::mem::take(&mut self.summaries),
            );
            if records + summaries > 0 {
                self.staged
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((checkpoint, records, summaries));
            }
        }
        match &mut self.out {
            SinkOut::Transactional(t) => t.pre_commit(checkpoint),
            _ => Ok(()),
        }
    }

    fn committer(&self) -> Option<Box<dyn Committer>> {
        let file = match &self.out {
            // Visible at once: nothing to commit.
            SinkOut::Direct(_) => return None,
            SinkOut::None => None,
            SinkOut::Transactional(t) => Some(t.committer()),
        };
        Some(Box::new(CountCommitter {
            file,
            staged: Arc::clone(&self.staged),
            counts: Arc::clone(&self.counts),
        }))
    }
}

/// The part file of sink instance `i` for `output` (direct mode).
pub fn part_path(output: &Path, i: usize) -> PathBuf {
    let mut s = output.as_os_str().to_owned();
    s.push(format!(".part-{i}"));
    PathBuf::from(s)
}

/// The directory of committed epochs for `output` (transactional mode).
pub fn txn_dir(output: &Path) -> PathBuf {
    let mut s = output.as_os_str().to_owned();
    s.push(".txn");
    PathBuf::from(s)
}

/// The lock a run holds on `output` while it writes it ([`OutputClaim`]).
pub fn lock_path(output: &Path) -> PathBuf {
    suffixed(output, LOCK_SUFFIX)
}

const LOCK_SUFFIX: &str = ".tandem-lock";

fn suffixed(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Every file a run writing `output` with `parts` sink instances creates
/// beside it — the transactional staging, part files, the merge and the
/// lock — and the part files of any other run found there.
pub fn staging(output: &Path, parts: usize) -> Vec<PathBuf> {
    let mut v = vec![txn_dir(output), lock_path(output)];
    v.extend((0..parts).map(|i| part_path(output, i)));
    let (Some(dir), Some(name)) = (output.parent(), output.file_name()) else {
        return v;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut prefix = name.to_owned();
    prefix.push(".part-");
    let prefix = prefix.to_string_lossy().into_owned();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let n = e.file_name();
            let Some(n) = n.to_str() else { continue };
            let p = dir.join(n);
            if n.strip_prefix(prefix.as_str())
                .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
                && !v.contains(&p)
            {
                v.push(p);
            }
        }
    }
    v
}

/// A run's hold on its output path: while it lives no other run writes
/// the same output (`<output>.tandem-lock`, an `flock` the kernel drops
/// when the process dies however it dies).
pub struct OutputClaim {
    _lock: File,
}

/// Claims `output` for this run: refuses if a live run holds it; removes
/// what a dead run left beside it (its staging, its merge), and what dead
/// runs left beside any other output in the same directory.
pub fn claim(output: &Path) -> std::io::Result<OutputClaim> {
    if let Some(dir) = output.parent() {
        sweep_dead_outputs(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        });
    }
    let lock = lock_path(output);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)?;
    if !tandem::sys::scratch::try_flock(&f)? {
        return Err(std::io::Error::other(format!(
            "another run is writing it now (it holds {})",
            lock.display()
        )));
    }
    for p in staging(output, 0) {
        if p != lock {
            remove_any(&p);
        }
    }
    Ok(OutputClaim { _lock: f })
}

fn remove_any(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(p);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(p);
        }
        Err(_) => {}
    }
}

/// Removes the staging of every output in `dir` whose lock no live run
/// holds (its run was killed).
fn sweep_dead_outputs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name();
        let Some(stem) = n.to_str().and_then(|n| n.strip_suffix(LOCK_SUFFIX)) else {
            continue;
        };
        if stem.is_empty() || !tandem::sys::scratch::is_stale(&e.path()) {
            continue;
        }
        let output = dir.join(stem);
        for p in staging(&output, 0) {
            remove_any(&p);
        }
    }
}

/// Assembles `output` from what the sinks left (part files, or committed
/// epochs in order) and removes those. The output appears whole or not at
/// all: assembled beside it and renamed over it (through a symlink, the
/// file it names), by the output discipline of [`crate::paths`] — once
/// this returns, the file is the user's.
pub fn merge_output(output: &Path, parts: usize, mode: OutputMode) -> anyhow::Result<u64> {
    let files: Vec<PathBuf> = match mode {
        OutputMode::Direct => (0..parts).map(|i| part_path(output, i)).collect(),
        OutputMode::Transactional => TransactionalFile::committed_files(&txn_dir(output))?,
    };
    let target = crate::paths::output_file("--output", output)?;
    let mut out =
        std::io::BufWriter::with_capacity(1 << 20, crate::paths::stage("--output", &target)?);
    let mut bytes = 0;
    for p in &files {
        let mut f = File::open(p)?;
        bytes += std::io::copy(&mut f, &mut out)?;
    }
    out.flush()?;
    out.into_inner().map_err(|e| e.into_error())?.commit()?;
    // The output is in place: what is left is staging, removed as well as
    // can be (a run's cleanup removes what this leaves).
    match mode {
        OutputMode::Direct => files.iter().for_each(|f| {
            let _ = std::fs::remove_file(f);
        }),
        OutputMode::Transactional => {
            let _ = std::fs::remove_dir_all(txn_dir(output));
        }
    }
    Ok(bytes)
}

/// How the sink writes its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputMode {
    /// Written at once; a restart writes replayed records again.
    Direct,
    /// Committed per checkpoint (exactly once).
    Transactional,
}

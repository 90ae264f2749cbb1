//! Scratch directories: what a run creates for its own use (standby
//! mappings in `/dev/shm`, checkpoints in a temp dir nobody named, the
//! staging of an output), removed when the run ends — and, when the run
//! could not remove them because it was killed (`SIGKILL`, the OOM
//! killer, a power cut of the container), removed by the next run that
//! looks in the same place.
//!
//! ## How a dead run's directory is told from a live one's
//!
//! Not by its name's process ID: in a container, or beside one that
//! shares `/dev/shm` or `/tmp`, a live run's PID can be absent from this
//! process's `/proc`, and PIDs are reused. Each scratch directory holds a
//! lock file, [`LOCK`], on which its run holds an exclusive `flock` for as
//! long as the directory is in use. The kernel releases the lock when the
//! run's process dies, however it dies. [`sweep`] removes a directory
//! whose lock it can take; a directory whose lock is held belongs to a
//! live run and is left alone. A directory without a lock file is never
//! swept (the user's own, or one kept on purpose: [`ScratchDir::keep`]).
//!
//! The lock file is created under a temporary name, locked, then renamed
//! to [`LOCK`], so no sweeper ever sees it unlocked while its run lives.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The lock file's name inside a scratch directory.
pub const LOCK: &str = ".tandem-lock";

/// A directory of this run's, removed when dropped (unless kept).
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    /// Holds the `flock` while the directory is in use.
    lock: Option<File>,
}

impl ScratchDir {
    /// Creates the directory `path` (its parent must exist; `path` must
    /// not) and locks it as this run's.
    pub fn create(path: PathBuf) -> io::Result<Self> {
        std::fs::create_dir(&path)?;
        match lock_new(&path) {
            Ok(lock) => Ok(ScratchDir {
                path,
                lock: Some(lock),
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&path);
                Err(e)
            }
        }
    }

    /// Creates a fresh `parent/tandem-<kind>-<pid>-<nanos>` (see
    /// [`ScratchDir::create`]).
    pub fn unique(parent: &Path, kind: &str) -> io::Result<Self> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut n = 0u32;
        loop {
            let name = format!("tandem-{kind}-{}-{stamp}-{n}", std::process::id());
            match Self::create(parent.join(name)) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 64 => n += 1,
                r => return r,
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the directory after the run (its contents are the user's
    /// now): the lock file is removed, so no later run sweeps it.
    pub fn keep(mut self) -> PathBuf {
        let _ = std::fs::remove_file(self.path.join(LOCK));
        self.lock = None;
        std::mem::take(&mut self.path)
    }

    /// Removes the directory and everything in it now.
    pub fn remove(&self) -> io::Result<()> {
        match std::fs::remove_dir_all(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if self.lock.is_some() {
            let _ = self.remove();
        }
    }
}

/// Creates `dir/LOCK`, locked, without a moment where it is visible
/// unlocked.
fn lock_new(dir: &Path) -> io::Result<File> {
    let tmp = dir.join(format!("{LOCK}.new"));
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    if !try_flock(&f)? {
        return Err(io::Error::other("a fresh lock file is locked by another"));
    }
    std::fs::rename(&tmp, dir.join(LOCK))?;
    Ok(f)
}

/// Takes an exclusive `flock` on `f` without waiting: `Ok(false)` when
/// another open file holds it.
pub fn try_flock(f: &File) -> io::Result<bool> {
    loop {
        // SAFETY: `flock` on a descriptor that `f` keeps open; it touches
        // no memory of ours.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// Whether `lock` (a lock file) exists and no live process holds it: its
/// run is dead. Does not follow symlinks; only files of this user count.
pub fn is_stale(lock: &Path) -> bool {
    let Ok(m) = std::fs::symlink_metadata(lock) else {
        return false;
    };
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    if !m.is_file() || m.uid() != unsafe { libc::geteuid() } {
        return false;
    }
    let Ok(f) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(lock)
    else {
        return false;
    };
    try_flock(&f).unwrap_or(false)
}

/// Removes every directory in `parent` that a dead run left: one holding
/// a [`LOCK`] that no live process holds. Returns what it removed. Never
/// follows a symlink; a directory it cannot read is left alone.
pub fn sweep(parent: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(parent) else {
        return removed;
    };
    for e in entries.flatten() {
        let p = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let lock = p.join(LOCK);
        if !is_stale(&lock) {
            continue;
        }
        // Holding the dead run's lock while removing: a second sweeper
        // sees it held and leaves the directory to this one.
        let held = File::open(&lock)
            .ok()
            .filter(|f| try_flock(f).unwrap_or(false));
        if held.is_some() && std::fs::remove_dir_all(&p).is_ok() {
            removed.push(p);
        }
    }
    removed
}

/// Sweeps ([`sweep`]) the places every run keeps its scratch: the temp
/// dir and `/dev/shm`. Every binary does this when it starts, so what a
/// killed run left goes with the next run of any of them.
pub fn sweep_usual() -> Vec<PathBuf> {
    let mut removed = sweep(&std::env::temp_dir());
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && shm != std::env::temp_dir() {
        removed.extend(sweep(shm));
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tandem-scratch-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_live_runs_directory_is_not_swept_and_a_dead_ones_is() {
        let root = root("sweep");
        let live = ScratchDir::unique(&root, "live").unwrap();
        std::fs::write(live.path().join("data"), b"x").unwrap();
        // A dead run's directory: its lock file exists, nobody holds it
        // (as after the process was killed).
        let dead = root.join("tandem-dead-1-1-0");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join(LOCK), b"").unwrap();
        std::fs::write(dead.join("queue.bq"), b"x").unwrap();
        // The user's own directory, no lock file.
        let mine = root.join("tandem-mine");
        std::fs::create_dir(&mine).unwrap();
        assert_eq!(sweep(&root), vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(live.path().join("data").exists() && mine.exists());
        drop(live);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_dropped_directory_is_removed_and_a_kept_one_is_never_swept() {
        let root = root("keep");
        let gone = ScratchDir::unique(&root, "gone").unwrap();
        let gone_path = gone.path().to_path_buf();
        drop(gone);
        assert!(!gone_path.exists());
        let kept = ScratchDir::unique(&root, "kept").unwrap();
        std::fs::write(kept.path().join("dead-letters.jsonl"), b"x").unwrap();
        let kept = kept.keep();
        assert!(sweep(&root).is_empty());
        assert!(kept.join("dead-letters.jsonl").exists());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_lock_held_through_another_open_file_is_not_stale() {
        let root = root("stale");
        let p = root.join("x.lock");
        let f = File::create(&p).unwrap();
        assert!(is_stale(&p), "unlocked: stale");
        assert!(try_flock(&f).unwrap());
        assert!(!is_stale(&p), "held by an open file of this process");
        drop(f);
        assert!(is_stale(&p));
        assert!(!is_stale(&root.join("missing")));
        std::fs::remove_dir_all(root).unwrap();
    }
}

//! Files a user named for a run to write — an output, a report, a log —
//! and the directories it writes into: checked before any work, written
//! beside the final path and renamed into place, never destroyed.
//!
//! This is the one output discipline of the engine and of every binary
//! around it (`paper`, `nexmark`, `experiments`, `tandem`, …):
//!
//! - **Checked before any work** ([`OutputFile::check`],
//!   [`check_dir`]). The directory a file goes in exists and takes a new
//!   file; the final path is absent, a regular file we may write, or a
//!   symlink that leads to one of those. A directory, a device, a FIFO or
//!   a socket is refused by name, without being opened (opening a FIFO
//!   with no reader blocks; opening a device can have effects of its
//!   own). A path that reaches a process's open file through `/proc`
//!   (`/dev/stdout`, `/dev/fd/1`) is refused too: renaming onto it would
//!   replace the file a shell redirected into, not write through it.
//! - **Symlinks are written through**, as `cp`, shells and Flink's file
//!   sinks do: the link stays, the file it names is replaced. A dangling
//!   link names the file it will create.
//! - **Written beside, renamed into place** ([`OutputFile::stage`],
//!   [`Staged::commit`]): the bytes go to `.NAME.tandem-stage-PID-N` in
//!   the final file's directory; the commit flushes them to disk, looks
//!   again that the final path is still absent or a regular file (a FIFO
//!   swapped in meanwhile is refused, not replaced), renames, and flushes
//!   the directory. A reader sees the old file or the whole new one; a run
//!   that fails leaves the old one as it was. An existing file's
//!   permission bits carry over to its replacement.
//! - **Staging never outlives its run for long.** A staging file holds an
//!   exclusive `flock` for as long as it is open; the kernel drops it when
//!   the process dies, however it dies. Checking an output sweeps its
//!   directory of staging files no live process holds
//!   ([`sweep_staging`]), as [`super::scratch::sweep`] does for scratch
//!   directories.
//!
//! What is *not* here: which flags may name the same file (the caller
//! compares [`identity`]s with its flag names) and what a binary removes
//! when it is interrupted (its own cleanup registers staging paths).

use std::ffi::OsString;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The most symlinks followed while resolving a path (the kernel's own
/// limit is 40).
const MAX_LINKS: usize = 40;

/// The infix of a staging file's name: `.NAME.tandem-stage-PID-N`.
const STAGE_INFIX: &str = ".tandem-stage-";

/// Why a path cannot be written as asked. Each variant's fields are
/// spelled out by its message.
#[allow(missing_docs)]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The path names something a run must not replace.
    #[error("{}: is {what}; name a regular file (an output is written beside it and renamed into place)", path.display())]
    NotAFile { path: PathBuf, what: &'static str },
    /// The path names a directory where a file was asked for.
    #[error("{}: is a directory; name a file", path.display())]
    IsDirectory { path: PathBuf },
    /// The path reaches a process's open file through `/proc`.
    #[error("{}: names an open file of a process ({}); name a file", path.display(), link.display())]
    ProcessFile { path: PathBuf, link: PathBuf },
    /// The directory the file goes in is missing.
    #[error("{}: directory {} does not exist", path.display(), dir.display())]
    NoDirectory { path: PathBuf, dir: PathBuf },
    /// The directory the file goes in does not take a new file.
    #[error("{}: cannot write into {}: {source}", path.display(), dir.display())]
    NotWritable {
        path: PathBuf,
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    /// An existing file this process may not write.
    #[error("{}: exists and is read-only", path.display())]
    ReadOnly { path: PathBuf },
    /// A directory was asked for and something else is there.
    #[error("{}: exists and is {what}, not a directory", path.display())]
    NotADirectory { path: PathBuf, what: &'static str },
    /// The final path became something else while the run wrote it.
    #[error("{}: became {what} while the run wrote it; it was left as it is", path.display())]
    Changed { path: PathBuf, what: &'static str },
    /// Looking at, writing or renaming the file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl From<OutputError> for io::Error {
    fn from(e: OutputError) -> io::Error {
        let kind = match &e {
            OutputError::Io { source, .. } | OutputError::NotWritable { source, .. } => {
                source.kind()
            }
            OutputError::NoDirectory { .. } => io::ErrorKind::NotFound,
            _ => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source: super::file::loop_named(source),
    }
}

pub use super::file::kind_of;

/// The directory a path's file is in (`.` for a bare name).
fn parent_of(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The device of `/proc`, whose symlinks (`/proc/self/fd/1`) name a
/// process's open files rather than paths.
fn proc_dev() -> Option<u64> {
    std::fs::symlink_metadata("/proc/self")
        .ok()
        .map(|m| m.dev())
}

/// Where writing `path` would land: `path` itself, or — through its
/// symlinks, followed one by one — the file the last one names (which
/// may not exist yet), with what is there now.
fn resolve(path: &Path) -> Result<(PathBuf, Option<Metadata>), OutputError> {
    let proc = proc_dev();
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let m = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if missing(&e) => return Ok((p, None)),
            Err(e) => return Err(io_at(path)(e)),
        };
        if !m.file_type().is_symlink() {
            return Ok((p, Some(m)));
        }
        if Some(m.dev()) == proc {
            return Err(OutputError::ProcessFile {
                path: path.to_path_buf(),
                link: p,
            });
        }
        let target = std::fs::read_link(&p).map_err(io_at(path))?;
        p = parent_of(&p).join(target);
    }
    Err(io_at(path)(io::Error::from_raw_os_error(libc::ELOOP)))
}

/// Tries that `dir` takes a new file (a probe created and removed; on a
/// read-only mount or without write permission, the system's error).
fn probe(dir: &Path) -> io::Result<()> {
    static N: AtomicU32 = AtomicU32::new(0);
    let p = dir.join(format!(
        ".tandem-write-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&p)?;
    let _ = std::fs::remove_file(p);
    Ok(())
}

/// A file a run will write, checked ([`OutputFile::check`]).
#[derive(Clone, Debug)]
pub struct OutputFile {
    /// As the user named it.
    given: PathBuf,
    /// The file that will be replaced or created (through symlinks).
    real: PathBuf,
    /// Permission bits of the file there now, if any.
    mode: Option<u32>,
}

impl OutputFile {
    /// Checks that `path` can be written as an output (see the module
    /// docs) and sweeps its directory of dead runs' staging files. Opens
    /// nothing at `path`.
    pub fn check(path: &Path) -> Result<OutputFile, OutputError> {
        // Through every link at once first: what the path reaches now.
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {
                return Err(OutputError::IsDirectory {
                    path: path.to_path_buf(),
                })
            }
            Ok(m) if !m.is_file() => {
                return Err(OutputError::NotAFile {
                    path: path.to_path_buf(),
                    what: kind_of(m.file_type()),
                })
            }
            _ => {}
        }
        let (real, now) = resolve(path)?;
        let mode = match &now {
            Some(m) if m.is_file() => {
                if !writable(&real) {
                    return Err(OutputError::ReadOnly {
                        path: path.to_path_buf(),
                    });
                }
                Some(m.permissions().mode() & 0o7777)
            }
            Some(m) if m.is_dir() => {
                return Err(OutputError::IsDirectory {
                    path: path.to_path_buf(),
                })
            }
            Some(m) => {
                return Err(OutputError::NotAFile {
                    path: path.to_path_buf(),
                    what: kind_of(m.file_type()),
                })
            }
            None => None,
        };
        if real.file_name().is_none() {
            return Err(OutputError::IsDirectory {
                path: path.to_path_buf(),
            });
        }
        let dir = parent_of(&real).to_path_buf();
        if !dir.is_dir() {
            return Err(OutputError::NoDirectory {
                path: path.to_path_buf(),
                dir,
            });
        }
        probe(&dir).map_err(|source| OutputError::NotWritable {
            path: path.to_path_buf(),
            dir: dir.clone(),
            source,
        })?;
        sweep_staging(&dir);
        Ok(OutputFile {
            given: path.to_path_buf(),
            real,
            mode,
        })
    }

    /// The path as the user named it.
    pub fn path(&self) -> &Path {
        &self.given
    }

    /// The file that is replaced or created (through symlinks).
    pub fn real(&self) -> &Path {
        &self.real
    }

    /// Whether a file is there now (before the run writes it).
    pub fn exists(&self) -> bool {
        self.mode.is_some()
    }

    /// Starts writing: a staging file beside the final one, locked as this
    /// process's (see the module docs).
    pub fn stage(&self) -> Result<Staged, OutputError> {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = parent_of(&self.real);
        let name = self.real.file_name().unwrap_or_default();
        loop {
            let mut tmp = OsString::from(".");
            tmp.push(name);
            tmp.push(format!(
                "{STAGE_INFIX}{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let tmp = dir.join(tmp);
            let file = match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o666)
                .open(&tmp)
            {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                r => r.map_err(io_at(&self.given))?,
            };
            // Held until the file is closed: the next run's sweep sees a
            // live run's staging and leaves it.
            let _ = super::scratch::try_flock(&file);
            if let Some(mode) = self.mode {
                let _ = file.set_permissions(std::fs::Permissions::from_mode(mode));
            }
            return Ok(Staged {
                file: Some(file),
                tmp,
                target: self.clone(),
            });
        }
    }

    /// Writes `bytes` as the whole file (staged, then committed).
    pub fn write_all(&self, bytes: &[u8]) -> Result<(), OutputError> {
        let mut s = self.stage()?;
        s.write_all(bytes).map_err(io_at(&self.given))?;
        s.commit()
    }
}

/// Whether this process may write the existing file `p`.
fn writable(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path that outlives the call, which
    // reads nothing else of ours.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// An output being written: a staging file beside the final path,
/// renamed into place by [`Staged::commit`]; removed if dropped
/// uncommitted.
#[derive(Debug)]
pub struct Staged {
    file: Option<File>,
    tmp: PathBuf,
    target: OutputFile,
}

impl Staged {
    /// The staging file's path (for a caller that must remove it from a
    /// signal handler's thread, or name it).
    pub fn staging_path(&self) -> &Path {
        &self.tmp
    }

    /// The output this becomes.
    pub fn target(&self) -> &OutputFile {
        &self.target
    }

    fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("open until committed or dropped")
    }

    /// Flushes the bytes to disk and renames them into place (see the
    /// module docs). The final path is looked at again first: if it became
    /// anything but a regular file (or absent), it is left as it is and
    /// the staging removed.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let given = self.target.given.clone();
        self.file().sync_all().map_err(io_at(&given))?;
        let real = self.target.real.clone();
        match std::fs::symlink_metadata(&real) {
            Ok(m) if !m.is_file() => {
                return Err(OutputError::Changed {
                    path: given,
                    what: kind_of(m.file_type()),
                })
            }
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_at(&given)(e)),
            _ => {}
        }
        std::fs::rename(&self.tmp, &real).map_err(io_at(&given))?;
        // Renamed: nothing to remove any more; the lock goes with the file.
        self.file = None;
        self.tmp = PathBuf::new();
        if let Ok(d) = File::open(parent_of(&real)) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Write for Staged {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file().flush()
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Removes the staging files in `dir` that no live process holds (their
/// runs died mid-write). Only regular files of this user named
/// `.NAME.tandem-stage-…` are looked at; returns what was removed.
pub fn sweep_staging(dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in entries.flatten() {
        let n = e.file_name();
        let b = n.as_bytes();
        let staging = b.first() == Some(&b'.')
            && b.windows(STAGE_INFIX.len())
                .any(|w| w == STAGE_INFIX.as_bytes());
        if !staging || !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let p = e.path();
        if super::scratch::is_stale(&p) && std::fs::remove_file(&p).is_ok() {
            removed.push(p);
        }
    }
    removed
}

/// Whether `e` says a path is not there: it is missing, or a component
/// above it is not a directory.
fn missing(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// A directory a run writes into, checked ([`check_dir`]).
#[derive(Clone, Debug)]
pub struct OutputDir {
    /// Whether it exists now (else the run creates it and what is missing
    /// above it).
    pub exists: bool,
}

/// Checks that `dir` can be written into: an existing directory (through
/// symlinks) that takes a new file, or a missing one whose nearest
/// existing ancestor is a directory that does. Creates nothing.
pub fn check_dir(dir: &Path) -> Result<OutputDir, OutputError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {
            probe(dir).map_err(|source| OutputError::NotWritable {
                path: dir.to_path_buf(),
                dir: dir.to_path_buf(),
                source,
            })?;
            return Ok(OutputDir { exists: true });
        }
        Ok(m) => {
            return Err(OutputError::NotADirectory {
                path: dir.to_path_buf(),
                what: kind_of(m.file_type()),
            })
        }
        Err(e) if !missing(&e) => return Err(io_at(dir)(e)),
        Err(_) => {}
    }
    // A dangling symlink: the directory it names is made.
    let (real, _) = resolve(dir)?;
    let mut up = parent_of(&real);
    loop {
        match std::fs::metadata(up) {
            Ok(m) if m.is_dir() => break,
            Ok(m) => {
                return Err(OutputError::NotADirectory {
                    path: up.to_path_buf(),
                    what: kind_of(m.file_type()),
                })
            }
            Err(e) if !missing(&e) => return Err(io_at(dir)(e)),
            Err(_) => up = parent_of(up),
        }
        if up == Path::new(".") || up == Path::new("/") {
            break;
        }
    }
    probe(up).map_err(|source| OutputError::NotWritable {
        path: dir.to_path_buf(),
        dir: up.to_path_buf(),
        source,
    })?;
    Ok(OutputDir { exists: false })
}

/// What a path will be once written: the file it names (through symlinks
/// and hard links) if it exists, else its resolved directory and name.
/// Two paths with equal identities write one file.
#[derive(PartialEq, Eq, Debug, Clone)]
pub enum Identity {
    /// An existing file or directory.
    File {
        /// Its device.
        dev: u64,
        /// Its inode.
        ino: u64,
    },
    /// Nothing there yet: the resolved path it will have.
    New(PathBuf),
}

/// See [`Identity`].
pub fn identity(p: &Path) -> Identity {
    if let Ok(m) = std::fs::metadata(p) {
        return Identity::File {
            dev: m.dev(),
            ino: m.ino(),
        };
    }
    let real = resolve(p).map_or_else(|_| p.to_path_buf(), |(r, _)| r);
    let name = real.file_name().map(|n| n.to_os_string());
    // The nearest existing ancestor, resolved; the missing rest appended.
    let mut missing = Vec::new();
    let mut dir = parent_of(&real).to_path_buf();
    loop {
        if let Ok(c) = std::fs::canonicalize(&dir) {
            let mut out = c;
            for m in missing.iter().rev() {
                out.push(m);
            }
            if let Some(n) = name {
                out.push(n);
            }
            return Identity::New(out);
        }
        match (dir.file_name().map(|n| n.to_os_string()), dir.parent()) {
            (Some(n), Some(up)) => {
                missing.push(n);
                dir = parent_of_owned(up);
            }
            _ => return Identity::New(real),
        }
    }
}

fn parent_of_owned(p: &Path) -> PathBuf {
    if p.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        p.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::test_dir::{mkfifo, Dir};
    use std::os::unix::fs::symlink;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn a_new_file_is_written_whole_and_nothing_is_left_beside_it() {
        let d = Dir::new("output-new");
        let p = d.0.join("out.jsonl");
        let o = OutputFile::check(&p).unwrap();
        assert!(!o.exists());
        let mut s = o.stage().unwrap();
        s.write_all(b"a\nb\n").unwrap();
        // Not there until committed.
        assert!(!p.exists());
        s.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"a\nb\n");
        assert_eq!(d.names(), ["out.jsonl"]);
    }

    #[test]
    fn a_dropped_stage_leaves_the_old_file_as_it_was() {
        let d = Dir::new("output-drop");
        let p = d.0.join("r.json");
        std::fs::write(&p, b"old").unwrap();
        let o = OutputFile::check(&p).unwrap();
        let mut s = o.stage().unwrap();
        s.write_all(b"new").unwrap();
        drop(s);
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(d.names(), ["r.json"]);
    }

    #[test]
    fn devices_fifos_sockets_and_directories_are_refused_by_name_unopened() {
        let d = Dir::new("output-kinds");
        let fifo = d.0.join("fifo");
        mkfifo(&fifo);
        let to_fifo = d.0.join("to-fifo");
        symlink("fifo", &to_fifo).unwrap();
        let sock = d.0.join("sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let t = std::time::Instant::now();
        for (p, what) in [
            (Path::new("/dev/null"), "is a character device"),
            (fifo.as_path(), "is a FIFO"),
            (to_fifo.as_path(), "is a FIFO"),
            (sock.as_path(), "is a socket"),
            (d.0.as_path(), "is a directory"),
        ] {
            let e = OutputFile::check(p).unwrap_err();
            assert!(e.to_string().contains(what), "{}: {e}", p.display());
        }
        // Not one open of the FIFO (which would block without a reader).
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        assert!(std::fs::symlink_metadata(&to_fifo)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn a_process_open_file_is_refused_even_when_it_is_a_regular_file() {
        let d = Dir::new("output-proc");
        let p = d.0.join("redirected");
        let f = File::create(&p).unwrap();
        use std::os::fd::AsRawFd;
        let via = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
        let e = OutputFile::check(&via).unwrap_err();
        assert!(
            matches!(e, OutputError::ProcessFile { .. }),
            "{}: {e}",
            via.display()
        );
        drop(f);
    }

    #[test]
    fn a_symlink_is_written_through_and_stays_a_symlink() {
        let d = Dir::new("output-link");
        let target = d.0.join("real.json");
        std::fs::write(&target, b"old").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = d.0.join("link.json");
        symlink("real.json", &link).unwrap();
        OutputFile::check(&link).unwrap().write_all(b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(
            std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o640
        );
        // A dangling link creates the file it names.
        let dangling = d.0.join("later.json");
        symlink("made.json", &dangling).unwrap();
        OutputFile::check(&dangling)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        assert_eq!(std::fs::read(d.0.join("made.json")).unwrap(), b"x");
        assert_eq!(identity(&dangling), identity(&d.0.join("made.json")));
    }

    #[test]
    fn a_missing_directory_and_a_symlink_loop_are_refused_with_their_names() {
        let d = Dir::new("output-missing");
        let e = OutputFile::check(&d.0.join("no/such/f")).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        symlink("b", d.0.join("a")).unwrap();
        symlink("a", d.0.join("b")).unwrap();
        let e = OutputFile::check(&d.0.join("a")).unwrap_err();
        assert!(e.to_string().contains("symlink loop"), "{e}");
    }

    #[test]
    fn a_final_path_that_became_a_fifo_is_not_replaced_at_commit() {
        let d = Dir::new("output-changed");
        let p = d.0.join("o");
        let mut s = OutputFile::check(&p).unwrap().stage().unwrap();
        s.write_all(b"x").unwrap();
        mkfifo(&p);
        let e = s.commit().unwrap_err();
        assert!(matches!(e, OutputError::Changed { .. }), "{e}");
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
        assert_eq!(d.names(), ["o"]);
    }

    #[test]
    fn a_dead_runs_staging_is_swept_and_a_live_ones_is_not() {
        let d = Dir::new("output-sweep");
        let live = OutputFile::check(&d.0.join("a")).unwrap().stage().unwrap();
        // As a killed run leaves it: the name, no lock held.
        let dead = d.0.join(".b.tandem-stage-1-0");
        std::fs::write(&dead, b"partial").unwrap();
        let mine = d.0.join(".c.tandem-stage-notes");
        std::fs::create_dir(&mine).unwrap();
        OutputFile::check(&d.0.join("other")).unwrap();
        assert!(!dead.exists());
        assert!(live.staging_path().exists() && mine.exists());
        drop(live);
    }

    #[test]
    fn directories_are_checked_without_being_made() {
        let d = Dir::new("output-dirs");
        assert!(check_dir(&d.0).unwrap().exists);
        let deep = d.0.join("x/y/z");
        assert!(!check_dir(&deep).unwrap().exists);
        assert!(!d.0.join("x").exists());
        std::fs::write(d.0.join("file"), b"").unwrap();
        let e = check_dir(&d.0.join("file")).unwrap_err();
        assert!(
            e.to_string().contains("is a regular file, not a directory"),
            "{e}"
        );
        let e = check_dir(&d.0.join("file/sub")).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let e = check_dir(Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
    }

    #[test]
    fn identities_agree_through_links_and_for_files_not_made_yet() {
        let d = Dir::new("output-ident");
        std::fs::write(d.0.join("f"), b"").unwrap();
        std::fs::hard_link(d.0.join("f"), d.0.join("h")).unwrap();
        symlink("f", d.0.join("s")).unwrap();
        assert_eq!(identity(&d.0.join("f")), identity(&d.0.join("h")));
        assert_eq!(identity(&d.0.join("f")), identity(&d.0.join("s")));
        std::fs::create_dir(d.0.join("sub")).unwrap();
        assert_eq!(
            identity(&d.0.join("new/x")),
            identity(&d.0.join("sub/../new/./x"))
        );
        assert_ne!(identity(&d.0.join("new/x")), identity(&d.0.join("new/y")));
    }
}

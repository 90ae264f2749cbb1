//! Paths a benchmark binary reads and writes, checked before any work —
//! the binaries' side of the engine's output discipline
//! ([`tandem::sys::output`]): every file flag is a regular file or none
//! yet (symlinks written through; a device, FIFO, socket or directory
//! refused by name, unopened), in a directory that takes a new file; every
//! directory flag a directory or none yet (created, and what the run
//! created registered with [`crate::cleanup`]: removed if the run fails,
//! and kept on success only if it holds something); no two flags name the
//! same file, through symlinks and hard links too, the input included.
//!
//! Files are written beside their final path and renamed into place
//! ([`stage`], [`Writing::commit`]): the staging is registered for removal
//! if the run is interrupted, and a file that reached its place is the
//! user's — no signal or later failure removes it.

use crate::cleanup;
use anyhow::{bail, ensure};
use std::io::Write;
use std::path::Path;
use tandem::sys::output::{self, OutputFile, Staged};

pub use tandem::sys::output::{identity, Identity};

/// A file flag the run writes (`--output`, `--report`, `--hlog`, …),
/// checked (see the module docs); the error names the flag.
pub fn output_file(flag: &str, out: &Path) -> anyhow::Result<OutputFile> {
    OutputFile::check(out).map_err(|e| anyhow::anyhow!("{flag} {e}"))
}

/// A directory the run writes into: checked, then created if missing
/// (what this creates is removed again if the run fails or is
/// interrupted, and if it is still empty when the run succeeds: see
/// [`crate::cleanup`]), and tried.
pub fn writable_dir(flag: &str, dir: &Path) -> anyhow::Result<()> {
    output::check_dir(dir).map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
    cleanup::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("{flag} {}: cannot create it: {e}", dir.display()))?;
    output::check_dir(dir).map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
    Ok(())
}

/// The directory a run works in: `named` by `flag` (`--dir`), which must
/// be an existing directory the run can write in — refused naming the
/// flag, before any size is weighed against it — or the temp dir.
pub fn work_dir(flag: &str, named: Option<&Path>) -> anyhow::Result<std::path::PathBuf> {
    match named {
        Some(d) => {
            ensure!(d.is_dir(), "{flag} {}: not a directory", d.display());
            output::check_dir(d).map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
            Ok(d.to_path_buf())
        }
        None => Ok(std::env::temp_dir()),
    }
}

/// A file flag the run reads (`--input`): a regular file (through
/// symlinks), refused by what it is otherwise, unopened.
pub fn input_file(flag: &str, p: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) => bail!(
            "{flag} {}: is {}, not a regular file",
            p.display(),
            output::kind_of(m.file_type())
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{flag} {}: no such file", p.display())
        }
        Err(e) => bail!(
            "{flag} {}: {}",
            p.display(),
            tandem::sys::file::loop_named(e)
        ),
    }
}

/// Refuses any two of `paths` (flag, path) that name the same file or
/// directory — whether they read or write it.
pub fn distinct(paths: &[(&str, &Path)]) -> anyhow::Result<()> {
    let ids: Vec<Identity> = paths.iter().map(|(_, p)| identity(p)).collect();
    for i in 0..paths.len() {
        for j in 0..i {
            ensure!(
                ids[i] != ids[j],
                "{} {} and {} {} name the same file: the run would write one over the other",
                paths[j].0,
                paths[j].1.display(),
                paths[i].0,
                paths[i].1.display()
            );
        }
    }
    Ok(())
}

/// A checked output being written: its staging is removed if the run is
/// interrupted ([`crate::cleanup`]) or if this is dropped uncommitted.
pub struct Writing {
    staged: Option<Staged>,
    flag: String,
}

/// Starts writing the checked output `o` of flag `flag`.
pub fn stage(flag: &str, o: &OutputFile) -> anyhow::Result<Writing> {
    let staged = o.stage().map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
    cleanup::add(staged.staging_path().to_path_buf());
    Ok(Writing {
        staged: Some(staged),
        flag: flag.to_string(),
    })
}

impl Writing {
    /// Renames the file into place: from here on it is the user's.
    pub fn commit(mut self) -> anyhow::Result<()> {
        let s = self.staged.take().expect("committed once");
        let staging = s.staging_path().to_path_buf();
        let r = s.commit();
        cleanup::forget(&staging);
        r.map_err(|e| anyhow::anyhow!("{} {e}", self.flag))
    }
}

impl Write for Writing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.staged.as_mut().expect("open").write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.staged.as_mut().expect("open").flush()
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        if let Some(s) = self.staged.take() {
            let staging = s.staging_path().to_path_buf();
            drop(s);
            cleanup::forget(&staging);
        }
    }
}

/// Writes `bytes` as the whole of output `path` (flag `flag`): checked
/// again, staged, committed.
pub fn write_file(flag: &str, path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let o = output_file(flag, path)?;
    let mut w = stage(flag, &o)?;
    w.write_all(bytes)
        .map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))?;
    w.commit()
}

/// Refuses a run that writes `need` bytes into `dir` when its filesystem
/// has less free (`what` says which flag asks for them; `named` whether the
/// user named the directory, else the error suggests `--dir`).
pub fn check_free(what: &str, need: u64, dir: &Path, named: bool) -> anyhow::Result<()> {
    if let Ok(free) = tandem::sys::fs::free_bytes(dir) {
        ensure!(
            need <= free,
            "{what}: the run writes up to {} in {}, which has {} free{}",
            tandem::sys::fs::human_bytes(need),
            dir.display(),
            tandem::sys::fs::human_bytes(free),
            if named { "" } else { " (name another --dir)" }
        );
    }
    Ok(())
}

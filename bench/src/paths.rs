//! Paths a benchmark binary reads and writes, checked before any work:
//! directories it writes into (created if missing, and what it creates
//! registered for removal if the run fails: [`crate::cleanup`]), files it
//! writes at its end (`--output`, `--report`: a regular file or none yet,
//! in an existing directory that takes a new file), and no two paths that
//! name the same file — through symlinks and hard links too.

use crate::cleanup;
use anyhow::{bail, ensure};
use std::path::{Path, PathBuf};

/// A directory the run writes into: created if missing (what this creates
/// is removed again if the run fails or is interrupted: see
/// `tandem_bench::cleanup`), and tried.
pub fn writable_dir(flag: &str, dir: &Path) -> anyhow::Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("{flag} {}: exists and is not a directory", dir.display());
    }
    cleanup::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("{flag} {}: cannot create it: {e}", dir.display()))?;
    let probe = dir.join(format!(".tandem-write-test-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .map_err(|e| anyhow::anyhow!("{flag} {}: cannot write into it: {e}", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// A file the run writes at its end (`--output`, `--report`): a regular
/// file or none yet, in a directory that exists and takes a new file.
pub fn output_file(flag: &str, out: &Path) -> anyhow::Result<()> {
    if out.is_dir() {
        bail!("{flag} {}: is a directory; name a file", out.display());
    }
    if out.exists() && !std::fs::metadata(out)?.is_file() {
        bail!(
            "{flag} {}: is not a regular file (it is written beside and renamed into place)",
            out.display()
        );
    }
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    ensure!(
        dir.is_dir(),
        "{flag} {}: directory {} does not exist",
        out.display(),
        dir.display()
    );
    let probe = dir.join(format!(".tandem-write-test-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| {
        anyhow::anyhow!(
            "{flag} {}: cannot write into {}: {e}",
            out.display(),
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// What a path will be once written: the file it names (through symlinks
/// and hard links) if it exists, else its resolved directory and name.
#[derive(PartialEq, Eq, Debug)]
pub enum Identity {
    /// An existing file.
    File {
        /// Its device.
        dev: u64,
        /// Its inode.
        ino: u64,
    },
    /// A file not made yet, at this resolved path.
    New(PathBuf),
}

pub fn identity(p: &Path) -> Identity {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata(p) {
        return Identity::File {
            dev: m.dev(),
            ino: m.ino(),
        };
    }
    // A dangling symlink is written through: its target is what is named.
    if let Ok(target) = std::fs::read_link(p) {
        let base = p.parent().unwrap_or(Path::new("."));
        return identity(&base.join(target));
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    Identity::New(dir.join(p.file_name().unwrap_or_default()))
}

/// Refuses any two of `paths` (flag, path) that name the same file.
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

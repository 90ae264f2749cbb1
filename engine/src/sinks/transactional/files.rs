//! The sink's files on disk: their names (the layout in the [parent
//! module](super)'s docs), fencing an earlier attempt's staging, and the
//! fsyncs that make a rename durable.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

pub(super) fn name(instance: usize, epoch: u64) -> String {
    format!("part-{instance}-{}", epoch_name(epoch))
}

pub(super) fn epoch_name(epoch: u64) -> String {
    format!("{epoch:020}.jsonl")
}

pub(super) fn stage_dir(dir: &Path, instance: usize, attempt: u32) -> PathBuf {
    dir.join(".staged")
        .join(format!("part-{instance}.attempt-{attempt}"))
}

pub(super) fn committed_path(dir: &Path, instance: usize, epoch: u64) -> PathBuf {
    dir.join(name(instance, epoch))
}

/// The epochs of the files in `dir` named `<prefix><epoch:020>.jsonl`.
pub(super) fn epochs_in(dir: &Path, prefix: &str) -> io::Result<Vec<u64>> {
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
pub(super) fn fence(
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

pub(super) fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

//! What a restart or a job starts from: a checkpoint or savepoint read
//! (a savepoint directory, a manifest, a checkpoint directory's newest
//! valid one), every file mapped and verified and matched to the job's
//! operator instances — and, when the newest is damaged, an older one.

use super::checkpoints::Completed;
use super::{Key, Supervisor, JOB_META};
use crate::checkpoint::{self, CheckpointError, FileEntry, Manifest};
use crate::error::JobError;
use crate::metrics::RecoveryRecord;
use crate::runtime::coord::{InstanceRestore, Restore};
use crate::runtime::graph::Graph;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

impl Supervisor {
    /// The checkpoint a restart restores, mapped and verified.
    pub(super) fn restore_point(
        &mut self,
        record: &mut RecoveryRecord,
    ) -> Result<(Option<Arc<Restore>>, Option<u64>), JobError> {
        if std::mem::take(&mut self.restore_from_store) {
            if let Some(c) = &self.coord {
                // What a new process would find: the newest valid
                // checkpoint in the store, damaged ones skipped and said.
                let latest = c.store.latest_valid()?;
                for s in latest.skipped {
                    record
                        .skipped_checkpoints
                        .push(format!("checkpoint {}: {}", s.id, s.error));
                }
                self.last_complete = match latest.checkpoint {
                    Some(m) => Some(Completed {
                        id: m.id,
                        manifest: m,
                        written: HashMap::new(),
                        attempts: Vec::new(),
                    }),
                    None => None,
                };
            }
        }
        let Some(done) = &self.last_complete else {
            return Ok((None, None));
        };
        match build_restore(&done.manifest, &self.graph, self.store_dir().as_deref()) {
            Ok(r) => return Ok((Some(Arc::new(r)), Some(done.id))),
            Err(e) => record
                .skipped_checkpoints
                .push(format!("checkpoint {}: {e}", done.id)),
        }
        let bad = done.id;
        if let Some(c) = &self.coord {
            let latest = c.store.latest_valid()?;
            for s in latest.skipped {
                if s.id != bad {
                    record
                        .skipped_checkpoints
                        .push(format!("checkpoint {}: {}", s.id, s.error));
                }
            }
            if let Some(m) = latest.checkpoint.filter(|m| m.id < bad) {
                let id = m.id;
                let r = build_restore(&m, &self.graph, self.store_dir().as_deref())?;
                self.last_complete = Some(Completed {
                    id,
                    manifest: m,
                    written: HashMap::new(),
                    attempts: Vec::new(),
                });
                return Ok((Some(Arc::new(r)), Some(id)));
            }
        }
        self.last_complete = None;
        Ok((None, None))
    }
}

/// Reads what `path` names: a savepoint directory, a manifest file, or a
/// checkpoint directory (its newest valid checkpoint).
/// Also returns the newer checkpoints passed over, and why.
///
/// Whatever fails says why: a path that cannot be looked at (a symlink
/// loop, no permission) or a savepoint manifest that cannot be read keeps
/// its system error — it is not taken for a directory without
/// checkpoints — and a directory that holds none says so.
pub(in crate::runtime) fn load_restore_point(
    path: &Path,
) -> Result<(Manifest, Vec<String>), JobError> {
    let meta = std::fs::metadata(path).map_err(CheckpointError::io(path, "stat"))?;
    if !meta.is_dir() {
        // `load` refuses what is not a regular file (a FIFO, a device).
        let m = Manifest::load(path)?;
        return Ok((m, Vec::new()));
    }
    let own = path.join("manifest.json");
    match std::fs::symlink_metadata(&own) {
        Ok(_) => return Ok((checkpoint::open_savepoint(path)?, Vec::new())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(CheckpointError::io(&own, "stat")(e).into()),
    }
    // A checkpoint directory: read it without starting a writer on it.
    let mut ids: Vec<_> = checkpoint::list(path)?
        .into_iter()
        .filter(|l| l.kind == checkpoint::SnapshotKind::Checkpoint)
        .collect();
    ids.sort_by_key(|l| std::cmp::Reverse(l.id));
    let mut skipped = Vec::new();
    for l in ids {
        match l.load().and_then(|m| m.verify_whole().map(|()| m)) {
            Ok(m) => return Ok((m, skipped)),
            Err(e) => skipped.push(format!("checkpoint {}: {e}", l.id)),
        }
    }
    Err(JobError::NoRestorePoint {
        path: path.to_path_buf(),
        skipped,
    })
}

/// Maps and verifies every file of `m` and matches it to the job's
/// operators.
/// Whether two paths name one directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// What the tasks of an attempt restore from checkpoint (or savepoint)
/// `m`; `own_store`: the job's checkpoint directory (a checkpoint of it is
/// one the next checkpoint's deltas may apply over).
pub(super) fn build_restore(
    m: &Manifest,
    graph: &Graph,
    own_store: Option<&Path>,
) -> Result<Restore, JobError> {
    let node_of: HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (&*n.name, i))
        .collect();
    let mut r = Restore {
        checkpoint: m.id,
        instances: HashMap::new(),
        of_store: m.kind == checkpoint::SnapshotKind::Checkpoint
            && own_store.is_some_and(|d| same_dir(d, &m.dir)),
    };
    let locate = |e: &FileEntry| -> Result<Key, JobError> {
        let Some(&node) = node_of.get(e.operator.as_str()) else {
            return Err(JobError::Incompatible {
                id: m.id,
                reason: format!(
                    "it has state of operator `{}`, which the job lacks",
                    e.operator
                ),
            });
        };
        let p = graph.nodes[node].parallelism;
        if e.instance as usize >= p {
            return Err(JobError::Incompatible {
                id: m.id,
                reason: format!(
                    "it has instance {} of `{}`, which runs with parallelism {p} (rescaling is not supported)",
                    e.instance, e.operator
                ),
            });
        }
        Ok((node, e.instance as usize))
    };
    // Every instance of an operator is in a checkpoint — its file, or the
    // list of those that had finished — so an operator whose instances
    // there are fewer than it runs with was checkpointed at a lower
    // parallelism: its new instances would start empty, its records be
    // partitioned anew, and the output be silently wrong. (A higher one is
    // refused by `locate`, instance by instance.)
    let mut seen: HashMap<usize, u32> = HashMap::new();
    for e in &m.files {
        if e.operator == JOB_META {
            let file = m.open(e)?;
            let list = checkpoint::access::<Vec<(String, u32)>>(file.payload())?;
            for item in list.iter() {
                if let Some(&n) = node_of.get(item.0.as_str()) {
                    let c = seen.entry(n).or_default();
                    *c = (*c).max(item.1.to_native() + 1);
                }
            }
        } else if let Some(&n) = node_of.get(e.operator.as_str()) {
            let c = seen.entry(n).or_default();
            *c = (*c).max(e.instance + 1);
        }
    }
    let mut fewer: Vec<_> = seen
        .iter()
        .filter(|&(&n, &had)| (had as usize) < graph.nodes[n].parallelism)
        .collect();
    fewer.sort();
    if let Some((&n, &had)) = fewer.first() {
        return Err(JobError::Incompatible {
            id: m.id,
            reason: format!(
                "it has {had} instance(s) of `{}`, which runs with parallelism {} (rescaling is not supported)",
                graph.nodes[n].name, graph.nodes[n].parallelism
            ),
        });
    }
    for e in &m.files {
        if r.of_store && e.operator != JOB_META {
            // A keyed state's chain whose every link has a key index, of
            // the job's own store, is read lazily: a damage found as it
            // is read condemns the checkpoint, and the next attempt
            // restores an older one of the store.
            if let Some(head) = m.open_lazy(e)?.filter(|f| f.header().index_len > 0) {
                let links: Option<Vec<_>> = m
                    .open_chain_lazily(e)?
                    .into_iter()
                    .map(|l| match l {
                        checkpoint::ChainFile::Lazy(f) => Some(f),
                        checkpoint::ChainFile::Eager(_) => None,
                    })
                    .collect();
                if let Some(mut links) = links {
                    links.push(head);
                    let k = locate(e)?;
                    let slot: &mut InstanceRestore = r.instances.entry(k).or_default();
                    slot.position = e.positions.first().map(|p| p.next_seq);
                    for f in &links {
                        f.verify_in_background();
                    }
                    slot.lazy = links;
                    continue;
                }
            }
        }
        let file = m.open(e)?;
        if e.operator == JOB_META {
            let list = checkpoint::access::<Vec<(String, u32)>>(file.payload())?;
            for item in list.iter() {
                let fe = FileEntry {
                    operator: item.0.to_string(),
                    instance: item.1.to_native(),
                    ..e.clone()
                };
                let k = locate(&fe)?;
                r.instances.entry(k).or_default().finished = true;
            }
            continue;
        }
        let k = locate(e)?;
        let slot: &mut InstanceRestore = r.instances.entry(k).or_default();
        slot.position = e.positions.first().map(|p| p.next_seq);
        if file.header().payload_len > 0 {
            slot.chain = m.open_chain(e)?.into_iter().map(Arc::new).collect();
            slot.state = Some(Arc::new(file));
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test, removed when it ends.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(tag: &str) -> Self {
            let d = std::env::temp_dir()
                .join(format!("tandem-restore-point-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// An empty savepoint directory was reported as "checkpoint 0 does not
    /// fit job"; a savepoint whose manifest is a symlink loop was taken for
    /// a directory without checkpoints.
    #[test]
    fn a_restore_point_that_holds_nothing_or_cannot_be_read_says_why() {
        let d = Dir::new("why");
        let sp = d.0.join("sp-3");
        std::fs::create_dir(&sp).unwrap();
        let e = load_restore_point(&sp).unwrap_err().to_string();
        assert!(e.contains("holds no checkpoint or savepoint"), "{e}");
        assert!(e.contains("sp-3") && !e.contains("checkpoint 0"), "{e}");

        std::os::unix::fs::symlink("b", sp.join("a")).unwrap();
        std::os::unix::fs::symlink("a", sp.join("b")).unwrap();
        std::os::unix::fs::symlink("a", sp.join("manifest.json")).unwrap();
        let e = load_restore_point(&sp).unwrap_err().to_string();
        assert!(e.contains("a symlink loop"), "{e}");
        assert!(e.contains("manifest.json"), "{e}");
        let e = load_restore_point(&sp.join("a")).unwrap_err().to_string();
        assert!(e.contains("a symlink loop"), "{e}");

        std::fs::write(d.0.join("manifest-4.json"), b"{").unwrap();
        let e = load_restore_point(&d.0).unwrap_err().to_string();
        assert!(e.contains("holds no valid checkpoint"), "{e}");
        assert!(e.contains("checkpoint 4: "), "{e}");
    }
}

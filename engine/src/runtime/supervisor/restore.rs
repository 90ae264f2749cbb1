//! What a restart or a job starts from: a checkpoint or savepoint read
//! (a savepoint directory, a manifest, a checkpoint directory's newest
//! valid one), every file mapped and verified and matched to the job's
//! operator instances — and, when the newest is damaged, an older one.

use super::checkpoints::Completed;
use super::{Key, Supervisor, JOB_META, JOB_SHAPE};
use crate::checkpoint::{self, CheckpointError, FileEntry, Manifest};
use crate::error::JobError;
use crate::metrics::RecoveryRecord;
use crate::runtime::coord::{InstanceRestore, Restore};
use crate::runtime::graph::{Graph, NodeKind, Rescale};
use std::collections::{HashMap, HashSet};
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
/// checkpoint directory — there, the restore point
/// [`crate::recovery::resume`] chooses: the newest checkpoint or savepoint
/// that verifies, never one older than a savepoint that does not, and
/// none when the directory's ids and times disagree. Also returns the
/// newer checkpoints passed over, and why.
///
/// Whatever fails says why: a path that cannot be looked at (a symlink
/// loop, no permission) or a savepoint manifest that cannot be read keeps
/// its system error — it is not taken for a directory without
/// checkpoints — and a directory that holds none says so.
pub(in crate::runtime) fn load_restore_point(
    path: &Path,
) -> Result<(Manifest, Vec<String>), JobError> {
    use crate::recovery::resume::{choose, Candidate, Choice};
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
    let listed = checkpoint::list(path)?;
    let mut loaded: Vec<Option<Result<Manifest, CheckpointError>>> =
        listed.iter().map(|l| Some(l.load())).collect();
    let candidates: Vec<Candidate> = listed
        .iter()
        .zip(&loaded)
        .map(|(l, m)| Candidate {
            savepoint: l.kind == checkpoint::SnapshotKind::Savepoint,
            id: l.id,
            created_at_ms: m
                .as_ref()
                .and_then(|m| m.as_ref().ok())
                .map(|m| m.created_at_ms),
        })
        .collect();
    let choice = choose(&candidates, |i| match &loaded[i] {
        Some(Ok(m)) => m.verify_whole().map_err(|e| e.to_string()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("read twice".into()),
    });
    match choice {
        Choice::Take { index, skipped } => {
            let m = loaded[index]
                .take()
                .expect("loaded above")
                .expect("verified above");
            Ok((m, skipped))
        }
        Choice::Nothing { skipped } => Err(JobError::NoRestorePoint {
            path: path.to_path_buf(),
            skipped,
        }),
        Choice::Refuse(reason) => Err(JobError::AmbiguousRestorePoint {
            path: path.to_path_buf(),
            reason,
        }),
    }
}

/// Whether a job of `graph`, placed as `plan` and configured as
/// `config`, can start from `m`: what [`Supervisor::new`] refuses, checked
/// without starting anything (every file mapped and verified).
pub(in crate::runtime) fn check_restore(
    m: &Manifest,
    graph: &Graph,
    plan: &crate::runtime::placement::Plan,
    config: &crate::runtime::RuntimeConfig,
) -> Result<(), JobError> {
    let r = build_restore(m, graph, None)?;
    refuse_unrestorable(&r, m, graph, plan, config)
}

/// Which state backend wrote a keyed instance's restored state — `disk`
/// for the disk backend's runs, `memory` for the in-memory backend's
/// archives — from its first file (`None`: it holds none).
fn backend_of(i: &InstanceRestore) -> Option<&'static str> {
    if !i.lazy.is_empty() {
        // Key indexes: only the in-memory backend writes them.
        return Some("memory");
    }
    let first = i
        .chain
        .first()
        .or(i.state.as_ref())
        .or_else(|| i.parts.first().and_then(|p| p.first()))?;
    Some(if crate::state::disk::is_run(first.payload()) {
        "disk"
    } else {
        "memory"
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

/// What a job starting from `m` (restored as `r`) could not restore
/// faithfully, refused before any work, naming the operator:
/// - an operator with state whose chain runs in a child process (process
///   isolation builds it from its standby's state only: the checkpoint's
///   would be silently dropped);
/// - a keyed state written by the other state backend (each reads only
///   its own format: the attempt would fail at every restart);
/// - a keyed state on the disk backend at another parallelism.
pub(super) fn refuse_unrestorable(
    r: &Restore,
    m: &Manifest,
    graph: &Graph,
    plan: &crate::runtime::placement::Plan,
    config: &crate::runtime::RuntimeConfig,
) -> Result<(), JobError> {
    let process = config
        .standby
        .as_ref()
        .is_some_and(|s| s.isolation == crate::standby::Isolation::Process);
    let disk = matches!(config.state_backend, crate::state::StateBackend::Disk(_));
    let mut keys: Vec<&Key> = r.instances.keys().collect();
    keys.sort();
    for k in keys {
        let i = &r.instances[k];
        let name = &graph.nodes[k.0].name;
        let held = i.state.is_some() || !i.chain.is_empty() || !i.lazy.is_empty();
        let ours = config.state_backend.name();
        let wrote = graph.nodes[k.0].in_backend.then(|| backend_of(i)).flatten();
        let reason = if let Some(wrote) = wrote.filter(|w| *w != ours) {
            format!(
                "operator `{name}`'s keyed state there was written by the {wrote} state backend, \
                 and this job runs the {ours} backend: a keyed state restores only into the \
                 backend that wrote it (run the job with the {wrote} backend{})",
                m.state_backend
                    .as_deref()
                    .filter(|b| *b != wrote)
                    .map_or(String::new(), |b| format!("; the manifest says {b}"))
            )
        } else if process && plan.backed[k.0].is_some() && (held || !i.parts.is_empty()) {
            format!(
                "operator `{name}` has state there and runs in a child process (process \
                 isolation), which does not restore a checkpoint's state yet: restore with \
                 thread isolation"
            )
        } else if disk && !i.parts.is_empty() {
            format!(
                "keyed operator `{name}` ran with another parallelism there, and a keyed state \
                 on the disk backend restores only at the one it was checkpointed at (restore \
                 at that parallelism, or with StateBackend::Memory)"
            )
        } else {
            continue;
        };
        return Err(JobError::Incompatible { id: m.id, reason });
    }
    Ok(())
}

/// Each operator's parallelism when `m` was taken, by node: the list the
/// checkpoint keeps ([`JOB_SHAPE`]), or — in one written before it did —
/// the instances its files and finished list name (every source and
/// stateful instance is there).
fn parallelism_in(
    m: &Manifest,
    node_of: &HashMap<&str, usize>,
) -> Result<HashMap<usize, usize>, JobError> {
    let mut seen: HashMap<usize, usize> = HashMap::new();
    let mut shape = None;
    for e in &m.files {
        if e.operator == JOB_META || e.operator == JOB_SHAPE {
            let file = m.open(e)?;
            let list = checkpoint::access::<Vec<(String, u32)>>(file.payload())?;
            let mut got = HashMap::new();
            for item in list.iter() {
                if let Some(&n) = node_of.get(item.0.as_str()) {
                    let c: &mut usize = got.entry(n).or_default();
                    let v = item.1.to_native() as usize;
                    *c = if e.operator == JOB_SHAPE {
                        v
                    } else {
                        (*c).max(v + 1)
                    };
                }
            }
            if e.operator == JOB_SHAPE {
                shape = Some(got);
            } else {
                for (n, c) in got {
                    let s = seen.entry(n).or_default();
                    *s = (*s).max(c);
                }
            }
        } else if let Some(&n) = node_of.get(e.operator.as_str()) {
            let c = seen.entry(n).or_default();
            *c = (*c).max(e.instance as usize + 1);
        }
    }
    Ok(shape.unwrap_or(seen))
}

/// The job's graph with each source at the number of partitions (instances)
/// it has in restore point `m` (see [`Graph::pinned_to`]): a source's
/// positions are per partition, so its partitions outlive a change of the
/// job's parallelism. The graph itself when every source already runs so.
pub(in crate::runtime) fn pin_sources(
    graph: &Arc<Graph>,
    m: &Manifest,
) -> Result<Arc<Graph>, JobError> {
    let node_of = names_of(graph);
    let had = parallelism_in(m, &node_of)?;
    let mut pins: Vec<(usize, usize)> = had
        .into_iter()
        .filter(|&(n, p)| {
            matches!(graph.nodes[n].kind, NodeKind::Source { .. })
                && p > 0
                && p != graph.nodes[n].parallelism
        })
        .collect();
    if pins.is_empty() {
        return Ok(Arc::clone(graph));
    }
    pins.sort();
    graph
        .pinned_to(&pins)
        .map(Arc::new)
        .map_err(|reason| JobError::Incompatible { id: m.id, reason })
}

fn names_of(graph: &Graph) -> HashMap<&str, usize> {
    graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (&*n.name, i))
        .collect()
}

/// Whether old instance `old` of `was` and new instance `new` of `now` own
/// key hashes in common: instance `i` of `n` owns the hashes `h` with
/// `h * n / 2^64 == i` ([`crate::runtime::channel::lane_of`]), the range
/// from `ceil(i * 2^64 / n)` to the next instance's start.
fn key_ranges_overlap(old: usize, was: usize, new: usize, now: usize) -> bool {
    let lo = |i: usize, n: usize| ((i as u128) << 64).div_ceil(n as u128);
    lo(old, was) < lo(new + 1, now) && lo(new, now) < lo(old + 1, was)
}

/// One old instance of an operator restored at another parallelism.
#[derive(Default)]
struct OldInstance {
    /// Its chain, the snapshot itself last (empty: no state).
    files: Vec<Arc<checkpoint::SnapshotFile>>,
    finished: bool,
}

/// What the tasks of an attempt restore from checkpoint (or savepoint)
/// `m`; `own_store`: the job's checkpoint directory (a checkpoint of it is
/// one the next checkpoint's deltas may apply over).
///
/// An operator that runs with another parallelism than it had in `m` is
/// redistributed by its [`Rescale`] rule: keyed state by key range, a
/// replicated state copied, an operator without state started anew (and
/// finished only if every old instance was); one whose own state cannot be
/// split is refused, naming it. (Sources keep their partitions:
/// [`pin_sources`].)
pub(super) fn build_restore(
    m: &Manifest,
    graph: &Graph,
    own_store: Option<&Path>,
) -> Result<Restore, JobError> {
    let node_of = names_of(graph);
    let was = parallelism_in(m, &node_of)?;
    let rescaled: HashSet<usize> = was
        .iter()
        .filter(|&(&n, &p)| p != graph.nodes[n].parallelism)
        .map(|(&n, _)| n)
        .collect();
    let mut r = Restore {
        checkpoint: m.id,
        instances: HashMap::new(),
        // A redistributed state is a new one: the next checkpoint writes
        // it whole, not as deltas over files of other instances.
        of_store: rescaled.is_empty()
            && m.kind == checkpoint::SnapshotKind::Checkpoint
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
        let p = was
            .get(&node)
            .copied()
            .unwrap_or(graph.nodes[node].parallelism);
        if e.instance as usize >= p {
            return Err(JobError::Incompatible {
                id: m.id,
                reason: format!(
                    "it has instance {} of `{}`, which it says ran with parallelism {p}",
                    e.instance, e.operator
                ),
            });
        }
        Ok((node, e.instance as usize))
    };
    for &n in &rescaled {
        if matches!(graph.nodes[n].kind, NodeKind::Source { .. }) {
            // `pin_sources` runs before the job starts: an engine bug.
            return Err(JobError::Incompatible {
                id: m.id,
                reason: format!(
                    "it has {} partition(s) of source `{}`, which runs with {}",
                    was[&n], graph.nodes[n].name, graph.nodes[n].parallelism
                ),
            });
        }
    }
    let mut old: HashMap<Key, OldInstance> = HashMap::new();
    for e in &m.files {
        if e.operator == JOB_SHAPE {
            continue;
        }
        let node = node_of.get(e.operator.as_str()).copied();
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
                if rescaled.contains(&k.0) {
                    old.entry(k).or_default().finished = true;
                } else {
                    r.instances.entry(k).or_default().finished = true;
                }
            }
            continue;
        }
        let k = locate(e)?;
        if node.is_some_and(|n| rescaled.contains(&n)) {
            if file.header().payload_len > 0 {
                let mut files: Vec<_> = m.open_chain(e)?.into_iter().map(Arc::new).collect();
                files.push(Arc::new(file));
                old.entry(k).or_default().files = files;
            }
            continue;
        }
        let slot: &mut InstanceRestore = r.instances.entry(k).or_default();
        slot.position = e.positions.first().map(|p| p.next_seq);
        if file.header().payload_len > 0 {
            slot.chain = m.open_chain(e)?.into_iter().map(Arc::new).collect();
            slot.state = Some(Arc::new(file));
        }
    }
    let mut rescaled: Vec<usize> = rescaled.into_iter().collect();
    rescaled.sort();
    for n in rescaled {
        let node = &graph.nodes[n];
        let (had, now) = (was[&n], node.parallelism);
        let none = OldInstance::default();
        let olds: Vec<(usize, &OldInstance)> = (0..had)
            .map(|i| (i, old.get(&(n, i)).unwrap_or(&none)))
            .collect();
        let finished = olds.iter().all(|(_, o)| o.finished);
        let stateful: Vec<(usize, &OldInstance)> = olds
            .iter()
            .copied()
            .filter(|(_, o)| !o.files.is_empty())
            .collect();
        for j in 0..now {
            let slot = r.instances.entry((n, j)).or_default();
            slot.finished = finished;
            if matches!(node.kind, NodeKind::Sink(_)) && now < had {
                slot.adopted = (now..had)
                    .filter(|i| i % now == j)
                    .map(|i| (i, olds[i].1.finished))
                    .collect();
            }
            if stateful.is_empty() {
                continue;
            }
            match node.rescale {
                Rescale::Keyed => {
                    slot.parts = stateful
                        .iter()
                        .filter(|(i, _)| key_ranges_overlap(*i, had, j, now))
                        .map(|(_, o)| o.files.clone())
                        .collect();
                }
                Rescale::Replicate => {
                    let mut files = stateful[0].1.files.clone();
                    slot.state = files.pop();
                    slot.chain = files;
                }
                Rescale::Refuse(why) => {
                    return Err(JobError::Incompatible {
                        id: m.id,
                        reason: format!(
                            "operator `{}` ran with parallelism {had} there and runs with {now} \
                             now, and {why}",
                            node.name
                        ),
                    });
                }
            }
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

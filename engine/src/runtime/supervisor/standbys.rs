//! Standby groups at the start of each attempt: the checks a job with
//! standbys must pass before anything runs, the directory their shared
//! mappings live in, and one group per backed-up operator instance.

use super::{now_ns, Supervisor};
use crate::error::{JobError, RuntimeError};
use crate::job::graph::{Graph, NodeKind};
use crate::runtime::{lanes, RuntimeConfig};
use crate::standby::group::Group;
use crate::standby::run::StandbyRun;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

impl Supervisor {
    /// The standby groups of attempt `number` (`None` when no operator
    /// runs with a standby).
    pub(super) fn standby_run(&self, number: u32) -> Result<Option<Arc<StandbyRun>>, JobError> {
        let Some(cfg) = &self.config.standby else {
            return Ok(None);
        };
        let nodes: Vec<usize> = (0..self.graph.nodes.len())
            .filter(|&n| self.graph.nodes[n].standby.is_some())
            .collect();
        if nodes.is_empty() {
            return Ok(None);
        }
        let (dir, temp) = match &self.config.run_dir {
            Some(d) => (d.join(format!("standby-{number}")), false),
            // Memory-backed when the machine has it: the kernel writes a
            // disk-backed mapping's dirty pages back, and a write to a page
            // under writeback waits for the disk (milliseconds).
            None => (
                {
                    sweep_stale_standby_dirs(&memory_dir());
                    memory_dir()
                }
                .join(format!(
                    "tandem-standby-{}-{}-{number}",
                    std::process::id(),
                    self.origin.elapsed().as_nanos()
                )),
                true,
            ),
        };
        let io = |e: std::io::Error| JobError::Io {
            operator: "<standby>".into(),
            instance: 0,
            context: "creating the standby directory".into(),
            path: Some(dir.clone()),
            source: e,
        };
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io)?;
        }
        std::fs::create_dir_all(&dir).map_err(io)?;
        let workers = self.plan.workers;
        let worker_of = |n: usize, i: usize| {
            self.plan.worker_of_task[self
                .plan
                .task_of(n, i)
                .expect("engine bug: node instance without a task")]
        };
        let mut groups = HashMap::new();
        let now = now_ns(self.origin);
        for &n in &nodes {
            let ein = self
                .graph
                .edges
                .iter()
                .position(|e| e.to == n)
                .expect("validated: one input");
            for i in 0..self.graph.nodes[n].parallelism {
                let upstream: Vec<usize> = lanes(&self.graph, ein)
                    .into_iter()
                    .filter(|&(_, d)| d == i)
                    .map(|(u, _)| u)
                    .collect();
                let mut consumers = Vec::new();
                for (ej, e) in self.graph.edges.iter().enumerate() {
                    if e.from != n {
                        continue;
                    }
                    for (u, d) in lanes(&self.graph, ej) {
                        if u == i {
                            consumers.push((ej, e.to, d, worker_of(e.to, d)));
                        }
                    }
                }
                let pw = worker_of(n, i);
                let g = Group::create(
                    n,
                    i,
                    Arc::clone(&self.names[n]),
                    upstream,
                    consumers,
                    pw,
                    (pw + 1) % workers,
                    workers,
                    cfg,
                    &dir,
                    now,
                )
                .map_err(|e| JobError::Io {
                    operator: self.names[n].to_string(),
                    instance: i,
                    context: "creating the standby's buffer queue".into(),
                    path: Some(dir.clone()),
                    source: std::io::Error::other(e.to_string()),
                })?;
                if let Some(p) = &self.config.probes {
                    let files: Vec<_> = g.queues.iter().map(|q| q.path().to_path_buf()).collect();
                    p.standby_files(&self.names[n], i, &files);
                }
                groups.insert((n, i), Arc::new(g));
            }
        }
        Ok(Some(Arc::new(StandbyRun {
            live: AtomicUsize::new(groups.len()),
            groups,
            log: Default::default(),
            inbox: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
            pending: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            dir,
            temp,
        })))
    }
}

/// Where files that are only ever mapped go when the user named no run
/// directory: `/dev/shm` (tmpfs) if there is one, else the temp dir.
pub(super) fn memory_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Removes `tandem-standby-<pid>-…` directories in `dir` whose process is
/// gone (killed before it could clean up: on tmpfs they hold memory).
pub(super) fn sweep_stale_standby_dirs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("tandem-standby-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Standby operators must fit the engine's protocol (checked before
/// anything runs).
pub(super) fn validate_standby(graph: &Graph, config: &RuntimeConfig) -> Result<(), JobError> {
    if config.standby.is_none() {
        return Ok(());
    }
    let has = |n: usize| graph.nodes[n].standby.is_some();
    let err = |n: usize, why: &str| -> JobError {
        RuntimeError::Standby(format!("operator `{}`: {why}", graph.nodes[n].name)).into()
    };
    for (n, node) in graph.nodes.iter().enumerate() {
        if !has(n) {
            continue;
        }
        if !matches!(node.kind, NodeKind::Unary(_)) {
            return Err(err(n, "only one-input operators can have a standby"));
        }
        for e in &graph.edges {
            if e.to == n && has(e.from) {
                return Err(err(
                    n,
                    "its upstream operator has a standby too (not supported)",
                ));
            }
        }
        if graph.edges.iter().filter(|e| e.to == n).count() != 1 {
            return Err(err(n, "it must have exactly one input"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standby_directories_of_dead_processes_are_swept_and_live_ones_kept() {
        let root = std::env::temp_dir().join(format!("tandem-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        // PIDs above the kernel's maximum (4194304) never exist.
        let dead = root.join("tandem-standby-4194399-1-0");
        let live = root.join(format!("tandem-standby-{}-1-0", std::process::id()));
        let other = root.join("unrelated");
        for d in [&dead, &live, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        sweep_stale_standby_dirs(&root);
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
        std::fs::remove_dir_all(root).unwrap();
    }
}

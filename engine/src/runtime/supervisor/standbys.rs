//! Standby groups at the start of each attempt: the checks a job with
//! standbys must pass before anything runs, the directory their shared
//! mappings live in, and one group per backed-up operator instance.

use super::{now_ns, Supervisor};
use crate::error::{JobError, RuntimeError};
use crate::runtime::graph::{Graph, NodeKind};
use crate::runtime::standby::group::Group;
use crate::runtime::standby::run::StandbyRun;
use crate::runtime::wiring::lanes;
use crate::runtime::RuntimeConfig;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

impl Supervisor {
    /// The standby groups of `region`'s attempt `number` (`None` when no
    /// operator of the region runs with a standby).
    pub(super) fn standby_run(
        &self,
        region: usize,
        number: u32,
        restore: Option<&crate::runtime::coord::Restore>,
    ) -> Result<Option<Arc<StandbyRun>>, JobError> {
        let Some(cfg) = &self.config.standby else {
            return Ok(None);
        };
        // One group per instance of each backed-up chain, named by its head.
        let keys = &self.regions[region].keys;
        let nodes: Vec<usize> = (0..self.graph.nodes.len())
            .filter(|&n| self.plan.backed[n] == Some(n))
            .filter(|&n| (0..self.graph.nodes[n].parallelism).any(|i| keys.contains(&(n, i))))
            .collect();
        if nodes.is_empty() {
            return Ok(None);
        }
        let scratch = self.standby_dir(number)?;
        let dir = scratch.path().to_path_buf();
        let workers = self.plan.workers;
        let worker_of = |n: usize, i: usize| {
            self.plan.worker_of_task[self
                .plan
                .task_of(n, i)
                .expect("engine bug: node instance without a task")]
        };
        // Each group's input lanes, and what their files take.
        let mut members = self.members(&nodes, restore);
        members.retain(|(n, i, _, _)| keys.contains(&(*n, *i)));
        // The whole run's need, checked before any file is made: every
        // file's blocks are reserved when it is created (a sparse mapping
        // dies of SIGBUS on a full filesystem), and this says up front,
        // in one error, what the run needs. (On any error from here on,
        // dropping `scratch` removes the attempt's directory whole.)
        check_space(&dir, cfg, &members)?;
        let mut groups = HashMap::new();
        let now = now_ns(self.origin);
        // Hot standbys compute along: on a worker the job's tasks leave
        // idle (a core of its own) they cost the job nothing, so they go
        // there first, in turn; else beside the next primary, where they
        // compute only while that worker rests (`incarnation/standby.rs`).
        let idle: Vec<usize> = (0..workers)
            .filter(|w| !self.plan.worker_of_task.contains(w))
            .collect();
        let hot = cfg.mode == crate::standby::config::StandbyMode::Hot;
        let mut turn = 0;
        for (n, i, upstream, source) in members {
            let chain = self.plan.chain(n);
            // The consumers of every ring that leaves the chain.
            let mut consumers = Vec::new();
            for (ej, e) in self.graph.edges.iter().enumerate() {
                if !chain.contains(&e.from) || self.plan.chained[ej] {
                    continue;
                }
                for (u, d) in lanes(&self.graph, ej) {
                    if u == i {
                        consumers.push((ej, e.to, d, worker_of(e.to, d)));
                    }
                }
            }
            let pw = worker_of(n, i);
            let sw = crate::runtime::standby::group::standby_worker(pw, workers, &idle, hot, turn);
            turn += 1;
            let mut g = Group::create(
                n,
                i,
                Arc::clone(&self.names[n]),
                upstream,
                consumers,
                pw,
                sw,
                workers,
                cfg,
                &dir,
                now,
                source,
            )
            .map_err(|e| JobError::Io {
                operator: self.names[n].to_string(),
                instance: i,
                context: "creating the standby's files".into(),
                path: Some(dir.clone()),
                source: std::io::Error::other(e.to_string()),
            })?;
            g.standby_on_idle = idle.contains(&sw);
            g.idle_workers = idle.clone();
            g.chain_names = chain.iter().map(|&m| Arc::clone(&self.names[m])).collect();
            g.chain = chain;
            if let Some(p) = &self.config.probes {
                // The chain's input queues, under each of its operators.
                let files: Vec<_> = g.queues.iter().map(|q| q.path().to_path_buf()).collect();
                for name in &g.chain_names {
                    p.standby_files(name, i, &files);
                }
            }
            groups.insert((n, i), Arc::new(g));
        }
        Ok(Some(Arc::new(StandbyRun {
            live: AtomicUsize::new(groups.len()),
            groups,
            backed: self.plan.backed.clone(),
            log: Default::default(),
            inbox: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
            pending: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            dir: scratch,
            children: Default::default(),
            child_cores: if self.config.pin {
                let workers_cores = &self.cores[..workers.min(self.cores.len())];
                crate::sys::affinity::available_cores()
                    .into_iter()
                    .filter(|c| !workers_cores.contains(c))
                    .collect()
            } else {
                Vec::new()
            },
            next_child_core: AtomicUsize::new(0),
        })))
    }

    /// Attempt `number`'s standby directory: in the run directory, or a
    /// fresh one in memory.
    fn standby_dir(&self, number: u32) -> Result<crate::sys::scratch::ScratchDir, JobError> {
        let io = |dir: &Path, e: std::io::Error| JobError::Io {
            operator: "<standby>".into(),
            instance: 0,
            context: "creating the standby directory".into(),
            path: Some(dir.to_path_buf()),
            source: e,
        };
        Ok(match &self.config.run_dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
                let dir = d.join(format!("standby-{number}"));
                // Another run's with this run directory: a dead one's (its
                // lock free, or none) goes; a live one's (its lock held)
                // is refused rather than shared.
                let lock = dir.join(crate::sys::scratch::LOCK);
                let live = lock.exists() && !crate::sys::scratch::is_stale(&lock);
                if live {
                    return Err(io(
                        &dir,
                        std::io::Error::other("a live run uses this run directory"),
                    ));
                }
                if dir.exists() {
                    std::fs::remove_dir_all(&dir).map_err(|e| io(&dir, e))?;
                }
                crate::sys::scratch::ScratchDir::create(dir.clone()).map_err(|e| io(&dir, e))?
            }
            // Memory-backed when the machine has it: the kernel writes a
            // disk-backed mapping's dirty pages back, and a write to a page
            // under writeback waits for the disk (milliseconds).
            None => crate::sys::scratch::ScratchDir::unique(&memory_dir(), "standby")
                .map_err(|e| io(&memory_dir(), e))?,
        })
    }

    /// The groups to make: each backed-up chain's head (`nodes`), per
    /// instance, with its input lanes and the source it replays.
    fn members(
        &self,
        nodes: &[usize],
        restore: Option<&crate::runtime::coord::Restore>,
    ) -> Vec<Member> {
        let mut members = Vec::new();
        for &n in nodes {
            // Every input edge (a union has several): its lanes, in edge
            // order.
            let ins: Vec<usize> = (0..self.graph.edges.len())
                .filter(|&e| self.graph.edges[e].to == n)
                .collect();
            for i in 0..self.graph.nodes[n].parallelism {
                let upstream: Vec<(usize, usize)> = ins
                    .iter()
                    .flat_map(|&ein| {
                        lanes(&self.graph, ein)
                            .into_iter()
                            .filter(|&(_, d)| d == i)
                            .map(move |(u, _)| (ein, u))
                    })
                    .collect();
                // A replayed source: its restored position starts the lane.
                let source = self.plan.replays[n].map(|s| {
                    let at = restore
                        .and_then(|r| r.instances.get(&(s, i)))
                        .and_then(|r| r.position)
                        .unwrap_or(0);
                    (s, at)
                });
                members.push((n, i, upstream, source));
            }
        }
        members
    }
}

/// A group to be made: its head, instance, upstream lanes, and the source
/// it replays with the position it starts at.
type Member = (usize, usize, Vec<(usize, usize)>, Option<(usize, u64)>);

/// Refuses a run whose standby files would not fit `dir`'s filesystem.
fn check_space(
    dir: &Path,
    cfg: &crate::standby::StandbyConfig,
    members: &[Member],
) -> Result<(), JobError> {
    let config = |e: crate::standby::bq::BqError| -> JobError {
        RuntimeError::Standby(format!("queue memory {}: {e}", cfg.queue_memory)).into()
    };
    let mut needed = 0u64;
    let mut files = 0;
    for (_, _, upstream, source) in members {
        // A replayed source's lane has no queue file.
        let queued = if source.is_some() { 0 } else { upstream.len() };
        needed = needed.saturating_add(Group::files_len(queued, cfg).map_err(config)?);
        // The queues, the determinant log, the first snapshot exchange and
        // the liveness cell.
        files += queued + 3;
    }
    let Ok(free) = crate::sys::fs::free_bytes(dir) else {
        // A filesystem that cannot say: each file's reservation still
        // refuses what does not fit.
        return Ok(());
    };
    if needed > free {
        return Err(RuntimeError::NoSpace {
            dir: dir.to_path_buf(),
            needed,
            free,
            files,
            queue: Group::queue_file_len(cfg).map_err(config)?,
        }
        .into());
    }
    Ok(())
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

/// Standby operators must fit the engine's protocol (checked before
/// anything runs): a marked operator is a one-input operator (its input
/// may be a union of several edges) and heads a backed-up chain or joins
/// the one its input comes from; a union reads either only from backed-up
/// chains or from none.
pub(super) fn validate_standby(
    graph: &Graph,
    plan: &crate::runtime::placement::Plan,
    config: &RuntimeConfig,
) -> Result<(), JobError> {
    if config.standby.is_none() {
        return Ok(());
    }
    let err = |n: usize, why: &str| -> JobError {
        RuntimeError::Standby(format!("operator `{}`: {why}", graph.nodes[n].name)).into()
    };
    for (n, node) in graph.nodes.iter().enumerate() {
        if node.standby.is_none() {
            continue;
        }
        if matches!(config.state_backend, crate::state::StateBackend::Disk(_)) {
            // A standby's copy of a state larger than memory is a second
            // store, brought forward by its deltas: not built yet.
            return Err(err(
                n,
                "the disk state backend does not take standbys yet \
                 (run the job with StateBackend::Memory, or without .standby())",
            ));
        }
        if !matches!(node.kind, NodeKind::Unary(_)) {
            return Err(err(n, "only one-input operators can have a standby"));
        }
    }
    // A union (a one-input operator with several input edges) has one
    // port over all its lanes: plain rings, or groups' primaries.
    for n in 0..graph.nodes.len() {
        if !matches!(graph.nodes[n].kind, NodeKind::Unary(_)) {
            continue;
        }
        let backed: Vec<bool> = graph
            .edges
            .iter()
            .filter(|e| e.to == n)
            .map(|e| plan.backed[e.from].is_some())
            .collect();
        if backed.iter().any(|&b| b) && !backed.iter().all(|&b| b) {
            return Err(err(
                n,
                "a union of inputs from backed-up operators and from operators without a \
                 standby is not supported",
            ));
        }
    }
    if let Some(&(n, why)) = plan.refused.first() {
        return Err(err(n, why));
    }
    if config
        .standby
        .as_ref()
        .is_some_and(|s| s.isolation == crate::standby::Isolation::Process)
    {
        validate_process_isolation(graph, plan, config, &err)?;
    }
    Ok(())
}

/// What process isolation needs: one-input operators in the chains, a
/// codec for what leaves a chain, and no checkpoints (an operator in a
/// child cannot acknowledge one yet).
fn validate_process_isolation(
    graph: &Graph,
    plan: &crate::runtime::placement::Plan,
    config: &RuntimeConfig,
    err: &dyn Fn(usize, &str) -> JobError,
) -> Result<(), JobError> {
    if config.checkpoint.is_some() {
        return Err(RuntimeError::Standby(
            "process isolation does not run with checkpoints yet (an operator in a child \
             process cannot take part in one): use thread isolation, or no checkpoints"
                .into(),
        )
        .into());
    }
    for (n, head) in plan.backed.iter().enumerate() {
        if head.is_none() {
            continue;
        }
        let node = &graph.nodes[n];
        if !matches!(node.kind, NodeKind::Unary(_)) {
            return Err(err(
                n,
                "under process isolation a backed-up chain holds one-input operators only",
            ));
        }
        // Faults are decided in the driver, on the chain's input: an
        // operator chained after the head sees its records in the child.
        if *head != Some(n)
            && config
                .probes
                .as_ref()
                .is_some_and(|p| (0..node.parallelism).any(|i| p.probe(&node.name, i).is_some()))
        {
            return Err(err(
                n,
                "it is chained into a backed-up chain that runs in a child process (process \
                 isolation), where its records are not probed: inject faults into the chain's \
                 head, or run it apart (`Chaining::Never`)",
            ));
        }
        let leaves = graph
            .edges
            .iter()
            .enumerate()
            .any(|(ei, e)| e.from == n && !plan.chained[ei]);
        if leaves
            && !crate::runtime::standby::kit::of_stream(node)
                .is_some_and(|k| k.has_codec(&graph.codecs))
        {
            return Err(err(
                n,
                "under process isolation a backed-up chain's output crosses from its child \
                 process encoded, and this operator's output type has no codec: give the job \
                 one with `JobBuilder::codec::<T>()`",
            ));
        }
    }
    Ok(())
}

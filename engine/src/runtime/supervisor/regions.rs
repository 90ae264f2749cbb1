//! Failover regions as the supervisor runs them: each region's tasks and
//! operator instances (see the supervisor's module docs).

use super::Key;
use crate::recovery::restart::Failover;
use crate::runtime::graph::Graph;
use crate::runtime::placement::Plan;
use std::collections::HashSet;
use std::sync::Arc;

/// The tasks that fail and restart together.
pub(super) struct Region {
    /// Its tasks (indices into the plan's).
    pub(super) tasks: Vec<usize>,
    /// Its operator instances.
    pub(super) keys: HashSet<Key>,
    /// Its tasks, if the job has other regions (`None`: every task).
    pub(super) only: Option<Arc<HashSet<usize>>>,
}

impl Region {
    /// Those of `keys` that are the region's.
    pub(super) fn own<'a>(&self, keys: impl IntoIterator<Item = &'a Key>) -> Vec<Key> {
        keys.into_iter()
            .filter(|k| self.keys.contains(k))
            .copied()
            .collect()
    }
}

/// The regions the job runs as: one (every task) with [`Failover::Full`]
/// or a graph of one region; else one per failover region of the graph,
/// each with the tasks that run its instances.
pub(super) fn regions(graph: &Graph, plan: &Plan, failover: Failover) -> Vec<Region> {
    let all = || Region {
        tasks: (0..plan.tasks.len()).collect(),
        keys: graph
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(n, node)| (0..node.parallelism).map(move |i| (n, i)))
            .collect(),
        only: None,
    };
    let found = match failover {
        Failover::Region => graph.regions(),
        Failover::Full => return vec![all()],
    };
    if found.len() <= 1 {
        return vec![all()];
    }
    found
        .into_iter()
        .map(|keys| {
            let mut tasks: Vec<usize> = keys
                .iter()
                .map(|&(n, i)| {
                    plan.task_of(n, i)
                        .expect("engine bug: node instance without a task")
                })
                .collect();
            tasks.sort_unstable();
            tasks.dedup();
            Region {
                only: Some(Arc::new(tasks.iter().copied().collect())),
                tasks,
                keys: keys.into_iter().collect(),
            }
        })
        .collect()
}

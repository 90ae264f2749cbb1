//! The logical graph behind the typed builder, with types erased.
//!
//! The builder knows every stream's element type; the runtime does not. So
//! at the moment a node is added, the builder captures everything that
//! needs the types in closures and a per-type [`StreamKit`]: how to make a
//! ring for this stream, a sender, a receiver, a fan-out (built by
//! `runtime::kit`). The runtime then plans and wires tasks knowing only
//! node indices, passing typed values around as `Box<dyn Any>`; every
//! downcast is guaranteed by construction (a failed one is an engine bug
//! and says so).
//!
//! This is the plan, at the bottom of the runtime: it names what runs, not
//! how. A role beyond the core's (a standby) keeps its own typed kits in
//! the nodes as [`RoleKit`]s, which only its own module opens.

use crate::operator::OperatorInfo;
use crate::runtime::signal::WorkerSignal;
use crate::runtime::task::{Gate, OpSlot, Port, TaskCtx};
use std::any::Any;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A typed value in transit between graph code and runtime, on one thread.
pub(crate) type AnyBox = Box<dyn Any>;
/// A typed value in transit between threads (ring endpoints).
pub(crate) type AnySend = Box<dyn Any + Send>;

pub(crate) fn downcast<T: 'static>(b: AnyBox, what: &str) -> T {
    *b.downcast::<T>()
        .unwrap_or_else(|_| panic!("engine bug: type mismatch wiring {what}"))
}

pub(crate) fn downcast_send<T: 'static>(b: AnySend, what: &str) -> T {
    *b.downcast::<T>()
        .unwrap_or_else(|_| panic!("engine bug: type mismatch wiring {what}"))
}

/// What every node builder receives on its worker.
pub(crate) struct BuildCx {
    pub(crate) ctx: Rc<TaskCtx>,
    pub(crate) slot: OpSlot,
    pub(crate) info: OperatorInfo,
    pub(crate) probe: Probe,
    /// What the instance restores from a checkpoint (`None`: a fresh start).
    pub(crate) restore: Option<crate::runtime::coord::InstanceRestore>,
    /// A new primary's (or hot standby's) state from the standby exchange.
    pub(crate) standby_state: Option<Vec<u8>>,
    /// Built from a standby's recovery point: without `standby_state` the
    /// operator had none there, and starts fresh — not from the attempt's
    /// checkpoint, which is older than the point.
    pub(crate) from_point: bool,
}

impl BuildCx {
    /// For an instance restored from a checkpoint: hands its state payload
    /// (if it has one) to `restore` — a failure is reported through the
    /// task and fails the attempt — and returns whether the instance had
    /// finished. A fresh instance: `false`, `restore` is not called.
    pub(crate) fn restore_state(
        &self,
        restore: impl FnOnce(&[u8]) -> Result<(), crate::checkpoint::CheckpointError>,
    ) -> bool {
        self.restore_chain(|links, _| match links {
            [whole] => restore(whole),
            _ => Err(crate::checkpoint::CheckpointError::Delta(
                "an incremental snapshot of an operator that restores only whole ones".into(),
            )),
        })
    }
}

impl BuildCx {
    /// For an instance restored at another parallelism than its
    /// checkpoint's (a keyed state): calls `restore` with the chain of each
    /// old instance whose key range overlaps this one's (the last whole
    /// archive first; a failure fails the attempt) and returns whether the
    /// operator had finished. `None`: not such an instance — restore as
    /// usual.
    pub(crate) fn restore_parts(
        &self,
        mut restore: impl FnMut(&[&[u8]]) -> Result<(), crate::checkpoint::CheckpointError>,
    ) -> Option<bool> {
        if self.standby_state.is_some() || self.from_point {
            return None;
        }
        let r = self.restore.as_ref().filter(|r| !r.parts.is_empty())?;
        for part in &r.parts {
            let links: Vec<&[u8]> = part.iter().map(|f| f.payload()).collect();
            if let Err(source) = restore(&links) {
                self.ctx.shared.fail(crate::error::JobError::Restore {
                    operator: self.info.name.to_string(),
                    instance: self.info.instance,
                    source,
                });
                break;
            }
        }
        Some(r.finished)
    }

    /// As [`restore_state`](Self::restore_state) for a state that restores
    /// from a chain ([`crate::state::delta`]): `restore` gets the last
    /// whole archive and the deltas after it, oldest first, and the
    /// checkpoint they are (`None`: a standby's state, not a checkpoint of
    /// the job's store).
    pub(crate) fn restore_chain(
        &self,
        restore: impl FnOnce(&[&[u8]], Option<u64>) -> Result<(), crate::checkpoint::CheckpointError>,
    ) -> bool {
        self.restore_chain_lazily(|lazy, links, from| {
            if lazy.is_empty() {
                return restore(links, from);
            }
            // Read eagerly after all: every block verified first.
            let mut all = Vec::with_capacity(lazy.len());
            for f in lazy {
                f.verify_all()?;
                all.push(f.payload_unverified());
            }
            restore(&all, from)
        })
    }

    /// As [`restore_chain`](Self::restore_chain) for a state that can
    /// restore lazily: `restore` gets the chain as
    /// [`LazySnapshot`](crate::checkpoint::LazySnapshot)s when the
    /// checkpoint has it so (a keyed state's archives with key indexes;
    /// the bytes are then empty), else as bytes.
    pub(crate) fn restore_chain_lazily(
        &self,
        restore: impl FnOnce(
            &[Arc<crate::checkpoint::LazySnapshot>],
            &[&[u8]],
            Option<u64>,
        ) -> Result<(), crate::checkpoint::CheckpointError>,
    ) -> bool {
        let fail = |source| {
            self.ctx.fail(crate::error::JobError::Restore {
                operator: self.info.name.to_string(),
                instance: self.info.instance,
                source,
            })
        };
        if let Some(state) = &self.standby_state {
            if let Err(e) = restore(&[], &[state], None) {
                fail(e);
            }
            return self.restore.as_ref().is_some_and(|r| r.finished);
        }
        if self.from_point {
            return self.restore.as_ref().is_some_and(|r| r.finished);
        }
        let Some(r) = &self.restore else {
            return false;
        };
        if r.state.is_some() || !r.lazy.is_empty() {
            let mut links: Vec<&[u8]> = r.chain.iter().map(|f| f.payload()).collect();
            links.extend(r.state.iter().map(|f| f.payload()));
            let from = self
                .ctx
                .shared
                .restore
                .as_ref()
                .filter(|x| x.of_store)
                .map(|x| x.checkpoint);
            if let Err(source) = restore(&r.lazy, &links, from) {
                // A checkpoint that does not restore fails the attempt,
                // not only this task: a standby's copy of the operator
                // would read the same bytes (a lazily read file found
                // damaged here is passed over by the next attempt).
                self.ctx.shared.fail(crate::error::JobError::Restore {
                    operator: self.info.name.to_string(),
                    instance: self.info.instance,
                    source,
                });
            }
        }
        r.finished
    }
}

pub(crate) use crate::runtime::probe::Probe;

/// Builds a source port: `(cx, downstream collector, rate, gate,
/// watermarks, first partition) -> port`.
pub(crate) type SourceBuild = Arc<
    dyn Fn(
            BuildCx,
            AnyBox,
            Option<f64>,
            Option<Rc<Gate>>,
            Option<crate::time::Watermarks>,
            u32,
        ) -> Box<dyn Port>
        + Send
        + Sync,
>;
/// Builds a one-input hop: `(cx, downstream collector) -> input collector`.
pub(crate) type UnaryBuild = Arc<dyn Fn(BuildCx, AnyBox) -> AnyBox + Send + Sync>;
/// The type-erased input side of a co-operator: its two input collectors,
/// the readiness check of the first, and the holds of both.
pub(crate) struct CoInputs {
    pub(crate) first: AnyBox,
    pub(crate) second: AnyBox,
    pub(crate) ready: Box<dyn Fn() -> bool>,
    pub(crate) holds: [crate::runtime::task::Hold; 2],
}
/// Builds a two-input hop: `(cx, downstream) -> inputs`.
pub(crate) type BinaryBuild = Arc<dyn Fn(BuildCx, AnyBox) -> CoInputs + Send + Sync>;
/// Builds a sink: `cx -> input collector`.
pub(crate) type SinkBuild = Arc<dyn Fn(BuildCx) -> AnyBox + Send + Sync>;

/// Opens an instance of a source partition, type-erased (a
/// `Box<dyn Source<T>>`): what a backed-up chain that replays the source
/// runs in place of the source's own port.
pub(crate) type SourceOpen = Arc<dyn Fn(&OperatorInfo) -> AnyBox + Send + Sync>;

#[derive(Clone)]
pub(crate) enum NodeKind {
    Source {
        build: SourceBuild,
        open: SourceOpen,
        rate: Option<f64>,
        /// How its partitions generate watermarks (`None`: they do not).
        watermarks: Option<crate::time::Watermarks>,
        /// The job-wide number of its partition 0: the job's source
        /// partitions are numbered across its sources, in the order they
        /// were added, so two sources' tuple IDs never coincide.
        first_partition: u32,
    },
    Unary(UnaryBuild),
    Binary(BinaryBuild),
    Sink(SinkBuild),
}

#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) name: Arc<str>,
    pub(crate) parallelism: usize,
    pub(crate) kind: NodeKind,
    /// The element type of the node's output stream (`None` for sinks).
    pub(crate) out: Option<Arc<dyn StreamKit>>,
    /// The standby's kit of the node's output type (`None` for sinks):
    /// what a backed-up chain ending here, or a consumer of a group,
    /// builds (`StreamRoles` in `runtime/standby/kit.rs`).
    pub(crate) out_role: Option<RoleKit>,
    /// Built after `Stream::standby`: may run with a standby; its input
    /// type's buffer-queue side (`StandbyKit` in `runtime/standby/kit.rs`).
    pub(crate) standby: Option<RoleKit>,
    /// How its state is restored at another parallelism than the
    /// checkpoint's ([`Rescale`]).
    pub(crate) rescale: Rescale,
    /// Its keyed state lives in the job's state backend
    /// ([`crate::state::StateBackend`]: a keyed process function's), and
    /// restores only from a checkpoint of that backend.
    pub(crate) in_backend: bool,
}

/// How an operator's checkpointed state is restored when the job restores
/// a checkpoint or savepoint at another parallelism than it was taken at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rescale {
    /// Keyed state: each new instance takes the keys it owns now (a hash
    /// range, see [`crate::runtime::channel::key_instance`]) from the old instances whose
    /// ranges overlap its own.
    Keyed,
    /// Every instance holds the same state (a broadcast state): each new
    /// instance restores a copy of one old instance's.
    Replicate,
    /// A state the engine cannot split: refused, naming the operator, for
    /// this reason — unless no old instance had any state.
    Refuse(&'static str),
}

/// Why an operator's own state ([`crate::Process::snapshot_state`]) is
/// not redistributed.
pub(crate) const OWN_STATE: &str =
    "it keeps state of its own (`snapshot_state`), which the engine \
     cannot split among another number of instances: keep per-key state in a keyed operator, \
     or declare a state every instance holds alike with `Redistribution::Replicate`";

/// A role's typed kit for a node — what needs the node's types beyond the
/// core's [`StreamKit`] (a standby's, `runtime/standby/kit.rs`) — built by
/// the job builder with the node. The plan carries it; only the role's own
/// module opens it.
pub(crate) type RoleKit = Arc<dyn Any + Send + Sync>;

/// How records of an edge are spread over the consumer's instances.
#[derive(Clone)]
pub(crate) enum Partitioning {
    Forward,
    Rebalance,
    Broadcast,
    /// Holds an `Arc<dyn Fn(&T) -> u64 + Send + Sync>` for the stream's `T`.
    Hash(Arc<dyn Any + Send + Sync>),
}

impl Partitioning {
    /// Whether records stay on the same instance index.
    pub(crate) fn is_forward(&self) -> bool {
        matches!(self, Partitioning::Forward)
    }
}

#[derive(Clone)]
pub(crate) struct Edge {
    pub(crate) from: usize,
    pub(crate) to: usize,
    /// Input port of `to` (0, or 1 for the second input of a co-operator).
    pub(crate) port: usize,
    pub(crate) partitioning: Partitioning,
}

/// The validated graph a job runs.
#[derive(Clone)]
pub(crate) struct Graph {
    pub(crate) name: String,
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) codecs: Codecs,
    /// Sources whose instance count a restore point fixed (`(node,
    /// parallelism)`, see [`Graph::pinned_to`]); empty otherwise.
    pub(crate) pinned: Vec<(usize, usize)>,
}

impl Graph {
    /// This graph with source `node` at `parallelism` for each pin: a
    /// source's partitions are the instances it was checkpointed with,
    /// whatever parallelism the job now asks for — its records then
    /// reach the next operator, at its own parallelism, round robin
    /// (a forward edge between parallelisms that differ rebalances). The
    /// job-wide partition numbers are given anew, so that no two sources'
    /// tuple IDs coincide.
    pub(crate) fn pinned_to(&self, pins: &[(usize, usize)]) -> Result<Graph, String> {
        let mut g = self.clone();
        for &(node, p) in pins {
            let n = g
                .nodes
                .get_mut(node)
                .filter(|n| matches!(n.kind, NodeKind::Source { .. }))
                .ok_or_else(|| format!("node {node} is not a source of the job"))?;
            n.parallelism = p;
        }
        let mut next: usize = 0;
        for n in &mut g.nodes {
            if let NodeKind::Source {
                first_partition, ..
            } = &mut n.kind
            {
                if n.parallelism > (1 << 24) - next {
                    return Err(format!(
                        "source `{}` with {} partitions: tuple IDs name at most 2^24 partitions",
                        n.name, n.parallelism
                    ));
                }
                *first_partition = next as u32;
                next += n.parallelism;
            }
        }
        g.pinned = pins.to_vec();
        Ok(g)
    }

    /// The job's failover regions (Flink's pipelined regions): the sets of
    /// operator instances `(node, instance)` that exchange records with
    /// one another, directly or not. A forward edge between operators of
    /// equal parallelism joins instance `i` to instance `i`; any other edge
    /// (hash, rebalance, broadcast, or forward between parallelisms that
    /// differ) joins every instance of one to every instance of the other.
    /// No record crosses from one region to another, so a region can be
    /// restarted from a checkpoint while the others run on. Regions are
    /// ordered by their first instance (node, then instance), and each
    /// region's instances likewise.
    pub(crate) fn regions(&self) -> Vec<Vec<(usize, usize)>> {
        let base: Vec<usize> = self
            .nodes
            .iter()
            .scan(0, |acc, n| {
                let b = *acc;
                *acc += n.parallelism;
                Some(b)
            })
            .collect();
        let total = self.nodes.iter().map(|n| n.parallelism).sum::<usize>();
        let mut parent: Vec<usize> = (0..total).collect();
        fn root(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        let mut join = |a: usize, b: usize| {
            let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
            if ra != rb {
                parent[ra.max(rb)] = ra.min(rb);
            }
        };
        for e in &self.edges {
            let (pf, pt) = (self.nodes[e.from].parallelism, self.nodes[e.to].parallelism);
            if e.partitioning.is_forward() && pf == pt {
                for i in 0..pf {
                    join(base[e.from] + i, base[e.to] + i);
                }
            } else {
                for i in 0..pf {
                    join(base[e.from] + i, base[e.to]);
                }
                for j in 1..pt {
                    join(base[e.from], base[e.to] + j);
                }
            }
        }
        let mut regions: Vec<Vec<(usize, usize)>> = Vec::new();
        let mut index: std::collections::HashMap<usize, usize> = Default::default();
        for (n, node) in self.nodes.iter().enumerate() {
            for i in 0..node.parallelism {
                let r = root(&mut parent, base[n] + i);
                let k = *index.entry(r).or_insert_with(|| {
                    regions.push(Vec::new());
                    regions.len() - 1
                });
                regions[k].push((n, i));
            }
        }
        regions
    }
}

pub(crate) type HashFn<T> = Arc<dyn Fn(&T) -> u64 + Send + Sync>;

/// The codecs a job knows, by type: every type a `.standby()` stream
/// carries, and those given with [`crate::JobBuilder::codec`] (opened by
/// `runtime/standby/kit.rs`, which carries records between processes).
pub(crate) type Codecs = std::collections::HashMap<std::any::TypeId, Arc<dyn Any + Send + Sync>>;

/// What an incarnation's ring sender obeys beyond a plain edge
/// (`runtime/standby`); [`StreamKit::sender`] takes it.
pub(crate) struct Fencing {
    /// A hot standby computes with its output suppressed: while set,
    /// nothing is sent.
    pub(crate) muted: Rc<std::cell::Cell<bool>>,
    /// Per lane: its consumer has received the end of the group's output
    /// (from this primary or an earlier one). A new primary's replay owes
    /// such a consumer nothing — it has every output and reads no more —
    /// so what the replay sends it is dropped once its ring is full. Kept,
    /// it would fill the ring with the replay's chunk marks and block the
    /// primary (and the job) for good.
    pub(crate) gone: Vec<Arc<AtomicBool>>,
}

/// Operations that need a stream's element type (`runtime::kit` builds
/// them).
pub(crate) trait StreamKit: Send + Sync {
    fn tee(&self, outs: Vec<AnyBox>) -> AnyBox;
    fn null(&self) -> AnyBox;
    fn ring(&self, capacity: usize) -> (AnySend, AnySend);
    /// Bytes of one ring of `capacity` slots ([`StreamKit::ring`]).
    fn ring_bytes(&self, capacity: usize) -> u64;
    fn sender(
        &self,
        lanes: Vec<(AnySend, Arc<WorkerSignal>)>,
        partitioning: &Partitioning,
        ctx: &Rc<TaskCtx>,
        batch: usize,
        fencing: Option<Fencing>,
    ) -> AnyBox;
    fn input(
        &self,
        rings: Vec<(AnySend, Arc<WorkerSignal>)>,
        target: AnyBox,
        gate: Option<Rc<Gate>>,
        ctx: &Rc<TaskCtx>,
    ) -> Box<dyn Port>;
}

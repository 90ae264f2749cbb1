//! # Tandem
//!
//! A single-node, thread-per-core stream processing engine whose headline is
//! recovery without a restart: when an operator fails, a standby on another
//! core takes over. This crate is the engine core; `tandem-bench` runs the
//! paper's pipeline and the micro-benchmarks on it.
//!
//! ## Why thread-per-core
//!
//! Each worker thread is pinned to one core and owns the operator instances
//! placed on it. Operators are *built on* their core and never move, so their
//! state needs no locks and stays in that core's cache. The only things that
//! cross cores are records, through bounded lock-free single-producer
//! single-consumer rings ([`queue::spsc`]) — one ring per pair of producer
//! and consumer instances, so every ring really has one writer and one
//! reader. A full ring stops its producer (backpressure); nothing is dropped
//! and nothing buffers without bound.
//!
//! ## The model
//!
//! A job is a DAG of sources, operators and sinks built with
//! [`JobBuilder`]. Every record travels in a [`Record`] envelope carrying its
//! [`TupleId`] (assigned at the source, increasing per source partition) and
//! event time. Operators run with any parallelism; `key_by` partitions by key
//! hash through a mesh of rings; `broadcast` copies a side stream to every
//! instance. When there are fewer cores than operator instances, operators
//! are *chained* — called directly instead of through a ring — and tasks are
//! packed onto the cores ([`runtime::placement`]), so the same job runs on 1,
//! 2 or 64 cores.
//!
//! ## Layers
//!
//! The top-level modules import one another in one direction only, from
//! top to bottom: each imports only modules listed below it
//! (`engine/tests/layers.rs` checks this list against the imports):
//!
//! ```text
//! export.rs    what a running job shows outside: Prometheus text over
//!              HTTP, HdrHistogram interval logs (reads a JobWatch)
//! cep/         complex event processing: patterns, the matcher of a key,
//!              the operator on a keyed stream (built on the job API)
//! job/         the typed builder: a Job is a graph the runtime consumes
//! sinks/       ready-made sinks (two-phase-commit files)
//! runtime/     what wires and runs tasks: placement, workers, rings between
//!              tasks, the type-erased graph, the chain wrappers around
//!              operators, supervision and checkpoints' coordination,
//!              standby groups at run time (runtime/standby/), probes
//! time/        event time: watermark strategies, windows and what a key
//!              keeps of them
//! standby/     the BQBS protocol's parts: buffer queues, the determinant
//!              log, the liveness cell, the snapshot exchange, decisions
//! operator/    the user-facing traits (Process, KeyedProcess, CoProcess,
//!              Sink, Source) and the interfaces they are given (Output,
//!              Collector, OperatorInfo)
//! error.rs     build, runtime and job errors
//! state/       keyed state
//! checkpoint/  durable snapshots: files, manifests, retention, restore
//! recovery/    pure decisions: restart strategies, adaptive checkpoint
//!              interval, takeover or restart-all, a checkpoint across a
//!              takeover
//! metrics.rs   counters, HDR latency, reports
//! queue/       SPSC rings
//! record.rs    the envelope
//! sys/         affinity, rusage, threads, io_uring, files, limits
//! sync.rs      the loom shim
//! ```
//!
//! Where a lower layer needs an answer only a higher one has, it names an
//! interface the higher one implements: an [`Output`]'s dead letters
//! (the task), [`operator::current_record`] (the worker), the snapshot
//! store's `StorageProbe` (the fault injector, through the runtime).
//!
//! ## Layers inside `runtime/`
//!
//! The runtime's own modules follow the same rule (the same test checks
//! them). The standby is a *role* the core does not know: the core (`task`,
//! `graph`, `channel`, `chain`, `worker`) declares the interfaces a role
//! implements — `TaskRole` and `RoleWatch` (a task's role, in `task`),
//! `WireRoles` (what a role builds into a worker's tasks, in `wiring`) —
//! and `runtime/standby/` implements them, above the core:
//!
//! ```text
//! handle.rs    a running job: its handle and watch, starting it
//! supervisor/  attempts, restart-all, the checkpoint coordinator, the
//!              sinks' commits, the standby groups of an attempt, the
//!              workers' watch
//! standby/     standby groups at run time: the role (role.rs), what it
//!              builds into the workers (build.rs), incarnations, the
//!              consumers' fenced input, process isolation
//! worker/ chain/ kit.rs
//!              a worker's loop and the builders of its tasks; the chain
//!              hops around operators (one event-time core); a stream
//!              type's rings, senders and inputs
//! channel.rs source.rs wiring.rs
//!              rings between tasks (senders, inputs); source ports; what
//!              a worker builds from (the plan placed, ring ends, roles)
//! config.rs graph.rs
//!              the run's configuration; the plan: nodes, edges,
//!              partitioning, codecs, type-erased builders
//! panic.rs probe.rs
//!              operator panics and their reports; probes (fault
//!              injection's seams)
//! task.rs      tasks, their context, ports, gates, the role interfaces
//! background.rs
//!              archiving checkpointed state between polls
//! align.rs coord.rs dead_letter.rs lanes.rs placement.rs signal.rs
//!              barrier alignment, the supervisor's events, dead letters,
//!              lane clocks, placement, a parked worker's wake-up
//! ```
//!
//! ## Embedding
//!
//! ```
//! use tandem::{IterSource, JobBuilder, RuntimeConfig};
//!
//! let job = JobBuilder::new("word-lengths");
//! job.default_parallelism(2);
//! job.source("words", |info| {
//!         let words = ["alpha", "beta", "gamma", "delta"];
//!         // Each partition takes every other word.
//!         let mine: Vec<_> = words.iter().skip(info.instance).step_by(info.parallelism)
//!             .map(|w| (w.to_string(), 0)).collect();
//!         IterSource(mine.into_iter())
//!     })
//!     .map("len", |w: String| w.len() as u64)
//!     .key_by(|len: &u64| *len)
//!     .reduce("count-by-len", |a, _b| *a)
//!     .for_each("print", |r| println!("{:?}", r.value));
//! let report = job.build()?.run(&RuntimeConfig::default())?;
//! assert_eq!(report.operator("print").unwrap().records, 4);
//! # Ok::<(), tandem::JobError>(())
//! ```

#![deny(missing_docs)]

// `#[derive(Codec)]` names the trait as `::tandem::…`, inside this crate too.
extern crate self as tandem;

pub mod cep;
pub mod checkpoint;
pub mod error;
pub mod export;
pub mod job;
pub mod metrics;
pub mod operator;
pub mod queue;
pub mod record;
pub mod recovery;
pub mod runtime;
pub mod sinks;
pub mod standby;
pub mod state;
pub mod sync;
pub mod sys;
pub mod time;

pub use checkpoint::{CheckpointError, SnapshotStore};
pub use error::{BuildError, JobError, RuntimeError};
pub use job::{
    key_hash, key_instance, Connected, Data, Job, JobBuilder, KeyedConnected, KeyedStream,
    OutputTag, SideRecord, Sided, SinkHandle, StandbyConnected, Stream, Two, WindowJoin,
    WindowOutput, WindowedStream,
};
pub use metrics::{
    CheckpointStats, EdgeShape, GroupStatus, JobReport, JobShape, JobStatus, LatencyHistogram,
    OperatorShape, OperatorStats, Progress, RecoveryCause, RecoveryCount, RecoveryKind,
    RecoveryRecord, RestoreKind, RestorePoint, StandbyStats,
};
pub use operator::source::{IterSource, SeekError, Source, SourcePoll};
pub use operator::{
    CoProcess, Committer, KeyedProcess, OperatorInfo, Output, Process, Redistribution, Restored,
    Sink, FINAL_EPOCH,
};
pub use record::{Record, TupleId};
pub use recovery::restart::{Failover, RestartStrategy};
pub use runtime::chain::AsyncIo;
pub use runtime::panic::PanicOutput;
pub use runtime::placement::Chaining;
pub use runtime::standby::remote::child::is_incarnation_process;
pub use runtime::standby::remote::ChildRecord;
pub use runtime::{CheckpointConfig, CheckpointMode, JobHandle, JobWatch, RuntimeConfig};
pub use standby::{Isolation, StandbyConfig, StandbyMode};
pub use state::{KeyedState, StateSnapshot};

/// The README's Rust examples, compiled and run as doctests
/// (`cargo test --release -p tandem --doc`), so that they cannot drift
/// from the code.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The CEP page's example (docs/cep.md), compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../docs/cep.md")]
pub struct CepDoctests;

//! Managed broadcast state (Flink's broadcast state pattern): a two-input
//! function whose second input is broadcast to every instance keeps a state
//! built from it, which the engine snapshots and restores — no
//! `snapshot_state` written by hand.
//!
//! ```
//! use tandem::operator::broadcast::{BroadcastProcess, BroadcastState};
//! use tandem::{IterSource, JobBuilder, Output, Record, RuntimeConfig};
//!
//! /// Drops the values a rule names; the rules come on the broadcast input.
//! struct Drop;
//!
//! impl BroadcastProcess<u64, u64, u64> for Drop {
//!     type State = Vec<u64>;
//!     fn process_element(&mut self, rules: &Vec<u64>, r: Record<u64>, out: &mut Output<'_, u64>) {
//!         if !rules.contains(&r.value) {
//!             out.emit(r.value);
//!         }
//!     }
//!     fn process_broadcast(&mut self, rules: &mut Vec<u64>, r: Record<u64>, _: &mut Output<'_, u64>) {
//!         rules.push(r.value);
//!     }
//!     /// Values wait until all three rules are in.
//!     fn ready(&self, rules: &Vec<u64>) -> bool {
//!         rules.len() == 3
//!     }
//! }
//!
//! let job = JobBuilder::new("rules");
//! job.default_parallelism(2);
//! let rules = job
//!     .source("rules", |_| IterSource([3u64, 5, 7].into_iter().map(|n| (n, 0))))
//!     .parallelism(1)
//!     .broadcast();
//! job.source("values", |i| {
//!     let me = i.instance as u64;
//!     IterSource((0..10u64).filter(move |n| n % 2 == me).map(|n| (n, n)))
//! })
//! .connect(&rules)
//! .process("drop", |_| BroadcastState::new(Drop))
//! .for_each("out", |r| assert!(![3, 5, 7].contains(&r.value)));
//! let report = job.build()?.run(&RuntimeConfig::default())?;
//! assert_eq!(report.operator("out").unwrap().records, 7);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::checkpoint::{CheckpointError, SnapshotBytes};
use crate::operator::{CoProcess, Output};
use crate::record::Record;
use rkyv::api::high::{HighDeserializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::{rancor, Archive, Portable};

/// A state the engine snapshots and restores whole (rkyv-archivable:
/// integers, strings, `Vec`, `Option`, maps, `#[derive(rkyv::Archive, …)]`
/// types).
pub trait ManagedState: Default + 'static {
    /// The state, archived.
    fn snapshot(&self) -> Result<SnapshotBytes, CheckpointError>;
    /// A state from what [`snapshot`](Self::snapshot) archived.
    fn restore(payload: &[u8]) -> Result<Self, CheckpointError>;
}

impl<S> ManagedState for S
where
    S: Default
        + 'static
        + Archive
        + for<'a> rkyv::Serialize<crate::checkpoint::format::SnapshotSerializer<'a>>,
    S::Archived: Portable
        + for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + rkyv::Deserialize<S, HighDeserializer<rancor::Error>>,
{
    fn snapshot(&self) -> Result<SnapshotBytes, CheckpointError> {
        crate::checkpoint::serialize(self, 256)
    }

    fn restore(payload: &[u8]) -> Result<Self, CheckpointError> {
        let archived = crate::checkpoint::access::<S>(payload)?;
        rkyv::deserialize::<S, rancor::Error>(archived)
            .map_err(|source| CheckpointError::Access { source })
    }
}

/// A two-input function with managed broadcast state: `A` is the main
/// input, `B` the broadcast one (`main.connect(&side.broadcast())`), and
/// every instance builds the same [`State`](Self::State) from the `B`
/// records it is sent. Run it with [`BroadcastState::new`] as the
/// connection's function.
pub trait BroadcastProcess<A, B, O>: 'static {
    /// The broadcast state: snapshotted with each checkpoint and recovery
    /// point, restored with the operator.
    type State: ManagedState;
    /// Handles a main record; the state is read-only here (as in Flink:
    /// what one instance would change there, the others would not).
    fn process_element(&mut self, state: &Self::State, rec: Record<A>, out: &mut Output<'_, O>);
    /// Handles a broadcast record, updating the state.
    fn process_broadcast(
        &mut self,
        state: &mut Self::State,
        rec: Record<B>,
        out: &mut Output<'_, O>,
    );
    /// Whether main records may be taken yet (held in the operator until
    /// then; see [`CoProcess::first_ready`]). Default: at once.
    fn ready(&self, _state: &Self::State) -> bool {
        true
    }
    /// Called once after both inputs ended.
    fn on_end(&mut self, _state: &Self::State, _out: &mut Output<'_, O>) {}
}

/// A [`BroadcastProcess`] with its state `S`, as a [`CoProcess`].
pub struct BroadcastState<P, S> {
    op: P,
    state: S,
}

impl<P, S: ManagedState> BroadcastState<P, S> {
    /// `op` with an empty state (restored from the checkpoint, if any).
    pub fn new(op: P) -> Self {
        BroadcastState {
            op,
            state: S::default(),
        }
    }
}

impl<A, B, O, P, S> CoProcess<A, B, O> for BroadcastState<P, S>
where
    P: BroadcastProcess<A, B, O, State = S>,
    S: ManagedState,
{
    fn process_first(&mut self, rec: Record<A>, out: &mut Output<'_, O>) {
        self.op.process_element(&self.state, rec, out);
    }

    fn process_second(&mut self, rec: Record<B>, out: &mut Output<'_, O>) {
        self.op.process_broadcast(&mut self.state, rec, out);
    }

    fn first_ready(&self) -> bool {
        self.op.ready(&self.state)
    }

    fn on_end(&mut self, out: &mut Output<'_, O>) {
        self.op.on_end(&self.state, out);
    }

    fn snapshot_state(&mut self) -> Result<Option<SnapshotBytes>, CheckpointError> {
        self.state.snapshot().map(Some)
    }

    fn restore_state(&mut self, payload: &[u8]) -> Result<(), CheckpointError> {
        self.state = S::restore(payload)?;
        Ok(())
    }

    /// Every instance builds the same state from the same broadcast
    /// input: at another parallelism each new instance restores a copy.
    fn redistribution() -> crate::operator::Redistribution {
        crate::operator::Redistribution::Replicate
    }
}

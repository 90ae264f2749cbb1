//! Probes: the seams through which fault injectors (and tracers) reach the
//! engine, without the engine knowing about them.
//!
//! A [`ProbeFactory`] in the [`super::RuntimeConfig`] is asked, once per
//! operator instance as it is built, for a [`RecordProbe`]. Instances that
//! get none pay one predictable branch per record; an instance that gets one
//! calls it before each record and obeys its [`ProbeAction`].
//!
//! Beside the data path the factory is consulted at the engine's other
//! edges, each with a default that does nothing:
//!
//! - [`ProbeFactory::takeover`] — a standby at each stage of taking over
//!   (a standby that fails before or during its takeover);
//! - [`ProbeFactory::storage`] — the snapshot store's I/O thread, before
//!   each write and fsync, between writing a checkpoint and publishing it,
//!   and after publishing it ([`StorageProbe`]);
//! - [`ProbeFactory::commit`] — the supervisor, before it commits a sink's
//!   output of a checkpoint (phase two of the two-phase commit);
//! - [`ProbeFactory::standby_files`] — a standby group's shared files as
//!   they are created (the buffer queues an injector may damage).
//!
//! The `tandem-fault-inject` crate implements these traits; the engine never
//! imports it.

use super::task::TaskCtx;
pub use crate::checkpoint::probe::{StorageAction, StorageProbe};
use crate::record::TupleId;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What a probe asks of the operator about to process a record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProbeAction {
    /// Process the record normally.
    Continue,
    /// Panic inside the operator (as its own code would), with this message.
    Panic(String),
    /// Stop the operator's thread for this long, then process the record.
    Stall(Duration),
    /// Stop the operator's thread until the engine gives up on it: a
    /// standby fenced it, or its attempt was stopped. A stall that never
    /// ends on its own; only a recovery that detects stalls ends it.
    StallForever,
    /// Busy the operator for this long, then process the record: a slow
    /// operator, which is no failure (it goes on beating and progressing).
    Delay(Duration),
    /// The operator's input channel breaks: the record is not processed and
    /// the operator fails.
    CutInput,
    /// Process the record, but from now on, for this long, the worker
    /// running the instance publishes no heartbeat (neither the worker's
    /// nor, for the primary of a standby group, the group's): an operator
    /// that runs but stops beating.
    MuteHeartbeat(Duration),
    /// The process running the operator dies at once, as this says (the
    /// message first, on standard error): under process isolation the
    /// incarnation's child, otherwise the whole job's process.
    Die(Death, String),
}

/// How a process dies ([`ProbeAction::Die`]).
pub use crate::sys::process::Death;

/// Consulted before every record of one operator instance.
pub trait RecordProbe: 'static {
    /// Called before the instance processes the record `id`.
    fn before(&mut self, id: TupleId) -> ProbeAction;
}

/// A stage of a standby's takeover, at which [`ProbeFactory::takeover`] is
/// consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TakeoverStage {
    /// The standby found its primary failed or stalled and is about to
    /// claim the epoch: a failure here is the standby's (the primary is
    /// still the group's).
    Claiming,
    /// The standby claimed the epoch and restored its state, and is about
    /// to replay the buffer queues as the new primary: a failure here is
    /// the new primary's, before it produced anything.
    Replaying,
}

/// Hands out probes to operator instances as they are built, and answers
/// the engine's other seams (every method but [`probe`](Self::probe) has a
/// default that does nothing).
pub trait ProbeFactory: Send + Sync + 'static {
    /// The probe for instance `instance` of `operator`, if it needs one.
    fn probe(&self, operator: &str, instance: usize) -> Option<Box<dyn RecordProbe>>;

    /// A standby of instance `instance` of `operator` is at `stage` of a
    /// takeover. [`ProbeAction::Panic`] fails it there; the other actions
    /// are obeyed as on the data path.
    fn takeover(&self, _operator: &str, _instance: usize, _stage: TakeoverStage) -> ProbeAction {
        ProbeAction::Continue
    }

    /// The probe of the snapshot store's I/O thread, if any (asked once, as
    /// the store opens).
    fn storage(&self) -> Option<Arc<dyn StorageProbe>> {
        None
    }

    /// Before the supervisor commits the output instance `instance` of sink
    /// `operator` staged for checkpoint `checkpoint` (the final epoch is
    /// [`crate::FINAL_EPOCH`]). An error stands for the commit's own: the
    /// attempt fails, and the commit is retried by the restore.
    fn commit(&self, _operator: &str, _instance: usize, _checkpoint: u64) -> std::io::Result<()> {
        Ok(())
    }

    /// The standby group of instance `instance` of `operator` created its
    /// buffer queues, one per input lane, at `queues`.
    fn standby_files(&self, _operator: &str, _instance: usize, _queues: &[PathBuf]) {}
}

/// An operator instance's probe, if the runtime installed one.
pub(crate) type Probe = Option<Box<dyn RecordProbe>>;

/// Runs an instance's probe (if any) before record `id`; returns whether the
/// record may be processed.
#[inline]
pub(crate) fn run_probe(probe: &mut Probe, id: TupleId, ctx: &TaskCtx, op: usize) -> bool {
    ctx.record.set(Some(id));
    let Some(p) = probe else { return true };
    if ctx.muted.get() {
        // A hot standby's computation: faults are the primary's.
        return true;
    }
    act_on_probe(p.before(id), id, ctx, op)
}

/// Carries out a probe's `action` for record `id` of operator `op`;
/// whether the record may be processed.
pub(crate) fn act_on_probe(action: ProbeAction, id: TupleId, ctx: &TaskCtx, op: usize) -> bool {
    match action {
        ProbeAction::Continue => true,
        ProbeAction::Panic(message) => {
            ctx.fault_tuple.set(Some(id));
            panic!("{message}")
        }
        ProbeAction::Stall(d) => {
            ctx.fault_tuple.set(Some(id));
            let now = ctx.clock.now();
            ctx.shared
                .note_stall(op, ctx.instance, id, ctx.worker(), now, d);
            std::thread::sleep(d);
            true
        }
        ProbeAction::StallForever => {
            ctx.fault_tuple.set(Some(id));
            let now = ctx.clock.now();
            ctx.shared
                .note_stall(op, ctx.instance, id, ctx.worker(), now, Duration::MAX);
            // Until the engine gives up on this instance: a standby fenced
            // it, or its attempt was stopped. Then, like any stalled thread
            // that wakes up late, it goes on fenced (its output is dropped).
            while !ctx.shared.cancelled() && !ctx.superseded() {
                std::thread::sleep(Duration::from_millis(1));
            }
            true
        }
        ProbeAction::Delay(d) => {
            // Slow code runs: it spins on its core (sub-millisecond sleeps
            // would oversleep by the timer slack).
            let until = std::time::Instant::now() + d;
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            true
        }
        ProbeAction::MuteHeartbeat(d) => {
            ctx.fault_tuple.set(Some(id));
            let until = ctx.clock.now().saturating_add(d.as_nanos() as u64);
            ctx.shared.mute(ctx.worker(), until);
            true
        }
        ProbeAction::CutInput => {
            ctx.fault_tuple.set(Some(id));
            ctx.fail_cut(op);
            false
        }
        ProbeAction::Die(death, message) => crate::sys::process::die(death, &message),
    }
}

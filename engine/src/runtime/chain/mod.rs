//! The engine's wrappers around the user's operators: what turns a
//! [`Process`](crate::Process), a [`KeyedProcess`](crate::KeyedProcess), a
//! [`CoProcess`](crate::CoProcess) or a [`Sink`](crate::Sink) into a hop of
//! a task's chain — probes, state snapshots and restores, barriers,
//! latency, the standby protocol's chunks. The traits they wrap are
//! [`crate::operator`]'s, below the runtime.

mod asyncio;
mod connect;
mod event_time;
pub(crate) mod frame;
mod keyed;
mod merge;
mod sink;
mod timed;
mod unary;
mod window;

pub use asyncio::AsyncIo;
pub(crate) use asyncio::AsyncOp;
pub(crate) use connect::build_co_ports;
pub(crate) use event_time::SideCodec;
pub(crate) use keyed::{KeyedOp, StateCodec};
pub(crate) use sink::SinkOp;
pub(crate) use timed::TimedOp;
pub(crate) use unary::ProcessOp;
pub(crate) use window::{WindowOp, WindowSpec};

use crate::checkpoint::{CheckpointError, StateCapture};
use crate::operator::Collector;
use crate::runtime::task::TaskCtx;

/// Checkpoint barrier `id` reaches operator `op`: when the checkpoint
/// wants a snapshot here, the operator's state (`capture`; `None`:
/// stateless) is acknowledged, or the checkpoint declined with the
/// capture's error; then the barrier goes on down the chain.
pub(crate) fn pass_barrier<O>(
    ctx: &TaskCtx,
    op: usize,
    id: u64,
    capture: impl FnOnce() -> Result<Option<StateCapture>, CheckpointError>,
    down: &mut dyn Collector<O>,
) {
    if ctx.wants_snapshot(id) {
        // A delta gathers the places written since its base now (tens of
        // milliseconds at tens of millions): work, not a stall.
        match ctx.long(capture) {
            Ok(state) => ctx.ack(op, id, state, None, None),
            Err(e) => ctx.decline(op, id, e.to_string()),
        }
    }
    down.barrier(id);
}

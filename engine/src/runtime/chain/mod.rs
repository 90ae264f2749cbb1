//! The engine's wrappers around the user's operators: what turns a
//! [`Process`](crate::Process), a [`KeyedProcess`](crate::KeyedProcess), a
//! [`CoProcess`](crate::CoProcess) or a [`Sink`](crate::Sink) into a hop of
//! a task's chain — probes, state snapshots and restores, barriers,
//! latency, the standby protocol's chunks. The traits they wrap are
//! [`crate::operator`]'s, below the runtime.

mod connect;
mod keyed;
mod merge;
mod sink;
mod timed;
mod unary;
mod window;

pub(crate) use connect::build_co_ports;
pub(crate) use keyed::{KeyedOp, StateCodec};
pub(crate) use sink::SinkOp;
pub(crate) use timed::TimedOp;
pub(crate) use unary::ProcessOp;
pub(crate) use window::{SideCodec, WindowOp, WindowSpec};

use super::probe::ProbeAction;
use super::task::TaskCtx;
use crate::record::TupleId;
use std::time::Duration;

/// Runs an instance's probe (if any) before record `id`; returns whether the
/// record may be processed.
#[inline]
pub(crate) fn run_probe(
    probe: &mut super::graph::Probe,
    id: TupleId,
    ctx: &TaskCtx,
    op: usize,
) -> bool {
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

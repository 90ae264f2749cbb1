//! A worker's background work: archiving the states operators froze at a
//! checkpoint barrier, a slice per turn of the worker's loop, and sending
//! each acknowledgement once its archive is whole.
//!
//! A keyed operator at a barrier only freezes its state
//! ([`crate::state`]) and goes on; archiving it takes milliseconds for a
//! large state, and done at the barrier — or on a thread of its own, which
//! takes a core from one of the pinned workers for as long — every record
//! behind it waits that long. So the archive is made here, on the
//! operator's own worker, in slices of about [`SLICE`] between the polls
//! of its tasks, in the order the barriers came.
//!
//! Every wait ends without more input: while work is queued the worker
//! counts it as progress (it never parks and does not end), and each turn
//! of its loop runs one slice.

use super::coord::Event;
use super::JobShared;
use crate::checkpoint::{ArchiveSteps, SnapshotBytes};
use crate::record::Nanos;
use std::cell::RefCell;
use std::collections::VecDeque;

/// How long one turn of the worker's loop may spend here.
pub(crate) const SLICE: Nanos = 20_000;
/// Entries archived between two looks at the clock.
const STEP_ENTRIES: usize = 64;

/// An acknowledgement waiting for its state's archive.
struct Pending {
    steps: Box<dyn ArchiveSteps>,
    /// The acknowledgement, sent with the archive in `state`.
    ack: Event,
}

/// A lazily restored state reading its base in order (see
/// [`crate::state`]'s `lazy`): called with a number of places to read;
/// `true` once it is done (or gone, or failed: it reports its own error).
pub(crate) type RestoreJob = Box<dyn FnMut(usize) -> bool>;

/// The background work of one worker (never crosses a thread).
#[derive(Default)]
pub(crate) struct Background {
    queue: RefCell<VecDeque<Pending>>,
    /// Lazily restored states still reading their bases. They do not
    /// keep the worker from ending, only from parking.
    restores: RefCell<Vec<RestoreJob>>,
    /// The last round of the worker's loop moved something of its tasks
    /// other than hot standbys' computing.
    others_busy: std::cell::Cell<bool>,
}

impl Background {
    /// Whether the worker's own tasks moved in its last round: a hot
    /// standby here computes only when they did not
    /// (`runtime/standby/incarnation/standby.rs`).
    pub(crate) fn others_busy(&self) -> bool {
        self.others_busy.get()
    }

    /// The worker's last round moved (`true`) or did not move its own
    /// tasks.
    pub(crate) fn set_others_busy(&self, busy: bool) {
        self.others_busy.set(busy);
    }

    /// Queues `ack` (an [`Event::Ack`] without its state) to be sent once
    /// `steps` have archived the state.
    pub(crate) fn push(&self, steps: Box<dyn ArchiveSteps>, ack: Event) {
        self.queue.borrow_mut().push_back(Pending { steps, ack });
    }

    /// Whether work is queued.
    pub(crate) fn busy(&self) -> bool {
        !self.queue.borrow().is_empty()
    }

    /// Adds a lazily restored state's reading of its base.
    pub(crate) fn push_restore(&self, job: RestoreJob) {
        self.restores.borrow_mut().push(job);
    }

    /// Whether a lazily restored state is still reading its base.
    pub(crate) fn restoring(&self) -> bool {
        !self.restores.borrow().is_empty()
    }

    /// Reads the bases of lazily restored states for one slice (until
    /// [`SLICE`] past `now()`); whether any was read.
    pub(crate) fn restore_slice(&self, now: impl Fn() -> Nanos) -> bool {
        let until = now() + SLICE;
        let mut jobs = self.restores.borrow_mut();
        if jobs.is_empty() {
            return false;
        }
        while let Some(job) = jobs.last_mut() {
            if job(STEP_ENTRIES) {
                jobs.pop();
            }
            if now() >= until {
                break;
            }
        }
        true
    }

    /// Runs one slice (until `until` on the engine clock `now`); whether
    /// anything was queued. A state that fails to archive declines its
    /// checkpoint.
    pub(crate) fn slice(&self, shared: &JobShared, now: impl Fn() -> Nanos) -> bool {
        let until = now() + SLICE;
        let mut q = self.queue.borrow_mut();
        if q.is_empty() {
            return false;
        }
        while let Some(p) = q.front_mut() {
            match p.steps.step(STEP_ENTRIES) {
                Ok(None) => {}
                Ok(Some(bytes)) => {
                    let p = q.pop_front().expect("the front");
                    let _ = shared.events.send(with_state(p.ack, bytes));
                }
                Err(e) => {
                    let p = q.pop_front().expect("the front");
                    if let Event::Ack {
                        attempt,
                        id,
                        node,
                        instance,
                        ..
                    } = p.ack
                    {
                        let _ = shared.events.send(Event::Decline {
                            attempt,
                            id,
                            node,
                            instance,
                            reason: e.to_string(),
                        });
                    }
                }
            }
            if now() >= until {
                break;
            }
        }
        true
    }
}

fn with_state(mut ack: Event, bytes: SnapshotBytes) -> Event {
    if let Event::Ack { state, .. } = &mut ack {
        *state = Some(bytes);
    }
    ack
}

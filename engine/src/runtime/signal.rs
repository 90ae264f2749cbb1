//! The wake-up signal of a parked worker: what a producer anywhere (a
//! ring's sender, a standby group, the supervisor) uses to wake the worker
//! that reads what it published.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;

/// Lets a producer wake a worker that parked because it had nothing to do.
///
/// Protocol (Dekker-style, both sides fence): the worker sets `sleeping`,
/// fences, re-polls its inputs and parks only if they are still empty; a
/// producer publishes its ring tail, fences, and unparks if `sleeping` is
/// set. One of the two always sees the other's write, so no wake-up is lost.
#[derive(Default, Debug)]
pub(crate) struct WorkerSignal {
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
}

impl WorkerSignal {
    pub(crate) fn register_current(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    #[inline]
    pub(crate) fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.wake();
        }
    }

    pub(crate) fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    pub(crate) fn set_sleeping(&self, s: bool) {
        self.sleeping.store(s, Ordering::SeqCst);
    }
}

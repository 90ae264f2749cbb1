//! Dropping large things off the data path.
//!
//! Freeing a buffer of tens of megabytes gives its pages back to the
//! kernel — milliseconds of the freeing thread's CPU, all at once. On a
//! pinned worker that is a pause every record behind it waits for, and to
//! a standby watching the primary it looks like a stall (a busy thread
//! that shows no sign of life). [`later`] hands such a value to one
//! process-wide thread that drops what it is given, in order; the worker
//! goes on at once. Where no such thread can be started, the value drops
//! where it is, as it would have.
//!
//! Handing over never blocks the worker: the value goes onto a lock-free
//! queue and the reaper is woken with `Thread::unpark` (an atomic swap, and
//! a futex wake only when it sleeps). A channel would do the same but for
//! its waker's lock, which the reaper holds while it goes to sleep: a
//! reaper descheduled there held a worker for milliseconds on a busy host.

use crossbeam_queue::SegQueue;
use std::sync::OnceLock;
use std::thread::Thread;

/// Values waiting for the reaper.
static QUEUE: SegQueue<Box<dyn Send>> = SegQueue::new();

/// Drops `value` on the reaper thread (see the module docs).
pub fn later<T: Send + 'static>(value: T) {
    let boxed: Box<dyn Send> = Box::new(value);
    match reaper() {
        Some(t) => {
            QUEUE.push(boxed);
            t.unpark();
        }
        None => drop(boxed),
    }
}

/// The reaper thread, started at the first use (`None`: it could not be).
fn reaper() -> Option<&'static Thread> {
    static REAPER: OnceLock<Option<Thread>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let t = std::thread::Builder::new()
                .name("tandem-reap".into())
                .spawn(|| loop {
                    while let Some(v) = QUEUE.pop() {
                        drop(v);
                    }
                    // A value pushed after the last pop unparked this
                    // thread already: the park returns at once.
                    std::thread::park();
                })
                .ok()?;
            Some(t.thread().clone())
        })
        .as_ref()
}

/// Gives the heap's free memory back to the kernel, on the reaper thread
/// after what it was given before (glibc's `malloc_trim`; elsewhere
/// nothing). A restarted attempt's threads allocate in malloc arenas the
/// failed attempt's threads had filled and freed; without a trim that
/// freed memory stays with the process, and a job under a memory limit
/// (the disk state backend's) grew by ~80 MiB a restart.
pub fn trim_heap_later() {
    struct Trim;
    impl Drop for Trim {
        fn drop(&mut self) {
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: `malloc_trim` only returns free heap pages to the
            // kernel; it takes the arenas' locks itself and touches no
            // memory a caller holds.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
    later(Trim);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn what_is_handed_over_is_dropped_on_another_thread() {
        struct Noted(Arc<std::sync::Mutex<Option<std::thread::ThreadId>>>);
        impl Drop for Noted {
            fn drop(&mut self) {
                *self.0.lock().unwrap() = Some(std::thread::current().id());
            }
        }
        let seen = Arc::new(std::sync::Mutex::new(None));
        later(Noted(Arc::clone(&seen)));
        let until = Instant::now() + Duration::from_secs(10);
        while seen.lock().unwrap().is_none() {
            assert!(Instant::now() < until, "never dropped");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_ne!(*seen.lock().unwrap(), Some(std::thread::current().id()));
    }
}

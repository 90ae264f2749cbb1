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

use std::sync::mpsc::{self, Sender};
use std::sync::OnceLock;

/// Drops `value` on the reaper thread (see the module docs).
pub fn later<T: Send + 'static>(value: T) {
    let boxed: Box<dyn Send> = Box::new(value);
    match reaper() {
        // A send fails only once the reaper is gone (never, while the
        // process runs): the value comes back and drops here.
        Some(tx) => drop(tx.send(boxed)),
        None => drop(boxed),
    }
}

fn reaper() -> Option<&'static Sender<Box<dyn Send>>> {
    static REAPER: OnceLock<Option<Sender<Box<dyn Send>>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Box<dyn Send>>();
            std::thread::Builder::new()
                .name("tandem-reap".into())
                .spawn(move || rx.into_iter().for_each(drop))
                .ok()?;
            Some(tx)
        })
        .as_ref()
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

//! What the operating system says about a thread: its id, its scheduler
//! state and the CPU time it ran and waited for. The standby's stall
//! detector asks this of a silent primary's worker to tell a thread that
//! is stuck (blocked, or busy inside one task) from one that merely was
//! not scheduled (`standby::decide::activity`).
//!
//! Linux: `/proc/self/task/<tid>/stat` (state) and `…/schedstat` (run and
//! run-queue wait time, in nanoseconds, and the count of times it ran).
//! Elsewhere, or when `/proc` is not
//! readable, [`sample`] returns `None` and the detector decides on time
//! alone.

use crate::standby::decide::ThreadSample;

/// The calling thread's kernel id.
pub fn current_tid() -> i32 {
    // SAFETY: `gettid` has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// Thread `tid` of this process now, stamped `at` (engine nanoseconds).
pub fn sample(tid: i32, at: u64) -> Option<ThreadSample> {
    if tid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    parse(&stat, &sched, at)
}

/// Parses the two files (pure, for tests).
fn parse(stat: &str, sched: &str, at: u64) -> Option<ThreadSample> {
    // "tid (comm) S …": the command may hold spaces and parentheses; the
    // state follows the last ')'.
    let state = *stat.rsplit_once(')')?.1.trim_start().as_bytes().first()?;
    let mut f = sched.split_ascii_whitespace();
    let cpu_ns = f.next()?.parse().ok()?;
    let wait_ns = f.next()?.parse().ok()?;
    let slices = f.next()?.parse().ok()?;
    Some(ThreadSample {
        at,
        state,
        cpu_ns,
        wait_ns,
        slices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_state_and_times_even_with_odd_command_names() {
        let s = parse("42 (tandem (w0)) R 1 2 3", "1000 250 7\n", 9).unwrap();
        assert_eq!(
            (s.state, s.cpu_ns, s.wait_ns, s.slices, s.at),
            (b'R', 1000, 250, 7, 9)
        );
        assert!(parse("garbage", "1 2 3", 0).is_none());
        assert!(parse("1 (x) S", "", 0).is_none());
    }

    #[test]
    fn this_thread_can_be_sampled() {
        let s = sample(current_tid(), 5);
        if std::path::Path::new("/proc/self/task").exists() {
            let s = s.expect("a sample of a live thread");
            assert_eq!(s.state, b'R', "the sampling thread is running");
        }
    }
}

//! What the operating system says about a thread: its id, its scheduler
//! state and the CPU time it ran and waited for. The standby's stall
//! detector asks this of a silent primary's worker to tell a thread that
//! is stuck (blocked, or busy inside one task) from one that merely was
//! not scheduled, by comparing two samples of it.
//!
//! Linux: `/proc/self/task/<tid>/stat` (state) and `…/schedstat` (run and
//! run-queue wait time, in nanoseconds, and the count of times it ran).
//! Elsewhere, or when `/proc` is not
//! readable, [`sample`] returns `None` and the detector decides on time
//! alone.

/// The calling thread's kernel id.
pub fn current_tid() -> i32 {
    // SAFETY: `gettid` has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// The operating system's view of a thread at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSample {
    /// When (engine nanoseconds).
    pub at: u64,
    /// The scheduler state letter (`R` running or runnable, `S` sleeping,
    /// `D` waiting for I/O, …).
    pub state: u8,
    /// CPU time it has run.
    pub cpu_ns: u64,
    /// Time it has waited on a run queue.
    pub wait_ns: u64,
    /// Times it was put on a CPU.
    pub slices: u64,
    /// The CPU it last ran on (`u32::MAX`: unknown).
    pub cpu: u32,
    /// Time the host took that CPU from this virtual machine ("steal"),
    /// as the guest kernel counts it (in 10 ms steps); 0 where there is
    /// none or it is unknown.
    pub steal_ns: u64,
}

/// Thread `tid` of this process now, stamped `at` (engine nanoseconds).
pub fn sample(tid: i32, at: u64) -> Option<ThreadSample> {
    if tid <= 0 {
        return None;
    }
    sample_in(&format!("/proc/self/task/{tid}"), at)
}

/// The main thread of process `pid` (a child of this one), stamped `at`.
pub fn sample_process(pid: u32, at: u64) -> Option<ThreadSample> {
    if pid == 0 {
        return None;
    }
    sample_in(&format!("/proc/{pid}"), at)
}

/// The thread whose `/proc` directory is `dir`.
fn sample_in(dir: &str, at: u64) -> Option<ThreadSample> {
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let sched = std::fs::read_to_string(format!("{dir}/schedstat")).ok()?;
    let mut s = parse(&stat, &sched, at)?;
    if s.cpu != u32::MAX {
        if let Ok(all) = std::fs::read_to_string("/proc/stat") {
            s.steal_ns = steal_of(&all, s.cpu).unwrap_or(0);
        }
    }
    Some(s)
}

/// Time the host has taken CPUs `cpus` from this virtual machine since it
/// booted, summed ("steal", as the guest kernel counts it, in 10 ms
/// steps); `None` where `/proc/stat` does not say for one of them.
pub fn cpus_steal_ns(cpus: &[usize]) -> Option<u64> {
    let all = std::fs::read_to_string("/proc/stat").ok()?;
    cpus.iter()
        .map(|&c| steal_of(&all, u32::try_from(c).ok()?))
        .sum()
}

/// The steal time of `cpu` in `/proc/stat` (the eighth figure of its
/// `cpuN` line, in clock ticks of 10 ms), in nanoseconds.
fn steal_of(proc_stat: &str, cpu: u32) -> Option<u64> {
    let tag = format!("cpu{cpu}");
    let line = proc_stat
        .lines()
        .find(|l| l.split_ascii_whitespace().next() == Some(tag.as_str()))?;
    let ticks: u64 = line.split_ascii_whitespace().nth(8)?.parse().ok()?;
    // USER_HZ is 100 on every Linux architecture's /proc interface.
    Some(ticks * 10_000_000)
}

/// Parses the two files (pure, for tests).
fn parse(stat: &str, sched: &str, at: u64) -> Option<ThreadSample> {
    // "tid (comm) S …": the command may hold spaces and parentheses; the
    // state follows the last ')'.
    let after = stat.rsplit_once(')')?.1;
    let state = *after.trim_start().as_bytes().first()?;
    // Field 39 of the whole line ("processor"), 37th after the command.
    let cpu = after
        .split_ascii_whitespace()
        .nth(36)
        .and_then(|c| c.parse().ok())
        .unwrap_or(u32::MAX);
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
        cpu,
        steal_ns: 0,
    })
}

/// Puts the calling thread's disk reads in the idle I/O class: a
/// scheduler that honours classes (mq-deadline, BFQ) serves them only
/// when nothing else waits (a restore's background verification behind
/// the restore's own reads). Where it cannot be set, nothing changes.
pub fn io_priority_idle() {
    /// `IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT`.
    const IDLE: libc::c_long = 3 << 13;
    /// `IOPRIO_WHO_PROCESS`: with id 0, the calling thread.
    const WHO_THREAD: libc::c_long = 1;
    // SAFETY: `ioprio_set` takes three integers and touches no memory of
    // ours; an error (an old kernel, a seccomp filter) is ignored.
    let _ = unsafe { libc::syscall(libc::SYS_ioprio_set, WHO_THREAD, 0 as libc::c_long, IDLE) };
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
        assert_eq!(s.cpu, u32::MAX, "a short line has no processor field");
        let long = format!(
            "42 (w) R {} 3 0",
            (4..=38)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        assert_eq!(parse(&long, "1 2 3", 0).unwrap().cpu, 3);
        assert!(parse("garbage", "1 2 3", 0).is_none());
        assert!(parse("1 (x) S", "", 0).is_none());
    }

    #[test]
    fn steal_is_read_from_the_cpus_own_line() {
        let stat =
            "cpu  9 0 9 9 9 0 9 700 0 0\ncpu0 1 0 1 1 1 0 1 300 0 0\ncpu1 1 0 1 1 1 0 1 400 0 0\n";
        assert_eq!(steal_of(stat, 1), Some(4_000_000_000));
        assert_eq!(steal_of(stat, 0), Some(3_000_000_000));
        assert_eq!(steal_of(stat, 2), None);
        assert_eq!(steal_of("cpu1 1 2", 1), None);
    }

    #[test]
    fn this_thread_can_be_sampled() {
        let s = sample(current_tid(), 5);
        if std::path::Path::new("/proc/self/task").exists() {
            let s = s.expect("a sample of a live thread");
            assert_eq!(s.state, b'R', "the sampling thread is running");
            assert_ne!(s.cpu, u32::MAX, "the CPU it runs on is known");
        }
    }
}

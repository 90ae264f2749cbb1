//! Resource limits the engine cares about.

/// The locked-memory limit (`RLIMIT_MEMLOCK`) as `(soft, hard)` bytes;
/// `None` inside means unlimited. `None` outside: the limit could not be read.
pub fn memlock() -> Option<(Option<u64>, Option<u64>)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes into the `rlimit` we own and pass by pointer.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    if rc != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every target
    let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v as u64);
    Some((f(r.rlim_cur), f(r.rlim_max)))
}

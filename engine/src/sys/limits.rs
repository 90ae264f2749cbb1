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

/// Memory this process may still take, in bytes: the kernel's estimate of
/// what can be allocated without swapping (`MemAvailable`), or less where
/// the process's cgroup (a container's limit) leaves less. `None` where
/// neither can be read.
pub fn available_memory() -> Option<u64> {
    let host = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    });
    let cgroup = cgroup_headroom();
    match (host, cgroup) {
        (Some(h), Some(c)) => Some(h.min(c)),
        (h, c) => h.or(c),
    }
}

/// What the process's cgroup (v2) still allows: `memory.max` less
/// `memory.current`; `None` without a limit.
fn cgroup_headroom() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    // cgroup v2: the single line `0::/path`.
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = std::path::Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let max = read("memory.max")?.trim().parse::<u64>().ok()?;
    let current = read("memory.current")?.trim().parse::<u64>().ok()?;
    Some(max.saturating_sub(current))
}

#[cfg(test)]
mod tests {
    #[test]
    fn available_memory_is_read_and_plausible() {
        let m = super::available_memory().expect("/proc/meminfo is readable");
        assert!(m > 1 << 20, "{m} bytes available");
    }
}

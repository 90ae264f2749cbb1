//! Process resource usage: CPU time and peak resident set size.

use std::time::Duration;

/// CPU time (user + system) consumed by the whole process so far.
pub fn process_cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes a complete `rusage` into the pointer we pass,
    // which points at properly aligned, writable storage of the right size.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // SAFETY: `getrusage` returned 0, so it initialised the struct.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Peak resident set size of the process in bytes (`VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    status_field_kib("VmHWM:").map(|k| k * 1024)
}

/// Current resident set size of the process in bytes (`VmRSS`), if known.
pub fn current_rss_bytes() -> Option<u64> {
    status_field_kib("VmRSS:").map(|k| k * 1024)
}

fn status_field_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_at_least_current_rss() {
        let peak = peak_rss_bytes().expect("linux exposes VmHWM");
        let cur = current_rss_bytes().expect("linux exposes VmRSS");
        assert!(peak >= cur && cur > 0);
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let before = process_cpu_time();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(process_cpu_time() > before);
    }
}

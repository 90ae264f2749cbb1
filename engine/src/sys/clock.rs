//! The engine clock's origin, as every process on the host reads it.
//!
//! Engine nanoseconds — ingest stamps, heartbeats, recovery times — count
//! from the job's start. An [`Origin`] is that start on `CLOCK_MONOTONIC`
//! (the clock [`std::time::Instant`] reads on Linux), kept as a number, so
//! a child process handed [`Origin::monotonic_ns`] rebuilds the same origin
//! with [`Origin::from_monotonic_ns`] and its stamps and heartbeats compare
//! with the driver's. (`CLOCK_MONOTONIC` is one clock for the whole host,
//! outside of time namespaces.)

use std::time::Duration;

/// `CLOCK_MONOTONIC` now, in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
    // exists on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The start of an engine clock (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    mono_ns: u64,
}

impl Origin {
    /// An origin at this instant.
    pub fn now() -> Origin {
        Origin {
            mono_ns: monotonic_ns(),
        }
    }

    /// The origin another process of this host took at
    /// `CLOCK_MONOTONIC` `ns`.
    pub fn from_monotonic_ns(ns: u64) -> Origin {
        Origin { mono_ns: ns }
    }

    /// The origin on `CLOCK_MONOTONIC`, to hand to another process.
    pub fn monotonic_ns(self) -> u64 {
        self.mono_ns
    }

    /// Engine nanoseconds now.
    #[inline]
    pub fn elapsed_ns(self) -> u64 {
        monotonic_ns().saturating_sub(self.mono_ns)
    }

    /// Time since the origin.
    pub fn elapsed(self) -> Duration {
        Duration::from_nanos(self.elapsed_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_rebuilt_from_its_number_reads_the_same_clock() {
        let a = Origin::now();
        let b = Origin::from_monotonic_ns(a.monotonic_ns());
        let before = a.elapsed_ns();
        let via_b = b.elapsed_ns();
        let after = a.elapsed_ns();
        assert!(
            before <= via_b && via_b <= after,
            "{before} {via_b} {after}"
        );
    }

    #[test]
    fn it_is_the_clock_instant_reads() {
        // Instant and the origin advance together: an Instant taken between
        // two readings of the origin's elapsed time falls between them.
        let o = Origin::now();
        let i = std::time::Instant::now();
        let t0 = o.elapsed();
        std::thread::sleep(Duration::from_millis(2));
        let d_instant = i.elapsed();
        let t1 = o.elapsed();
        assert!(t1 >= t0 + Duration::from_millis(2));
        assert!(d_instant <= t1, "{d_instant:?} {t1:?}");
    }
}

//! A hot standby's backoff after it fell behind its primary.

use crate::record::Nanos;

/// How long a hot standby that fell behind waits before it restores a
/// point and follows again. Restoring is the whole state (seconds of a core
/// for a large one); a standby that cannot keep up with its primary's pace
/// would otherwise let go, restore, fall behind and let go again, starving
/// the primaries it shares cores with. Each time it falls behind soon after
/// starting, it waits twice as long (from one point interval up to
/// [`HotBackoff::MAX`]), as a warm standby meanwhile; having kept up for
/// [`HotBackoff::KEPT_UP`] waits, it starts over from one interval.
#[derive(Debug, Default)]
pub(super) struct HotBackoff {
    /// When it last started following.
    started_at: Nanos,
    /// Its current wait (0: none yet).
    wait: Nanos,
    /// It does not start before this.
    until: Nanos,
}

impl HotBackoff {
    /// The longest wait.
    const MAX: Nanos = 30_000 * crate::runtime::task::MS;
    /// Following this many times its wait without falling behind resets the
    /// wait.
    const KEPT_UP: Nanos = 8;

    /// Whether it may start following at `now`.
    pub(super) fn may_start(&self, now: Nanos) -> bool {
        now >= self.until
    }

    /// It started following at `now`.
    pub(super) fn started(&mut self, now: Nanos) {
        self.started_at = now;
    }

    /// It fell behind at `now`, its group taking points `every`.
    pub(super) fn fell_behind(&mut self, now: Nanos, every: std::time::Duration) {
        let first = (every.as_nanos() as Nanos).clamp(crate::runtime::task::MS, Self::MAX);
        if now.saturating_sub(self.started_at) > Self::KEPT_UP.saturating_mul(self.wait.max(first))
        {
            self.wait = 0;
        }
        self.wait = if self.wait == 0 {
            first
        } else {
            self.wait.saturating_mul(2).min(Self::MAX)
        };
        self.until = now.saturating_add(self.wait);
    }
}

#[cfg(test)]
mod tests {
    use super::HotBackoff;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_hot_standby_that_keeps_falling_behind_waits_longer_each_time() {
        let mut b = HotBackoff::default();
        assert!(b.may_start(0));
        let every = Duration::from_millis(100);
        let mut now = 1_000 * MS;
        let mut waits = Vec::new();
        for _ in 0..12 {
            b.started(now);
            now += 10 * MS; // behind again soon after starting
            b.fell_behind(now, every);
            assert!(!b.may_start(now));
            let mut wait = 0;
            while !b.may_start(now + wait) {
                wait += MS;
            }
            waits.push(wait / MS);
            now += wait;
        }
        assert_eq!(&waits[..4], &[100, 200, 400, 800]);
        assert_eq!(*waits.last().unwrap(), 30_000, "{waits:?}");
    }

    #[test]
    fn a_hot_standby_that_kept_up_a_long_while_waits_one_interval_again() {
        let mut b = HotBackoff::default();
        let every = Duration::from_millis(100);
        for i in 0..5 {
            b.started(i * 10_000 * MS);
            b.fell_behind(i * 10_000 * MS + MS, every);
        }
        // Kept up for a minute: a burst, not a pace it cannot hold.
        b.started(100_000 * MS);
        b.fell_behind(160_000 * MS, every);
        assert!(b.may_start(160_100 * MS));
        assert!(!b.may_start(160_099 * MS));
    }
}

//! Event time: watermarks, and the windows built on them.
//!
//! ## Watermarks
//!
//! A source given a [`Watermarks`] strategy
//! ([`Stream::watermarks`](crate::Stream::watermarks)) has each of its
//! partitions follow the largest event time it has produced and, every
//! [`Watermarks::every`] records, send a *watermark* down its stream:
//! that largest event time less the allowed out-of-orderness. A watermark
//! `w` promises that every record after it has an event time of at least
//! `w`; a record below the watermark of its stream is *late*. Watermarks
//! travel in band with the records (on rings and through the standby's
//! buffer queues), so they stand at the same place in a partition's stream
//! in every run, whatever the timing: where a partition's watermarks fall
//! is a function of its records alone. An operator's watermark is the
//! minimum over its inputs; a partition that had no record for
//! [`Watermarks::idle_after`] is *idle* and does not hold that minimum
//! back until it produces again. The end of a stream is a watermark past
//! every event time: every window fires.
//!
//! A source's watermark state (its largest event time) is in its
//! checkpoints, and a restored partition sends its last watermark again
//! before any record, so a restart reproduces the watermarks of a clean
//! run.
//!
//! ## Windows
//!
//! See [`window`]: tumbling, sliding, session and count windows on keyed
//! streams, with incremental aggregation or a function over the whole
//! window, allowed lateness and a side output for late records.
//!
//! Event times are nanoseconds, as the sources give them
//! ([`crate::Record::event_time`]); [`millis`], [`secs`], [`of_duration`]
//! and [`of_system_time`] make them, [`as_millis`] and [`as_duration`]
//! read them:
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use tandem::time;
//!
//! let t = time::millis(1_700_000_000_123);
//! assert_eq!(time::as_millis(t), 1_700_000_000_123);
//! assert_eq!(time::of_duration(Duration::from_secs(2)), time::secs(2));
//! assert_eq!(time::of_system_time(UNIX_EPOCH + Duration::from_millis(5)), time::millis(5));
//! assert_eq!(time::as_duration(time::secs(3)), Duration::from_secs(3));
//! ```

pub mod process;
pub mod window;

use std::time::{Duration, SystemTime};

/// The event time `ms` milliseconds after the epoch (saturating).
pub const fn millis(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// The event time `s` seconds after the epoch (saturating).
pub const fn secs(s: u64) -> u64 {
    s.saturating_mul(1_000_000_000)
}

/// The event time `d` after the epoch (saturating at `u64::MAX`).
pub fn of_duration(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The event time of wall-clock time `t` (nanoseconds since the Unix
/// epoch; 0 for a time before it).
pub fn of_system_time(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, of_duration)
}

/// Event time `t` in whole milliseconds.
pub const fn as_millis(t: u64) -> u64 {
    t / 1_000_000
}

/// Event time `t` as a duration since the epoch.
pub const fn as_duration(t: u64) -> Duration {
    Duration::from_nanos(t)
}

pub use process::{TimedCoProcess, TimedProcess, TimerContext};
pub use window::{TriggerAction, Window, WindowAggregate, WindowTrigger, Windows};

/// How a source's partitions generate watermarks: bounded
/// out-of-orderness, as Flink's `forBoundedOutOfOrderness`.
///
/// ```
/// use std::time::Duration;
/// use tandem::time::Watermarks;
///
/// let w = Watermarks::bounded(Duration::from_millis(500))
///     .every(64)
///     .idle_after(Duration::from_secs(1));
/// assert_eq!(w.out_of_orderness_ns(), 500_000_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    out_of_orderness: u64,
    every: u64,
    idle_after: Option<Duration>,
    max_drift: Option<u64>,
}

impl Watermarks {
    /// Records may arrive up to `max_out_of_orderness` behind the largest
    /// event time their partition produced before them and still be on
    /// time.
    pub fn bounded(max_out_of_orderness: Duration) -> Self {
        Watermarks {
            out_of_orderness: u64::try_from(max_out_of_orderness.as_nanos()).unwrap_or(u64::MAX),
            every: 64,
            idle_after: None,
            max_drift: None,
        }
    }

    /// Event times never go back within a partition (no out-of-orderness).
    pub fn ascending() -> Self {
        Self::bounded(Duration::ZERO)
    }

    /// A watermark every `records` records of a partition (default 64; at
    /// least 1). Fewer watermarks cost less; windows fire that much later.
    pub fn every(mut self, records: u64) -> Self {
        self.every = records.max(1);
        self
    }

    /// A partition that produced nothing for `timeout` is idle: the
    /// watermarks downstream advance without it until it produces again
    /// (its records may then be late). Off by default.
    pub fn idle_after(mut self, timeout: Duration) -> Self {
        self.idle_after = Some(timeout);
        self
    }

    /// Watermark alignment (Flink's `withWatermarkAlignment`): a partition
    /// whose watermark is more than `drift` ahead of the slowest partition
    /// of the job's aligned sources (those given a drift; idle and ended
    /// ones aside) stops reading until the slowest catches up. Off by
    /// default.
    ///
    /// Without it, two sources that run at their own speed drift apart in
    /// event time, and an operator that merges them in event time (a
    /// join, a window over both, a keyed process function over a union)
    /// holds every record of the faster one until the slower's watermark
    /// passes it: memory, and the state every snapshot and recovery point
    /// carries, grow with the drift. Alignment bounds both. It changes
    /// only when records are read, never which records or where the
    /// watermarks fall among them, so results are the same.
    pub fn max_drift(mut self, drift: Duration) -> Self {
        self.max_drift = Some(u64::try_from(drift.as_nanos()).unwrap_or(u64::MAX));
        self
    }

    /// The alignment drift in nanoseconds, if aligned.
    pub fn drift_ns(&self) -> Option<u64> {
        self.max_drift
    }

    /// The allowed out-of-orderness, in nanoseconds.
    pub fn out_of_orderness_ns(&self) -> u64 {
        self.out_of_orderness
    }

    /// Records between watermarks.
    pub fn interval(&self) -> u64 {
        self.every
    }

    /// The idle timeout, if any.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_after
    }
}

/// One source partition's watermark generator (engine-internal): the
/// largest event time so far, and the watermark sent last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WatermarkGen {
    /// One past the largest event time produced (0: none yet).
    max_end: u64,
    /// The watermark sent last (0: none).
    pub(crate) sent: u64,
}

/// Bytes of a generator's snapshot: magic, largest event time + 1, sent.
const GEN_BYTES: usize = 24;
const GEN_MAGIC: &[u8; 8] = b"TDMWMGEN";

impl WatermarkGen {
    /// Record `seq` (0-based) of the partition, of event time `t`, was
    /// produced: the watermark to send after it, if one is due and ahead of
    /// the last.
    #[inline]
    pub(crate) fn on_record(&mut self, spec: &Watermarks, seq: u64, t: u64) -> Option<u64> {
        self.max_end = self.max_end.max(t.saturating_add(1));
        if !(seq + 1).is_multiple_of(spec.every) {
            return None;
        }
        let wm = self
            .max_end
            .saturating_sub(1)
            .saturating_sub(spec.out_of_orderness);
        (wm > self.sent).then(|| {
            self.sent = wm;
            wm
        })
    }

    /// The generator's state, for a source's checkpoint.
    pub(crate) fn to_bytes(self) -> Vec<u8> {
        let mut b = Vec::with_capacity(GEN_BYTES);
        b.extend_from_slice(GEN_MAGIC);
        b.extend_from_slice(&self.max_end.to_le_bytes());
        b.extend_from_slice(&self.sent.to_le_bytes());
        b
    }

    /// A generator from [`to_bytes`](Self::to_bytes).
    pub(crate) fn from_bytes(b: &[u8]) -> Result<Self, String> {
        if b.len() != GEN_BYTES || &b[..8] != GEN_MAGIC {
            return Err(format!(
                "not a watermark generator's state ({} bytes)",
                b.len()
            ));
        }
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Ok(WatermarkGen {
            max_end: u(8),
            sent: u(16),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watermark_trails_the_largest_event_time_by_the_bound_every_k_records() {
        let spec = Watermarks::bounded(Duration::from_nanos(10)).every(2);
        let mut g = WatermarkGen::default();
        assert_eq!(g.on_record(&spec, 0, 100), None);
        assert_eq!(g.on_record(&spec, 1, 50), Some(90));
        assert_eq!(g.on_record(&spec, 2, 95), None);
        assert_eq!(g.on_record(&spec, 3, 60), None, "not ahead of the last");
        assert_eq!(g.on_record(&spec, 5, 130), Some(120));
        let back = WatermarkGen::from_bytes(&g.to_bytes()).unwrap();
        assert_eq!(back, g);
        assert!(WatermarkGen::from_bytes(&[0; 24]).is_err());
    }
}

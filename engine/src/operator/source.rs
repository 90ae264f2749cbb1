//! Sources: where records enter a job.
//!
//! A source has one instance per partition, built on the worker that runs
//! it. The engine assigns tuple IDs (dense and increasing per partition) and
//! ingest stamps; the source supplies values and event times. A source must
//! be deterministic given its partition: the same partition yields the same
//! records in the same order, which is what lets a later layer rewind it.

pub use crate::error::SeekError;

/// What a source instance has to offer now.
#[derive(Debug, Clone, PartialEq)]
pub enum SourcePoll<T> {
    /// The next record of this partition.
    Ready {
        /// The payload.
        value: T,
        /// Its event time in nanoseconds.
        event_time: u64,
    },
    /// Nothing right now; ask again later.
    Pending,
    /// The partition is exhausted.
    End,
}

/// One partition of a source.
///
/// ```
/// use tandem::{Source, SourcePoll};
///
/// /// Counts from `next` up to (not including) `end`.
/// struct Counter { next: u64, end: u64 }
///
/// impl Source<u64> for Counter {
///     fn poll_next(&mut self) -> SourcePoll<u64> {
///         if self.next == self.end {
///             return SourcePoll::End;
///         }
///         self.next += 1;
///         SourcePoll::Ready { value: self.next - 1, event_time: self.next - 1 }
///     }
/// }
/// ```
pub trait Source<T>: 'static {
    /// Produces the next record, or says why it cannot.
    fn poll_next(&mut self) -> SourcePoll<T>;

    /// Rewinds a freshly built instance so that its next record is the one
    /// with per-partition sequence number `next_seq` (the engine counts from
    /// 0): how a restored job replays from a checkpoint.
    ///
    /// The default reads and discards `next_seq` records, which is correct
    /// for any deterministic source; override it when the source can jump
    /// (an offset into a log, a file position). An error ends the job with
    /// [`crate::JobError::SourceSeek`].
    fn seek(&mut self, next_seq: u64) -> Result<(), SeekError> {
        for n in 0..next_seq {
            match self.poll_next() {
                SourcePoll::Ready { .. } => {}
                SourcePoll::Pending => {
                    return Err(SeekError::NotReady {
                        read: n,
                        target: next_seq,
                    })
                }
                SourcePoll::End => {
                    return Err(SeekError::Ended {
                        read: n,
                        target: next_seq,
                    })
                }
            }
        }
        Ok(())
    }

    /// Whether [`Source::seek`] jumps to the position (an offset into a log
    /// or a file) rather than reading the records before it. A standby
    /// whose chain replays this source then opens it at the recovery point
    /// when it takes over; otherwise — the default — a warm standby keeps
    /// an instance of its own near the newest recovery point, reading and
    /// discarding the partition's records as the points advance, so that
    /// a takeover reads only what came after the point (never the whole
    /// partition again).
    fn seeks_directly(&self) -> bool {
        false
    }
}

/// A source over an iterator of `(value, event_time)` pairs.
pub struct IterSource<I>(pub I);

impl<T, I> Source<T> for IterSource<I>
where
    I: Iterator<Item = (T, u64)> + 'static,
{
    fn poll_next(&mut self) -> SourcePoll<T> {
        match self.0.next() {
            Some((value, event_time)) => SourcePoll::Ready { value, event_time },
            None => SourcePoll::End,
        }
    }
}

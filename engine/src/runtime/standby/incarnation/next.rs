//! What a primary takes next: the log's entry, or — past the log's end —
//! the chunk it chooses (round robin over its lanes) or a processing-time
//! tick, appended to the log before it acts on it.

use super::{Doing, Incarnation, Stop, CHUNK};
use crate::operator::ChunkId;
use crate::runtime::standby::entry::{control_kind, KIND_END};
use crate::runtime::task::MS;
use crate::standby::codec::Codec;
use crate::standby::detlog::{fenced_append, Appended, Det, MAX_TICK};
use std::sync::atomic::Ordering;

impl<T: crate::Data + Codec + Sync> Incarnation<T> {
    /// A live primary's next chunk: the next lane (round robin) with input,
    /// up to `max` of its data entries, or its end or barrier entry. A lane
    /// that delivered the barrier being aligned is not read meanwhile
    /// (exactly-once).
    pub(super) fn choose(&mut self, max: u64, epoch: u64) -> Result<Option<Det>, Stop> {
        if let Some(src) = &mut self.src {
            if self.ended[0] {
                return Ok(None);
            }
            let newest = self.ctx.shared.trigger.load(Ordering::Acquire);
            return Ok(src.choose(0, max, newest, self.align.forwarded(), &self.ctx));
        }
        let lanes = self.pos.len();
        let exactly_once = self.ctx.exactly_once();
        for k in 0..lanes {
            let l = (self.rr + k) % lanes;
            if self.ended[l] || (exactly_once && self.align.holds(l)) {
                continue;
            }
            let first = self.pos[l];
            if self.group.queues[l].tail() <= first {
                // Nothing new: no need to mark the reading (a fenced
                // primary finds its fencing at its next poll).
                continue;
            }
            let peek = self.reading(l, Some(epoch), |q| {
                let avail = q.tail().saturating_sub(first).min(max.min(CHUNK));
                let mut n = 0;
                while n < avail {
                    match q.get(first + n) {
                        Some(e) if control_kind(e.bytes).is_some() => break,
                        Some(_) => n += 1,
                        None => break,
                    }
                }
                let lane = l as u32;
                if n > 0 {
                    return Some(Det::Chunk { lane, n: n as u32 });
                }
                if avail == 0 {
                    return None;
                }
                match q.get(first).and_then(|e| control_kind(e.bytes)) {
                    Some(KIND_END) => Some(Det::End { lane }),
                    Some(_) => Some(Det::Barrier { lane, low: None }),
                    None => None,
                }
            });
            match peek {
                None => return Err(Stop::Fenced),
                Some(Some(d)) => {
                    self.rr = (l + 1) % lanes;
                    return Ok(Some(d));
                }
                Some(None) => {}
            }
        }
        Ok(None)
    }

    /// The log's entry at `seq`: the one logged there, or — for a primary
    /// past the log's end — a chunk it chooses and logs (`None`: nothing to
    /// do now).
    pub(super) fn next_entry(&mut self, max: u64, epoch: Option<u64>) -> Result<Option<Det>, Stop> {
        self.doing(Doing::Choosing);
        let det = match self.group.log.get(self.seq) {
            Some(d) => d,
            None => {
                let Some(e) = epoch else { return Ok(None) };
                let chosen = match self.chosen.take() {
                    Some(d) => Some(d),
                    None => self.choose(max, e)?,
                };
                let d = match (self.tick_due(chosen.is_some()), chosen) {
                    (Some(ms), c) => {
                        // The tick goes first; the chunk is logged next.
                        self.chosen = c;
                        Det::Tick { ms }
                    }
                    (None, Some(d)) => d,
                    (None, None) => return Ok(None),
                };
                let floor = self.group.point_seq.load(Ordering::Acquire);
                let words = self.group.log.words();
                match fenced_append(&words, self.seq, floor, d, e, || self.group.live.current()) {
                    Appended::Go(got) => {
                        if got != d {
                            // A fenced primary's entry: the chunk chosen
                            // after it may no longer be where it was.
                            self.chosen = None;
                        }
                        got
                    }
                    Appended::Fenced => return Err(Stop::Fenced),
                    Appended::Full => {
                        self.chosen = None;
                        // Only a point frees the log; nobody else wakes
                        // this primary to take it (a replayed source has
                        // no writer), so its next poll comes at once.
                        self.group.point_wanted.store(true, Ordering::Release);
                        self.log_full = true;
                        return Ok(None);
                    }
                }
            }
        };
        if let Det::Tick { .. } = det {
            return Ok(Some(det));
        }
        let l = det.lane();
        if l >= self.pos.len() || self.ended[l] {
            self.fail(format!(
                "determinant log entry {} names lane {l}, which {}",
                self.seq,
                if l >= self.pos.len() {
                    "does not exist"
                } else {
                    "has ended"
                }
            ));
            return Err(Stop::Failed);
        }
        Ok(Some(det))
    }

    /// For a primary at the log's end whose chain has processing-time
    /// timers: the milliseconds to log as a tick now, if any — when the
    /// clock has passed the last tick's millisecond and a chunk is about
    /// to be taken (`input`), or a timer is due.
    pub(super) fn tick_due(&self, input: bool) -> Option<u32> {
        if !self.ctx.ptimers.get() {
            return None;
        }
        let now = self.ctx.clock.now();
        let lag = (now / MS)
            .checked_sub(self.clock.ptime_ms)
            .filter(|l| *l > 0)?;
        let due = self.ctx.next_ptimer.get() <= (self.clock.ptime_ms + lag) * MS;
        (input || due).then(|| lag.min(MAX_TICK as u64) as u32)
    }

    /// Runs tick entry `self.seq` (`ms` milliseconds of processing time)
    /// through the chain as a chunk of no input: the timers it makes due
    /// fire, and their outputs are the chunk's.
    pub(super) fn run_tick(&mut self, ms: u32) -> Result<(), Stop> {
        self.doing(Doing::Operator);
        self.clock.ptime_ms += u64::from(ms);
        let chain = self
            .chain
            .as_mut()
            .expect("a reading incarnation has its chain");
        chain.open_chunk(ChunkId {
            seq: self.seq,
            first: self.pos[0],
            n: 0,
            lane: 0,
        });
        chain.processing_time(self.clock.ptime_ms * MS);
        if self.ctx.has_failure() {
            return Err(Stop::Failed);
        }
        self.seq += 1;
        chain.close_chunk();
        Ok(())
    }
}

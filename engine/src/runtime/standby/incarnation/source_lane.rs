//! A lane that is a replayed source: the source is the queue.
//!
//! A backed-up chain whose input is a source instance of its own (placement
//! decides: `runtime/placement.rs`) does not have the source write its
//! records into a buffer queue for the primary to read back. Each
//! incarnation opens an instance of the source partition itself, and the
//! lane's position is the source's sequence number: tuple ID `k` of the
//! partition is position `k`. What the source's order does not fix is
//! logged, as for any lane: how many records each chunk took (the primary
//! takes what the source has ready, up to a chunk), where each checkpoint
//! barrier fell (the primary injects the newest one the coordinator asked
//! for between chunks; the entry carries the id's low bits, see
//! [`crate::standby::detlog`]), and the end.
//!
//! A later reader — a new primary replaying from a recovery point, a hot
//! standby following — opens a fresh instance, seeks it to the point's
//! position ([`crate::Source::seek`]: a source that can jump makes the
//! restore cheap; the default reads the records before it again), and takes
//! exactly the logged counts. A source is deterministic per partition (the
//! trait's contract), so it reads the primary's records; one that yields
//! fewer, more, or ends elsewhere fails the group loudly, never silently.
//!
//! A source whose seek reads the records before the position (the
//! trait's default: [`crate::Source::seeks_directly`] is false) would make
//! a takeover read the whole partition again — a restart in disguise. So
//! a warm standby keeps an instance of its own near the newest recovery
//! point ([`SourceLane::keep_up`]: reading and discarding, a bounded
//! number of records a poll, on the standby's worker), and its takeover
//! reads on from there to the point: only the records since the last
//! poll.
//!
//! Ingest stamps: a rate-limited source's stamp is the record's scheduled
//! release time, the same in every incarnation; an unpaced one is stamped
//! when the incarnation reads it (a replayed record's latency counts from
//! its replay).

use super::Stop;
use crate::error::JobError;
use crate::operator::source::{SeekError, Source, SourcePoll};
use crate::operator::OperatorInfo;
use crate::record::{Nanos, Record, TupleId};
use crate::runtime::graph::{downcast, Probe, SourceOpen};
use crate::runtime::source::Pacer;
use crate::runtime::task::TaskCtx;
use crate::standby::detlog::{barrier_low, Det};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// What an incarnation needs to run a source partition as its lane.
pub(crate) struct SourceSpec {
    /// The source's node.
    pub(crate) node: usize,
    pub(crate) info: OperatorInfo,
    pub(crate) open: SourceOpen,
    /// Records per second of this partition (a rate-limited source).
    pub(crate) rate: Option<f64>,
    /// The schedule's start, shared by every partition and incarnation.
    pub(crate) origin: Arc<OnceLock<Nanos>>,
    /// Fault injection on the source's records.
    pub(crate) probe: Probe,
    /// The partition had finished at the checkpoint this attempt restored.
    pub(crate) finished: bool,
    /// Where the attempt starts reading it (the restored position).
    pub(crate) start: u64,
    /// The job-wide number of the source's partition 0 (tuple IDs).
    pub(crate) first_partition: u32,
}

/// Records a standby reads and discards per poll to keep up with the
/// recovery points (tens of microseconds for a cheap source).
const KEEP_UP: u64 = 4096;

/// Whether a chunk could be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Take {
    Ready,
    /// The source has not produced the logged records yet: ask again.
    NotYet,
}

/// A source partition as an incarnation's lane (see the module docs).
pub(super) struct SourceLane<T> {
    pub(super) spec: SourceSpec,
    src: Option<Box<dyn Source<T>>>,
    /// The position of `ahead`'s first record.
    at: u64,
    /// Records read from the source and not yet in a chunk.
    ahead: VecDeque<Record<T>>,
    /// A paced record read before it was due (its position is
    /// `at + ahead.len()`).
    held: Option<(T, u64)>,
    /// The source said it has no more records.
    ended: bool,
    pacer: Option<Pacer>,
    /// When the held record is due (a primary with nothing to do sleeps
    /// until then).
    pub(super) wake_at: Option<Nanos>,
    /// Whether the source jumps to a position (known once an instance was
    /// opened).
    direct: Option<bool>,
}

impl<T: crate::Data> SourceLane<T> {
    pub(super) fn new(spec: SourceSpec) -> Self {
        let pacer = spec.rate.map(|r| Pacer::new(r, Arc::clone(&spec.origin)));
        SourceLane {
            spec,
            src: None,
            at: 0,
            ahead: VecDeque::new(),
            held: None,
            ended: false,
            pacer,
            wake_at: None,
            direct: None,
        }
    }

    /// Opens a fresh instance whose next record is position `pos` (a
    /// restored partition that had finished opens none: it has ended).
    pub(super) fn place(&mut self, pos: u64, ctx: &TaskCtx) -> Result<(), SeekError> {
        // An instance kept up behind `pos` (nothing read ahead of its
        // position) reads on to it; any other is replaced.
        let kept = self.src.is_some()
            && self.direct == Some(false)
            && self.ahead.is_empty()
            && self.held.is_none()
            && self.at <= pos;
        self.ahead.clear();
        self.held = None;
        self.wake_at = None;
        if self.spec.finished {
            self.at = pos;
            self.src = None;
            self.ended = true;
            return Ok(());
        }
        if kept {
            self.skip(pos - self.at, ctx);
            if self.at == pos {
                return Ok(());
            }
            // It ended or paused short of the point: a fresh instance says
            // which.
        }
        self.at = pos;
        self.src = None;
        self.ended = false;
        let prev = ctx.enter(self.spec.node);
        let mut src = downcast::<Box<dyn Source<T>>>((self.spec.open)(&self.spec.info), "source");
        self.direct = Some(src.seeks_directly());
        let sought = if pos > 0 { src.seek(pos) } else { Ok(()) };
        ctx.leave(prev);
        self.src = Some(src);
        sought
    }

    /// Reads and discards up to `n` records (fewer if the source has none
    /// now, or ended).
    fn skip(&mut self, n: u64, ctx: &TaskCtx) -> u64 {
        let Some(src) = self.src.as_mut() else {
            return 0;
        };
        let prev = ctx.enter(self.spec.node);
        let mut read = 0;
        while read < n && !self.ended {
            match src.poll_next() {
                SourcePoll::Ready { .. } => read += 1,
                SourcePoll::Pending => break,
                SourcePoll::End => self.ended = true,
            }
        }
        ctx.leave(prev);
        self.at += read;
        read
    }

    /// A warm standby's instance follows the group's newest recovery point
    /// (`point`, a position) where the source cannot jump (see the module
    /// docs); returns whether it read anything.
    pub(super) fn keep_up(&mut self, point: u64, ctx: &TaskCtx) -> Result<bool, SeekError> {
        if self.spec.finished || self.direct == Some(true) {
            return Ok(false);
        }
        if self.src.is_none() {
            // From where the attempt starts (a restored position of a
            // source that cannot jump takes a while to reach: not a
            // stall).
            let start = self.spec.start;
            ctx.long(|| self.place(start, ctx))?;
            if self.direct == Some(true) {
                // It jumps: a takeover opens it where it needs it.
                self.src = None;
                return Ok(false);
            }
        }
        if !self.ahead.is_empty() || self.held.is_some() || self.at >= point {
            return Ok(false);
        }
        Ok(self.skip((point - self.at).min(KEEP_UP), ctx) > 0)
    }

    /// Reads records until `want` are ahead, the source has none now or
    /// ended, or — `paced`, a live primary — the next is not due yet.
    fn fill(&mut self, want: usize, paced: bool, ctx: &TaskCtx) {
        let Some(src) = self.src.as_mut() else {
            return;
        };
        let mut now = ctx.clock.now();
        let partition = self.spec.first_partition + self.spec.info.instance as u32;
        while self.ahead.len() < want && !self.ended {
            let (value, event_time) = match self.held.take() {
                Some(v) => v,
                None => {
                    let prev = ctx.enter(self.spec.node);
                    let next = src.poll_next();
                    ctx.leave(prev);
                    match next {
                        SourcePoll::Ready { value, event_time } => (value, event_time),
                        SourcePoll::Pending => break,
                        SourcePoll::End => {
                            self.ended = true;
                            break;
                        }
                    }
                }
            };
            let seq = self.at + self.ahead.len() as u64;
            let ingest = match &mut self.pacer {
                Some(p) => {
                    let due = p.due(seq, now);
                    if paced && due > now {
                        now = ctx.clock.now();
                        if due > now {
                            self.held = Some((value, event_time));
                            self.wake_at = Some(due);
                            break;
                        }
                    }
                    due
                }
                None => now,
            };
            self.ahead.push_back(Record {
                id: TupleId::new(partition, seq),
                event_time,
                ingest,
                value,
            });
        }
    }

    /// A live primary's next entry for this lane (`lane`): the newest
    /// checkpoint barrier if the last one it forwarded is older, else the
    /// records the source has ready and due (up to `max`), else its end;
    /// `None`: nothing now.
    pub(super) fn choose(
        &mut self,
        lane: u32,
        max: u64,
        newest: u64,
        forwarded: u64,
        ctx: &TaskCtx,
    ) -> Option<Det> {
        self.wake_at = None;
        if newest > forwarded && !self.spec.finished {
            return Some(Det::Barrier {
                lane,
                low: Some(barrier_low(newest)),
            });
        }
        let want = max.clamp(1, super::CHUNK) as usize;
        if self.ahead.len() < want {
            self.fill(want, true, ctx);
        }
        let n = self.ahead.len().min(want);
        if n > 0 {
            Some(Det::Chunk { lane, n: n as u32 })
        } else if self.ended && self.held.is_none() {
            Some(Det::End { lane })
        } else {
            None
        }
    }

    /// Moves the next `n` records into `buf` (reading them from the source
    /// if they are not ahead yet).
    pub(super) fn take(
        &mut self,
        n: usize,
        buf: &mut Vec<super::Item<T>>,
        ctx: &TaskCtx,
    ) -> Result<Take, String> {
        if self.ahead.len() < n {
            self.fill(n, false, ctx);
        }
        if self.ahead.len() < n {
            if self.ended || self.src.is_none() {
                return Err(format!(
                    "the log takes positions {}..{} of source `{}` partition {}, which ended at {}",
                    self.at,
                    self.at + n as u64,
                    self.spec.info.name,
                    self.spec.info.instance,
                    self.at + self.ahead.len() as u64
                ));
            }
            return Ok(Take::NotYet);
        }
        buf.extend(self.ahead.drain(..n).map(super::Item::Rec));
        self.at += n as u64;
        Ok(Take::Ready)
    }

    /// Checks the logged end against the source: it must have no record at
    /// this position.
    pub(super) fn take_end(&mut self, ctx: &TaskCtx) -> Result<Take, String> {
        if self.ahead.is_empty() && self.held.is_none() && !self.ended {
            self.fill(1, false, ctx);
        }
        if !self.ahead.is_empty() || self.held.is_some() {
            return Err(format!(
                "the log ends source `{}` partition {} at position {}, where it has a record",
                self.spec.info.name, self.spec.info.instance, self.at
            ));
        }
        Ok(if self.ended {
            Take::Ready
        } else {
            Take::NotYet
        })
    }
}

/// The incarnation's side of a replayed source lane.
impl<T: crate::Data + crate::standby::codec::Codec + Sync> super::Incarnation<T> {
    /// A replayed source lane: a fresh instance of the source at the
    /// lane's position.
    pub(super) fn open_source(&mut self) {
        let Some(src) = &mut self.src else { return };
        if let Err(reason) = src.place(self.pos[0], &self.ctx) {
            self.ctx.fail(JobError::SourceSeek {
                operator: src.spec.info.name.to_string(),
                instance: src.spec.info.instance,
                position: self.pos[0],
                source: reason,
            });
        }
    }

    /// Lane positions entry `det` takes: a replayed source's barrier and
    /// end take none (its positions are the source's records).
    #[inline]
    pub(super) fn consumes(&self, det: Det) -> u64 {
        match det {
            Det::Chunk { n, .. } => n as u64,
            Det::Tick { .. } => 0,
            _ if self.src.is_some() => 0,
            _ => 1,
        }
    }

    /// [`Self::copy_chunk`] from a replayed source.
    pub(super) fn take_from_source(&mut self, det: Det) -> Result<bool, Stop> {
        let src = self.src.as_mut().expect("a source lane");
        self.buf.clear();
        let taken = match det {
            Det::Chunk { n, .. } => src.take(n as usize, &mut self.buf, &self.ctx),
            Det::End { .. } => src.take_end(&self.ctx),
            Det::Barrier { low: Some(low), .. } => {
                let newest = self.ctx.shared.trigger.load(Ordering::Acquire);
                self.barrier = crate::standby::detlog::barrier_id(low, newest);
                Ok(Take::Ready)
            }
            Det::Barrier { low: None, .. } => Err(format!(
                "determinant log entry {} is a barrier without its id on a source lane",
                self.seq
            )),
            Det::Tick { .. } => Err(format!(
                "determinant log entry {} is a tick on a source lane",
                self.seq
            )),
        };
        match taken {
            Ok(Take::Ready) => Ok(true),
            Ok(Take::NotYet) => Ok(false),
            Err(why) => {
                self.fail(why);
                Err(Stop::Failed)
            }
        }
    }
}

//! The chunk loop: an incarnation takes the log's entries one chunk at a
//! time (the primary past the log's end choosing and logging them, see
//! [`super::next`]), copies each chunk's inputs out of its lane's buffer
//! queue (or its replayed source) through its reader slot, and runs them
//! through its chain between the chunk's marks.

use super::{Incarnation, Item, Stop};
use crate::error::JobError;
use crate::operator::ChunkId;
use crate::runtime::channel::forward_time;
use crate::runtime::probe::run_probe;
use crate::runtime::standby::entry::{decode, Entry, KIND_TYPED};
use crate::runtime::standby::group::Doing;
use crate::standby::codec::Codec;
use crate::standby::detlog::Det;
use std::sync::atomic::Ordering;

impl<T: crate::Data + Codec + Sync> Incarnation<T> {
    /// Reads queue entries of lane `l` inside the reader's copying mark:
    /// for a primary (`epoch`), only while its epoch holds — a successor
    /// may reclaim its cursor once it is fenced (see `bq`).
    pub(super) fn reading<R>(
        &self,
        l: usize,
        epoch: Option<u64>,
        f: impl FnOnce(&crate::standby::bq::BufferQueue) -> R,
    ) -> Option<R> {
        let q = &self.group.queues[l];
        let Some(e) = epoch else {
            return Some(f(q));
        };
        q.enter(self.slot);
        let r = (self.group.live.current() == e).then(|| f(q));
        q.leave(self.slot);
        r
    }

    /// Processes up to `budget` inputs, entry by entry of the log: as the
    /// primary of `epoch` (appending entries past the log's end), or as a
    /// hot standby (`epoch` `None`: only logged entries below `limit`, and
    /// never the end that would end the operator).
    pub(super) fn process(
        &mut self,
        budget: u64,
        epoch: Option<u64>,
        limit: u64,
    ) -> Result<u64, Stop> {
        let mut moved = 0u64;
        while moved < budget && self.ctx.blocked.get() == 0 && self.live > 0 && self.seq < limit {
            let Some(det) = self.next_entry(budget - moved, epoch)? else {
                break;
            };
            if epoch.is_none() && matches!(det, Det::End { .. }) && self.live == 1 {
                // A hot standby never ends the operator: the primary does.
                break;
            }
            if let Det::Tick { ms } = det {
                self.run_tick(ms)?;
                continue;
            }
            if !self.copy_chunk(det, epoch)? {
                // A replayed source has not produced the logged records
                // yet.
                break;
            }
            moved += self.run_chunk(det)?;
        }
        Ok(moved)
    }

    /// Copies the inputs of chunk `det` out of its queue into `self.buf`
    /// (for a primary, inside its copying mark), checking them against the
    /// entry; `false`: a replayed source has not produced them yet.
    pub(super) fn copy_chunk(&mut self, det: Det, epoch: Option<u64>) -> Result<bool, Stop> {
        self.doing(Doing::Copying);
        if self.src.is_some() {
            return self.take_from_source(det);
        }
        let (l, n, seq) = (det.lane(), det.len(), self.seq);
        let first = self.pos[l];
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut barrier = 0;
        let typed = self.typed.get(l).and_then(|t| t.as_deref());
        let copied = self.reading(l, epoch, |q| {
            let run = q.run(first, n);
            for p in first..first + n {
                let Some(e) = run.as_ref().and_then(|r| r.get(p)) else {
                    return Err((false, format!(
                        "determinant log entry {seq} takes positions {first}..{} of {}, which holds {}..{}",
                        first + n,
                        q.path().display(),
                        q.head(),
                        q.tail()
                    )));
                };
                if let Err(why) = e.verify() {
                    return Err((true, format!("buffer queue {}: {why}", q.path().display())));
                }
                let entry = match (e.bytes, typed) {
                    // The record itself, in the queue's typed slot.
                    ([KIND_TYPED], Some(t)) => match t.get(p) {
                        Some(r) if r.id.0 == e.tuple_id => Ok(Entry::Data(r)),
                        _ => {
                            return Err((true, format!(
                                "buffer queue {} position {p}: its typed slot does not hold tuple {:#x}",
                                q.path().display(),
                                e.tuple_id
                            )))
                        }
                    },
                    _ => decode::<T>(e.tuple_id, e.bytes),
                };
                match (entry, det) {
                    (Ok(Entry::Data(r)), Det::Chunk { .. }) => buf.push(Item::Rec(r)),
                    (Ok(Entry::Watermark(wm)), Det::Chunk { .. }) => buf.push(Item::Wm(wm)),
                    (Ok(Entry::Idle), Det::Chunk { .. }) => buf.push(Item::Idle),
                    (Ok(Entry::End), Det::End { .. }) => {}
                    (Ok(Entry::Barrier(id)), Det::Barrier { .. }) => barrier = id,
                    (Ok(_), _) => {
                        return Err((false, format!(
                            "determinant log entry {seq} ({det:?}) disagrees with position {p} of {}",
                            q.path().display()
                        )))
                    }
                    (Err(why), _) => {
                        return Err((false, format!(
                            "buffer queue {} position {p}: {why}",
                            q.path().display()
                        )))
                    }
                }
            }
            Ok(())
        });
        self.buf = buf;
        self.barrier = barrier;
        match copied {
            None => Err(Stop::Fenced),
            Some(Err((true, why))) => {
                // The group's own record of its input is damaged: no
                // takeover can replay it (every one would read the same
                // bytes). The attempt fails — restart-all from the last
                // checkpoint, or the job's error naming the queue.
                self.ctx.shared.fail(JobError::Io {
                    operator: self.group.name.to_string(),
                    instance: self.group.instance,
                    context: "reading the standby's buffer queue".into(),
                    path: None,
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
                });
                Err(Stop::Failed)
            }
            Some(Err((false, why))) => {
                self.fail(why);
                Err(Stop::Failed)
            }
            Some(Ok(())) => Ok(true),
        }
    }

    /// Runs the copied chunk `det` through the chain between its marks
    /// (the end entry of the last lane ends the operator; a barrier entry
    /// that completes an alignment passes the barrier down the chain, where
    /// the operator snapshots and acknowledges it); returns the inputs it
    /// consumed.
    pub(super) fn run_chunk(&mut self, det: Det) -> Result<u64, Stop> {
        self.doing(Doing::Operator);
        let (l, n, seq) = (det.lane(), self.consumes(det), self.seq);
        let first = self.pos[l];
        let chain = self
            .chain
            .as_mut()
            .expect("a reading incarnation has its chain");
        chain.open_chunk(ChunkId {
            seq,
            first,
            n: n as u32,
            lane: l as u16,
        });
        let mut src = self.src.as_mut();
        self.ctx.lane.set(l as u32);
        self.ctx.lane_wm.set(self.clock.lane(l));
        for item in self.buf.drain(..) {
            let r = match item {
                Item::Rec(r) => {
                    self.clock.on_data(l);
                    r
                }
                Item::Wm(wm) => {
                    let f = self.clock.on_watermark(l, wm);
                    self.ctx.lane_wm.set(self.clock.lane(l));
                    forward_time(f, &mut **chain);
                    continue;
                }
                Item::Idle => {
                    let f = self.clock.on_idle(l);
                    forward_time(f, &mut **chain);
                    continue;
                }
            };
            if let Some(s) = &mut src {
                // The source's own fault injection, before its record
                // enters the chain.
                let prev = self.ctx.enter(s.spec.node);
                let go = run_probe(&mut s.spec.probe, r.id, &self.ctx, s.spec.node);
                self.ctx.leave(prev);
                if !go {
                    return Err(Stop::Failed);
                }
            }
            chain.collect(r);
            // A sign of life inside a long poll (see `Detector`).
            self.ctx.tick();
            if self.ctx.has_failure() {
                // A cut input: nothing after the record it cut is
                // processed, so what was emitted is a prefix of the
                // chunk's outputs (the consumers' cut counts on it).
                return Err(Stop::Failed);
            }
        }
        self.pos[l] = first + n;
        if let Some(q) = self.group.queues.get(l) {
            q.advance(self.slot, first + n);
        }
        if let Some(s) = &src {
            if !self.ctx.muted.get() {
                // The source's position, as its own port publishes it.
                let c = &self.ctx.shared.metrics.counters[s.spec.node][s.spec.info.instance];
                c.records.store(first + n, Ordering::Relaxed);
                c.emitted.store(first + n, Ordering::Relaxed);
            }
        }
        self.seq += 1;
        match det {
            Det::Barrier { .. } => {
                let now = self.ctx.clock.now();
                self.align_timer.on_barrier(&self.align, self.barrier, now);
                if let Some(id) = self.align.on_barrier(l, self.barrier, &self.ended) {
                    if let Some(ns) = self.align_timer.forwarded(id, now) {
                        self.ctx.aligned(ns);
                    }
                    if let Some(s) = &src {
                        // The source's acknowledgement: its position.
                        if self.ctx.wants_snapshot(id) {
                            self.ctx.ack(s.spec.node, id, None, Some(first), None);
                        }
                    }
                    chain.barrier(id);
                }
            }
            Det::End { .. } => {
                if src.is_some() {
                    self.group.end_pos[l].store(first, Ordering::Release);
                }
                self.ended[l] = true;
                self.live -= 1;
                if let Some(id) = self.align.try_complete(&self.ended) {
                    chain.barrier(id);
                }
                if self.live > 0 {
                    let f = self.clock.on_end(l);
                    forward_time(f, &mut **chain);
                }
                if self.live == 0 {
                    // Its end-of-stream outputs, the last chunk's mark, the
                    // end.
                    chain.end();
                    return Ok(n);
                }
            }
            Det::Chunk { .. } => {}
            Det::Tick { .. } => unreachable!("ticks run in run_tick"),
        }
        chain.close_chunk();
        Ok(n)
    }
}

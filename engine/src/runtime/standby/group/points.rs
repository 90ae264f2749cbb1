//! A group's recovery points: what the newest one covers (the queue
//! positions below it may be evicted, the chunks below it forgotten), how a
//! primary stages a point's state in the snapshot exchange and publishes
//! the point once its consumers have acknowledged what comes before it,
//! and how a successor reads the newest one back.

use super::{Group, Inner, Point, FIRST_EXCHANGE};
use crate::standby::exchange::{PublishError, SnapshotExchange, Staged, Staging};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Group {
    /// Lane `l`: positions below this are covered by the newest recovery
    /// point (and so may be evicted once every reader is past them).
    pub(crate) fn covered(&self, l: usize) -> u64 {
        self.point_pos[l].load(Ordering::Acquire)
    }

    /// Below this no stream a consumer has still to see starts, for a
    /// consumer that follows the primary of `epoch` and is (`streaming`)
    /// or is not yet inside its stream: the newest recovery point (every
    /// later takeover starts at the newest point or after it) — and, for a
    /// consumer that has not started reading the current primary's stream
    /// (it still reads an older one, or has not received the stream's
    /// resume mark yet), the current primary's start if that is older
    /// (the stream repeats from there).
    ///
    /// Only a consumer inside the current primary's stream may forget
    /// below the point: one that took the first primary's start (0) for
    /// its floor would keep the count of every chunk of that primary's
    /// life, and pay for forgetting them all at once when it follows the
    /// next one.
    pub(crate) fn floor_seq(&self, epoch: u64, streaming: bool) -> u64 {
        // The start and the point before the epoch: a takeover after the
        // epoch's load starts at least at the point read before it.
        let start = self.start_seq.load(Ordering::Acquire);
        let point = self.point_seq.load(Ordering::Acquire);
        if streaming && self.live.current() == epoch {
            point
        } else {
            point.min(start)
        }
    }

    /// Chunks every live consumer has all outputs of.
    pub(crate) fn acked_min_seq(&self) -> u64 {
        self.consumers
            .iter()
            .filter(|k| !k.ended.load(Ordering::Acquire))
            .map(|k| k.acked_seq.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Reserves a slot of the snapshot exchange for a state archive of
    /// `len` bytes, to be filled over the primary's polls and published
    /// with its point ([`Self::publish_point`]). A state larger than the
    /// exchange's slots gets a new exchange, twice its size, installed when
    /// that point is published (the current point names a publication of
    /// the current one). `Ok(None)`: every slot is busy; skip this point.
    pub(crate) fn stage_state(&self, len: usize) -> std::io::Result<Option<Staging>> {
        let x = {
            let mut g = self.lock();
            let fits = |x: &Option<Arc<SnapshotExchange>>| {
                x.as_ref().is_some_and(|x| x.slot_bytes() >= len)
            };
            if fits(&g.exchange) {
                Arc::clone(g.exchange.as_ref().expect("fits"))
            } else if fits(&g.spare) {
                Arc::clone(g.spare.as_ref().expect("fits"))
            } else {
                g.exchanges_made += 1;
                let path = self.dir.join(format!(
                    "{}-{}-state-{}.sx",
                    self.name, self.instance, g.exchanges_made
                ));
                let x = Arc::new(
                    SnapshotExchange::create(&path, len.saturating_mul(2).max(FIRST_EXCHANGE))
                        .map_err(std::io::Error::other)?,
                );
                if let Some(old) = g.spare.replace(Arc::clone(&x)) {
                    let _ = std::fs::remove_file(old.path());
                }
                x
            }
        };
        match x.reserve(len) {
            Ok(s) => Ok(Some(s)),
            // Readers pin the other slots: skip this one.
            Err(PublishError::Busy) => Ok(None),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    }

    /// Publishes a recovery point for the primary of `epoch`, with its
    /// state staged in the exchange (`None`: stateless) — refused
    /// (`Ok(false)`, the staged slot released) once that epoch is over or
    /// when a newer point is published. The caller has checked that every
    /// consumer acknowledged every chunk below `seq`.
    pub(crate) fn publish_point(
        &self,
        epoch: u64,
        point: Point,
        state: Option<Staged>,
    ) -> std::io::Result<bool> {
        let seq = point.seq;
        let mut g = self.lock();
        // Published or refused, the point is no longer in flight.
        self.base_in_flight.store(0, Ordering::Release);
        // Under the lock: a new primary reads the point under it after its
        // claim, so a fenced primary never publishes past what it read.
        if self.live.current() != epoch || g.point.seq > seq {
            return Ok(false);
        }
        let mut xseq = 0;
        if let Some(staged) = state {
            let x = staged.exchange();
            if !g.exchange.as_ref().is_some_and(|c| Arc::ptr_eq(c, x)) {
                // Staged in the new, larger exchange: it is the current one
                // from this point on.
                if g.spare.as_ref().is_some_and(|s| Arc::ptr_eq(s, x)) {
                    g.spare = None;
                }
                if let Some(old) = g.exchange.replace(Arc::clone(x)) {
                    let _ = std::fs::remove_file(old.path());
                    // Unmapping it frees every page of its slots (hundreds of
                    // megabytes for a large state): off the primary's poll.
                    crate::sys::reap::later(old);
                }
            }
            xseq = staged.commit();
            self.snapshots.fetch_add(1, Ordering::Relaxed);
            if point.base != 0 {
                self.delta_snapshots.fetch_add(1, Ordering::Relaxed);
            }
        }
        for (a, &p) in self.point_pos.iter().zip(&point.pos) {
            a.store(p, Ordering::Release);
        }
        g.point = Point { xseq, ..point };
        self.point_seq.store(seq, Ordering::Release);
        self.point_at
            .store(crate::sys::clock::monotonic_ns(), Ordering::Relaxed);
        Ok(true)
    }

    /// The newest recovery point and the exchange holding its state, read
    /// under the lock (cheap: the state itself is read by [`point_state`]
    /// after the lock is let go — reading and verifying a large archive
    /// takes milliseconds, and the primary publishes under this lock).
    ///
    /// [`point_state`]: Self::point_state
    pub(crate) fn latest_point(&self, g: &Inner) -> (Point, Option<Arc<SnapshotExchange>>) {
        (g.point.clone(), g.exchange.clone())
    }

    /// The state of point `p` (`None`: the point has none — a stateless
    /// operator, or the start), copied out of `x`. An error when the
    /// exchange no longer holds the point's publication: a newer point was
    /// published since `p` was read (a standby reads again later), or —
    /// after a claim fenced every other writer — the exchange is damaged.
    pub(crate) fn point_state(
        p: &Point,
        x: Option<&Arc<SnapshotExchange>>,
    ) -> Result<Option<Vec<u8>>, String> {
        if p.xseq == 0 {
            return Ok(None);
        }
        let x = x.ok_or("the recovery point names a snapshot, but there is no exchange")?;
        let pinned = x
            .latest()
            .ok_or("the snapshot exchange holds no valid snapshot")?;
        if pinned.seq != p.xseq {
            return Err(format!(
                "the snapshot exchange holds publication {}, the recovery point names {}",
                pinned.seq, p.xseq
            ));
        }
        Ok(Some(pinned.bytes.to_vec()))
    }
}

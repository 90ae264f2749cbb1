//! The standby's side of an incarnation: watching the primary (the
//! detector), following the determinant log when hot, and the takeover —
//! claiming the epoch, taking the role under the group's lock, going live —
//! with the fault it answers.

use super::{Incarnation, Phase};
use crate::error::JobError;
use crate::metrics::{RecoveryCause, RecoveryKind, RecoveryRecord};
use crate::record::Nanos;
use crate::runtime::probe::{ProbeAction, TakeoverStage};
use crate::runtime::standby::group::{Doing, Fault, Group, Point, NONE};
use crate::runtime::standby::run::Takeover;
use crate::runtime::task::Poll;
use crate::standby::codec::Codec;
use crate::standby::config::StandbyMode;
use crate::standby::decide::{Evidence, Observation, Verdict, WorkerAt};
use crate::standby::exchange::SnapshotExchange;
use std::rc::Rc;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

impl<T: crate::Data + Codec + Sync> Incarnation<T> {
    pub(super) fn poll_standby(&mut self, now: Nanos, budget: usize) -> Poll {
        let g = Arc::clone(&self.group);
        if g.done.load(Ordering::Acquire) || g.live.current() != self.backs {
            return self.over();
        }
        if g.live.failed() {
            return self.claim(now, None);
        }
        let pw = g.reader_workers[0].load(Ordering::Acquire);
        let shared = Arc::clone(&self.ctx.shared);
        let released = shared
            .released_at
            .get(pw)
            .map_or(0, |r| r.load(Ordering::Acquire));
        let o = Observation {
            now,
            beat: g.live.last_beat(),
            progress: g.progress_of(self.backs),
            long_step: released == u64::MAX || now.saturating_sub(released) <= g.timeout_ns,
        };
        let verdict = self.detector.observe(o, || {
            let Some(w) = shared.workers.get(pw) else {
                return (WorkerAt::Between { since: 0 }, None);
            };
            let polling = w.polling.load(Ordering::Acquire);
            let since = w.since.load(Ordering::Acquire);
            let at = if polling == 0 {
                WorkerAt::Between { since }
            } else if polling == g.primary_task.load(Ordering::Acquire) {
                WorkerAt::Primary { since }
            } else {
                WorkerAt::Other { since }
            };
            let tid = w.tid.load(Ordering::Acquire);
            (at, crate::sys::thread::sample(tid, now))
        });
        if let Verdict::Stalled(e) = verdict {
            let doing = Doing::name(g.doing.load(Ordering::Relaxed));
            return self.claim(now, Some((e, doing)));
        }
        let mut moved = false;
        if g.mode == StandbyMode::Hot && !g.stateless.load(Ordering::Acquire) {
            // Its computing is not the worker's own work (see `follow`).
            self.ctx.lowly.set(true);
            moved = self.follow(budget);
        } else if g.follows && !self.unfollowable && !g.stateless.load(Ordering::Acquire) {
            moved = self.follow_points();
        } else if self.attached || self.chain.is_some() {
            // Started hot before the operator was known to be stateless:
            // there is nothing to keep hot, and a cursor would hold the
            // queues back.
            self.detach();
            self.drop_chain();
        }
        if self.chain.is_none() || self.followed {
            // Warm (or not yet following): a replayed source that cannot
            // jump is kept near the newest point.
            if let Some(s) = &mut self.src {
                match s.keep_up(g.covered(0), &self.ctx) {
                    Ok(read) => moved |= read,
                    Err(why) => {
                        self.fail(format!(
                            "keeping the source up with the recovery points: {why}"
                        ));
                        return Poll::Progress;
                    }
                }
            }
        }
        if moved {
            Poll::Progress
        } else {
            Poll::Idle {
                wake_at: Some(now + (g.timeout_ns / 8).clamp(50_000, 1_000_000)),
            }
        }
    }

    /// A hot standby follows the log into its own state, up to what every
    /// consumer acknowledged (so that its state is never ahead of a
    /// replay's start).
    ///
    /// It computes only while its worker's own tasks rest (the last round
    /// of the worker's loop moved nothing else): on a worker the job
    /// saturates it costs the job nothing, falls behind, and is warm until
    /// the worker has time again ([`HotBackoff`]); on a worker the job
    /// leaves idle — where the group places it when there is one — it
    /// keeps up.
    fn follow(&mut self, budget: usize) -> bool {
        if self.ctx.background().others_busy() {
            // Still let go when behind: its cursor must not hold the
            // queues back.
            if self.chain.is_some() && self.behind() {
                self.let_go_hot();
            }
            return false;
        }
        if self.chain.is_none() && !self.start_hot() {
            return false;
        }
        let limit = self.group.acked_min_seq();
        let moved = matches!(self.process(budget as u64, None, limit), Ok(n) if n > 0);
        if self.behind() {
            self.let_go_hot();
            // (A replayed source's instance stays where it is: it keeps up
            // with the points from there.)
        }
        moved
    }

    /// Whether a hot standby is too far behind its primary to hold on.
    fn behind(&self) -> bool {
        // Half a queue behind would soon hold the primary back (the queue
        // cannot evict past this cursor): let go, and wait — warm — for a
        // newer point.
        self
            .group
            .queues
            .iter()
            .zip(&self.pos)
            .any(|(q, &p)| q.tail().saturating_sub(p) > q.config().slots / 2)
            // A replayed source has no queue: half a log behind the
            // newest point (the log keeps entries from there on).
            || self.src.is_some()
                && self.group.point_seq.load(Ordering::Acquire)
                    > self.seq + self.group.log.capacity() / 2
    }

    /// A warm standby follows the recovery points (see
    /// [`crate::state::delta`]): the newest point, if it is newer than the
    /// one its chain is at, brings the chain there — built from the
    /// point's state when the point is whole, brought forward by the
    /// point's delta when it is one over the point the chain is at. It
    /// tells the group where its copy is, so that the primary's next point
    /// is a delta over it. The state is read outside the group's lock.
    /// Whether it moved.
    fn follow_points(&mut self) -> bool {
        // A newer point published while one was read: the newest again.
        let mut moved = false;
        for _ in 0..3 {
            match self.follow_newest() {
                Some(m) => {
                    moved = m;
                    break;
                }
                None => continue,
            }
        }
        {
            let _g = self.group.lock();
            self.group.following_to.store(0, Ordering::Release);
        }
        moved
    }

    /// One try of [`follow_points`](Self::follow_points): `None` when a
    /// newer point was published while this one was read.
    fn follow_newest(&mut self) -> Option<bool> {
        let (p, x) = {
            let g = self.group.lock();
            if !g.ready || self.group.stateless.load(Ordering::Acquire) {
                return Some(false);
            }
            let (p, x) = self.group.latest_point(&g);
            if p.xseq == 0 || (self.followed && p.seq <= self.seq) {
                return Some(false);
            }
            let in_flight = self.group.base_in_flight.load(Ordering::Acquire);
            if self.followed && in_flight == self.seq {
                // The primary builds a delta over this copy's point: it
                // waits for that one.
                return Some(false);
            }
            self.group.following_to.store(p.seq, Ordering::Release);
            (p, x)
        };
        let delta = p.base != 0;
        if delta && !(self.followed && p.base == self.seq) {
            // A delta over a point this copy is not at (a copy dropped
            // since): the primary's next point is whole.
            self.drop_chain();
            return Some(false);
        }
        let state = match self.ctx.long(|| Group::point_state(&p, x.as_ref())) {
            Ok(Some(s)) => s,
            Ok(None) => return Some(false),
            Err(_) => return None,
        };
        if delta {
            let followed = self.follow_by(state);
            match followed {
                Ok(true) => {}
                Ok(false) => {
                    self.unfollowable = true;
                    self.drop_chain();
                    return Some(false);
                }
                Err(e) => {
                    // Not the primary's state any more: this standby
                    // fails (another is started, from a whole point).
                    self.drop_chain();
                    self.fail(format!("following recovery point {}: {e}", p.seq));
                    return Some(false);
                }
            }
        } else {
            self.drop_chain();
            self.build_chain(Some(state));
        }
        self.place(p.seq, p.pos, p.align, p.clock);
        self.followed = true;
        {
            let _g = self.group.lock();
            self.group.applied.store(p.seq, Ordering::Release);
            self.group.following_to.store(0, Ordering::Release);
        }
        self.group.followed.fetch_add(1, Ordering::Relaxed);
        if !delta {
            self.group.followed_whole.fetch_add(1, Ordering::Relaxed);
        }
        Some(true)
    }

    /// Brings the followed chain forward by a point's state (`Ok(false)`:
    /// an operator of it cannot follow).
    fn follow_by(&mut self, state: Vec<u8>) -> Result<bool, crate::checkpoint::CheckpointError> {
        let mut parts = crate::runtime::chain::frame::split(state, &self.group.chain)
            .map_err(crate::checkpoint::CheckpointError::ChainFrame)?;
        let chain = self.chain.as_mut().expect("a followed chain");
        let ctx = Rc::clone(&self.ctx);
        ctx.long(|| chain.follow_point(&mut parts))
    }

    /// The takeover of a standby whose chain followed the points: a point
    /// one delta ahead is applied, what the points left to install is
    /// installed, and the chain goes on from the point — nothing restored.
    /// `None`: the chain is not at a point it can start from; it is
    /// dropped and the takeover restores the newest point instead.
    fn take_over_followed(
        &mut self,
        epoch: u64,
        old_slot: (u64, usize),
        claimed: Nanos,
        p: &Point,
        x: Option<&Arc<SnapshotExchange>>,
    ) -> Option<Poll> {
        if p.seq != self.seq {
            if p.seq < self.seq || p.base != self.seq {
                self.drop_chain();
                return None;
            }
            let state = match self.ctx.long(|| Group::point_state(p, x)) {
                Ok(Some(s)) => s,
                _ => {
                    self.drop_chain();
                    return None;
                }
            };
            let followed = self.follow_by(state);
            if !matches!(followed, Ok(true)) {
                self.drop_chain();
                return None;
            }
            self.place(p.seq, p.pos.clone(), p.align.clone(), p.clock.clone());
        }
        self.group
            .doing
            .store(Doing::Restoring as u32, Ordering::Relaxed);
        if let Some(chain) = self.chain.as_mut() {
            let ctx = Rc::clone(&self.ctx);
            ctx.long(|| chain.install_followed());
        }
        // The chain is the primary's now, not a copy the next point
        // follows.
        self.followed = false;
        // The group's newest point may be a delta over this copy, of use to
        // no other standby: this new primary's first point (it follows no
        // standby yet) is whole. It is taken once the replay is done: no
        // standby started after this takeover could restore it sooner
        // (its own start takes longer), and under process isolation the
        // child archives it at once, milliseconds the replay would wait.
        // Should the new primary fail before that point is published, no
        // standby can take over (the claim says so and fails the attempt).
        self.point_after_replay = true;
        if !self.attach() {
            self.fail(format!(
                "taking over: the buffer queues no longer hold the recovery point {:?}",
                self.pos
            ));
            return Some(Poll::Progress);
        }
        self.learn_stateless();
        self.takeover_probe(TakeoverStage::Replaying);
        self.go_live(epoch, old_slot, claimed);
        Some(Poll::Progress)
    }

    /// A hot standby that fell behind lets go of its state and waits, warm,
    /// for a newer point — longer each time it falls behind again soon after
    /// starting (see [`HotBackoff`]): catching up means restoring the whole
    /// state, and doing that again and again would starve the primaries it
    /// shares cores with.
    fn let_go_hot(&mut self) {
        self.group.hot_fell_behind.fetch_add(1, Ordering::Relaxed);
        let now = self.ctx.clock.now();
        self.hot_after = Some(self.group.point_seq.load(Ordering::Acquire));
        self.hot_backoff.fell_behind(now, self.group.point_every);
        self.detach();
        self.drop_chain();
    }

    /// A hot standby gets its state: the newest recovery point's, if it is
    /// newer than the one it fell behind from, its backoff has passed, and
    /// the point is near enough the queues' ends to keep up. Whether the
    /// point will do is decided from its positions alone; its state is read
    /// (copied and verified, milliseconds for a large state) only then, and
    /// outside the group's lock, under which the primary publishes.
    fn start_hot(&mut self) -> bool {
        let now = self.ctx.clock.now();
        if !self.hot_backoff.may_start(now) {
            return false;
        }
        let (p, x) = {
            let g = self.group.lock();
            if !g.ready || self.group.stateless.load(Ordering::Acquire) {
                // The primary has not built its operator yet (so whether it
                // keeps state is not known), or it keeps none.
                return false;
            }
            self.group.latest_point(&g)
        };
        if self.hot_after.is_some_and(|a| p.seq <= a) {
            return false;
        }
        let near = self
            .group
            .queues
            .iter()
            .zip(&p.pos)
            .all(|(q, &at)| q.tail().saturating_sub(at) <= q.config().slots / 4);
        if !near {
            return false;
        }
        // A newer point published meanwhile: read again at a later poll.
        let Ok(state) = self.ctx.long(|| Group::point_state(&p, x.as_ref())) else {
            return false;
        };
        self.place(p.seq, p.pos, p.align, p.clock);
        if !self.attach() {
            return false;
        }
        self.build_chain(state);
        self.hot_backoff.started(self.ctx.clock.now());
        true
    }

    /// Takes over: claims the next epoch (fencing the primary), starts from
    /// the newest recovery point or its own hot state, and goes on as the
    /// primary. `evidence`: why the primary was found stalled (`None`: it
    /// reported a failure).
    fn claim(&mut self, now: Nanos, evidence: Option<(Evidence, &'static str)>) -> Poll {
        self.takeover_probe(TakeoverStage::Claiming);
        let Some((epoch, old_slot, point)) = self.take_role(now, evidence) else {
            return self.over();
        };
        // From the claim on, a failure of this incarnation is the group's
        // primary's (another takeover), not a standby's: the group has no
        // other primary.
        self.ctx.epoch.set(epoch);
        // Its work is the job's now.
        self.ctx.lowly.set(false);
        // Every other writer is fenced by the claim: the point read under the
        // lock is the exchange's newest publication.
        let (p, x) = point;
        if self.followed {
            if let Some(poll) = self.take_over_followed(epoch, old_slot, now, &p, x.as_ref()) {
                return poll;
            }
        }
        if p.base != 0 {
            // The newest point is a delta over a copy of the state only a
            // following standby held, and it is gone (failed with, or
            // before, its primary): no standby can take over from it.
            self.ctx.shared.fail(JobError::Restore {
                operator: self.group.name.to_string(),
                instance: self.group.instance,
                source: crate::checkpoint::CheckpointError::Delta(format!(
                    "taking over: the newest recovery point ({}) is a delta over the state a \
                     following standby held, and that standby is gone",
                    p.seq
                )),
            });
            return Poll::Progress;
        }
        // Copying and verifying a large state takes a while: not a stall.
        let read = self.ctx.long(|| Group::point_state(&p, x.as_ref()));
        let (p, state) = match read.map(|s| (p, s)) {
            Ok(p) => p,
            Err(why) => {
                self.fail(format!("taking over: {why}"));
                return Poll::Progress;
            }
        };
        // A hot state not older than the point is the quicker start.
        if self.chain.is_none() || self.seq < p.seq || !self.attached {
            if self.chain.is_some() {
                self.drop_chain();
            }
            self.detach();
            self.place(p.seq, p.pos, p.align, p.clock);
            self.group
                .doing
                .store(Doing::Restoring as u32, Ordering::Relaxed);
            self.build_chain(state);
            if !self.attach() {
                self.fail(format!(
                    "taking over: the buffer queues no longer hold the recovery point {:?}",
                    self.pos
                ));
                return Poll::Progress;
            }
        } else if let Some(chain) = self.chain.as_mut() {
            // The hot state goes on. Under process isolation the child may
            // not have answered all it computed as the standby: those
            // outputs reach the chain's end now, still muted — after
            // `go_live` they would be sent as the new primary's, before
            // the chunk its stream resumes at.
            chain.settle();
        }
        // The first primary's child may have died before its chain told.
        self.learn_stateless();
        self.takeover_probe(TakeoverStage::Replaying);
        self.go_live(epoch, old_slot, now);
        Poll::Progress
    }

    /// Consults the job's probes (fault injection) at `stage` of a
    /// takeover: a faulty standby fails here, before or during it.
    fn takeover_probe(&self, stage: TakeoverStage) {
        let Some(p) = &self.ctx.shared.probes else {
            return;
        };
        // Any operator of the chain may be the one whose standby fails.
        let action = self
            .group
            .chain_names
            .iter()
            .map(|name| p.takeover(name, self.group.instance, stage))
            .find(|a| !matches!(a, ProbeAction::Continue))
            .unwrap_or(ProbeAction::Continue);
        match action {
            ProbeAction::Panic(message) => panic!("{message}"),
            ProbeAction::Stall(d) => std::thread::sleep(d),
            ProbeAction::CutInput => self.fail(format!("taking over: input cut ({stage:?})")),
            _ => {}
        }
    }

    /// Under the group's lock: claims the epoch after `self.backs` (unless
    /// another standby replaced this one, or someone else claimed it),
    /// becomes the group's primary, opens the takeover's record, and reads
    /// the newest recovery point. Returns the epoch, the predecessor's
    /// reader slot, and the point.
    #[allow(clippy::type_complexity)]
    fn take_role(
        &mut self,
        now: Nanos,
        evidence: Option<(Evidence, &'static str)>,
    ) -> Option<(u64, (u64, usize), (Point, Option<Arc<SnapshotExchange>>))> {
        let group = Arc::clone(&self.group);
        let mut g = group.lock();
        if g.standby.map(|s| s.inc) != Some(self.inc) {
            return None;
        }
        let epoch = group.live.claim(self.backs, now).ok()?;
        // Pairs with the fence after a fenced primary's log append (and its
        // copying mark): from here on, what it did is in the log.
        fence(Ordering::SeqCst);
        let old = (g.primary, g.primary_slot);
        g.primary = self.inc;
        g.primary_epoch = epoch;
        g.primary_worker = self.ctx.worker();
        g.primary_slot = self.slot;
        g.standby = None;
        g.ready = false;
        // The next standby has no copy of the state yet: the new
        // primary's first point is whole.
        group.applied.store(0, Ordering::Release);
        group.following_to.store(0, Ordering::Release);
        group.base_in_flight.store(0, Ordering::Release);
        // Until it has caught up, the new primary may still repeat (and
        // acknowledge again) a checkpoint barrier its predecessor passed.
        group.replaying.store(true, Ordering::Release);
        group.standby_worker.store(NONE, Ordering::Release);
        group.reader_workers[0].store(self.ctx.worker(), Ordering::Release);
        group.reader_workers[1].store(NONE, Ordering::Release);
        group.primary_slot.store(self.slot, Ordering::Release);
        group.primary_task.store(self.ctx.key, Ordering::Release);
        let point = group.latest_point(&g);
        let fault = self.attribute(evidence.map(|e| e.0), now);
        let k = self.standby_log().open(Takeover {
            record: RecoveryRecord {
                kind: RecoveryKind::Takeover,
                // The operator of the chain (or its replayed source) that
                // failed; the chain's head when nothing says which.
                operator: fault.operator.unwrap_or_else(|| group.name.to_string()),
                instance: group.instance,
                cause: fault.cause,
                tuple_id: fault.tuple,
                fault_at_us: fault.at / 1000,
                detect_us: now.saturating_sub(fault.at) / 1000,
                reason: fault.reason,
                unprovoked: fault.reason.unprovoked(),
                evidence: evidence
                    .map(|(e, doing)| format!("{e}; the primary was {doing}"))
                    .or(fault.evidence),
                ..Default::default()
            },
            fault_at: fault.at,
            ..Default::default()
        });
        g.takeover = Some(k);
        self.takeover = Some(k);
        self.watch = Some((k, now));
        Some((epoch, old, point))
    }

    /// The new primary's state is in place: it unmutes, lets the consumers
    /// follow (its stream starts at `self.seq`), reclaims its fenced
    /// predecessor's cursor, records what the takeover restored and
    /// replays, and asks for a new standby.
    fn go_live(&mut self, epoch: u64, old: (u64, usize), claimed: Nanos) {
        let group = Arc::clone(&self.group);
        let shared = Arc::clone(&self.ctx.shared);
        self.ctx.muted.set(false);
        self.ctx.epoch.set(epoch);
        self.phase = Phase::Primary { epoch };
        // Its life as the primary starts now, after the restore: the
        // standby started next judges its silence from here, not from the
        // claim (whose beat is as old as the restore is long).
        let _ = group.live.beat(epoch, self.ctx.clock.now());
        {
            let mut g = group.lock();
            if g.primary_epoch == epoch {
                group.start_seq.store(self.seq, Ordering::Release);
                g.ready = true;
            }
        }
        if old.1 != self.slot {
            self.reclaim = Some(old);
            self.try_reclaim();
        }
        self.backlog = if self.src.is_some() {
            // A replayed source: what the log holds past the point.
            let mut b = self.pos.clone();
            let mut s = self.seq;
            while let Some(d) = group.log.get(s) {
                if let crate::standby::detlog::Det::Chunk { lane, n } = d {
                    if let Some(p) = b.get_mut(lane as usize) {
                        *p += n as u64;
                    }
                }
                s += 1;
            }
            b
        } else {
            group.queues.iter().map(|q| q.tail()).collect()
        };
        self.caught_up = false;
        // Inputs read again from the queues: from where the replay starts
        // to what they held at the takeover.
        let replayed: u64 = self
            .pos
            .iter()
            .zip(&self.backlog)
            .map(|(&p, &b)| b.saturating_sub(p))
            .sum();
        let restored = self.ctx.clock.now();
        if let Some(k) = self.takeover {
            if let Some(t) = self.standby_log().lock().get_mut(k) {
                t.record.restore_us = Some(restored.saturating_sub(claimed) / 1000);
                t.record.replayed_tuples = replayed;
            }
        }
        group.ensure_standby(&shared);
        for c in &group.consumers {
            shared.signals[c.worker].wake();
        }
    }

    /// The fault a takeover answers: the reported failure, the injected
    /// stall the silence overlaps, or none (unprovoked, with its evidence).
    fn attribute(&self, evidence: Option<Evidence>, now: Nanos) -> Attributed {
        let g = &self.group;
        let Some(e) = evidence else {
            let f = g
                .faults
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .fault
                .take()
                .unwrap_or(Fault {
                    at: now,
                    cause: "reported failure".into(),
                    tuple: None,
                    operator: None,
                    reason: RecoveryCause::Other,
                    evidence: None,
                });
            return Attributed {
                at: f.at,
                cause: f.cause,
                tuple: f.tuple,
                reason: f.reason,
                operator: f.operator,
                evidence: f.evidence,
            };
        };
        let beat = now.saturating_sub(e.silence_ns);
        // A stall noted in any operator of the chain.
        let stall = self
            .ctx
            .shared
            .take_stall(&g.members(), g.instance, beat, now);
        let name = stall.map_or(&g.name, |n| &self.ctx.shared.names[n.op]);
        let cause = format!("operator `{name}` instance {} stalled: {e}", g.instance);
        match stall {
            Some(n) => Attributed {
                at: beat.max(n.at),
                cause,
                tuple: Some(n.tuple),
                reason: RecoveryCause::Injected,
                operator: Some(name.to_string()),
                evidence: None,
            },
            None => Attributed {
                at: beat,
                cause,
                tuple: None,
                reason: RecoveryCause::Stalled,
                operator: None,
                evidence: None,
            },
        }
    }
}

struct Attributed {
    at: Nanos,
    cause: String,
    tuple: Option<crate::record::TupleId>,
    reason: RecoveryCause,
    /// The operator that failed or stalled, when known.
    operator: Option<String>,
    /// A child killed as stuck: what the liveness rule saw.
    evidence: Option<String>,
}

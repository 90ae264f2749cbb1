//! The chain hop around a [`KeyedProcess`]: owns the per-key state.
//!
//! Records reach an instance already partitioned by the hash of their key
//! (see `runtime::channel`), so every key lives in exactly one instance and
//! its state never crosses a core.

use crate::checkpoint::{CheckpointError, StateCapture};
use crate::operator::{Collector, KeyedProcess, Output};
use crate::record::Record;
use crate::runtime::graph::{BuildCx, Probe};
use crate::runtime::probe::run_probe;
use crate::runtime::task::{OpSlot, TaskCtx};
use crate::state::delta::CaptureFor;
use crate::state::disk::DiskOps;
use crate::state::{KeyedState, StateSnapshot};
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

/// How a keyed operator's state goes to and comes from a snapshot (the
/// [`StateSnapshot`] functions, captured where the types are known).
pub(crate) struct StateCodec<K, S> {
    pub(crate) capture_for: CaptureForFn<K, S>,
    pub(crate) restore_chain: RestoreChainFn<K, S>,
    pub(crate) restore_lazy: RestoreLazyFn<K, S>,
    pub(crate) follow: FollowFn<K, S>,
    pub(crate) open_disk: OpenDiskFn,
}

type OpenDiskFn = fn(&std::path::Path, usize) -> Result<Box<dyn std::any::Any>, CheckpointError>;

type RestoreChainFn<K, S> = fn(&[&[u8]], Option<u64>) -> Result<KeyedState<K, S>, CheckpointError>;
type RestoreLazyFn<K, S> = fn(
    &[Arc<crate::checkpoint::LazySnapshot>],
    Option<u64>,
) -> Result<KeyedState<K, S>, CheckpointError>;
type FollowFn<K, S> = fn(&mut KeyedState<K, S>, &[u8]) -> Result<(), CheckpointError>;
type CaptureForFn<K, S> =
    fn(&KeyedState<K, S>, CaptureFor) -> Result<StateCapture, CheckpointError>;

impl<K, S> StateCodec<K, S>
where
    KeyedState<K, S>: StateSnapshot,
{
    pub(crate) fn of() -> Self {
        StateCodec {
            capture_for: <KeyedState<K, S> as StateSnapshot>::capture_for,
            restore_chain: <KeyedState<K, S> as StateSnapshot>::restore_chain,
            restore_lazy: <KeyedState<K, S> as StateSnapshot>::restore_lazy,
            follow: <KeyedState<K, S> as StateSnapshot>::follow,
            open_disk: <KeyedState<K, S> as StateSnapshot>::open_disk,
        }
    }
}

pub(crate) struct KeyedOp<K, T, O, P: KeyedProcess<K, T, O>> {
    op: P,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    state: KeyedState<K, P::State>,
    /// The state on the disk backend, when the job chose it (`state` is
    /// then unused).
    disk: Option<Box<dyn DiskOps<K, P::State>>>,
    codec: StateCodec<K, P::State>,
    down: Box<dyn Collector<O>>,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    seen: u64,
    emitted: u64,
    finished: bool,
    name: Arc<str>,
    instance: usize,
    /// The state may still be reading its checkpoint lazily: a record's
    /// key is looked up there first.
    restoring: bool,
}

impl<K, T, O, P> KeyedOp<K, T, O, P>
where
    K: Hash + Eq + Clone + 'static,
    P: KeyedProcess<K, T, O>,
{
    /// Builds the hop; an instance restored from a checkpoint gets its
    /// state back (a failure is reported through the task).
    pub(crate) fn new(
        op: P,
        key: Arc<dyn Fn(&T) -> K + Send + Sync>,
        codec: StateCodec<K, P::State>,
        down: Box<dyn Collector<O>>,
        cx: BuildCx,
    ) -> Self {
        if let Some(place) = cx.ctx.shared.disk.clone() {
            return Self::on_disk(op, key, codec, down, cx, &place);
        }
        let mut state = KeyedState::default();
        let (me, of) = (cx.info.instance, cx.info.parallelism);
        let rescaled = cx.restore_parts(|links| {
            // An old instance's state: the keys this instance owns now.
            let old = (codec.restore_chain)(links, None)?;
            state.take_keys(old, |k| crate::runtime::channel::key_instance(k, of) == me);
            Ok(())
        });
        let finished = match rescaled {
            Some(finished) => finished,
            None => cx.restore_chain_lazily(|lazy, links, from| {
                state = if lazy.is_empty() {
                    (codec.restore_chain)(links, from)?
                } else {
                    (codec.restore_lazy)(lazy, from)?
                };
                Ok(())
            }),
        };
        state.index_archives();
        let state_lazy = state.is_lazy();
        if state_lazy {
            // The base is read in order between polls (and each record's
            // key ahead of that, in `collect`).
            let mut read = state.reader();
            let ctx = Rc::downgrade(&cx.ctx);
            let tick = ctx.clone();
            state.on_restore_progress(Box::new(move || {
                if let Some(c) = tick.upgrade() {
                    c.tick();
                }
            }));
            let (name, instance) = (cx.info.name.to_string(), cx.info.instance);
            cx.ctx
                .background()
                .push_restore(Box::new(move |n| match read(n) {
                    Ok(done) => done,
                    Err(source) => {
                        if let Some(ctx) = ctx.upgrade() {
                            // The checkpoint is damaged: every copy of
                            // this state (a standby's too) would read the
                            // same bytes. The attempt fails, and the next
                            // one restores an older checkpoint.
                            ctx.shared.fail(crate::error::JobError::Restore {
                                operator: name.clone(),
                                instance,
                                source,
                            });
                        }
                        true
                    }
                }));
        }
        KeyedOp {
            op,
            key,
            state,
            disk: None,
            codec,
            down,
            ctx: cx.ctx,
            slot: cx.slot,
            probe: cx.probe,
            seen: 0,
            emitted: 0,
            finished,
            name: cx.info.name,
            instance: cx.info.instance,
            restoring: state_lazy,
        }
    }
}

impl<K, T, O, P> KeyedOp<K, T, O, P>
where
    K: Hash + Eq + Clone + 'static,
    P: KeyedProcess<K, T, O>,
{
    /// The hop with its state on the disk backend: a fresh store, loaded
    /// from the checkpoint the instance restores (a failure fails the
    /// attempt, as a restore does).
    fn on_disk(
        op: P,
        key: Arc<dyn Fn(&T) -> K + Send + Sync>,
        codec: StateCodec<K, P::State>,
        down: Box<dyn Collector<O>>,
        cx: BuildCx,
        place: &crate::state::disk::DiskPlace,
    ) -> Self {
        let mut disk: Option<Box<dyn DiskOps<K, P::State>>> = None;
        let opened = (codec.open_disk)(&place.base, place.backend.cache_bytes).and_then(|any| {
            any.downcast::<Box<dyn DiskOps<K, P::State>>>()
                .map(|b| *b)
                .map_err(|_| CheckpointError::Delta("a disk store of another type".into()))
        });
        let rescaled = cx.restore.as_ref().is_some_and(|r| !r.parts.is_empty());
        let finished = match opened {
            // Refused before the job starts (`Supervisor::new`); never
            // silently empty.
            Ok(_) if rescaled => {
                cx.ctx.fail(crate::error::JobError::Restore {
                    operator: cx.info.name.to_string(),
                    instance: cx.info.instance,
                    source: CheckpointError::Delta(
                        "a keyed state on the disk backend restores only at the parallelism \
                         it was checkpointed at"
                            .into(),
                    ),
                });
                true
            }
            Ok(mut store) => {
                let finished = cx.restore_chain_lazily(|lazy, links, from| {
                    if !lazy.is_empty() {
                        // Files with key indexes are the in-memory
                        // backend's; the disk backend writes none.
                        return Err(CheckpointError::Delta(
                            "a checkpoint of the in-memory state backend restores only into it \
                             (run the job with StateBackend::Memory)"
                                .into(),
                        ));
                    }
                    store.restore(links, from)
                });
                disk = Some(store);
                finished
            }
            Err(source) => {
                cx.ctx.fail(crate::error::JobError::Restore {
                    operator: cx.info.name.to_string(),
                    instance: cx.info.instance,
                    source,
                });
                true
            }
        };
        KeyedOp {
            op,
            key,
            state: KeyedState::default(),
            disk,
            codec,
            down,
            ctx: cx.ctx,
            slot: cx.slot,
            probe: cx.probe,
            seen: 0,
            emitted: 0,
            finished,
            name: cx.info.name,
            instance: cx.info.instance,
            restoring: false,
        }
    }

    /// The lazily restored state could not read its checkpoint: the
    /// attempt fails with that error (the record is not processed) — the
    /// attempt, not only this task: a standby's copy would read the same
    /// damaged bytes.
    #[cold]
    fn fail_restore(&self, source: CheckpointError) {
        self.ctx.shared.fail(crate::error::JobError::Restore {
            operator: self.name.to_string(),
            instance: self.instance,
            source,
        });
    }
}

impl<K, T, O, P> Collector<T> for KeyedOp<K, T, O, P>
where
    K: Hash + Eq + Clone + 'static,
    P: KeyedProcess<K, T, O>,
{
    #[inline]
    fn collect(&mut self, rec: Record<T>) {
        self.seen += 1;
        let prev = self.ctx.enter(self.slot.op);
        if !run_probe(&mut self.probe, rec.id, &self.ctx, self.slot.op) {
            self.ctx.leave(prev);
            return;
        }
        let key = (self.key)(&rec.value);
        if let Some(disk) = &mut self.disk {
            match disk.state(&key) {
                Ok(state) => {
                    let mut out =
                        Output::new(&mut *self.down, &mut self.emitted, &*self.ctx, self.slot.op)
                            .with_envelope(&rec);
                    self.op.process(&key, state, rec, &mut out);
                }
                Err(e) => {
                    self.ctx.leave(prev);
                    self.fail_restore(e);
                    return;
                }
            }
            self.ctx.leave(prev);
            return;
        }
        if self.restoring {
            // Read lazily (one look at the state per record until then).
            self.restoring = self.state.is_lazy();
            // A key read from a cold file waits for the disk (milliseconds
            // each on a slow one, a chunk of records at a time): work, not
            // a stall, and the heartbeat beats after each.
            let state = &self.state;
            if let Err(e) = self.ctx.long(|| state.prefetch(&key)) {
                self.fail_restore(e);
                self.ctx.leave(prev);
                return;
            }
        }
        let mut state = self.state.get_or_default(&key);
        let mut out = Output::new(&mut *self.down, &mut self.emitted, &*self.ctx, self.slot.op)
            .with_envelope(&rec);
        self.op.process(&key, &mut state, rec, &mut out);
        self.ctx.leave(prev);
    }

    fn flush(&mut self) {
        self.slot.publish(self.seen, self.emitted);
        self.down.flush();
    }

    fn end(&mut self) {
        // No record is being processed in the end-of-stream hooks.
        self.ctx.record.set(None);
        if let Some(disk) = &mut self.disk {
            if !self.finished {
                let prev = self.ctx.enter(self.slot.op);
                let mut out =
                    Output::new(&mut *self.down, &mut self.emitted, &*self.ctx, self.slot.op);
                let (op, ctx) = (&mut self.op, &self.ctx);
                let ended = disk.for_each(&mut |k, s| {
                    op.on_end(k, s, &mut out);
                    ctx.tick();
                });
                self.ctx.leave(prev);
                if let Err(e) = ended {
                    self.fail_restore(e);
                    return;
                }
            }
            self.slot.publish(self.seen, self.emitted);
            self.down.end();
            return;
        }
        if let Err(e) = self.state.settle() {
            self.fail_restore(e);
            return;
        }
        if !self.finished {
            let prev = self.ctx.enter(self.slot.op);
            let mut out = Output::new(&mut *self.down, &mut self.emitted, &*self.ctx, self.slot.op);
            let (op, ctx) = (&mut self.op, &self.ctx);
            self.state.for_each_mut(|k, s| {
                op.on_end(k, s, &mut out);
                // Ending many keys takes a while: each is progress.
                ctx.tick();
            });
            self.ctx.leave(prev);
        }
        self.slot.publish(self.seen, self.emitted);
        self.down.end();
    }

    fn watermark(&mut self, wm: u64) {
        self.slot.watermark(wm);
        self.down.watermark(wm);
    }

    fn idle(&mut self) {
        self.down.idle();
    }

    fn open_chunk(&mut self, id: crate::operator::ChunkId) {
        self.down.open_chunk(id);
    }

    fn close_chunk(&mut self) {
        self.down.close_chunk();
    }

    fn snapshot_chain(
        &mut self,
        parts: &mut crate::operator::ChainParts,
    ) -> Result<(), CheckpointError> {
        let how = self.ctx.point_capture.get();
        let capture = match &mut self.disk {
            Some(disk) => disk.capture_for(how)?,
            None => (self.codec.capture_for)(&self.state, how)?,
        };
        parts.push((self.slot.op, Some(capture)));
        self.down.snapshot_chain(parts)
    }

    fn follow_point(
        &mut self,
        parts: &mut crate::operator::FollowParts,
    ) -> Result<bool, CheckpointError> {
        if let Some(payload) = parts.remove(&self.slot.op) {
            (self.codec.follow)(&mut self.state, &payload)?;
        }
        self.down.follow_point(parts)
    }

    fn install_followed(&mut self) {
        self.down.install_followed();
    }

    fn barrier(&mut self, id: u64) {
        // The synchronous part of the checkpoint: freezing the state (it
        // notes the key count and an epoch); this worker archives the
        // frozen view between its polls and acknowledges then
        // (`runtime::background`), the snapshot I/O thread writes it.
        let (codec, state, disk) = (&self.codec, &self.state, &mut self.disk);
        let how = self.ctx.capture_for(id);
        let capture = || match disk {
            Some(d) => d.capture_for(how).map(Some),
            None => (codec.capture_for)(state, how).map(Some),
        };
        super::pass_barrier(&self.ctx, self.slot.op, id, capture, &mut *self.down);
    }
}
